//! Chaos mode, for users: `CUPREEMPT_CHAOS=SEED[,MEAN_US]` makes the runtime itself preempt and
//! resume the launches of a transformed program at random moments, with no scheduler, so that
//! anyone can run a program twice (with and without) and compare outputs to check that its
//! kernels survive preemption.
//!
//! With it, every launch that the C ABI plans is preemptible (only stream captures run the
//! original kernel), and each launch whose handle the program lets go of (the launch shim does
//! at once) goes to one chaos thread. That thread waits a random time (uniform, mean
//! `MEAN_US` microseconds, 200 by default), preempts the kernel (on every SM, or on a random
//! half of them one time in four), waits until it has yielded, waits again, resumes it, and so
//! on, until the kernel is complete or has been preempted `MAX_CYCLES` times; then it lets it
//! run to its end. A kernel is never left preempted: dropping a handle resumes it.
//! The random moments come from `SEED` alone, but when they fall in a kernel's run depends on
//! timing: two runs with one seed preempt at different tasks.

use super::capi::lock;
use super::command::Target;
use super::kernel::Kernel;
use crate::smset::SmSet;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Preemptions per launch at most: every launch ends, however short the waits.
pub const MAX_CYCLES: u32 = 8;
const DEFAULT_MEAN_US: u64 = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chaos {
    pub seed: u64,
    pub mean_us: u64,
}

/// `SEED[,MEAN_US]`, decimal or 0x-hexadecimal seed, mean wait at least 1 µs.
pub fn parse(v: &str) -> Result<Chaos, String> {
    let (seed, mean) = match v.split_once(',') {
        Some((s, m)) => (s.trim(), Some(m.trim())),
        None => (v.trim(), None),
    };
    let seed = match seed.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => seed.parse::<u64>(),
    }
    .map_err(|_| format!("CUPREEMPT_CHAOS: `{seed}` is no seed (a whole number)"))?;
    let mean_us = match mean {
        None => DEFAULT_MEAN_US,
        Some(m) => match m.parse::<u64>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return Err(format!(
                    "CUPREEMPT_CHAOS: `{m}` is no mean wait (whole microseconds, at least 1)"
                ))
            }
        },
    };
    Ok(Chaos { seed, mean_us })
}

/// The chaos setting of this process (`CUPREEMPT_CHAOS`), read once; a bad value is said on
/// stderr and turns chaos off.
pub fn config() -> Option<Chaos> {
    static C: OnceLock<Option<Chaos>> = OnceLock::new();
    *C.get_or_init(|| {
        let v = std::env::var("CUPREEMPT_CHAOS").ok()?;
        match parse(&v) {
            Ok(c) => {
                eprintln!(
                    "cupreempt: chaos mode: launches preempted and resumed at random (seed {}, mean wait {} us)",
                    c.seed, c.mean_us
                );
                Some(c)
            }
            Err(e) => {
                eprintln!("cupreempt: {e}; chaos mode off");
                None
            }
        }
    })
}

pub fn enabled() -> bool {
    config().is_some()
}

/// A small deterministic generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A wait, uniform in [0, 2 × mean_us] microseconds.
    pub fn wait(&mut self, mean_us: u64) -> Duration {
        Duration::from_micros(self.next_u64() % (2 * mean_us + 1))
    }
    /// Every SM (three times in four), or a random half of them.
    pub fn target(&mut self, sm_count: u32) -> Target {
        if self.next_u64() % 4 != 0 || sm_count < 2 {
            return Target::All;
        }
        let mut set = SmSet::default();
        let mut chosen = 0;
        for sm in 0..sm_count {
            if self.next_u64() % 2 == 0 && chosen + 1 < sm_count {
                let _ = set.insert(sm);
                chosen += 1;
            }
        }
        if chosen == 0 {
            Target::All
        } else {
            Target::Sms(set)
        }
    }
}

/// A launch handed over, shared with nobody else once the program has let go of it.
type Shared = Arc<Mutex<Kernel>>;

struct Tracked {
    kernel: Shared,
    due: Instant,
    preempted: Option<Target>,
    cycles: u32,
}

/// Hands a launch whose handle the program let go of to the chaos thread; gives it back when
/// there is no thread to be had (then it is simply dropped: it runs to its end).
pub(crate) fn adopt(kernel: Shared) -> Result<(), Shared> {
    let Some(chaos) = config() else {
        return Err(kernel);
    };
    static WORKER: OnceLock<Option<Mutex<Sender<Shared>>>> = OnceLock::new();
    let worker = WORKER.get_or_init(|| {
        let (tx, rx) = channel::<Shared>();
        std::thread::Builder::new()
            .name("cupreempt-chaos".into())
            .spawn(move || run(chaos, rx))
            .ok()
            .map(|_| Mutex::new(tx))
    });
    match worker {
        Some(tx) => lock(tx).send(kernel).map_err(|e| e.0),
        None => Err(kernel),
    }
}

fn run(chaos: Chaos, rx: std::sync::mpsc::Receiver<Shared>) {
    let mut rng = Rng::new(chaos.seed);
    let mut tracked: Vec<Tracked> = Vec::new();
    loop {
        let now = Instant::now();
        let wait = tracked
            .iter()
            .map(|t| t.due.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(1));
        match rx.recv_timeout(wait) {
            Ok(kernel) => {
                tracked.push(Tracked {
                    kernel,
                    due: Instant::now() + rng.wait(chaos.mean_us),
                    preempted: None,
                    cycles: 0,
                });
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) if tracked.is_empty() => return,
            Err(RecvTimeoutError::Disconnected) => {}
        }
        let now = Instant::now();
        tracked.retain_mut(|t| {
            if t.due > now {
                return true;
            }
            let mut k = lock(&t.kernel);
            if let Some(target) = t.preempted.take() {
                let _ = k.resume(target);
                t.cycles += 1;
                t.due = Instant::now() + rng.wait(chaos.mean_us);
                return true;
            }
            if t.cycles >= MAX_CYCLES || !matches!(k.is_complete(), Ok(false)) {
                return false; // complete, or it runs to its end
            }
            let target = rng.target(k.sm_count());
            if k.preempt(target).is_ok() {
                let _ = k.wait_yielded();
                t.preempted = Some(target);
            }
            t.due = Instant::now() + rng.wait(chaos.mean_us);
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_or_refused() {
        assert_eq!(
            parse("42"),
            Ok(Chaos {
                seed: 42,
                mean_us: 200
            })
        );
        assert_eq!(
            parse("0x2a, 50"),
            Ok(Chaos {
                seed: 42,
                mean_us: 50
            })
        );
        assert!(parse("seed").unwrap_err().contains("no seed"));
        assert!(parse("1,0").unwrap_err().contains("no mean wait"));
        assert!(parse("1,x").is_err());
    }

    #[test]
    fn waits_and_targets_come_from_the_seed() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.wait(200), b.wait(200));
        }
        let mut r = Rng::new(1);
        let waits: Vec<Duration> = (0..10_000).map(|_| r.wait(100)).collect();
        assert!(waits.iter().all(|w| *w <= Duration::from_micros(200)));
        let mean = waits.iter().map(|w| w.as_micros()).sum::<u128>() / waits.len() as u128;
        assert!((90..=110).contains(&mean), "mean wait {mean} us");
        let mut spatial = 0;
        for _ in 0..1000 {
            if let Target::Sms(set) = r.target(132) {
                spatial += 1;
                let n = (0..132).filter(|&s| set.contains(s)).count();
                assert!(n > 0 && n < 132, "a strict part of the GPU: {n} SMs");
            }
        }
        assert!((150..=350).contains(&spatial), "{spatial} spatial of 1000");
    }
}
