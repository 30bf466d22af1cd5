// The defining file of declared_template_launch.cu: a kernel template and its explicit
// instantiations (as a quantization library defines the kernels its operators file declares
// and launches). Transformed, each instantiation instantiates the wrappers too
// (`rewrite/kernel.rs`, `explicit_instantiations` and `macro_instantiations`), for the other
// file's launches.
#include <cuda_runtime.h>

#define FILL 0
#define RAMP 1

template <typename T, int FUNC>
__global__ void kfunc(T* out, T value, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = FUNC == FILL ? value : (T)(i % 1000) + value;
}

template __global__ void kfunc<float, FILL>(float* out, float value, long n);
template __global__ void kfunc<float, RAMP>(float* out, float value, long n);
// One instance through a macro, as the library writes most of them: transformed, the
// wrappers' instances ride in the macro's replacement (`macro_instantiations`).
#define MAKE_KFUNC(T, F)                        \
  template __global__ void kfunc<T, F>(T* out, \
                                       T value, long n);

MAKE_KFUNC(int, RAMP)
