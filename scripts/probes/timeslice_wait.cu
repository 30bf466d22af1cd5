// Probe: what a preempted kernel's process costs another process's kernels when each has its
// own context (no MPS), so that the GPU time-slices between the contexts that have work
// (docs/daemon.md: a preempted kernel keeps its tail block parked, and its context keeps its
// slices). No cupreempt code: one process plays the preempted batch program, another sends
// short urgent kernels and times each one's turnaround.
// Build: nvcc -arch=sm_90 -O3 scripts/probes/timeslice_wait.cu -lcuda -o timeslice_wait
// Usage: timeslice_wait batch MODE SECONDS
//          MODE: busy    back-to-back kernels of 20 ms on every SM (no scheduler)
//                parked  one block asleep on the GPU (__nanosleep, 2 us) until SECONDS pass:
//                        a preempted kernel's parked tail
//                waiting the stream blocked on a stream memory wait (cuStreamWaitValue32 on
//                        pinned host memory) until SECONDS pass, no block on the GPU
//                idle    a context and nothing in it
//        timeslice_wait urgent COUNT
//          COUNT kernels of 64 blocks of about 20 us, 0.5-1.5 ms apart; prints the launch to
//          synchronize turnaround p50 / p90 / p99 in us.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "probe.cuh"

__global__ void spin(unsigned ns, float* sink) {
  float acc = threadIdx.x;
  const unsigned long long end = now_ns() + ns;
  while (now_ns() < end) acc = acc * 0.999f + 1.0f;
  if (acc == -1.0f) *sink = acc;
}

__global__ void parked(const volatile unsigned* release) {
  while (*release == 0) __nanosleep(2000);
}

static double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s batch MODE SECONDS | urgent COUNT\n", argv[0]);
    return 2;
  }
  float* sink;
  CHECK(cudaMalloc(&sink, sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (!strcmp(argv[1], "urgent")) {
    const int count = atoi(argv[2]);
    std::mt19937 rng(42);
    std::uniform_int_distribution<int> gap_us(500, 1500);
    spin<<<64, 256, 0, s>>>(20000, sink);  // the module loaded before the timed launches
    CHECK(cudaStreamSynchronize(s));
    std::vector<double> us;
    for (int i = 0; i < count; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(gap_us(rng)));
      const auto a = std::chrono::steady_clock::now();
      spin<<<64, 256, 0, s>>>(20000, sink);
      CHECK(cudaStreamSynchronize(s));
      us.push_back(seconds_since(a) * 1e6);
    }
    std::sort(us.begin(), us.end());
    printf("urgent turnaround us: p50 %.0f p90 %.0f p99 %.0f (%d kernels of 20 us)\n",
           us[us.size() / 2], us[us.size() * 9 / 10], us[us.size() * 99 / 100], count);
    return 0;
  }
  const char* mode = argv[2];
  const double seconds = atof(argv[3]);
  const auto t0 = std::chrono::steady_clock::now();
  unsigned* release;  // pinned, mapped
  CHECK(cudaHostAlloc(&release, sizeof(unsigned), cudaHostAllocMapped));
  *release = 0;
  unsigned* release_dev;
  CHECK(cudaHostGetDevicePointer(&release_dev, release, 0));
  long launches = 0;
  if (!strcmp(mode, "busy")) {
    while (seconds_since(t0) < seconds) {
      spin<<<8 * sms, 256, 0, s>>>(20000000, sink);
      CHECK(cudaStreamSynchronize(s));
      ++launches;
    }
  } else if (!strcmp(mode, "parked")) {
    parked<<<1, 32, 0, s>>>(release_dev);
    CHECK(cudaGetLastError());
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    *(volatile unsigned*)release = 1;
    CHECK(cudaStreamSynchronize(s));
  } else if (!strcmp(mode, "waiting")) {
    spin<<<1, 32, 0, s>>>(1000, sink);
    CUresult r = cuStreamWaitValue32((CUstream)s, (CUdeviceptr)release_dev, 1,
                                     CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
      const char* what = nullptr;
      cuGetErrorString(r, &what);
      fprintf(stderr, "cuStreamWaitValue32: %s\n", what ? what : "?");
      return 1;
    }
    spin<<<1, 32, 0, s>>>(1000, sink);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    *(volatile unsigned*)release = 1;
    CHECK(cudaStreamSynchronize(s));
  } else if (!strcmp(mode, "idle")) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  printf("batch %s: %.1f s, %ld launches\n", mode, seconds_since(t0), launches);
  return 0;
}
