//! The daemon's policy code (`Live`) on a model GPU, with no GPU: jobs arrive, and `Live` is fed
//! what their programs would report. On the model GPU the kernel that got there first holds
//! every SM (a persistent kernel: the others wait for room, as under MPS); a `preempt` lands
//! after `preempt_us` (the kernel keeps running meanwhile, then `yielded`), a `resume` puts the
//! kernel back after `switch_us`, and each program reports its progress every `progress_us`.
//! Beside the simulator on the same jobs and costs (`simulated`), it tells the daemon's wiring
//! of a policy (what it knows when, which kernels are on the GPU at an arrival) from the GPU's
//! own costs (`daemon/examples/live_vs_sim.rs`, docs/daemon.md).

use crate::live::{Command, LaunchInfo, Live};
use crate::protocol::ServerMsg;
use cupreempt_sched::{policies, simulate_switching, KernelSpec};

/// Tasks per job (what progress is counted in).
const TASKS: u64 = 211_200;
/// The model's time step, µs.
const STEP_US: f64 = 5.0;

/// One job: when it arrives and how long it runs alone (µs).
#[derive(Debug, Clone, Copy)]
pub struct Job {
    pub arrival: f64,
    pub work: f64,
}

/// The fairness experiment's nine jobs (docs/daemon.md): 2-60 ms alone on the H100, 1 ms apart.
pub fn fairness_jobs() -> Vec<Job> {
    [
        2077.0, 3089.0, 5080.0, 8050.0, 12025.0, 18001.0, 27028.0, 40002.0, 60013.0,
    ]
    .iter()
    .enumerate()
    .map(|(i, &work)| Job {
        arrival: 1000.0 * i as f64,
        work,
    })
    .collect()
}

/// The model GPU's costs and the daemon's settings.
#[derive(Debug, Clone, Copy)]
pub struct Costs {
    pub preempt_us: f64,
    pub switch_us: f64,
    pub quantum_us: f64,
    pub progress_us: f64,
    /// The daemon's `--preempt-us`.
    pub prior_us: f64,
}

#[derive(Default, Clone)]
struct State {
    arrived: bool,
    on_gpu: bool,
    on_since: f64,
    lands_at: Option<f64>, // a preemption on its way: the kernel leaves the GPU then
    returns_at: Option<f64>, // a resume on its way: the kernel is back then
    done: f64,
    finished: Option<f64>,
    reported_at: f64,
}

/// Each job's finish time under `Live` running `policy` on the model GPU.
pub fn replayed(policy: &str, jobs: &[Job], c: Costs) -> Result<Vec<f64>, String> {
    let mut live =
        Live::new(policy, 1, 132, c.quantum_us, 1000.0)?.with_preempt_prior(c.prior_us)?;
    let mut st = vec![State::default(); jobs.len()];
    let horizon = jobs.iter().map(|j| j.arrival + j.work).sum::<f64>() * 100.0 + 1e6;
    let mut t = 0.0;
    let mut pending: Vec<Command> = Vec::new();
    let conn = |i: usize| i as u64 + 1;
    while st.iter().any(|s| s.finished.is_none()) {
        if t > horizon {
            return Err(format!("{policy}: jobs still running at {t} µs"));
        }
        // Arrivals: the launch is on the GPU as the daemon hears of it.
        for (i, s) in st.iter_mut().enumerate() {
            if !s.arrived && t >= jobs[i].arrival {
                s.arrived = true;
                s.on_gpu = true;
                s.on_since = t;
                s.reported_at = t;
                let info = LaunchInfo {
                    kernel: "job",
                    tasks: TASKS,
                    priority: 0,
                    weight: 1.0,
                    estimate_us: Some(jobs[i].work),
                    features: None,
                    kept_off: &[],
                };
                pending.extend(live.launch(t, conn(i), 1, &info)?);
            }
        }
        // Commands reach their kernels.
        for cmd in pending.drain(..) {
            let s = &mut st[cmd.conn as usize - 1];
            match cmd.msg {
                ServerMsg::Preempt { .. } => s.lands_at = Some(t + c.preempt_us),
                ServerMsg::Resume { .. } => s.returns_at = Some(t + c.switch_us),
                _ => {}
            }
        }
        // Preemptions land, resumes arrive.
        let mut out = Vec::new();
        for (i, s) in st.iter_mut().enumerate() {
            if s.lands_at.is_some_and(|at| t >= at) {
                s.lands_at = None;
                s.on_gpu = false;
                if s.finished.is_none() {
                    out.extend(live.yielded(t, conn(i), 1)?);
                }
            }
            if s.returns_at.is_some_and(|at| t >= at) && s.lands_at.is_none() {
                s.returns_at = None;
                if s.finished.is_none() && !s.on_gpu {
                    s.on_gpu = true;
                    s.on_since = t;
                }
            }
        }
        // The GPU: the kernel that got there first holds it.
        let first = st
            .iter()
            .enumerate()
            .filter(|(_, s)| s.on_gpu)
            .min_by(|a, b| a.1.on_since.total_cmp(&b.1.on_since))
            .map(|(i, _)| i);
        if let Some(i) = first {
            let s = &mut st[i];
            s.done += STEP_US;
            if s.done >= jobs[i].work {
                s.on_gpu = false;
                s.finished = Some(t + STEP_US);
                out.extend(live.finished(t + STEP_US, conn(i), 1)?);
            } else if t - s.reported_at >= c.progress_us {
                s.reported_at = t;
                live.progress(conn(i), 1, (s.done / jobs[i].work * TASKS as f64) as u64)?;
            }
        }
        t += STEP_US;
        if live.next_deadline().is_some_and(|d| d <= t) {
            out.extend(live.expire(t));
        }
        pending.extend(out);
    }
    Ok(st.iter().map(|s| s.finished.unwrap_or(f64::NAN)).collect())
}

/// Each job's finish time in the simulator, with the same preemption cost and switch.
pub fn simulated(policy: &str, jobs: &[Job], c: Costs) -> Result<Vec<f64>, String> {
    let specs: Vec<KernelSpec> = jobs
        .iter()
        .map(|j| {
            let mut s = KernelSpec::new(j.arrival, j.work);
            s.preempt_latency = c.preempt_us;
            s
        })
        .collect();
    let mut p = policies::by_name(policy, c.quantum_us).ok_or("unknown policy")?;
    let o = simulate_switching(&specs, 1, 132, p.as_mut(), None, c.switch_us)
        .map_err(|e| format!("{e:?}"))?;
    Ok(o.finish)
}

/// NTT of each job: (finish - arrival) / work.
pub fn ntts(jobs: &[Job], finish: &[f64]) -> Vec<f64> {
    jobs.iter()
        .zip(finish)
        .map(|(j, f)| (f - j.arrival) / j.work)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn antt(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    /// The daemon applies a policy as the simulator does: with the GPU's costs known to both,
    /// the same jobs end the same (ANTT within 2%) for run-to-completion and time-sliced
    /// policies alike. A daemon that wired a policy differently (what it tells kernels, when
    /// it hears of them) would part from the simulator here, with no GPU involved.
    #[test]
    fn live_applies_policies_as_the_simulator_does() {
        let jobs = fairness_jobs();
        let costs = Costs {
            preempt_us: 330.0,
            switch_us: 170.0,
            quantum_us: 2000.0,
            progress_us: 5000.0,
            prior_us: 330.0,
        };
        for policy in ["fifo", "hpf", "sjf", "srt", "frs", "rr", "ffs", "cfs"] {
            let live = antt(&ntts(&jobs, &replayed(policy, &jobs, costs).unwrap()));
            let sim = antt(&ntts(&jobs, &simulated(policy, &jobs, costs).unwrap()));
            assert!(
                (live - sim).abs() / sim < 0.02,
                "{policy}: ANTT {live:.3} under the daemon, {sim:.3} in the simulator"
            );
        }
    }
}
