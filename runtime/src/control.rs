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
    pub next_task: u64,
    /// Tasks finished: progress, counted per chunk (their results may still be in flight).
    pub done_tasks: u64,
    /// Tasks whose results are visible device-wide (counted when blocks leave).
    pub retired_tasks: u64,
    pub command: u32,
    pub running_blocks: u32,
    pub yielded_blocks: u32,
    /// 1 once every task is done: the application's stream waits on this word.
    pub finished: u32,
    pub sm_mask: [u32; MAX_SMS / 32],
    /// Persistent blocks inside the task loop on each SM (what `wait_yielded` watches).
    pub sm_blocks: [u32; MAX_SMS],
}

impl ControlBlock {
    pub const fn zeroed() -> ControlBlock {
        ControlBlock {
            next_task: 0,
            done_tasks: 0,
            retired_tasks: 0,
            command: 0,
            running_blocks: 0,
            yielded_blocks: 0,
            finished: 0,
            sm_mask: [0; MAX_SMS / 32],
            sm_blocks: [0; MAX_SMS],
        }
    }
}

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
}

impl LaunchParams {
    pub fn new(control: u64, grid: [u32; 3]) -> LaunchParams {
        LaunchParams {
            control,
            total_tasks: grid.iter().map(|&g| g as u64).product(),
            grid,
            chunk: 0,
            budget_ns: 0,
            audit: 0,
        }
    }
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
  F(cupreempt_control, running_blocks); F(cupreempt_control, yielded_blocks);
  F(cupreempt_control, finished); F(cupreempt_control, sm_mask);
  F(cupreempt_control, sm_blocks);
  printf("sizeof.control %zu\n", sizeof(cupreempt_control));
  F(cupreempt_launch, control); F(cupreempt_launch, total_tasks); F(cupreempt_launch, grid_x);
  F(cupreempt_launch, chunk); F(cupreempt_launch, budget_ns); F(cupreempt_launch, audit);
  printf("sizeof.launch %zu\n", sizeof(cupreempt_launch));
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
        let expected = [
            (
                "cupreempt_control.next_task",
                offset_of!(ControlBlock, next_task),
            ),
            (
                "cupreempt_control.done_tasks",
                offset_of!(ControlBlock, done_tasks),
            ),
            (
                "cupreempt_control.retired_tasks",
                offset_of!(ControlBlock, retired_tasks),
            ),
            (
                "cupreempt_control.command",
                offset_of!(ControlBlock, command),
            ),
            (
                "cupreempt_control.running_blocks",
                offset_of!(ControlBlock, running_blocks),
            ),
            (
                "cupreempt_control.yielded_blocks",
                offset_of!(ControlBlock, yielded_blocks),
            ),
            (
                "cupreempt_control.finished",
                offset_of!(ControlBlock, finished),
            ),
            (
                "cupreempt_control.sm_blocks",
                offset_of!(ControlBlock, sm_blocks),
            ),
            (
                "cupreempt_control.sm_mask",
                offset_of!(ControlBlock, sm_mask),
            ),
            ("sizeof.control", size_of::<ControlBlock>()),
            (
                "cupreempt_launch.control",
                offset_of!(LaunchParams, control),
            ),
            (
                "cupreempt_launch.total_tasks",
                offset_of!(LaunchParams, total_tasks),
            ),
            ("cupreempt_launch.grid_x", offset_of!(LaunchParams, grid)),
            ("cupreempt_launch.chunk", offset_of!(LaunchParams, chunk)),
            (
                "cupreempt_launch.budget_ns",
                offset_of!(LaunchParams, budget_ns),
            ),
            ("cupreempt_launch.audit", offset_of!(LaunchParams, audit)),
            ("sizeof.launch", size_of::<LaunchParams>()),
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

    #[test]
    fn launch_params_count_tasks() {
        assert_eq!(LaunchParams::new(0, [4, 3, 2]).total_tasks, 24);
    }
}
