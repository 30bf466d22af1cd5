// Probe: the cost of a launch that the program waits for at once (launch, then
// cudaDeviceSynchronize, many times over: the loop of iterative programs such as a 1-D Jacobi
// stencil of a few blocks per step). Prints the host time per launch and wait, median of
// PROBE_ROUNDS rounds of PROBE_STEPS steps, for `step` (transformed where the file is) and for
// `step_as_written` (`#pragma cupreempt skip`: a plain launch in the same process).
// scripts/probes/synced_launches.sh builds it as written and transformed and runs both.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

__global__ void step(int n, float* a, float* b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) b[i] = 0.5f * (a[i - 1] + a[i + 1]);
}

#pragma cupreempt skip
__global__ void step_as_written(int n, float* a, float* b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) b[i] = 0.5f * (a[i - 1] + a[i + 1]);
}

static double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

static int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

int main() {
  const int n = env_int("PROBE_N", 2048), steps = env_int("PROBE_STEPS", 5000);
  const int rounds = env_int("PROBE_ROUNDS", 5);
  float *a, *b;
  if (cudaMalloc(&a, n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&b, n * sizeof(float)) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaMemset(a, 0, n * sizeof(float));
  cudaMemset(b, 0, n * sizeof(float));
  const int blocks = (n + 255) / 256;
  for (int form = 0; form < 2; ++form) {
    std::vector<double> per;
    for (int r = 0; r < rounds + 1; ++r) {
      const double t = now_us();
      for (int s = 0; s < steps; ++s) {
        if (form == 0)
          step<<<blocks, 256>>>(n, a, b);
        else
          step_as_written<<<blocks, 256>>>(n, a, b);
        cudaDeviceSynchronize();
      }
      if (r > 0) per.push_back((now_us() - t) / steps);  // round 0 warms up
    }
    std::sort(per.begin(), per.end());
    std::printf("%s us_per_launch_and_wait %.3f\n", form == 0 ? "step" : "step_as_written",
                per[per.size() / 2]);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
