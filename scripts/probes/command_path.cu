// Probe: how long a command written on a high-priority stream takes to reach the blocks of a
// kernel that fills the GPU, in the runtime's shape but without cupreempt. The benchmark's
// preemption latency (docs/bench/README.md) runs from an event on the control stream before
// the command to the last block's decision to yield; with chunks of 5 µs its median is still
// 12-28 µs. This splits off the command's trip: a kernel of 8 blocks of 256 threads per SM
// whose thread 0 looks at a device word every LOOK_NS ns (0: without a pause) and stamps
// %globaltimer when it changes; an event, then cuStreamWriteValue32 on a stream of the
// greatest priority. The event's time on the GPU clock comes from a stamp kernel and an event
// recorded before the kernel (the runtime's clock, runtime/src/rt/clock.rs): stamp plus the
// events' elapsed time.
//
// Usage: command_path LOOK_NS [RUNS]   Prints, over RUNS runs (default 30), the medians and the
// largest of: the first block to see the command, the median block, the last block (µs after
// the event).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe.cuh"

__global__ void stamp(unsigned long long* out) { *out = now_ns(); }

__global__ void victim(const volatile unsigned* cmd, unsigned long long look_ns,
                       unsigned long long* seen) {
  if (threadIdx.x == 0) {
    for (;;) {
      if (*cmd) {
        seen[blockIdx.x] = now_ns();
        break;
      }
      const unsigned long long t0 = now_ns();
      while (now_ns() - t0 < look_ns) {
      }
    }
  }
  __syncthreads();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: command_path LOOK_NS [RUNS]\n");
    return 2;
  }
  const unsigned long long look_ns = strtoull(argv[1], nullptr, 10);
  const int runs = argc > 2 ? atoi(argv[2]) : 30;
  CHECK(cudaSetDevice(0));
  int sms = 0, least = 0, greatest = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t work, control;
  CHECK(cudaStreamCreateWithPriority(&work, cudaStreamNonBlocking, least));
  CHECK(cudaStreamCreateWithPriority(&control, cudaStreamNonBlocking, greatest));
  const unsigned grid = 8 * (unsigned)sms;
  unsigned* cmd;
  unsigned long long *seen, *tie;
  CHECK(cudaMalloc(&cmd, sizeof(unsigned)));
  CHECK(cudaMalloc(&seen, grid * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&tie, sizeof(unsigned long long)));
  cudaEvent_t before, request;
  CHECK(cudaEventCreate(&before));
  CHECK(cudaEventCreate(&request));
  std::vector<double> first, mid, last;
  std::vector<unsigned long long> h(grid);
  for (int r = 0; r < runs; ++r) {
    // The clock: a stamp and an event on the control stream while the GPU is idle.
    stamp<<<1, 1, 0, control>>>(tie);
    CHECK(cudaEventRecord(before, control));
    CHECK(cudaStreamSynchronize(control));
    unsigned long long t0 = 0;
    CHECK(cudaMemcpy(&t0, tie, sizeof t0, cudaMemcpyDeviceToHost));
    CHECK(cudaMemsetAsync(cmd, 0, sizeof(unsigned), work));
    CHECK(cudaMemsetAsync(seen, 0, grid * sizeof(unsigned long long), work));
    victim<<<grid, 256, 0, work>>>(cmd, look_ns, seen);
    CHECK(cudaStreamSynchronize(control));
    // Every block resident and looking (8 per SM fit at once), at a random phase of its pause.
    const unsigned long long wait_us = 300 + (unsigned long long)(rand() % 200);
    const auto until = clock();
    while ((double)(clock() - until) / CLOCKS_PER_SEC * 1e6 < (double)wait_us) {
    }
    CHECK(cudaEventRecord(request, control));
    CU_CHECK(cuStreamWriteValue32((CUstream)control, (CUdeviceptr)cmd, 1, 0));
    CHECK(cudaStreamSynchronize(work));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, before, request));
    const double at = (double)t0 + (double)ms * 1e6;
    CHECK(cudaMemcpy(h.data(), seen, grid * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::vector<double> d;
    for (unsigned long long s : h)
      if (s) d.push_back(((double)s - at) / 1e3);
    if (d.size() != grid) {
      fprintf(stderr, "run %d: %zu of %u blocks saw the command\n", r, d.size(), grid);
      return 1;
    }
    std::sort(d.begin(), d.end());
    first.push_back(d.front());
    mid.push_back(d[d.size() / 2]);
    last.push_back(d.back());
  }
  printf("look every %llu ns, %u blocks, %d runs: first block %.1f us (largest %.1f), median block "
         "%.1f (%.1f), last block %.1f (%.1f) after the request's event\n",
         look_ns, grid, runs, median(first), *std::max_element(first.begin(), first.end()),
         median(mid), *std::max_element(mid.begin(), mid.end()), median(last),
         *std::max_element(last.begin(), last.end()));
  return 0;
}
