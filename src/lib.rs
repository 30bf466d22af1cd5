//! cupreempt: rewrites CUDA kernels into preemptible persistent-thread form.
//!
//! The transformer runs in separate stages: [`parse`] → [`analysis`] (questions about the
//! source, never edits) → [`rewrite`] (byte-range edits, never re-parses) → [`edit::apply`]
//! (applies them once, never decides). [`transform::transform`] runs them all.

pub mod analysis;
pub mod diagnostics;
pub mod diff;
pub mod edit;
pub mod lang;
pub mod options;
pub mod parse;
pub mod program;
pub mod rewrite;
pub mod transform;
pub mod vocab;

pub use options::Options;
pub use transform::{transform, KernelReport, Transformed};

/// The device header and launch shim that transformed files include, embedded so that the
/// binary can install them anywhere (`cupreempt headers --out DIR`).
pub const SUPPORT_FILES: &[(&str, &str)] = &[
    (
        "cupreempt.cuh",
        include_str!("../cuda_support/cupreempt.cuh"),
    ),
    (
        "cupreempt/control.h",
        include_str!("../cuda_support/cupreempt/control.h"),
    ),
    (
        "cupreempt/task_loop.cuh",
        include_str!("../cuda_support/cupreempt/task_loop.cuh"),
    ),
    (
        "cupreempt/launch.cuh",
        include_str!("../cuda_support/cupreempt/launch.cuh"),
    ),
    (
        "cupreempt/runtime.h",
        include_str!("../cuda_support/cupreempt/runtime.h"),
    ),
    (
        "cupreempt/runtime_library.h",
        include_str!("../cuda_support/cupreempt/runtime_library.h"),
    ),
    (
        "cupreempt/runtime_path.h",
        include_str!("../cuda_support/cupreempt/runtime_path.h"),
    ),
    (
        "cupreempt/shield_begin.h",
        include_str!("../cuda_support/cupreempt/shield_begin.h"),
    ),
    (
        "cupreempt/shield_end.h",
        include_str!("../cuda_support/cupreempt/shield_end.h"),
    ),
];
