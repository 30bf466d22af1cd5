// Probe: which of the runtime's one-time setup steps (rt/setup.rs, rt/pool.rs) slows a
// program's first timed kernel launch when another host thread does that step at the same
// moment, and whether the cost is on the host (the launch call waits for the driver while the
// other thread is in it) or on the GPU (the kernel itself runs longer).
//   setup_interference VARIANT [ITERS]
// One process, one variant. The context is made (cudaFree(0)), buffers allocated, then a
// second thread makes the variant's setup steps on the same (primary) context while the main
// thread times the process's first launch of a ~2 ms compute-bound kernel with events, as
// programs do: cudaEventRecord(start); kernel<<<>>>; cudaEventRecord(stop);
// cudaEventSynchronize(stop). No warm-up: the first launch is what is measured. Both threads
// spin on one atomic flag, so the setup starts when the main thread is about to record
// `start` (t0), the same in every run.
// Variants (the setup thread's steps, in the runtime's order):
//   none           nothing (the baseline; the thread exists and waits all the same)
//   streams        6 non-blocking streams: one of the greatest priority, five of the least
//   devmem         a slab of 16 control blocks (cuMemAlloc, 16 x 4 KiB), zeroed with
//                  cuMemsetD8Async on a non-blocking stream made before t0
//   pinned         16 host mirrors: 132 KiB of pinned, device-mapped memory (the process's
//                  first pinned allocation), its device address, and zeroing it on the host
//   events         4 events without timing
//   all            streams, devmem (zeroed on the least-priority stream), pinned, events and
//                  a record of the first event after the zeroing
//   all_after      as `all`, but started only once `stop` has been synchronized
//   pinned_before  as `all`, but the pinned memory is allocated by the main thread before the
//                  timed launch (its step times are then negative)
// ITERS: the kernel's dependent FMAs per thread (default 350000, about 2 ms on the H100).
// Prints one line: the variant, then key/value pairs (host times in us since t0, GPU times in
// ms), then `setup_steps:` and name start_us end_us per step:
//   event_ms        start to stop on the GPU clock (what a program reports)
//   kernel_ms       first block's start to last block's end (%globaltimer): the kernel alone;
//                   event_ms - kernel_ms is the time the GPU waited for the kernel
//   launch_call_us  the host time of the kernel<<<>>> call
//   *_end_us        when the record of start, the launch, the record of stop and the
//                   synchronize returned
//   second_*        a second launch of the kernel, timed the same way once the setup is done
// Build and run (scripts/probes/setup_interference.sh runs every variant in fresh processes):
//   nvcc -arch=sm_90 -O2 -std=c++17 -o probe scripts/probes/setup_interference.cu -lcuda
//   ./probe all
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

static void drv(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    std::fprintf(stderr, "%s: %s\n", what, s ? s : "unknown error");
    std::exit(1);
  }
}

using Clock = std::chrono::steady_clock;

static double us_since(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t - t0).count();
}

__device__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Compute-bound, one wave (4 blocks of 256 threads per SM): a chain of dependent FMAs per
// thread, its result stored so that it stays. span[0] and span[1] get the first block's start
// and the last block's end on the GPU's clock.
__global__ void fma_chain(float* out, unsigned long long* span, int iters, float a, float b) {
  if (threadIdx.x == 0) atomicMin(&span[0], globaltimer());
  float x = threadIdx.x * 1e-3f;
#pragma unroll 8
  for (int i = 0; i < iters; ++i) x = fmaf(x, a, b);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&span[1], globaltimer());
}

// The runtime's sizes: a slab of 16 control blocks of 4 KiB and their 16 host mirrors
// (132 KiB together), and 1 + 1 + 4 streams. The runtime maps its mirrors with
// CU_MEMHOSTALLOC_DEVICEMAP alone (rt/pool.rs, alloc_mirrors).
constexpr int kSlots = 16;
constexpr size_t kSlotBytes = 4 << 10;
constexpr size_t kMirrorBytes = (132 << 10) / kSlots;
constexpr int kStreams = 6;
constexpr int kEvents = 4;

struct Step {
  const char* name;
  Clock::time_point start, end;
};

// What the setup steps made; the steps' times, in order.
struct Setup {
  std::vector<Step> steps;
  CUstream zero_on = nullptr;  // where the slab is zeroed
  std::vector<CUstream> streams;
  CUdeviceptr slab = 0;
  void* mirrors = nullptr;
  CUdeviceptr mirrors_device = 0;
  std::vector<CUevent> events;

  template <class F>
  void step(const char* name, F f) {
    Step s{name, Clock::now(), {}};
    f();
    s.end = Clock::now();
    steps.push_back(s);
  }

  void make_streams() {
    int least = 0, greatest = 0;
    drv(cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange");
    step("streams", [&] {
      for (int i = 0; i < kStreams; ++i) {
        CUstream s;
        drv(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, i == 0 ? greatest : least),
            "cuStreamCreateWithPriority");
        streams.push_back(s);
      }
    });
    zero_on = streams[1];  // the housekeeping stream: the least priority
  }
  void make_slab() {
    step("devmem_alloc", [&] { drv(cuMemAlloc(&slab, kSlots * kSlotBytes), "cuMemAlloc"); });
    step("devmem_memset",
         [&] { drv(cuMemsetD8Async(slab, 0, kSlots * kSlotBytes, zero_on), "cuMemsetD8Async"); });
  }
  void make_mirrors() {
    step("pinned_alloc", [&] {
      drv(cuMemHostAlloc(&mirrors, kSlots * kMirrorBytes, CU_MEMHOSTALLOC_DEVICEMAP),
          "cuMemHostAlloc");
    });
    step("pinned_devptr", [&] {
      drv(cuMemHostGetDevicePointer(&mirrors_device, mirrors, 0), "cuMemHostGetDevicePointer");
    });
    step("pinned_zero", [&] { std::memset(mirrors, 0, kSlots * kMirrorBytes); });
  }
  void make_events() {
    step("events", [&] {
      for (int i = 0; i < kEvents; ++i) {
        CUevent e;
        drv(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
        events.push_back(e);
      }
    });
  }
};

int main(int argc, char** argv) {
  const std::string variant = argc > 1 ? argv[1] : "";
  const int iters = argc > 2 ? std::atoi(argv[2]) : 350000;
  const char* known[] = {"none", "streams", "devmem", "pinned", "events", "all", "all_after",
                         "pinned_before"};
  bool ok = iters > 0;
  bool found = false;
  for (const char* k : known) found |= variant == k;
  if (!ok || !found) {
    std::fprintf(stderr,
                 "usage: %s none|streams|devmem|pinned|events|all|all_after|pinned_before "
                 "[ITERS]\n",
                 argv[0]);
    return 1;
  }
  const bool after = variant == "all_after";
  const bool all = variant == "all" || after || variant == "pinned_before";

  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(0), "context (cudaFree(0))");
  drv(cuInit(0), "cuInit");
  CUdevice dev;
  drv(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;  // the context the runtime API made: the primary one
  drv(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");

  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  const int blocks = 4 * sms, threads = 256;
  float* out = nullptr;
  unsigned long long* span = nullptr;
  check(cudaMalloc(&out, sizeof(float) * blocks * threads), "cudaMalloc out");
  check(cudaMalloc(&span, 2 * sizeof(unsigned long long)), "cudaMalloc span");
  const unsigned long long span_init[2] = {~0ull, 0ull};
  check(cudaMemcpy(span, span_init, sizeof span_init, cudaMemcpyHostToDevice), "reset span");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate start");
  check(cudaEventCreate(&stop), "cudaEventCreate stop");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  Setup setup;
  if (variant == "pinned_before") setup.make_mirrors();

  // The setup thread: context current and (devmem alone) its zeroing stream made before it
  // says it is ready, so that t0 starts the variant's steps and nothing else.
  std::atomic<bool> ready{false}, go{false};
  std::thread worker([&] {
    drv(cuCtxSetCurrent(ctx), "cuCtxSetCurrent (setup thread)");
    if (variant == "devmem")
      drv(cuStreamCreate(&setup.zero_on, CU_STREAM_NON_BLOCKING), "cuStreamCreate (zeroing)");
    ready.store(true, std::memory_order_release);
    while (!go.load(std::memory_order_acquire)) {
    }
    if (variant == "streams" || all) setup.make_streams();
    if (variant == "devmem" || all) setup.make_slab();
    if (variant == "pinned" || variant == "all" || after) setup.make_mirrors();
    if (variant == "events" || all) setup.make_events();
    if (all) {
      setup.step("event_record",
                 [&] { drv(cuEventRecord(setup.events[0], setup.zero_on), "cuEventRecord"); });
    }
  });
  while (!ready.load(std::memory_order_acquire)) {
  }

  // The timed first launch.
  const float a = 0.9999f, b = 1e-4f;
  const Clock::time_point t0 = Clock::now();
  if (!after) go.store(true, std::memory_order_release);
  check(cudaEventRecord(start, 0), "cudaEventRecord start");
  const Clock::time_point launch_start = Clock::now();
  fma_chain<<<blocks, threads>>>(out, span, iters, a, b);
  const Clock::time_point launch_end = Clock::now();
  check(cudaEventRecord(stop, 0), "cudaEventRecord stop");
  const Clock::time_point stop_end = Clock::now();
  check(cudaEventSynchronize(stop), "cudaEventSynchronize stop");
  const Clock::time_point sync_end = Clock::now();
  check(cudaGetLastError(), "first launch");
  if (after) go.store(true, std::memory_order_release);
  worker.join();
  check(cudaStreamSynchronize(setup.zero_on), "setup's zeroing");

  float event_ms = 0;
  check(cudaEventElapsedTime(&event_ms, start, stop), "cudaEventElapsedTime");
  unsigned long long s1[2];
  check(cudaMemcpy(s1, span, sizeof s1, cudaMemcpyDeviceToHost), "read span");

  // The same launch again, the setup done: the kernel's time with nothing else going on.
  check(cudaMemcpy(span, span_init, sizeof span_init, cudaMemcpyHostToDevice), "reset span");
  check(cudaEventRecord(start, 0), "cudaEventRecord start (second)");
  const Clock::time_point second_start = Clock::now();
  fma_chain<<<blocks, threads>>>(out, span, iters, a, b);
  const Clock::time_point second_end = Clock::now();
  check(cudaEventRecord(stop, 0), "cudaEventRecord stop (second)");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize stop (second)");
  check(cudaGetLastError(), "second launch");
  float second_ms = 0;
  check(cudaEventElapsedTime(&second_ms, start, stop), "cudaEventElapsedTime (second)");
  unsigned long long s2[2];
  check(cudaMemcpy(s2, span, sizeof s2, cudaMemcpyDeviceToHost), "read span (second)");

  std::printf(
      "%s event_ms %.3f kernel_ms %.3f launch_call_us %.1f record_end_us %.1f launch_end_us "
      "%.1f stop_end_us %.1f sync_end_us %.1f second_ms %.3f second_kernel_ms %.3f "
      "second_launch_call_us %.1f setup_steps:",
      variant.c_str(), event_ms, (s1[1] - s1[0]) / 1e6, us_since(launch_start, launch_end),
      us_since(t0, launch_start), us_since(t0, launch_end), us_since(t0, stop_end),
      us_since(t0, sync_end), second_ms, (s2[1] - s2[0]) / 1e6,
      us_since(second_start, second_end));
  for (const Step& s : setup.steps)
    std::printf(" %s %.1f %.1f", s.name, us_since(t0, s.start), us_since(t0, s.end));
  std::printf("\n");

  drv(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
  return 0;
}
