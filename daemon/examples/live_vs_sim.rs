//! Probe: the daemon's policy code (`Live`) against the simulator on the same jobs, with no GPU.
//! `Live` is fed what programs would report from a model GPU on which the kernel that got there
//! first holds every SM (a persistent kernel: the others wait for room, as under MPS); a
//! `preempt` takes PREEMPT_US to land (the kernel keeps running meanwhile, then `yielded`), a
//! `resume` puts the kernel back after SWITCH_US. The simulator runs the
//! same policy with the same two costs. Where the two differ kernel by kernel, the daemon's
//! wiring of the policy (what it knows when, which kernels share the GPU at an arrival) is the
//! reason, not the GPU; where they agree and the H100 does not, the GPU is.
//!
//! Usage: cargo run --release -p cupreempt-daemon --example live_vs_sim -- POLICY
//!        [PREEMPT_US [SWITCH_US [QUANTUM_US [PROGRESS_US [PRIOR_US]]]]]
//!   (defaults 330 170 2000 5000 and the daemon's `--preempt-us` default: the fairness
//!   experiment's nine jobs of 2-60 ms arriving 1 ms apart, docs/daemon.md; PROGRESS_US: how
//!   often a program reports its progress; PRIOR_US: the preemption cost the daemon assumes
//!   until it has measured one)
use cupreempt_daemon::live::{Command, LaunchInfo, Live, PREEMPT_PRIOR_US};
use cupreempt_daemon::protocol::ServerMsg;
use cupreempt_sched::{policies, simulate_switching, KernelSpec};

const ALONE_US: [f64; 9] = [
    2077.0, 3089.0, 5080.0, 8050.0, 12025.0, 18001.0, 27028.0, 40002.0, 60013.0,
];
const TASKS: u64 = 211_200;
const STEP_US: f64 = 5.0;

#[derive(Default, Clone)]
struct Job {
    arrived: bool,
    on_gpu: bool,
    on_since: f64,
    lands_at: Option<f64>, // a preemption on its way: the kernel leaves the GPU then
    returns_at: Option<f64>, // a resume on its way: the kernel is back then
    done: f64,
    finished: Option<f64>,
    reported_at: f64,
}

fn arg(args: &[String], i: usize, default: f64) -> f64 {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let policy = args.first().cloned().unwrap_or_else(|| "cfs".into());
    let preempt_us = arg(&args, 1, 330.0);
    let switch_us = arg(&args, 2, 170.0);
    let quantum_us = arg(&args, 3, 2000.0);
    let progress_us = arg(&args, 4, 5000.0);
    let prior_us = arg(&args, 5, PREEMPT_PRIOR_US);
    let mut live = Live::new(&policy, 1, 132, quantum_us, 1000.0)?.with_preempt_prior(prior_us)?;
    let mut jobs = vec![Job::default(); ALONE_US.len()];
    let mut t = 0.0;
    let mut pending: Vec<Command> = Vec::new();
    while jobs.iter().any(|j| j.finished.is_none()) && t < 10_000_000.0 {
        // Arrivals: the launch is on the GPU as the daemon hears of it.
        for (i, j) in jobs.iter_mut().enumerate() {
            if !j.arrived && t >= 1000.0 * i as f64 {
                j.arrived = true;
                j.on_gpu = true;
                j.on_since = t;
                j.reported_at = t;
                let info = LaunchInfo {
                    kernel: "job",
                    tasks: TASKS,
                    priority: 0,
                    weight: 1.0,
                    estimate_us: Some(ALONE_US[i]),
                    features: None,
                    kept_off: &[],
                };
                pending.extend(live.launch(t, i as u64 + 1, 1, &info)?);
            }
        }
        // Commands reach their kernels.
        for c in pending.drain(..) {
            let j = &mut jobs[c.conn as usize - 1];
            match c.msg {
                ServerMsg::Preempt { .. } => j.lands_at = Some(t + preempt_us),
                ServerMsg::Resume { .. } => j.returns_at = Some(t + switch_us),
                _ => {}
            }
        }
        // Preemptions land, resumes arrive.
        let mut out = Vec::new();
        for (i, j) in jobs.iter_mut().enumerate() {
            if j.lands_at.is_some_and(|at| t >= at) {
                j.lands_at = None;
                j.on_gpu = false;
                if j.finished.is_none() {
                    out.extend(live.yielded(t, i as u64 + 1, 1)?);
                }
            }
            if j.returns_at.is_some_and(|at| t >= at) && j.lands_at.is_none() {
                j.returns_at = None;
                if j.finished.is_none() && !j.on_gpu {
                    j.on_gpu = true;
                    j.on_since = t;
                }
            }
        }
        // The GPU: the kernel that got there first holds it.
        let first = jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| j.on_gpu)
            .min_by(|a, b| a.1.on_since.total_cmp(&b.1.on_since))
            .map(|(i, _)| i);
        for (i, j) in jobs.iter_mut().enumerate() {
            if Some(i) != first {
                continue;
            }
            j.done += STEP_US;
            if j.done >= ALONE_US[i] {
                j.on_gpu = false;
                j.finished = Some(t + STEP_US);
                out.extend(live.finished(t + STEP_US, i as u64 + 1, 1)?);
            } else if t - j.reported_at >= progress_us {
                j.reported_at = t;
                let tasks = (j.done / ALONE_US[i] * TASKS as f64) as u64;
                live.progress(i as u64 + 1, 1, tasks)?;
            }
        }
        t += STEP_US;
        if live.next_deadline().is_some_and(|d| d <= t) {
            out.extend(live.expire(t));
        }
        pending.extend(out);
    }
    let specs: Vec<KernelSpec> = ALONE_US
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            let mut s = KernelSpec::new(1000.0 * i as f64, w);
            s.preempt_latency = preempt_us;
            s
        })
        .collect();
    let mut p = policies::by_name(&policy, quantum_us).ok_or("unknown policy")?;
    let sim = simulate_switching(&specs, 1, 132, p.as_mut(), None, switch_us)
        .map_err(|e| format!("{e:?}"))?;
    println!(
        "{policy}: preempt {preempt_us} us, switch {switch_us} us, quantum {quantum_us} us, \
         the daemon's prior {prior_us} us"
    );
    println!("job ms | Live NTT | simulator NTT");
    let (mut a, mut b) = (0.0, 0.0);
    for (i, j) in jobs.iter().enumerate() {
        let live_ntt = (j.finished.unwrap_or(f64::NAN) - 1000.0 * i as f64) / ALONE_US[i];
        let sim_ntt = (sim.finish[i] - 1000.0 * i as f64) / ALONE_US[i];
        a += live_ntt / 9.0;
        b += sim_ntt / 9.0;
        println!(
            "{:6.0} | {live_ntt:8.2} | {sim_ntt:8.2}",
            ALONE_US[i] / 1000.0
        );
    }
    println!("ANTT   | {a:8.3} | {b:8.3}");
    Ok(())
}
