// Probe: what GPU threads pay to read and write host-mapped pinned memory, and what a
// system-scope fence costs. Backs the choice of how a parked tail block learns of a resume
// (docs/runtime.md, "Stream order and hardware queues").
//   nvcc -arch=sm_90 -O2 -o probe scripts/probes/host_memory.cu && ./probe
#include <cstdio>
#include <cuda_runtime.h>

__device__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread: n volatile reads of a host word, each timed.
__global__ void reads(volatile unsigned* host, unsigned long long* ns, int n) {
  unsigned sum = 0;
  for (int i = 0; i < n; ++i) {
    unsigned long long t0 = now();
    sum += host[i & 7];
    unsigned long long t1 = now();
    ns[i] = t1 - t0 + (sum & 0);
  }
  if (sum == 0xdeadbeef) ns[0] = 0;
}

// One thread: n stores to a host word, optionally each followed by a system fence.
__global__ void writes(volatile unsigned* host, unsigned long long* ns, int n, int fence) {
  unsigned long long t0 = now();
  for (int i = 0; i < n; ++i) {
    host[i & 7] = i;
    if (fence) __threadfence_system();
  }
  ns[0] = now() - t0;
}

// Same with device memory, for comparison.
__global__ void dev_reads(volatile unsigned* d, unsigned long long* ns, int n) {
  unsigned sum = 0;
  for (int i = 0; i < n; ++i) {
    unsigned long long t0 = now();
    sum += d[i & 7];
    ns[i] = now() - t0 + (sum & 0);
  }
}

static void report(const char* what, unsigned long long* v, int n) {
  // median and max by partial sort
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (v[j] < v[i]) { auto t = v[i]; v[i] = v[j]; v[j] = t; }
  std::printf("%-40s median %8.2f us  p90 %8.2f us  max %8.2f us\n", what, v[n / 2] / 1e3,
              v[n * 9 / 10] / 1e3, v[n - 1] / 1e3);
}

int main() {
  const int n = 64;
  unsigned* host = nullptr;
  cudaHostAlloc((void**)&host, 4096, cudaHostAllocMapped);
  unsigned* hdev = nullptr;
  cudaHostGetDevicePointer((void**)&hdev, host, 0);
  unsigned* dmem = nullptr;
  cudaMalloc(&dmem, 4096);
  unsigned long long *ns = nullptr, hns[n];
  cudaMalloc(&ns, n * sizeof(unsigned long long));
  for (int round = 0; round < 2; ++round) {
    reads<<<1, 1>>>(hdev, ns, n);
    cudaMemcpy(hns, ns, sizeof hns, cudaMemcpyDeviceToHost);
    if (round) report("host-mapped read (volatile)", hns, n);
    dev_reads<<<1, 1>>>(dmem, ns, n);
    cudaMemcpy(hns, ns, sizeof hns, cudaMemcpyDeviceToHost);
    if (round) report("device read (volatile)", hns, n);
    for (int fence = 0; fence < 2; ++fence) {
      writes<<<1, 1>>>(hdev, ns, 1000, fence);
      cudaMemcpy(hns, ns, 8, cudaMemcpyDeviceToHost);
      if (round)
        std::printf("%-40s %8.3f us per store\n",
                    fence ? "host store + __threadfence_system" : "host store", hns[0] / 1e6);
      writes<<<1, 1>>>(dmem, ns, 1000, fence);
      cudaMemcpy(hns, ns, 8, cudaMemcpyDeviceToHost);
      if (round)
        std::printf("%-40s %8.3f us per store\n",
                    fence ? "device store + __threadfence_system" : "device store",
                    hns[0] / 1e6);
    }
  }
  std::printf("error: %s\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
