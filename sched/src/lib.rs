//! cupreempt's scheduling, in pure Rust (no CUDA): policies behind one event-driven interface
//! ([`policy`], [`policies`], [`spatial`]), the metrics they are judged by ([`metrics`]),
//! workloads ([`workload`]), the duration model ([`duration`]), a discrete-event simulator that
//! runs any policy over 1..N GPUs ([`sim`]), simultaneous multi-tenancy on one GPU ([`smt`]),
//! and SVG plots of a simulation ([`plot`]). The definitions and measured behaviours are in
//! docs/scheduling.md. `cupreempt sim` is its command line.

pub mod duration;
pub mod metrics;
pub mod model;
pub mod plot;
pub mod policies;
pub mod policy;
pub mod sim;
pub mod smt;
pub mod spatial;
pub mod workload;

pub use duration::Estimator;
pub use metrics::{Interval, Metrics};
pub use model::{GpuId, KernelId, KernelSpec, KernelView, Status, SystemView};
pub use policy::{Action, Event, Policy};
pub use sim::{
    simulate, simulate_predicted, simulate_sms, simulate_switching, Outcome, SimError, DEFAULT_SMS,
};
pub use workload::{parse_task_table, Generator, Rng, TableTask, Workload};

#[cfg(test)]
mod tests;
