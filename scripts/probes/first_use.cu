// Probe: what a transformed translation unit costs a program's first launch, apart from the
// runtime. The kernel is shaped like the dot products and reductions that many programs time
// on their first launch (a grid-stride loop, a shared-memory tree reduction with barriers).
// main() makes its context (cudaFree(0)), allocates and clears its inputs, then times the first
// launch and the second with events (as such programs do) and with the host clock, and prints
// both; for the first launch also the host time from the context's creation to its end (what
// a program that starts its clock at cudaSetDevice reports, as the CUDA samples' template does).
// Built by scripts/probes/first_use.sh in several forms:
//   plain            this file as it is
//   plain+2          with -DCOPIES=2: two more kernels of the same code that are never launched
//                    (as many kernels as a transformed unit has, none of the wrappers' code)
//   direct           transformed, with -DDIRECT: the original kernel launched with
//                    cudaLaunchKernel (not rewritten), so no runtime is involved: only the
//                    module's contents differ from `plain`
//   transformed      transformed, launched through the runtime as a transformed program is
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <cuda_runtime.h>

#ifndef COPIES
#define COPIES 0
#endif

__global__ void dot(const float* a, const float* b, float* out, int n) {
  __shared__ float partial[256];
  float sum = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    sum += a[i] * b[i];
  partial[threadIdx.x] = sum;
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    __syncthreads();
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// The same code, never launched (plain+2 only): one template, two instances, so that the
// module has as many kernels as a transformed unit. Not transformed (`direct` and
// `transformed` are built without COPIES).
#if COPIES > 0
#pragma cupreempt skip
template <int Copy>
__global__ void dot_copy(const float* a, const float* b, float* out, int n) {
  __shared__ float partial[256];
  float sum = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    sum += a[i] * b[i];
  partial[threadIdx.x] = sum;
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    __syncthreads();
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
template __global__ void dot_copy<1>(const float*, const float*, float*, int);
template __global__ void dot_copy<2>(const float*, const float*, float*, int);
#endif

static double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

int main() {
  const int n = 1 << 20, blocks = 128, threads = 256;
  float *a, *b, *out;
  if (cudaFree(0) != cudaSuccess) return 1;
  const double made = now_us();
  if (cudaMalloc(&a, n * sizeof(float)) != cudaSuccess) return 1;
  cudaMalloc(&b, n * sizeof(float));
  cudaMalloc(&out, blocks * sizeof(float));
  cudaMemset(a, 0, n * sizeof(float));
  cudaMemset(b, 0, n * sizeof(float));
  cudaEvent_t start, end;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  cudaDeviceSynchronize();
  // PROBE_PREPARE_MS: host work before the first launch (a program preparing its inputs).
  if (const char* ms = std::getenv("PROBE_PREPARE_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
  for (int launch = 1; launch <= 2; ++launch) {
    const double t0 = now_us();
    cudaEventRecord(start);
#ifdef DIRECT
    int nn = n;
    void* args[] = {&a, &b, &out, &nn};
    cudaLaunchKernel((const void*)dot, dim3(blocks), dim3(threads), args, 0, 0);
#else
    dot<<<blocks, threads>>>(a, b, out, n);
#endif
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    const double host = now_us() - t0;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, end);
    std::printf("launch %d event_us %.1f host_us %.1f from_context_us %.1f\n", launch,
                ms * 1000.0f, host, now_us() - made);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
