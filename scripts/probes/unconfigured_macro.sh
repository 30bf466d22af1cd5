#!/usr/bin/env bash
# Probe (GPU machine, nvcc on PATH): a kernel judged without a macro that an included header
# defines only under a configuration macro (CP203, docs/transformation.md, "Configuration
# macros"). A header whose `__syncthreads` logs the first blocks' barriers with their block
# index under TRACE_BARRIERS (as CUTLASS's synclog does under CUTLASS_ENABLE_SYNCLOG), and a
# kernel that reverses each block's 256 floats through shared memory. Built as written and as
# `cupreempt transform` writes it (linked with the runtime), each without and with
# -DTRACE_BARRIERS; every launch preemptible and the runtime preempting them at random
# (CUPREEMPT_CHAOS). Each build prints a hash of its output and its trace lines; the
# transformed builds must print what the originals print.
# Usage: scripts/probes/unconfigured_macro.sh CUPREEMPT_BINARY RUNTIME_LIB_DIR
set -euo pipefail
cli=$(realpath "$1")
lib=$(realpath "$2")
work=$(mktemp -d)
cd "$work"
cat > trace.h <<'H'
#pragma once
#include <cstdio>
namespace trace {
__device__ inline void barrier(int line) {
  if (threadIdx.x == 0 && blockIdx.x < 3) printf("block %u at line %d\n", blockIdx.x, line);
}
}  // namespace trace
#if defined(TRACE_BARRIERS)
#undef __syncthreads
#define __syncthreads() do { \
  trace::barrier(__LINE__); \
  __syncthreads(); \
} while (0)
#endif
H
cat > reverse.cu <<'C'
#include <cstdio>
#include <cstring>
#include <vector>
#include "trace.h"
__global__ void reverse(float* x) {
  __shared__ float s[256];
  s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x] * 2.0f + (float)blockIdx.x;
  __syncthreads();
  x[blockIdx.x * 256 + threadIdx.x] = s[255 - threadIdx.x];
}
int main() {
  const int blocks = 1 << 16, n = blocks * 256;
  std::vector<float> h(n);
  unsigned r = 12345;
  for (auto& v : h) r = r * 1664525u + 1013904223u, v = (float)(r >> 8) / 16777216.0f;
  float* d;
  cudaMalloc(&d, n * sizeof(float));
  cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  for (int rep = 0; rep < 20; ++rep) reverse<<<blocks, 256>>>(d);
  cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  if (cudaGetLastError() != cudaSuccess) return 1;
  unsigned long long hash = 1469598103934665603ull;
  for (float v : h) {
    unsigned w;
    std::memcpy(&w, &v, sizeof w);
    hash = (hash ^ w) * 1099511628211ull;
  }
  std::printf("hash %016llx\n", hash);
  return 0;
}
C
"$cli" transform --line-directives --out-dir out . 2> transform.log
"$cli" headers --out hdr > /dev/null
flags="-arch=sm_90 -std=c++17 -O3"
for trace in 0 1; do
  d=""; [ "$trace" = 1 ] && d="-DTRACE_BARRIERS"
  nvcc $flags $d reverse.cu -o orig$trace
  nvcc $flags $d -I hdr out/reverse.cu -o tr$trace -L"$lib" -lcupreempt_runtime -Xlinker -rpath="$lib"
done
status=0
for trace in 0 1; do
  ./orig$trace | sort > orig$trace.out
  CUPREEMPT_PREEMPTIBLE=1 CUPREEMPT_SHORT_US=0 CUPREEMPT_SETUP=wait CUPREEMPT_CHAOS=7,20 \
    CUPREEMPT_VERBOSE=1 ./tr$trace 2> tr$trace.err | sort > tr$trace.out
  launched=$(grep -c 'launching the original kernel' tr$trace.err || true)
  if cmp -s orig$trace.out tr$trace.out; then same=identical; else same=DIFFERENT; status=1; fi
  echo "TRACE_BARRIERS=$trace: output $same ($(grep hash orig$trace.out)), trace lines" \
    "$(grep -c block orig$trace.out || true) / $(grep -c block tr$trace.out || true)," \
    "launches run as written by the transformed build: $launched of 20"
done
exit $status
