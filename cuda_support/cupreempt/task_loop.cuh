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

// Block barriers for sync-aware kernels. They are the non-aligned PTX `barrier.*` forms, not
// the `.aligned` `bar.*` that __syncthreads_* compile to: threads of one warp may come to them
// from different places (live threads from the body, returned ones from leave()).

// Used directly by the original kernel's sync-aware form, where returned threads have exited
// (the hardware does not wait for exited threads).
__device__ __forceinline__ unsigned barrier_popc(unsigned p) {
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

// The barrier of sync-aware persistent kernels. Not inlined: every such barrier, live threads'
// from the body and parked threads' from leave(), is then the same instruction, which keeps
// the compiler's per-call-site convergence code out of the way (on the H100, two inlined
// barrier sites after a thread-dependent return hung; see docs/gpu-results.md).
__device__ __noinline__ unsigned barrier_count(unsigned p) { return barrier_popc(p); }

// Shared by the threads of one persistent block.
struct BlockState {
  unsigned long long begin, end;  // the chunk of tasks [begin, end) this block runs now
  unsigned stop;                  // 1: leave the loop (yield or no tasks left)
  unsigned votes[3];              // sync-aware reductions, used in rotation (see TaskCtx)
};

// Non-aligned `barrier.sync` (see barrier_count), for the original kernel's sync-aware form.
__device__ __forceinline__ void barrier_sync() { asm volatile("barrier.sync 0;" ::: "memory"); }

// The original kernel: hardware indices and barriers.
//
// SyncAware (the body has a thread-dependent return that reaches a barrier): every `return` of
// the body was rewritten to `return __cp.leave();`, and leave() ends the thread (PTX `exit`)
// as the original `return` did, so the remaining threads' barriers stop waiting for it. A plain
// return from the inlined body would instead wait to reconverge with its warp: a deadlock.
template <bool SyncAware = false>
struct NativeCtx {
  uint3 blockIdx;
  dim3 gridDim;
  __device__ NativeCtx() : blockIdx(::blockIdx), gridDim(::gridDim) {}
  __device__ void sync() const {
    if constexpr (SyncAware) barrier_sync(); else __syncthreads();
  }
  __device__ int sync_count(int p) const {
    if constexpr (SyncAware) return (int)barrier_popc(p); else return __syncthreads_count(p);
  }
  __device__ int sync_and(int p) const {
    if constexpr (SyncAware) return (int)barrier_and(p); else return __syncthreads_and(p);
  }
  __device__ int sync_or(int p) const {
    if constexpr (SyncAware) return (int)barrier_or(p); else return __syncthreads_or(p);
  }
  __device__ void leave() const {
    if constexpr (SyncAware) asm volatile("exit;");
  }
};

// One task (original block) run by a persistent block.
//
// SyncAware: a thread that returns cannot exit (the block runs more tasks), so leave() parks it
// where it returned, in a loop of barriers that it joins with 0 until a barrier counts no live
// thread. Every barrier of a live thread is the same `barrier.red.popc` with 1, so parked
// threads take part without knowing which barrier it is, and all threads see the same count,
// so all leave the task in the same round (the body's end also calls leave()). A reduction
// (__syncthreads_count/and/or) adds its votes into a shared counter before its barrier and
// reads it after; three counters rotate, and after each barrier the previous reduction's
// counter, which everybody has read, is cleared.
template <bool SyncAware>
struct TaskCtx {
  uint3 blockIdx;
  dim3 gridDim;
  BlockState* state;
  unsigned reductions = 0;  // reductions done in this task (the same count in every thread)

  __device__ TaskCtx(const cupreempt_launch& l, unsigned long long task, BlockState* s)
      : gridDim(l.grid_x, l.grid_y, l.grid_z), state(s) {
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

  __device__ void sync() const {
    if constexpr (SyncAware) barrier_count(1); else __syncthreads();
  }
  __device__ int sync_count(int p) {
    if constexpr (SyncAware) return (int)vote(p != 0); else return __syncthreads_count(p);
  }
  __device__ int sync_and(int p) {
    if constexpr (SyncAware) return vote(p == 0) == 0; else return __syncthreads_and(p);
  }
  __device__ int sync_or(int p) {
    if constexpr (SyncAware) return vote(p != 0) != 0; else return __syncthreads_or(p);
  }

  __device__ void leave() const {
    if constexpr (SyncAware) {
      while (barrier_count(0) != 0) {
      }
    }
  }

 private:
  __device__ unsigned vote(bool yes) {
    unsigned* votes = state->votes;
    const unsigned k = reductions++ % 3;
    if (yes) atomicAdd(&votes[k], 1u);
    barrier_count(1);
    const unsigned r = *(volatile unsigned*)&votes[k];
    // The previous reduction's counter: everyone read it before this barrier, and its next use
    // (two reductions on) adds only after the next barrier.
    atomicExch(&votes[(k + 2) % 3], 0u);
    return r;
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
  cupreempt_control* const c = l.control;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  const unsigned fixed = l.chunk ? l.chunk : chunk;
  const unsigned budget = l.budget_ns ? l.budget_ns : (budget_ns ? budget_ns : kDefaultBudgetNs);

  // Leader-only state.
  unsigned smid = 0, next = fixed ? fixed : 1;
  unsigned long long last_ns = 0, spent_ns = 0, spent_tasks = 0, unreported = 0, ran = 0;
  if (leader) {
    smid = sm_id();
    atomicAdd(&c->running_blocks, 1u);
    if (smid < CUPREEMPT_MAX_SMS) atomicAdd(&c->sm_blocks[smid], 1u);
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
      st.votes[0] = st.votes[1] = st.votes[2] = 0;
      last_ns = global_ns();
    }
    __syncthreads();
    if (leader && unreported) {
      atomicAdd(&c->done_tasks, unreported);
      ran += unreported;
    }
    if (st.stop) break;
    const unsigned long long begin = st.begin, end = st.end;
    for (unsigned long long t = begin; t < end; ++t) {
#ifdef CUPREEMPT_AUDIT
      if (leader && l.audit) atomicAdd(&l.audit[t], 1u);
#endif
      Ctx ctx(l, t, &st);
      body(ctx);
      // The next task may reuse this task's shared memory. After the last task of a chunk the
      // leader's barrier above does this job.
      if (TaskBarrier && t + 1 < end) __syncthreads();
    }
    unreported = end - begin;
  }
  // Every thread has left the loop (all read the same st.stop after the same barrier).
  __threadfence();
  __syncthreads();
  if (leader) {
    if (ran && atomicAdd(&c->retired_tasks, ran) + ran == l.total_tasks) {
      __threadfence();
      atomicExch(&c->finished, 1u);
    }
    if (smid < CUPREEMPT_MAX_SMS) atomicSub(&c->sm_blocks[smid], 1u);
    atomicSub(&c->running_blocks, 1u);
  }
}

}  // namespace cupreempt
