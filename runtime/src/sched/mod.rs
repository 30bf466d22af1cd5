//! Scheduling: policies behind one event-driven interface, metrics, workloads, and a
//! discrete-event simulator that runs the policies (DESIGN.md §5, shared/POLICIES.md).

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
pub use sim::{simulate, simulate_predicted, simulate_sms, Outcome, SimError, DEFAULT_SMS};
pub use workload::{Generator, Rng, Workload};

#[cfg(test)]
mod tests;
