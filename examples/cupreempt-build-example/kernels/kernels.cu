// Kernels for the cupreempt-build example: a 1-D SAXPY, a 2-D blend of two images, a
// template (build.rs asks for its `float` instance), and a kernel that takes a struct by value
// (build.rs names its Rust twin with Build::param_type).

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

template <class T>
__global__ void scale_by(T* v, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = v[i] * a;
}

struct Affine {
  float scale;
  float shift;
  int n;
};

__global__ void affine(Affine p, float* v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) v[i] = __fmaf_rn(p.scale, v[i], p.shift);
}
