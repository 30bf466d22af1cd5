// Shared by the probes that include it: a CUDA runtime call checked (the probe exits with the
// error's name and place), a driver call the same way (CU_CHECK, with cuda.h), the GPU's
// global clock in a kernel, the host's clock and the probes' integer settings.
#pragma once
#include <chrono>
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

// The host's monotonic clock in microseconds.
static inline double host_now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// An integer setting from the environment (PROBE_...), or `fallback`.
static inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}
