// cupreempt device side: the persistent task loop and the two task contexts.
//
// A transformed kernel K becomes three functions that share one body:
//   K__cupreempt_body<Ctx>(Ctx& __cp, params)  the original body; it reads blockIdx/gridDim
//                                               from __cp (local shadows)
//   K(params)                                   the original symbol: body with NativeCtx
//   K__cupreempt(cupreempt_launch, params)      the persistent wrapper: run_tasks() below
// The transformer spells these names, and NativeCtx, TaskCtx, thread_index, run_tasks,
// live_value and __cp_live below, from one place: src/vocab.rs. A change to one must change
// the other.
#pragma once
#include <type_traits>
#include "control.h"

// The 32-register wrapper's __launch_bounds__(1024, CUPREEMPT_R32_MIN_BLOCKS): two blocks of
// 1024 threads per SM mean at most 32 registers where an SM holds 2048 threads. Where it holds
// fewer (sm_75: 1024; sm_86, sm_89, sm_120, sm_121: 1536) two are out of range (ptxas warns and
// ignores them), and full occupancy needs no such cap. Spelled in src/vocab.rs too.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 750 || __CUDA_ARCH__ == 860 || \
                               __CUDA_ARCH__ == 890 || __CUDA_ARCH__ == 1200 || __CUDA_ARCH__ == 1210)
#define CUPREEMPT_R32_MIN_BLOCKS 1
#else
#define CUPREEMPT_R32_MIN_BLOCKS 2
#endif
// Threads an SM holds: 65,536 registers over these threads is the most each may use for full
// occupancy (32 where it holds 2,048).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
#define CUPREEMPT_SM_THREADS 1024
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || \
                                 __CUDA_ARCH__ == 890 || __CUDA_ARCH__ == 1200 || __CUDA_ARCH__ == 1210)
#define CUPREEMPT_SM_THREADS 1536
#else
#define CUPREEMPT_SM_THREADS 2048
#endif
// The capped wrapper of a kernel with its own __launch_bounds__(T, M) keeps T and asks for as
// many blocks of T threads per SM as the SM holds (never fewer than M): with 2,048 threads, 32
// registers, as `__launch_bounds__(1024, 2)` gives any block size. Without it such a kernel's
// wrapper, a few registers over 32, ran half as many 1,024-thread blocks per SM as the original
// (COLMAP's generated solver kernels: `__launch_bounds__(1024, 1)`, 14-21 registers as written,
// 35-43 in the wrapper). Spelled in src/vocab.rs too (R32_BLOCKS_OF).
#define CUPREEMPT_R32_BLOCKS_OF(T, M) \
  ((M) > CUPREEMPT_SM_THREADS / (T) ? (M) : CUPREEMPT_SM_THREADS / (T))

// The task loop's out-of-line steps (see "The leader's steps below are calls" further down).
// CUPREEMPT_STEPS_INLINED also decides how the steps see the leader's state (StepState).
#ifdef __CUDACC_RDC__
#define CUPREEMPT_STEPS_INLINED 1
#define CUPREEMPT_STEP __forceinline__
#else
#define CUPREEMPT_STEPS_INLINED 0
#define CUPREEMPT_STEP __noinline__
#endif

namespace cupreempt {

// Default amount of work between two looks at the control word: it bounds how long a block
// runs before it sees a preemption request.
constexpr unsigned kDefaultBudgetNs = 20000;
constexpr unsigned kMaxChunk = 1u << 16;
// What one atomic (or load) on the task counter's 128-byte line costs while thousands of
// blocks queue on it: L2 serializes the operations of a line, about 1 ns each on the H100
// (scripts/probes/atomic_contention.cu: 0.8-1.05 ns with 1,056-4,224 blocks). Chunks are
// kept long enough that the blocks' claims use at most 1/kClaimSlack of that line's time.
// The floor also holds the tail's last chunks up, and a block that ends early then waits for
// the others: launches of 1-us tasks, 31 per block, ran 1.29x their original with a slack of
// 8 and 1.25x with 4 (8,192 tasks: 2.70x and 2.25x; scripts/probes/persistent_forms.cu
// streaming one float2 per thread), and the benchmark programs moved within their noise
// between 8, 4 and 2 (H200, 2026-12-04, scripts/probes/compare_builds.sh; docs/bench/README.md,
// "Short streaming tasks"). Fewer tasks per chunk than a quarter of that (one per claim) queue
// the claims: that probe's plain claim loop runs 1.87x with 131,072 tasks, 1.01x with four
// tasks per claim. The floor never exceeds the budget, so the preemption latency keeps its
// bound.
constexpr float kClaimLineNs = 1.0f;
// Probes build variants with other values (scripts/probes/compare_builds.sh, NVCC_FLAGS).
#ifndef CUPREEMPT_CLAIM_SLACK
#define CUPREEMPT_CLAIM_SLACK 4.0f
#endif
constexpr float kClaimSlack = CUPREEMPT_CLAIM_SLACK;
// Near the end a chunk is at most the tasks left over kTailShare chunks per block (1 instead
// of 2 made stencil small 20 points slower).
#ifndef CUPREEMPT_TAIL_SHARE
#define CUPREEMPT_TAIL_SHARE 2.0f
#endif
constexpr float kTailShare = CUPREEMPT_TAIL_SHARE;
// How long a parked block sleeps between two looks at its kernel's state.
constexpr unsigned kParkSleepNs = 2000;
// A block's first adaptive chunk, when an earlier launch's time per task is known (l.task_ns):
// as many tasks as fit the budget and the launch's fair share, at most this many. Blocks then
// claim less often while they all start at once on the counter; 3 tasks instead of 1 made
// pathfinder (barrier-bound tasks of a few us) 2-3 points faster and moved no benchmark
// program the other way beyond its noise (H100, scripts/probes/compare_builds.sh).
// Looks inside chunks (docs/transformation.md, "The task loop"): in a build with
// CUPREEMPT_LOOKS, where the launch has leftover slots (cupreempt_launch.leftover), the leader
// also looks at the command between two tasks of a chunk, about every kLookNs of work, and a
// block sent away mid-chunk gives the chunk's rest back: a command then waits for a look, not
// for a chunk's end. A build asks for them because they cost: 5-10 points of the large
// benchmark programs' time on the H200, about half of that with their code built but no looks
// at run time. Without CUPREEMPT_LOOKS the task loop is the one below without them.
#ifdef CUPREEMPT_LOOKS
constexpr bool kLooks = true;
#else
constexpr bool kLooks = false;
#endif
#ifndef CUPREEMPT_LOOK_NS
#define CUPREEMPT_LOOK_NS 5000.0f
#endif
constexpr float kLookNs = CUPREEMPT_LOOK_NS;
#ifndef CUPREEMPT_MAX_FIRST_CHUNK
#define CUPREEMPT_MAX_FIRST_CHUNK 3.0f
#endif
constexpr float kMaxFirstChunk = CUPREEMPT_MAX_FIRST_CHUNK;
// With adaptive chunks a block adds its finished tasks to the progress count (done_tasks) once
// this much time has passed since it last did, and whenever it stops or its claim refreshes
// the host mirror's copy: the count then lags each block's work by at most this long. An
// atomic per chunk, on a launch of short streaming tasks whose chunks the contention floor
// holds to a few microseconds, was one more operation in L2's queues on every claim
// (scripts/probes/persistent_forms.cu, docs/bench/README.md, "Short streaming tasks"). With
// fixed chunks (CUPREEMPT_CHUNK, the tests' harnesses) every chunk still counts at its end.
#ifndef CUPREEMPT_PROGRESS_NS
#define CUPREEMPT_PROGRESS_NS 50000u
#endif
constexpr unsigned kProgressNs = CUPREEMPT_PROGRESS_NS;

#ifdef CUPREEMPT_CHUNK_LOG
// Probes only (docs/bench/README.md): every claim counted by its chunk's size, in bins of
// powers of two (bin k: 2^k to 2^(k+1) - 1 tasks), bin 31 counting the claims that the tail's
// fair share cut short. Summed over every launch of every kernel of the program's one
// translation unit; fixtures/bench/bench.cuh prints it at exit.
__device__ unsigned long long chunk_log[32];
// And each look at the command by the time since the block's previous one (a command waits at
// most that long for the block): bin 0 under 1 us, bin k 2^(k-1) to 2^k us (1 us = 1024 ns).
__device__ unsigned long long look_log[32];
#endif
#ifdef CUPREEMPT_YIELD_LOG
// Probes only (docs/bench/README.md): the %globaltimer of each block's decision to yield, in
// order of arrival, so that a preemption's latency splits into the command's way to the first
// block and the spread of the blocks' looks after it. fixtures/bench/bench.cuh clears it before
// each preempted run and reads it after.
constexpr unsigned kYieldLogSize = 8192;
__device__ unsigned long long yield_log[kYieldLogSize];
__device__ unsigned yield_log_count;
#endif

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

// Programmatic dependent launch (sm_90 on; docs/runtime.md, "Launches that overlap"). The
// runtime launches a first instance so that its blocks may start once every block of the
// kernel before it in the stream has ended, before that kernel's end is complete: they take
// their first chunk and lane from their own control block, and every thread waits here for
// that kernel to end and its results to be visible before its first task. Outside such a
// launch the wait returns at once. Only where the code is built for sm_90 or later; the
// runtime sets the launch attribute only for functions built so (their PTX version), so no
// launch runs early without the wait. The task loop never lets the next kernel start sooner
// (griddepcontrol.launch_dependents): a block's end comes right after its last step anyway
// (the leader's release there measured the same as none, persistent_forms), and a tail that
// stays while its kernel is preempted, which has not ended, keeps the next kernel's blocks
// off the SMs it yielded.
__device__ __forceinline__ void wait_for_predecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether command `cmd` with SM mask `mask` sends a block on SM `smid` away.
__device__ __forceinline__ bool sends_away(unsigned cmd, const volatile unsigned* mask,
                                           unsigned smid) {
  if (cmd & CUPREEMPT_YIELD_ALL) return true;
  if ((cmd & CUPREEMPT_YIELD_SMS) && smid < CUPREEMPT_MAX_SMS)
    return (mask[smid / 32] >> (smid % 32)) & 1u;
  return false;
}

__device__ __forceinline__ unsigned load_acquire_sys(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// BlockState::count of a block that leaves the loop (yield or no tasks left).
constexpr unsigned kStopped = ~0u;

// Shared by the threads of one persistent block.
struct BlockState {
  unsigned long long begin;  // the chunk of tasks [begin, begin + count) this block runs now
  uint3 first;                    // blockIdx of task `begin` (2-D and 3-D grids)
  // The chunk's size (at most kMaxChunk), or kStopped: every thread reads this one word after the
  // step, not a stop flag and both bounds (three loads and a subtraction).
  unsigned count;
  unsigned look_every;            // tasks between two looks inside the chunk (0: no looks)
};

// The leader's step hands the block its chunk [begin, end), or its stop.
__device__ __forceinline__ void post_chunk(BlockState& st, unsigned long long begin,
                                           unsigned long long end, bool stop) {
  st.begin = begin;
  st.count = stop ? kStopped : (unsigned)(end - begin);
}

// The original kernel: the hardware's indices.
struct NativeCtx {
  uint3 blockIdx;
  dim3 gridDim;
  __device__ NativeCtx() : blockIdx(::blockIdx), gridDim(::gridDim) {}
  // As the original reads it: the compiler may keep or recompute it as it likes.
  __device__ __forceinline__ uint3 thread_index() const { return ::threadIdx; }
};

// The grid as cooperative groups' grid_group answers its queries, from the body's indices
// (the task's in a wrapper, the hardware's in the original): what `cg::this_grid()` becomes
// where only such a query follows it (`cg::this_grid().thread_rank()`). The formulas and
// types are grid_group's (cooperative_groups/details/helpers.h); `sync()` is left out (a grid
// barrier is refused, CP002).
struct task_grid {
  uint3 block;
  dim3 grid;
  uint3 thread;
  __device__ __forceinline__ task_grid(uint3 b, dim3 g, uint3 t) : block(b), grid(g), thread(t) {}
  __device__ __forceinline__ unsigned block_threads() const {
    return blockDim.x * blockDim.y * blockDim.z;
  }
  __device__ __forceinline__ unsigned long long num_blocks() const {
    return (unsigned long long)grid.x * (grid.y * grid.z);
  }
  __device__ __forceinline__ unsigned long long num_threads() const {
    return num_blocks() * block_threads();
  }
  __device__ __forceinline__ unsigned long long size() const { return num_threads(); }
  __device__ __forceinline__ unsigned long long block_rank() const {
    return ((unsigned long long)block.z * grid.y * grid.x) +
           ((unsigned long long)block.y * grid.x) + (unsigned long long)block.x;
  }
  __device__ __forceinline__ unsigned long long thread_rank() const {
    const unsigned in_block =
        (thread.z * blockDim.y * blockDim.x) + (thread.y * blockDim.x) + thread.x;
    return block_rank() * block_threads() + in_block;
  }
  __device__ __forceinline__ dim3 dim_blocks() const { return dim3(grid.x, grid.y, grid.z); }
  __device__ __forceinline__ dim3 group_dim() const { return dim_blocks(); }
  __device__ __forceinline__ dim3 block_index() const { return dim3(block.x, block.y, block.z); }
  __device__ __forceinline__ dim3 dim_threads() const {
    return dim3(grid.x * blockDim.x, grid.y * blockDim.y, grid.z * blockDim.z);
  }
  __device__ __forceinline__ dim3 thread_index() const {
    return dim3(block.x * blockDim.x + thread.x, block.y * blockDim.y + thread.y,
                block.z * blockDim.z + thread.z);
  }
};

// One task (original block) run by a persistent block: the task's indices.
struct TaskCtx {
  uint3 blockIdx;
  dim3 gridDim;

  // The i-th task of the block's chunk `st`. Task t is block (x, y, z) with
  // t = x + grid_x * (y + grid_y * z). Divisions are slow (about 45 instructions per thread
  // and task for a 2-D grid: on the H100, convolution's column pass executed 31% more
  // instructions than the original), so the leader splits the chunk's first task once, in
  // next_chunk() (a call there, not here: a call in the task loop cost n-body's inner loop
  // its interleaving), and a task in the same row is found by an addition. No branch here
  // may depend on the launch alone (the grid's shape, its size): the compiler then makes one
  // copy of the task loop, and of the kernel's body, per outcome, and every copy is code that
  // the program's first launch loads (about 1.5 us per KB on the H100,
  // scripts/probes/module_load.sh).
  __device__ TaskCtx(const cupreempt_launch& l, const BlockState& st, unsigned i)
      : gridDim(l.grid_x, l.grid_y, l.grid_z) {
    // first.x < grid_x <= 2^31 - 1 and i < kMaxChunk: no overflow. A 1-D grid never wraps.
    // Taken from lane 0 (every thread of the block runs the task), ptxas knows it is the same
    // in every lane: the branch below then needs no convergence barrier (two instructions per
    // task and warp, and the shuffle itself is left out; nvcc 13.0, sm_90).
    const unsigned x = __shfl_sync(0xffffffffu, st.first.x, 0) + i;
    if (x < l.grid_x) {
      blockIdx = make_uint3(x, st.first.y, st.first.z);
    } else {  // the chunk runs into the next row: counted from `first`, in 32 bits
      const unsigned rows = x / l.grid_x, y = st.first.y + rows, planes = y / l.grid_y;
      blockIdx = make_uint3(x - rows * l.grid_x, y - planes * l.grid_y, st.first.z + planes);
    }
  }

  // The thread's index, read afresh for each task (volatile: the compiler may not move it out
  // of the task loop). Otherwise it hoists what the body computes from threadIdx out of the
  // loop and keeps all of it in registers for the whole loop: on the CUDA samples' bitonic
  // sort, 22 registers in the original, 50 in the wrapper; 32 with this.
  __device__ __forceinline__ uint3 thread_index() const {
    uint3 t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t.x));
    asm volatile("mov.u32 %0, %%tid.y;" : "=r"(t.y));
    asm volatile("mov.u32 %0, %%tid.z;" : "=r"(t.z));
    return t;
  }

  // The blockIdx of task `task`, where a chunk starts (the leader's steps): a 1-D grid's
  // directly, else split().
  static __device__ __forceinline__ uint3 block_of(unsigned long long task, unsigned gx,
                                                   unsigned gy, unsigned gz) {
    return gy == 1 && gz == 1 ? make_uint3((unsigned)task, 0, 0) : split(task, gx, gy);
  }

  // Out of line (but inlined under -rdc, CUPREEMPT_STEP): it runs once per chunk (the
  // leader) or, with more than 2^32 tasks, at a row's end.
  static __device__ CUPREEMPT_STEP uint3 split(unsigned long long task, unsigned gx,
                                             unsigned gy) {
    if (!(task >> 32)) {
      const unsigned t = (unsigned)task, row = t / gx;
      return make_uint3(t - row * gx, row % gy, row / gy);
    }
    unsigned x, y;
    const unsigned long long row = divide_wide(task, gx, x);
    const unsigned z = (unsigned)divide_wide(row, gy, y);
    return make_uint3(x, y, z);
  }

  // n / d and n % d by long division. Not the compiler's 64-bit division: that needs about 50
  // registers, and with separate compilation (-rdc) a function called from the wrapper held to
  // 32 registers must fit in 32 itself. Slow (64 steps), but only for more than 2^32 tasks.
  static __host__ __device__ __forceinline__ unsigned long long divide_wide(unsigned long long n,
                                                                   unsigned d, unsigned& rem) {
    unsigned long long q = 0, r = 0;
    // The host's pass would warn of a pragma it does not know (-Wall), an error under -Werror.
#ifdef __CUDA_ARCH__
#pragma unroll 1
#endif
    for (int b = 63; b >= 0; --b) {
      r = (r << 1) | ((n >> b) & 1u);
      if (r >= d) {
        r -= d;
        q |= 1ull << b;
      }
    }
    rem = (unsigned)r;
    return q;
  }
};

// A kernel parameter of class type passed by value reaches the shared body as the kernel's own
// object where its type is not trivially destructible: copied into a by-value parameter, it
// would be destroyed in device code, which the original never does (its parameters are bitwise
// copies of the launch's arguments, never destroyed on the device), and a destructor that is
// host-only does not compile there. Other types are taken by value, as written.
template <class T>
using body_param_t = typename std::conditional<std::is_trivially_destructible<T>::value, T, T&>::type;
// A `const` one by reference whatever its type: the body cannot change it, and a copy would
// need a copy constructor that takes `const T&`, which a class may not have (one taking `T&`
// copies only what is not `const`).
template <class T>
using body_const_param_t = const T&;

// What the persistent wrapper passes for such a parameter where one of them is not trivially
// destructible (`all_trivially_destructible` chooses the call): for each task a fresh bitwise copy
// of the wrapper's own (as the launch gave every original block its copy), never destroyed,
// alive until the end of the body's call; for the others the parameter itself.
// (No fold expression and no variable template: the headers compile as C++11, as programs that
// build with -std=c++11 do.)
template <class... T>
struct all_trivially_destructible : std::true_type {};
template <class T, class... R>
struct all_trivially_destructible<T, R...>
    : std::integral_constant<bool, std::is_trivially_destructible<T>::value &&
                                       all_trivially_destructible<R...>::value> {};
template <class T>
struct TaskParam {
  alignas(T) unsigned char bytes[sizeof(T)];
  __device__ __forceinline__ explicit TaskParam(const T& v) { memcpy(bytes, &v, sizeof(T)); }
  __device__ __forceinline__ operator T&() { return *reinterpret_cast<T*>(bytes); }
};
template <class T>
__device__ __forceinline__ typename std::enable_if<std::is_trivially_destructible<T>::value, T&>::type
task_param(T& v) {
  return v;
}
template <class T>
__device__ __forceinline__
    typename std::enable_if<!std::is_trivially_destructible<T>::value, TaskParam<T>>::type
task_param(T& v) {
  return TaskParam<T>(v);
}

// The predicated form (a thread-dependent return reaches a barrier). A persistent block cannot
// let a returned thread exit, so the transformer turns `return` into `__cp_live = false`: the
// thread skips the rest of the task's work (`if (__cp_live)`) but passes the same barriers as
// the live threads, converged with its warp. A declaration after a return that reads memory is
// initialized through live_value(), so that returned threads read nothing.
// A returned thread's value is never read: a value-initialized one, or for a type without a
// default constructor (`Span(float, float)` only) its bytes set to zero, copied.
template <class R>
__device__ __forceinline__ typename std::enable_if<std::is_default_constructible<R>::value, R>::type
unread_value() {
  return R();
}
template <class R>
__device__ __forceinline__ typename std::enable_if<!std::is_default_constructible<R>::value, R>::type
unread_value() {
  union Bytes {
    unsigned char zero[sizeof(R)];
    R value;
    __device__ Bytes() : zero() {}
    __device__ ~Bytes() {}
  } bytes;
  return bytes.value;
}
template <class F>
__device__ __forceinline__ auto live_value(bool live, F f) -> decltype(f()) {
  if (live) return f();
  return unread_value<decltype(f())>();
}

// A call of a functor whose class the transformer may not know (`f(x)` of a template
// parameter's type, as `multi_tensor_apply`'s kernel calls the optimizer's functor): where the
// class's `operator()` reads blockIdx/gridDim, the transformer gave it a context form
// (`operator()(Ctx& __cp, x)`), which this calls with the task's context; any other callable
// (a functor that reads no block index, a lambda, a function pointer) is called as written.
namespace functor_detail {
template <class Ctx, class F, class... A>
__device__ __forceinline__ auto call(int, Ctx& cp, F&& f, A&&... a)
    -> decltype(static_cast<F&&>(f)(cp, static_cast<A&&>(a)...)) {
  return static_cast<F&&>(f)(cp, static_cast<A&&>(a)...);
}
template <class Ctx, class F, class... A>
__device__ __forceinline__ auto call(long, Ctx&, F&& f, A&&... a)
    -> decltype(static_cast<F&&>(f)(static_cast<A&&>(a)...)) {
  return static_cast<F&&>(f)(static_cast<A&&>(a)...);
}
}  // namespace functor_detail
template <class Ctx, class F, class... A>
__device__ __forceinline__ auto call_functor(Ctx& cp, F&& f, A&&... a)
    -> decltype(functor_detail::call(0, cp, static_cast<F&&>(f), static_cast<A&&>(a)...)) {
  return functor_detail::call(0, cp, static_cast<F&&>(f), static_cast<A&&>(a)...);
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
  unsigned min_chunk;  // the contention floor of the chunk size (next_chunk())
  unsigned lane;       // this block's lane on its SM (CUPREEMPT_LANES: none)
  unsigned tail;       // 1: the first instance's last block (see stay())
  unsigned host_seq;   // the newest command seen in host memory, and whether it sends us away
  unsigned host_away;
  unsigned start_away; // the launch's start_off sends us away (until a command lands)
  unsigned long long yield_ns_copied;  // control->yield_ns as last copied to host memory
  unsigned long long chunk_begin;      // the first task of the last chunk (tests' audit)
  unsigned fence_due;  // enter() left its fence to the first next_chunk (see there)
  unsigned look_every;  // tasks between two looks inside a chunk (0: no looks)
  unsigned scan;       // where the next search for another SM's leftover starts
  unsigned search_due;     // next_chunk left the chunk to take_leftover (2: search every SM)
  // 1: the next step looks at the command and claims new tasks, without a search for
  // leftovers: take_leftover found none, or a command sent the block away while it held tasks
  // and its lane's slot was taken (next_chunk), so that it leaves at that next step.
  unsigned claim_next;
  // Finished tasks not yet in done_tasks, and the low 32 bits of %globaltimer when the block
  // last counted (kProgressNs; 32 bits each keep the loop's shared memory within
  // TASK_LOOP_SHARED_BYTES, src/vocab.rs, and less than 2^32 tasks or ns go by between two).
  unsigned unposted, posted_ns;
  unsigned long long cut_word;  // the last command word a look inside a chunk judged
  // Tasks in the block's hands that it has not run (rest_end 0: none): a leftover it has
  // taken, a cut chunk's rest, or a chunk claimed beside a command that sent it away. Its next
  // step runs them, or leave() gives them back (give_back).
  unsigned long long rest_begin, rest_end;
};

// How the leader's steps (enter, next_chunk, take_leftover, leave) see that state. The task
// loop's shared copy is volatile so that no other thread reads it, not even speculatively
// (compute-sanitizer's racecheck reports such reads). A step that is a call runs in the leader
// alone, and there it is plain memory: each field is read once and written once per step,
// where volatile reread every field it had just written, a chain of dependent shared-memory
// round trips that held the block at its barrier between two chunks. Inlined into the task
// loop (-rdc, CUPREEMPT_STEPS_INLINED) the steps keep volatile.
#if CUPREEMPT_STEPS_INLINED
using StepState = volatile LeaderState;
#else
using StepState = LeaderState;
#endif
__device__ __forceinline__ StepState& step_state(volatile LeaderState& ls) {
  return const_cast<StepState&>(ls);
}

// The instance's part in its launch (cupreempt_launch.first, control.h). A gated link or the
// anchor takes the command from host memory before any task (link_command).
static_assert(CUPREEMPT_RESUMED < CUPREEMPT_FIRST && CUPREEMPT_FIRST < CUPREEMPT_LINK &&
                  CUPREEMPT_ANCHOR == CUPREEMPT_LINK + 1,
              "starts_from_host_command compares once: the link roles are the highest");
__device__ __forceinline__ bool starts_from_host_command(unsigned first) {
  return first >= CUPREEMPT_LINK;  // _LINK and _ANCHOR, the two highest (one compare)
}
// The launch's first instance or the anchor: its last block holds the stream until every task
// has retired (stay()).
__device__ __forceinline__ bool holds_the_stream(unsigned first) {
  return first == CUPREEMPT_FIRST || first == CUPREEMPT_ANCHOR;
}

// Reads the newest command from host memory into ls (a seqlock: the host makes seq odd while
// it writes). Returns false when the host was writing; ls keeps the previous command then.
__device__ __forceinline__ bool read_host_command(const cupreempt_host* h,
                                                  StepState& ls) {
  const unsigned s1 = load_acquire_sys(&h->seq);
  if (s1 & 1u) return false;
  if (s1 == ls.host_seq) return true;
  // Acquire loads, each ordered before the next: the second look at seq comes after the
  // command's words, as a seqlock needs, with no system-scope fence. A fence here waits for
  // the block's earlier stores to host memory (its lane) to land, and a gated link's thousands
  // of blocks, each reading here as they start, then took milliseconds to begin (H200).
  const unsigned cmd = load_acquire_sys(&h->command);
  const unsigned smid = ls.smid;
  const bool listed = (cmd & CUPREEMPT_YIELD_SMS) && smid < CUPREEMPT_MAX_SMS &&
                      ((load_acquire_sys(&h->sm_mask[smid / 32]) >> (smid % 32)) & 1u);
  const bool away = (cmd & CUPREEMPT_YIELD_ALL) || listed;
  if (load_acquire_sys(&h->seq) != s1) return false;
  ls.host_seq = s1;
  ls.host_away = away;
  return true;
}

// Whether the control block's command (number `seq`) is older than one the block has already
// seen in host memory (ls.host_seq): the control stream lags behind, and host memory decides.
template <class State>
__device__ __forceinline__ bool behind_host(const cupreempt_host* h, unsigned seq,
                                            const State& ls) {
  return h && (int)(seq - ls.host_seq) < 0;
}

// Called by one thread per block, once per chunk. The control block is what the host's command
// reaches through the control stream. Should that stream lag behind a command the block has
// already seen in host memory (its writes can queue behind another stream's blocked work),
// host memory decides until the control block catches up.
__device__ __forceinline__ bool must_yield(const cupreempt_control* c, const cupreempt_host* h,
                                           StepState& ls) {
  const unsigned long long word = *(volatile const unsigned long long*)&c->command;
  const unsigned cmd = (unsigned)word, seq = (unsigned)(word >> 32);
  if (behind_host(h, seq, ls)) {
    read_host_command(h, ls);
    return ls.host_away;
  }
  // The control block has never held a command (launches outside the runtime write commands
  // without a number): the launch's own start_off is in force.
  if (word == 0) return ls.start_away;
  return sends_away(cmd, c->sm_mask, ls.smid);
}

// Whether the launch starts off SM `smid` (l.start_off). Every word read at its constant offset
// and masked, no branch: a select between the words became an index by register, for which
// every thread copied the whole parameter block to local memory (96 bytes each, 26 MB of
// writes per launch of 270,000 threads on the H100; ncu counted them as DRAM writes).
__device__ __forceinline__ unsigned starts_off(const cupreempt_launch& l, unsigned smid) {
  unsigned word = 0;
#pragma unroll
  for (unsigned i = 0; i < CUPREEMPT_MAX_SMS / 32; ++i)
    word |= l.start_off[i] & (0u - (unsigned)(smid / 32 == i));
  return (word >> (smid % 32)) & 1u;
}

// A lane: a small number that no other block of the kernel on the same SM holds now, so that the
// block can report itself in host memory with plain stores (host->lanes). The first try is a
// guess, so that the usual start costs one atomic and no load: blocks b, b + SMs, ... share an
// SM, and on the H100 (132 SMs) their b % 32 differ. The leader's warp slot (%warpid) over the
// block's warps guesses better (no co-resident block of a full grid guessed a held lane on the
// H200, scripts/probes/lane_guess.cu; the slowest block's start 2.2-2.6 us instead of 3.1-5.8),
// but launch totals did not move, and preemption storms' p99 doubled (tests/runtime_gpu.rs, 20
// us tasks: GPU 162-188 us against 76-101). A likely cause, not measured: a block that takes
// over a departed block's warp slot takes its lane too, and with it a slot that may still hold
// that block's leftover; sent away with a chunk in hand, it must run the chunk first.
__device__ __forceinline__ unsigned claim_lane(cupreempt_control* c, unsigned smid) {
  if (smid >= CUPREEMPT_MAX_SMS) return CUPREEMPT_LANES;
  unsigned* lanes = &c->sm_lanes[smid];
  unsigned bit = blockIdx.x % 32;
  for (;;) {
    const unsigned held = atomicOr(lanes, 1u << bit);
    if (!(held & (1u << bit))) return bit;
    if (held == ~0u) return CUPREEMPT_LANES;  // more resident blocks than an SM can hold
    bit = __ffs(~held) - 1;
  }
}

// The leader's steps below are calls, not inlined: inlined, they raised some wrappers from 32
// to 36-40 registers (vector_add, grid3d, nearest_neighbor), which costs occupancy. Except
// with relocatable device code (-rdc, CMake's CUDA_SEPARABLE_COMPILATION): ptxas then compiles
// each call to the ABI, and the device link gives every wrapper the callees' registers and a
// stack frame (the CUDA samples' sortingNetworks: every wrapper 52 registers and 88 bytes of
// stack, against 24-40 registers and none with the steps inlined), so there they are inlined
// (CUPREEMPT_STEP). They run once per chunk or per block, and take scalars so that the call
// needs no stack frame. The launch's values come as arguments: copied into the leader's shared
// state once per block and read from there by argument-less steps, they made the wrappers of
// the CUDA samples' kernels larger, not smaller (432 wrappers under ptxas -v for sm_90: 170
// of them 1-34 registers more, 112 fewer; 78 above 32 registers instead of 58).

// The size of a block's first chunk when it is adaptive: one task, unless an earlier launch
// of the same kernel and configuration measured its tasks (`task_ns`): then as many as fit
// the budget and the launch's fair share (`total` tasks over `blocks`), at most
// kMaxFirstChunk. Host and device (tests/nvcc.rs runs it on the host).
__host__ __device__ __forceinline__ unsigned first_chunk_size(unsigned budget, unsigned task_ns,
                                                              unsigned long long total,
                                                              unsigned blocks) {
  if (!task_ns || !blocks) return 1u;
#ifdef __CUDA_ARCH__
  const float fit = __fdividef((float)budget, (float)task_ns);
  const float fair = __fdividef((float)total, kTailShare * blocks);
#else
  const float fit = (float)budget / (float)task_ns;
  const float fair = (float)total / (kTailShare * blocks);
#endif
  const float n = fminf(fminf(fit, fair), kMaxFirstChunk);
  return n >= 1.0f ? (unsigned)n : 1u;
}

// How many tasks go between two looks inside a chunk (look_every): about kLookNs of work at
// `per_ns` tasks per ns, at least one.
__device__ __forceinline__ unsigned look_every_for(float per_ns) {
  const float tasks = kLookNs * per_ns;
  return tasks >= 1.0f ? (unsigned)fminf(tasks, (float)kMaxChunk) : 1u;
}

// A look inside a chunk: the leader copies the command word (and the first SM-mask words
// beside it) into shared memory asynchronously as a task begins and reads it as the task ends,
// so the look waits for no load: a load after the task held every warp at the task's barrier
// for the round trip. Before sm_80 (no cp.async) the look loads the word at the task's end.
__device__ __forceinline__ void look_issue(unsigned long long* buf, const cupreempt_control* c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = (unsigned)__cvta_generic_to_shared(buf);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n\tcp.async.commit_group;" ::"r"(dst),
               "l"(&c->command)
               : "memory");
#endif
}
__device__ __forceinline__ unsigned long long look_word(const unsigned long long* buf,
                                                        const cupreempt_control* c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
  return *(const volatile unsigned long long*)buf;
#else
  return *(const volatile unsigned long long*)&c->command;
#endif
}

// Leftovers. A block that a look sends away mid-chunk gives the chunk's rest back in its lane's
// slot, and so does a block whose claim, sent beside the command's load, finds a command that
// sends it away (next_chunk): the whole chunk. One slot per lane: no two blocks of the kernel
// on an SM hold the same lane, so a slot has one writer. The giver sets the lane's bit in
// leftover_state; the next blocks to claim take
// leftovers before new tasks, their own SM's first. Packed as begin << 17 | count (a chunk
// has at most kMaxChunk = 2^16 tasks). A slot is written only while its lane's two bits are
// clear, and a taker moves the full bit to the reading bit in one compare-and-swap, so a slot
// is never rewritten while it is read. `leftovers` counts up before a slot fills and down after
// it empties: while it is 0 no slot holds one.
constexpr unsigned kLeftoverCountBits = 17;

// Whether lane `lane` of SM `smid` has its slot free: no leftover in it, and nobody reading one.
__device__ __forceinline__ bool lane_slot_empty(const cupreempt_control* c, unsigned smid,
                                                unsigned lane) {
  const unsigned long long mine = (1ull << lane) | (1ull << (32 + lane));
  return !(*(const volatile unsigned long long*)&c->leftover_state[smid] & mine);
}

// A look inside a chunk found a new command (`word`, as the control block holds it): whether
// the block leaves before its chunk's next task, giving the rest back. Inline: a call here,
// in the task loop, kept the body's values live across it and raised the wrappers from 31
// to 38 registers. The control block behind host memory (must_yield) leaves the decision to
// the chunk's end, as does the lane's slot still holding its last leftover: every task of
// the chunk then runs. (The launch's leftovers and the block's lane were checked in enter().)
__device__ __forceinline__ bool sent_away_mid_chunk(const cupreempt_control* c,
                                                    const cupreempt_host* host,
                                                    unsigned long long word,
                                                    volatile LeaderState& ls) {
  if (behind_host(host, (unsigned)(word >> 32), ls)) return false;
  const unsigned smid = ls.smid, lane = ls.lane;
  if (!sends_away((unsigned)word, c->sm_mask, smid)) return false;
  return lane_slot_empty(c, smid, lane);
}

// Whether the block's lane has a free slot for tasks it would give back: no leftover in it,
// and nobody reading one (only the lane's holder fills it).
__device__ __forceinline__ bool slot_free(const cupreempt_control* c,
                                          const unsigned long long* leftover,
                                          const StepState& ls) {
  const unsigned lane = ls.lane;
  return leftover && lane < CUPREEMPT_LANES && lane_slot_empty(c, ls.smid, lane);
}

// A command sends the block away with tasks in hand: whether it leaves now, its lane's slot
// free for them (give_back, from leave()). Where the slot still holds an earlier leftover (its
// one writer is this lane's holder), the tasks run first, and the block's next step looks at
// the command before it claims again (claim_next), so that it leaves then.
__device__ __forceinline__ bool leaves_with_tasks(const cupreempt_control* c,
                                                  const unsigned long long* leftover,
                                                  StepState& ls) {
  if (slot_free(c, leftover, ls)) return true;
  ls.claim_next = 1;
  return false;
}

// A block that leaves with tasks in hand ([ls.rest_begin, ls.rest_end), which next_chunk made
// sure its lane's slot is free for) puts them in that slot (leave()).
static __device__ CUPREEMPT_STEP void give_back(cupreempt_control* c, unsigned long long* leftover,
                                                StepState& ls) {
  const unsigned smid = ls.smid, lane = ls.lane;
  const unsigned long long begin = ls.rest_begin, end = ls.rest_end;
  ls.rest_end = 0;
  leftover[smid * CUPREEMPT_LANES + lane] = begin << kLeftoverCountBits | (end - begin);
  atomicAdd(&c->leftovers, 1);
  __threadfence();  // the slot before its bit
  atomicOr(&c->leftover_state[smid], 1ull << lane);
  atomicOr(&c->leftover_sms[smid / 32], 1u << (smid % 32));
  atomicAdd(&c->cut_chunks, 1u);
  // The leftover before the block's lane is free (leave()): once the host sees every lane
  // free it may launch the instance that takes it. The end of a block of the instance that
  // holds the stream has no fence of its own (run_tasks).
  __threadfence();
}

// Takes a leftover of SM `sm` if it has one: its packed chunk, else 0.
__device__ __forceinline__ unsigned long long take_leftover_of(cupreempt_control* c,
                                                               const unsigned long long* leftover,
                                                               unsigned sm) {
  unsigned long long* state = &c->leftover_state[sm];
  unsigned long long s = *(volatile unsigned long long*)state;
  for (;;) {
    const unsigned full = (unsigned)s;
    if (!full) return 0;
    const unsigned lane = __ffs(full) - 1;
    const unsigned long long was =
        atomicCAS(state, s, (s & ~(1ull << lane)) | (1ull << (32 + lane)));
    if (was == s) {
      __threadfence();  // the slot as its giver wrote it, before its bit
      const unsigned long long v =
          *(const volatile unsigned long long*)&leftover[sm * CUPREEMPT_LANES + lane];
      __threadfence();  // read before the slot is free again
      atomicAnd(state, ~(1ull << (32 + lane)));
      atomicSub(&c->leftovers, 1);
      return v;
    }
    s = was;
  }
}

// A leftover for the leader's block, if one is found: its own SM's first, then up to 16 of
// the SMs that have given any back (a search that goes on where the last one stopped), or
// all of them once no new task is left (a block that finds none then leaves).
__device__ __forceinline__ unsigned long long find_leftover(cupreempt_control* c,
                                                            const unsigned long long* leftover,
                                                            StepState& ls) {
  const unsigned most = ls.search_due == 2 ? CUPREEMPT_MAX_SMS : 16;
  const unsigned own = ls.smid;
  if (own < CUPREEMPT_MAX_SMS) {
    const unsigned long long v = take_leftover_of(c, leftover, own);
    if (v) return v;
  }
  unsigned tries = 0;
  for (unsigned k = 0; k < CUPREEMPT_MAX_SMS / 32 && tries < most; ++k) {
    const unsigned w = (ls.scan + k) % (CUPREEMPT_MAX_SMS / 32);
    unsigned sms = *(volatile unsigned*)&c->leftover_sms[w];
    while (sms && tries < most) {
      const unsigned sm = w * 32 + __ffs(sms) - 1;
      sms &= sms - 1;
      if (sm == own) continue;
      ++tries;
      const unsigned long long v = take_leftover_of(c, leftover, sm);
      if (v) return v;
    }
  }
  ls.scan = (ls.scan + 1) % (CUPREEMPT_MAX_SMS / 32);
  return 0;
}

// The leader's step after a next_chunk that found leftovers (ls.search_due), whose chunk is
// empty: one of them goes into the block's hands (ls.rest_*), and the next step runs it. A
// step of its own, not a call inside next_chunk: nested there, it raised the wrappers from 31
// to 44-48 registers. It writes no chunk itself: with the chunk's bounds and grid to split
// its first task, its call from the task loop raised every wrapper of the benchmark programs
// by 3-8 registers (the one-line kernel's to 35; nvcc 13.0, sm_90). When it finds none (all
// taken, or still being given back, or on SMs beyond this search), the next step claims new
// tasks, or leaves when there are none; the first instance's tail takes what is left.
static __device__ CUPREEMPT_STEP void take_leftover(cupreempt_control* c,
                                                    const unsigned long long* leftover,
                                                    StepState& ls) {
  const unsigned long long v = find_leftover(c, leftover, ls);
  ls.search_due = 0;
  if (!v) {
    ls.claim_next = 1;
    return;
  }
  const unsigned long long begin = v >> kLeftoverCountBits;
  ls.rest_begin = begin;
  ls.rest_end = begin + (v & ((1ull << kLeftoverCountBits) - 1));
}

// The command in force as a gated link's (or the anchor's) block starts, into ls as
// read_host_command() leaves it. Each block reading host memory itself made a link's 4,224
// blocks take milliseconds to start (H200: one read of host memory is about 2 us, and they
// queue), so the link's first block reads it and passes it on in the control block, and the
// others wait for that in device memory. A link's blocks all enter after the previous link's
// have left (the stream runs one after the other), so they take consecutive entry numbers, and
// the first of them is the one whose number is a multiple of the grid. An anchor's tail that
// goes back to work does not come here: stay() has just read the command in host memory.
//
// A block that starts late (part of the grid waited for room on the GPU) may take a forward
// older than a command the host has published since. The runtime's wait_yielded therefore
// counts such a kernel as yielded only once every block of the instance whose forward may be
// older has entered, and so holds its lane: the first block announces its instance in host
// memory before it reads the command (a system-wide fence between: the host publishes a
// command before it reads the announcement, so either it sees the announcement or this read
// sees the command), and the instance's last block to enter says so (link_entered), after
// every other block's lane. Timing the forward instead (blocks starting more than 2 us after
// it read host memory themselves) made most blocks of a full grid read it (H200).
__device__ __forceinline__ void link_command(cupreempt_control* c, cupreempt_host* h,
                                             StepState& ls) {
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  const unsigned entry = atomicAdd(&c->link_entries, 1u), first = entry - entry % blocks;
  const unsigned instance = entry / blocks + 1;
  if (entry == first + blocks - 1) {
    __threadfence_system();  // the other blocks' lanes (before their entry) first
    *(volatile unsigned*)&h->link_entered = instance;
  }
  if (entry == first) {
    *(volatile unsigned*)&h->link_announced = instance;
    __threadfence_system();
    unsigned mask[CUPREEMPT_MAX_SMS / 32];
    unsigned seq, cmd;
    for (;;) {  // a seqlock read of the whole command (the host's writes take microseconds)
      seq = load_acquire_sys(&h->seq);
      if (seq & 1u) continue;
      cmd = load_acquire_sys(&h->command);
#pragma unroll
      for (unsigned i = 0; i < CUPREEMPT_MAX_SMS / 32; ++i) mask[i] = load_acquire_sys(&h->sm_mask[i]);
      if (load_acquire_sys(&h->seq) == seq) break;
    }
    c->forward_seq = seq;
    c->forward_command = cmd;
#pragma unroll
    for (unsigned i = 0; i < CUPREEMPT_MAX_SMS / 32; ++i) c->forward_mask[i] = mask[i];
    __threadfence();
    atomicExch(&c->forward_ready, first + 1);
  } else {
    while (*(volatile unsigned*)&c->forward_ready != first + 1) {
    }
    __threadfence();
  }
  ls.host_seq = *(volatile unsigned*)&c->forward_seq;
  ls.host_away = sends_away(*(volatile unsigned*)&c->forward_command,
                            (const volatile unsigned*)c->forward_mask, ls.smid);
}

// The leader's first step in a block (or a parked block's return to work). In a runtime
// launch's first instance it takes the block's first chunk before anything else, without
// looking at the command: a block that starts while a command is in force runs that one chunk
// (one task when the size is adaptive) before it yields, as does any block that claimed just
// before the command landed. The claim cannot wait behind the rest of the step: the SM's warp
// scheduler favours some blocks, and once their warps compute, a leader still in its first
// step gets few issue slots and claims late. On the H100 a launch of exactly one task per
// block (1,024 tasks of about 140 us, scripts/probes/persistent_forms.cu) then had blocks with
// two tasks beside blocks with none, 4-10 tasks per SM, and ran 1.19x the original (1.35x
// with a host mirror); a claim as the first instruction, as a plain persistent loop makes it,
// keeps one task per block. Blocks of later instances (resumed after a preemption) and of
// launches outside the runtime look at the command first: a resumed instance starts while
// some SMs may still be preempted, and its blocks that land there must take nothing.
//
// Then the block counts itself before it looks at the command (in next_chunk, after its first
// chunk), so that the runtime, once the command is in the control block, either sees the block
// or knows that it will see the command. In host memory a plain store (lanes), no system-wide
// fence: thousands of blocks starting at once with one fence each made the starts, and with
// them the yields, take milliseconds (H100). A block that a standing order keeps off its SM
// (start_away) claims nothing: its first next_chunk sends it away. `n`: the first chunk's
// size (fixed, or first_chunk_size()). Returns whether the first chunk is in `st` (else the first
// next_chunk looks at the command and claims).
static __device__ CUPREEMPT_STEP bool enter(cupreempt_control* c, cupreempt_host* host,
                                          unsigned long long total, unsigned n,
                                          unsigned first, unsigned smid, unsigned start_away,
                                          unsigned gx, unsigned gy, unsigned gz,
                                          unsigned task_ns, bool leftovers,
                                          StepState& ls, BlockState& st) {
  // A runtime launch's first instance. Not its tail going back to work (stay()): that may be
  // for leftovers, which next_chunk takes.
  const bool take = first == CUPREEMPT_FIRST && host && !start_away && !ls.tail;
  unsigned long long begin = 0;
  if (take) begin = atomicAdd(&c->next_task, (unsigned long long)n);  // answered below
  ls.spent_ns = ls.spent_tasks = ls.unreported = ls.ran = ls.unposted = 0;
  ls.posted_ns = (unsigned)global_ns();
  ls.next = n;
  ls.min_chunk = 1;
  ls.lane = claim_lane(c, smid);
  ls.search_due = ls.claim_next = 0;
  ls.rest_end = 0;
  ls.scan = smid / 32;
  if (kLooks) {
    ls.cut_word = 0;
    // Looks inside chunks where a cut chunk's rest has a slot: the launch has slots, the block
    // a lane, and every task number fits the slot's packing.
    const bool cuts =
        leftovers && ls.lane < CUPREEMPT_LANES && !(total >> (64 - kLeftoverCountBits));
    ls.look_every = !cuts ? 0u : task_ns ? look_every_for(__fdividef(1.0f, (float)task_ns)) : 1u;
  }
  ls.smid = smid;
  ls.start_away = start_away;
#ifdef CUPREEMPT_AUDIT
  atomicAdd(&c->running_blocks, 1u);
#endif
  if (host && ls.lane < CUPREEMPT_LANES) host->lanes[smid][ls.lane] = 1;
  // The claim and the lane came from this launch's own control block; the launch's run time
  // and its stamps start once the kernel before it has ended (the other threads wait in
  // run_tasks).
  wait_for_predecessor();
  // `started` (the runtime's resume looks at it) and `entered_ns` (switches between kernels,
  // on the GPU's clock): in a first instance only the block with task 0 writes them (below).
  // Every block's three stores to host memory made its fence wait longer: a launch of 8,192
  // short tasks ran 33 us per launch, 2.4 us less without `started` alone (H200,
  // scripts/probes/persistent_bisect.sh 8192 16 5, cut no-started).
  if (host && (!take || ls.tail)) {
    if (first != CUPREEMPT_RESUMED) host->started = 1;
    host->entered_ns = global_ns();
  }
  // The fence orders the stores above before the block's first look at the command. A block
  // that took its first chunk looks only in its first next_chunk, so the fence waits there,
  // by when the stores to host memory have long landed: here it held every block's first
  // task for the round trip to host memory (on the H100 2.7 us of a launch's ramp; pathfinder
  // and priority_streams large 2 points faster without it, scripts/probes/compare_builds.sh).
  ls.fence_due = take;
  if (!take) {
    __threadfence();
    // A gated link or anchor starts when a gate opens, which the host does from host memory,
    // with the command that let it start possibly still on its way to the control block (or
    // held up behind this very stream's wait in a shared hardware queue): host memory decides
    // until the control block catches up (must_yield). The runtime then counts such a kernel
    // as yielded once no block holds a lane, whether or not the command has landed.
    // The anchor's tail going back to work (stay()) has just read host memory itself.
    if (host && starts_from_host_command(first) && !ls.tail) link_command(c, host, ls);
    return false;
  }
  if (begin == 0) {  // the launch's run time starts
    const unsigned long long now = global_ns();
    c->start_ns = now;
    host->started = 1;  // before this block's first look at the command (its fence)
    host->entered_ns = now;
  }
  post_chunk(st, begin, begin + n < total ? begin + n : total, begin >= total);
  if (kLooks) st.look_every = ls.look_every;
  ls.chunk_begin = begin;
  if (begin < total) st.first = TaskCtx::block_of(begin, gx, gy, gz);
  ls.last_ns = global_ns();
  return true;
}

#ifdef CUPREEMPT_AUDIT
// Tests (l.audit; only in CUPREEMPT_AUDIT builds, elsewhere it would be code that nothing runs
// but every first launch loads): counts one run of each task of the chunk the block has just
// finished. Here in the leader's step, not in the task loop: a branch per task there cost up to
// 2% (H100: black_scholes, convolution).
static __device__ CUPREEMPT_STEP void audit_chunk(unsigned* audit, unsigned long long begin,
                                                unsigned long long n) {
  for (unsigned long long t = begin; t < begin + n; ++t) atomicAdd(&audit[t], 1u);
}
#endif

// A block's share of the `left` tasks near a launch's end: kTailShare chunks per block.
__device__ __forceinline__ float fair_share(unsigned long long left) {
  return __fdividef((float)left, kTailShare * gridDim.x * gridDim.y * gridDim.z);
}

// A chunk cut to the tail's share `fair`, not below the contention floor.
__device__ __forceinline__ unsigned long long tail_chunk(float fair, const StepState& ls) {
#ifdef CUPREEMPT_CHUNK_LOG
  atomicAdd(&chunk_log[31], 1ull);
#endif
  return fair >= (float)ls.min_chunk ? (unsigned long long)fair : ls.min_chunk;
}

// A claim of `n` tasks, counted by size in CUPREEMPT_CHUNK_LOG builds.
__device__ __forceinline__ void log_claim(unsigned long long n) {
#ifdef CUPREEMPT_CHUNK_LOG
  const int bin = 31 - __clz((unsigned)n);  // n is at most kMaxChunk = 2^16
  atomicAdd(&chunk_log[bin < 30 ? bin : 30], 1ull);
#else
  (void)n;
#endif
}

// A block leaves because of a command: counted, and stamped for latency measurements.
__device__ __forceinline__ void note_yield(cupreempt_control* c, unsigned long long total,
                                           unsigned* audit, StepState& ls) {
  atomicAdd(&c->yielded_blocks, 1u);
  const unsigned long long decided = global_ns();
  atomicMax(&c->yield_ns, decided);
#ifdef CUPREEMPT_YIELD_LOG
  {  // the same stamp: the log's latest is the runtime's yield_ns (bench.cuh relies on it)
    const unsigned k = atomicAdd(&yield_log_count, 1u);
    if (k < kYieldLogSize) yield_log[k] = decided;
  }
#endif
#ifdef CUPREEMPT_AUDIT
  if (audit) atomicOr(&audit[total + ls.smid / 32], 1u << (ls.smid % 32));
#else
  (void)total, (void)audit;
#endif
}

// The leader's step between two chunks: look at the control word, size the next chunk from
// the time the last ones took, take it from the counter. Float arithmetic, for the same reason:
// 64-bit divisions raised the wrappers' register counts by 10-16. The time runs from the end
// of the leader's previous step to here, so it leaves out the claims: a claim waits in a
// queue of atomics when chunks are short, and counting that wait as work kept them short (on
// the H100, black_scholes ran 14% slow with chunks of 4 tasks; fixed chunks of 8: 0.2%).
// Last, the tasks the leader's block has finished count as done (progress) in the control
// block, with an atomic whose answer nobody waits for, at most every kProgressNs with
// adaptive chunks; the block whose new chunk holds a multiple of 2^progress_shift counts its
// tasks then, waits for the answer and refreshes host memory (about 1024 times per launch;
// not at a block's first chunk, which has nothing new to report).
static __device__ CUPREEMPT_STEP void next_chunk(cupreempt_control* c, cupreempt_host* host,
                                     unsigned long long total, unsigned fixed, unsigned budget,
                                     unsigned progress_shift, unsigned* audit, unsigned gx,
                                     unsigned gy, unsigned gz, const unsigned long long* leftover,
                                     StepState& ls, BlockState& st) {
#ifdef CUPREEMPT_AUDIT
  if (audit && ls.unreported) audit_chunk(audit, ls.chunk_begin, ls.unreported);
#endif
  // Size this chunk (and the looks inside it) from the time the last ones took.
  if (ls.unreported && (kLooks || !fixed)) {
    const unsigned long long now = global_ns();
    ls.spent_ns += now - ls.last_ns;
    ls.spent_tasks += ls.unreported;
    float want = 2.0f * ls.next;  // below the timer's resolution: grow
    const bool looks = kLooks && ls.look_every;  // enter() decided
    if (!ls.spent_ns) {
      if (looks) ls.look_every = kMaxChunk;
    } else {
      // __fdividef: an estimate needs no IEEE division (whose slow path is 2 KB of code).
      const float per_ns = __fdividef((float)ls.spent_tasks, (float)ls.spent_ns);  // tasks per ns
      if (looks) ls.look_every = look_every_for(per_ns);
      const float within_budget = (float)budget * per_ns;
      // Contention floor: the chunk must last long enough for every block's claim to fit
      // in the counter's queue (kClaimLineNs per operation, two per claim) with room to
      // spare, whatever the budget's growth step says.
      const float contention_floor = fminf(kClaimSlack * 2.0f * kClaimLineNs *
                                    (float)(gridDim.x * gridDim.y * gridDim.z) * per_ns,
                                within_budget);
      want = fmaxf(fminf(want, within_budget), contention_floor);
      ls.min_chunk = contention_floor >= 1.0f ? (unsigned)fminf(contention_floor, (float)kMaxChunk) : 1u;
    }
    if (ls.spent_tasks > 4096) {  // forget old history so that phase changes show
      ls.spent_ns /= 2;
      ls.spent_tasks /= 2;
    }
    if (!fixed) ls.next = want >= 1.0f ? (unsigned)fminf(want, (float)kMaxChunk) : 1u;
  }
#ifdef CUPREEMPT_CHUNK_LOG
  if (ls.unreported) {
    const unsigned long long us = (global_ns() - ls.last_ns) >> 10;
    const int bin = us ? 64 - __clzll((long long)us) : 0;
    atomicAdd(&look_log[bin < 31 ? bin : 31], 1ull);
  }
#endif
  unsigned long long begin = 0, end = 0;
  if (ls.fence_due) {  // enter()'s fence: the block's lane before its first look at the command
    __threadfence();
    ls.fence_due = 0;
  }
  // The counter has reached at least the end of the block's last chunk (a leftover's too: it
  // was claimed before it was given back).
  const unsigned long long known = ls.chunk_begin + ls.unreported;
  bool stop;
  if (ls.rest_end) {
    // Tasks in hand (a leftover taken, or a cut chunk's rest): the command first. They are the
    // chunk if it lets the block run or their slot is taken; else they go back (leave()).
    stop = must_yield(c, host, ls) && leaves_with_tasks(c, leftover, ls);
    if (stop) {
      note_yield(c, total, audit, ls);
    } else {
      begin = ls.rest_begin, end = ls.rest_end;
      ls.rest_end = 0;
    }
  } else if (ls.unreported && known >= total) {
    // The block ran the chunk that holds the last task: every new task is taken, and it
    // leaves without a load (a round trip on the launch's last block's way out). Leftovers,
    // which a yield may have left, are taken by the other blocks, which look for them when
    // their claims find no task left, or by the tail.
    stop = true;
  } else if (ls.unreported && !ls.claim_next) {
    // A block that has just run a chunk claims the next one beside the command's load, one
    // round trip for both, instead of claiming once the command has said to go on: that wait
    // was 3-8 points of a launch of short streaming tasks (scripts/probes/persistent_forms.cu,
    // docs/bench/README.md, "Short streaming tasks"). A command that sends the block away
    // then finds a chunk claimed, which goes back as a leftover (give_back, from leave()).
    // The tail's share is counted from what the block knows of the counter, a lower bound: the
    // counter's own load would be the round trip this saves. Near the end the count of
    // leftovers is loaded beside the claim, for a block that finds no new task left.
    unsigned long long n = ls.next;
    const float fair = fair_share(total - known);
    const bool near_end = (float)n > fair;
    if (!fixed && near_end) n = tail_chunk(fair, ls);
    log_claim(n);
    begin = atomicAdd(&c->next_task, n);
    const int line = near_end && leftover ? *(volatile int*)&c->leftovers : 0;
    stop = must_yield(c, host, ls);
    end = begin + n < total ? begin + n : total;
    if (stop) {
      if (begin < total) {  // sent away with the chunk just claimed in hand
        stop = leaves_with_tasks(c, leftover, ls);
        if (stop) ls.rest_begin = begin, ls.rest_end = end;
      }
      if (stop) note_yield(c, total, audit, ls);
    } else if (begin >= total) {
      // No new task left: leftovers, if any, else the block is done.
      const int left = near_end || !leftover ? line : *(volatile int*)&c->leftovers;
      stop = !(left > 0 && leftover);
      if (!stop) ls.search_due = 2, begin = end = 0;  // an empty chunk until take_leftover
    } else if (begin == 0 && host) {
      c->start_ns = global_ns();  // the launch's run time starts
    }
  } else {
    // The command first: the block's first step where enter() claimed nothing (a resumed
    // instance, a link, a launch outside the runtime, a block kept off its SM: it must take
    // nothing where the command sends it away), a step after an empty chunk, and after a
    // claim that a command found without a slot to give it back to. Both loads go out before
    // either answer is needed: one wait instead of two. The counter and the count of leftovers
    // share 16 bytes: one load.
    unsigned long long seen, line;
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
                 : "=l"(seen), "=l"(line)
                 : "l"(&c->next_task));
    stop = must_yield(c, host, ls);
    if (stop) {
      note_yield(c, total, audit, ls);
    } else {
      unsigned long long n = ls.next;
      // Leftovers first (take_leftover, the leader's next step): they are the oldest work, and
      // the runtime's stream order waits for them. An empty chunk until then.
      const bool search = leftover && (int)(unsigned)line > 0 && !ls.claim_next;
      ls.claim_next = 0;
      if (search) {
        ls.search_due = seen >= total ? 2 : 1;  // 2: no new task left, search every SM
      } else if (seen >= total) {
        stop = true;  // all taken: no atomic, the blocks of a launch all get here at its end
      } else {
        if (!fixed) {  // near the end, smaller chunks so that blocks finish together
          const float fair = fair_share(total - seen);
          if ((float)n > fair) n = tail_chunk(fair, ls);
        }
        log_claim(n);
        begin = atomicAdd(&c->next_task, n);
        if (begin == 0 && host) c->start_ns = global_ns();  // the launch's run time starts
        stop = begin >= total;
        end = begin + n < total ? begin + n : total;
      }
    }
  }
  post_chunk(st, begin, end, stop);
  if (kLooks) st.look_every = ls.look_every;
  ls.chunk_begin = begin;
  // The chunk's first blockIdx here, in the step: computed once after either step in
  // run_tasks, it cost pathfinder 2.5 points and convolution_separable 1.3-2.4 (H100,
  // scripts/probes/compare_builds.sh), though under -rdc it saved a 1.6 KB copy of split().
  // Not for the empty chunk that waits for take_leftover, which splits its own first task.
  if (!stop && !ls.search_due)
    st.first = TaskCtx::block_of(begin, gx, gy, gz);
  // Progress (kProgressNs): the tasks finished since the block's last count, counted now if
  // this claim refreshes the host mirror, if the block stops, with fixed chunks, or once
  // kProgressNs have passed; else later.
  const unsigned long long now = global_ns();
  const unsigned long long done = ls.unreported, owed = ls.unposted + done;
  const unsigned since = (unsigned)now - ls.posted_ns;  // modulo 2^32
  const unsigned long long step = 1ull << progress_shift;
  if (host && owed && !stop && ((begin + step - 1) & ~(step - 1)) < end) {
    host->done_tasks = atomicAdd(&c->done_tasks, owed) + owed;
    ls.unposted = 0, ls.posted_ns = (unsigned)now;
  } else if (owed && (stop || fixed || since >= kProgressNs)) {
    atomicAdd(&c->done_tasks, owed);
    ls.unposted = 0, ls.posted_ns = (unsigned)now;
  } else {
    ls.unposted = (unsigned)owed;
  }
  ls.ran += done;
  ls.unreported = 0;
  ls.last_ns = now;
}

// Stream order. The application's stream runs its next work when the
// launch's first instance ends, so that instance must not end before every task has retired,
// whatever preemptions happen. Its last block to leave the loop (the tail) therefore stays: it
// waits while the kernel is preempted or while other instances finish their last tasks, goes
// back to work when tasks are left and the newest command lets its SM run, and raises
// `finished` once every task has retired. The tail needs nothing from any other stream to do
// so: if the runtime's resumed instance cannot start (queued behind blocked work on a shared
// hardware queue), the tail does the remaining work itself (leftovers included); and it reads the command from host
// memory, which the host writes before the control stream delivers it. Only for the runtime's
// launches (the first instance, with a host mirror). Returns true to go back to work.
//
// At a launch's normal end the last retirements are still landing (microseconds): the tail
// polls without sleeping for kSpinNs before it parks, so that the stream goes on at once.
constexpr unsigned long long kSpinNs = 10000;
__device__ __forceinline__ bool stay(cupreempt_control* c, cupreempt_host* host,
                                     unsigned long long total, unsigned long long retired,
                                     unsigned long long start_ns, StepState& ls) {
  bool parked = false, again = false;
  const unsigned long long since = global_ns();
  // The count as leave()'s atomic saw it, then as loaded: at a launch's normal end the tail is
  // its last block out, and its atomic has usually seen every other block's retirement.
  while (retired < total && *(volatile unsigned long long*)&c->retired_tasks < total) {
    if (*(volatile unsigned long long*)&c->next_task < total ||
        *(volatile int*)&c->leftovers > 0) {
      read_host_command(host, ls);  // host memory has the newest command
      if (!ls.host_away) {
        again = true;
        break;
      }
    } else if (!parked && global_ns() - since < kSpinNs) {
      continue;  // the other blocks' last retirements are on their way
    }
    const unsigned long long yield_ns = *(volatile unsigned long long*)&c->yield_ns;
    if (yield_ns != ls.yield_ns_copied) {  // for latency measurements
      host->yield_ns = yield_ns;
      ls.yield_ns_copied = yield_ns;
    }
    if (!parked) host->tail_parked = 1;
    parked = true;
    __nanosleep(kParkSleepNs);
  }
  if (!again) {
    // No fence before `finished`: in a runtime launch nothing reads it to learn that the
    // results are visible; what follows the kernel in its stream waits for this block to end,
    // and the kernel's end makes them visible (this instance's results at its end; other
    // instances' blocks fenced theirs before they retired them, and this block has seen every
    // retirement). A fence here waited for the block's store to host memory (its lane) to land.
    atomicExch(&c->finished, 1u);
    host->done_tasks = total;
    // How long the launch ran, for the runtime's choice of form for the next launches of
    // the same kernel and configuration (docs/runtime.md, "Short launches").
    const unsigned long long run = global_ns() - start_ns;
    host->run_ns = run ? run : 1;
  }
  if (parked) host->tail_parked = 0;
  return again;
}

// The leader's last step in a block: its tasks retire. Runtime launches (host mirror) count
// them with an atomic, and a block of the instance that holds the stream (the first, or the
// anchor) counts itself out of it beside that (main_left) and loads the launch's start time:
// the answers come back in one round trip, and the last block out, the tail, knows from them
// whether every task has retired or it must wait, and then stays (stay(), inlined here: as a
// step of its own it loaded the start time after this step's round trip, on the launch's last
// block's way out). Other launches have no such block, so the block that retires the last task
// raises `finished`. Then the block stops counting itself (lane first, in host memory, before
// another block can take the lane over; the GPU's stores to host memory arrive in the order
// they were made). Returns whether the tail goes back to work.
//
// A gated link's block that retires the last task opens every gate (the top byte of
// host->gate, a byte of its own: the host writes the low bits), so that the stream runs through
// the remaining links, which find nothing to do, to the anchor, whose tail raises `finished`.
static __device__ CUPREEMPT_STEP bool leave(cupreempt_control* c, cupreempt_host* host,
                                            unsigned long long* leftover,
                                            unsigned long long total, unsigned first,
                                            StepState& ls) {
  if (ls.rest_end) give_back(c, leftover, ls);  // tasks in hand (next_chunk made room)
  const unsigned long long ran = ls.ran;
  unsigned long long retired = 0, start_ns = 0;
  const bool holds = host && holds_the_stream(first);
  if (host) {
    const bool count_out = holds && !ls.tail;
    unsigned left = 0;
    if (ran) retired = atomicAdd(&c->retired_tasks, ran) + ran;
    if (count_out) left = atomicAdd(&c->main_left, 1u);  // all out before any answer
    if (holds) start_ns = *(volatile unsigned long long*)&c->start_ns;
    if (retired == total && first == CUPREEMPT_LINK)
      reinterpret_cast<volatile unsigned char*>(&host->gate)[3] = CUPREEMPT_GATES_OPEN;
    if (count_out) ls.tail = left + 1 == gridDim.x * gridDim.y * gridDim.z;
  } else if (ran && atomicAdd(&c->retired_tasks, ran) + ran == total) {
    __threadfence();
    atomicExch(&c->finished, 1u);
  }
  if (ls.lane < CUPREEMPT_LANES) {
    if (host) host->lanes[ls.smid][ls.lane] = 0;
    atomicAnd(&c->sm_lanes[ls.smid], ~(1u << ls.lane));
  }
#ifdef CUPREEMPT_AUDIT
  atomicSub(&c->running_blocks, 1u);
#endif
  return holds && ls.tail && stay(c, host, total, retired, start_ns, ls);
}

// The task loop's shared state, one per block (run_tasks).
struct LoopShared {
  // Two copies, used by alternate chunks: the leader writes the next chunk's bounds while slow
  // threads may still be reading this chunk's (one-task chunks have no barrier in between).
  BlockState states[2];
  unsigned again;  // the tail goes back to work (stay())
#ifdef CUPREEMPT_LOOKS
  alignas(16) unsigned long long look_buf[2];  // the leader's look inside a chunk
#endif
  // Volatile: only the leader may touch it, and the compiler must not read it speculatively
  // in the other threads either (compute-sanitizer's racecheck reports such reads).
  volatile LeaderState ls;
};
static_assert(sizeof(LoopShared) <= CUPREEMPT_LOOP_SHARED_BYTES,
              "the launch adds CUPREEMPT_LOOP_SHARED_BYTES for InDynamicShared (control.h)");

// The loop's state in static `__shared__` variables (one set per kernel that runs the loop).
struct InStaticShared {
  static __device__ __forceinline__ LoopShared* dynamic() { return nullptr; }
};

// The loop's state in the last CUPREEMPT_LOOP_SHARED_BYTES of the launch's dynamic shared
// memory, past the kernel's own (launch.cuh adds them, after rounding the kernel's bytes up to
// 16). The kernel's `extern __shared__` arrays start at the same address as this one and
// never reach past the bytes its launch asked for.
struct InDynamicShared {
  static __device__ __forceinline__ LoopShared* dynamic() {
    extern __shared__ __align__(16) unsigned char cupreempt_dynamic_shared[];
    unsigned bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    return reinterpret_cast<LoopShared*>(cupreempt_dynamic_shared + bytes -
                                         CUPREEMPT_LOOP_SHARED_BYTES);
  }
};

// The persistent loop. One leader thread per block looks at the control word and takes a chunk
// of tasks from the counter; the decision reaches the block through shared memory and one
// barrier. Tasks taken are always finished, or given back as a leftover, which the next claims
// take before new tasks: a chunk claimed beside a command that sends the block away, or (looks
// inside chunks, CUPREEMPT_LOOKS) the rest of a chunk cut short. So a yield loses and repeats
// nothing, and a relaunch with the same control block resumes with the leftovers and at
// next_task.
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
// Completion: done_tasks counts finished tasks (progress; with adaptive chunks each block's
// at most kProgressNs late, next_chunk()). Results are made
// visible once per block, when it leaves (every thread fences; in the instance that holds the
// stream, its kernel's end does it); retired_tasks then counts the block's tasks, and
// `finished` is raised once it reaches the total (leave(), stay()).
//
// Where the loop keeps its block's state (LoopShared): `State` is InStaticShared (a static
// `__shared__` variable, every wrapper but the next) or InDynamicShared (the last
// CUPREEMPT_LOOP_SHARED_BYTES of the launch's dynamic shared memory, which launch.cuh adds to
// the launch: for kernels whose own static shared memory leaves no room under the 48 KB a
// block may declare statically; docs/transformation.md, "Shared memory at the limit").
template <class Ctx, bool TaskBarrier = true, class State = InStaticShared, class Body>
__device__ __forceinline__ void run_tasks(const cupreempt_launch& l, unsigned chunk,
                                          unsigned budget_ns, Body&& body) {
  // The static form's variables, each its own (a LoopShared of them moved the benchmark
  // wrappers' code around: nvcc 13.0, sm_90). The dynamic form names none of them, and the
  // compiler leaves them out.
  __shared__ BlockState static_states[2];
  __shared__ unsigned static_again;
#ifdef CUPREEMPT_LOOKS
  __shared__ alignas(16) unsigned long long static_look_buf[2];
#endif
  __shared__ volatile LeaderState static_ls;
  LoopShared* const dynamic = State::dynamic();  // null: the static form
  BlockState* const states = dynamic ? dynamic->states : static_states;
  unsigned& again = dynamic ? dynamic->again : static_again;
#ifdef CUPREEMPT_LOOKS
  unsigned long long* const look_buf = dynamic ? dynamic->look_buf : static_look_buf;
#endif
  volatile LeaderState& ls = dynamic ? dynamic->ls : static_ls;
  cupreempt_control* const c = l.control;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  const unsigned fixed = l.chunk ? l.chunk : chunk;
  const unsigned budget = l.budget_ns ? l.budget_ns : (budget_ns ? budget_ns : kDefaultBudgetNs);
  if (leader) ls.tail = ls.host_seq = ls.host_away = 0, ls.yield_ns_copied = 0;

  // The leader takes a round's first chunk into states[0].
  const auto enter_round = [&]() {
    const unsigned smid = sm_id();
    const unsigned n = fixed ? fixed
                             : first_chunk_size(budget, l.task_ns, l.total_tasks,
                                                gridDim.x * gridDim.y * gridDim.z);
    return enter(c, l.host, l.total_tasks, n, l.first, smid, starts_off(l, smid), l.grid_x,
                 l.grid_y, l.grid_z, l.task_ns, l.leftover != nullptr, step_state(ls), states[0]);
  };
  bool claimed = false;  // the leader's first chunk of a round is in states[0]
  bool starting = true;  // a round starts (the same in every thread)
  // One loop, rounds included (a tail that goes back to work, stay(), starts a round in the
  // stop branch), not a loop of rounds around the chunk loop: inside that nest, ptxas (nvcc 13,
  // sm_90) left out the reconvergence between an atomic it expands into a compare-and-swap
  // loop (a float atomicAdd on shared memory) and the body's next barrier, so the first lane
  // of each warp to succeed arrived at the barrier for its whole warp and the block read the
  // sum before the other lanes had added (HeCBench's expdist: 1/32 of its sum;
  // fixtures/shared_float_atomic.cu). tests/nvcc.rs checks the machine code.
  for (unsigned parity = 0;; parity ^= 1u) {
    BlockState& st = states[parity];
    if (starting) {
      claimed = leader && enter_round();
      // Every thread, the leader again (it waited in enter()): a branch around it for the
      // leader raised most wrappers by 2 registers (nvcc 13.0, sm_90).
      wait_for_predecessor();
      starting = false;
    }
    if (leader && !claimed) {
      // The chunk's address for the call, made in this branch: the compiler otherwise makes
      // it (a generic pointer) at the loop's top, seven instructions in every warp and chunk
      // (pathfinder's wrapper), and holds it in registers through the step. An index it
      // cannot see through keeps it here; without it some of the benchmark programs' capped
      // wrappers spill (4-16 bytes), with it none does (scripts/probes/wrapper_registers.sh,
      // nvcc 13.0, sm_90).
      unsigned step_parity = parity;
      asm volatile("" : "+r"(step_parity));
      next_chunk(c, l.host, l.total_tasks, fixed, budget, l.progress_shift, l.audit, l.grid_x,
                 l.grid_y, l.grid_z, l.leftover, step_state(ls), states[step_parity]);
      if (ls.search_due) take_leftover(c, l.leftover, step_state(ls));
    }
    claimed = false;
    __syncthreads();
    // Every thread reads the same values, but ptxas cannot tell that from a shared-memory
    // load: it then assumes that warps may diverge in the task loop and gives each barrier
    // of the body a second, divergent copy of the code after it (up to twice the body's size,
    // which the first launch pays for in loading time). A value that a shuffle takes from
    // lane 0 with the full mask is known to be the same in every lane. Lanes that a partial
    // last warp does not have count as exited, which the full mask allows.
    // At most kMaxChunk, or kStopped.
    const unsigned n = __shfl_sync(0xffffffffu, st.count, 0);
    if (n == kStopped) {
      // Every thread has left the chunk (all read the same count after the same barrier).
      // Its results become visible device-wide: each thread's fence, except in the instance
      // that holds the stream, whose kernel ends only after every task has retired (its tail
      // stays), and that end makes them visible to whatever follows it. Nothing else reads
      // them before then: the tasks of other instances are other original blocks. The barrier
      // orders the fences before the leader's retirement; without fences the leader goes on.
      if (!(l.host && holds_the_stream(l.first))) {
        __threadfence();
        __syncthreads();
      }
      if (leader) {
        again = leave(c, l.host, l.leftover, l.total_tasks, l.first, step_state(ls));
      }
      __syncthreads();
      if (!__shfl_sync(0xffffffffu, again, 0)) break;
      parity = 1u;  // the step makes it 0: the new round's first chunk goes to states[0]
      starting = true;
      continue;
    }
#ifdef CUPREEMPT_LOOKS
    // Looks inside the chunk: after task `until - 1`, then every st.look_every tasks (~0u:
    // none left). The same in every thread. The leader fetches the command while that task
    // runs, and the block leaves before the next one if it must, giving the rest of the chunk
    // back (sent_away_mid_chunk, give_back); the look's barrier, one that reduces the leader's
    // answer, stands in for the one between two tasks. Tasks without a look cost two compares
    // more than a loop without looks: reading the look's schedule from shared memory in each
    // task cost black_scholes and vector add 10 points (H200, compare_builds.sh).
    unsigned until = __shfl_sync(0xffffffffu, st.look_every, 0);
    if (!until || until >= n) until = ~0u;
    unsigned i = 0;  // not unrolled, as the loop without looks below
#pragma unroll 1
    while (i < n) {  // n is 0 where take_leftover found none
      if (leader && i + 1 == until) look_issue(look_buf, c);
      Ctx ctx(l, st, i);
      body(ctx);
      if (++i == n) break;
      if (i == until) {
        bool cut = false;
        if (leader) {
          const unsigned long long word = look_word(look_buf, c);
          const unsigned yields = CUPREEMPT_YIELD_ALL | CUPREEMPT_YIELD_SMS;
          if (((unsigned)word & yields) && word != ls.cut_word) {
            ls.cut_word = word;
            cut = sent_away_mid_chunk(c, l.host, word, ls);
          }
        }
        // This exit makes ptxas treat the loop as divergent: the body loses its uniform
        // registers (pathfinder: 4 instructions more per row of its pyramid, 8% more in all;
        // ncu source counters, H200). The barrier's answer without the shuffle keeps them, but
        // raised the plain wrapper to 38 registers and cost bitonic_sort, black_scholes and
        // convolution_separable 1-3 points for pathfinder's 1.7 (compare_builds.sh).
        if (__shfl_sync(0xffffffffu, __syncthreads_or(cut), 0)) break;
        // Read again, not kept in a register through the tasks (one more register there).
        until += __shfl_sync(0xffffffffu, *(volatile unsigned*)&st.look_every, 0);
        if (until >= n) until = ~0u;
        continue;
      }
      // The next task may reuse this task's shared memory. After the last task of a chunk the
      // leader's barrier above does this job.
      if (TaskBarrier) __syncthreads();
    }
    if (leader) {
      ls.unreported = i;  // the whole chunk, or the tasks before a cut (the rest to give back)
      if (i < n) ls.rest_begin = st.begin + i, ls.rest_end = st.begin + n;
    }
#else
    // Not unrolled: each unrolled copy holds the whole body (code size, above), and tasks
    // of one thread cannot overlap anyway (a task's stores may alias the next one's loads).
    // One compare per task: the loop's own condition is `n` alone, which the compiler tests
    // once, and the count's test after each task decides both the barrier and the next trip
    // (a loop on `i < n` with `i + 1 < n` before the barrier compares twice).
#pragma unroll 1
    for (unsigned i = 0; n != 0;) {
      Ctx ctx(l, st, i);
      body(ctx);
      if (++i == n) break;
      // The next task may reuse this task's shared memory. After the last task of a chunk the
      // leader's barrier above does this job.
      if (TaskBarrier) __syncthreads();
    }
    if (leader) ls.unreported = n;
#endif
  }
}

}  // namespace cupreempt
