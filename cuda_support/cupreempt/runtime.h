/* cupreempt runtime, C ABI (library: libcupreempt_runtime.{so,a}, from `cargo build -p
 * cupreempt-runtime --release`).
 *
 * A handle names one launch of a transformed kernel. Every function returns a status code
 * (CUPREEMPT_OK or an error below) and never crashes on bad handles or null pointers;
 * cupreempt_rt_last_error() gives the calling thread's last error in words. */
#ifndef CUPREEMPT_RUNTIME_H
#define CUPREEMPT_RUNTIME_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long long cupreempt_handle;

enum {
  CUPREEMPT_OK = 0,
  CUPREEMPT_ERROR_NO_DRIVER = 1,             /* libcuda could not be loaded */
  CUPREEMPT_ERROR_DRIVER = 2,                /* a driver call failed; see last_error */
  CUPREEMPT_ERROR_INVALID_CONFIGURATION = 3, /* the original launch would fail the same way */
  CUPREEMPT_ERROR_INVALID_ARGUMENT = 4,      /* null pointer, empty SM set, ... */
  CUPREEMPT_ERROR_UNKNOWN_HANDLE = 5,
  CUPREEMPT_ERROR_ALREADY_PREEMPTED = 6,
  CUPREEMPT_ERROR_NOT_PREEMPTED = 7,         /* resume/wait_yielded without a preemption */
  CUPREEMPT_ERROR_INTERNAL = 8,
  CUPREEMPT_RUN_ORIGINAL = 9, /* not an error: see cupreempt_rt_plan */
  CUPREEMPT_RUN_ORIGINAL_TIMED = 10 /* not an error: see cupreempt_rt_plan */
};

/* Launches `func` (the CUfunction of a wrapper K__cupreempt) for the original launch
 * <<<grid, block, smem, stream>>>, asynchronously. args[i] points to the i-th parameter after
 * cupreempt_launch, sizes[i] is its size; the values are copied. Work the application enqueues
 * on `stream` afterwards runs after the last task, across preemptions. */
int cupreempt_rt_launch(void* func, const unsigned grid[3], const unsigned block[3], size_t smem,
                        void* stream, const void* const* args, const size_t* sizes, size_t nargs,
                        unsigned chunk, unsigned budget_ns, cupreempt_handle* out);

/* Decides the form of a launch of the original kernel `original` (its CUfunction):
 * CUPREEMPT_OK, launch it preemptible with cupreempt_rt_launch_planned; or
 * CUPREEMPT_RUN_ORIGINAL, launch the original kernel as written, where a preemptible launch
 * would not pay or cannot work: in a process that nothing can preempt a launch of (no
 * scheduler daemon, CUPREEMPT_SCHEDULER, and no chaos mode, CUPREEMPT_CHAOS; the caller lets
 * go of the handle at once), unless CUPREEMPT_PREEMPTIBLE=1; while the runtime's setup thread
 * is still at work (it starts
 * at the first launch that would be preemptible; CUPREEMPT_SETUP=wait: wait instead); a grid
 * that fits on the GPU at once as the original kernel, whose blocks all start together so
 * that none could be held back;
 * launches of a kernel and configuration whose last preemptible launch ran no longer than a
 * preemption takes (CUPREEMPT_SHORT_US, default 30); a stream being captured into a graph. Or
 * CUPREEMPT_RUN_ORIGINAL_TIMED: the same, timed (cupreempt_rt_original_launched below).
 * CUPREEMPT_SHORT_US=0 leaves only the last rule. CUPREEMPT_VERBOSE=1 says why, once per kernel
 * and configuration. It asks nothing of the wrappers, which are then never loaded (the
 * runtime's setup loads them once a launch is planned preemptible). */
int cupreempt_rt_plan(void* original, const unsigned grid[3], const unsigned block[3],
                      size_t smem, void* stream);
/* CUPREEMPT_RUN_ORIGINAL_TIMED from cupreempt_rt_plan: launch the original kernel as written,
 * then call cupreempt_rt_original_launched on the same stream and thread. The two bracket the
 * launch with timed events: a trial that tells whether the original form is short. */
int cupreempt_rt_original_launched(void* stream);
/* How many plans this process's cupreempt_rt_plan has made, by outcome, since it started:
 * counts[0] preemptible, then the original kernel for [1] a graph capture, [2] the runtime's
 * setup, [3] one wave, [4] a short launch, [5] a prediction from other grids, [6] a timed
 * trial, [7] a trial still running; [8] an error of the plan; the original kernel for [9] a
 * stream less urgent than another the program launches on, [10] a launch nothing can preempt
 * (no scheduler daemon, no chaos mode). So that a benchmark can say which
 * form its timed launches took. New outcomes are appended. cupreempt_rt_plan_counts_n writes
 * the first n (at most CUPREEMPT_PLAN_OUTCOMES); cupreempt_rt_plan_counts, for programs built
 * when there were nine, writes nine. */
#define CUPREEMPT_PLAN_OUTCOMES 11
/* The outcomes' names, in that order (an initializer of CUPREEMPT_PLAN_OUTCOMES strings). */
#define CUPREEMPT_PLAN_OUTCOME_NAMES                                                    \
  {"preemptible", "capture", "setup", "one_wave", "short", "predicted", "trial", \
   "trial_running", "error", "lower_priority", "unscheduled"}
int cupreempt_rt_plan_counts_n(unsigned long long* counts, unsigned n);
int cupreempt_rt_plan_counts(unsigned long long counts[9]);
/* cupreempt_rt_launch of the wrapper `func` for a launch that cupreempt_rt_plan made
 * preemptible; the runtime learns how long it runs, for the plans of later launches. A null
 * `out` releases the launch at once (cupreempt_rt_release), with no handle made for it. */
int cupreempt_rt_launch_planned(void* func, void* original, const unsigned grid[3],
                                const unsigned block[3], size_t smem, void* stream,
                                const void* const* args, const size_t* sizes, size_t nargs,
                                unsigned chunk, unsigned budget_ns, cupreempt_handle* out);

/* sm_mask: NULL = every SM (temporal), else 8 words, bit s of word s/32 = SM s (spatial). */
int cupreempt_rt_preempt(cupreempt_handle h, const unsigned* sm_mask);
int cupreempt_rt_wait_yielded(cupreempt_handle h); /* no block left on the preempted SMs */
int cupreempt_rt_resume(cupreempt_handle h, const unsigned* sm_mask);
int cupreempt_rt_progress(cupreempt_handle h, unsigned long long* done, unsigned long long* total);
int cupreempt_rt_is_complete(cupreempt_handle h, int* complete);
int cupreempt_rt_wait(cupreempt_handle h);
/* Tasks of the launch and blocks of its first (persistent) instance. */
int cupreempt_rt_info(cupreempt_handle h, unsigned* blocks, unsigned long long* tasks); /* until complete; an error while preempted */
/* GPU time from the last preempt request to the end of the last instance, in µs (-1: none).
 * Needs cupreempt_rt_set_timing(1) before the launch and the preemption. */
int cupreempt_rt_yield_latency_us(cupreempt_handle h, double* us);
/* Timestamps on the runtime's events: off by default (they cost host time per launch). */
int cupreempt_rt_set_timing(int on);
/* Forget the handle; the kernel runs to completion (resumed if preempted). */
int cupreempt_rt_release(cupreempt_handle h);
/* A transformed unit's kernels, registered from a static initializer (launch.cuh):
 * `lookup(slot, &func)` writes the CUfunction of the current context in `slot` (0: the original
 * kernel, 1: its wrapper, 2: its 32-register wrapper where that is another kernel) and returns
 * 1, or returns 0 for an empty slot. Looking a function up loads its code (lazy module loading),
 * so the runtime asks only for what it loads: the originals once the program has made a
 * device's primary context, the wrappers with its setup (unless CUPREEMPT_PRELOAD=0). */
void cupreempt_rt_register_preload(int (*lookup)(int slot, void** func));
/* Launches that know a kernel only by pointer (launch.cuh's launch_any): each transformed
 * kernel registers, from a static initializer, the function that returns its wrapper's host
 * stub (null: none), by the original's host stub; cupreempt_rt_any_pick returns it, or null
 * where none was registered. */
typedef void (*cupreempt_any_fn)(void);
typedef cupreempt_any_fn (*cupreempt_any_pick)(void);
void cupreempt_rt_register_any(cupreempt_any_fn original, cupreempt_any_pick pick);
cupreempt_any_pick cupreempt_rt_any_pick(cupreempt_any_fn original);
/* A unit whose wrappers the compiler launcher compiled into a module of their own (docs/build.md),
 * registered from a static initializer: `image` a fatbin living as long as the program, `names`
 * 3 * n mangled names (each original kernel, its wrapper, its 32-register wrapper or ""). */
int cupreempt_rt_register_wrapper_module(const void* image, const char* const* names, unsigned n);
/* The wrapper to launch for `original` (a CUfunction of the current context) from the registered
 * wrapper modules, given the original's dynamic shared-memory limit where `smem` exceeds 48 KB;
 * null where none has it. `unit`: what the launching unit's registration returned (its own table
 * is searched first, kernels of internal linkage included), or 0. */
void* cupreempt_rt_module_wrapper(void* original, size_t smem, int unit);

/* A key of the context current on the calling thread: its id (cuCtxGetId, never reused in a
 * process, where a context's address may be) plus one; 0 where none is current or the driver
 * cannot say. Launch sites keep the functions they looked up per key (launch.cuh). */
unsigned long long cupreempt_rt_context_id(void);

const char* cupreempt_rt_status_string(int status);
const char* cupreempt_rt_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
