#!/usr/bin/env python3
"""Probe helper: copies of cuda_support/ with parts of the task loop cut out, for timing the
task loop piece by piece with scripts/probes/persistent_forms.cu (built with -I OUT/NAME) and
the benchmark programs (scripts/probes/loop_costs.sh). The
cut copies are wrong on purpose (they break preemption, progress or the end of a launch kept by
the runtime), so they are for timing only; each cut must change the file, or the task loop has
moved on and the cut must follow it.

Usage: scripts/probes/task_loop_cuts.py OUT [NAME...]   (default: every cut; `list` lists them;
  `--self-test` checks that every cut still applies to the tree's task loop)
Then, on a GPU machine:
  for v in OUT/*; do nvcc -O3 -arch=sm_90 -std=c++17 -I $v scripts/probes/persistent_forms.cu \
    -o /tmp/pf-$(basename $v); done
  /tmp/pf-NAME 16384 256 5      # run_tasks (no host mirror) is the form the cuts change
"""
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
LOOP = ROOT / "cuda_support/cupreempt/task_loop.cuh"


def replace(old, new):
    def cut(src):
        if old not in src:
            raise SystemExit(f"cut text not found (task_loop.cuh moved on): {old[:60]!r}")
        return src.replace(old, new)
    return cut


def chain(*cuts):
    """The cuts applied one after another (each must still find its text)."""
    def cut(src):
        for c in cuts:
            src = c(src)
        return src
    return cut


def minimal_next_chunk(size=1, claim="atomicAdd(&c->next_task, n)"):
    """The cut that reduces next_chunk to one claim of `fixed` (else `size`) tasks, keeping the
    retire count; `claim` is the expression whose value is the chunk's first task."""
    def cut(src):
        a = src.index("static __device__ CUPREEMPT_STEP void next_chunk(")
        b = src.index("{", src.index("BlockState& st)", a)) + 1
        e = src.index("\n}\n", b)
        body = f"""
  const unsigned long long n = fixed ? fixed : {size};
  const unsigned long long begin = {claim};
  post_chunk(st, begin, begin + n < total ? begin + n : total, begin >= total);
  if (begin < total) st.first = make_uint3((unsigned)begin, 0, 0);
  ls.ran += ls.unreported;
  ls.unreported = 0;"""
        return src[:b] + body + src[e:]
    return cut


# The end of a block's last chunk: every thread's fence and the barrier before the leader's
# retirement, except in the instance that holds the stream.
END_FENCE = ("      if (!(l.host && holds_the_stream(l.first))) {\n        __threadfence();\n"
             "        __syncthreads();\n      }\n")

CUTS = {
    "no-end-fence": replace(END_FENCE, "      __syncthreads();\n"),
    # Timing only: no fence between the block's lane and its first look at the command
    # (neither enter()'s nor the one it leaves to the first next_chunk).
    "no-enter-fence": chain(
        replace("  if (!take) {\n    __threadfence();\n", "  if (!take) {\n"),
        replace("  if (ls.fence_due) {  // enter()'s fence: the block's lane before its first look at "
                "the command\n    __threadfence();\n",
                "  if (ls.fence_due) {\n")),
    "no-lanes": replace("  ls.lane = claim_lane(c, smid);", "  ls.lane = CUPREEMPT_LANES;"),
    "no-host-lanes": chain(replace("host->lanes[smid][ls.lane] = 1;", "(void)0;"),
                           replace("host->lanes[ls.smid][ls.lane] = 0;", "(void)0;")),
    "no-progress": replace("  } else if (owed && (stop || fixed || since >= kProgressNs)) {",
                           "  } else if (false) {"),
    "no-host-progress": replace("if (host && owed && !stop", "if (false && owed && !stop"),
    "no-started": chain(
        replace("    if (first != CUPREEMPT_RESUMED) host->started = 1;\n", ""),
        replace("    host->started = 1;  // before this block's first look at the command (its fence)\n",
                "")),
    # Timing only: the tail's last stores to host memory (progress and run time) left out, to
    # tell what they add to a launch's drain (the runtime's history then measures nothing).
    "no-tail-host-stores": chain(
        replace("    host->done_tasks = total;\n", ""),
        replace("    host->run_ns = run ? run : 1;\n", "    (void)run;\n")),
    "no-spin": replace("constexpr unsigned long long kSpinNs = 10000;",
                       "constexpr unsigned long long kSpinNs = 0;"),
    "no-leave-stay": replace(
        "        again = leave(c, l.host, l.leftover, l.total_tasks, l.first, step_state(ls));",
        "        again = 0;"),
    # enter() inlined: the block's first instructions in one run of code (its call jumps to
    # code that a block's start must fetch).
    "inline-enter": replace(
        "static __device__ CUPREEMPT_STEP bool enter(",
        "static __device__ __forceinline__ bool enter("),
    "inline-leave": replace(
        "static __device__ CUPREEMPT_STEP bool leave(",
        "static __device__ __forceinline__ bool leave("),
    "inline-next-chunk": replace(
        "static __device__ CUPREEMPT_STEP void next_chunk(",
        "static __device__ __forceinline__ void next_chunk("),
    "minimal-next-chunk": minimal_next_chunk(),
    "no-shfl": chain(
        replace("const unsigned n = __shfl_sync(0xffffffffu, st.count, 0);",
                "const unsigned n = st.count;"),
        replace("if (!__shfl_sync(0xffffffffu, again, 0)) break;", "if (!again) break;")),
    # Timing only: the lane words of SMs s, s + 8, ... share a line (16-17 SMs per line on the
    # H100 instead of 32).
    "lanes-spread": chain(
        replace("atomicAnd(&c->sm_lanes[ls.smid], ~(1u << ls.lane));",
                "atomicAnd(&c->sm_lanes[(ls.smid % 8) * 32 + ls.smid / 8], ~(1u << ls.lane));"),
        replace("unsigned* lanes = &c->sm_lanes[smid];",
                "unsigned* lanes = &c->sm_lanes[(smid % 8) * 32 + smid / 8];")),
    # Timing only (lanes may collide): the lane's atomic without waiting for its answer.
    "lanes-no-wait": replace(
        "    const unsigned held = atomicOr(lanes, 1u << bit);\n    if (!(held & (1u << bit))) return bit;",
        "    atomicOr(lanes, 1u << bit);\n    return bit;\n    const unsigned held = 0;"),
    "no-start-off": replace("starts_off(l, smid),", "0u,"),
    # The last chunks may fall to one task, below the contention floor.
    "tail-below-floor": replace(
        "return fair >= (float)ls.min_chunk ? (unsigned long long)fair : ls.min_chunk;",
        "return fair >= 1.0f ? (unsigned long long)fair : 1ull;"),
    # enter()'s fence moved to the block's first next_chunk where enter() claimed a chunk
    # (docs/bench/README.md: pathfinder gains, stencil small loses). The mark rides in
    # chunk_begin, so not for CUPREEMPT_AUDIT builds.
    # Timing only: every adaptive chunk is 3 tasks, sized as before (the same instructions).
    "adaptive-3": replace(
        "    if (!fixed) ls.next = want >= 1.0f ? (unsigned)fminf(want, (float)kMaxChunk) : 1u;",
        "    if (!fixed) ls.next = want >= 1.0f ? 3u : 3u;"),
    # Timing only: no smaller chunks near the end.
    "no-tail-shrink": chain(
        replace("      if (!fixed) {  // near the end,", "      if (false) {  // near the end,"),
        replace("    if (!fixed && near_end) n = tail_chunk(fair, ls);",
                "    if (false) n = tail_chunk(fair, ls);")),
    # Timing only: a block's first adaptive chunk is 3 tasks whatever an earlier launch measured
    # (too long for tasks of over 7 us).
    "first-chunk-3": replace("  if (!task_ns || !blocks) return 1u;",
                             "  if (true) return 3u;  // cut first-chunk-3"),
}
# The block's results made visible by the leader's fence after the barrier instead of every
# thread's fence before it: the barrier orders the threads' stores before the leader's fence,
# and a fence is cumulative (the pattern of a cooperative grid's sync). Correct.
CUTS["leader-end-fence"] = replace(
    END_FENCE + "      if (leader) {\n",
    "      __syncthreads();\n      if (leader) {\n"
    "        if (!(l.host && holds_the_stream(l.first))) __threadfence();\n")
# Timing only, each one load or store of the leader's step between two chunks left out.
CUTS["no-command-load"] = replace("    stop = must_yield(c, host, ls);\n", "    stop = false;\n")
CUTS["no-step-timer"] = replace(
    "  ls.unreported = 0;\n  ls.last_ns = now;\n}",
    "  ls.unreported = 0;\n  ls.last_ns = 0;\n}")
# Instrumentation, not a cut: per block (the first 4,096), the time at which its leader last
# entered its step between chunks (0), left a step that stops it (1), entered leave() (2), had
# the answers of leave()'s round trip (3), left leave() before stay() (4) and after it (5), in
# cupreempt::drain_stamps[6 * block + point] (%globaltimer; plain stores, no atomics to queue).
# persistent_forms.cu built with -DPROBE_DRAIN -DPROBE_STAMPS prints, for the last launch, the
# latest of each against the last task's end: where a launch's drain goes.
CUTS["drain-stamps"] = chain(
    replace("__device__ __forceinline__ unsigned long long global_ns() {",
            "__device__ unsigned long long drain_stamps[6 * 4096];\n"
            "#define CUPREEMPT_DRAIN_STAMP(i) \\\n"
            "  if (blockIdx.x < 4096) drain_stamps[6 * blockIdx.x + (i)] = global_ns()\n"
            "__device__ __forceinline__ unsigned long long global_ns() {"),
    replace("  // Size this chunk (and the looks inside it) from the time the last ones took.\n",
            "  CUPREEMPT_DRAIN_STAMP(0);\n"
            "  // Size this chunk (and the looks inside it) from the time the last ones took.\n"),
    replace("  ls.unreported = 0;\n  ls.last_ns = now;\n}",
            "  ls.unreported = 0;\n  ls.last_ns = now;\n"
            "  if (stop) CUPREEMPT_DRAIN_STAMP(1);\n}"),
    replace("  if (ls.rest_end) give_back(c, leftover, ls);  // tasks in hand (next_chunk made room)\n",
            "  CUPREEMPT_DRAIN_STAMP(2);\n"
            "  if (ls.rest_end) give_back(c, leftover, ls);  // tasks in hand (next_chunk made room)\n"),
    replace("    if (count_out) ls.tail = left + 1 == gridDim.x * gridDim.y * gridDim.z;\n",
            "    if (count_out) ls.tail = left + 1 == gridDim.x * gridDim.y * gridDim.z;\n"
            "    if (ls.tail || retired + start_ns) CUPREEMPT_DRAIN_STAMP(3);\n"),
    replace("  return holds && ls.tail && stay(c, host, total, retired, start_ns, ls);\n}",
            "  CUPREEMPT_DRAIN_STAMP(4);\n"
            "  const bool again = holds && ls.tail && stay(c, host, total, retired, start_ns, ls);\n"
            "  CUPREEMPT_DRAIN_STAMP(5);\n  return again;\n}"))


# Instrumentation, not a cut: where a block's start goes. Each block's leader stamps enter()'s
# first instruction (0), the lane's answer (1), the point before its wait for the kernel
# before it (2), the first chunk posted, the claim's answer in hand (3), and enter()'s end
# (4), in cupreempt::ramp_stamps[5 * block + point] (%globaltimer; plain stores).
# persistent_forms.cu built with -DPROBE_RAMP -DPROBE_STAMPS prints, for the last launch, the
# mean over blocks of each against the block's entry, beside the ramp (entry to first task).
CUTS["ramp-stamps"] = chain(
    replace("__device__ __forceinline__ unsigned long long global_ns() {",
            "__device__ unsigned long long ramp_stamps[5 * 4096];\n"
            "#define CUPREEMPT_RAMP_STAMP(i) \\\n"
            "  if (blockIdx.x < 4096) ramp_stamps[5 * blockIdx.x + (i)] = global_ns()\n"
            "__device__ __forceinline__ unsigned long long global_ns() {"),
    replace("  const bool take = first == CUPREEMPT_FIRST && host && !start_away && !ls.tail;\n",
            "  CUPREEMPT_RAMP_STAMP(0);\n"
            "  const bool take = first == CUPREEMPT_FIRST && host && !start_away && !ls.tail;\n"),
    replace("  ls.lane = claim_lane(c, smid);\n",
            "  ls.lane = claim_lane(c, smid);\n  CUPREEMPT_RAMP_STAMP(1);\n"),
    replace("  // run_tasks).\n  wait_for_predecessor();\n",
            "  // run_tasks).\n  CUPREEMPT_RAMP_STAMP(2);\n  wait_for_predecessor();\n"),
    replace("  post_chunk(st, begin, begin + n < total ? begin + n : total, begin >= total);\n",
            "  post_chunk(st, begin, begin + n < total ? begin + n : total, begin >= total);\n"
            "  CUPREEMPT_RAMP_STAMP(3);\n"),
    replace("  ls.last_ns = global_ns();\n  return true;\n}",
            "  ls.last_ns = global_ns();\n  CUPREEMPT_RAMP_STAMP(4);\n  return true;\n}"))


# Instrumentation, not a cut: the leader's step between chunks timed in clock64 cycles, from
# next_chunk's first instruction to its last, summed over the launch's steps in
# cupreempt::step_cycles[0] and counted in [1] (reductions whose answers nobody waits for,
# after the end's stamp), and the second warp's wait at the barrier after it in [2] and [3].
# persistent_forms.cu built with -DPROBE_STEP_CYCLES prints the means.
CUTS["step-cycles"] = chain(
    replace("__device__ __forceinline__ unsigned long long global_ns() {",
            "#define CUPREEMPT_HAS_STEP_CYCLES 1\n"
            "__device__ unsigned long long step_cycles[4];\n"
            "__device__ __forceinline__ unsigned long long global_ns() {"),
    replace("  // Size this chunk (and the looks inside it) from the time the last ones took.\n",
            "  const long long step_begin = clock64();\n"
            "  // Size this chunk (and the looks inside it) from the time the last ones took.\n"),
    replace("  ls.unreported = 0;\n  ls.last_ns = now;\n}",
            "  ls.unreported = 0;\n  ls.last_ns = now;\n"
            "  atomicAdd(&step_cycles[0], (unsigned long long)(clock64() - step_begin));\n"
            "  atomicAdd(&step_cycles[1], 1ull);\n}"),
    # And how long the block's second warp waits at the barrier after the step (its lane 0;
    # the task's uneven ends included), in [2], counted in [3].
    replace("    claimed = false;\n    __syncthreads();\n",
            "    claimed = false;\n    const long long barrier_begin = clock64();\n"
            "    __syncthreads();\n"
            "    if (threadIdx.x == 32 && threadIdx.y == 0 && threadIdx.z == 0) {\n"
            "      atomicAdd(&step_cycles[2], (unsigned long long)(clock64() - barrier_begin));\n"
            "      atomicAdd(&step_cycles[3], 1ull);\n    }\n"))


# The claim after the command's answer, as before claims went beside it: every step takes the
# command-first branch (correct, one round trip more per chunk).
CUTS["claim-after-command"] = replace(
    "  } else if (ls.unreported && !ls.claim_next) {", "  } else if (false) {")
# A second barrier once every thread has read the chunk, as the plain claim loop has (correct:
# the leader writes the other slot next).
CUTS["second-barrier"] = replace(
    "    const unsigned n = __shfl_sync(0xffffffffu, st.count, 0);\n",
    "    const unsigned n = __shfl_sync(0xffffffffu, st.count, 0);\n"
    "    __syncthreads();\n")
# step-cycles, and the steps that claim beside the command's load split in three (summed in
# step_cycles[4..6], counted in [7]): from the step's start to the claim (the sizing, the fair
# share), from the claim to its answer in use (the round trips, the command's check), and from
# there to the step's end (the chunk's bounds, the progress count). persistent_forms.cu built
# with -DPROBE_STEP_CYCLES prints them.
CUTS["step-split"] = chain(
    CUTS["step-cycles"],
    replace("__device__ unsigned long long step_cycles[4];",
            "#define CUPREEMPT_HAS_STEP_SPLIT 1\n__device__ unsigned long long step_cycles[8];"),
    replace("  const long long step_begin = clock64();\n",
            "  const long long step_begin = clock64();\n  long long split_claim = 0, split_answer = 0;\n"),
    replace("    begin = atomicAdd(&c->next_task, n);\n    const int line = near_end",
            "    split_claim = clock64();\n"
            "    begin = atomicAdd(&c->next_task, n);\n    const int line = near_end"),
    replace("    end = begin + n < total ? begin + n : total;\n    if (stop) {\n      if (begin < total) {",
            "    end = begin + n < total ? begin + n : total;\n"
            "    asm volatile(\"\" :: \"l\"(end));\n    split_answer = clock64();\n"
            "    if (stop) {\n      if (begin < total) {"),
    replace("  atomicAdd(&step_cycles[1], 1ull);\n}",
            "  atomicAdd(&step_cycles[1], 1ull);\n"
            "  if (split_answer) {\n    const long long split_end = clock64();\n"
            "    atomicAdd(&step_cycles[4], (unsigned long long)(split_claim - step_begin));\n"
            "    atomicAdd(&step_cycles[5], (unsigned long long)(split_answer - split_claim));\n"
            "    atomicAdd(&step_cycles[6], (unsigned long long)(split_end - split_answer));\n"
            "    atomicAdd(&step_cycles[7], 1ull);\n  }\n}"))
# The sizing behind the steady claim: where the step claims beside the command's look, the
# claim takes the size the last step chose, its atomic and the command's load go out first,
# and the sizing (for the next step) runs while both are on their way. Correct; the sizing
# lags one step there.
CUTS["size-behind-claim"] = chain(
    replace("  // Size this chunk (and the looks inside it) from the time the last ones took.\n"
            "  if (ls.unreported && (kLooks || !fixed)) {\n",
            "  // Size this chunk (and the looks inside it) from the time the last ones took.\n"
            "  const bool steady_claim = ls.unreported && !ls.rest_end &&\n"
            "                            ls.chunk_begin + ls.unreported < total && !ls.claim_next;\n"
            "  const auto size = [&]() {\n"
            "  if (ls.unreported && (kLooks || !fixed)) {\n"),
    replace("    if (!fixed) ls.next = want >= 1.0f ? (unsigned)fminf(want, (float)kMaxChunk) : 1u;\n  }\n",
            "    if (!fixed) ls.next = want >= 1.0f ? (unsigned)fminf(want, (float)kMaxChunk) : 1u;\n  }\n"
            "  };\n  if (!steady_claim) size();\n"),
    replace("    const int line = near_end && leftover ? *(volatile int*)&c->leftovers : 0;\n"
            "    stop = must_yield(c, host, ls);\n",
            "    const int line = near_end && leftover ? *(volatile int*)&c->leftovers : 0;\n"
            "    const unsigned long long word = *(volatile const unsigned long long*)&c->command;\n"
            "    size();\n"
            "    stop = must_yield_word(word, c, host, ls);\n"),
    # must_yield itself takes the command's word, loaded by a wrapper of the same name.
    replace("__device__ __forceinline__ bool must_yield(const cupreempt_control* c, const cupreempt_host* h,\n"
            "                                           StepState& ls) {\n"
            "  const unsigned long long word = *(volatile const unsigned long long*)&c->command;\n",
            "__device__ __forceinline__ bool must_yield_word(unsigned long long word,\n"
            "                                                const cupreempt_control* c,\n"
            "                                                const cupreempt_host* h, StepState& ls) {\n"),
    replace("// Whether the launch starts off SM `smid` (l.start_off).",
            "__device__ __forceinline__ bool must_yield(const cupreempt_control* c,\n"
            "                                           const cupreempt_host* h, StepState& ls) {\n"
            "  return must_yield_word(*(volatile const unsigned long long*)&c->command, c, h, ls);\n}\n\n"
            "// Whether the launch starts off SM `smid` (l.start_off)."))
# Timing only: the progress count that refreshes host memory does not wait for its answer
# (host memory is not refreshed).
CUTS["no-refresh-wait"] = replace(
    "    host->done_tasks = atomicAdd(&c->done_tasks, owed) + owed;\n",
    "    atomicAdd(&c->done_tasks, owed);\n")
# Timing only: no adaptive sizing; every chunk is the first one's size (an earlier launch's
# measure, else one task), cut by the tail's share near the end: what the sizing's work costs.
CUTS["no-sizing"] = replace("  if (ls.unreported && (kLooks || !fixed)) {\n    const unsigned long long now = global_ns();",
                            "  if (false) {\n    const unsigned long long now = global_ns();")
# Each with the step's cycles (persistent_forms.cu -DPROBE_STEP_CYCLES).
for _name in ["size-behind-claim", "no-refresh-wait", "no-sizing", "inline-next-chunk"]:
    CUTS[_name + "-cycles"] = chain(CUTS[_name], CUTS["step-cycles"])
# enter() and leave() inlined, next_chunk still a call: with both inlined (and not with either
# alone) ptxas hoists pathfinder's per-column hash product out of its rows again, as it does
# with every step inlined (scripts/probes/wrapper_hoist.sh; docs/bench/README.md).
CUTS["inline-enter-leave"] = chain(CUTS["inline-enter"], CUTS["inline-leave"])
# Every step inlined (enter, next_chunk, leave).
CUTS["inline-steps"] = chain(CUTS["inline-next-chunk"], CUTS["inline-leave"], CUTS["inline-enter"])
CUTS["adaptive-3-no-tail-shrink"] = chain(CUTS["adaptive-3"], CUTS["no-tail-shrink"])
CUTS["adaptive-3-first-chunk-3"] = chain(CUTS["adaptive-3"], CUTS["first-chunk-3"])
CUTS["adaptive-3-both"] = chain(CUTS["adaptive-3-no-tail-shrink"], CUTS["first-chunk-3"])
# Everything above that keeps a launch outside the runtime correct, together.
CUTS["lean-claims"] = chain(CUTS["tail-below-floor"], CUTS["no-progress"],
                            CUTS["no-host-progress"])
# minimal-next-chunk with chunks of three tasks (the first one enter()'s size).
CUTS["minimal-next-chunk-3"] = minimal_next_chunk(3)


def claim_ahead(size, plain=False):
    """minimal-next-chunk whose claim goes out as the chunk before it starts: the leader holds
    its answer in a register through the chunk's tasks (in the looks' unused field `cut_word`
    after them), and the step between two chunks waits for no round trip. Timing only, and
    only without CUPREEMPT_LOOKS (the looks' loop does not hand the answer on). ptxas makes a
    claim in the chunk's own code a warp-aggregated atomic (some 30 instructions of votes and
    shuffles before the task, nvcc 13.0, sm_90); with `plain` its address depends on the lane
    (%lanemask_lt, 0 in the leader's lane 0), which keeps it one atomic."""
    claim = (f"      ahead = atomicAdd(&c->next_task, (unsigned long long)(fixed ? fixed : {size}));\n"
             if not plain else
             "      unsigned below;\n"
             "      asm volatile(\"mov.u32 %0, %%lanemask_lt;\" : \"=r\"(below));\n"
             "      ahead = atomicAdd(&c->next_task + (below & 1u),\n"
             f"                        (unsigned long long)(fixed ? fixed : {size}));\n")
    return chain(
        minimal_next_chunk(size, "ls.unreported ? ls.cut_word : atomicAdd(&c->next_task, n)"),
        replace("    const unsigned n = __shfl_sync(0xffffffffu, st.count, 0);\n",
                "    const unsigned n = __shfl_sync(0xffffffffu, st.count, 0);\n"
                "    unsigned long long ahead = 0;\n"
                "    if (leader && n != kStopped) {\n" + claim + "    }\n"),
        replace("    if (leader) ls.unreported = n;\n#endif",
                "    if (leader) ls.unreported = n, ls.cut_word = ahead;\n#endif"))


# Timing only, and wrong for a kernel whose tasks share memory: no barrier between two tasks
# of a chunk (what the block's wait for its slowest warp at each task's end costs).
CUTS["no-task-barrier"] = replace("      if (TaskBarrier) __syncthreads();\n    }\n"
                                  "    if (leader) ls.unreported = n;\n",
                                  "    }\n    if (leader) ls.unreported = n;\n")
CUTS["claim-ahead"] = claim_ahead(1)
CUTS["claim-ahead-3"] = claim_ahead(3)
CUTS["claim-ahead-plain"] = claim_ahead(1, plain=True)
CUTS["claim-ahead-plain-3"] = claim_ahead(3, plain=True)

def bare_claim_loop(size=1, ends="kept"):
    """Timing only, without CUPREEMPT_LOOKS: run_tasks's loop replaced by the probe's plain
    claim loop (persistent_forms.cu's `claim`) around the same body and task context: the
    leader claims `size` tasks from the counter, the block meets, runs them, meets again; no
    command is ever looked at, no progress posted. `ends`: "kept", enter() takes the first
    claim and leave() (with the tail's stay()) ends the block, as in the tree; "leave", the
    first claim is the loop's own (no lane, no host stores, no fence) and leave() is kept;
    "none", also no leave(): each block adds its tasks to the retire count, and the one that
    completes it stamps the launch's run time into the host mirror (the runtime's history
    reads it), as the tail does. The launches still end when their work is done. Whether the
    benchmark's loss is the loop around the body or its ends, and which end."""
    first = ("  if (leader) claimed = enter_round();\n" if ends == "kept" else
             "  if (leader) {\n"
             "    ls.lane = CUPREEMPT_LANES, ls.rest_end = 0, ls.smid = sm_id();\n"
             f"    states[0].begin = atomicAdd(&c->next_task, {size}ull);\n"
             "    claimed = true;\n"
             "  }\n")
    last = ("    (void)leave(c, l.host, l.leftover, l.total_tasks, l.first, step_state(ls));\n"
            if ends != "none" else
            "    const unsigned long long total = l.total_tasks;\n"
            "    if (ran && atomicAdd(&c->retired_tasks, ran) + ran == total && l.host) {\n"
            "      const unsigned long long start = *(volatile unsigned long long*)&c->start_ns;\n"
            "      atomicExch(&c->finished, 1u);\n"
            "      l.host->done_tasks = total;\n"
            "      l.host->run_ns = global_ns() - start;\n"
            "    }\n")
    start = ("" if ends == "kept" else
             "      if (begin == 0 && l.host) c->start_ns = global_ns();\n")

    def cut(src):
        a = src.index("  for (unsigned parity = 0;; parity ^= 1u) {\n")
        e = src.index("\n}\n\n}  // namespace cupreempt", a)
        loop = f"""  __shared__ unsigned long long bare_begin;
{first}  wait_for_predecessor();
  bool first_claim = true;  // the same in every thread
  unsigned long long ran = 0;
  for (;;) {{
    if (leader) {{
      const unsigned long long begin =
          first_claim && claimed ? states[0].begin : atomicAdd(&c->next_task, {size}ull);
{start}      bare_begin = begin;
      states[0].first = TaskCtx::block_of(begin, l.grid_x, l.grid_y, l.grid_z);
    }}
    first_claim = false;
    __syncthreads();
    const unsigned long long begin = bare_begin;
    if (begin >= l.total_tasks) break;
    const unsigned n = begin + {size} < l.total_tasks ? {size} : (unsigned)(l.total_tasks - begin);
#pragma unroll 1
    for (unsigned i = 0; i < n; ++i) {{
      Ctx ctx(l, states[0], i);
      body(ctx);
      __syncthreads();
    }}
    ran += n;
  }}
  if (leader) {{
    ls.ran = ran;
{last}  }}
  (void)again, (void)starting;"""
        src = src[:a] + loop + src[e:]
        if ends != "kept":
            return src
        return replace("    const unsigned n = fixed ? fixed\n",
                       f"    const unsigned n = {size} ? {size}u : fixed ? fixed\n")(src)
    return cut


CUTS["bare-claim-loop"] = bare_claim_loop(1)
CUTS["bare-claim-loop-3"] = bare_claim_loop(3)
CUTS["bare-claim-loop-leave"] = bare_claim_loop(1, "leave")
CUTS["bare-claim-loop-none"] = bare_claim_loop(1, "none")

CUTS["all"] = chain(CUTS["no-end-fence"], CUTS["no-enter-fence"], CUTS["no-lanes"],
                    CUTS["minimal-next-chunk"])
CUTS["all-inline"] = chain(CUTS["all"], CUTS["no-start-off"], CUTS["inline-steps"])


def apply(name, src):
    """Cut `name` applied to `src`; exits when its text is gone or it changes nothing."""
    try:
        cut = CUTS[name](src)
    except SystemExit as e:
        raise SystemExit(f"cut {name}: {e}") from None
    if cut == src:
        raise SystemExit(f"cut {name} changed nothing")
    return cut


def main():
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    if args[0] == "list":
        print("\n".join(CUTS))
        return
    src = LOOP.read_text()
    if args[0] == "--self-test":
        # Every cut still finds its text in the tree's task loop and changes it (run in CI, so
        # that a change to task_loop.cuh brings the cuts along).
        for name in CUTS:
            apply(name, src)
        print(f"task_loop_cuts self-test: {len(CUTS)} cuts apply")
        return
    out, names = Path(args[0]), args[1:] or list(CUTS)
    for name in names:
        if name not in CUTS:
            raise SystemExit(f"no cut {name!r}; cuts: {', '.join(CUTS)}")
        cut = apply(name, src)
        dest = out / name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(ROOT / "cuda_support", dest)
        (dest / "cupreempt/task_loop.cuh").write_text(cut)
        print(dest)


if __name__ == "__main__":
    main()
