//! Launch configurations: the checks an original launch would make, and the persistent grid.

use super::error::{Error, Result};

/// What the device allows, read once per runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub sm_count: u32,
    pub max_threads_per_block: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
}

impl Limits {
    /// The H100's values; for tests.
    pub const H100: Limits = Limits {
        sm_count: 132,
        max_threads_per_block: 1024,
        max_block: [1024, 1024, 64],
        max_grid: [i32::MAX as u32, 65535, 65535],
    };
}

/// One launch as the application wrote it (`<<<grid, block, smem, stream>>>`), plus the chunk
/// and latency-budget overrides of `cupreempt_launch` (0: the kernel's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub chunk: u32,
    pub budget_ns: u32,
    /// An earlier launch's time per task in ns, or 0: adaptive chunks then start with as many
    /// tasks as fit their budget (at most 3) instead of one.
    pub task_ns: u32,
    /// Gated links before the launch's last instance (rt::links; 0: none, the first instance's
    /// last block holds the stream while preempted).
    pub links: u32,
}

impl LaunchConfig {
    pub fn new(grid: [u32; 3], block: [u32; 3], shared_mem_bytes: u32) -> LaunchConfig {
        LaunchConfig {
            grid,
            block,
            shared_mem_bytes,
            chunk: 0,
            budget_ns: 0,
            task_ns: 0,
            links: 0,
        }
    }

    /// Tasks (original blocks) of this launch, or the configuration error the original launch
    /// would get. Shared-memory and register limits are left to the driver, which reports them
    /// for the persistent launch as it would for the original.
    pub fn tasks(&self, limits: &Limits) -> Result<u64> {
        let bad = |what: String| Err(Error::InvalidConfiguration(what));
        for (axis, (&g, &max)) in ["x", "y", "z"]
            .iter()
            .zip(self.grid.iter().zip(&limits.max_grid))
        {
            if g == 0 || g > max {
                return bad(format!("grid.{axis} = {g} (allowed 1..={max})"));
            }
        }
        for (axis, (&b, &max)) in ["x", "y", "z"]
            .iter()
            .zip(self.block.iter().zip(&limits.max_block))
        {
            if b == 0 || b > max {
                return bad(format!("block.{axis} = {b} (allowed 1..={max})"));
            }
        }
        let threads: u64 = self.block.iter().map(|&b| b as u64).product();
        if threads > limits.max_threads_per_block as u64 {
            return bad(format!(
                "{threads} threads per block (at most {})",
                limits.max_threads_per_block
            ));
        }
        Ok(self.grid.iter().map(|&g| g as u64).product())
    }

    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().product()
    }
}

/// Blocks of a persistent launch: what fits on `sms` SMs at `per_sm` blocks each, never more
/// than there are tasks. `per_sm == 0` (the kernel does not fit at all) launches one block per
/// task, so the driver reports the resource error the original launch would get.
pub fn persistent_blocks(per_sm: u32, sms: u32, tasks: u64) -> u32 {
    let fit = per_sm as u64 * sms as u64;
    let blocks = if fit == 0 { tasks } else { fit.min(tasks) };
    blocks.clamp(1, u32::MAX as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_multiply_the_grid() {
        let c = LaunchConfig::new([4, 3, 2], [128, 1, 1], 0);
        assert_eq!(c.tasks(&Limits::H100), Ok(24));
        assert_eq!(c.threads_per_block(), 128);
    }

    #[test]
    fn configurations_the_original_refuses_are_refused() {
        let l = Limits::H100;
        for (grid, block) in [
            ([0, 1, 1], [32, 1, 1]),
            ([1, 65536, 1], [32, 1, 1]),
            ([1, 1, 1], [0, 1, 1]),
            ([1, 1, 1], [1025, 1, 1]),
            ([1, 1, 1], [32, 32, 2]),
            ([1, 1, 1], [1, 1, 65]),
        ] {
            let err = LaunchConfig::new(grid, block, 0).tasks(&l).unwrap_err();
            assert!(
                matches!(err, Error::InvalidConfiguration(_)),
                "{grid:?} {block:?}: {err}"
            );
        }
        assert_eq!(
            LaunchConfig::new([i32::MAX as u32, 65535, 65535], [32, 32, 1], 0).tasks(&l),
            Ok(i32::MAX as u64 * 65535 * 65535)
        );
    }

    #[test]
    fn persistent_grid_is_occupancy_times_sms_capped_by_tasks() {
        assert_eq!(persistent_blocks(8, 132, 1 << 20), 1056);
        assert_eq!(persistent_blocks(8, 132, 100), 100);
        assert_eq!(persistent_blocks(8, 16, 1000), 128);
        // Does not fit: one block per task, so the driver reports the original's error.
        assert_eq!(persistent_blocks(0, 132, 500), 500);
        assert_eq!(persistent_blocks(0, 132, u64::MAX), u32::MAX);
        assert_eq!(persistent_blocks(4, 132, 0), 1);
    }
}
