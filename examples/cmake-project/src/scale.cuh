// A template kernel defined in a header and launched from two sources (scale_float.cu,
// scale_double.cu): each translation unit transforms its own instances.
#pragma once

template <typename T>
__global__ void scale_add(T* y, const T* x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
