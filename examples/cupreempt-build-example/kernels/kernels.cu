// Two kernels for the cupreempt-build example: a 1-D SAXPY and a 2-D blend of two images.

__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void blend2d(const float* a, const float* b, float* out, int width, int height,
                        float t) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < width && y < height) {
    int i = y * width + x;
    out[i] = __fmaf_rn(t, b[i], (1.0f - t) * a[i]);  // one rounding order, so the host can match it
  }
}
