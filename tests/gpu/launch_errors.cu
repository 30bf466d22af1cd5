// Run by scripts/gpu-check.sh, original and transformed (linked with the runtime): launches
// the original refuses must fail through cupreempt::launch with the same error (the script
// compares the two outputs), and a good launch after them must work.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(int* out, int value) { out[blockIdx.x * blockDim.x + threadIdx.x] = value; }

int main() {
  int* out;
  cudaMalloc(&out, 4096 * sizeof(int));
  int failures = 0;
  fill<<<4, 2048>>>(out, 1);  // more threads per block than any GPU allows
  cudaError_t e = cudaGetLastError();
  std::printf("block of 2048: %s\n", cudaGetErrorName(e));
  failures += e == cudaSuccess;
  fill<<<dim3(1, 70000), 32>>>(out, 1);  // grid.y above 65535
  e = cudaGetLastError();
  std::printf("grid.y of 70000: %s\n", cudaGetErrorName(e));
  failures += e == cudaSuccess;
  fill<<<16, 256>>>(out, 7);
  e = cudaGetLastError();
  failures += e != cudaSuccess;
  int host[4096];
  cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  for (int v : host) failures += v != 7;
  std::printf("good launch: %s, %s\n", cudaGetErrorName(e), failures ? "FAIL" : "ok");
  return failures != 0;
}
