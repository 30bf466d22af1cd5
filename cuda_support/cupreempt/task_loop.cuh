// cupreempt device side: the persistent task loop and the two task contexts.
//
// A transformed kernel K becomes three functions that share one body:
//   K__cupreempt_body<Ctx>(Ctx& __cp, params)  the original body; it reads blockIdx/gridDim
//                                               from __cp (local shadows) and, in sync-aware
//                                               kernels, synchronizes through __cp
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

// Non-aligned block barriers (PTX `barrier.red`, not `bar.red`): in sync-aware kernels the
// threads of one warp may wait at different barrier instructions (live threads in the body,
// returned ones in park()), which the `.aligned` forms that __syncthreads_* compile to forbid.
__device__ __forceinline__ unsigned barrier_count(unsigned p) {
  unsigned r;
  asm volatile("{ .reg .pred q; setp.ne.u32 q, %1, 0; barrier.red.popc.u32 %0, 0, q; }"
               : "=r"(r) : "r"(p) : "memory");
  return r;
}
__device__ __forceinline__ unsigned barrier_and(unsigned p) {
  unsigned r;
  asm volatile("{ .reg .pred q, d; setp.ne.u32 q, %1, 0; barrier.red.and.pred d, 0, q; selp.u32 %0, 1, 0, d; }"
               : "=r"(r) : "r"(p) : "memory");
  return r;
}
__device__ __forceinline__ unsigned barrier_or(unsigned p) {
  unsigned r;
  asm volatile("{ .reg .pred q, d; setp.ne.u32 q, %1, 0; barrier.red.or.pred d, 0, q; selp.u32 %0, 1, 0, d; }"
               : "=r"(r) : "r"(p) : "memory");
  return r;
}

// Shared by the threads of one persistent block.
struct BlockState {
  unsigned long long begin, end;  // the chunk of tasks [begin, end) this block runs now
  unsigned stop;                  // 1: leave the loop (yield or no tasks left)
  unsigned barrier_kind;          // sync-aware kernels: which barrier live threads are at
};

// The original kernel: hardware indices and barriers, nothing else.
struct NativeCtx {
  uint3 blockIdx;
  dim3 gridDim;
  __device__ NativeCtx() : blockIdx(::blockIdx), gridDim(::gridDim) {}
  __device__ void sync() const { __syncthreads(); }
  __device__ int sync_count(int p) const { return __syncthreads_count(p); }
  __device__ int sync_and(int p) const { return __syncthreads_and(p); }
  __device__ int sync_or(int p) const { return __syncthreads_or(p); }
};

// One task (original block) run by a persistent block.
//
// SyncAware: the body has a thread-dependent `return` that can reach a barrier. In the original
// such a thread exits and the hardware stops waiting for it; here it only leaves the body, so it
// parks in park(), joining every barrier the live threads still execute without affecting it.
// Every barrier starts with a popc over "am I live" (phase 1): parked threads contribute 0 and
// see from the count whether anyone is still live. A user reduction (__syncthreads_count/and/or)
// announces its kind in shared memory before phase 1 and runs as phase 2, where parked threads
// contribute the reduction's identity. Phase 2 never overlaps a write of the kind: writes happen
// before phase 1 and after phase 2, reads between them.
template <bool SyncAware>
struct TaskCtx {
  uint3 blockIdx;
  dim3 gridDim;
  BlockState* state;

  __device__ TaskCtx(const cupreempt_launch& l, unsigned long long task, BlockState* s)
      : gridDim(l.grid_x, l.grid_y, l.grid_z), state(s) {
    const unsigned long long plane = (unsigned long long)l.grid_x * l.grid_y;
    blockIdx.x = (unsigned)(task % l.grid_x);
    blockIdx.y = (unsigned)((task / l.grid_x) % l.grid_y);
    blockIdx.z = (unsigned)(task / plane);
  }

  enum : unsigned { kPlain = 0, kCount = 1, kAnd = 2, kOr = 3 };

  __device__ void sync() const {
    if constexpr (SyncAware) barrier_count(1); else __syncthreads();
  }
  __device__ int sync_count(int p) const { return reduce(kCount, p); }
  __device__ int sync_and(int p) const { return reduce(kAnd, p); }
  __device__ int sync_or(int p) const { return reduce(kOr, p); }

  // After the body: wait, taking part in the live threads' barriers, until nobody is live.
  __device__ void park() const {
    if constexpr (SyncAware) {
      while (barrier_count(0) != 0) {
        const unsigned kind = *(volatile unsigned*)&state->barrier_kind;
        if (kind == kCount) barrier_count(0);
        else if (kind == kAnd) barrier_and(1);
        else if (kind == kOr) barrier_or(0);
      }
    }
  }

 private:
  __device__ int reduce(unsigned kind, int p) const {
    if constexpr (!SyncAware) {
      if (kind == kCount) return __syncthreads_count(p);
      if (kind == kAnd) return __syncthreads_and(p);
      return __syncthreads_or(p);
    } else {
      atomicExch(&state->barrier_kind, kind);  // atomic: every live thread writes it
      barrier_count(1);
      int r;
      if (kind == kCount) r = (int)barrier_count(p);
      else if (kind == kAnd) r = (int)barrier_and(p);
      else r = (int)barrier_or(p);
      atomicExch(&state->barrier_kind, kPlain);
      return r;
    }
  }
};

// The persistent loop. One leader thread per block looks at the control word and takes a chunk
// of tasks from the counter; the decision reaches the block through shared memory and one
// barrier. Tasks taken are always finished, so a yield loses and repeats nothing, and a
// relaunch with the same control block resumes at next_task.
//
// Chunk size: `l.chunk`, else the kernel's `chunk` (from #pragma or the CLI), else adaptive:
// the leader times its chunks with %globaltimer and sizes the next one so that it lasts about
// the budget (l.budget_ns, else the kernel's, else 20 us), growing at most 2x per step and
// shrinking near the end so that blocks finish together.
template <class Ctx, class Body>
__device__ __forceinline__ void run_tasks(const cupreempt_launch& l, unsigned chunk,
                                          unsigned budget_ns, Body&& body) {
  // Two copies, used by alternate chunks: the leader writes the next chunk's bounds while slow
  // threads may still be reading this chunk's (one-task chunks have no barrier in between).
  __shared__ BlockState states[2];
  cupreempt_control* const c = l.control;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  const unsigned fixed = l.chunk ? l.chunk : chunk;
  const unsigned budget = l.budget_ns ? l.budget_ns : (budget_ns ? budget_ns : kDefaultBudgetNs);

  // Leader-only state.
  unsigned smid = 0, next = fixed ? fixed : 1;
  unsigned long long last_ns = 0, spent_ns = 0, spent_tasks = 0, unreported = 0;
  if (leader) {
    smid = sm_id();
    atomicAdd(&c->running_blocks, 1u);
  }

  for (unsigned parity = 0;; parity ^= 1u) {
    BlockState& st = states[parity];
    if (leader) {
      if (unreported && !fixed) {  // size this chunk from the time the last ones took
        const unsigned long long now = global_ns();
        spent_ns += now - last_ns;
        spent_tasks += unreported;
        unsigned long long want = 2ull * next;  // below the timer's resolution: grow
        if (spent_ns) {
          const unsigned long long fit = (unsigned long long)budget * spent_tasks / spent_ns;
          if (fit < want) want = fit;
        }
        if (spent_tasks > 4096) {  // forget old history so that phase changes show
          spent_ns /= 2;
          spent_tasks /= 2;
        }
        next = want ? (unsigned)(want < kMaxChunk ? want : kMaxChunk) : 1u;
      }
      unsigned long long begin = 0, end = 0;
      bool stop = must_yield(c, smid);
      if (stop) {
        atomicAdd(&c->yielded_blocks, 1u);
#ifdef CUPREEMPT_AUDIT
        if (l.audit) atomicOr(&l.audit[l.total_tasks + smid / 32], 1u << (smid % 32));
#endif
      } else {
        unsigned long long n = next;
        if (!fixed) {  // near the end, smaller chunks so that blocks finish together
          const unsigned long long seen = *(volatile unsigned long long*)&c->next_task;
          const unsigned long long left = l.total_tasks > seen ? l.total_tasks - seen : 0;
          const unsigned long long fair = left / (2ull * gridDim.x * gridDim.y * gridDim.z);
          if (n > fair) n = fair ? fair : 1;
        }
        begin = atomicAdd(&c->next_task, n);
        stop = begin >= l.total_tasks;
        end = begin + n < l.total_tasks ? begin + n : l.total_tasks;
      }
      st.begin = begin;
      st.end = end;
      st.stop = stop;
      st.barrier_kind = Ctx::kPlain;
      last_ns = global_ns();
    }
    __syncthreads();
    // Every thread fenced its writes before this barrier (below), so the previous chunk's
    // results are visible device-wide before done_tasks says they are there.
    if (leader && unreported) {
      __threadfence();
      atomicAdd(&c->done_tasks, unreported);
    }
    if (st.stop) break;
    const unsigned long long begin = st.begin, end = st.end;
    for (unsigned long long t = begin; t < end; ++t) {
#ifdef CUPREEMPT_AUDIT
      if (leader && l.audit) atomicAdd(&l.audit[t], 1u);
#endif
      Ctx ctx(l, t, &st);
      body(ctx);
      ctx.park();
      // The next task may reuse this task's shared memory. After the last task of a chunk the
      // leader's barrier above does this job; a sync-aware task already ended on a barrier.
      if (t + 1 < end) __syncthreads();
    }
    __threadfence();
    unreported = end - begin;
  }
  if (leader) atomicSub(&c->running_blocks, 1u);
}

}  // namespace cupreempt
