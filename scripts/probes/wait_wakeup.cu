// Probe: how soon a stream blocked on a stream memory wait (cuStreamWaitValue32) goes on once
// the value it waits for is written, by the host into pinned memory or by another stream into
// device memory (the gated links' gate, runtime/src/rt/links.rs). Each trial: the stream waits
// for the word to reach the trial's number, then runs a one-thread kernel; the host writes the
// number and times it to the stream's end (cuStreamSynchronize). Medians and p90 of 200 trials.
// Without MPS and with CUDA_DEVICE_MAX_CONNECTIONS=1 the third case never ends: the other
// stream's write waits behind the wait in the one hardware queue.
// Build: nvcc -arch=sm_90 -O3 scripts/probes/wait_wakeup.cu -lcuda -o wait_wakeup
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "probe.cuh"


__global__ void nothing() {}
// Stores into the pinned page near the word the stream will wait on, as the runtime's blocks
// store into a launch's host mirror next to its gate.
__global__ void touch(unsigned* near) {
  if (threadIdx.x == 0) near[blockIdx.x % 8] = blockIdx.x;
}

int main() {
  cudaFree(0);
  cudaStream_t s, other;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  setvbuf(stdout, nullptr, _IONBF, 0);
  unsigned* page;  // the flag, then words in its 128-byte line, then words 4 KB away
  cudaHostAlloc(&page, 8192, cudaHostAllocMapped);
  unsigned* host = page;
  *host = 0;
  unsigned* host_dev;
  cudaHostGetDevicePointer(&host_dev, host, 0);
  unsigned* page_dev = host_dev;
  unsigned* dev;
  cudaMalloc(&dev, 4);
  cudaMemset(dev, 0, 4);
  nothing<<<1, 1, 0, s>>>();
  cudaDeviceSynchronize();
  const char* names[] = {"host store to pinned memory", "host store, then an empty kernel on another stream",
                         "device memory, written by cuStreamWriteValue32 on another stream",
                         "host store; a kernel before the wait stored into the flag's 128-byte line",
                         "host store; a kernel before the wait stored 4 KB away from the flag"};
  for (int mode = 0; mode < 5; ++mode) {
    std::vector<double> us;
    for (unsigned trial = 1; trial <= 200; ++trial) {
      const unsigned value = mode * 1000 + trial;
      CUdeviceptr addr = (CUdeviceptr)(mode == 2 ? dev : host_dev);
      if (mode == 3) touch<<<1056, 64, 0, s>>>(page_dev + 1);
      if (mode == 4) touch<<<1056, 64, 0, s>>>(page_dev + 1024);
      CU_CHECK(cuStreamWaitValue32((CUstream)s, addr, value, CU_STREAM_WAIT_VALUE_GEQ));
      nothing<<<1, 1, 0, s>>>();
      std::this_thread::sleep_for(std::chrono::microseconds(500));  // the wait is blocking now
      const auto t0 = std::chrono::steady_clock::now();
      if (mode == 2) {
        CU_CHECK(cuStreamWriteValue32((CUstream)other, addr, value, 0));
      } else {
        *(volatile unsigned*)host = value;
        if (mode == 1) nothing<<<1, 1, 0, other>>>();
      }
      cudaStreamSynchronize(s);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    printf("%s: wake-up to stream end p50 %.0f us, p90 %.0f us, max %.0f us\n", names[mode],
           us[us.size() / 2], us[us.size() * 9 / 10], us.back());
  }
  return 0;
}
