// Shared by the probes that include it: a CUDA runtime call checked (the probe exits with the
// error's name and place), a driver call the same way (CU_CHECK, with cuda.h), and the GPU's
// global clock in a kernel.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));    \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

#ifdef __cuda_cuda_h__
// The same for a driver API call, where the probe includes cuda.h.
#define CU_CHECK(x)                                                                 \
  do {                                                                              \
    CUresult r = (x);                                                               \
    if (r != CUDA_SUCCESS) {                                                        \
      const char* name = nullptr;                                                   \
      cuGetErrorName(r, &name);                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, name ? name : "?"); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)
#endif

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
