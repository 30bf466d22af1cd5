//! `cupreemptd`: a node daemon that runs cupreempt's scheduling policies on the kernels of the
//! programs that connect to it over a Unix socket. [`protocol`] is the wire format (crate `cupreempt-protocol`, which the runtime uses too), [`live`]
//! the policy on live kernels, [`reserve`] the daemon's own policy's connections and standing
//! orders, [`place`] which GPU each program runs on, [`server`] the socket, its permissions and the connections; [`replay`] runs [`live`]
//! on a model GPU beside the simulator.
//! docs/daemon.md says what it promises and what it does not do yet.

pub mod live;
pub mod place;
pub mod replay;
pub mod reserve;
pub mod server;

/// The wire format (crate `cupreempt-protocol`, shared with the runtime).
pub use cupreempt_protocol as protocol;
