//! cupreempt runtime: the host side of preemptible kernels, on the GPU.
//!
//! - [`rt`]: launch, preempt, resume and observe transformed kernels (Rust API on cudarc, and
//!   the C ABI behind `cuda_support/cupreempt/runtime.h`);
//! - [`control`], [`smset`]: what host and device agree on (mirroring
//!   `cuda_support/cupreempt/control.h`, checked by a test that compiles the header).
//!
//! The scheduling policies and their simulator are the `cupreempt-sched` crate, which needs no
//! CUDA.

pub mod control;
pub mod rt;
pub mod smset;

pub use control::{ControlBlock, LaunchParams, YIELD_ALL, YIELD_SMS};
pub use smset::{SmSet, SmSetError, MAX_SMS};
