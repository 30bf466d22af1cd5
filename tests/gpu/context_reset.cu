// A program that resets its device between two phases of launches (cudaDeviceReset, as test
// programs and tools that run several cases in one process do): the second phase runs in a new
// primary context, whose functions, streams and memory are all new, though the context's
// address may be the old one. Transformed, every launch of both phases must compute what the
// original computes; a launch site that kept the first context's functions, or a runtime that
// kept the first context's control blocks, fails or writes into the second phase's buffers.
// scripts/gpu-check.sh runs it as written and transformed, with every launch preemptible, and
// compares the two outputs. Random inputs; the output is poisoned before each launch.
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void shifted_square(const int* x, int* y, int shift, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * x[i] + shift;
}

// One phase: `rounds` launches of `blocks` blocks (many waves), each checked on the host.
static long phase(int seed, int rounds, int blocks) {
  const int n = blocks * 128;
  std::vector<int> x(n), y(n);
  srand(seed);
  for (auto& v : x) v = rand() % 46341;
  int *dx = nullptr, *dy = nullptr;
  if (cudaMalloc(&dx, n * sizeof(int)) || cudaMalloc(&dy, n * sizeof(int))) return -1;
  cudaMemcpy(dx, x.data(), n * sizeof(int), cudaMemcpyHostToDevice);
  long wrong = 0;
  for (int r = 0; r < rounds; ++r) {
    cudaMemset(dy, 0xff, n * sizeof(int));
    shifted_square<<<blocks, 128>>>(dx, dy, r, n);
    cudaMemcpy(y.data(), dy, n * sizeof(int), cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) wrong += y[i] != x[i] * x[i] + r;
  }
  cudaFree(dx);
  cudaFree(dy);
  return wrong;
}

int main() {
  long wrong[3];
  wrong[0] = phase(7, 30, 4096);
  cudaError_t e0 = cudaDeviceReset();
  wrong[1] = phase(8, 30, 4096);
  cudaError_t e1 = cudaDeviceReset();
  wrong[2] = phase(9, 30, 2048);
  cudaError_t e2 = cudaDeviceSynchronize();
  printf("context_reset: 3 phases of 30 launches, %ld / %ld / %ld wrong; %s, %s, %s\n", wrong[0],
         wrong[1], wrong[2], cudaGetErrorString(e0), cudaGetErrorString(e1),
         cudaGetErrorString(e2));
  return wrong[0] || wrong[1] || wrong[2] || e0 || e1 || e2 ? 1 : 0;
}
