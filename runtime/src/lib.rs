//! cupreempt runtime: the host side of preemptible kernels.
//!
//! Today: what the host and the device must agree on, the control block (mirroring
//! `cuda_support/cupreempt/control.h`, checked by a test that compiles the header) and the
//! encoding of SM sets; and [`sched`], the scheduling policies with their simulator. Launching,
//! preempting and resuming through the CUDA driver come with the runtime issue.

pub mod control;
pub mod sched;
pub mod smset;

pub use control::{ControlBlock, LaunchParams, YIELD_ALL, YIELD_SMS};
pub use smset::{SmSet, SmSetError, MAX_SMS};
