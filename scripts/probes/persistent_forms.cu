// Probe: what running a kernel in persistent form costs by itself, apart from cupreempt's task
// loop. One kernel shaped like fixtures/bench/priority_streams' low-priority kernel (each thread
// rotates one float2 INNER times: a chain of dependent multiply-adds, no shared memory, no
// barrier) in hand-written forms:
//   original     one block per task (TASKS blocks)
//   stride       as many blocks as fit on the GPU at once; block b runs tasks b, b + G, ...
//   stride_sync  the same with __syncthreads() after every task
//   claim        as many blocks as fit; one thread per block takes the next task from a global
//                counter (atomicAdd), hands it to the block through shared memory, and the block
//                meets at a barrier before and after (the shape of cupreempt's task loop, without
//                its bookkeeping)
//   claim4       the same, four tasks per claim
//   claim_1bar   claim with the task loop's hand-over: the claimed chunk in one of two shared
//                slots (alternating), one barrier per chunk, every thread reading the chunk
//                from shared memory through a shuffle of lane 0's copy
//   claim_ctx    claim_1bar with each task run through a lambda that takes a context holding
//                references to the shared slot and the launch (cupreempt's task context)
//   run_tasks    cupreempt's task loop itself (cuda_support/cupreempt/task_loop.cuh, built with
//                -I cuda_support) around the same task, as a launch outside the runtime makes
//                it: a zeroed control block per launch, no host mirror
//   run_tasks_host  the same with a host mirror (mapped pinned memory) and as a first instance,
//                as the runtime launches it: progress, lanes and the staying block's end
// Each form: LAUNCHES launches back to back timed with events (after two unmeasured ones), the
// median over ROUNDS rounds of the mean per launch, and a checksum of the output (every form
// must equal the original's).
// Build: nvcc -O3 -arch=sm_90 -std=c++17 -I cuda_support scripts/probes/persistent_forms.cu
// Usage: persistent_forms [TASKS [INNER [ROUNDS [CHUNK [BUDGET_NS]]]]]   (defaults 16384 256 7 0
//   0: the run_tasks forms' fixed chunk (0: adaptive) and chunk time budget (0: the default);
//   the task loop's own macros, e.g. -DCUPREEMPT_CLAIM_SLACK=..., at the build)
#include <algorithm>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "cupreempt/task_loop.cuh"

constexpr int BS = 256;
constexpr int LAUNCHES = 50;

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

__device__ __forceinline__ void task(const float2* in, float2* out, float c, float s, int inner,
                                     unsigned t) {
  const unsigned i = t * BS + threadIdx.x;
  float2 v = in[i];
  for (int k = 0; k < inner; ++k) {
    const float x = fmaf(c, v.x, -s * v.y), y = fmaf(s, v.x, c * v.y);
    v.x = x, v.y = y;
  }
  out[i] = v;
}

__global__ void original(const float2* in, float2* out, float c, float s, int inner, unsigned) {
  task(in, out, c, s, inner, blockIdx.x);
}

__global__ void stride(const float2* in, float2* out, float c, float s, int inner, unsigned tasks) {
  for (unsigned t = blockIdx.x; t < tasks; t += gridDim.x) task(in, out, c, s, inner, t);
}

__global__ void stride_sync(const float2* in, float2* out, float c, float s, int inner,
                            unsigned tasks) {
  for (unsigned t = blockIdx.x; t < tasks; t += gridDim.x) {
    task(in, out, c, s, inner, t);
    __syncthreads();
  }
}

template <unsigned Chunk>
__global__ void claim(const float2* in, float2* out, float c, float s, int inner, unsigned tasks,
                      unsigned* counter) {
  __shared__ unsigned first;
  for (;;) {
    if (threadIdx.x == 0) first = atomicAdd(counter, Chunk);
    __syncthreads();
    const unsigned begin = first;
    __syncthreads();  // `first` is read by all before the next claim overwrites it
    if (begin >= tasks) break;
    const unsigned end = min(begin + Chunk, tasks);
    for (unsigned t = begin; t < end; ++t) task(in, out, c, s, inner, t);
  }
}

struct Slot {
  unsigned long long begin, end;
  unsigned first, stop;
};

struct Ctx {
  const Slot& st;
  unsigned i;
  __device__ unsigned block() const { return st.first + i; }
};

// The task loop's hand-over: the leader claims one task into one of two shared slots
// (alternating), one barrier per chunk, every thread reads the chunk through a shuffle of lane
// 0's copy. Each task goes to `body` as its number, or (WithCtx) as a context that refers to
// the slot, as cupreempt's task context does.
template <bool WithCtx, class Body>
__device__ __forceinline__ void hand_over(unsigned tasks, unsigned* counter, Body&& body) {
  __shared__ Slot slots[2];
  for (unsigned parity = 0;; parity ^= 1u) {
    Slot& st = slots[parity];
    if (threadIdx.x == 0) {
      const unsigned long long begin = atomicAdd(counter, 1u);
      st.begin = begin, st.end = begin + 1 < tasks ? begin + 1 : tasks;
      st.first = (unsigned)begin, st.stop = begin >= tasks;
    }
    __syncthreads();
    if (__shfl_sync(0xffffffffu, st.stop, 0)) break;
    const unsigned n = __shfl_sync(0xffffffffu, (unsigned)(st.end - st.begin), 0);
#pragma unroll 1
    for (unsigned i = 0; i < n; ++i) {
      if constexpr (WithCtx) {
        Ctx ctx{st, i};
        body(ctx);
      } else {
        body(st.first + i);
      }
    }
  }
}

__global__ void claim_1bar(const float2* in, float2* out, float c, float s, int inner,
                           unsigned tasks, unsigned* counter) {
  hand_over<false>(tasks, counter, [&](unsigned t) { task(in, out, c, s, inner, t); });
}

__global__ void claim_ctx(const float2* in, float2* out, float c, float s, int inner,
                          unsigned tasks, unsigned* counter) {
  hand_over<true>(tasks, counter, [&](Ctx& ctx) { task(in, out, c, s, inner, ctx.block()); });
}

__global__ void wrapped(cupreempt_launch l, const float2* in, float2* out, float c, float s,
                        int inner, unsigned) {
  cupreempt::run_tasks<cupreempt::TaskCtx, false>(l, 0, 0, [&](cupreempt::TaskCtx& cp) {
    task(in, out, c, s, inner, cp.blockIdx.x);
  });
}

int main(int argc, char** argv) {
  const unsigned tasks = argc > 1 ? std::atoi(argv[1]) : 16384;
  const int inner = argc > 2 ? std::atoi(argv[2]) : 256;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  const unsigned chunk = argc > 4 ? std::atoi(argv[4]) : 0;
  const unsigned budget_ns = argc > 5 ? std::atoi(argv[5]) : 0;
  const size_t n = (size_t)tasks * BS;
  std::vector<float2> h(n);
  unsigned r = 12345;
  for (auto& v : h) {
    r = r * 1664525u + 1013904223u;
    v.x = (r >> 8) / 16777216.0f - 0.5f;
    r = r * 1664525u + 1013904223u;
    v.y = (r >> 8) / 16777216.0f - 0.5f;
  }
  float2 *in, *out;
  unsigned* counters;
  CHECK(cudaMalloc(&in, n * sizeof(float2)));
  CHECK(cudaMalloc(&out, n * sizeof(float2)));
  CHECK(cudaMalloc(&counters, (LAUNCHES + 2) * sizeof(unsigned)));
  CHECK(cudaMemcpy(in, h.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const float c = 0.99980003f, s = 0.019998667f;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float2> got(n);
  double base = 0;
  unsigned long long want = 0;
  cupreempt_control* controls;
  CHECK(cudaMalloc(&controls, (LAUNCHES + 2) * sizeof(cupreempt_control)));
  cupreempt_host* mirrors;
  CHECK(cudaHostAlloc(&mirrors, (LAUNCHES + 2) * sizeof(cupreempt_host), cudaHostAllocMapped));
  cupreempt_host* mirrors_device;
  CHECK(cudaHostGetDevicePointer(&mirrors_device, mirrors, 0));
  const char* names[] = {"original",  "stride",    "stride_sync", "claim",
                         "claim4",    "run_tasks", "run_tasks_host", "claim_1bar",
                         "claim_ctx"};
  for (int form = 0; form < 9; ++form) {
    const void* f = form == 0   ? (const void*)original
                    : form == 1 ? (const void*)stride
                    : form == 2 ? (const void*)stride_sync
                    : form == 3 ? (const void*)claim<1>
                    : form == 4 ? (const void*)claim<4>
                    : form == 7 ? (const void*)claim_1bar
                    : form == 8 ? (const void*)claim_ctx
                                : (const void*)wrapped;
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, BS, 0));
    const unsigned grid = form == 0 ? tasks : std::min<unsigned>(tasks, per_sm * sms);
    auto launch = [&](int i) {
      if (form == 0) original<<<grid, BS>>>(in, out, c, s, inner, tasks);
      if (form == 1) stride<<<grid, BS>>>(in, out, c, s, inner, tasks);
      if (form == 2) stride_sync<<<grid, BS>>>(in, out, c, s, inner, tasks);
      if (form == 3) claim<1><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 4) claim<4><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 7) claim_1bar<<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 8) claim_ctx<<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 5 || form == 6) {
        cupreempt_launch l = {controls + i, tasks, tasks, 1, 1, chunk, budget_ns, nullptr};
        if (form == 6) l.host = mirrors_device + i, l.first = 1, l.progress_shift = 4;
        wrapped<<<grid, BS>>>(l, in, out, c, s, inner, tasks);
      }
    };
    std::vector<double> means;
    for (int round = 0; round < rounds; ++round) {
      CHECK(cudaMemset(counters, 0, (LAUNCHES + 2) * sizeof(unsigned)));
      CHECK(cudaMemset(controls, 0, (LAUNCHES + 2) * sizeof(cupreempt_control)));
      std::memset(mirrors, 0, (LAUNCHES + 2) * sizeof(cupreempt_host));
      CHECK(cudaMemset(out, 0xff, n * sizeof(float2)));
      launch(LAUNCHES);
      launch(LAUNCHES + 1);
      CHECK(cudaEventRecord(a));
      for (int i = 0; i < LAUNCHES; ++i) launch(i);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      CHECK(cudaGetLastError());
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      means.push_back(ms * 1000.0 / LAUNCHES);
    }
    std::sort(means.begin(), means.end());
    const double us = means[means.size() / 2];
    CHECK(cudaMemcpy(got.data(), out, n * sizeof(float2), cudaMemcpyDeviceToHost));
    unsigned long long sum = 1469598103934665603ull;
    for (const auto& v : got) {
      unsigned w[2];
      std::memcpy(w, &v, sizeof w);
      sum = (sum ^ w[0]) * 1099511628211ull;
      sum = (sum ^ w[1]) * 1099511628211ull;
    }
    if (form == 0) base = us, want = sum;
    std::printf("%-12s grid %6u (%d per SM)  %9.2f us per launch  %.3fx  checksum %s\n",
                names[form], grid, per_sm, us, us / base, sum == want ? "equal" : "DIFFERS");
  }
  return 0;
}
