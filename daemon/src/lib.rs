//! `cupreemptd`: a node daemon that runs cupreempt's scheduling policies on the kernels of the
//! programs that connect to it over a Unix socket. [`protocol`] is the wire format, [`live`]
//! the policy on live kernels, [`server`] the socket, its permissions and the connections.
//! docs/daemon.md says what it promises and what it does not do yet.

pub mod live;
pub mod protocol;
pub mod server;
