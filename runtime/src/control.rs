//! The control block shared with kernels. Layout must match `cuda_support/cupreempt/control.h`.

use crate::smset::MAX_SMS;

/// Every block stops taking tasks (temporal preemption).
pub const YIELD_ALL: u32 = 1;
/// Blocks on the SMs in `sm_mask` stop taking tasks (spatial preemption).
pub const YIELD_SMS: u32 = 2;

/// `cupreempt_control`: lives in device memory, one per launched kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlBlock {
    // One 128-byte line per group: atomics on one line serialize in L2 (see control.h).
    pub command: u32,
    /// The number of that command (as in [`HostMirror::seq`]).
    pub command_seq: u32,
    pub sm_mask: [u32; MAX_SMS / 32],
    pub pad0: [u32; 22],
    pub next_task: u64,
    /// Leftovers given back and not yet taken again, or being given back (see control.h).
    pub leftovers: i32,
    pub pad1: [u32; 29],
    /// Tasks finished: progress, counted per chunk (their results may still be in flight).
    pub done_tasks: u64,
    pub pad2: [u32; 30],
    /// Tasks whose results are visible device-wide, or will be at the end of the kernel that
    /// holds the stream (counted when blocks leave).
    pub retired_tasks: u64,
    /// 1 once every task is done.
    pub finished: u32,
    pub pad3: [u32; 29],
    /// Blocks of the first instance that have left the task loop.
    pub main_left: u32,
    /// Blocks inside the task loop (counted in `CUPREEMPT_AUDIT` builds only).
    pub running_blocks: u32,
    /// Gated links: blocks of links and anchor that have entered the task loop (the blocks of
    /// one link take consecutive numbers, the first of them reads the command in host memory).
    pub link_entries: u32,
    /// The entry number of the link whose first block wrote the `forward_*` words, plus one.
    pub forward_ready: u32,
    /// The command in host memory as that block read it: its number, word and SM mask.
    pub forward_seq: u32,
    pub forward_command: u32,
    pub forward_mask: [u32; MAX_SMS / 32],
    pub pad4: [u32; 18],
    /// `%globaltimer` of the latest yield (ns), for latency measurements.
    pub yield_ns: u64,
    /// `%globaltimer` when task 0 was taken (ns): the start of the launch's run time.
    pub start_ns: u64,
    pub yielded_blocks: u32,
    pub pad5: [u32; 27],
    /// Per SM, the lanes held by blocks inside the task loop (bit l: lane l).
    pub sm_lanes: [u32; MAX_SMS],
    /// Per SM, bit l: lane l's leftover slot holds a chunk's rest; bit 32 + l: it is being read.
    pub leftover_state: [u64; MAX_SMS],
    /// Bit s: SM s has given a leftover back.
    pub leftover_sms: [u32; MAX_SMS / 32],
    /// Chunks cut short by a command (cumulative).
    pub cut_chunks: u32,
    pub pad6: [u32; 23],
}

impl ControlBlock {
    pub const fn zeroed() -> ControlBlock {
        ControlBlock {
            command: 0,
            command_seq: 0,
            sm_mask: [0; MAX_SMS / 32],
            pad0: [0; 22],
            next_task: 0,
            leftovers: 0,
            pad1: [0; 29],
            done_tasks: 0,
            pad2: [0; 30],
            retired_tasks: 0,
            finished: 0,
            pad3: [0; 29],
            main_left: 0,
            running_blocks: 0,
            link_entries: 0,
            forward_ready: 0,
            forward_seq: 0,
            forward_command: 0,
            forward_mask: [0; MAX_SMS / 32],
            pad4: [0; 18],
            yield_ns: 0,
            start_ns: 0,
            yielded_blocks: 0,
            pad5: [0; 27],
            sm_lanes: [0; MAX_SMS],
            leftover_state: [0; MAX_SMS],
            leftover_sms: [0; MAX_SMS / 32],
            cut_chunks: 0,
            pad6: [0; 23],
        }
    }
}

/// Resident blocks per SM, at most: the lanes of [`HostMirror::lanes`].
pub const LANES: usize = 32;

/// `cupreempt_host`: host-mapped pinned memory, one per runtime launch. The host publishes each
/// command here before the control stream delivers it; blocks report here what the host reads
/// without a copy through any stream. Every word has one writer at a time (plain stores).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMirror {
    /// Odd while `command` and `sm_mask` change; even: the number of the command in them.
    pub seq: u32,
    pub command: u32,
    pub sm_mask: [u32; MAX_SMS / 32],
    /// Written by the kernel: 1 while the first instance's last block sleeps.
    pub tail_parked: u32,
    /// Written by the kernel: 1 once the first instance has started (its block with task 0
    /// writes it, or any block of a gated link, an anchor or a start kept off some SMs), so
    /// the application's earlier work on its stream is done.
    pub started: u32,
    /// Written by the kernel: progress, refreshed every 2^`progress_shift` tasks and at the end.
    pub done_tasks: u64,
    /// Written by the kernel: the control block's `yield_ns`, copied by the sleeping block
    /// (latency measurements that must not wait on any stream).
    pub yield_ns: u64,
    /// Written by the kernel, once, when every task has retired: nanoseconds from the moment
    /// task 0 was taken (at least 1). The runtime learns from it how long a launch runs.
    pub run_ns: u64,
    /// Written by the host: the launch's number, so that a reader holding an old number can
    /// tell that the mirror now belongs to another launch.
    pub launch: u64,
    /// Written by the kernel: `%globaltimer` when the launch started (the block with task 0)
    /// or was last resumed (a block of a later instance, the tail going back to work), on the
    /// GPU's clock, which every process on the GPU shares (the scheduler daemon measures
    /// switches between kernels with it).
    pub entered_ns: u64,
    /// The gate of a launch's gated links (`rt::links`): the stream waits before link i + 1
    /// until `gate >= i + 1` (a signed difference, as `cuStreamWaitValue32` compares). The host
    /// writes the low 16 bits (the links its resumes opened), the kernel the top byte
    /// ([`GATES_OPEN`], once every task has retired): neither overwrites the other's bytes.
    pub gate: u32,
    /// Written by the kernel: the latest gated-link instance (link i is i, the anchor L + 1)
    /// whose first block is about to read the command in host memory; 0 before the first.
    pub link_announced: u32,
    /// Written by the kernel: the latest gated-link instance whose every block has entered
    /// (holds its lane, or has left).
    pub link_entered: u32,
    /// Written by the control stream, after a command's writes to the control block and in
    /// the same batch: that command's number (`seq`). The host sees that a command has landed
    /// in host memory, with no driver call (a query waits inside the driver for a thread of
    /// the program that holds the context's lock while the preempted kernel runs).
    pub landed_seq: u32,
    /// Written by the kernel: `lanes[s][l]` is 1 while a block holding lane `l` on SM `s` is
    /// inside the task loop.
    pub lanes: [[u8; LANES]; MAX_SMS],
}

/// [`LaunchParams::first`] of an instance launched by a resume: its blocks look at the command
/// before they take a task, and none of them stays.
pub const RESUMED: u32 = 0;
/// A launch's first instance: its blocks claim their first chunk first, and its last block
/// holds the stream until every task has retired.
pub const FIRST: u32 = 1;
/// A gated link (`rt::links`): its blocks read the command in host memory first and all leave
/// when preempted; the block that retires the last task opens every gate.
pub const LINK: u32 = 2;
/// The last instance after the gated links: reads the command in host memory first; its last
/// block holds the stream as a first instance's does.
pub const ANCHOR: u32 = 3;
/// The top byte of [`HostMirror::gate`] once every task has retired (every gate open).
pub const GATES_OPEN: u8 = 0x7f;

/// `cupreempt_launch`: passed by value to every persistent wrapper kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchParams {
    /// Device pointer to the [`ControlBlock`].
    pub control: u64,
    pub total_tasks: u64,
    pub grid: [u32; 3],
    pub chunk: u32,
    pub budget_ns: u32,
    /// Device pointer to per-task counters (tests), or 0.
    pub audit: u64,
    /// Device-visible pointer to the [`HostMirror`], or 0 (then no block stays for stream
    /// order: launches that do not go through the runtime).
    pub host: u64,
    /// The instance's part in its launch: [`RESUMED`], [`FIRST`], [`LINK`] or [`ANCHOR`].
    pub first: u32,
    /// The mirror's `done_tasks` is refreshed when `done_tasks >> progress_shift` changes.
    pub progress_shift: u32,
    /// An earlier launch's time per task in ns (0: none known): adaptive chunks then start
    /// with as many tasks as fit the budget (at most `kMaxFirstChunk` in task_loop.cuh).
    pub task_ns: u32,
    /// Bit s set: blocks on SM s take no task until a command reaches the control block (the
    /// launch starts preempted there: `Runtime::launch_kept_off`).
    pub start_off: [u32; MAX_SMS / 32],
    /// Device pointer to [`LEFTOVER_SLOTS`] slots (never zeroed), or 0: with slots a block
    /// looks at the command between two tasks of a chunk and gives the rest back when sent
    /// away; without, it runs every task of a chunk it took.
    pub leftover: u64,
    /// [`LAUNCH_VERSION`]. No kernel reads it: a wrapper whose first parameter is shorter than
    /// this struct was built with headers older than the field, whose task loop does not wait
    /// for the kernel before it (`Inner::waits_for_predecessor`).
    pub launch_version: u32,
    pub reserved: u32,
}

/// `cupreempt_launch.launch_version` of this build (control.h, `CUPREEMPT_LAUNCH_VERSION`).
pub const LAUNCH_VERSION: u32 = 1;

/// Leftover slots per launch: one per lane of every SM (`cupreempt_launch.leftover`).
pub const LEFTOVER_SLOTS: usize = MAX_SMS * LANES;

impl LaunchParams {
    pub fn new(control: u64, grid: [u32; 3]) -> LaunchParams {
        let total_tasks = grid.iter().map(|&g| g as u64).product();
        LaunchParams {
            control,
            total_tasks,
            grid,
            chunk: 0,
            budget_ns: 0,
            audit: 0,
            host: 0,
            first: 0,
            progress_shift: progress_shift(total_tasks),
            task_ns: 0,
            start_off: [0; MAX_SMS / 32],
            leftover: 0,
            launch_version: LAUNCH_VERSION,
            reserved: 0,
        }
    }
}

/// The shift that refreshes the progress mirror about 1024 times per launch: often enough for
/// a scheduler, rare enough that the stores over PCIe cost nothing.
pub fn progress_shift(total_tasks: u64) -> u32 {
    (total_tasks / 1024).checked_ilog2().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    /// Compiles control.h with the C compiler and compares every offset with ours.
    #[test]
    fn layout_matches_the_device_header() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = tempdir();
        let prog = dir.join("layout.c");
        std::fs::write(
            &prog,
            r#"#include <stdio.h>
#include <stddef.h>
#include "cupreempt/control.h"
#define F(t, f) printf(#t "." #f " %zu\n", offsetof(t, f))
int main(void) {
  F(cupreempt_control, next_task); F(cupreempt_control, done_tasks);
  F(cupreempt_control, retired_tasks); F(cupreempt_control, command);
  F(cupreempt_control, command_seq);
  F(cupreempt_control, running_blocks); F(cupreempt_control, yielded_blocks);
  F(cupreempt_control, finished); F(cupreempt_control, main_left);
  F(cupreempt_control, link_entries); F(cupreempt_control, forward_ready);
  F(cupreempt_control, forward_seq); F(cupreempt_control, forward_command);
  F(cupreempt_control, forward_mask);
  F(cupreempt_control, yield_ns); F(cupreempt_control, start_ns);
  F(cupreempt_control, sm_mask);
  F(cupreempt_control, sm_lanes); F(cupreempt_control, leftovers);
  F(cupreempt_control, leftover_state); F(cupreempt_control, leftover_sms);
  F(cupreempt_control, cut_chunks);
  printf("sizeof.control %zu\n", sizeof(cupreempt_control));
  F(cupreempt_launch, control); F(cupreempt_launch, total_tasks); F(cupreempt_launch, grid_x);
  F(cupreempt_launch, chunk); F(cupreempt_launch, budget_ns); F(cupreempt_launch, audit);
  F(cupreempt_launch, host); F(cupreempt_launch, first); F(cupreempt_launch, progress_shift);
  F(cupreempt_launch, task_ns); F(cupreempt_launch, start_off); F(cupreempt_launch, leftover);
  F(cupreempt_launch, launch_version); F(cupreempt_launch, reserved);
  printf("sizeof.launch %zu\n", sizeof(cupreempt_launch));
  F(cupreempt_host, seq); F(cupreempt_host, command); F(cupreempt_host, sm_mask);
  F(cupreempt_host, tail_parked); F(cupreempt_host, started); F(cupreempt_host, done_tasks);
  F(cupreempt_host, yield_ns); F(cupreempt_host, run_ns); F(cupreempt_host, launch);
  F(cupreempt_host, entered_ns); F(cupreempt_host, gate); F(cupreempt_host, link_announced);
  F(cupreempt_host, link_entered); F(cupreempt_host, lanes);
  printf("sizeof.host %zu\n", sizeof(cupreempt_host));
  printf("const.RESUMED %u\n", CUPREEMPT_RESUMED); printf("const.FIRST %u\n", CUPREEMPT_FIRST);
  printf("const.LINK %u\n", CUPREEMPT_LINK); printf("const.ANCHOR %u\n", CUPREEMPT_ANCHOR);
  printf("const.GATES_OPEN %u\n", CUPREEMPT_GATES_OPEN);
  printf("const.LAUNCH_VERSION %u\n", CUPREEMPT_LAUNCH_VERSION);
  return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.join("layout");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(&cc)
            .arg(&prog)
            .arg("-I")
            .arg(root.join("cuda_support"))
            .arg("-o")
            .arg(&exe)
            .status()
            .unwrap_or_else(|e| panic!("this test needs a C compiler ({cc}): {e}"));
        assert!(status.success());
        let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
        macro_rules! at {
            ($c:literal, $t:ty, $f:ident) => {
                (concat!($c, ".", stringify!($f)), offset_of!($t, $f))
            };
        }
        let expected = [
            at!("cupreempt_control", ControlBlock, next_task),
            at!("cupreempt_control", ControlBlock, done_tasks),
            at!("cupreempt_control", ControlBlock, retired_tasks),
            at!("cupreempt_control", ControlBlock, command),
            at!("cupreempt_control", ControlBlock, command_seq),
            at!("cupreempt_control", ControlBlock, running_blocks),
            at!("cupreempt_control", ControlBlock, yielded_blocks),
            at!("cupreempt_control", ControlBlock, finished),
            at!("cupreempt_control", ControlBlock, main_left),
            at!("cupreempt_control", ControlBlock, link_entries),
            at!("cupreempt_control", ControlBlock, forward_ready),
            at!("cupreempt_control", ControlBlock, forward_seq),
            at!("cupreempt_control", ControlBlock, forward_command),
            at!("cupreempt_control", ControlBlock, forward_mask),
            at!("cupreempt_control", ControlBlock, yield_ns),
            at!("cupreempt_control", ControlBlock, start_ns),
            at!("cupreempt_control", ControlBlock, sm_mask),
            at!("cupreempt_control", ControlBlock, sm_lanes),
            at!("cupreempt_control", ControlBlock, leftovers),
            at!("cupreempt_control", ControlBlock, leftover_state),
            at!("cupreempt_control", ControlBlock, leftover_sms),
            at!("cupreempt_control", ControlBlock, cut_chunks),
            ("sizeof.control", size_of::<ControlBlock>()),
            at!("cupreempt_launch", LaunchParams, control),
            at!("cupreempt_launch", LaunchParams, total_tasks),
            ("cupreempt_launch.grid_x", offset_of!(LaunchParams, grid)),
            at!("cupreempt_launch", LaunchParams, chunk),
            at!("cupreempt_launch", LaunchParams, budget_ns),
            at!("cupreempt_launch", LaunchParams, audit),
            at!("cupreempt_launch", LaunchParams, host),
            at!("cupreempt_launch", LaunchParams, first),
            at!("cupreempt_launch", LaunchParams, progress_shift),
            at!("cupreempt_launch", LaunchParams, task_ns),
            at!("cupreempt_launch", LaunchParams, start_off),
            at!("cupreempt_launch", LaunchParams, leftover),
            at!("cupreempt_launch", LaunchParams, launch_version),
            at!("cupreempt_launch", LaunchParams, reserved),
            ("sizeof.launch", size_of::<LaunchParams>()),
            at!("cupreempt_host", HostMirror, seq),
            at!("cupreempt_host", HostMirror, command),
            at!("cupreempt_host", HostMirror, sm_mask),
            at!("cupreempt_host", HostMirror, tail_parked),
            at!("cupreempt_host", HostMirror, started),
            at!("cupreempt_host", HostMirror, done_tasks),
            at!("cupreempt_host", HostMirror, yield_ns),
            at!("cupreempt_host", HostMirror, run_ns),
            at!("cupreempt_host", HostMirror, launch),
            at!("cupreempt_host", HostMirror, entered_ns),
            at!("cupreempt_host", HostMirror, gate),
            at!("cupreempt_host", HostMirror, link_announced),
            at!("cupreempt_host", HostMirror, link_entered),
            at!("cupreempt_host", HostMirror, lanes),
            ("sizeof.host", size_of::<HostMirror>()),
            ("const.RESUMED", RESUMED as usize),
            ("const.FIRST", FIRST as usize),
            ("const.LINK", LINK as usize),
            ("const.ANCHOR", ANCHOR as usize),
            ("const.GATES_OPEN", GATES_OPEN as usize),
            ("const.LAUNCH_VERSION", LAUNCH_VERSION as usize),
        ];
        for (name, ours) in expected {
            let line = out
                .lines()
                .find(|l| l.split(' ').next() == Some(name))
                .unwrap_or_else(|| panic!("{name} missing"));
            let theirs: usize = line.split(' ').nth(1).unwrap().parse().unwrap();
            assert_eq!(ours, theirs, "{name}");
        }
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("cupreempt-layout-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The hot counters each sit on their own 128-byte line (see control.h).
    #[test]
    fn hot_counters_have_lines_of_their_own() {
        let lines = [
            offset_of!(ControlBlock, command),
            offset_of!(ControlBlock, next_task),
            offset_of!(ControlBlock, done_tasks),
            offset_of!(ControlBlock, retired_tasks),
            offset_of!(ControlBlock, main_left),
            offset_of!(ControlBlock, yield_ns),
            offset_of!(ControlBlock, sm_lanes),
        ];
        for (i, at) in lines.iter().enumerate() {
            assert_eq!(*at, 128 * i, "group {i} starts a line of its own");
        }
        assert!(offset_of!(ControlBlock, sm_mask) + 4 * MAX_SMS / 32 <= 128);
    }

    #[test]
    fn launch_params_count_tasks() {
        assert_eq!(LaunchParams::new(0, [4, 3, 2]).total_tasks, 24);
    }

    #[test]
    fn progress_is_mirrored_about_a_thousand_times_per_launch() {
        assert_eq!(progress_shift(0), 0);
        assert_eq!(progress_shift(1000), 0);
        assert_eq!(progress_shift(2048), 1);
        assert_eq!(progress_shift(1 << 20), 10);
        for total in [5_000u64, 123_456, 1 << 33] {
            let refreshes = total >> progress_shift(total);
            assert!((1024..2048).contains(&refreshes), "{total}: {refreshes}");
        }
    }
}
