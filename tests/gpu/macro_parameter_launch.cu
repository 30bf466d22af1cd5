// Launches through a macro whose kernel is one of its parameters, in the shape of NVIDIA Warp's
// `wp_launch_device(context, kernel, dim, args)`: the kernel and its parenthesized arguments
// come from each use. The launches go through `cupreempt::launch_any`: built through the
// compiler launcher, which splits the unit, the runtime finds each wrapper by the kernel's name;
// through `cupreempt transform`, by the kernel's address, which each transformed kernel
// registers (docs/transformation.md, "Launches in macro bodies"). The program checks every output against
// the host's computation over many launches (scripts/gpu-check.sh runs it with every launch
// preemptible and under chaos mode). Every value is a float that holds its result exactly
// (integers and halves below 2^24), so the device's fused multiply-add and the host's separate
// steps agree bit for bit (doubling too). Prints `macro_parameter_launch: N launches, M wrong`.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define LAUNCH_DEVICE(kernel, dim, args)                     \
  {                                                          \
    const int threads = 256, blocks = (dim + threads - 1) / threads; \
    kernel<<<blocks, threads, 0, 0>>> args;                  \
  }

__global__ void saxpy(const float* x, float* y, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i] + (float)(blockIdx.x % 3);
}

__global__ void keys(const float* y, unsigned* k, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) k[i] = (unsigned)(y[i] * 8.0f) ^ (blockIdx.x * 2654435761u);
}

// A template's instance launched by a launch site of its own (which names its launch types and
// so registers it) and through the macro.
template <class T>
__global__ void twice(T* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * (T)2;
}

int main() {
  const int n = 1 << 20, launches = 40;
  std::vector<float> x(n), y(n);
  srand(2026);
  for (int i = 0; i < n; ++i) x[i] = (float)(rand() % 1000);
  float *dx, *dy;
  unsigned* dk;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMalloc(&dk, n * sizeof(unsigned));
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  std::vector<float> got(n);
  std::vector<unsigned> k(n);
  long wrong = 0;
  for (int l = 0; l < launches; ++l) {
    const float a = 0.5f + (float)l;
    for (int i = 0; i < n; ++i) y[i] = (float)((i + l) % 7);
    cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(dk, 0xcd, n * sizeof(unsigned));
    LAUNCH_DEVICE(saxpy, n, (dx, dy, a, n));
    LAUNCH_DEVICE(keys, n, (dy, dk, n));
    twice<float><<<(n + 255) / 256, 256>>>(dy, n);
    LAUNCH_DEVICE(twice<float>, n, (dy, n));
    cudaMemcpy(got.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(k.data(), dk, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) {
      const unsigned block = (unsigned)i / 256;
      const float want = a * x[i] + y[i] + (float)(block % 3);
      if (got[i] != 4.0f * want) ++wrong;
      if (k[i] != ((unsigned)(want * 8.0f) ^ (block * 2654435761u))) ++wrong;
    }
  }
  const cudaError_t e = cudaDeviceSynchronize();
  printf("macro_parameter_launch: %d launches, %ld wrong%s%s\n", 4 * launches, wrong,
         e == cudaSuccess ? "" : ", ", e == cudaSuccess ? "" : cudaGetErrorString(e));
  return wrong == 0 && e == cudaSuccess ? 0 : 1;
}
