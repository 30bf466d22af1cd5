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
//   claim_slow   claim with a load's round trip before each claim (the task loop reads the
//                control word before it claims)
//   claim_1bar   claim with the task loop's hand-over: the claimed chunk in one of two shared
//                slots (alternating), one barrier per chunk, every thread reading the chunk
//                from shared memory through a shuffle of lane 0's copy
//   claim_2bar   claim_1bar with a second barrier once every thread has read the chunk (the
//                claim loop's two barriers per claim)
//   claim_ctx    claim_1bar with each task run through a lambda that takes a context holding
//                a reference to the shared slot
//   claim_tctx   claim_1bar with cupreempt's own task context (cupreempt::TaskCtx built from the
//                launch's parameters, cupreempt_launch, and cupreempt::BlockState)
//   claim_tctx_r32  claim_tctx held to 32 registers as the runtime's capped wrapper is
//                (`wrapped` below): what the cap costs the task itself
//   claim_end    claim_tctx with the task loop's end of a block: every thread fences, the
//                block meets, the leader retires its tasks with an atomic
//   claim_pad    claim with PAD dependent integer instructions by the leader before each claim
//                (the task loop's step between two chunks is some 230 instructions): whether
//                a leader's instructions cost in proportion to their number while other
//                blocks' warps compute on the SM
//   claim_pad150_after  claim_pad with 150, the leader's instructions after the barrier (before
//                its own task) instead of before the claim
//   claim_ahead  claim, but the leader takes the next task from the counter as the block starts
//                the current one (its answer arrives while the task runs): no claim latency
//                between two tasks, and each block holds one task more than it runs
//   dispatch     not persistent: the original grid, and each block's leader reads a word (as a
//                block would read the launch's command) and takes its task from a global counter
//                (atomicAdd) before the block runs it, handing it over through shared memory
//                and one barrier: tasks in the order blocks start, so a launch stopped at any
//                moment has run a prefix of them, whatever order the hardware starts blocks in
//   dispatch_end dispatch, and once the block's task is done it meets at a barrier and its
//                leader counts it retired (a reduction, no answer awaited): what a launch that
//                may have to wait for the rest of its tasks elsewhere would count
//   dispatch_sms dispatch_end, and the leader also counts its block on its SM (%smid) as it
//                starts and off as it ends: what the runtime would need to see which SMs a
//                launch still holds
//   dispatch_native  the original grid, each leader reading the word before its block runs
//                its own task (blockIdx.x): what a check per block costs without the counter
//   run_tasks    cupreempt's task loop itself (cuda_support/cupreempt/task_loop.cuh, built with
//                -I cuda_support) around the same task, as a launch outside the runtime makes
//                it: a zeroed control block per launch, no host mirror
//   run_tasks_host  the same with a host mirror (mapped pinned memory) and as a first instance,
//                as the runtime launches it: progress, lanes and the staying block's end
// Each form: LAUNCHES launches back to back timed with events (after two unmeasured ones), the
// median over ROUNDS rounds of the mean per launch, and a checksum of the output (every form
// must equal the original's).
// With -DPROBE_PATHFINDER_TASK the task is fixtures/bench/pathfinder's kernel body (INNER is
// its `steps`; TASKS 19418 and INNER 20 are its large launches).
// With -DPROBE_BARRIER_TASK the task is shaped like fixtures/bench/pathfinder instead: INNER
// rows of a three-point minimum over shared memory, two barriers per row (the forms without
// a barrier between tasks still need none: every task's last barrier comes after its last
// read of shared memory, and its first store follows the previous task's last barrier).
// Build: nvcc -O3 -arch=sm_90 -std=c++17 -I cuda_support scripts/probes/persistent_forms.cu
// With -DPROBE_DRAIN as well, and built against task_loop_cuts.py's `drain-stamps` copy, the
// run_tasks forms also print where their drain goes: the latest block's stamps in the task
// loop's last steps (that copy's comment), against the last task's end.
// With -DPROBE_RAMP as well, and built against task_loop_cuts.py's `ramp-stamps` copy, the
// run_tasks forms also print where a block's start goes: the mean over blocks of enter()'s
// stamps (that copy's comment) against the block's entry.
// With -DPROBE_STAMPS each block's thread 0 stamps %globaltimer at the block's entry, the start
// of its first task, the end of each task and its exit, and each form prints, for its last
// launch: the kernel's span (first entry to last exit), the ramp (entry to the first task's
// start, mean and max over blocks), the idle tail (how long blocks wait after their last task
// for the kernel's last task to end, mean) and the drain (last task's end to last exit). The
// stamps cost every form the same few instructions per task.
// With -DPROBE_STEP_CYCLES as well, and built against task_loop_cuts.py's `step-cycles` copy
// (or another that defines CUPREEMPT_HAS_STEP_CYCLES; the tree's headers build too, without
// these lines, so that persistent_bisect.sh can pass the flag to every build), the run_tasks
// forms also print how long the leader's step between chunks takes (clock64
// cycles from next_chunk's first instruction to its last, mean over every step of every timed
// launch) and how many steps there were per launch: the step's latency, where ncu's source
// counters give its instructions; and how long the block's second warp waits at the barrier
// after the step (claim's too, after its claim). Built against the `step-split` copy,
// the steps that claim beside the command's look are also split in three.
// With -DCUPREEMPT_CHUNK_LOG the run_tasks forms also print their claims per launch by size
// (the task loop's chunk log, bins of powers of two) and how many the tail's share cut.
// With -DPROBE_PDL the run_tasks forms are launched as the runtime launches a first instance
// (programmatic dependent launch: each may start while the launch before it drains), and with
// -DPROBE_PDL_EVENT an event is recorded after each of them, as the runtime records an
// instance's end.
// INNER 0 makes the task a stream: each thread copies its float2 (BabelStream's shape; about
// 1 us per task with 8 blocks per SM on the H200).
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

struct Stamps {
  unsigned long long enter, first, last_begin, last, exit;
  unsigned long long tasks;
  unsigned smid;
};
#ifdef PROBE_STAMPS
__device__ Stamps* g_stamps;
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");  // in order with memory
  return t;
}
// Declared first in every kernel: stamps the block's entry and (destructor) its exit.
struct BlockStamp {
  __device__ BlockStamp() {
    if (threadIdx.x == 0) {
      Stamps& r = g_stamps[blockIdx.x];
      r.enter = now_ns(), r.first = 0, r.tasks = 0;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(r.smid));
    }
  }
  __device__ ~BlockStamp() {
    if (threadIdx.x == 0) g_stamps[blockIdx.x].exit = now_ns();
  }
};
#define BLOCK_STAMP BlockStamp block_stamp_
#else
#define BLOCK_STAMP (void)0
#endif

#ifdef PROBE_PATHFINDER_TASK
#include <climits>
__constant__ unsigned g_pathfinder_cols;  // TASKS tiles of BS - 2 * INNER columns
__device__ __forceinline__ int pathfinder_weight(int row, int col) {
  unsigned h = (unsigned)row * 0x9e3779b1u ^ (unsigned)col * 0x85ebca77u;
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12;
  return (int)(h % 10u);
}
#endif

__device__ __forceinline__ void task(const float2* in, float2* out, float c, float s, int inner,
                                     unsigned t) {
#ifdef PROBE_STAMPS
  if (threadIdx.x == 0) {
    const unsigned long long t = now_ns();
    if (!g_stamps[blockIdx.x].first) g_stamps[blockIdx.x].first = t;
    g_stamps[blockIdx.x].last_begin = t;
  }
#endif
  const unsigned i = t * BS + threadIdx.x;
#if defined(PROBE_PATHFINDER_TASK)
  // fixtures/bench/pathfinder's kernel itself: INNER rows of a pyramid over a tile with a halo
  // of INNER columns, hashed weights, two barriers per row (the buffers read as ints).
  (void)i, (void)c, (void)s;
  __shared__ int prev[BS], result[BS];
  const int* src = reinterpret_cast<const int*>(in);
  int* dst = reinterpret_cast<int*>(out);
  const int tx = threadIdx.x, steps = inner, cols = (int)g_pathfinder_cols;
  const int x = (BS - 2 * steps) * (int)t - steps + tx;
  const bool valid = x >= 0 && x < cols;
  prev[tx] = valid ? src[x] & 0xffff : INT_MAX;
  __syncthreads();
  for (int k = 0; k < steps; ++k) {
    const bool compute = valid && tx >= k + 1 && tx <= BS - 2 - k;
    if (compute) {
      const int m = min(prev[tx - 1], min(prev[tx], prev[tx + 1]));
      result[tx] = m + pathfinder_weight(7 + k, x);
    }
    __syncthreads();
    if (compute) prev[tx] = result[tx];
    __syncthreads();
  }
  if (valid && tx >= steps && tx < BS - steps) dst[x] = prev[tx];
#elif defined(PROBE_BARRIER_TASK)
  // Shaped like fixtures/bench/pathfinder: INNER rows of a stencil over shared memory, two
  // barriers per row, little arithmetic between them.
  __shared__ float prev[BS], next[BS];
  const unsigned tx = threadIdx.x;
  const bool inside = tx > 0 && tx + 1 < BS;
  prev[tx] = in[i].x;
  __syncthreads();
  for (int k = 0; k < inner; ++k) {
    if (inside) next[tx] = fminf(prev[tx - 1], fminf(prev[tx], prev[tx + 1])) + c * (float)k;
    __syncthreads();
    if (inside) prev[tx] = next[tx];
    __syncthreads();
  }
  out[i] = make_float2(prev[tx], s);
#else
  float2 v = in[i];
  for (int k = 0; k < inner; ++k) {
    const float x = fmaf(c, v.x, -s * v.y), y = fmaf(s, v.x, c * v.y);
    v.x = x, v.y = y;
  }
  out[i] = v;
#endif
#ifdef PROBE_STAMPS
  if (threadIdx.x == 0) g_stamps[blockIdx.x].last = now_ns(), ++g_stamps[blockIdx.x].tasks;
#endif
}

__global__ void original(const float2* in, float2* out, float c, float s, int inner, unsigned) {
  BLOCK_STAMP;
  task(in, out, c, s, inner, blockIdx.x);
}

__global__ void stride(const float2* in, float2* out, float c, float s, int inner, unsigned tasks) {
  BLOCK_STAMP;
  for (unsigned t = blockIdx.x; t < tasks; t += gridDim.x) task(in, out, c, s, inner, t);
}

__global__ void stride_sync(const float2* in, float2* out, float c, float s, int inner,
                            unsigned tasks) {
  BLOCK_STAMP;
  for (unsigned t = blockIdx.x; t < tasks; t += gridDim.x) {
    task(in, out, c, s, inner, t);
    __syncthreads();
  }
}

#ifdef PROBE_STEP_CYCLES
__device__ unsigned long long claim_barrier_cycles[2];  // claim<1>'s second warp at its barrier
#endif

// The leader's PAD dependent instructions, which the compiler cannot drop: `counter` moves
// if they end at one value, which they never do.
template <int Pad>
__device__ __forceinline__ void leader_pad(unsigned*& counter) {
  unsigned pad = 0;
  if (Pad) asm volatile("mov.u32 %0, %%clock;" : "=r"(pad));  // unknown to ptxas
#pragma unroll
  for (int k = 0; k < Pad; ++k) asm volatile("mad.lo.u32 %0, %0, %0, 1;" : "+r"(pad));
  if (Pad && pad == 0x9e3779b9u) counter += 1;
}

// PadAfter: the leader's PAD instructions come after the barrier, before its own task, instead
// of before the claim: whether a leader's work costs less once its block is released.
template <unsigned Chunk, bool Slow = false, int Pad = 0, bool PadAfter = false>
__global__ void claim(const float2* in, float2* out, float c, float s, int inner, unsigned tasks,
                      unsigned* counter) {
  BLOCK_STAMP;
  __shared__ unsigned first;
  for (;;) {
    if (threadIdx.x == 0) {
      if (!PadAfter) leader_pad<Pad>(counter);
      // Slow: the claim waits for a load's answer, as the task loop's claim waits for the
      // command (the word is never all ones, but the compiler cannot know).
      if (Slow && *(volatile unsigned*)(counter + 1024) == ~0u)
        first = tasks;
      else
        first = atomicAdd(counter, Chunk);
    }
#ifdef PROBE_STEP_CYCLES
    const long long barrier_begin = clock64();
#endif
    __syncthreads();
#ifdef PROBE_STEP_CYCLES
    if (threadIdx.x == 32 && Chunk == 1 && !Slow && !Pad) {  // as the step-cycles copy's loop
      atomicAdd(&claim_barrier_cycles[0], (unsigned long long)(clock64() - barrier_begin));
      atomicAdd(&claim_barrier_cycles[1], 1ull);
    }
#endif
    const unsigned begin = first;
    __syncthreads();  // `first` is read by all before the next claim overwrites it
    if (begin >= tasks) break;
    if (PadAfter && threadIdx.x == 0) leader_pad<Pad>(counter);
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

// How hand_over gives each task to its body.
enum class Give { Number, Ctx, TaskCtx };

// The block's decision in cupreempt's BlockState: its size word (the chunk's tasks, or all
// ones where the block stops), or the stop flag of headers older than that word, so that the
// probe builds against either (a branch's or an older build's headers, to compare).
template <class S>
__device__ auto set_decision(S& s, bool stop, unsigned n, int) -> decltype(void(s.count = 0u)) {
  s.count = stop ? ~0u : n;
}
template <class S>
__device__ void set_decision(S& s, bool stop, unsigned, long) {
  s.stop = stop;
}

// The task loop's hand-over: the leader claims one task into one of two shared slots
// (alternating), one barrier per chunk, every thread reads the chunk through a shuffle of lane
// 0's copy. Each task goes to `body` as its number (Give::Number), as a context that refers to
// the slot (Give::Ctx), or as cupreempt's task context (Give::TaskCtx, from the launch `l`).
// Second: a second barrier after every thread has read the chunk.
template <Give G, bool Second = false, class Body>
__device__ __forceinline__ void hand_over(const cupreempt_launch& l, unsigned tasks,
                                          unsigned* counter, Body&& body) {
  __shared__ Slot slots[2];
  __shared__ cupreempt::BlockState states[2];
  for (unsigned parity = 0;; parity ^= 1u) {
    Slot& st = slots[parity];
    cupreempt::BlockState& bs = states[parity];
    if (threadIdx.x == 0) {
      const unsigned long long begin = atomicAdd(counter, 1u);
      st.begin = begin, st.end = begin + 1 < tasks ? begin + 1 : tasks;
      st.first = (unsigned)begin, st.stop = begin >= tasks;
      bs.begin = st.begin;
      set_decision(bs, st.stop, (unsigned)(st.end - st.begin), 0);
      bs.first = make_uint3(st.first, 0, 0);
    }
    __syncthreads();
    if (__shfl_sync(0xffffffffu, st.stop, 0)) break;
    const unsigned n = __shfl_sync(0xffffffffu, (unsigned)(st.end - st.begin), 0);
    if (Second) __syncthreads();
#pragma unroll 1
    for (unsigned i = 0; i < n; ++i) {
      if constexpr (G == Give::Ctx) {
        Ctx ctx{st, i};
        body(ctx);
      } else if constexpr (G == Give::TaskCtx) {
        cupreempt::TaskCtx ctx(l, bs, i);
        body(ctx);
      } else {
        body(st.first + i);
      }
    }
  }
}

__global__ void claim_1bar(cupreempt_launch l, const float2* in, float2* out, float c, float s,
                           int inner, unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  hand_over<Give::Number>(l, tasks, counter, [&](unsigned t) { task(in, out, c, s, inner, t); });
}

__global__ void claim_2bar(cupreempt_launch l, const float2* in, float2* out, float c, float s,
                           int inner, unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  hand_over<Give::Number, true>(l, tasks, counter,
                                [&](unsigned t) { task(in, out, c, s, inner, t); });
}

__global__ void claim_ctx(cupreempt_launch l, const float2* in, float2* out, float c, float s,
                          int inner, unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  hand_over<Give::Ctx>(l, tasks, counter,
                       [&](Ctx& ctx) { task(in, out, c, s, inner, ctx.block()); });
}

__global__ void claim_tctx(cupreempt_launch l, const float2* in, float2* out, float c, float s,
                           int inner, unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  hand_over<Give::TaskCtx>(l, tasks, counter, [&](cupreempt::TaskCtx& ctx) {
    task(in, out, c, s, inner, ctx.blockIdx.x);
  });
}

__global__ void __launch_bounds__(1024, CUPREEMPT_R32_MIN_BLOCKS)
    claim_tctx_r32(cupreempt_launch l, const float2* in, float2* out, float c, float s, int inner,
                   unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  hand_over<Give::TaskCtx>(l, tasks, counter, [&](cupreempt::TaskCtx& ctx) {
    task(in, out, c, s, inner, ctx.blockIdx.x);
  });
}

__global__ void claim_end(cupreempt_launch l, const float2* in, float2* out, float c, float s,
                          int inner, unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  __shared__ unsigned ran;
  if (threadIdx.x == 0) ran = 0;
  hand_over<Give::TaskCtx>(l, tasks, counter, [&](cupreempt::TaskCtx& ctx) {
    task(in, out, c, s, inner, ctx.blockIdx.x);
    if (threadIdx.x == 0) ++ran;
  });
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && ran) atomicAdd(&l.control->retired_tasks, (unsigned long long)ran);
}

__global__ void claim_ahead(const float2* in, float2* out, float c, float s, int inner,
                            unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  __shared__ unsigned slot[2];
  if (threadIdx.x == 0) slot[0] = atomicAdd(counter, 1u);
  __syncthreads();
  for (unsigned parity = 0;; parity ^= 1u) {
    const unsigned t = slot[parity];
    if (t >= tasks) break;
    unsigned next = 0;
    if (threadIdx.x == 0) next = atomicAdd(counter, 1u);  // answered while the task runs
    task(in, out, c, s, inner, t);
    if (threadIdx.x == 0) slot[parity ^ 1u] = next;
    __syncthreads();
  }
}

// Dispatch: one task per block, taken from `counter` after a look at the word a command
// would be in (counter + 1024, never all ones, but the compiler cannot know).
__global__ void dispatch(const float2* in, float2* out, float c, float s, int inner,
                         unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  __shared__ unsigned taken;
  if (threadIdx.x == 0)
    taken = *(volatile unsigned*)(counter + 1024) == ~0u ? tasks : atomicAdd(counter, 1u);
  __syncthreads();
  const unsigned t = __shfl_sync(0xffffffffu, taken, 0);
  if (t >= tasks) return;
  task(in, out, c, s, inner, t);
}

// Counts, 1,024 words per launch: counter[0] the tasks taken, counter[1] retired,
// counter[2 + smid] blocks on the SM (dispatch_sms). The word read as the command,
// counter + 1024, is the next launch's count of tasks taken: never all ones.
template <bool OnSms>
__global__ void dispatch_end(const float2* in, float2* out, float c, float s, int inner,
                             unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  __shared__ unsigned taken;
  unsigned smid = 0;
  if (threadIdx.x == 0) {
    if (OnSms) {
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
      atomicAdd(counter + 2 + smid % 512, 1u);
    }
    taken = *(volatile unsigned*)(counter + 1024) == ~0u ? tasks : atomicAdd(counter, 1u);
  }
  __syncthreads();
  const unsigned t = __shfl_sync(0xffffffffu, taken, 0);
  if (t < tasks) task(in, out, c, s, inner, t);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(counter + 1, 1u);  // no answer used: a reduction
    if (OnSms) atomicSub(counter + 2 + smid % 512, 1u);
  }
}

__global__ void dispatch_native(const float2* in, float2* out, float c, float s, int inner,
                                unsigned tasks, unsigned* counter) {
  BLOCK_STAMP;
  __shared__ unsigned stop;
  if (threadIdx.x == 0) stop = *(volatile unsigned*)(counter + 1024) == ~0u;
  __syncthreads();
  if (__shfl_sync(0xffffffffu, stop, 0)) return;
  task(in, out, c, s, inner, blockIdx.x);
}

#if defined(PROBE_BARRIER_TASK) || defined(PROBE_PATHFINDER_TASK)
constexpr bool kTaskBarrier = true;  // the next task reuses this one's shared memory
#else
constexpr bool kTaskBarrier = false;
#endif
// Held to 32 registers as the runtime's r32 wrapper is (launch.cuh picks it where that keeps
// the original's occupancy, as it does for every task of this probe).
__global__ void __launch_bounds__(1024, CUPREEMPT_R32_MIN_BLOCKS) wrapped(cupreempt_launch l, const float2* in, float2* out, float c, float s,
                        int inner, unsigned) {
  BLOCK_STAMP;
  cupreempt::run_tasks<cupreempt::TaskCtx, kTaskBarrier>(l, 0, 0, [&](cupreempt::TaskCtx& cp) {
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
  // One word per launch for the claim forms; 1,024 per launch for dispatch_end's counts.
  constexpr size_t kCounters = (LAUNCHES + 2) * 1024 + 1024;
  CHECK(cudaMalloc(&counters, kCounters * sizeof(unsigned)));
  CHECK(cudaMemcpy(in, h.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
#ifdef PROBE_PATHFINDER_TASK
  const unsigned cols = tasks * (BS - 2 * inner);
  CHECK(cudaMemcpyToSymbol(g_pathfinder_cols, &cols, sizeof cols));
#endif
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const float c = 0.99980003f, s = 0.019998667f;
  cudaEvent_t a, b;
#ifdef PROBE_PDL_EVENT
  std::vector<cudaEvent_t> ends(LAUNCHES + 2);
  for (auto& ev : ends) CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
#endif
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float2> got(n);
#ifdef PROBE_STAMPS
  Stamps* stamps;
  CHECK(cudaMalloc(&stamps, (size_t)tasks * sizeof(Stamps)));
  CHECK(cudaMemcpyToSymbol(g_stamps, &stamps, sizeof stamps));
  std::vector<Stamps> hs(tasks);
#endif
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
                         "claim_ctx", "claim_tctx", "claim_end", "claim_ahead", "claim_slow",
                         "claim_pad50", "claim_pad150", "claim_2bar", "dispatch",
                         "dispatch_native", "dispatch_end", "dispatch_sms", "claim_pad150_after",
                         "claim_tctx_r32"};
  for (int form = 0; form < 22; ++form) {
    const void* f = form == 0   ? (const void*)original
                    : form == 1 ? (const void*)stride
                    : form == 2 ? (const void*)stride_sync
                    : form == 3 ? (const void*)claim<1>
                    : form == 4 ? (const void*)claim<4>
                    : form == 7 ? (const void*)claim_1bar
                    : form == 8 ? (const void*)claim_ctx
                    : form == 9 ? (const void*)claim_tctx
                    : form == 10 ? (const void*)claim_end
                    : form == 11 ? (const void*)claim_ahead
                    : form == 12 ? (const void*)claim<1, true>
                    : form == 13 ? (const void*)claim<1, false, 50>
                    : form == 14 ? (const void*)claim<1, false, 150>
                    : form == 15 ? (const void*)claim_2bar
                    : form == 16 ? (const void*)dispatch
                    : form == 17 ? (const void*)dispatch_native
                    : form == 18 ? (const void*)dispatch_end<false>
                    : form == 19 ? (const void*)dispatch_end<true>
                    : form == 20 ? (const void*)claim<1, false, 150, true>
                    : form == 21 ? (const void*)claim_tctx_r32
                                : (const void*)wrapped;
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, BS, 0));
    const unsigned grid =
        form == 0 || (form >= 16 && form < 20) ? tasks : std::min<unsigned>(tasks, per_sm * sms);
    auto launch = [&](int i) {
      if (form == 0) original<<<grid, BS>>>(in, out, c, s, inner, tasks);
      if (form == 1) stride<<<grid, BS>>>(in, out, c, s, inner, tasks);
      if (form == 2) stride_sync<<<grid, BS>>>(in, out, c, s, inner, tasks);
      if (form == 3) claim<1><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 4) claim<4><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      cupreempt_launch l = {controls + i, tasks, tasks, 1, 1, chunk, budget_ns, nullptr};
      if (form == 7) claim_1bar<<<grid, BS>>>(l, in, out, c, s, inner, tasks, counters + i);
      if (form == 15) claim_2bar<<<grid, BS>>>(l, in, out, c, s, inner, tasks, counters + i);
      if (form == 8) claim_ctx<<<grid, BS>>>(l, in, out, c, s, inner, tasks, counters + i);
      if (form == 9) claim_tctx<<<grid, BS>>>(l, in, out, c, s, inner, tasks, counters + i);
      if (form == 10) claim_end<<<grid, BS>>>(l, in, out, c, s, inner, tasks, counters + i);
      if (form == 21) claim_tctx_r32<<<grid, BS>>>(l, in, out, c, s, inner, tasks, counters + i);
      if (form == 11) claim_ahead<<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 12) claim<1, true><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 13) claim<1, false, 50><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 14) claim<1, false, 150><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 20)
        claim<1, false, 150, true><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 16) dispatch<<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 17) dispatch_native<<<grid, BS>>>(in, out, c, s, inner, tasks, counters + i);
      if (form == 18)
        dispatch_end<false><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + 1024 * i);
      if (form == 19)
        dispatch_end<true><<<grid, BS>>>(in, out, c, s, inner, tasks, counters + 1024 * i);
      if (form == 5 || form == 6) {
        if (form == 6) l.host = mirrors_device + i, l.first = 1, l.progress_shift = 4;
#ifdef PROBE_PDL
        // Programmatic dependent launch: this launch may start while the one before it in the
        // stream drains (the task loop waits for it before its first task).
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(grid), cfg.blockDim = dim3(BS);
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr, cfg.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&cfg, wrapped, l, (const float2*)in, out, c, s, inner, tasks));
#else
        wrapped<<<grid, BS>>>(l, in, out, c, s, inner, tasks);
#endif
#ifdef PROBE_PDL_EVENT
        CHECK(cudaEventRecord(ends[i]));  // as the runtime records each instance's end
#endif
      }
    };
    std::vector<double> means;
#ifdef PROBE_STEP_CYCLES
    unsigned long long steps[8] = {};  // the step-split copy's counts, the most of any
#endif
    for (int round = 0; round < rounds; ++round) {
      CHECK(cudaMemset(counters, 0, kCounters * sizeof(unsigned)));
      CHECK(cudaMemset(controls, 0, (LAUNCHES + 2) * sizeof(cupreempt_control)));
      std::memset(mirrors, 0, (LAUNCHES + 2) * sizeof(cupreempt_host));
      CHECK(cudaMemset(out, 0xff, n * sizeof(float2)));
      launch(LAUNCHES);
      launch(LAUNCHES + 1);
#ifdef PROBE_STEP_CYCLES
#ifdef CUPREEMPT_HAS_STEP_CYCLES
      CHECK(cudaMemcpyToSymbol(cupreempt::step_cycles, steps, sizeof cupreempt::step_cycles));
#endif
      CHECK(cudaMemcpyToSymbol(claim_barrier_cycles, steps, 2 * sizeof steps[0]));
#endif
#ifdef CUPREEMPT_CHUNK_LOG
      const unsigned long long zeros[32] = {};
      CHECK(cudaMemcpyToSymbol(cupreempt::chunk_log, zeros, sizeof zeros));
#endif
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
#ifdef PROBE_STEP_CYCLES
#ifdef CUPREEMPT_HAS_STEP_CYCLES
    if (form == 5 || form == 6) {  // the last round's timed launches
      unsigned long long got_steps[8] = {};
      CHECK(cudaMemcpyFromSymbol(got_steps, cupreempt::step_cycles, sizeof cupreempt::step_cycles));
#ifdef CUPREEMPT_HAS_STEP_SPLIT
      if (got_steps[7])
        std::printf("  steps that claim beside the command (%.0f per launch): %.1f cycles to the "
                    "claim, %.1f to its answer in use, %.1f after (means)\n",
                    (double)got_steps[7] / LAUNCHES, (double)got_steps[4] / got_steps[7],
                    (double)got_steps[5] / got_steps[7], (double)got_steps[6] / got_steps[7]);
#endif
      std::printf("  leader's step: %.1f cycles (mean), %.0f steps per launch; second warp at "
                  "the barrier after it: %.1f cycles (mean)\n",
                  got_steps[1] ? (double)got_steps[0] / got_steps[1] : 0.0,
                  (double)got_steps[1] / LAUNCHES,
                  got_steps[3] ? (double)got_steps[2] / got_steps[3] : 0.0);
    }
#endif
    if (form == 3) {
      unsigned long long got[2];
      CHECK(cudaMemcpyFromSymbol(got, claim_barrier_cycles, sizeof got));
      std::printf("  second warp at the barrier after the claim: %.1f cycles (mean), %.0f per "
                  "launch\n", got[1] ? (double)got[0] / got[1] : 0.0, (double)got[1] / LAUNCHES);
    }
#endif
#ifdef CUPREEMPT_CHUNK_LOG
    if (form == 5 || form == 6) {  // the last round's timed launches: claims by size
      unsigned long long bins[32];
      CHECK(cudaMemcpyFromSymbol(bins, cupreempt::chunk_log, sizeof bins));
      std::printf("  claims per launch by size (2^k tasks):");
      for (int k = 0; k < 31; ++k)
        if (bins[k]) std::printf(" %d:%.0f", 1 << k, (double)bins[k] / LAUNCHES);
      std::printf(", cut to the tail's share %.0f\n", (double)bins[31] / LAUNCHES);
    }
#endif
    CHECK(cudaMemcpy(got.data(), out, n * sizeof(float2), cudaMemcpyDeviceToHost));
    unsigned long long sum = 1469598103934665603ull;
    for (const auto& v : got) {
      unsigned w[2];
      std::memcpy(w, &v, sizeof w);
      sum = (sum ^ w[0]) * 1099511628211ull;
      sum = (sum ^ w[1]) * 1099511628211ull;
    }
    if (form == 0) base = us, want = sum;
#ifdef PROBE_STAMPS
    CHECK(cudaMemcpy(hs.data(), stamps, grid * sizeof(Stamps), cudaMemcpyDeviceToHost));
    unsigned long long t0 = ~0ull, last = 0, exit = 0;
    for (unsigned b = 0; b < grid; ++b)
      t0 = std::min(t0, hs[b].enter), last = std::max(last, hs[b].last),
      exit = std::max(exit, hs[b].exit);
    double ramp = 0, ramp_max = 0, idle = 0;
    unsigned long long last_begin = 0, min_tasks = ~0ull, max_tasks = 0, first_max = 0;
    for (unsigned b = 0; b < grid; ++b) {
      const double r = hs[b].tasks ? (double)(hs[b].first - hs[b].enter) : 0;
      ramp += r, ramp_max = std::max(ramp_max, r);
      if (hs[b].tasks) idle += (double)(last - hs[b].last);
      if (hs[b].last == last) last_begin = hs[b].last_begin;
      min_tasks = std::min(min_tasks, hs[b].tasks), max_tasks = std::max(max_tasks, hs[b].tasks);
      first_max = std::max(first_max, hs[b].first);
    }
    std::vector<unsigned long long> sm_end(256, 0), sm_tasks(256, 0);
    for (unsigned b = 0; b < grid; ++b)
      if (hs[b].tasks && hs[b].smid < 256)
        sm_end[hs[b].smid] = std::max(sm_end[hs[b].smid], hs[b].last),
        sm_tasks[hs[b].smid] += hs[b].tasks;
    unsigned long long end_lo = ~0ull, tasks_lo = ~0ull, tasks_hi = 0;
    for (int m = 0; m < sms; ++m)
      end_lo = std::min(end_lo, sm_end[m]), tasks_lo = std::min(tasks_lo, sm_tasks[m]),
      tasks_hi = std::max(tasks_hi, sm_tasks[m]);
    std::printf("  per SM: last task ends %.2f us apart (first to last SM), tasks %llu-%llu\n",
                (last - end_lo) / 1e3, tasks_lo, tasks_hi);
#ifdef PROBE_RAMP
    if (std::strncmp(names[form], "run_tasks", 9) == 0) {
      std::vector<unsigned long long> rs(5 * 4096);
      CHECK(cudaMemcpyFromSymbol(rs.data(), cupreempt::ramp_stamps,
                                 rs.size() * sizeof(unsigned long long)));
      const char* what[5] = {"enter", "lane", "before the wait", "chunk posted", "enter's end"};
      std::printf("  ramp stamps (mean over blocks, us after entry):");
      for (int i = 0; i < 5; ++i) {
        double sum = 0;
        unsigned counted = 0;
        for (unsigned b = 0; b < grid && b < 4096; ++b)
          if (hs[b].tasks) sum += (double)rs[5 * b + i] - (double)hs[b].enter, ++counted;
        std::printf(" %s %.2f,", what[i], counted ? sum / counted / 1e3 : 0.0);
      }
      std::printf(" first task %.2f\n", ramp / grid / 1e3);
    }
#endif
#ifdef PROBE_DRAIN
    if (std::strncmp(names[form], "run_tasks", 9) == 0) {
      std::vector<unsigned long long> drain(6 * 4096);
      CHECK(cudaMemcpyFromSymbol(drain.data(), cupreempt::drain_stamps,
                                 drain.size() * sizeof(unsigned long long)));
      const char* what[6] = {"step", "stopping step's end", "leave", "its answers",
                             "leave's end", "after stay"};
      std::printf("  drain stamps (latest over blocks, us after the last task's end):");
      for (int i = 0; i < 6; ++i) {
        unsigned long long latest = 0;
        for (unsigned b = 0; b < grid && b < 4096; ++b) latest = std::max(latest, drain[6 * b + i]);
        std::printf(" %s %.2f%s", what[i], ((double)latest - (double)last) / 1e3, i < 5 ? "," : "\n");
      }
    }
#endif
    std::printf("  stamps: span %.2f us, ramp mean %.2f max %.2f us, every block busy after "
                "%.2f us, idle tail mean %.2f us, last task %.2f us, drain %.2f us, tasks per "
                "block %llu-%llu\n",
                (exit - t0) / 1e3, ramp / grid / 1e3, ramp_max / 1e3, (first_max - t0) / 1e3,
                idle / grid / 1e3, (last - last_begin) / 1e3, (exit - last) / 1e3, min_tasks,
                max_tasks);
#endif
    std::printf("%-12s grid %6u (%d per SM)  %9.2f us per launch  %.3fx  checksum %s\n",
                names[form], grid, per_sm, us, us / base, sum == want ? "equal" : "DIFFERS");
  }
  return 0;
}
