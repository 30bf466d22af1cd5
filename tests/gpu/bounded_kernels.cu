// A kernel with its own __launch_bounds__(1024, 1) that needs few registers as written (two of
// its 1,024-thread blocks fit on an SM) and more than 32 in the persistent wrapper: launch.cuh
// runs its capped wrapper, whose bounds keep the block size and ask for as many blocks as the
// SM holds (32 registers on sm_90; transformation.md, "Two wrappers"). gpu-check
// transforms it (`cupreempt transform`), runs every launch preemptible, then under chaos mode.
// Exit status 0 when every element of every launch is right and, transformed, the capped
// wrapper is the one chosen and needs at most 32 registers.
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void __launch_bounds__(1024, 1)
    bounded_scale(const float* in, float* out, int n, float f) {
  __shared__ float row[1024];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  row[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = f * row[threadIdx.x] + row[(threadIdx.x + 1) % blockDim.x];
}

int main() {
  const int n = 1200 * 1024 - 100, launches = 20;
  std::vector<float> x(n), got(n);
  // Small integers: every result is exact, with or without a fused multiply-add.
  for (int i = 0; i < n; ++i) x[i] = (float)(i % 1000);
  float *dx, *dy;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  long wrong = 0;
  for (int l = 0; l < launches; ++l) {
    const float f = 0.5f + (float)l;
    cudaMemset(dy, 0xcd, n * sizeof(float));
    bounded_scale<<<(n + 1023) / 1024, 1024>>>(dx, dy, n, f);
    cudaMemcpy(got.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) {
      const int block = i / 1024, t = i % 1024, next = block * 1024 + (t + 1) % 1024;
      const float neighbour = next < n ? x[next] : 0.0f;
      if (got[i] != f * x[i] + neighbour) ++wrong;
    }
  }
  const cudaError_t e = cudaDeviceSynchronize();
  const char* wrapper = "as written";
  int registers = 0;
  bool capped_ok = true;
#ifdef CUPREEMPT_R32_BLOCKS_OF  // transformed: cupreempt.cuh is included
  cudaFuncAttributes a;
  cudaFuncGetAttributes(&a, bounded_scale__cupreempt_r32);
  registers = a.numRegs;
  const bool chosen = cupreempt::detail::chosen_wrapper<bounded_scale__cupreempt_kernels>() ==
                      &bounded_scale__cupreempt_r32;
  wrapper = chosen ? "capped wrapper" : "plain wrapper";
  capped_ok = chosen && registers <= 32;
#endif
  printf("bounded_kernels: %d launches, %ld wrong, %s (%d registers)%s%s\n", launches, wrong,
         wrapper, registers, e == cudaSuccess ? "" : ", ", e == cudaSuccess ? "" : cudaGetErrorString(e));
  return wrong == 0 && e == cudaSuccess && capped_ok ? 0 : 1;
}
