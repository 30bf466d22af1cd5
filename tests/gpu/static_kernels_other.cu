// The other file of static_kernels.cu: its own `static` `fill` and anonymous-namespace `mark`,
// of the same names and signatures, computing something else.
#include <cuda_runtime.h>

static __global__ void fill(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 2 * i;
}

namespace {
__global__ void mark(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] -= 3;
}
}  // namespace

void run_other(int* p, int n) {
  fill<<<(n + 255) / 256, 256>>>(p, n);
  mark<<<(n + 255) / 256, 256>>>(p, n);
}
