// Probe: what a launch costs through cupreempt against a plain launch of the same kernel.
//   first   one process per form: context made (cudaFree(0)), then the first launch of the
//           kernel and a synchronize, host clock; the first launch pays every one-time setup.
//   steps   one process per form: the first launch taken apart, host clock for each step and
//           the event-timed window a program would see: the lookup of the kernel's function
//           (cudaGetFuncBySymbol), the runtime's plan (cupreempt_rt_plan; the `plain` form
//           skips it), the launch of the original kernel (cudaLaunchKernel), the synchronize.
//   steady  N back-to-back launches of a short kernel, host time per launch (enqueue only)
//           and per launch with the GPU (N launches, then a synchronize), for a grid of one
//           wave and one of many waves.
// Build (scripts/probes/launch_path.sh does all of this):
//   cupreempt transform scripts/probes/launch_path.cu -o launch_path.cupreempt.cu
//   nvcc -arch=sm_90 -O2 -std=c++17 -I cuda_support launch_path.cupreempt.cu \
//        -L target/release -lcupreempt_runtime -o launch_path
// In the transformed file `scale_plain` stays as written (pragma skip) and `scale` launches
// through cupreempt::launch: both forms live in one program.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#pragma cupreempt skip
__global__ void scale_plain(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void scale(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

static double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

static void launch(bool plain, int blocks, float* y, const float* x, int n) {
  if (plain)
    scale_plain<<<blocks, 256>>>(y, x, 1.0001f, n);
  else
    scale<<<blocks, 256>>>(y, x, 1.0001f, n);
}

static int check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "steady";
  const bool plain = argc > 2 && std::strcmp(argv[2], "plain") == 0;
  const int n = 1 << 22;
  double t0 = now_us();
  check(cudaFree(0), "context");
  double t1 = now_us();
  float *x, *y;
  check(cudaMalloc(&x, n * sizeof(float)), "malloc");
  check(cudaMalloc(&y, n * sizeof(float)), "malloc");
  check(cudaMemset(x, 0, n * sizeof(float)), "memset");
  check(cudaMemset(y, 0, n * sizeof(float)), "memset");
  check(cudaDeviceSynchronize(), "sync");
  if (std::strcmp(mode, "first") == 0) {
    // Many waves of a short kernel (one wave would run the original kernel in either form).
    double a = now_us();
    launch(plain, 16384, y, x, n);
    double b = now_us();
    check(cudaDeviceSynchronize(), "first launch");
    double c = now_us();
    launch(plain, 16384, y, x, n);
    check(cudaDeviceSynchronize(), "second launch");
    double d = now_us();
    std::printf("%s context_us %.1f first_launch_us %.1f first_enqueue_us %.1f second_launch_us %.1f\n",
                plain ? "plain" : "cupreempt", t1 - t0, c - a, b - a, d - c);
    return 0;
  }
  if (std::strcmp(mode, "steps") == 0) {
    // What the launch shim does for a launch that runs the original kernel, step by step.
    cudaEvent_t start, end;
    check(cudaEventCreate(&start), "event");
    check(cudaEventCreate(&end), "event");
    const int blocks = 16384;
    const unsigned g[3] = {(unsigned)blocks, 1, 1}, bl[3] = {256, 1, 1};
    float a_ = 1.0001f;
    int n_ = n;
    void* args[] = {&y, &x, &a_, &n_};
    check(cudaEventRecord(start), "record");
    const double s0 = now_us();
    cudaFunction_t f = nullptr;
    check(cudaGetFuncBySymbol(&f, (const void*)scale), "cudaGetFuncBySymbol");
    const double s1 = now_us();
    const int status = plain ? CUPREEMPT_RUN_ORIGINAL : cupreempt_rt_plan((void*)f, g, bl, 0, nullptr);
    const double s2 = now_us();
    check(cudaLaunchKernel((const void*)scale, dim3(blocks), dim3(256), args, 0, nullptr), "launch");
    if (status == CUPREEMPT_RUN_ORIGINAL_TIMED) (void)cupreempt_rt_original_launched(nullptr);
    const double s3 = now_us();
    check(cudaEventRecord(end), "record");
    check(cudaEventSynchronize(end), "sync");
    const double s4 = now_us();
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, end), "elapsed");
    std::printf("%s lookup_us %.1f plan_us %.1f launch_us %.1f sync_us %.1f window_us %.1f "
                "plan_status %d\n",
                plain ? "plain" : "cupreempt", s1 - s0, s2 - s1, s3 - s2, s4 - s3, ms * 1000.0,
                status);
    return 0;
  }
  const int reps = argc > 3 ? std::atoi(argv[3]) : 2000;
  for (int blocks : {64, 4096, 16384}) {
    for (int form = 0; form < 2; ++form) {
      const bool p = form == 0;
      for (int i = 0; i < 50; ++i) launch(p, blocks, y, x, n);  // warm
      check(cudaDeviceSynchronize(), "warm");
      double a = now_us();
      for (int i = 0; i < reps; ++i) launch(p, blocks, y, x, n);
      double b = now_us();
      check(cudaDeviceSynchronize(), "steady");
      double c = now_us();
      std::printf("%-9s blocks %6d  enqueue_us %.2f  per_launch_us %.2f\n",
                  p ? "plain" : "cupreempt", blocks, (b - a) / reps, (c - a) / reps);
    }
  }
  return 0;
}
