// Probe: what a module's size costs a program's first launch. With CUDA's lazy module loading
// (the default), the first use of any kernel of a translation unit loads that unit's module
// inside the launch; a transformed unit holds the persistent wrappers as well. This program
// launches one small kernel once, right after making its context, and prints the host time of
// that launch; -DBALLAST=N adds N kernels that are never launched, each of -DFMAS=F dependent
// FMAs (default 1,000: about 16 KB of SASS). scripts/probes/module_load.sh builds it with
// several counts and sizes of ballast kernels, with and without PTX, and runs each build in
// fresh processes, lazy and eager. -DBALLAST_ONLY builds the ballast alone (with
// `ballast_addresses`) and -DBALLAST_ELSEWHERE a main that takes it from there: the ballast in
// another translation unit of the same program, hence another module.
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>

#ifndef BALLAST
#define BALLAST 0
#endif
#ifndef FMAS
#define FMAS 1000
#endif

#ifndef BALLAST_ONLY
__global__ void touch(float* p) { p[threadIdx.x] += 1.0f; }
#endif

#ifndef BALLAST_ELSEWHERE

// FMAS dependent FMAs: about 16 bytes of SASS each, which nothing can fold away.
template <int ID>
__global__ void ballast(float* p) {
  float v = p[threadIdx.x];
#pragma unroll
  for (int i = 0; i < FMAS; ++i) v = fmaf(v, 1.0001f, (float)(i + ID));
  p[threadIdx.x] = v;
}

template <int N>
struct Instantiate {
  // Taking each instantiation's address keeps it (and its registration) in the program.
  static void* addresses(void** out) {
    out[N - 1] = (void*)ballast<N>;
    return Instantiate<N - 1>::addresses(out);
  }
};
template <>
struct Instantiate<0> {
  static void* addresses(void**) { return nullptr; }
};

void ballast_addresses(void** out) { Instantiate<BALLAST>::addresses(out); }
#else
void ballast_addresses(void** out);
#endif

#ifndef BALLAST_ONLY
int main() {
  static void* kept[BALLAST + 1];
  ballast_addresses(kept);
  if (cudaFree(0) != cudaSuccess) return 1;  // the context
  float* p = nullptr;
  if (cudaMalloc(&p, 1024 * sizeof(float)) != cudaSuccess) return 1;
  cudaMemset(p, 0, 1024 * sizeof(float));
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  touch<<<1, 32>>>(p);
  const cudaError_t e = cudaDeviceSynchronize();
  const auto t1 = std::chrono::steady_clock::now();
  if (e != cudaSuccess) return 1;
  std::printf("first_launch_us %.1f\n", std::chrono::duration<double, std::micro>(t1 - t0).count());
  return kept[0] == (void*)1;  // never: keeps `kept` alive
}
#endif
