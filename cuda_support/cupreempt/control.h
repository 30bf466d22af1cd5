/* cupreempt control block: the only state shared by the host and a preemptible kernel.
 *
 * Plain C so that the runtime (Rust, `cupreempt_runtime::ControlBlock`) and C programs can
 * mirror it; a test in runtime/ checks that both agree on every offset. It lives in device
 * memory: reading host-mapped memory from a kernel costs about a millisecond per access on our
 * H100s, so kernels never poll the host. */
#ifndef CUPREEMPT_CONTROL_H
#define CUPREEMPT_CONTROL_H

#define CUPREEMPT_MAX_SMS 256

/* Bits of cupreempt_control.command. 0 means "keep running". */
#define CUPREEMPT_YIELD_ALL 1u /* every block stops taking tasks (temporal preemption) */
#define CUPREEMPT_YIELD_SMS 2u /* blocks on the SMs set in sm_mask stop (spatial preemption) */

typedef struct cupreempt_control {
  unsigned long long next_task; /* first task nobody has taken yet; may run past the total */
  unsigned long long done_tasks; /* tasks finished (progress; their results may be in flight) */
  unsigned long long retired_tasks; /* tasks whose results are visible device-wide */
  unsigned int command;          /* CUPREEMPT_YIELD_* bits, written by the host */
  unsigned int running_blocks;   /* persistent blocks currently inside the task loop */
  unsigned int yielded_blocks;   /* blocks that left because of a command (cumulative) */
  unsigned int finished;          /* 1 once retired_tasks reaches the total */
  unsigned int sm_mask[CUPREEMPT_MAX_SMS / 32]; /* bit s set: blocks on SM s yield */
  unsigned int sm_blocks[CUPREEMPT_MAX_SMS];    /* blocks inside the task loop, per SM */
} cupreempt_control;

/* Passed by value to every persistent wrapper kernel. */
typedef struct cupreempt_launch {
  cupreempt_control* control;
  unsigned long long total_tasks; /* grid_x * grid_y * grid_z of the original launch */
  unsigned int grid_x, grid_y, grid_z; /* the original grid: the virtual gridDim */
  unsigned int chunk;     /* tasks per control-word check; 0 = size chunks from measured time */
  unsigned int budget_ns; /* adaptive chunks: work between two checks; 0 = kernel default */
  unsigned int* audit;    /* tests only (CUPREEMPT_AUDIT): one execution counter per task */
} cupreempt_launch;

#endif
