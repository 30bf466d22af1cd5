// A program whose link step is the host compiler's and names no cupreempt library (as
// Makefiles that compile with nvcc and link with `g++ -o prog *.o -lcudart` do): compiled
// through the compiler launcher, it finds the runtime at run time (runtime_library.h) and its
// launches run preemptible. scripts/build-integration-gpu.sh builds it so, runs it with every
// launch preemptible under chaos mode, and checks "0 wrong" and the runtime's count of
// preemptible launches. Random inputs, output poisoned before each launch.
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void affine(const float* x, float* y, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

int main() {
  const int n = 1 << 22, rounds = 40;
  std::vector<float> x(n), y(n);
  srand(20261202);
  for (auto& v : x) v = (float)rand() / RAND_MAX - 0.5f;
  float *dx, *dy;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  long wrong = 0;
  for (int r = 0; r < rounds; ++r) {
    const float a = 1.0f + r, b = 0.25f * r;
    cudaMemset(dy, 0xff, n * sizeof(float));  // NaN: a task that never ran shows
    affine<<<(n + 127) / 128, 128>>>(dx, dy, a, b, n);
    cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) {
      // The device contracts a * x + b into one rounding, as fmaf does.
      if (y[i] != fmaf(a, x[i], b)) ++wrong;
    }
  }
  cudaError_t e = cudaDeviceSynchronize();
  printf("host_linked: %d launches, %ld wrong%s%s\n", rounds, wrong, e ? ": " : "",
         e ? cudaGetErrorString(e) : "");
  return wrong || e ? 1 : 0;
}
