//! Placing programs on GPUs (`cupreemptd --gpus N`, `cupreemptd run`). A launch runs on the
//! GPU its program chose, and its data lives there: a kernel cannot move to the GPU a policy
//! would pick. So the daemon places programs, not kernels, once, before they start (TReM
//! places jobs the same way), and each GPU's own policy then schedules the kernels of the
//! programs on it. Where TReM revokes a GPU from a batch job (kills it, to restart it later
//! from the beginning), here the GPU's policy preempts the batch kernels instead: they keep
//! their progress and resume where they left off.
//!
//! The rule, in TReM Priority's order: a program goes to the GPU where the programs of its
//! priority or higher ask least (their demand, below), then where they are fewest, then where
//! all programs ask least, then where they are fewest, then to the lowest number. A
//! latency-critical program thus takes an idle GPU, else one where only lower-priority work
//! runs (which its GPU's policy makes room for), and batch programs spread out by what they
//! ask of their GPUs, not by their number.
//!
//! A GPU's demand is the sum of its programs' demands, each the share of the time since it was
//! placed during which it had a kernel launched and not finished (one kernel or several at
//! once: a program that waits for each kernel and one that keeps a stream full both read as
//! 1). A program is heard of twice: `cupreemptd run` places it on one connection, and its
//! runtime reports its launches on another; both come from the same process (`run` execs the
//! program), so its launches are counted by the process id the socket gives. A program placed
//! less than `KNOWN_AFTER_US` ago, or whose launches come from another process, counts as the
//! mean of the programs that are known (1 where none is): with nothing known the rule is the
//! count of programs. Demands compare in tenths, so that near-equal GPUs fall to the count.

use crate::live::ConnId;
use std::collections::{HashMap, HashSet};

/// How long a program must have been placed before its own demand counts (µs): a program
/// that has just started has launched little yet, whatever it will ask.
pub const KNOWN_AFTER_US: f64 = 200_000.0;

/// One placed program: its GPU, priority, process and when it was placed (µs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    pub gpu: usize,
    pub priority: u8,
    pub pid: i32,
    pub at: f64,
}

/// The time a process has had kernels outstanding.
#[derive(Debug, Default)]
struct Demand {
    /// Time with a kernel outstanding, up to `since` (µs).
    busy_us: f64,
    /// Launched and not finished: (connection, kernel id).
    outstanding: HashSet<(ConnId, u64)>,
    /// When `outstanding` last became non-empty.
    since: f64,
}

impl Demand {
    fn busy_at(&self, t: f64) -> f64 {
        self.busy_us
            + if self.outstanding.is_empty() {
                0.0
            } else {
                (t - self.since).max(0.0)
            }
    }

    fn remove(&mut self, t: f64, key: &(ConnId, u64)) {
        if self.outstanding.remove(key) && self.outstanding.is_empty() {
            self.busy_us += (t - self.since).max(0.0);
        }
    }
}

/// The programs placed and not yet ended, by the connection that asked, and what the processes
/// of placed programs have launched.
#[derive(Debug)]
pub struct Placement {
    gpus: usize,
    programs: HashMap<ConnId, Placed>,
    demand: HashMap<i32, Demand>,
}

impl Placement {
    pub fn new(gpus: usize) -> Placement {
        Placement {
            gpus: gpus.max(1),
            programs: HashMap::new(),
            demand: HashMap::new(),
        }
    }

    pub fn gpus(&self) -> usize {
        self.gpus
    }

    /// Places the program of process `pid` asking on `conn` at time `t` (µs); an error if that
    /// connection has placed one.
    pub fn place(&mut self, conn: ConnId, priority: u8, pid: i32, t: f64) -> Result<usize, String> {
        if self.programs.contains_key(&conn) {
            return Err("this connection has placed its program already".into());
        }
        let all = self.demands_of(t, |_| true);
        let outranking = self.demands_of(t, |p| p.priority >= priority);
        let tenths = |d: f64| (d * 10.0).round() as i64;
        let key = |gpu: usize| {
            let on = self.programs.values().filter(|p| p.gpu == gpu);
            let outranking_count = on.clone().filter(|p| p.priority >= priority).count();
            (
                tenths(outranking[gpu]),
                outranking_count,
                tenths(all[gpu]),
                on.count(),
                gpu,
            )
        };
        let gpu = (0..self.gpus).min_by_key(|&g| key(g)).unwrap_or(0);
        self.programs.insert(
            conn,
            Placed {
                gpu,
                priority,
                pid,
                at: t,
            },
        );
        self.demand.entry(pid).or_default();
        Ok(gpu)
    }

    /// Each GPU's demand at `t`: the sum of its programs' (the module's rule).
    pub fn demands(&self, t: f64) -> Vec<f64> {
        self.demands_of(t, |_| true)
    }

    /// Each GPU's demand at `t` from the programs that `counted` keeps.
    fn demands_of(&self, t: f64, counted: impl Fn(&Placed) -> bool) -> Vec<f64> {
        let own = |p: &Placed| {
            let age = t - p.at;
            let d = self.demand.get(&p.pid)?;
            (age >= KNOWN_AFTER_US).then(|| (d.busy_at(t) / age).min(1.0))
        };
        let known: Vec<f64> = self.programs.values().filter_map(own).collect();
        let unknown = if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        let mut out = vec![0.0; self.gpus];
        for p in self.programs.values().filter(|p| counted(p)) {
            out[p.gpu] += own(p).unwrap_or(unknown);
        }
        out
    }

    /// Process `pid` launched kernel `id` on `conn` at `t`: counted where it is a placed
    /// program's.
    pub fn launched(&mut self, pid: i32, conn: ConnId, id: u64, t: f64) {
        if let Some(d) = self.demand.get_mut(&pid) {
            if d.outstanding.is_empty() {
                d.since = t;
            }
            d.outstanding.insert((conn, id));
        }
    }

    /// Kernel `id` of process `pid`, launched on `conn`, has finished at `t`.
    pub fn finished(&mut self, pid: i32, conn: ConnId, id: u64, t: f64) {
        if let Some(d) = self.demand.get_mut(&pid) {
            d.remove(t, &(conn, id));
        }
    }

    /// Connection `conn` of process `pid` closed at `t`: its kernels are no longer
    /// outstanding; where it placed a program, that program has ended (returned).
    pub fn gone(&mut self, conn: ConnId, pid: i32, t: f64) -> Option<Placed> {
        if let Some(d) = self.demand.get_mut(&pid) {
            let ended: Vec<_> = d
                .outstanding
                .iter()
                .filter(|k| k.0 == conn)
                .copied()
                .collect();
            for k in ended {
                d.remove(t, &k);
            }
        }
        let placed = self.programs.remove(&conn)?;
        if !self.programs.values().any(|p| p.pid == placed.pid) {
            self.demand.remove(&placed.pid);
        }
        Some(placed)
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

    /// Each program its own process (pid = connection), all placed at time 0 unless said.
    fn place(p: &mut Placement, conn: ConnId, priority: u8) -> Result<usize, String> {
        p.place(conn, priority, conn as i32, 0.0)
    }

    #[test]
    fn urgent_programs_take_gpus_without_their_equals_and_batch_ones_spread() {
        let mut p = Placement::new(2);
        // Two batch programs spread over the two GPUs.
        assert_eq!(place(&mut p, 1, 0), Ok(0));
        assert_eq!(place(&mut p, 2, 0), Ok(1));
        // An urgent one outranks both: the first GPU with no program of its priority.
        assert_eq!(place(&mut p, 3, 9), Ok(0));
        // A second urgent one goes where no urgent program is, though batch work is there.
        assert_eq!(place(&mut p, 4, 9), Ok(1));
        // A third batch program goes where fewest programs are (ties: the lower number).
        assert_eq!(place(&mut p, 5, 0), Ok(0));
        assert_eq!(p.counts(), vec![3, 2]);
        // A third urgent one: each GPU has one urgent program; GPU 1 has fewer programs.
        assert_eq!(place(&mut p, 6, 9), Ok(1));
        assert!(
            place(&mut p, 6, 9).is_err(),
            "a connection places one program"
        );
        // The urgent program on GPU 0 ends: the next urgent one goes there.
        let gone = p.gone(3, 3, 1.0).map(|g| (g.gpu, g.priority));
        assert_eq!(gone, Some((0, 9)));
        assert_eq!(place(&mut p, 7, 9), Ok(0));
        assert_eq!(p.gone(3, 3, 2.0), None);
    }

    #[test]
    fn one_gpu_takes_everything() {
        let mut p = Placement::new(1);
        for c in 0..5 {
            assert_eq!(place(&mut p, c, (c * 3) as u8), Ok(0));
        }
        assert_eq!(p.counts(), vec![5]);
    }

    /// Batch programs go where less is asked of the GPU, once their demand is known: a program
    /// that keeps its GPU busy weighs more than one that launches now and then.
    #[test]
    fn batch_programs_go_where_the_gpus_are_asked_less() {
        let s = 1_000_000.0; // µs
        let mut p = Placement::new(2);
        // Program 1 (GPU 0) keeps a kernel outstanding all the time: two back to back, and a
        // third launched before the second ends (a second stream) counts once.
        assert_eq!(p.place(1, 0, 101, 0.0), Ok(0));
        assert_eq!(p.place(2, 0, 102, 0.0), Ok(1));
        p.launched(101, 11, 1, 0.0);
        p.finished(101, 11, 1, 0.5 * s);
        p.launched(101, 11, 2, 0.5 * s);
        p.launched(101, 11, 3, 0.9 * s);
        p.finished(101, 11, 2, 1.0 * s);
        // Program 2 (GPU 1) has a kernel outstanding a tenth of the time, launched from its
        // runtime's connection (12), counted by its process.
        p.launched(102, 12, 1, 0.2 * s);
        p.finished(102, 12, 1, 0.3 * s);
        let d = p.demands(1.0 * s);
        assert!(
            (d[0] - 1.0).abs() < 1e-9 && (d[1] - 0.1).abs() < 1e-9,
            "{d:?}"
        );
        // Equal counts: the count alone would take GPU 0; the demand takes GPU 1.
        assert_eq!(p.place(3, 0, 103, 1.0 * s), Ok(1));
        // Program 3 is new: it counts as the mean of the known (0.55), so GPU 1 asks 0.65
        // against GPU 0's 1.0, and a fourth goes there too.
        assert_eq!(p.place(4, 0, 104, 1.0 * s), Ok(1));
        // An urgent program has no equal on either GPU: it goes where less is asked.
        assert_eq!(p.place(5, 9, 105, 1.0 * s), Ok(0));
        // Program 1 ends (its connections close): its demand leaves GPU 0.
        assert!(
            p.gone(11, 101, 1.1 * s).is_none(),
            "the runtime's connection placed nothing"
        );
        assert_eq!(p.gone(1, 101, 1.1 * s).map(|g| g.gpu), Some(0));
        let d = p.demands(1.1 * s);
        assert!(d[0] < d[1], "{d:?}");
        assert_eq!(p.place(6, 0, 106, 1.1 * s), Ok(0));
    }

    /// With nothing known yet (every program placed less than `KNOWN_AFTER_US` ago), or
    /// demands within a tenth of each other, the count decides.
    #[test]
    fn unknown_or_near_equal_demands_fall_to_the_count() {
        let mut p = Placement::new(2);
        assert_eq!(p.place(1, 0, 101, 0.0), Ok(0));
        p.launched(101, 1, 1, 0.0);
        // 0.1 s later program 1 is still unknown: it counts as 1, as any unknown program.
        assert_eq!(p.place(2, 0, 102, 100_000.0), Ok(1));
        assert_eq!(p.place(3, 0, 103, 100_000.0), Ok(0));
        assert_eq!(p.place(4, 0, 104, 100_000.0), Ok(1));
        assert_eq!(p.counts(), vec![2, 2]);
        // 1 s on, every program's kernels have been outstanding the whole time but for a
        // moment on GPU 1: 1.98 against 2.0 is within a tenth's rounding, and the count decides.
        for (pid, conn) in [(102, 2), (103, 3), (104, 4)] {
            p.launched(pid, conn, 1, 100_000.0);
        }
        p.finished(104, 4, 1, 1_080_000.0);
        p.launched(104, 4, 2, 1_100_000.0);
        let d = p.demands(1_100_000.0);
        assert!(d[1] < d[0] && (d[0] - d[1]) < 0.05, "{d:?}");
        assert_eq!(p.place(5, 0, 105, 1_100_000.0), Ok(0));
    }
}
