// Probe: what a launch costs through cupreempt against a plain launch of the same kernel.
//   first   one process per form: context made (cudaFree(0)), then the first launch of the
//           kernel and a synchronize, host clock; the first launch pays every one-time setup.
//   steps   one process per form: the first launch taken apart, host clock for each step and
//           the event-timed window a program would see: the lookup of the kernel's function
//           (cudaGetFuncBySymbol), the runtime's plan (cupreempt_rt_plan; the `plain` form
//           skips it), the launch of the original kernel (cudaLaunchKernel), the synchronize.
//   pieces  the launch shim's steps for a one-wave launch, each repeated alone: host time
//           per call of cudaGetFuncBySymbol, cudaStreamIsCapturing, cupreempt_rt_plan,
//           cudaLaunchKernel and <<<>>> of the plain kernel, and a whole launch through the shim.
//   alternate [R [B]]  host time per launch, plain and through cupreempt in turn: R rounds of
//           a batch of B launches of each form (the GPU drained before each batch); medians and
//           the median of the rounds' differences (PROBE_BLOCKS: the grid, default 64).
//   steady  N back-to-back launches of a short kernel, host time per launch (enqueue only)
//           and per launch with the GPU (N launches, then a synchronize), for a grid of one
//           wave and one of many waves, then the host time per launch in batches that never
//           wait for the GPU (PROBE_BATCH launches, default 100, then a synchronize); `steady x N stream` on a created stream of the
//           highest priority instead of the legacy default stream.
// Build (scripts/probes/launch_path.sh does all of this):
//   cupreempt transform scripts/probes/launch_path.cu -o launch_path.cupreempt.cu
//   nvcc -arch=sm_90 -O2 -std=c++17 -I cuda_support launch_path.cupreempt.cu \
//        -L target/release -lcupreempt_runtime -o launch_path
// In the transformed file `scale_plain` stays as written (pragma skip) and `scale` launches
// through cupreempt::launch: both forms live in one program.
#include <algorithm>
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

static void launch(bool plain, int blocks, float* y, const float* x, int n,
                   cudaStream_t s = 0) {
  if (plain)
    scale_plain<<<blocks, 256, 0, s>>>(y, x, 1.0001f, n);
  else
    scale<<<blocks, 256, 0, s>>>(y, x, 1.0001f, n);
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
  if (std::strcmp(mode, "alternate") == 0) {
    // Host time per launch, plain and through cupreempt in turn: R rounds, each a batch of B
    // launches of one form then B of the other (the first form alternating), each batch after
    // the GPU has drained, so that no launch waits for the GPU and a drift of the machine's
    // speed (its clocks, other tenants) meets both forms alike. Prints the medians over the
    // rounds and the median of the rounds' differences.
    const int rounds = argc > 3 ? std::atoi(argv[3]) : 200;
    const int batch = argc > 4 ? std::atoi(argv[4]) : 100;
    const int blocks = std::getenv("PROBE_BLOCKS") ? std::atoi(std::getenv("PROBE_BLOCKS")) : 64;
    double* t[2] = {new double[rounds], new double[rounds]};
    for (int form = 0; form < 2; ++form) {
      for (int i = 0; i < 200; ++i) launch(form == 0, blocks, y, x, n);  // warm
      check(cudaDeviceSynchronize(), "warm");
    }
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        const int form = (r + k) % 2;  // 0 plain, 1 cupreempt
        const double a = now_us();
        for (int i = 0; i < batch; ++i) launch(form == 0, blocks, y, x, n);
        t[form][r] = (now_us() - a) / batch;
        check(cudaDeviceSynchronize(), "batch");
      }
    }
    double* d = new double[rounds];
    for (int r = 0; r < rounds; ++r) d[r] = t[1][r] - t[0][r];
    auto median = [](double* v, int m) {
      std::sort(v, v + m);
      return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
    };
    const double dm = median(d, rounds), p = median(t[0], rounds), c = median(t[1], rounds);
    std::printf("alternate blocks %d: host us per launch, median of %d rounds of %d: plain %.3f "
                "cupreempt %.3f, difference %.3f (rounds' quartiles %.3f %.3f)\n",
                blocks, rounds, batch, p, c, dm, d[rounds / 4], d[3 * rounds / 4]);
    return 0;
  }
  if (std::strcmp(mode, "pieces") == 0) {
    // The launch shim's steps for a one-wave launch that runs the original kernel, each
    // repeated on its own: host time per call.
    const int reps = argc > 3 ? std::atoi(argv[3]) : 20000;
    const unsigned g[3] = {64, 1, 1}, bl[3] = {256, 1, 1};
    float a_ = 1.0001f;
    int n_ = n;
    void* args[] = {&y, &x, &a_, &n_};
    cudaFunction_t f = nullptr;
    check(cudaGetFuncBySymbol(&f, (const void*)scale), "cudaGetFuncBySymbol");
    auto per_call = [&](const char* what, auto&& call) {
      for (int i = 0; i < 100; ++i) call();
      check(cudaDeviceSynchronize(), "warm");
      const double a = now_us();
      for (int i = 0; i < reps; ++i) call();
      const double b = now_us();
      check(cudaDeviceSynchronize(), what);
      std::printf("%-28s %8.3f us per call\n", what, (b - a) / reps);
    };
    per_call("cudaGetFuncBySymbol", [&] {
      cudaFunction_t o;
      (void)cudaGetFuncBySymbol(&o, (const void*)scale);
    });
    per_call("cudaStreamIsCapturing", [&] {
      cudaStreamCaptureStatus st;
      (void)cudaStreamIsCapturing(0, &st);
    });
    // Which outcome the timed plans had (a runtime still setting up answers "setup" on a
    // shorter path than a ready one's "one_wave").
    unsigned long long before[CUPREEMPT_PLAN_OUTCOMES], after[CUPREEMPT_PLAN_OUTCOMES];
    (void)cupreempt_rt_plan_counts_n(before, CUPREEMPT_PLAN_OUTCOMES);
    per_call("cupreempt_rt_plan", [&] { (void)cupreempt_rt_plan((void*)f, g, bl, 0, nullptr); });
    (void)cupreempt_rt_plan_counts_n(after, CUPREEMPT_PLAN_OUTCOMES);
    const char* names[] = CUPREEMPT_PLAN_OUTCOME_NAMES;
    std::printf("  plans by outcome:");
    for (int i = 0; i < CUPREEMPT_PLAN_OUTCOMES; ++i)
      if (after[i] != before[i]) std::printf(" %s %llu", names[i], after[i] - before[i]);
    std::printf("\n");
    per_call("cudaLaunchKernel", [&] {
      (void)cudaLaunchKernel((const void*)scale_plain, dim3(64), dim3(256), args, 0, nullptr);
    });
    per_call("<<<>>>", [&] { scale_plain<<<64, 256>>>(y, x, 1.0001f, n); });
    per_call("through the shim", [&] { launch(false, 64, y, x, n); });
    return 0;
  }
  const int reps = argc > 3 ? std::atoi(argv[3]) : 2000;
  // "stream": launches on a created non-blocking stream of the highest priority, as programs
  // with their own streams make them, instead of the legacy default stream.
  cudaStream_t s = 0;
  if (argc > 4 && std::strcmp(argv[4], "stream") == 0) {
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priorities");
    check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest), "stream");
  }
  // PROBE_BLOCKS=N: that grid only (CUPREEMPT_TRACE_LAUNCH's table then describes it alone).
  const char* only = std::getenv("PROBE_BLOCKS");
  for (int blocks : {64, 4096, 16384}) {
    if (only && std::atoi(only) != blocks) continue;
    for (int form = 0; form < 2; ++form) {
      const bool p = form == 0;
      for (int i = 0; i < 50; ++i) launch(p, blocks, y, x, n, s);  // warm
      check(cudaDeviceSynchronize(), "warm");
      double a = now_us();
      for (int i = 0; i < reps; ++i) launch(p, blocks, y, x, n, s);
      double b = now_us();
      check(cudaDeviceSynchronize(), "steady");
      double c = now_us();
      std::printf("%-9s blocks %6d  enqueue_us %.2f  per_launch_us %.2f",
                  p ? "plain" : "cupreempt", blocks, (b - a) / reps, (c - a) / reps);
      // The host's time alone: batches of PROBE_BATCH launches (default 100), each after the
      // GPU has drained, so that no launch waits for room in a queue (the driver's, or the
      // runtime's bound of 256 incomplete launches) behind a GPU slower than the host.
      const int batch = std::getenv("PROBE_BATCH") ? std::atoi(std::getenv("PROBE_BATCH")) : 100;
      double host = 0;
      int made = 0;
      while (made < reps) {
        const int k = reps - made < batch ? reps - made : batch;
        const double d = now_us();
        for (int i = 0; i < k; ++i) launch(p, blocks, y, x, n, s);
        host += now_us() - d;
        made += k;
        check(cudaDeviceSynchronize(), "batch");
      }
      std::printf("  batched_enqueue_us %.2f\n", host / reps);
    }
  }
  return 0;
}
