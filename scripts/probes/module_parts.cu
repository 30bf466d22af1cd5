// Probe: where a module's first-use cost goes, the driver's part alone. scripts/probes/
// module_load.cu measures a program whose kernels the CUDA runtime registered (every __global__
// of a translation unit is registered, launched or not); this one loads a cubin with the driver
// API, where nothing is registered, and times, right after the context is made:
//   load   cuModuleLoadData of the whole cubin,
//   get    cuModuleGetFunction of `touch` (the one kernel launched),
//   launch its launch and the synchronization after it,
//   others cuModuleGetFunction of every other entry of the cubin (names from argv), after.
// Usage: module_parts CUBIN [ENTRY...]; prints one line of µs per part. module_load.sh builds
// the cubins from module_load.cu (the same ballast) and runs this next to the runtime-API
// builds, so that the two can be compared.
#include <chrono>
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>
#include <fstream>
#include <iterator>
#include <vector>

using Clock = std::chrono::steady_clock;
static double us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (image.empty()) return 2;
  if (cudaFree(0) != cudaSuccess) return 1;  // the primary context, as a program makes it
  float* p = nullptr;
  if (cudaMalloc(&p, 1024 * sizeof(float)) != cudaSuccess) return 1;
  cudaMemset(p, 0, 1024 * sizeof(float));
  cudaDeviceSynchronize();
  CUmodule m;
  CUfunction f;
  const auto t0 = Clock::now();
  if (cuModuleLoadData(&m, image.data()) != CUDA_SUCCESS) return 1;
  const auto t1 = Clock::now();
  if (cuModuleGetFunction(&f, m, "_Z5touchPf") != CUDA_SUCCESS) return 1;
  const auto t2 = Clock::now();
  void* args[] = {&p};
  if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr) != CUDA_SUCCESS) return 1;
  if (cuCtxSynchronize() != CUDA_SUCCESS) return 1;
  const auto t3 = Clock::now();
  for (int i = 2; i < argc; ++i) {
    CUfunction g;
    if (cuModuleGetFunction(&g, m, argv[i]) != CUDA_SUCCESS) return 1;
  }
  const auto t4 = Clock::now();
  std::printf("load %.1f get %.1f launch %.1f others %.1f\n", us(t0, t1), us(t1, t2), us(t2, t3),
              us(t3, t4));
  return 0;
}
