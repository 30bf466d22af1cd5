/* cupreempt control block: the state shared by the host and a preemptible kernel.
 *
 * Plain C so that the runtime (Rust, `cupreempt_runtime::ControlBlock`) and C programs can
 * mirror it; a test in runtime/ checks that both agree on every offset. The control block lives
 * in device memory and is what running blocks poll. Runtime launches also get a small mirror in
 * host-mapped pinned memory (cupreempt_host): the host writes each command there before it
 * sends it down the control stream, and blocks report there what the host must be able to see
 * without a copy through any stream (docs/runtime.md, "Stream order and hardware queues"). */
#ifndef CUPREEMPT_CONTROL_H
#define CUPREEMPT_CONTROL_H

#define CUPREEMPT_MAX_SMS 256
#define CUPREEMPT_LANES 32 /* resident blocks per SM, at most (Hopper: 32) */

/* Bits of the command word. 0 means "keep running". */
#define CUPREEMPT_YIELD_ALL 1u /* every block stops taking tasks (temporal preemption) */
#define CUPREEMPT_YIELD_SMS 2u /* blocks on the SMs set in sm_mask stop (spatial preemption) */

typedef struct cupreempt_control {
  /* Each group below has its own 128-byte line: thousands of blocks hit the counters with
   * atomics, and atomics on one line serialize in L2 (measured on the H100: about 4 ns each,
   * so one shared line made a kernel's start and end cost tens of us). */
  unsigned int command;     /* CUPREEMPT_YIELD_* bits, written by the host */
  unsigned int command_seq; /* number of that command (as in cupreempt_host.seq) */
  unsigned int sm_mask[CUPREEMPT_MAX_SMS / 32]; /* bit s set: blocks on SM s yield */
  unsigned int pad0[22];
  unsigned long long next_task; /* first task nobody has taken yet; may run past the total */
  /* Leftovers (chunks given back by the blocks that took them: claimed beside a command that
   * sent the block away, or cut at a look between two tasks; see cupreempt_launch.leftover):
   * how many are given back and not yet taken again, or are being given back. Beside
   * next_task: one load reads both. */
  int leftovers;
  unsigned int pad1[29];
  unsigned long long done_tasks; /* tasks finished (progress; their results may be in flight) */
  unsigned int pad2[30];
  unsigned long long retired_tasks; /* tasks whose results are visible device-wide, or will be
                                     * at the end of the kernel that holds the stream */
  unsigned int finished;            /* 1 once retired_tasks reaches the total */
  unsigned int pad3[29];
  unsigned int main_left;      /* blocks of the first instance that have left the loop */
  unsigned int running_blocks; /* blocks inside the task loop (CUPREEMPT_AUDIT builds only) */
  /* Gated links: blocks of links and anchor that have entered the loop, numbered in order (a
   * link's blocks take consecutive numbers); the first block of each reads the command in host
   * memory and writes it below, then forward_ready = its number + 1. */
  unsigned int link_entries;
  unsigned int forward_ready;
  unsigned int forward_seq;
  unsigned int forward_command;
  unsigned int forward_mask[CUPREEMPT_MAX_SMS / 32];
  unsigned int pad4[18];
  unsigned long long yield_ns; /* %globaltimer of the latest yield (latency measurements) */
  unsigned long long start_ns; /* %globaltimer when task 0 was taken (run-time measurement) */
  unsigned int yielded_blocks; /* blocks that left because of a command (cumulative) */
  unsigned int pad5[27];
  unsigned int sm_lanes[CUPREEMPT_MAX_SMS]; /* per SM: lanes held by blocks in the loop */
  /* Leftovers by the lane that gave them back: per SM, bit l (low word) set while lane l's
   * slot of cupreempt_launch.leftover holds one, bit 32 + l while a block reads it. */
  unsigned long long leftover_state[CUPREEMPT_MAX_SMS];
  unsigned int leftover_sms[CUPREEMPT_MAX_SMS / 32]; /* bit s: SM s has given one back */
  unsigned int cut_chunks; /* chunks cut short by a command (cumulative; tests) */
  unsigned int pad6[23];
} cupreempt_control;

/* Host-mapped pinned memory, one per runtime launch. Plain loads and stores only: the GPU has
 * no atomics on host memory here, so every word has one writer at a time. A GPU read of it
 * costs about 2 us (H100, measured 2026-11-22), so only a parked block reads it, never the
 * task loop. */
typedef struct cupreempt_host {
  unsigned int seq;     /* host: odd while command/sm_mask change; even: that command's number */
  unsigned int command; /* host: the newest command, possibly not yet in the control block */
  unsigned int sm_mask[CUPREEMPT_MAX_SMS / 32];
  unsigned int tail_parked; /* kernel: 1 while the first instance's last block sleeps */
  unsigned int started;     /* kernel: 1 once the first instance has started (its block with
                             * task 0; any block of a link, anchor or kept-off start) */
  unsigned long long done_tasks; /* kernel: progress, refreshed every 2^progress_shift tasks */
  unsigned long long yield_ns;   /* kernel: control->yield_ns, copied by the sleeping block */
  unsigned long long run_ns; /* kernel: task 0 taken -> every task retired, written at the end */
  unsigned long long launch; /* host: the launch's number, so that a reused mirror is told apart */
  unsigned long long entered_ns; /* kernel: %globaltimer at the launch's start (the block with
                                  * task 0) or its latest resume (a block of a later instance,
                                  * the tail going back to work), on the GPU's clock */
  /* Gated links (CUPREEMPT_LINK): the launch's stream waits before link i + 1 until
   * gate >= i + 1, compared as the stream's wait does (a signed difference). The host writes
   * the low 16 bits (links opened by resumes), the kernel the top byte (CUPREEMPT_GATES_OPEN,
   * once every task has retired), so that neither overwrites the other. */
  unsigned int gate;
  /* Gated links' starts, for wait_yielded (docs/runtime.md, "Time-sliced GPUs: gated links").
   * Instances are numbered in stream order: link i is i, the anchor L + 1. */
  unsigned int link_announced; /* kernel: the latest instance whose first block is about to
                                * read the command in host memory (0: none yet) */
  unsigned int link_entered;   /* kernel: the latest instance whose every block has entered
                                * (holds its lane, or has left) */
  unsigned int landed_seq; /* control stream: the number (seq) of the newest command whose writes
                            * are in the control block, written after them in the same batch:
                            * the host sees a command land without asking the driver */
  unsigned char lanes[CUPREEMPT_MAX_SMS][CUPREEMPT_LANES]; /* kernel: 1 while held */
} cupreempt_host;

/* cupreempt_launch.first: the instance's part in its launch (docs/runtime.md, "Time-sliced
 * GPUs: gated links"). */
#define CUPREEMPT_RESUMED 0u /* launched by a resume: looks at the command before any task */
#define CUPREEMPT_FIRST 1u   /* the launch's first instance: claims its first chunk first; its
                              * last block holds the stream until every task has retired */
#define CUPREEMPT_LINK 2u    /* a gated link: reads the command in host memory first and leaves
                              * whole when preempted; the block that retires the launch's last
                              * task opens every gate */
#define CUPREEMPT_ANCHOR 3u  /* the links' last instance: reads the command in host memory
                              * first; its last block holds the stream as _FIRST's does */
/* The top byte of cupreempt_host.gate once every task has retired: every gate is open. */
#define CUPREEMPT_GATES_OPEN 0x7fu

/* Passed by value to every persistent wrapper kernel. The transformer names this type in the
 * wrappers it generates (src/vocab.rs, LAUNCH_TYPE). */
typedef struct cupreempt_launch {
  cupreempt_control* control;
  unsigned long long total_tasks; /* grid_x * grid_y * grid_z of the original launch */
  unsigned int grid_x, grid_y, grid_z; /* the original grid: the virtual gridDim */
  unsigned int chunk;     /* tasks per control-word check; 0 = size chunks from measured time */
  unsigned int budget_ns; /* adaptive chunks: work between two checks; 0 = kernel default */
  unsigned int* audit;    /* tests: one execution counter per task; NULL (the runtime's) = none */
  cupreempt_host* host;   /* runtime launches: the host mirror; NULL elsewhere */
  unsigned int first;     /* what the instance is: CUPREEMPT_RESUMED, _FIRST, _LINK or _ANCHOR */
  unsigned int progress_shift; /* host->done_tasks is refreshed when done_tasks >> this changes */
  /* An earlier launch's time per task in ns (0: none known): adaptive chunks then start with as
   * many tasks as fit the budget, up to kMaxFirstChunk, instead of one. */
  unsigned int task_ns;
  /* Bit s set: blocks on SM s take no task until a command reaches the control block (a
   * scheduler's standing order: the launch starts preempted there; the runtime sends the same
   * command through the control stream, which may land after the first blocks start). */
  unsigned int start_off[CUPREEMPT_MAX_SMS / 32];
  /* CUPREEMPT_MAX_SMS * CUPREEMPT_LANES slots, one per lane (never zeroed: leftover_state
   * says which hold one), or NULL. With slots, a block that a command sends away with a chunk
   * claimed beside it gives the chunk back in its lane's slot, for the next block that claims,
   * and (CUPREEMPT_LOOKS builds) the leader looks at the command between two tasks of a chunk
   * too and gives a cut chunk's rest back; without, a chunk claimed runs to its end before
   * the block leaves. */
  unsigned long long* leftover;
  /* CUPREEMPT_LAUNCH_VERSION, written by the runtime; no kernel reads it. Its presence is the
   * point: the runtime reads the size of a wrapper's first parameter (cuFuncGetParamInfo), and
   * a wrapper built with headers whose struct ends before this field has a task loop that does
   * not wait for the kernel before it (griddepcontrol.wait), so it is never launched to start
   * while that kernel drains (docs/runtime.md, "Launches that overlap"). */
  unsigned int launch_version;
  unsigned int reserved;
} cupreempt_launch;

/* cupreempt_launch.launch_version of this build. */
#define CUPREEMPT_LAUNCH_VERSION 1u

/* Dynamic shared memory a launch adds, past the kernel's own rounded up to 16 bytes, for a
 * wrapper that keeps the task loop's state there (task_loop.cuh, InDynamicShared; launch.cuh):
 * a kernel whose own static shared memory leaves no room for the loop's under the 48 KB a
 * block may declare statically. Spelled in src/vocab.rs too (TASK_LOOP_SHARED_BYTES). */
#define CUPREEMPT_LOOP_SHARED_BYTES 256u

#endif
