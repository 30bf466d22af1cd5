//! Probe: the daemon's policy code (`Live`) against the simulator on the same jobs, with no GPU
//! (`cupreempt_daemon::replay`: the model GPU and what it reports). Where the two differ kernel
//! by kernel, the daemon's wiring of the policy is the reason, not the GPU; where they agree
//! and the H100 does not, the GPU is.
//!
//! Usage: cargo run --release -p cupreempt-daemon --example live_vs_sim -- POLICY
//!        [PREEMPT_US [SWITCH_US [QUANTUM_US [PROGRESS_US [PRIOR_US]]]]]
//!   (defaults 330 170 2000 5000 and the daemon's `--preempt-us` default: the fairness
//!   experiment's nine jobs of 2-60 ms arriving 1 ms apart, docs/daemon.md; PROGRESS_US: how
//!   often a program reports its progress; PRIOR_US: the preemption cost the daemon assumes
//!   until it has measured one)
use cupreempt_daemon::live::PREEMPT_PRIOR_US;
use cupreempt_daemon::replay::{fairness_jobs, ntts, replayed, simulated, Costs};

fn arg(args: &[String], i: usize, default: f64) -> f64 {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let policy = args.first().cloned().unwrap_or_else(|| "cfs".into());
    let costs = Costs {
        preempt_us: arg(&args, 1, 330.0),
        switch_us: arg(&args, 2, 170.0),
        quantum_us: arg(&args, 3, 2000.0),
        progress_us: arg(&args, 4, 5000.0),
        prior_us: arg(&args, 5, PREEMPT_PRIOR_US),
    };
    let jobs = fairness_jobs();
    let live = ntts(&jobs, &replayed(&policy, &jobs, costs)?);
    let sim = ntts(&jobs, &simulated(&policy, &jobs, costs)?);
    println!("{policy}: {costs:?}");
    println!("job ms | Live NTT | simulator NTT");
    for (i, j) in jobs.iter().enumerate() {
        println!("{:6.0} | {:8.2} | {:8.2}", j.work / 1000.0, live[i], sim[i]);
    }
    let antt = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!("ANTT   | {:8.3} | {:8.3}", antt(&live), antt(&sim));
    Ok(())
}
