// Probe: how long a command written on a high-priority stream takes to reach the blocks of a
// kernel that fills the GPU, in the runtime's shape but without cupreempt. The benchmark's
// preemption latency (docs/bench/README.md) runs from an event on the control stream before
// the command to the last block's decision to yield; with chunks of 5 µs its median is still
// 12-28 µs. This splits off the command's trip: a kernel of 8 blocks of 256 threads per SM
// whose thread 0 looks at a device word every LOOK_NS ns (0: without a pause) and stamps
// %globaltimer when it changes; an event, then cuStreamWriteValue32 on a stream of the
// greatest priority. The event's time on the GPU clock comes from a stamp kernel and an event
// recorded before the kernel (the runtime's clock, runtime/src/rt/clock.rs): stamp plus the
// events' elapsed time.
//
// LOAD 1: the blocks' other warps stream a 4 GiB buffer (read, add, write) meanwhile, as a
// memory-bound kernel does. OPS, what the host enqueues after the event: `w` one write (the
// default); `rt` the command and its number as two writes, then an untimed event for the
// landing; `b` the same with both writes in one cuStreamBatchMemOp, as the runtime sends a
// command (runtime/src/rt/kernel.rs, send; driver.rs, write_values).
//
// Usage: command_path LOOK_NS [RUNS] [LOAD] [OPS]   Prints, over RUNS runs (default 30), the
// medians and the largest of: the first block to see the command, the median block, the last
// block (µs after the event), and the host's time in the event's record and in the calls after
// it.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <vector>

#include "probe.cuh"

__global__ void stamp(unsigned long long* out) { *out = now_ns(); }

__global__ void victim(const volatile unsigned* cmd, unsigned long long look_ns,
                       unsigned long long* seen, float4* buf, size_t per_block) {
  __shared__ volatile int stop;
  if (threadIdx.x == 0) stop = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (;;) {
      if (*cmd) {
        seen[blockIdx.x] = now_ns();
        stop = 1;
        break;
      }
      const unsigned long long t0 = now_ns();
      while (now_ns() - t0 < look_ns) {
      }
    }
  } else if (buf && threadIdx.x >= 32) {  // LOAD: warps 1-7 keep the memory busy
    float4* p = buf + blockIdx.x * per_block;
    while (!stop)
      for (size_t i = threadIdx.x - 32; i < per_block && !stop; i += blockDim.x - 32) {
        float4 v = p[i];
        v.x += 1.0f;
        p[i] = v;
      }
  }
  __syncthreads();
}

static double since_us(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: command_path LOOK_NS [RUNS] [LOAD] [OPS]\n");
    return 2;
  }
  const unsigned long long look_ns = strtoull(argv[1], nullptr, 10);
  const int runs = argc > 2 ? atoi(argv[2]) : 30;
  const bool load = argc > 3 && atoi(argv[3]) != 0;
  const char* ops = argc > 4 ? argv[4] : "w";
  if (strcmp(ops, "w") && strcmp(ops, "rt") && strcmp(ops, "b")) {
    fprintf(stderr, "OPS: w, rt or b\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  int sms = 0, least = 0, greatest = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t work, control;
  CHECK(cudaStreamCreateWithPriority(&work, cudaStreamNonBlocking, least));
  CHECK(cudaStreamCreateWithPriority(&control, cudaStreamNonBlocking, greatest));
  const unsigned grid = 8 * (unsigned)sms;
  unsigned* cmd;
  unsigned long long *seen, *tie;
  CHECK(cudaMalloc(&cmd, sizeof(unsigned)));
  CHECK(cudaMalloc(&seen, grid * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&tie, sizeof(unsigned long long)));
  float4* buf = nullptr;
  const size_t buf_bytes = size_t(4) << 30, per_block = buf_bytes / sizeof(float4) / grid;
  if (load) {
    CHECK(cudaMalloc(&buf, buf_bytes));
    CHECK(cudaMemset(buf, 0, buf_bytes));
  }
  cudaEvent_t before, request, landed;
  CHECK(cudaEventCreate(&before));
  CHECK(cudaEventCreate(&request));
  CHECK(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming));
  std::vector<double> first, mid, last, record_us, after_us;
  std::vector<unsigned long long> h(grid);
  for (int r = 0; r < runs; ++r) {
    // The clock: a stamp and an event on the control stream while the GPU is idle.
    stamp<<<1, 1, 0, control>>>(tie);
    CHECK(cudaEventRecord(before, control));
    CHECK(cudaStreamSynchronize(control));
    unsigned long long t0 = 0;
    CHECK(cudaMemcpy(&t0, tie, sizeof t0, cudaMemcpyDeviceToHost));
    CHECK(cudaMemsetAsync(cmd, 0, sizeof(unsigned), work));
    CHECK(cudaMemsetAsync(seen, 0, grid * sizeof(unsigned long long), work));
    victim<<<grid, 256, 0, work>>>(cmd, look_ns, seen, buf, per_block);
    CHECK(cudaStreamSynchronize(control));
    // Every block resident and looking (8 per SM fit at once), at a random phase of its pause.
    const unsigned long long wait_us = 300 + (unsigned long long)(rand() % 200);
    const auto until = clock();
    while ((double)(clock() - until) / CLOCKS_PER_SEC * 1e6 < (double)wait_us) {
    }
    const auto h0 = std::chrono::steady_clock::now();
    CHECK(cudaEventRecord(request, control));
    record_us.push_back(since_us(h0));
    const auto h1 = std::chrono::steady_clock::now();
    if (!strcmp(ops, "w")) {
      CU_CHECK(cuStreamWriteValue32((CUstream)control, (CUdeviceptr)cmd, 1, 0));
    } else if (!strcmp(ops, "rt")) {  // the command, then its number (the tie word stands in)
      CU_CHECK(cuStreamWriteValue32((CUstream)control, (CUdeviceptr)cmd, 1, 0));
      CU_CHECK(cuStreamWriteValue32((CUstream)control, (CUdeviceptr)tie, 2, 0));
      CHECK(cudaEventRecord(landed, control));
    } else {
      CUstreamBatchMemOpParams p[2];
      memset(p, 0, sizeof p);
      p[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
      p[0].writeValue.address = (CUdeviceptr)cmd;
      p[0].writeValue.value = 1;
      p[1] = p[0];
      p[1].writeValue.address = (CUdeviceptr)tie;
      p[1].writeValue.value = 2;
      CU_CHECK(cuStreamBatchMemOp((CUstream)control, 2, p, 0));
      CHECK(cudaEventRecord(landed, control));
    }
    after_us.push_back(since_us(h1));
    CHECK(cudaStreamSynchronize(work));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, before, request));
    const double at = (double)t0 + (double)ms * 1e6;
    CHECK(cudaMemcpy(h.data(), seen, grid * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::vector<double> d;
    for (unsigned long long s : h)
      if (s) d.push_back(((double)s - at) / 1e3);
    if (d.size() != grid) {
      fprintf(stderr, "run %d: %zu of %u blocks saw the command\n", r, d.size(), grid);
      return 1;
    }
    std::sort(d.begin(), d.end());
    first.push_back(d.front());
    mid.push_back(d[d.size() / 2]);
    last.push_back(d.back());
  }
  const auto most = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  printf("look every %llu ns, %u blocks, %d runs, load %d, ops %s: first block %.1f us (largest "
         "%.1f), median block %.1f (%.1f), last block %.1f (%.1f) after the request's event; host: "
         "record %.1f us (%.1f), calls after it %.1f (%.1f)\n",
         look_ns, grid, runs, (int)load, ops, median(first), most(first), median(mid), most(mid),
         median(last), most(last), median(record_us), most(record_us), median(after_us),
         most(after_us));
  return 0;
}
