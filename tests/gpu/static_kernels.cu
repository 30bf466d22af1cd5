// Two files, each with a `static` kernel named `fill` of one signature and a kernel in an
// anonymous namespace named `mark` (static_kernels_other.cu has the others): every launch must
// run its own file's kernel, also when each file's wrappers are in a module of their own
// (the compiler launcher's split units: the runtime finds a wrapper by its original's name,
// which nvcc changes for kernels of internal linkage between two compiles of a file).
// gpu-check builds it through the launcher, with and without -rdc=true, and runs it with every
// launch preemptible. Exit status 0 when every element is what its own file wrote.
#include <cstdio>
#include <cuda_runtime.h>

static __global__ void fill(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 1000 + i;
}

namespace {
__global__ void mark(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 7;
}
}  // namespace

void run_other(int* p, int n);  // static_kernels_other.cu

int main() {
  const int n = 1 << 16;
  int *a, *b;
  cudaMalloc(&a, n * sizeof(int));
  cudaMalloc(&b, n * sizeof(int));
  fill<<<(n + 255) / 256, 256>>>(a, n);
  mark<<<(n + 255) / 256, 256>>>(a, n);
  run_other(b, n);
  static int ha[1 << 16], hb[1 << 16];
  cudaMemcpy(ha, a, n * sizeof(int), cudaMemcpyDeviceToHost);
  cudaMemcpy(hb, b, n * sizeof(int), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    bad += ha[i] != 1000 + i + 7;
    bad += hb[i] != 2 * i - 3;
  }
  std::printf("static_kernels: %s, %d wrong elements\n", cudaGetErrorString(cudaGetLastError()), bad);
  return bad == 0 ? 0 : 1;
}
