//! cupreemptd --socket PATH [--policy NAME] [--group NAME] [--gpus N] [--sms N]
//!            [--quantum-us US] [--estimate-us US] [--preempt-us US] [--reserve-sms N]
//!            [--contexts steer|leave] [--verbose]
//! cupreemptd run --socket PATH [--priority P] [--] COMMAND [ARGS...]
use cupreempt_daemon::live::policies;
use cupreempt_daemon::server::{check_socket_path, serve, Config, Contexts};
use std::path::PathBuf;

mod run;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

const USAGE: &str = "usage: cupreemptd --socket PATH [--policy NAME] [--group NAME] [--gpus N] \
[--sms N] [--quantum-us US] [--estimate-us US] [--preempt-us US] [--reserve-sms N]
       [--contexts steer|leave] [--verbose]
       cupreemptd run --socket PATH [--priority P] [--] COMMAND [ARGS...]";

fn config(args: &[String]) -> Result<Config, String> {
    let mut cfg = Config {
        socket: PathBuf::new(),
        policy: "hpf".into(),
        group: None,
        gpus: 1,
        sms: 132,
        quantum_us: 2000.0,
        default_estimate_us: 1000.0,
        preempt_prior_us: cupreempt_daemon::live::PREEMPT_PRIOR_US,
        reserve_sms: None,
        verbose: false,
        contexts: Contexts::Steer,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let number = |name: &str, v: String| {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("{name} {v}: not a positive number"))
        };
        match a.as_str() {
            "--socket" => cfg.socket = PathBuf::from(value(a)?),
            "--policy" => cfg.policy = value(a)?,
            "--group" => cfg.group = Some(value(a)?),
            "--gpus" => {
                let v = value(a)?;
                cfg.gpus = v
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| (1..=64).contains(&n))
                    .ok_or_else(|| format!("--gpus {v}: a number of GPUs, 1 to 64"))?;
            }
            "--sms" => cfg.sms = number(a, value(a)?)? as u32,
            "--quantum-us" => cfg.quantum_us = number(a, value(a)?)?,
            "--estimate-us" => cfg.default_estimate_us = number(a, value(a)?)?,
            "--preempt-us" => cfg.preempt_prior_us = number(a, value(a)?)?,
            "--reserve-sms" => cfg.reserve_sms = Some(number(a, value(a)?)? as u32),
            "--verbose" => cfg.verbose = true,
            "--contexts" => {
                cfg.contexts = match value(a)?.as_str() {
                    "steer" => Contexts::Steer,
                    "leave" => Contexts::Leave,
                    v => return Err(format!("--contexts {v}: `steer` or `leave`")),
                }
            }
            "--help" | "-h" => {
                return Err(format!(
                    "{USAGE}\npolicies: {}",
                    policies().collect::<Vec<_>>().join(", ")
                ))
            }
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    if cfg.reserve_sms.is_some() && cfg.policy != cupreempt_daemon::live::RESERVE {
        return Err(format!(
            "--reserve-sms goes with --policy {}",
            cupreempt_daemon::live::RESERVE
        ));
    }
    if cfg.socket.as_os_str().is_empty() {
        return Err(format!("--socket is required\n{USAGE}"));
    }
    check_socket_path(&cfg.socket)?;
    Ok(cfg)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "run") {
        return run::main(&args[1..]);
    }
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cupreemptd: {e}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    match serve(&cfg, &STOP) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cupreemptd: {e}");
            ExitCode::FAILURE
        }
    }
}
