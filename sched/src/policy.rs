//! One interface for every policy: events in, actions out, so that the simulator and a
//! scheduler on the real runtime can drive the same code.

use crate::model::{GpuId, KernelId, SystemView};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    Arrived(KernelId),
    Finished(KernelId),
    /// A timer the policy set for this GPU went off.
    QuantumExpired(GpuId),
    /// A preemption completed: the kernel left its GPU and is ready again.
    Preempted(KernelId),
    /// A spatial preemption completed: the kernel runs on fewer SMs and the rest are free.
    Shrunk(KernelId),
    /// A revocation completed: the kernel left its GPU, lost its progress, and is ready again.
    Revoked(KernelId),
    /// The periodic tick the policy asked for.
    Tick,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Run a ready kernel on a whole idle GPU.
    Run {
        kernel: KernelId,
        gpu: GpuId,
    },
    /// Run a ready kernel on `sms` free SMs of a GPU that other kernels may share.
    RunOn {
        kernel: KernelId,
        gpu: GpuId,
        sms: u32,
    },
    /// Change how many SMs a kernel started with `RunOn` holds: more at once (if free), fewer
    /// after its preemption latency (a spatial preemption; `Shrunk` tells when).
    Resize {
        kernel: KernelId,
        sms: u32,
    },
    Preempt {
        kernel: KernelId,
    },
    /// Ask for `QuantumExpired(gpu)` at time `at` (replaces the GPU's earlier timer).
    SetTimer {
        gpu: GpuId,
        at: f64,
    },
    /// Kill a running kernel (TReM): its progress is lost; it becomes ready again after the
    /// revocation latency.
    Revoke {
        kernel: KernelId,
    },
    /// Ask for one `Tick` at time `at` (replaces the earlier tick).
    SetTick {
        at: f64,
    },
}

pub trait Policy {
    fn name(&self) -> &'static str;
    /// Called after the simulator has applied the event to `sys`.
    fn on_event(&mut self, event: Event, sys: &SystemView) -> Vec<Action>;
    /// Whether it reads `KernelView::waited`, which the simulator then keeps up to date (a
    /// walk over every waiting kernel at every event, which only SJF with aging needs).
    fn reads_waited(&self) -> bool {
        false
    }
}

/// Fills idle GPUs with ready kernels, best first by `key` (smaller is better; ties by id).
pub fn fill_idle<K: PartialOrd>(sys: &SystemView, key: impl Fn(KernelId) -> K) -> Vec<Action> {
    // Most events find no GPU idle, and one idle GPU needs only the best kernel: sorting every
    // ready kernel at every event made long simulations quadratic (100,000 kernels at load 0.8
    // under TReM's Priority: half the time in this sort).
    let idle: Vec<GpuId> = sys.idle_gpus().collect();
    if idle.is_empty() {
        return Vec::new();
    }
    let order = |a: &KernelId, b: &KernelId| {
        key(*a)
            .partial_cmp(&key(*b))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(b))
    };
    if let [gpu] = idle[..] {
        return sys
            .ready()
            .map(|k| k.id)
            .min_by(order)
            .map(|kernel| Action::Run { kernel, gpu })
            .into_iter()
            .collect();
    }
    let mut ready: Vec<KernelId> = sys.ready().map(|k| k.id).collect();
    if ready.len() > idle.len() {
        ready.select_nth_unstable_by(idle.len() - 1, order);
        ready.truncate(idle.len());
    }
    ready.sort_by(order);
    idle.into_iter()
        .zip(ready)
        .map(|(gpu, kernel)| Action::Run { kernel, gpu })
        .collect()
}
