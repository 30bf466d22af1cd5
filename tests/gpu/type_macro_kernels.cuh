// The kernel type macro of tests/gpu/type_macro_kernels.cu, defined per configuration as a
// linear-algebra library's header defines its own: hidden visibility with relocatable device
// code, `static` without, and a host function for a compiler without CUDA.
#pragma once
#define LIB_HIDDEN __attribute__((visibility("hidden")))
#if defined(__CUDACC__)
#define LIB_HAS_CUDA 1
#endif
#if defined(__CUDACC_RDC__)
#define LIB_KERNEL LIB_HIDDEN __global__ void
#elif defined(LIB_HAS_CUDA)
#define LIB_KERNEL static __global__ void
#else
#define LIB_KERNEL static void
#endif
