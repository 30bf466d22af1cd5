// Probe: a kernel with its own __launch_bounds__(1024, 1) whose time is set by how many of its
// warps an SM holds (each thread follows a chain of dependent loads, so latency hides only
// behind other warps). As written it needs few registers and two 1,024-thread blocks fit on an
// SM; its plain persistent wrapper needs a few more than 32, and one. scripts/probes/own_bounds.sh
// times it as written, transformed with the capped wrapper (raised bounds, the default), and
// transformed with the plain one (CUPREEMPT_NO_R32=1). Prints the median of 15 timed launches
// and a checksum, which must agree across the three.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>
#include <cuda_runtime.h>

__global__ void __launch_bounds__(1024, 1)
    chase(const unsigned* next, unsigned* out, unsigned n, int steps) {
  __shared__ unsigned seen[1024];
  unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) % n;
  for (int s = 0; s < steps; ++s) i = next[i];
  seen[threadIdx.x] = i;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = seen[threadIdx.x] ^ seen[(threadIdx.x + 1) % blockDim.x];
}

int main() {
  const unsigned n = 1u << 24;
  const int steps = 64, blocks = 2640, threads = 1024, runs = 15;
  std::vector<unsigned> next(n);
  std::iota(next.begin(), next.end(), 0u);
  std::shuffle(next.begin(), next.end(), std::mt19937(5));
  unsigned *dnext, *dout;
  cudaMalloc(&dnext, n * sizeof(unsigned));
  cudaMalloc(&dout, (size_t)blocks * threads * sizeof(unsigned));
  cudaMemcpy(dnext, next.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  chase<<<blocks, threads>>>(dnext, dout, n, steps);  // first launch: setup, module load
  cudaDeviceSynchronize();
  std::vector<float> ms;
  for (int r = 0; r < runs; ++r) {
    cudaEventRecord(a);
    chase<<<blocks, threads>>>(dnext, dout, n, steps);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  std::vector<unsigned> out((size_t)blocks * threads);
  cudaMemcpy(out.data(), dout, out.size() * sizeof(unsigned), cudaMemcpyDeviceToHost);
  unsigned long long sum = 0;
  for (unsigned v : out) sum = sum * 1000003ull + v;
  std::sort(ms.begin(), ms.end());
  printf("median_ms %.4f\nchecksum %016llx\n%s\n", ms[runs / 2], sum,
         cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
