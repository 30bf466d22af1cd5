//! Errors of the launch/preempt/resume API.

use crate::smset::SmSetError;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// libcuda could not be loaded: nothing that needs the GPU can run here.
    #[error("no CUDA driver: libcuda could not be loaded")]
    NoDriver,
    /// A driver call failed; `name` is the driver's own name for `code`.
    #[error("{call} failed: {name} ({code})")]
    Driver {
        call: &'static str,
        code: u32,
        name: String,
    },
    /// The grid, block or shared memory of a launch is one the original launch would refuse
    /// too (`cudaErrorInvalidConfiguration`).
    #[error("invalid launch configuration: {0}")]
    InvalidConfiguration(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    #[error("unknown kernel handle {0}")]
    UnknownHandle(u64),
    /// `preempt` asked for SMs that are all yielded already (or all of them twice).
    #[error("already preempted on every SM asked for")]
    AlreadyPreempted,
    /// `resume` or `wait_yielded` on SMs that were not preempted.
    #[error("not preempted on the SMs asked for")]
    NotPreempted,
    #[error(transparent)]
    SmSet(#[from] SmSetError),
}

impl Error {
    /// The C ABI's status code for this error (see `cuda_support/cupreempt/runtime.h`).
    pub fn status(&self) -> i32 {
        match self {
            Error::NoDriver => 1,
            Error::Driver { .. } => 2,
            Error::InvalidConfiguration(_) => 3,
            Error::InvalidArgument(_) | Error::SmSet(_) => 4,
            Error::UnknownHandle(_) => 5,
            Error::AlreadyPreempted => 6,
            Error::NotPreempted => 7,
        }
    }
}
