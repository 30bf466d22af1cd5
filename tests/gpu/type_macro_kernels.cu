// Kernels whose type is a macro that an included header defines per configuration
// (tests/gpu/type_macro_kernels.cuh: `LIB_KERNEL` is `static __global__ void` under nvcc), as a
// linear-algebra library writes every kernel (`RAFT_KERNEL k(...)`). The scan read type macros
// of the file alone, so none of these was found and their launches stayed as written (CP101).
// gpu-check builds it through the compiler launcher (split), runs every launch preemptible,
// then under chaos mode. Exit status 0 when every element of every launch matches the host's
// reference.
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include "type_macro_kernels.cuh"

template <typename T>
LIB_KERNEL scale_rows(T* out, const T* in, T factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor + (T)(blockIdx.x % 5);
}

LIB_KERNEL row_sums(int* out, const int* in, int n) {
  __shared__ int row[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  row[threadIdx.x] = i < n ? in[i] : 0;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) row[threadIdx.x] += row[threadIdx.x + s];
    __syncthreads();
  }
  if (i < n) out[i] = row[0] - in[i];
}

int main() {
  const int n = 1 << 20;
  const int blocks = (n + 255) / 256;
  std::vector<float> fin(n), fout(n);
  std::vector<int> iin(n), iout(n);
  unsigned x = 2024;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    fin[i] = (float)(x >> 8) / 65536.0f;
    iin[i] = (int)(x >> 22) - 512;
  }
  float *d_fin, *d_fout;
  int *d_iin, *d_iout;
  cudaMalloc(&d_fin, n * sizeof(float));
  cudaMalloc(&d_fout, n * sizeof(float));
  cudaMalloc(&d_iin, n * sizeof(int));
  cudaMalloc(&d_iout, n * sizeof(int));
  cudaMemcpy(d_fin, fin.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(d_iin, iin.data(), n * sizeof(int), cudaMemcpyHostToDevice);
  long wrong = 0;
  for (int round = 0; round < 10; ++round) {
    // A power of two: the product is exact, so the device's fused multiply-add and the
    // host's multiply, then add, round alike.
    const float factor = 0.5f * (float)(1 << (round % 4));
    cudaMemset(d_fout, 0xff, n * sizeof(float));
    cudaMemset(d_iout, 0xff, n * sizeof(int));
    scale_rows<<<blocks, 256>>>(d_fout, d_fin, factor, n);
    row_sums<<<blocks, 256>>>(d_iout, d_iin, n);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      std::printf("type_macro_kernels: launch failed\n");
      return 1;
    }
    cudaMemcpy(fout.data(), d_fout, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(iout.data(), d_iout, n * sizeof(int), cudaMemcpyDeviceToHost);
    for (int b = 0; b < blocks; ++b) {
      int sum = 0;
      for (int t = 0; t < 256 && b * 256 + t < n; ++t) sum += iin[b * 256 + t];
      for (int t = 0; t < 256 && b * 256 + t < n; ++t) {
        const int i = b * 256 + t;
        const float want = fin[i] * factor + (float)(b % 5);
        wrong += fout[i] != want;
        wrong += iout[i] != sum - iin[i];
      }
    }
  }
  std::printf("type_macro_kernels: 20 launches, %ld wrong\n", wrong);
  return wrong == 0 ? 0 : 1;
}
