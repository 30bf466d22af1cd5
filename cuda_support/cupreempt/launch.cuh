// cupreempt host side: what a rewritten launch site calls.
//
//   k<<<grid, block, smem, stream>>>(args...)
// becomes
//   cupreempt::launch<k__cupreempt_kernels>(grid, block, smem, stream)(args...)
//
// `launch` returns a launcher whose call operator takes the kernel's own parameter types (not
// deduced ones), so the arguments convert exactly as in the original launch: a null pointer
// constant (`NULL`, `0`) forwarded through a template would be a plain integer, which does not
// convert to a pointer (and draws -Wconversion-null).
//
// `Kernels` names the original kernel (Kernels::original) and its persistent wrapper
// (Kernels::wrapper, and Kernels::wrapper_r32, the same held to 32 registers). The launch stays
// asynchronous and on the caller's stream. The transformer spells `launch`, the struct's name and
// its members from src/vocab.rs: a change to one must change the other.
//
// By default the launch goes through the runtime's C ABI (runtime.h), which owns the control
// block and keeps stream order across preemptions; link with -lcupreempt_runtime. Built by the
// compiler launcher (which defines CUPREEMPT_RUNTIME_LIBRARY in its copy of runtime_path.h),
// the launch code names none of its functions at link time: it finds them once, in the program
// (linked with the runtime, or preloaded), else in the library that CUPREEMPT_RUNTIME_LIBRARY
// names (the environment's, else the launcher's), so that the objects also link where the link
// step is the host compiler's and does not name the runtime (a Makefile's
// `g++ -o prog *.o -lcudart`); with no runtime found, every launch runs the original kernel.
// Should the runtime refuse the launch, the original kernel is launched exactly as written: an
// invalid configuration then reports the original's error through cudaGetLastError(), and any
// other failure still computes the original result (not preemptible; CUPREEMPT_VERBOSE=1 says
// why). Define CUPREEMPT_STANDALONE to run without the runtime: each launch then gets its own
// control block from the stream-ordered allocator and runs to completion.
#pragma once
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include "control.h"
#ifndef CUPREEMPT_STANDALONE
#include "runtime.h"
#include "runtime_library.h"
#endif

// Every transformed unit includes these headers, so they include only what is cheap to parse:
// <mutex> and <unordered_map> cost a unit about 0.9 s of nvcc's time (docs/build.md, "Compile
// time"), which is why the table of kernels known by pointer lives in the runtime.
//
// The headers compile as C++11 (programs built with -std=c++11 include them): no C++14 library
// aliases or index sequences, no inline variables, no C++17 attributes unless the program's
// dialect has them (host compilers warn of them, and a build with -Werror fails).
#if __cplusplus >= 201703L
#define CUPREEMPT_NODISCARD [[nodiscard]]
#else
#define CUPREEMPT_NODISCARD
#endif

// Weak declarations: the wrappers of a kernel defined in another file, which may not have been
// transformed; then they are null, and launches run the original kernel.
#if defined(__GNUC__) || defined(__clang__)
#define CUPREEMPT_WEAK __attribute__((weak))
#else
#define CUPREEMPT_WEAK
#endif

namespace cupreempt {

namespace detail {
// std::index_sequence_for, in C++11.
template <size_t... I>
struct indices {};
template <size_t N, size_t... I>
struct make_indices : make_indices<N - 1, N - 1, I...> {};
template <size_t... I>
struct make_indices<0, I...> {
  using type = indices<I...>;
};
template <class... T>
struct indices_for : make_indices<sizeof...(T)> {};

inline unsigned env_u32(const char* name) {
  const char* v = std::getenv(name);
  return v ? (unsigned)std::strtoul(v, nullptr, 10) : 0u;
}

// Dynamic shared memory a launch of `Kernels`' wrappers adds for the task loop's state: none,
// or CUPREEMPT_LOOP_SHARED_BYTES where the transformation put that state there
// (`loop_state_dynamic` in the launch types; task_loop.cuh, InDynamicShared).
template <class Kernels, class = void>
struct loop_shared_bytes {
  static constexpr unsigned value = 0;
};
template <class Kernels>
struct loop_shared_bytes<Kernels, decltype((void)Kernels::loop_state_dynamic)> {
  static constexpr unsigned value = CUPREEMPT_LOOP_SHARED_BYTES;
};

// A wrapper launch's dynamic shared memory: the original's `smem`, then, where the wrapper
// keeps the loop's state there (`loop_bytes`), the state past it rounded up to 16 bytes.
inline size_t wrapper_smem(size_t smem, unsigned loop_bytes) {
  return loop_bytes ? ((smem + 15) & ~size_t(15)) + loop_bytes : smem;
}

// The limit last set on a wrapper that keeps the loop's state in dynamic shared memory, per
// device (a function's attributes are its context's): its launches raise it only when they need
// more, not on every launch (two driver calls each). Devices past the table ask every time.
// Read and raised with the compiler's atomic built-ins (threads may launch at once): <atomic>
// is not among the cheap headers a transformed unit may include (tests/support_headers.rs).
constexpr int kRaisedLimitDevices = 32;
struct RaisedLimits {
  size_t bytes[kRaisedLimitDevices];
};
// `Kernels`' table, or null where its wrappers keep the loop's state in static shared memory
// (`loop_shared_bytes`): a launch given a table adds the state's bytes. Static, as
// `launch_erased` is: two units' `static` kernels of one name share no table.
template <class Kernels>
static RaisedLimits* raised_limits() {
  static RaisedLimits limits;  // static storage: zero before any launch
  return loop_shared_bytes<Kernels>::value ? &limits : nullptr;
}

// A program that raised the original's dynamic shared-memory limit expects the launch to work;
// a wrapper that adds the loop's state to it (`wsmem` above `smem`) needs its own limit raised,
// since its static shared memory already fills the 48 KB (`wrapper_smem`). `raised`: where such
// a wrapper's limit is remembered (`raised_limits`), or null.
template <class O, class W>
void copy_smem_limit(O original, W wrapper, size_t smem, size_t wsmem, RaisedLimits* raised) {
  if (wsmem <= 48 * 1024 && wsmem == smem) return;
  size_t* set = nullptr;
  int device = -1;
  if (raised && wsmem > smem && cudaGetDevice(&device) == cudaSuccess && device >= 0 &&
      device < kRaisedLimitDevices) {
    set = &raised->bytes[device];
    if (wsmem <= __atomic_load_n(set, __ATOMIC_ACQUIRE)) return;
  }
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, original) == cudaSuccess) {
    size_t limit = (size_t)attr.maxDynamicSharedSizeBytes;
    if (wsmem > smem && limit < wsmem) limit = wsmem;
    if (cudaFuncSetAttribute(wrapper, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)limit) ==
            cudaSuccess &&
        set) {
      size_t seen = __atomic_load_n(set, __ATOMIC_RELAXED);
      while (seen < limit && !__atomic_compare_exchange_n(set, &seen, limit, true,
                                                          __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
      }
    }
  }
  (void)cudaGetLastError();  // our query's error is not the program's
}

// The wrapper to launch: the one held to 32 registers where the original needs at most 32 and
// the other wrapper more, so that the wrapper keeps the original's occupancy (above 32
// registers, fewer threads fit on an SM). Asked once per kernel; on any error, `wrapper`.
// CUPREEMPT_NO_R32=1: always `wrapper` (to compare).
template <class O, class W>
W pick_wrapper(O original, W wrapper, W wrapper_r32) {
  // A null wrapper: declared weak and defined nowhere (see CUPREEMPT_WEAK).
  if (!wrapper || !wrapper_r32 || wrapper_r32 == wrapper || env_u32("CUPREEMPT_NO_R32"))
    return wrapper;
  cudaFuncAttributes o, w;
  if (cudaFuncGetAttributes(&o, original) != cudaSuccess ||
      cudaFuncGetAttributes(&w, wrapper) != cudaSuccess) {
    (void)cudaGetLastError();  // our query's error is not the program's
    return wrapper;
  }
  return o.numRegs <= 32 && w.numRegs > 32 ? wrapper_r32 : wrapper;
}

template <class Kernels>
auto chosen_wrapper() -> typename std::remove_cv<decltype(Kernels::wrapper)>::type {
  static const auto w = pick_wrapper(Kernels::original, Kernels::wrapper, Kernels::wrapper_r32);
  return w;
}

// A kernel's wrapper picker, by which launches that know the kernel only by pointer find its
// wrapper (launch_any below; the table of pickers is the runtime's).
using AnyFn = void (*)();
using AnyPick = AnyFn (*)();
template <class Kernels>
AnyFn any_pick() {
  return reinterpret_cast<AnyFn>(chosen_wrapper<Kernels>());
}
}  // namespace detail

#ifndef CUPREEMPT_STANDALONE

namespace detail {
// The runtime's functions that launches call, found once (see the top of this file); all null
// where there is no runtime.
struct RuntimeApi {
  decltype(&::cupreempt_rt_plan) plan;
  decltype(&::cupreempt_rt_launch) launch;
  decltype(&::cupreempt_rt_launch_planned) launch_planned;
  decltype(&::cupreempt_rt_release) release;
  decltype(&::cupreempt_rt_last_error) last_error;
  decltype(&::cupreempt_rt_original_launched) original_launched;
  decltype(&::cupreempt_rt_module_wrapper) module_wrapper;
  decltype(&::cupreempt_rt_register_preload) register_preload;
  decltype(&::cupreempt_rt_register_any) register_any;
  decltype(&::cupreempt_rt_any_pick) any_pick;
  // Optional: a runtime without it is still one, its launches look their functions up each time.
  decltype(&::cupreempt_rt_context_id) context_id;
};

template <class F>
void runtime_symbol(const char* name, F& f) {
  // Copied, not cast: a cast between object and function pointers draws -Wpedantic.
  void* p = cupreempt_runtime_symbol(name);
  static_assert(sizeof f == sizeof p, "function and object pointers differ in size");
  std::memcpy(&f, &p, sizeof f);
}

inline RuntimeApi find_runtime() {
#ifndef CUPREEMPT_RUNTIME_LIBRARY
  // Not built by the compiler launcher: the program links -lcupreempt_runtime itself, and
  // these references keep it linked (a linker with --as-needed drops a library that no object
  // names).
  RuntimeApi direct = {&::cupreempt_rt_plan,         &::cupreempt_rt_launch,
                       &::cupreempt_rt_launch_planned, &::cupreempt_rt_release,
                       &::cupreempt_rt_last_error,   &::cupreempt_rt_original_launched,
                       &::cupreempt_rt_module_wrapper, &::cupreempt_rt_register_preload,
                       &::cupreempt_rt_register_any, &::cupreempt_rt_any_pick,
                       &::cupreempt_rt_context_id};
  return direct;
#else
  const CupreemptRuntimeLibrary& lib = cupreempt_runtime_library();
  if (!lib.handle && env_u32("CUPREEMPT_VERBOSE"))
    std::fprintf(stderr,
                 "cupreempt: no runtime (libcupreempt_runtime is not linked%s%s%s): kernels run "
                 "as written\n",
                 lib.tried ? ", and " : "", lib.tried ? lib.tried : "",
                 lib.tried ? " did not load" : "");
  RuntimeApi api;
  runtime_symbol("cupreempt_rt_plan", api.plan);
  runtime_symbol("cupreempt_rt_launch", api.launch);
  runtime_symbol("cupreempt_rt_launch_planned", api.launch_planned);
  runtime_symbol("cupreempt_rt_release", api.release);
  runtime_symbol("cupreempt_rt_last_error", api.last_error);
  runtime_symbol("cupreempt_rt_original_launched", api.original_launched);
  runtime_symbol("cupreempt_rt_module_wrapper", api.module_wrapper);
  runtime_symbol("cupreempt_rt_register_preload", api.register_preload);
  runtime_symbol("cupreempt_rt_register_any", api.register_any);
  runtime_symbol("cupreempt_rt_any_pick", api.any_pick);
  runtime_symbol("cupreempt_rt_context_id", api.context_id);
  // A library of another version that lacks one is no runtime to these launches.
  if (!api.plan || !api.launch || !api.launch_planned || !api.release || !api.last_error ||
      !api.original_launched || !api.module_wrapper || !api.register_preload ||
      !api.register_any || !api.any_pick)
    api = RuntimeApi();
  return api;
#endif
}

inline const RuntimeApi& runtime() {
  static const RuntimeApi api = find_runtime();
  return api;
}

// The functions (CUfunctions) that a kernel's launches on this thread looked up last, by their
// host symbols, and the context they belong to (`context`: cupreempt_rt_context_id's key, never
// reused, so a reset device or another device's context is looked up in afresh). A lookup
// (cudaGetFuncBySymbol) costs 0.06-0.14 µs of host time, and a launch made two; the key, two
// driver queries (0.015 µs on an H100). Per thread, so that no lock or atomic guards it
// (<atomic> is not among the cheap headers).
struct FunctionCache {
  unsigned long long context;
  const void* original_symbol;
  cudaFunction_t original;
  const void* wrapper_symbol;
  cudaFunction_t wrapper;
};
// `Kernels`' cache on this thread. Static, as `launch_erased` is: two units' `static` kernels
// of one name share none.
template <class Kernels>
static FunctionCache* function_cache() {
  static thread_local FunctionCache cache;  // zero: no context
  return &cache;
}

// The function of `symbol` in the current context, or null (its error cleared: our lookup's
// error is not the program's).
inline cudaFunction_t function_of(const void* symbol) {
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, symbol) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return f;
}

// Where a `CaptureLaunches` on this thread collects its launches' handles, or null. A
// function's static, not an inline variable (C++17).
struct HandleSink {
  void (*push)(void* handles, cupreempt_handle h);
  void* handles;
};
inline HandleSink*& captured() {
  static thread_local HandleSink* sink = nullptr;
  return sink;
}

// Kernels that a launch knows only by pointer (launch_any: a macro's launch of the kernel its
// use names) are found by their original's address: each transformed kernel that is no
// template registers its wrapper picker with the runtime, from a static initializer of its
// unit (`K__cupreempt_kernels_any`, after its launch types). Null where no transformed kernel
// registered it (a template's instance, a kernel of a file not transformed) or there is no
// runtime.
inline AnyPick any_pick_of(AnyFn original) {
  return runtime().any_pick ? runtime().any_pick(original) : nullptr;
}
// A kernel whose wrappers add the loop's state to the launch's shared memory is not
// registered: the table has no room for the bytes, so its launches by pointer run as written.
template <class Kernels>
bool register_any() {
  if (runtime().register_any && !loop_shared_bytes<Kernels>::value)
    runtime().register_any(reinterpret_cast<AnyFn>(Kernels::original), &any_pick<Kernels>);
  return true;
}

// This unit's number with the runtime where the compiler launcher split it (the header it
// pre-includes registers the unit's wrapper module), else 0. Not inline: each unit its own.
static inline int split_unit() {
#ifdef CUPREEMPT_SPLIT_UNIT
  return ::cupreempt_wrapper_unit;
#else
  return 0;
#endif
}

// The handle of a kernel's original (slot 0) or wrapper (1, 2) in the current context, for the
// runtime's early loading (cupreempt_rt_register_preload): 1 when there is one. Looking a
// function up loads its code, so the runtime asks slot by slot.
template <class Kernels>
int preload_lookup(int slot, void** func) {
  const void* symbols[] = {(const void*)Kernels::original, (const void*)Kernels::wrapper,
                           (const void*)Kernels::wrapper_r32};
  // A null wrapper: weak, defined nowhere; the third is the second where no kernel is held to
  // 32 registers.
  if (slot < 0 || slot > 2 || !symbols[slot] || (slot == 2 && symbols[2] == symbols[1]))
    return 0;
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, symbols[slot]) != cudaSuccess) {
    (void)cudaGetLastError();  // our lookup's error is not the program's
    return 0;
  }
  *func = (void*)f;
  return 1;
}

// Registered once per kernel launched in this program, before main (a static initializer);
// also by the original's address (register_any), for launches that know the kernel only by
// pointer: a template's instance registers so wherever a launch site of the program names it.
template <class Kernels>
struct Preload {
  static const bool registered;
};
// Defined out of the class (an inline member is C++17); initialized where a launch names it.
template <class Kernels>
const bool Preload<Kernels>::registered =
    ((runtime().register_preload ? runtime().register_preload(&preload_lookup<Kernels>)
                                 : (void)0),
     register_any<Kernels>());

// Launches the original kernel where the runtime's plan says so (cupreempt_rt_plan), else the
// wrapper that `pick` returns (or, where that is null, the one the runtime finds by the
// original's name in a wrapper module), preemptible; `pick` runs only then, so that a program
// whose launches all run the original never loads the wrappers (lazy module loading).
// Not a template: one copy per unit serves every launch (`launch_values` only packs the
// arguments). Instantiated per launch, its body cost about 0.1 s of host compile each (gcc -O2:
// a unit with 24 launches of a declared template kernel, 0.2 s as written, 2.5 s transformed).
// Static, as `split_unit` is: each unit's copy asks for its own wrapper module.
// `raised`: the kernel's table where its wrappers keep the loop's state in dynamic shared
// memory (`raised_limits`), which the launch then adds (`wrapper_smem`); such a wrapper is
// never looked up by name (the compiler launcher keeps it out of the wrapper module, so that
// no launch finds it without the bytes).
static inline void launch_erased(const void* original, AnyPick pick, dim3 grid, dim3 block,
                          size_t smem, cudaStream_t stream, void** ptrs, size_t* sizes,
                          unsigned nargs, RaisedLimits* raised, FunctionCache* cache) {
  const unsigned loop_bytes = raised ? CUPREEMPT_LOOP_SHARED_BYTES : 0u;
  const unsigned g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
  static const unsigned chunk = env_u32("CUPREEMPT_CHUNK");
  static const unsigned budget_ns = env_u32("CUPREEMPT_BUDGET_NS");
  const RuntimeApi& rt = runtime();
  int status = rt.plan ? CUPREEMPT_OK : CUPREEMPT_RUN_ORIGINAL;
  // The cache holds this context's functions only: another context's key empties it.
  const unsigned long long context = cache && rt.plan && rt.context_id ? rt.context_id() : 0;
  if (!context) {
    cache = nullptr;
  } else if (cache->context != context || cache->original_symbol != original) {
    *cache = FunctionCache();
    cache->original = function_of(original);
    if (cache->original) {
      cache->context = context;
      cache->original_symbol = original;
    }
  }
  cudaFunction_t o = cache ? cache->original : rt.plan ? function_of(original) : nullptr;
  // A caller that keeps the handles (CaptureLaunches) wants to preempt: always preemptible.
  const bool planned = o && !captured();
  if (planned) status = rt.plan((void*)o, g, b, smem, (void*)stream);
  if (status == CUPREEMPT_OK) {
    const void* wrapper = pick ? reinterpret_cast<const void*>(pick()) : nullptr;
    const size_t wsmem = wrapper_smem(smem, loop_bytes);
    cudaFunction_t f = nullptr;
    if (wrapper) {
      copy_smem_limit(original, wrapper, smem, wsmem, raised);
      if (cache && cache->context == context && cache->wrapper_symbol == wrapper) {
        f = cache->wrapper;
      } else {
        f = function_of(wrapper);
        if (cache && cache->context == context && f) {
          cache->wrapper_symbol = wrapper;
          cache->wrapper = f;
        }
      }
    } else if (o && !loop_bytes) {
      // No wrapper symbol here: the unit's wrappers are in a module of their own (the compiler
      // launcher's split units, docs/build.md), found by the original's name.
      f = (cudaFunction_t)rt.module_wrapper((void*)o, smem, split_unit());
    }
    cupreempt_handle h = 0;
    if (!f) {
      status = wrapper ? CUPREEMPT_ERROR_INVALID_ARGUMENT : CUPREEMPT_RUN_ORIGINAL;
      if (!wrapper && env_u32("CUPREEMPT_VERBOSE"))
        std::fprintf(stderr,
                     "cupreempt: launching the original kernel: its wrappers are not linked (the "
                     "file that defines it was not transformed, or refused it)\n");
    } else if (planned) {
      // Planned launches are never captured (`planned`): no handle, released at once.
      status = rt.launch_planned((void*)f, (void*)o, g, b, wsmem, (void*)stream, ptrs, sizes,
                                 nargs, chunk, budget_ns, nullptr);
      if (status == CUPREEMPT_OK) return;
    } else {
      status = rt.launch((void*)f, g, b, wsmem, (void*)stream, ptrs, sizes, nargs, chunk,
                         budget_ns, &h);
    }
    if (status == CUPREEMPT_OK) {
      if (captured())
        captured()->push(captured()->handles, h);
      else
        (void)rt.release(h);
      return;
    }
  }
  if (status != CUPREEMPT_RUN_ORIGINAL && status != CUPREEMPT_RUN_ORIGINAL_TIMED &&
      env_u32("CUPREEMPT_VERBOSE"))
    std::fprintf(stderr, "cupreempt: launching the original kernel: %s\n", rt.last_error());
  // As written: its error, if any, is left for cudaGetLastError() as the original's.
  (void)cudaLaunchKernel(original, grid, block, ptrs, smem, stream);
  // A timed trial of the original form (the runtime's plan asked for it): its end event.
  if (status == CUPREEMPT_RUN_ORIGINAL_TIMED) (void)rt.original_launched((void*)stream);
}

// `launch_erased` with `values` (the arguments converted to the parameter types) as the
// argument pointers and sizes it takes. Static, like `launch_erased`: its instances no longer
// depend on the kernel, and two units' `static` kernels of one signature would share one
// instance, the linker's pick, and with it one unit's wrapper module (the other unit's
// launches ran the first unit's kernel).
template <class... P, class Values, size_t... I>
static void launch_values(void (*original)(P...), AnyPick pick, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Values& values, indices<I...>, RaisedLimits* raised,
                   FunctionCache* cache) {
  void* ptrs[] = {(void*)&std::get<I>(values)..., nullptr};
  size_t sizes[] = {sizeof(std::get<I>(values))..., 0};
  launch_erased(reinterpret_cast<const void*>(original), pick, grid, block, smem, stream, ptrs,
                sizes, (unsigned)sizeof...(P), raised, cache);
}
}  // namespace detail

// While one is alive, launches made on this thread hand their handles to `handles` (a
// std::vector<cupreempt_handle>, or any container with push_back) instead of detaching them,
// so that the caller can preempt and resume them (benchmarks, schedulers). The caller then
// owns the handles and must cupreempt_rt_release() them. The container's type is the
// constructor's to know, so that this header need not include <vector>.
class CaptureLaunches {
 public:
  template <class Handles>
  explicit CaptureLaunches(Handles& handles)
      : sink_{&push<Handles>, &handles}, previous_(detail::captured()) {
    detail::captured() = &sink_;
  }
  ~CaptureLaunches() { detail::captured() = previous_; }
  CaptureLaunches(const CaptureLaunches&) = delete;
  CaptureLaunches& operator=(const CaptureLaunches&) = delete;

 private:
  template <class Handles>
  static void push(void* handles, cupreempt_handle h) {
    static_cast<Handles*>(handles)->push_back(h);
  }
  detail::HandleSink sink_;
  detail::HandleSink* previous_;
};

template <class Kernels, class... P, class... A>
void launch_kernel(void (*original)(P...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, A&&... args) {
  (void)detail::Preload<Kernels>::registered;
  // The arguments converted to the parameter types, as the original launch converts them.
  auto values = std::tuple<typename std::decay<P>::type...>(std::forward<A>(args)...);
  detail::launch_values(original, &detail::any_pick<Kernels>, grid, block, smem, stream, values,
                        typename detail::indices_for<P...>::type{},
                        detail::raised_limits<Kernels>(), detail::function_cache<Kernels>());
}

namespace detail {
template <class Kernels, class... P>
void launch_with(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, P... args) {
  launch_kernel<Kernels>(Kernels::original, grid, block, smem, stream, args...);
}
}  // namespace detail

#else  // CUPREEMPT_STANDALONE

namespace detail {
// No runtime, no table: a launch through a kernel's pointer runs it as written (launch_any).
template <class Kernels>
bool register_any() {
  return true;
}
}  // namespace detail

// Blocks of `wrapper` that fit on the device at once, or 0 when that cannot be known (then the
// caller launches the original grid, which reports any configuration error as the original).
template <class... P>
unsigned persistent_blocks(void (*wrapper)(cupreempt_launch, P...), unsigned block_threads,
                           size_t smem) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, wrapper, (int)block_threads, smem) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return (unsigned)(per_sm * sms);
}

namespace detail {
template <class Kernels, class... P>
void launch_with(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, P... args) {
  const auto wrapper = detail::chosen_wrapper<Kernels>();
  if (!wrapper) {  // not linked (CUPREEMPT_WEAK): the original, as written
    Kernels::original<<<grid, block, smem, stream>>>(args...);
    return;
  }
  const size_t wsmem = detail::wrapper_smem(smem, detail::loop_shared_bytes<Kernels>::value);
  detail::copy_smem_limit(Kernels::original, wrapper, smem, wsmem,
                          detail::raised_limits<Kernels>());
  const unsigned long long tasks = (unsigned long long)grid.x * grid.y * grid.z;
  const unsigned threads = block.x * block.y * block.z;
  unsigned blocks = tasks ? persistent_blocks(wrapper, threads, wsmem) : 0;
  if (blocks == 0 || blocks > tasks) blocks = (unsigned)(tasks < 0xffffffffull ? tasks : 0xffffffffull);

  cupreempt_control* control = nullptr;
  if (cudaMallocAsync((void**)&control, sizeof(cupreempt_control), stream) != cudaSuccess ||
      cudaMemsetAsync(control, 0, sizeof(cupreempt_control), stream) != cudaSuccess) {
    return;  // the failing call left its error for cudaGetLastError()
  }
  static const unsigned chunk = detail::env_u32("CUPREEMPT_CHUNK");
  static const unsigned budget_ns = detail::env_u32("CUPREEMPT_BUDGET_NS");
  const cupreempt_launch l = {control, tasks, grid.x, grid.y, grid.z, chunk, budget_ns, nullptr};
  // An empty or invalid original grid is launched as is, so the error is the original's.
  const dim3 persistent = tasks && blocks ? dim3(blocks) : grid;
  wrapper<<<persistent, block, wsmem, stream>>>(l, args...);
  (void)cudaFreeAsync(control, stream);
}
}  // namespace detail

#endif  // CUPREEMPT_STANDALONE

namespace detail {
template <class Kernels, class Original>
struct Launcher;

// The call operator's parameters are the kernel's (class template arguments, not deduced).
template <class Kernels, class... P>
struct CUPREEMPT_NODISCARD Launcher<Kernels, void (*)(P...)> {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  void operator()(P... args) const { launch_with<Kernels, P...>(grid, block, smem, stream, args...); }
};
}  // namespace detail

template <class Kernels>
detail::Launcher<Kernels, typename std::remove_cv<decltype(Kernels::original)>::type> launch(
    dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
  return {grid, block, smem, stream};
}

namespace detail {
// Whether a launch's pointer holds the original kernel: only a pointer of its very type can.
template <class F, class O>
bool same_kernel(F, O) {
  return false;
}
template <class F>
bool same_kernel(F pointer, F original) {
  return pointer == original;
}

// A launch through a local variable that the transformation found holds `Kernels::original`
// (`auto kernel = &k<T>; kernel<<<...>>>(...)`, docs/transformation.md): launched as the
// kernel's own launch would be, and as written through the pointer should it hold anything
// else.
template <class Kernels, class F, class Original>
struct PointerLauncher;
template <class Kernels, class F, class... P>
struct CUPREEMPT_NODISCARD PointerLauncher<Kernels, F, void (*)(P...)> {
  F pointer;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <class... A>
  void operator()(A&&... args) const {
    if (same_kernel(pointer, Kernels::original)) {
      launch_with<Kernels, P...>(grid, block, smem, stream, std::forward<A>(args)...);
    } else {
      pointer<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
    }
  }
};
}  // namespace detail

template <class Kernels, class F>
detail::PointerLauncher<Kernels, F,
                        typename std::remove_cv<decltype(Kernels::original)>::type>
launch_through(F pointer, dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
  return {pointer, grid, block, smem, stream};
}

namespace detail {
// A launch known only by the kernel's pointer: a macro's launch of a kernel its use names
// (`#define LAUNCH(kernel, args) kernel<<<g, b>>>args`). A transformed kernel that is no
// template registered its wrapper picker by its original's address (`register_any`); in a unit
// the compiler launcher split (its wrappers in a module of their own) that picker has no
// wrapper and the runtime finds it by the kernel's name, as for the unit's other launches, and
// so it does for a template's instance. Elsewhere an unregistered kernel runs as written, with
// no call to the runtime.
template <class... P>
struct CUPREEMPT_NODISCARD AnyLauncher {
  void (*original)(P...);
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  void operator()(P... args) const {
#ifndef CUPREEMPT_STANDALONE
    const AnyPick pick = any_pick_of(reinterpret_cast<AnyFn>(original));
    if (pick || split_unit()) {
      auto values = std::tuple<typename std::decay<P>::type...>(args...);
      launch_values(original, pick, grid, block, smem, stream, values,
                    typename indices_for<P...>::type{}, nullptr, nullptr);
      return;
    }
#endif
    original<<<grid, block, smem, stream>>>(args...);
  }
};
}  // namespace detail

template <class... P>
detail::AnyLauncher<P...> launch_any(void (*original)(P...), dim3 grid, dim3 block,
                                     size_t smem = 0, cudaStream_t stream = 0) {
  return {original, grid, block, smem, stream};
}

namespace detail {
// A macro's launch of the kernel a use names, with the launch as written beside it: a call
// through the kernel's pointer takes every argument, so a use that leaves out the kernel's
// default arguments (`LAUNCH(k<DEV>, nx, ny, s, a, b)` of a kernel with two more, defaulted)
// launches as written, the defaults applied by the kernel's own name. Uses with every
// argument take the pointer's path, their arguments converted to the kernel's parameters.
template <class AsWritten, class... P>
struct CUPREEMPT_NODISCARD AnyLauncherOr : AnyLauncher<P...> {
  AsWritten as_written;
  AnyLauncherOr(const AnyLauncher<P...>& l, AsWritten w) : AnyLauncher<P...>(l), as_written(w) {}
  using AnyLauncher<P...>::operator();
  template <class... A, class = typename std::enable_if<sizeof...(A) != sizeof...(P)>::type>
  void operator()(A&&... args) const {
    as_written(this->grid, this->block, this->smem, this->stream, static_cast<A&&>(args)...);
  }
};

template <class AsWritten, class... P>
struct CUPREEMPT_NODISCARD AnyConfigOr {
  void (*original)(P...);
  AsWritten as_written;
  AnyLauncherOr<AsWritten, P...> operator()(dim3 grid, dim3 block, size_t smem = 0,
                                            cudaStream_t stream = 0) const {
    return {AnyLauncher<P...>{original, grid, block, smem, stream}, as_written};
  }
};

// C++11's: no launch as written beside the pointer (no generic lambda to carry it), so a use
// that leaves out default arguments does not compile, as through the pointer alone.
struct NoAsWritten {};
}  // namespace detail

// `CUPREEMPT_LAUNCH_ANY(kernel)(CONFIG)(args)`: what a macro's `kernel<<<CONFIG>>>(args)`
// becomes where `kernel` is the macro's parameter. From C++14 on, with the launch as written
// for uses that leave out default arguments (a generic lambda); in C++11, through the pointer.
template <class AsWritten, class... P>
detail::AnyConfigOr<AsWritten, P...> launch_any_or(void (*original)(P...), AsWritten w) {
  return {original, w};
}
template <class... P>
detail::AnyConfigOr<detail::NoAsWritten, P...> launch_any_of(void (*original)(P...)) {
  return {original, {}};
}

}  // namespace cupreempt

#if __cplusplus >= 201402L
#define CUPREEMPT_LAUNCH_ANY(...)                                                            \
  ::cupreempt::launch_any_or(__VA_ARGS__, [&](const ::dim3& cupreempt_g_,                  \
                                              const ::dim3& cupreempt_b_, ::size_t cupreempt_s_, \
                                              ::cudaStream_t cupreempt_t_, auto&&... cupreempt_a_) { \
    __VA_ARGS__<<<cupreempt_g_, cupreempt_b_, cupreempt_s_, cupreempt_t_>>>(                 \
        static_cast<decltype(cupreempt_a_)&&>(cupreempt_a_)...);                           \
  })
#else
#define CUPREEMPT_LAUNCH_ANY(...) ::cupreempt::launch_any_of(__VA_ARGS__)
#endif
