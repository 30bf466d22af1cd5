//! `cupreempt sim`: runs scheduling policies on a workload in the discrete-event simulator.

use super::{files, OutputFormat};
use clap::Args;
use cupreempt_sched::{
    parse_task_table, plot, policies, simulate_switching, Estimator, Generator, Outcome, Workload,
};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Policy to run: fifo, hpf, sjf, srt, rr, ffs, cfs, frs, priority and elastic (TReM),
    /// sjf-aging, spatial (greedy STP allocation of SMs, kernels share GPUs), shares (SMs in
    /// proportion to the kernels' weights), concurrent (no scheduler: every kernel runs as it
    /// comes, the SMs split equally; a baseline).
    #[arg(long, default_value = "fifo", conflicts_with = "compare")]
    policy: String,
    /// Several policies on the same workload, side by side: `fifo,hpf,srt`.
    #[arg(long, value_delimiter = ',')]
    compare: Vec<String>,
    /// Workload as JSON (`{"kernels": [{"arrival": µs, "work": µs, ...}]}`).
    #[arg(long, conflicts_with = "generate")]
    workload: Option<PathBuf>,
    /// Generate this many kernels instead (see the generator options).
    #[arg(long)]
    generate: Option<usize>,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    gpus: u64,
    /// SMs per GPU (what spatial sharing divides).
    #[arg(long, default_value_t = cupreempt_sched::DEFAULT_SMS, value_parser = clap::value_parser!(u32).range(1..=1024))]
    sms: u32,
    /// Quantum, µs: RR's, FRS's minimum, a quarter of CFS's epoch.
    #[arg(long, default_value_t = 1000.0)]
    quantum_us: f64,
    /// Context switch, µs: a kernel that starts on a GPU another kernel held last waits this
    /// long first (the GPU idles; apart from the preemption latency the leaving kernel paid).
    #[arg(long, default_value_t = 0.0)]
    switch_us: f64,
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
    /// With `--format json`: also every kernel of each run (arrival, finish, turnaround, NTT,
    /// preemptions, revocations, shrinks, wasted work, killed, SLA met), to compare with
    /// measurements kernel by kernel.
    #[arg(long)]
    per_kernel: bool,
    /// Write the generated workload here (JSON), to replay it later.
    #[arg(long)]
    save_workload: Option<PathBuf>,
    /// Policies see durations predicted by the duration model (trained online from the
    /// kernels completed so far) instead of the workload's true ones; the table's `est.err`
    /// column gives the predictions' mean relative error.
    #[arg(long)]
    predict: bool,
    /// The duration believed before anything has completed, µs (with --predict).
    #[arg(long, default_value_t = 1000.0)]
    prior_us: f64,
    /// Write SVG plots here: GPU share over time per priority level for each policy
    /// (`gpu-share-POLICY.svg`) and the response-time distributions (`response-times.svg`).
    #[arg(long)]
    plot: Option<PathBuf>,
    #[command(flatten)]
    gen: GenArgs,
}

#[derive(Args, Debug)]
struct GenArgs {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Offered load (divides the mean inter-arrival time).
    #[arg(long, default_value_t = 1.0)]
    load: f64,
    /// Share of user-facing kernels (0.5 = 50:50, 0.8 = 80:20).
    #[arg(long, default_value_t = 0.5)]
    user_share: f64,
    /// Pareto shape of durations (> 1).
    #[arg(long, default_value_t = 1.5)]
    alpha: f64,
    #[arg(long, default_value_t = 1000.0)]
    mean_user_us: f64,
    #[arg(long, default_value_t = 20000.0)]
    mean_batch_us: f64,
    #[arg(long, default_value_t = 10000.0)]
    mean_interarrival_us: f64,
    #[arg(long, default_value_t = 2)]
    priorities: u8,
    #[arg(long, default_value_t = 30.0)]
    preempt_latency_us: f64,
    #[arg(long, default_value_t = 10.0)]
    resume_overhead_us: f64,
    /// Revocation latency (TReM's Priority policy), µs.
    #[arg(long, default_value_t = 10000.0)]
    revoke_latency_us: f64,
    /// Response-time goal of user-facing kernels, µs.
    #[arg(long, default_value_t = 200000.0)]
    sla_us: f64,
    /// Multi-kernel applications: up to this many kernels per job (1..=64), arriving together,
    /// or with --job-window released as earlier ones finish (more than 8 need a window).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=64))]
    tasks_per_job: u8,
    /// Closed-loop jobs: at most this many kernels of a job outstanding (1..=8); each further
    /// one is released when the one this many places before it finishes, and its SLA counts
    /// from then. 0: a job's kernels all arrive at once.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=8))]
    job_window: u8,
    /// SMs a generated kernel can fill, drawn from this list (`--sm-widths 16,33,132`);
    /// default: every kernel fills the GPU.
    #[arg(long, value_delimiter = ',')]
    sm_widths: Vec<u32>,
    /// Kernels come from this many programs with features the duration model learns from
    /// (grid, block, input and shared-memory size); 0: anonymous kernels.
    #[arg(long, default_value_t = 0)]
    programs: usize,
    /// How loosely a kernel's grid size follows its duration (relative, with --programs).
    #[arg(long, default_value_t = 0.05)]
    feature_noise: f64,
    /// Jobs made of tasks drawn from this table (CSV, one task kind per line:
    /// `name,work_us[,max_sms]`, `#` comments, an optional header): each kernel of a job is a
    /// row drawn at random, with that row's name and work. Instead of --programs.
    #[arg(long)]
    task_table: Option<PathBuf>,
}

pub fn run(a: SimArgs) -> anyhow::Result<ExitCode> {
    if a.per_kernel && !matches!(a.format, OutputFormat::Json) {
        anyhow::bail!("--per-kernel needs --format json (the table has one row per policy)");
    }
    let workload = match (&a.workload, a.generate) {
        (Some(path), _) => Workload::from_json(&files::read_text(path)?)
            .map_err(|e| anyhow::anyhow!("{}: not a workload: {e}", path.display()))?,
        (None, Some(n)) => {
            if a.gen.tasks_per_job > 8 && a.gen.job_window == 0 {
                anyhow::bail!(
                    "--tasks-per-job above 8 needs --job-window (at most 8 of a job's kernels \
                     outstanding at once)"
                );
            }
            let task_table = match &a.gen.task_table {
                Some(_) if a.gen.programs > 0 => {
                    anyhow::bail!("--task-table names the kernels itself: leave out --programs")
                }
                Some(path) => parse_task_table(&files::read_text(path)?)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
                None => Vec::new(),
            };
            let ok =
                a.gen.alpha > 1.0 && a.gen.load > 0.0 && (0.0..=1.0).contains(&a.gen.user_share);
            if !ok {
                anyhow::bail!("--alpha must be > 1, --load > 0 and --user-share within 0..1");
            }
            Generator {
                kernels: n,
                seed: a.gen.seed,
                alpha: a.gen.alpha,
                mean_user: a.gen.mean_user_us,
                mean_batch: a.gen.mean_batch_us,
                user_share: a.gen.user_share,
                mean_interarrival: a.gen.mean_interarrival_us,
                load: a.gen.load,
                priorities: a.gen.priorities,
                preempt_latency: a.gen.preempt_latency_us,
                resume_overhead: a.gen.resume_overhead_us,
                revoke_latency: a.gen.revoke_latency_us,
                sla: a.gen.sla_us,
                tasks_per_job: a.gen.tasks_per_job as usize,
                job_window: a.gen.job_window as usize,
                sm_widths: a.gen.sm_widths.clone(),
                programs: a.gen.programs,
                feature_noise: a.gen.feature_noise,
                task_table,
            }
            .generate()
        }
        (None, None) => anyhow::bail!("give --workload FILE or --generate N"),
    };
    if let Some(p) = &a.save_workload {
        files::write_atomically(p, &workload.to_json())?;
    }
    let names = if a.compare.is_empty() {
        vec![a.policy.clone()]
    } else {
        a.compare.clone()
    };
    let gpus = a.gpus as usize;
    let mut outcomes: Vec<Outcome> = Vec::new();
    for name in &names {
        let mut policy = policies::by_name(name, a.quantum_us).ok_or_else(|| {
            anyhow::anyhow!(
                "unknown policy `{name}` (known: {})",
                policies::NAMES.join(", ")
            )
        })?;
        let mut estimator = Estimator::new(1e-3, a.prior_us);
        let outcome = simulate_switching(
            &workload.kernels,
            gpus,
            a.sms,
            policy.as_mut(),
            a.predict.then_some(&mut estimator),
            a.switch_us,
        )?;
        outcomes.push(outcome);
    }
    if let Some(dir) = &a.plot {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("{}: cannot create: {e}", dir.display()))?;
        for o in &outcomes {
            let p = dir.join(format!("gpu-share-{}.svg", o.policy));
            files::write_atomically(&p, &plot::gpu_share_svg(o, gpus, 200))?;
        }
        files::write_atomically(
            &dir.join("response-times.svg"),
            &plot::response_cdf_svg(&outcomes),
        )?;
        eprintln!("cupreempt: plots written to {}", dir.display());
    }
    match a.format {
        OutputFormat::Json => {
            let rows: Vec<_> = outcomes
                .iter()
                .map(|o| {
                    let mut row = serde_json::json!({"policy": o.policy, "gpus": gpus, "events": o.events, "metrics": o.metrics});
                    if a.per_kernel {
                        row["kernels"] = serde_json::Value::Array(per_kernel(o));
                    }
                    row
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
        OutputFormat::Text => print!("{}", table(&outcomes, gpus)),
    }
    Ok(ExitCode::SUCCESS)
}

/// One object per kernel of a run, as the metrics count them: turnaround from arrival, NTT =
/// turnaround / standalone work; response from release, the SLA met when it is within it.
fn per_kernel(o: &Outcome) -> Vec<serde_json::Value> {
    o.kernels
        .iter()
        .zip(&o.finish)
        .map(|(k, &finish)| {
            let s = &k.spec;
            let turnaround = finish - s.arrival;
            let mut v = serde_json::json!({
                "id": k.id,
                "arrival": s.arrival,
                "work": s.work,
                "priority": s.priority,
                "weight": s.weight,
                "user_facing": s.user_facing,
                "released": o.released[k.id],
                "finish": finish,
                "turnaround": turnaround,
                "response": finish - o.released[k.id].max(s.arrival),
                "ntt": if s.work > 0.0 { turnaround / s.work } else { 0.0 },
                "preemptions": k.preemptions,
                "revocations": k.revocations,
                "shrinks": k.shrinks,
                "wasted": k.wasted,
                "killed": k.killed,
            });
            if !s.name.is_empty() {
                v["name"] = s.name.clone().into();
            }
            if s.sla > 0.0 {
                v["sla_met"] = (finish - o.released[k.id].max(s.arrival) <= s.sla).into();
            }
            v
        })
        .collect()
}

fn table(outcomes: &[Outcome], gpus: usize) -> String {
    let mut s = format!(
        "{:<9} {:>7} {:>4} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10} {:>7} {:>7} {:>7} {:>6} {:>11} {:>7}\n",
        "policy",
        "kernels",
        "gpus",
        "ANTT",
        "STP",
        "DNTT",
        "p50 µs",
        "p95 µs",
        "p99 µs",
        "preempt",
        "revoked",
        "wasted",
        "SLA",
        "makespan µs",
        "est.err"
    );
    for o in outcomes {
        let m = &o.metrics;
        let sla = m
            .sla_attainment
            .map_or("-".to_string(), |a| format!("{:.1}%", 100.0 * a));
        let wasted = format!("{:.2}%", 100.0 * m.wasted_work);
        let est = m
            .estimate_error
            .map_or("exact".to_string(), |e| format!("{:.1}%", 100.0 * e));
        s.push_str(&format!(
            "{:<9} {:>7} {:>4} {:>8.3} {:>8.3} {:>8.3} {:>10.0} {:>10.0} {:>10.0} {:>7} {:>7} {:>7} {:>6} {:>11.0} {:>7}\n",
            o.policy,
            m.kernels,
            gpus,
            m.antt,
            m.stp,
            m.dntt,
            m.p50,
            m.p95,
            m.p99,
            m.preemptions,
            m.revocations,
            wasted,
            sla,
            m.makespan,
            est
        ));
    }
    s
}
