//! The policies of `cupreempt-sched` on live kernels: the simulator's `SystemView`, kept up to
//! date from what programs report, and the policy's actions turned into commands for them.
//!
//! A launch is on the GPU before the daemon hears of it (waiting for the daemon would put a
//! round trip into every launch). So a kernel the policy does not run is preempted at once (or,
//! while another kernel's preemption is on its way, once that has landed and the policy has
//! chosen), and resumed when the policy runs it. Times are µs since the daemon started.

use crate::protocol::ServerMsg;
use crate::reserve::{last_sms, Reserve, DEFAULT_RESERVE_SMS};
use cupreempt_sched::{
    Action, Estimator, Event, KernelSpec, KernelView, Policy, Status, SystemView,
};
use std::collections::HashMap;

/// One connection (one program's runtime).
pub type ConnId = u64;

/// What the daemon has told the kernel itself to do (the model's `Status` is what the policy
/// believes; they differ while a command is on its way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    Run,
    Yield,
    /// It has yielded.
    Parked,
    Done,
}

/// What a program says of a launch.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchInfo<'a> {
    pub kernel: &'a str,
    pub tasks: u64,
    pub priority: u8,
    pub weight: f64,
    /// The program's own estimate (µs); none: the duration model's.
    pub estimate_us: Option<f64>,
    /// What the duration model predicts from (`KernelSpec::features`).
    pub features: Option<[f64; 4]>,
    /// The SMs it started preempted on (a `keep_off` order in force at the launch).
    pub kept_off: &'a [u32],
}

/// A command for the program on connection `conn`.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub conn: ConnId,
    pub msg: ServerMsg,
}

/// Policies of `cupreempt_sched::policies::NAMES` that need commands the runtime does not take
/// from the daemon yet: revocation (TReM's priority and elastic).
const NEEDS_MORE: [&str; 2] = ["priority", "elastic"];

/// The preemption cost the policies assume until the daemon has measured one (`preempt` sent
/// to `yielded` heard, `learn_switch`). A preemption is never free: assumed to cost nothing,
/// FFS sizes its epoch at its floor (100 µs) and slices the first kernels of a fresh daemon
/// that finely until the first yield is heard (on the H100, in the fairness experiment, each
/// round with a fresh daemon, the first job, 2 ms alone, took 2.4-2.7x that under `ffs`, where
/// the simulator, given the cost, runs it through once). Through the daemon a preemption cost
/// 246-445 µs there (docs/daemon.md), so the prior is the low end of that. FFS's first
/// decisions still depend on it (`daemon/examples/live_vs_sim.rs`: the same jobs on a model
/// GPU match the simulator when the prior is the true cost); `--preempt-us` sets it.
pub const PREEMPT_PRIOR_US: f64 = 250.0;

/// The daemon's own policy (not the simulator's; `crate::reserve`).
pub const RESERVE: &str = "reserve";

/// The policies that work on live kernels: the whole-GPU ones that preempt, `spatial`,
/// which gives kernels shares of the SMs (physical SM ids: every process's kernels must be on
/// the GPU at once, under MPS, for shares to mean anything), and `reserve`.
pub fn policies() -> impl Iterator<Item = &'static str> {
    cupreempt_sched::policies::NAMES
        .iter()
        .copied()
        .filter(|n| !NEEDS_MORE.contains(n))
        .chain([RESERVE])
}

/// `reserve`'s stand-in for a simulator policy: it never acts (`Live` applies the reserve).
struct Hands;

impl Policy for Hands {
    fn name(&self) -> &'static str {
        RESERVE
    }
    fn on_event(&mut self, _: Event, _: &SystemView) -> Vec<Action> {
        Vec::new()
    }
}

pub struct Live {
    policy: Box<dyn Policy>,
    sys: SystemView,
    owner: Vec<(ConnId, u64)>,
    told: Vec<Told>,
    tasks: Vec<u64>,
    ids: HashMap<(ConnId, u64), usize>,
    timers: Vec<Option<f64>>,
    tick: Option<f64>,
    /// Durations learned from finished launches (per kernel name and features, FLEP's model);
    /// its prior is the daemon's default estimate.
    estimator: Estimator,
    /// Since when each kernel has been running on the GPU (told to run), and for how long it
    /// ran before: its measured duration once it finishes.
    running_since: Vec<Option<f64>>,
    ran: Vec<f64>,
    /// The SMs a kernel that shares its GPU (`RunOn`) holds.
    held: Vec<Vec<u32>>,
    /// The SMs a kernel is giving up (`Resize` to fewer), until it has yielded them.
    shrinking: Vec<Option<Vec<u32>>>,
    /// `preempt` commands sent whose `yielded` has not come yet (one answers each): only the
    /// answer to the last one tells the kernel's state.
    unanswered: Vec<u32>,
    /// When the oldest unanswered `preempt` was sent.
    asked: Vec<Option<f64>>,
    /// Measured `preempt` -> `yielded` (µs) per kernel name, a moving average: the kernel's
    /// preemption cost for the policies (FFS sizes its epoch from it; without it, 100 µs
    /// slices of kernels that take 350 µs to yield halved two programs' throughput on the
    /// H100).
    switch_us: HashMap<String, f64>,
    /// The cost assumed before any is measured (`PREEMPT_PRIOR_US` unless set).
    preempt_prior_us: f64,
    /// `reserve`: its connections and orders, and the SMs each kernel keeps off.
    reserve: Option<Reserve>,
    confined: Vec<Option<Vec<u32>>>,
}

impl Live {
    /// `policy`: one of `policies()`.
    pub fn new(
        policy: &str,
        gpus: usize,
        sms: u32,
        quantum_us: f64,
        default_estimate_us: f64,
    ) -> Result<Live, String> {
        if !policies().any(|p| p == policy) {
            return Err(format!(
                "policy `{policy}` is not one the daemon runs; it runs {}",
                policies().collect::<Vec<_>>().join(", ")
            ));
        }
        let reserve = (policy == RESERVE).then(|| Reserve::new(last_sms(sms, DEFAULT_RESERVE_SMS)));
        let policy: Box<dyn Policy> = if policy == RESERVE {
            Box::new(Hands)
        } else {
            cupreempt_sched::policies::by_name(policy, quantum_us)
                .ok_or_else(|| format!("policy `{policy}` is unknown"))?
        };
        Ok(Live {
            policy,
            sys: SystemView {
                now: 0.0,
                gpus: vec![None; gpus.max(1)],
                sms,
                used_sms: vec![0; gpus.max(1)],
                kernels: Vec::new(),
                active: Vec::new(),
                placed: Vec::new(),
            },
            owner: Vec::new(),
            told: Vec::new(),
            tasks: Vec::new(),
            ids: HashMap::new(),
            timers: vec![None; gpus.max(1)],
            tick: None,
            estimator: Estimator::new(0.1, default_estimate_us),
            running_since: Vec::new(),
            ran: Vec::new(),
            held: Vec::new(),
            shrinking: Vec::new(),
            unanswered: Vec::new(),
            asked: Vec::new(),
            switch_us: HashMap::new(),
            preempt_prior_us: PREEMPT_PRIOR_US,
            reserve,
            confined: Vec::new(),
        })
    }

    /// The preemption cost the policies assume until the daemon has measured one (µs, at
    /// least 0; `PREEMPT_PRIOR_US` unless set).
    pub fn with_preempt_prior(mut self, us: f64) -> Result<Live, String> {
        if !(us.is_finite() && us >= 0.0) {
            return Err(format!(
                "--preempt-us {us}: must be a number of µs, at least 0"
            ));
        }
        self.preempt_prior_us = us;
        Ok(self)
    }

    /// `reserve`: how many SMs (the last ones) are held back (`DEFAULT_RESERVE_SMS` unless
    /// set; at least 1, fewer than the GPU has). Other policies ignore it.
    pub fn with_reserve(mut self, sms: u32) -> Result<Live, String> {
        if sms == 0 || sms >= self.sys.sms {
            return Err(format!(
                "--reserve-sms {sms}: must be between 1 and {}",
                self.sys.sms - 1
            ));
        }
        if let Some(r) = &mut self.reserve {
            r.set_sms(last_sms(self.sys.sms, sms));
        }
        Ok(self)
    }

    /// `reserve`: the standing orders that changed (`Reserve::orders`), then each kernel
    /// running that a program of higher priority outranks is sent off the reserve, and each
    /// kept off that no longer is gets it back. A kernel launched before its program's order
    /// reached it started on every SM and is sent off as the daemon hears of it.
    fn apply_reserve(&mut self, out: &mut Vec<Command>) {
        let Some(r) = &mut self.reserve else {
            return;
        };
        out.extend(r.orders());
        let reserved = r.sms().to_vec();
        for k in self.sys.active.clone() {
            let (conn, _) = self.owner[k];
            let keep_off = self
                .reserve
                .as_ref()
                .is_some_and(|r| r.outranked(conn, self.sys.kernels[k].spec.priority));
            if keep_off && self.confined[k].is_none() && self.told[k] == Told::Run {
                self.confined[k] = Some(reserved.clone());
                out.push(self.preempt_command(k, Some(reserved.clone())));
            } else if !keep_off {
                if let Some(sms) = self.confined[k].take() {
                    out.push(self.command(k, |id| ServerMsg::Resume {
                        id,
                        sms: Some(sms.clone()),
                    }));
                }
            }
        }
    }

    fn kernel(&self, conn: ConnId, id: u64) -> Result<usize, String> {
        self.ids
            .get(&(conn, id))
            .copied()
            .filter(|&k| self.told[k] != Told::Done)
            .ok_or_else(|| format!("no kernel {id} of this connection is running"))
    }

    pub fn launch(
        &mut self,
        now: f64,
        conn: ConnId,
        id: u64,
        l: &LaunchInfo,
    ) -> Result<Vec<Command>, String> {
        self.age(now);
        if self.kernel(conn, id).is_ok() {
            return Err(format!("kernel {id} of this connection is already running"));
        }
        if !(l.weight.is_finite() && l.weight > 0.0) {
            return Err(format!("weight {} is not a positive number", l.weight));
        }
        if let Some(sm) = l.kept_off.iter().find(|&&sm| sm >= self.sys.sms) {
            return Err(format!(
                "kept_off names SM {sm}; the GPU has {} (0-{})",
                self.sys.sms,
                self.sys.sms - 1
            ));
        }
        let k = self.sys.kernels.len();
        let mut spec = KernelSpec::new(now, 0.0)
            .priority(l.priority)
            .weight(l.weight);
        spec.name = l.kernel.to_string();
        spec.preempt_latency = self.switch_estimate(l.kernel);
        // A launch of fewer tasks than SMs cannot use more SMs than it has tasks (a task is one
        // of its original blocks): what a share of the SMs is worth to it (`spatial`).
        if l.tasks < self.sys.sms as u64 {
            spec.max_sms = l.tasks.max(1) as u32;
        }
        spec.features = l
            .features
            .filter(|f| f.iter().all(|x| x.is_finite() && *x >= 0.0));
        spec.work = l
            .estimate_us
            .filter(|e| e.is_finite() && *e > 0.0)
            .unwrap_or_else(|| self.estimator.estimate(&spec));
        let mut view = KernelView::new(k, spec);
        view.status = Status::Ready;
        self.sys.kernels.push(view);
        self.sys.active.push(k);
        self.owner.push((conn, id));
        self.told.push(Told::Run);
        self.running_since.push(Some(now));
        self.ran.push(0.0);
        self.held.push(Vec::new());
        self.shrinking.push(None);
        self.unanswered.push(0);
        self.asked.push(None);
        self.tasks.push(l.tasks.max(1));
        // Started under a standing order: off those SMs already, with no `yielded` to come.
        self.confined
            .push((!l.kept_off.is_empty()).then(|| l.kept_off.to_vec()));
        self.ids.insert((conn, id), k);
        if let Some(r) = &mut self.reserve {
            r.launched(conn, l.priority);
        }
        Ok(self.event(now, Event::Arrived(k)))
    }

    pub fn progress(&mut self, conn: ConnId, id: u64, done: u64) -> Result<(), String> {
        let k = self.kernel(conn, id)?;
        let left = 1.0 - (done.min(self.tasks[k]) as f64 / self.tasks[k] as f64);
        let kv = &mut self.sys.kernels[k];
        kv.remaining = kv.spec.work * left;
        Ok(())
    }

    pub fn yielded(&mut self, now: f64, conn: ConnId, id: u64) -> Result<Vec<Command>, String> {
        let k = self.kernel(conn, id)?;
        self.age(now);
        self.unanswered[k] = self.unanswered[k].saturating_sub(1);
        if self.unanswered[k] > 0 {
            return Ok(Vec::new()); // a later command's answer tells
        }
        // Learned only from kernels that held SMs: one preempted on arrival yields at once.
        let took = self.asked[k].take().map(|asked| now - asked);
        if self.told[k] == Told::Run {
            // A spatial preemption: the SMs it gave up are free now.
            let Some(gone) = self.shrinking[k].take() else {
                return Ok(Vec::new()); // resumed meanwhile, or the SMs it never held
            };
            self.held[k].retain(|s| !gone.contains(s));
            if let Some(us) = took {
                self.learn_switch(k, us);
            }
            let kv = &mut self.sys.kernels[k];
            if let Some(g) = kv.gpu {
                let n = gone.len() as u32;
                kv.sms -= n.min(kv.sms);
                self.sys.used_sms[g] -= n.min(self.sys.used_sms[g]);
            }
            self.sys.kernels[k].shrinks += 1;
            return Ok(self.event(now, Event::Shrunk(k)));
        }
        if self.told[k] != Told::Yield {
            return Ok(Vec::new()); // resumed meanwhile: this report is stale
        }
        self.told[k] = Told::Parked;
        self.stop_clock(now, k);
        if self.sys.kernels[k].status != Status::Yielding {
            return Ok(Vec::new()); // preempted on arrival: it never held a GPU in the model
        }
        if let Some(us) = took {
            self.learn_switch(k, us);
        }
        self.leave_gpu(k);
        let kv = &mut self.sys.kernels[k];
        kv.status = Status::Ready;
        kv.ready_since = now;
        kv.preemptions += 1;
        Ok(self.event(now, Event::Preempted(k)))
    }

    pub fn finished(&mut self, now: f64, conn: ConnId, id: u64) -> Result<Vec<Command>, String> {
        let k = self.kernel(conn, id)?;
        self.age(now);
        self.stop_clock(now, k);
        if self.ran[k] > 0.0 {
            // The launch's measured duration teaches the model for the next ones.
            let mut spec = self.sys.kernels[k].spec.clone();
            spec.work = self.ran[k];
            self.estimator.completed(&spec);
        }
        Ok(self.finish(now, k))
    }

    /// What the daemon now believes a launch of `kernel` with `features` takes (µs).
    pub fn estimate(&mut self, kernel: &str, features: Option<[f64; 4]>) -> f64 {
        let mut spec = KernelSpec::new(0.0, 0.0);
        spec.name = kernel.to_string();
        spec.features = features;
        self.estimator.estimate(&spec)
    }

    fn stop_clock(&mut self, now: f64, k: usize) {
        if let Some(since) = self.running_since[k].take() {
            self.ran[k] += (now - since).max(0.0);
        }
    }

    /// The connection is gone (the program ended or died): its kernels are done, and whatever
    /// they held goes to others.
    pub fn gone(&mut self, now: f64, conn: ConnId) -> Vec<Command> {
        self.age(now);
        let mine: Vec<usize> = self
            .ids
            .iter()
            .filter(|((c, _), &k)| *c == conn && self.told[k] != Told::Done)
            .map(|(_, &k)| k)
            .collect();
        self.ids.retain(|(c, _), _| *c != conn);
        if let Some(r) = &mut self.reserve {
            r.gone(conn);
        }
        let mut out = Vec::new();
        for k in mine {
            out.extend(self.finish(now, k));
        }
        self.apply_reserve(&mut out);
        out.retain(|c| c.conn != conn);
        out
    }

    /// When the next timer of the policy goes off.
    pub fn next_deadline(&self) -> Option<f64> {
        self.timers
            .iter()
            .flatten()
            .chain(self.tick.iter())
            .copied()
            .reduce(f64::min)
    }

    /// Fires the timers due at `now`.
    pub fn expire(&mut self, now: f64) -> Vec<Command> {
        self.age(now);
        let mut out = Vec::new();
        for g in 0..self.timers.len() {
            if self.timers[g].is_some_and(|t| t <= now) {
                self.timers[g] = None;
                out.extend(self.event(now, Event::QuantumExpired(g)));
            }
        }
        if self.tick.is_some_and(|t| t <= now) {
            self.tick = None;
            out.extend(self.event(now, Event::Tick));
        }
        out
    }

    /// Kernels the daemon knows, not finished.
    pub fn active(&self) -> usize {
        self.sys.active.len()
    }

    fn finish(&mut self, now: f64, k: usize) -> Vec<Command> {
        self.leave_gpu(k);
        self.told[k] = Told::Done;
        let kv = &mut self.sys.kernels[k];
        kv.status = Status::Done;
        kv.remaining = 0.0;
        self.sys.active.retain(|&a| a != k);
        self.event(now, Event::Finished(k))
    }

    fn leave_gpu(&mut self, k: usize) {
        self.held[k].clear();
        self.shrinking[k] = None;
        self.sys.vacate(k);
    }

    /// `resume` (on `sms`, or every SM) for a kernel told to yield, which runs from now.
    fn resume_command(&mut self, now: f64, k: usize, sms: Option<Vec<u32>>) -> Option<Command> {
        if !matches!(self.told[k], Told::Yield | Told::Parked) {
            return None;
        }
        if self.told[k] == Told::Parked {
            self.running_since[k] = Some(now);
        }
        self.told[k] = Told::Run;
        Some(self.command(k, |id| ServerMsg::Resume {
            id,
            sms: sms.clone(),
        }))
    }

    /// The SMs of `gpu` that no kernel holds (lowest first): none while one holds it whole.
    fn free_sm_ids(&self, gpu: usize) -> Vec<u32> {
        if self.sys.gpus[gpu].is_some() {
            return Vec::new();
        }
        let taken: std::collections::BTreeSet<u32> = self
            .sys
            .active
            .iter()
            .filter(|&&k| self.sys.kernels[k].gpu == Some(gpu))
            .flat_map(|&k| self.held[k].iter().copied())
            .collect();
        (0..self.sys.sms).filter(|s| !taken.contains(s)).collect()
    }

    /// What a preemption of `kernel` costs (µs): measured for that kernel, else the mean of
    /// the others measured, else nothing known (0).
    /// A kernel's preemption cost as the policies see it: what its name has measured, else the
    /// mean of the names measured, else the prior (`with_preempt_prior`).
    fn switch_estimate(&self, kernel: &str) -> f64 {
        if let Some(&us) = self.switch_us.get(kernel) {
            return us;
        }
        let n = self.switch_us.len();
        if n == 0 {
            self.preempt_prior_us
        } else {
            self.switch_us.values().sum::<f64>() / n as f64
        }
    }

    /// A measured `preempt` -> `yielded` of kernel `k`: the cost of every live kernel of that
    /// name from now on.
    fn learn_switch(&mut self, k: usize, us: f64) {
        if !(us.is_finite() && us >= 0.0) {
            return;
        }
        let name = self.sys.kernels[k].spec.name.clone();
        let avg = match self.switch_us.get(&name) {
            Some(&old) => 0.75 * old + 0.25 * us,
            None => us,
        };
        self.switch_us.insert(name.clone(), avg);
        for &a in &self.sys.active {
            if self.sys.kernels[a].spec.name == name {
                self.sys.kernels[a].spec.preempt_latency = avg;
            }
        }
    }

    /// Sends `preempt` (on `sms`, or every SM) and counts it until its `yielded`.
    fn preempt_command(&mut self, k: usize, sms: Option<Vec<u32>>) -> Command {
        self.unanswered[k] += 1;
        if self.asked[k].is_none() {
            self.asked[k] = Some(self.sys.now);
        }
        let (conn, id) = self.owner[k];
        Command {
            conn,
            msg: ServerMsg::Preempt { id, sms },
        }
    }

    /// Brings the clock to `now` before anything changes: the time ready kernels have waited
    /// since the last change, for a policy that reads it (SJF with aging), as the simulator
    /// keeps it.
    fn age(&mut self, now: f64) {
        if self.policy.reads_waited() && now > self.sys.now {
            let dt = now - self.sys.now;
            for &k in &self.sys.active {
                if self.sys.kernels[k].status == Status::Ready {
                    self.sys.kernels[k].waited += dt;
                }
            }
        }
        self.sys.now = self.sys.now.max(now);
    }

    /// After the public entry that called it has aged the kernels to `now` (`age`).
    fn event(&mut self, now: f64, event: Event) -> Vec<Command> {
        self.sys.now = now;
        let actions = self.policy.on_event(event, &self.sys);
        let mut out = Vec::new();
        for a in actions {
            self.apply(now, a, &mut out);
        }
        if self.reserve.is_some() {
            // Kernels run where the GPU puts them; only the reserve is the daemon's.
            self.apply_reserve(&mut out);
            return out;
        }
        // A kernel on the GPU that the policy does not run must leave it; but while a
        // preemption is on its way, the kernels on the GPU may be the ones it makes room for
        // (the policy runs them once it has landed), so they wait for that event.
        if self
            .sys
            .active
            .iter()
            .any(|&k| self.sys.kernels[k].status == Status::Yielding)
        {
            return out;
        }
        let leave: Vec<usize> = self
            .sys
            .active
            .iter()
            .copied()
            .filter(|&k| self.sys.kernels[k].status == Status::Ready && self.told[k] == Told::Run)
            .collect();
        for k in leave {
            self.told[k] = Told::Yield;
            out.push(self.preempt_command(k, None));
        }
        out
    }

    fn command(&self, k: usize, msg: impl Fn(u64) -> ServerMsg) -> Command {
        let (conn, id) = self.owner[k];
        Command { conn, msg: msg(id) }
    }

    fn apply(&mut self, now: f64, action: Action, out: &mut Vec<Command>) {
        match action {
            Action::Run { kernel: k, gpu } => {
                if self.sys.place(k, gpu, self.sys.sms, true).is_err() {
                    return; // not what the policy believes: ignore rather than double-book
                }
                out.extend(self.resume_command(now, k, None));
            }
            Action::Preempt { kernel: k } => {
                if self.sys.kernels[k].status == Status::Running {
                    self.sys.kernels[k].status = Status::Yielding;
                    // A spatial preemption under way is overtaken: it leaves every SM.
                    self.shrinking[k] = None;
                    if self.told[k] == Told::Run {
                        self.told[k] = Told::Yield;
                        let c = self.preempt_command(k, None);
                        out.push(c);
                    }
                }
            }
            Action::RunOn {
                kernel: k,
                gpu,
                sms,
            } => {
                let free = if gpu < self.sys.gpus.len() {
                    self.free_sm_ids(gpu)
                } else {
                    Vec::new()
                };
                if free.len() < sms as usize || self.sys.place(k, gpu, sms, false).is_err() {
                    return; // not what the policy believes: ignore rather than double-book
                }
                let mine: Vec<u32> = free[..sms as usize].to_vec();
                self.held[k] = mine.clone();
                match self.told[k] {
                    // On the GPU everywhere since its launch: it leaves the SMs of the others.
                    Told::Run => {
                        let others: Vec<u32> =
                            (0..self.sys.sms).filter(|s| !mine.contains(s)).collect();
                        if !others.is_empty() {
                            let c = self.preempt_command(k, Some(others));
                            out.push(c);
                        }
                    }
                    Told::Yield | Told::Parked => {
                        out.extend(self.resume_command(now, k, Some(mine)))
                    }
                    Told::Done => {}
                }
            }
            Action::Resize { kernel: k, sms } => {
                let kv = &self.sys.kernels[k];
                let Some(g) = kv.gpu else { return };
                if kv.status != Status::Running
                    || self.sys.gpus[g] == Some(k)
                    || self.shrinking[k].is_some()
                    || sms == 0
                    || self.told[k] != Told::Run
                {
                    return; // not a share the daemon can change now
                }
                let have = kv.sms;
                if sms > have {
                    let add: Vec<u32> = self
                        .free_sm_ids(g)
                        .into_iter()
                        .take((sms - have) as usize)
                        .collect();
                    if add.len() < (sms - have) as usize {
                        return;
                    }
                    self.held[k].extend(&add);
                    self.sys.kernels[k].sms = sms;
                    self.sys.used_sms[g] += sms - have;
                    out.push(self.command(k, |id| ServerMsg::Resume {
                        id,
                        sms: Some(add.clone()),
                    }));
                } else if sms < have {
                    // Its last SMs go; they are free once it has yielded them (`yielded`).
                    let keep = sms as usize;
                    let give: Vec<u32> = self.held[k].iter().skip(keep).copied().collect();
                    self.shrinking[k] = Some(give.clone());
                    let c = self.preempt_command(k, Some(give));
                    out.push(c);
                }
            }
            Action::SetTimer { gpu, at } => {
                if let Some(t) = self.timers.get_mut(gpu) {
                    *t = Some(at);
                }
            }
            Action::SetTick { at } => self.tick = Some(at),
            // Only policies outside `policies()` ask for this.
            Action::Revoke { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preempt(conn: ConnId, id: u64) -> Command {
        preempt_on(conn, id, None)
    }
    fn preempt_on(conn: ConnId, id: u64, sms: Option<Vec<u32>>) -> Command {
        Command {
            conn,
            msg: ServerMsg::Preempt { id, sms },
        }
    }
    fn info(kernel: &str, tasks: u64, priority: u8, weight: f64) -> LaunchInfo<'_> {
        LaunchInfo {
            kernel,
            tasks,
            priority,
            weight,
            estimate_us: None,
            features: None,
            kept_off: &[],
        }
    }
    fn resume(conn: ConnId, id: u64) -> Command {
        resume_on(conn, id, None)
    }
    fn resume_on(conn: ConnId, id: u64, sms: Option<Vec<u32>>) -> Command {
        Command {
            conn,
            msg: ServerMsg::Resume { id, sms },
        }
    }

    type SmSets = HashMap<(ConnId, u64), std::collections::BTreeSet<u32>>;

    /// The SMs `sms` names (`None`: every SM).
    fn named(sms: &Option<Vec<u32>>, total: u32) -> std::collections::BTreeSet<u32> {
        match sms {
            Some(v) => v.iter().copied().collect(),
            None => (0..total).collect(),
        }
    }

    /// No SM runs two kernels.
    fn assert_disjoint(on: &SmSets) {
        let sets: Vec<_> = on.iter().collect();
        for (x, (ka, a)) in sets.iter().enumerate() {
            for (kb, b) in &sets[x + 1..] {
                let both: Vec<_> = a.intersection(b).collect();
                assert!(both.is_empty(), "{ka:?} and {kb:?} both on SMs {both:?}");
            }
        }
    }

    /// `spatial`: kernels of three programs share the SMs. Played as the runtime would: a
    /// resumption takes effect at once, a preemption only when the kernel has yielded (the
    /// daemon hears `yielded` then). At every moment no SM runs two kernels: a share is given
    /// only after the SMs it takes were left. Once two have finished, the third grows.
    #[test]
    fn spatial_shares_are_disjoint_sets_of_sms() {
        let total = 132;
        let all: std::collections::BTreeSet<u32> = (0..total).collect();
        let mut l = Live::new("spatial", 1, total, 1000.0, 1000.0).unwrap();
        let mut on: SmSets = HashMap::new();
        // Commands not yet in effect, in order: a program applies its commands one after the
        // other, and a preemption is in effect once the kernel has yielded.
        let mut pending: Vec<(ConnId, ServerMsg)> = Vec::new();
        let take = |cmds: Vec<Command>, on: &mut SmSets, pending: &mut Vec<_>| {
            for c in cmds {
                let waits = pending.iter().any(|(conn, _)| *conn == c.conn);
                match c.msg {
                    ServerMsg::Resume { id, sms } if !waits => on
                        .entry((c.conn, id))
                        .or_default()
                        .extend(named(&sms, total)),
                    ServerMsg::Error { message } => panic!("error sent: {message}"),
                    msg => pending.push((c.conn, msg)),
                }
            }
        };
        let mut t = 0.0;
        // Tasks: 40 and 40 (each can use only that many SMs, so shares leave SMs free), then
        // 100, which needs SMs that the others must give up first.
        for (conn, tasks) in [(1u64, 40u64), (2, 40), (3, 100)] {
            t += 10.0;
            // A launch is on every SM before the daemon hears of it; until then the GPU
            // shares them as it likes, so the check starts once its commands are in.
            let cmds = l.launch(t, conn, 1, &info("k", tasks, 0, 1.0)).unwrap();
            on.insert((conn, 1), all.clone());
            take(cmds, &mut on, &mut pending);
            // The preemptions land one by one, the oldest first.
            while !pending.is_empty() {
                let (c, msg) = pending.remove(0);
                let (id, sms) = match msg {
                    ServerMsg::Resume { id, sms } => {
                        on.entry((c, id)).or_default().extend(named(&sms, total));
                        continue;
                    }
                    ServerMsg::Preempt { id, sms } => (id, sms),
                    ServerMsg::Error { .. }
                    | ServerMsg::KeepOff { .. }
                    | ServerMsg::Lean { .. }
                    | ServerMsg::Placed { .. } => {
                        unreachable!()
                    }
                };
                if let Some(s) = on.get_mut(&(c, id)) {
                    let gone = named(&sms, total);
                    s.retain(|x| !gone.contains(x));
                }
                t += 1.0;
                let cmds = l.yielded(t, c, id).unwrap();
                take(cmds, &mut on, &mut pending);
                if pending.is_empty() {
                    assert_disjoint(&on);
                }
            }
            assert_disjoint(&on);
        }
        assert!(
            on.values().all(|s| !s.is_empty()),
            "every kernel runs: {on:?}"
        );
        // Two finish: the third grows onto the SMs they leave.
        for conn in [1, 2] {
            t += 100.0;
            on.remove(&(conn, 1));
            let cmds = l.finished(t, conn, 1).unwrap();
            take(cmds, &mut on, &mut pending);
            assert!(
                pending.is_empty(),
                "a finished kernel's SMs need no preemption"
            );
            assert_disjoint(&on);
        }
        // Its 100 tasks can use 100 SMs; shares come in steps of 8.
        assert!(on[&(3, 1)].len() >= 96, "{on:?}");
    }

    /// `reserve`: the batch program's kernels keep off the last SMs while a program of higher
    /// priority is connected: the program gets a standing order for its launches, and a
    /// kernel that started on every SM is sent off as the daemon hears of it; the urgent
    /// program's kernels are never touched, and the program that no other outranks is told
    /// so (`lean`); when the urgent program leaves, the order ends, the SMs are given back and
    /// the batch program is lean again.
    #[test]
    fn reserve_holds_the_last_sms_back_while_a_higher_priority_program_is_connected() {
        let mut l = Live::new(RESERVE, 1, 132, 1000.0, 1000.0)
            .unwrap()
            .with_reserve(4)
            .unwrap();
        let last4 = vec![128, 129, 130, 131];
        let off = |conn, id| preempt_on(conn, id, Some(last4.clone()));
        let back = |conn, id| resume_on(conn, id, Some(last4.clone()));
        let order = |conn, sms: &[u32]| Command {
            conn,
            msg: ServerMsg::KeepOff { sms: sms.to_vec() },
        };
        let lean = |conn, on| Command {
            conn,
            msg: ServerMsg::Lean { on },
        };
        // Alone, the batch kernel runs everywhere, and nothing will steer the batch program.
        assert_eq!(
            l.launch(0.0, 1, 10, &info("batch", 100, 0, 1.0)).unwrap(),
            [lean(1, true)]
        );
        // The urgent program's launch sends the batch kernel off the reserve, not itself, and
        // orders the batch program's next launches to start off it (and announced); the urgent
        // program is left alone.
        assert_eq!(
            l.launch(5.0, 2, 20, &info("urgent", 10, 9, 1.0)).unwrap(),
            [lean(1, false), lean(2, true), order(1, &last4), off(1, 10)]
        );
        assert_eq!(l.yielded(9.0, 1, 10).unwrap(), []);
        assert_eq!(l.finished(50.0, 2, 20).unwrap(), []);
        // The urgent program is still connected: the next batch kernel started off the reserve
        // (the order), so nothing is sent; one made before the order reached the program is
        // sent off as the daemon hears of it.
        assert_eq!(l.finished(60.0, 1, 10).unwrap(), []);
        let kept = LaunchInfo {
            kept_off: &last4,
            ..info("batch", 100, 0, 1.0)
        };
        assert_eq!(l.launch(70.0, 1, 11, &kept).unwrap(), []);
        assert_eq!(
            l.launch(71.0, 1, 12, &info("batch", 100, 0, 1.0)).unwrap(),
            [off(1, 12)]
        );
        // Kernels of the same priority share the SMs as the GPU likes.
        assert_eq!(
            l.launch(75.0, 3, 30, &info("urgent", 10, 9, 1.0)).unwrap(),
            [lean(3, true)]
        );
        assert_eq!(l.gone(76.0, 3), []);
        // The urgent program leaves: the order ends and the SMs go back to the batch kernels.
        assert_eq!(
            l.gone(80.0, 2),
            [lean(1, true), order(1, &[]), back(1, 11), back(1, 12)]
        );
        assert_eq!(l.finished(900.0, 1, 11).unwrap(), []);
        assert_eq!(l.finished(901.0, 1, 12).unwrap(), []);
        assert_eq!(l.active(), 0);
        // A launch kept off SMs the GPU does not have is an error, and nothing is recorded.
        let bad = LaunchInfo {
            kept_off: &[131, 132],
            ..info("batch", 100, 0, 1.0)
        };
        let e = l.launch(950.0, 1, 12, &bad).unwrap_err();
        assert!(e.contains("SM 132") && e.contains("0-131"), "{e}");
        assert_eq!(l.active(), 0);
        // The reserve is at least one SM and leaves the rest.
        let l = || Live::new(RESERVE, 1, 132, 1000.0, 1000.0).unwrap();
        assert!(l().with_reserve(0).is_err());
        assert!(l().with_reserve(132).is_err());
    }

    #[test]
    fn a_higher_priority_launch_preempts_and_the_lower_one_resumes_after_it() {
        let mut l = Live::new("hpf", 1, 132, 1000.0, 1000.0).unwrap();
        assert_eq!(
            l.launch(0.0, 1, 10, &info("batch", 100, 0, 1.0)).unwrap(),
            []
        );
        // The urgent one arrives: the batch kernel is told to yield.
        assert_eq!(
            l.launch(5.0, 2, 20, &info("urgent", 10, 9, 1.0)).unwrap(),
            [preempt(1, 10)]
        );
        // Until it has, the urgent kernel is not yet the policy's; then it runs (it is on the
        // GPU already, so nothing is sent).
        assert_eq!(l.yielded(9.0, 1, 10).unwrap(), []);
        assert_eq!(l.finished(50.0, 2, 20).unwrap(), [resume(1, 10)]);
        assert_eq!(l.finished(900.0, 1, 10).unwrap(), []);
        assert_eq!(l.active(), 0);
    }

    #[test]
    fn a_launch_that_must_wait_is_preempted_at_once_and_a_dead_program_releases_the_gpu() {
        let mut l = Live::new("fifo", 1, 132, 1000.0, 1000.0).unwrap();
        assert_eq!(l.launch(0.0, 1, 1, &info("a", 100, 0, 1.0)).unwrap(), []);
        assert_eq!(
            l.launch(1.0, 2, 1, &info("b", 100, 0, 1.0)).unwrap(),
            [preempt(2, 1)]
        );
        assert_eq!(l.yielded(2.0, 2, 1).unwrap(), []);
        // Program 1 dies with its kernel on the GPU: program 2's kernel gets it.
        assert_eq!(l.gone(3.0, 1), [resume(2, 1)]);
        assert_eq!(l.active(), 1);
    }

    #[test]
    fn programs_name_only_their_own_kernels() {
        let mut l = Live::new("hpf", 1, 132, 1000.0, 1000.0).unwrap();
        l.launch(0.0, 1, 7, &info("a", 100, 0, 1.0)).unwrap();
        let e = l.finished(1.0, 2, 7).unwrap_err();
        assert!(e.contains("no kernel 7"), "{e}");
        assert!(l.yielded(1.0, 2, 7).is_err());
        assert!(l.progress(2, 7, 5).is_err());
        assert_eq!(l.active(), 1);
        assert!(l.launch(2.0, 1, 7, &info("again", 1, 0, 1.0)).is_err());
        assert!(l.launch(2.0, 1, 8, &info("w", 1, 0, -1.0)).is_err());
    }

    #[test]
    fn round_robin_preempts_when_the_quantum_expires() {
        let mut l = Live::new("rr", 1, 132, 100.0, 10_000.0).unwrap();
        l.launch(0.0, 1, 1, &info("a", 100, 0, 1.0)).unwrap();
        assert_eq!(
            l.launch(10.0, 2, 1, &info("b", 100, 0, 1.0)).unwrap(),
            [preempt(2, 1)]
        );
        l.yielded(12.0, 2, 1).unwrap();
        let at = l.next_deadline().expect("a quantum timer");
        assert_eq!(l.expire(at), [preempt(1, 1)]);
        assert_eq!(l.yielded(at + 5.0, 1, 1).unwrap(), [resume(2, 1)]);
    }

    /// SJF with aging reads how long each kernel has waited: the daemon keeps it as the
    /// simulator does, so that a long kernel that has waited long enough goes before a short
    /// newcomer.
    #[test]
    fn sjf_aging_sees_how_long_kernels_waited() {
        let mut l = Live::new("sjf-aging", 1, 132, 1000.0, 1000.0).unwrap();
        let with = |kernel, us| LaunchInfo {
            estimate_us: Some(us),
            ..info(kernel, 100, 0, 1.0)
        };
        l.launch(0.0, 1, 1, &with("running", 1_000.0)).unwrap();
        assert_eq!(
            l.launch(10.0, 2, 1, &with("long", 5_000.0)).unwrap(),
            [preempt(2, 1)]
        );
        l.yielded(20.0, 2, 1).unwrap(); // preempted on arrival: waits, ready
        l.launch(4_000.0, 3, 1, &with("short", 100.0)).unwrap();
        let long = l.ids[&(2, 1)];
        assert!(
            (l.sys.kernels[long].waited - 3_990.0).abs() < 1e-6,
            "waited {}",
            l.sys.kernels[long].waited
        );
    }

    /// FFS slices in proportion to what a preemption costs: with nothing measured, its least
    /// epoch (100 µs); once a kernel has taken 400 µs to yield, slices long enough that
    /// preemptions cost about 10% (epoch = 2 x 400 / (0.1 x 2) = 4,000 µs, 1 each).
    /// The cost assumed before any is measured is the daemon's to set (`--preempt-us`): with
    /// 0, FFS slices at its floor; a negative or infinite one is refused.
    #[test]
    fn the_assumed_preemption_cost_can_be_set() {
        let ffs = |prior| {
            Live::new("ffs", 1, 132, 1000.0, 100_000.0)
                .unwrap()
                .with_preempt_prior(prior)
        };
        let mut l = ffs(0.0).unwrap();
        l.launch(0.0, 1, 1, &info("a", 1000, 0, 1.0)).unwrap();
        l.launch(10.0, 2, 1, &info("a", 1000, 0, 1.0)).unwrap();
        assert!(l.next_deadline().expect("a slice") <= 200.0);
        assert!(ffs(-1.0).is_err() && ffs(f64::INFINITY).is_err());
    }

    #[test]
    fn ffs_slices_grow_with_the_measured_preemption_cost() {
        let mut l = Live::new("ffs", 1, 132, 1000.0, 100_000.0).unwrap();
        l.launch(0.0, 1, 1, &info("a", 1000, 0, 1.0)).unwrap();
        assert_eq!(
            l.launch(10.0, 2, 1, &info("a", 1000, 0, 1.0)).unwrap(),
            [preempt(2, 1)]
        );
        l.yielded(12.0, 2, 1).unwrap(); // preempted on arrival: teaches nothing
                                        // Nothing measured yet: the epoch comes from the prior, 2 x 250 / (10% x 2) = 2,500 µs
                                        // (not FFS's floor of 100 µs, which a cost of 0 would give).
        let first = l.next_deadline().expect("a slice");
        assert!((first - 2500.0).abs() < 1.0, "{first}");
        assert_eq!(l.expire(first), [preempt(1, 1)]);
        // Running kernel a took 400 µs to yield.
        assert_eq!(l.yielded(first + 400.0, 1, 1).unwrap(), [resume(2, 1)]);
        let now = first + 400.0;
        let next = l.next_deadline().expect("a slice");
        assert!(
            (next - now - 4000.0).abs() < 1.0,
            "slice {} us after the switch",
            next - now
        );
    }

    #[test]
    fn finished_launches_teach_the_duration_estimate() {
        let mut l = Live::new("hpf", 1, 132, 1000.0, 1000.0).unwrap();
        let f = Some([4096.0, 256.0, 0.0, 0.0]);
        assert_eq!(
            l.estimate("k", f),
            1000.0,
            "the prior before anything finished"
        );
        let with = |kernel| LaunchInfo {
            features: f,
            ..info(kernel, 4096, 0, 1.0)
        };
        l.launch(0.0, 1, 1, &with("k")).unwrap();
        // Parked from 110 to 150 µs for an urgent kernel: that time is not the kernel's.
        assert_eq!(
            l.launch(100.0, 2, 1, &info("urgent", 1, 9, 1.0)).unwrap(),
            [preempt(1, 1)]
        );
        l.yielded(110.0, 1, 1).unwrap();
        assert_eq!(l.finished(150.0, 2, 1).unwrap(), [resume(1, 1)]);
        l.finished(500.0, 1, 1).unwrap();
        assert_eq!(l.estimate("k", f), 460.0);
        // A launch that gives no estimate is believed to take what the model says.
        l.launch(600.0, 1, 2, &with("k")).unwrap();
        assert_eq!(l.sys.kernels[2].spec.work, 460.0);
    }

    #[test]
    fn policies_the_daemon_cannot_run_are_refused() {
        for p in ["priority", "elastic", "nosuch"] {
            assert!(Live::new(p, 1, 132, 1.0, 1.0).is_err(), "{p}");
        }
        for p in policies() {
            assert!(Live::new(p, 1, 132, 1.0, 1.0).is_ok(), "{p}");
        }
    }
}
