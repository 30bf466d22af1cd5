#include "scale.cuh"

void scale_add_double(double* y, const double* x, double a, int n, cudaStream_t stream) {
  scale_add<double><<<(n + 127) / 128, 128, 0, stream>>>(y, x, a, n);
}
