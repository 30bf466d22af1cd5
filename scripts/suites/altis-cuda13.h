// Compatibility for building utcs-scea/altis with CUDA 13 in scripts/cmake-suite.sh, the same
// for both builds (force-included with nvcc's -include, see altis.txt): CUDA 13 replaced the
// device-number forms of cudaMemAdvise and cudaMemPrefetchAsync with cudaMemLocation ones,
// gave cudaGraphAddDependencies an edge-data argument, and removed cudaDeviceProp::clockRate
// (the programs print it; here they print the L2 size instead, in both builds).
#pragma once
#include <cuda_runtime.h>
#if defined(CUDART_VERSION) && CUDART_VERSION >= 13000
static inline cudaMemLocation altis_location(int device) {
  cudaMemLocation l;
  l.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  l.id = device == cudaCpuDeviceId ? 0 : device;
  return l;
}
static inline cudaError_t cudaMemAdvise(const void* p, size_t n, cudaMemoryAdvise a, int device) {
  return cudaMemAdvise(p, n, a, altis_location(device));
}
static inline cudaError_t cudaMemPrefetchAsync(const void* p, size_t n, int device,
                                               cudaStream_t s = 0) {
  return cudaMemPrefetchAsync(p, n, altis_location(device), 0, s);
}
static inline cudaError_t cudaGraphAddDependencies(cudaGraph_t g, const cudaGraphNode_t* from,
                                                   const cudaGraphNode_t* to, size_t n) {
  return cudaGraphAddDependencies(g, from, to, nullptr, n);
}
#define clockRate l2CacheSize
#endif
