// Predicated kernels that call synchronizing helpers of a header after a thread-dependent
// return (tests/gpu/header_sync_helpers.cuh): each call goes to the helper's live copy, which
// the header's transform makes, so that returned threads pass the helpers' barriers. gpu-check
// builds it through the compiler launcher (which transforms the header with the unit), runs
// every launch preemptible, then under chaos mode. Exit status 0 when every element of every
// launch matches the host's reference.
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include "header_sync_helpers.cuh"

constexpr int kBlock = 128;

__global__ void neighbours(const int* in, int* out, int n) {
  __shared__ int row[kBlock];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  stage_row(row, in, i);
  out[i] = row[threadIdx.x] + ((i ^ 1) < n ? row[threadIdx.x ^ 1] : 0);
}

__global__ void totals(const int* in, int* out, int n) {
  __shared__ int scratch[kBlock];
  const int live = min((int)blockDim.x, n - (int)(blockIdx.x * blockDim.x));
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int total = block_total<kBlock>(scratch, in[i], live);
  out[i] = total - in[i];
}

__global__ void origins(int* out, int n) {
  __shared__ int slot;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int origin = block_origin(&slot);
  out[i] = origin + (int)threadIdx.x;
}

int main() {
  const int n = 1'500'000 - 37;  // a partial last block
  const int blocks = (n + kBlock - 1) / kBlock;
  std::vector<int> in(n), out(n), want(n);
  unsigned x = 12345;
  for (int& v : in) {
    x = x * 1664525u + 1013904223u;
    v = (int)(x >> 20) - 2048;
  }
  int *d_in, *d_out;
  cudaMalloc(&d_in, n * sizeof(int));
  cudaMalloc(&d_out, n * sizeof(int));
  cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice);
  long wrong = 0;
  int launches = 0;
  for (int round = 0; round < 4; ++round) {
    for (int which = 0; which < 3; ++which) {
      cudaMemset(d_out, 0xCD, n * sizeof(int));
      if (which == 0) neighbours<<<blocks, kBlock>>>(d_in, d_out, n);
      if (which == 1) totals<<<blocks, kBlock>>>(d_in, d_out, n);
      if (which == 2) origins<<<blocks, kBlock>>>(d_out, n);
      ++launches;
      if (cudaDeviceSynchronize() != cudaSuccess) {
        std::printf("header_sync_helpers: launch failed: %s\n",
                    cudaGetErrorString(cudaGetLastError()));
        return 1;
      }
      cudaMemcpy(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost);
      for (int b = 0; b < blocks; ++b) {
        const int first = b * kBlock, last = std::min(n, first + kBlock);
        long sum = 0;
        for (int i = first; i < last; ++i) sum += in[i];
        for (int i = first; i < last; ++i) {
          if (which == 0) want[i] = in[i] + ((i ^ 1) < n ? in[i ^ 1] : 0);
          if (which == 1) want[i] = (int)(sum - in[i]);
          if (which == 2) want[i] = b * 3 + (i - first);
        }
      }
      for (int i = 0; i < n; ++i) wrong += out[i] != want[i];
    }
  }
  std::printf("header_sync_helpers: %d launches, %ld wrong\n", launches, wrong);
  cudaFree(d_in);
  cudaFree(d_out);
  return wrong == 0 ? 0 : 1;
}
