//! Placing programs on GPUs (`cupreemptd --gpus N`, `cupreemptd run`). A launch runs on the
//! GPU its program chose, and its data lives there: a kernel cannot move to the GPU a policy
//! would pick. So the daemon places programs, not kernels, once, before they start (TReM
//! places jobs the same way), and each GPU's own policy then schedules the kernels of the
//! programs on it. Where TReM revokes a GPU from a batch job (kills it, to restart it later
//! from the beginning), here the GPU's policy preempts the batch kernels instead: they keep
//! their progress and resume where they left off.
//!
//! The rule, in TReM Priority's order: a program goes to the GPU with the fewest programs of
//! its priority or higher, then the fewest programs, then the lowest number. A latency-critical
//! program thus takes an idle GPU, else one where only lower-priority work runs (which its
//! GPU's policy makes room for), and batch programs spread out.

use crate::live::ConnId;
use std::collections::HashMap;

/// One placed program: its GPU and priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub gpu: usize,
    pub priority: u8,
}

/// The programs placed and not yet ended, by the connection that asked.
#[derive(Debug)]
pub struct Placement {
    gpus: usize,
    programs: HashMap<ConnId, Placed>,
}

impl Placement {
    pub fn new(gpus: usize) -> Placement {
        Placement {
            gpus: gpus.max(1),
            programs: HashMap::new(),
        }
    }

    pub fn gpus(&self) -> usize {
        self.gpus
    }

    /// Places the program asking on `conn`; an error if that connection has placed one.
    pub fn place(&mut self, conn: ConnId, priority: u8) -> Result<usize, String> {
        if self.programs.contains_key(&conn) {
            return Err("this connection has placed its program already".into());
        }
        let load = |gpu: usize| {
            let on = self.programs.values().filter(|p| p.gpu == gpu);
            let outranking = on.clone().filter(|p| p.priority >= priority).count();
            (outranking, on.count(), gpu)
        };
        let gpu = (0..self.gpus).min_by_key(|&g| load(g)).unwrap_or(0);
        self.programs.insert(conn, Placed { gpu, priority });
        Ok(gpu)
    }

    /// The program placed through `conn` has ended (its connection closed).
    pub fn gone(&mut self, conn: ConnId) -> Option<Placed> {
        self.programs.remove(&conn)
    }

    /// How many programs each GPU holds.
    pub fn counts(&self) -> Vec<usize> {
        let mut n = vec![0; self.gpus];
        for p in self.programs.values() {
            n[p.gpu] += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgent_programs_take_gpus_without_their_equals_and_batch_ones_spread() {
        let mut p = Placement::new(2);
        // Two batch programs spread over the two GPUs.
        assert_eq!(p.place(1, 0), Ok(0));
        assert_eq!(p.place(2, 0), Ok(1));
        // An urgent one outranks both: the first GPU with no program of its priority.
        assert_eq!(p.place(3, 9), Ok(0));
        // A second urgent one goes where no urgent program is, though batch work is there.
        assert_eq!(p.place(4, 9), Ok(1));
        // A third batch program goes where fewest programs are (ties: the lower number).
        assert_eq!(p.place(5, 0), Ok(0));
        assert_eq!(p.counts(), vec![3, 2]);
        // A third urgent one: each GPU has one urgent program; GPU 1 has fewer programs.
        assert_eq!(p.place(6, 9), Ok(1));
        assert!(p.place(6, 9).is_err(), "a connection places one program");
        // The urgent program on GPU 0 ends: the next urgent one goes there.
        assert_eq!(
            p.gone(3),
            Some(Placed {
                gpu: 0,
                priority: 9
            })
        );
        assert_eq!(p.place(7, 9), Ok(0));
        assert_eq!(p.gone(3), None);
    }

    #[test]
    fn one_gpu_takes_everything() {
        let mut p = Placement::new(1);
        for c in 0..5 {
            assert_eq!(p.place(c, (c * 3) as u8), Ok(0));
        }
        assert_eq!(p.counts(), vec![5]);
    }
}
