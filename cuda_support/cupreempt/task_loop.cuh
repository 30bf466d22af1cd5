// cupreempt device side: the persistent task loop and the two task contexts.
//
// A transformed kernel K becomes three functions that share one body:
//   K__cupreempt_body<Ctx>(Ctx& __cp, params)  the original body; it reads blockIdx/gridDim
//                                               from __cp (local shadows)
//   K(params)                                   the original symbol: body with NativeCtx
//   K__cupreempt(cupreempt_launch, params)      the persistent wrapper: run_tasks() below
#pragma once
#include "control.h"

namespace cupreempt {

// Default amount of work between two looks at the control word (DESIGN.md §3 item 4).
constexpr unsigned kDefaultBudgetNs = 20000;
constexpr unsigned kMaxChunk = 1u << 16;

__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Called by one thread per block, once per chunk.
__device__ __forceinline__ bool must_yield(const cupreempt_control* c, unsigned smid) {
  const unsigned cmd = *(volatile const unsigned*)&c->command;
  if (cmd & CUPREEMPT_YIELD_ALL) return true;
  if ((cmd & CUPREEMPT_YIELD_SMS) && smid < CUPREEMPT_MAX_SMS) {
    const unsigned word = ((volatile const unsigned*)c->sm_mask)[smid / 32];
    return (word >> (smid % 32)) & 1u;
  }
  return false;
}

// Shared by the threads of one persistent block.
struct BlockState {
  unsigned long long begin, end;  // the chunk of tasks [begin, end) this block runs now
  unsigned stop;                  // 1: leave the loop (yield or no tasks left)
};

// The original kernel: the hardware's indices.
struct NativeCtx {
  uint3 blockIdx;
  dim3 gridDim;
  __device__ NativeCtx() : blockIdx(::blockIdx), gridDim(::gridDim) {}
};

// One task (original block) run by a persistent block: the task's indices.
struct TaskCtx {
  uint3 blockIdx;
  dim3 gridDim;

  __device__ TaskCtx(const cupreempt_launch& l, unsigned long long task)
      : gridDim(l.grid_x, l.grid_y, l.grid_z) {
    // Task t is block (x, y, z) with t = x + grid_x * (y + grid_y * z). Divisions are slow:
    // none for 1-D grids, 32-bit ones when the task count allows.
    if (l.grid_y == 1 && l.grid_z == 1) {
      blockIdx = make_uint3((unsigned)task, 0, 0);
    } else if (l.total_tasks <= 0xffffffffull) {
      const unsigned t = (unsigned)task, row = t / l.grid_x;
      blockIdx = make_uint3(t - row * l.grid_x, row % l.grid_y, row / l.grid_y);
    } else {
      const unsigned long long row = task / l.grid_x;
      blockIdx = make_uint3((unsigned)(task - row * l.grid_x), (unsigned)(row % l.grid_y),
                            (unsigned)(row / l.grid_y));
    }
  }
};

// The predicated form (a thread-dependent return reaches a barrier). A persistent block cannot
// let a returned thread exit, so the transformer turns `return` into `__cp_live = false`: the
// thread skips the rest of the task's work (`if (__cp_live)`) but passes the same barriers as
// the live threads, converged with its warp. A declaration after a return that reads memory is
// initialized through live_value(), so that returned threads read nothing.
template <class F>
__device__ __forceinline__ auto live_value(bool live, F f) -> decltype(f()) {
  if (live) return f();
  return decltype(f())();
}

// State of the leader thread, kept in shared memory rather than registers: the body runs with
// only a handful of the loop's registers live, so the wrapper keeps the original kernel's
// occupancy (on the benchmark programs: at most 32 registers, full occupancy; see
// docs/bench/README.md).
struct LeaderState {
  unsigned long long last_ns, spent_ns, spent_tasks;  // adaptive chunk sizing
  unsigned long long unreported;                       // tasks of the last chunk
  unsigned long long ran;                              // tasks this block has run
  unsigned next, smid;
};

// The leader's step between two chunks: look at the control word, size the next chunk from
// the time the last ones took, take it from the counter. Float arithmetic, for the same reason:
// 64-bit divisions raised the wrappers' register counts by 10-16.
__device__ __forceinline__ void next_chunk(cupreempt_control* c, unsigned long long total,
                                        unsigned fixed, unsigned budget, unsigned* audit,
                                        volatile LeaderState& ls, BlockState& st) {
  (void)audit;
  if (ls.unreported && !fixed) {  // size this chunk from the time the last ones took
    const unsigned long long now = global_ns();
    ls.spent_ns += now - ls.last_ns;
    ls.spent_tasks += ls.unreported;
    float want = 2.0f * ls.next;  // below the timer's resolution: grow
    if (ls.spent_ns) want = fminf(want, (float)budget * (float)ls.spent_tasks / (float)ls.spent_ns);
    if (ls.spent_tasks > 4096) {  // forget old history so that phase changes show
      ls.spent_ns /= 2;
      ls.spent_tasks /= 2;
    }
    ls.next = want >= 1.0f ? (unsigned)fminf(want, (float)kMaxChunk) : 1u;
  }
  unsigned long long begin = 0, end = 0;
  bool stop = must_yield(c, ls.smid);
  if (stop) {
    atomicAdd(&c->yielded_blocks, 1u);
#ifdef CUPREEMPT_AUDIT
    if (audit) atomicOr(&audit[total + ls.smid / 32], 1u << (ls.smid % 32));
#endif
  } else {
    unsigned long long n = ls.next;
    if (!fixed) {  // near the end, smaller chunks so that blocks finish together
      const unsigned long long seen = *(volatile unsigned long long*)&c->next_task;
      const unsigned long long left = total > seen ? total - seen : 0;
      const float fair = (float)left / (2.0f * gridDim.x * gridDim.y * gridDim.z);
      if ((float)n > fair) n = fair >= 1.0f ? (unsigned long long)fair : 1;
    }
    begin = atomicAdd(&c->next_task, n);
    stop = begin >= total;
    end = begin + n < total ? begin + n : total;
  }
  st.begin = begin;
  st.end = end;
  st.stop = stop;
  ls.last_ns = global_ns();
}

// The persistent loop. One leader thread per block looks at the control word and takes a chunk
// of tasks from the counter; the decision reaches the block through shared memory and one
// barrier. Tasks taken are always finished, so a yield loses and repeats nothing, and a
// relaunch with the same control block resumes at next_task.
//
// Chunk size: `l.chunk`, else the kernel's `chunk` (from #pragma or the CLI), else adaptive:
// the leader times its chunks with %globaltimer and sizes the next one so that it lasts about
// the budget (l.budget_ns, else the kernel's, else 20 us), growing at most 2x per step and
// shrinking near the end so that blocks finish together.
//
// TaskBarrier: a barrier between two tasks of a chunk, so that the next task cannot overwrite
// shared memory that this one still reads. The transformer drops it for kernels that use no
// shared memory.
//
// Completion: done_tasks counts finished tasks per chunk, for progress. Results are made
// visible once per block, when it leaves (every thread fences); retired_tasks then counts the
// block's tasks, and the block that brings it to the total raises `finished`, which the
// application's stream waits on.
template <class Ctx, bool TaskBarrier = true, class Body>
__device__ __forceinline__ void run_tasks(const cupreempt_launch& l, unsigned chunk,
                                          unsigned budget_ns, Body&& body) {
  // Two copies, used by alternate chunks: the leader writes the next chunk's bounds while slow
  // threads may still be reading this chunk's (one-task chunks have no barrier in between).
  __shared__ BlockState states[2];
  // Volatile: only the leader may touch it, and the compiler must not read it speculatively
  // in the other threads either (compute-sanitizer's racecheck reports such reads).
  __shared__ volatile LeaderState ls;
  cupreempt_control* const c = l.control;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  const unsigned fixed = l.chunk ? l.chunk : chunk;
  if (leader) {
    ls.last_ns = ls.spent_ns = ls.spent_tasks = ls.unreported = ls.ran = 0;
    ls.next = fixed ? fixed : 1u;
    ls.smid = sm_id();
    atomicAdd(&c->running_blocks, 1u);
    if (ls.smid < CUPREEMPT_MAX_SMS) atomicAdd(&c->sm_blocks[ls.smid], 1u);
    // Counted before the first look at the command: the runtime reads these counters after
    // changing the command to tell whether any block has started.
    __threadfence();
  }

  for (unsigned parity = 0;; parity ^= 1u) {
    BlockState& st = states[parity];
    if (leader)
      next_chunk(c, l.total_tasks, fixed,
                 l.budget_ns ? l.budget_ns : (budget_ns ? budget_ns : kDefaultBudgetNs), l.audit,
                 ls, st);
    __syncthreads();
    if (leader && ls.unreported) {
      atomicAdd(&c->done_tasks, ls.unreported);
      ls.ran += ls.unreported;
    }
    if (st.stop) break;
    const unsigned long long begin = st.begin;
    const unsigned n = (unsigned)(st.end - begin);  // at most kMaxChunk
    for (unsigned i = 0; i < n; ++i) {
#ifdef CUPREEMPT_AUDIT
      if (leader && l.audit) atomicAdd(&l.audit[begin + i], 1u);
#endif
      Ctx ctx(l, begin + i);
      body(ctx);
      // The next task may reuse this task's shared memory. After the last task of a chunk the
      // leader's barrier above does this job.
      if (TaskBarrier && i + 1 < n) __syncthreads();
    }
    if (leader) ls.unreported = n;
  }
  // Every thread has left the loop (all read the same st.stop after the same barrier).
  __threadfence();
  __syncthreads();
  if (leader) {
    const unsigned long long ran = ls.ran;
    if (ran && atomicAdd(&c->retired_tasks, ran) + ran == l.total_tasks) {
      __threadfence();
      atomicExch(&c->finished, 1u);
    }
    if (ls.smid < CUPREEMPT_MAX_SMS) atomicSub(&c->sm_blocks[ls.smid], 1u);
    atomicSub(&c->running_blocks, 1u);
  }
}

}  // namespace cupreempt
