//! `reserve`, the daemon's own policy (not the simulator's): every kernel runs where the GPU
//! puts it, except that while a program of higher priority is connected, the kernels of lower
//! priority keep off the last `--reserve-sms` SMs, so that the higher one's launches find them
//! free (under MPS). The MPS baseline of a batch process held to 90% of the SMs does this for
//! the whole life of the process; this holds them back only while it matters.
//!
//! This module keeps what `reserve` knows of connections and the standing orders it gives them;
//! `Live` sends the kernels already running off the reserve and back (`Live::apply_reserve`).

use crate::live::{Command, ConnId};
use crate::protocol::ServerMsg;
use std::collections::{HashMap, HashSet};

/// SMs `reserve` holds back unless `--reserve-sms` says otherwise (`Live::with_reserve`).
pub const DEFAULT_RESERVE_SMS: u32 = 8;

/// The last `n` SMs of a GPU of `sms` (the ones `reserve` holds back).
pub(crate) fn last_sms(sms: u32, n: u32) -> Vec<u32> {
    (sms.saturating_sub(n)..sms).collect()
}

/// The reserve, the highest priority each connection has launched with, the connections told
/// to start their launches off the reserve (`keep_off`), and those told that their launches
/// are left alone (`lean`).
pub(crate) struct Reserve {
    sms: Vec<u32>,
    priority: HashMap<ConnId, u8>,
    kept_off: HashSet<ConnId>,
    lean: HashSet<ConnId>,
}

impl Reserve {
    pub(crate) fn new(sms: Vec<u32>) -> Reserve {
        Reserve {
            sms,
            priority: HashMap::new(),
            kept_off: HashSet::new(),
            lean: HashSet::new(),
        }
    }

    /// The SMs held back.
    pub(crate) fn sms(&self) -> &[u32] {
        &self.sms
    }

    pub(crate) fn set_sms(&mut self, sms: Vec<u32>) {
        self.sms = sms;
    }

    /// A launch of `conn` with `priority`.
    pub(crate) fn launched(&mut self, conn: ConnId, priority: u8) {
        let top = self.priority.entry(conn).or_insert(priority);
        *top = (*top).max(priority);
    }

    /// The connection is gone: it outranks nobody, and needs no order.
    pub(crate) fn gone(&mut self, conn: ConnId) {
        self.priority.remove(&conn);
        self.kept_off.remove(&conn);
        self.lean.remove(&conn);
    }

    /// Whether a program other than `conn` has launched with a priority above `mine`.
    pub(crate) fn outranked(&self, conn: ConnId, mine: u8) -> bool {
        self.priority.iter().any(|(&c, &p)| c != conn && p > mine)
    }

    /// The standing orders that changed, in connection order: `lean` on for every program
    /// that no other outranks and off for the others, then `keep_off` the reserve for the
    /// outranked ones and an empty `keep_off` for those that no longer are. A launch is on the
    /// GPU before the daemon hears of it, so an outranked program's launches must start off
    /// the reserve by themselves. A program that no other outranks is never steered, and its
    /// short launches run as their original kernels, which a preemptible form only slows down
    /// (on the H100 the urgent kernel of scripts/probes/daemon_priority.sh: p99 205-214 µs
    /// preemptible, 161-181 µs as the original, docs/daemon.md).
    pub(crate) fn orders(&mut self) -> Vec<Command> {
        let lean = self.changed(|r, conn, top| !r.outranked(conn, top), |r| &mut r.lean);
        let keep_off = self.changed(|r, conn, top| r.outranked(conn, top), |r| &mut r.kept_off);
        let sms = &self.sms;
        lean.into_iter()
            .map(|(conn, on)| Command {
                conn,
                msg: ServerMsg::Lean { on },
            })
            .chain(keep_off.into_iter().map(|(conn, off)| Command {
                conn,
                msg: ServerMsg::KeepOff {
                    sms: if off { sms.clone() } else { Vec::new() },
                },
            }))
            .collect()
    }

    /// The connections whose order (`want`, from each connection's highest priority) differs
    /// from the set of those that have it, in connection order; the set is brought up to date.
    fn changed(
        &mut self,
        want: impl Fn(&Reserve, ConnId, u8) -> bool,
        set: impl Fn(&mut Reserve) -> &mut HashSet<ConnId>,
    ) -> Vec<(ConnId, bool)> {
        let mut changes: Vec<(ConnId, bool)> = self
            .priority
            .iter()
            .map(|(&conn, &top)| (conn, want(self, conn, top)))
            .collect();
        changes.retain(|&(conn, on)| on != set(self).contains(&conn));
        changes.sort_unstable(); // commands in a stable order
        for &(conn, on) in &changes {
            if on {
                set(self).insert(conn);
            } else {
                set(self).remove(&conn);
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lean(conn: ConnId, on: bool) -> Command {
        Command {
            conn,
            msg: ServerMsg::Lean { on },
        }
    }

    fn keep_off(conn: ConnId, sms: &[u32]) -> Command {
        Command {
            conn,
            msg: ServerMsg::KeepOff { sms: sms.to_vec() },
        }
    }

    /// Orders follow the connections' priorities, each given once, and end with a connection
    /// of higher priority; equals do not outrank each other.
    #[test]
    fn orders_follow_the_highest_priority_connected() {
        let mut r = Reserve::new(last_sms(132, 2));
        assert_eq!(r.sms(), [130, 131]);
        r.launched(1, 0);
        assert_eq!(r.orders(), [lean(1, true)]);
        assert_eq!(r.orders(), []);
        r.launched(2, 9);
        assert_eq!(
            r.orders(),
            [lean(1, false), lean(2, true), keep_off(1, &[130, 131])]
        );
        r.launched(3, 9);
        assert_eq!(r.orders(), [lean(3, true)]);
        // A later launch of lower priority does not lower a connection's rank.
        r.launched(2, 0);
        assert_eq!(r.orders(), []);
        r.gone(2);
        r.gone(3);
        assert_eq!(r.orders(), [lean(1, true), keep_off(1, &[])]);
        assert!(!r.outranked(1, 0));
    }
}
