//! Gated links: preemption that leaves no block on the GPU, for GPUs whose processes'
//! contexts are time-sliced (no MPS).
//!
//! A preempted launch's first instance keeps its last block on the GPU, asleep, so that the
//! application's stream waits for the kernel (kernel.rs). Where the GPU time-slices between
//! contexts, that block keeps its context's slices, and another process's urgent kernel still
//! waits for them: a 20 µs kernel's turnaround was 1,380 µs (p50) beside a process with one
//! block asleep on the GPU, and 35 µs beside one whose stream waited on a stream memory
//! operation with no block on the GPU, as with no other process (`scripts/probes/
//! timeslice_wait.sh`, H200; docs/daemon.md). So where that matters a launch enqueues
//!
//! ```text
//!   [link 1] [wait gate >= 1] [link 2] [wait gate >= 2] ... [link L] [wait gate >= L]
//!   [anchor] [end event]
//! ```
//!
//! Each link and the anchor is the persistent kernel for the whole launch, on one task counter.
//! A preempted link's blocks all leave, and the stream stops at the next closed wait with no
//! block of the kernel on the GPU. A resume opens the next gate with a store to host memory
//! (no stream carries it, so nothing queued anywhere can hold it up), and the next link goes on
//! with the tasks left. The block that retires the last task opens every gate: the remaining
//! links find nothing to do and leave, and the anchor's last block raises `finished` as a first
//! instance's does. Once the resumes have opened every gate, the anchor is a first instance:
//! preempted, its last block stays asleep, and a resume launches instances on runtime streams.
//! The wait reads the gate in the launch's host mirror (`HostMirror::gate`).
//!
//! Links and anchor read the command in host memory before they take a task, so the command
//! that opened their gate counts even where its copy to the control block is still queued (or
//! held up behind this very wait, in a hardware queue the control stream shares with the
//! application's stream).
//!
//! The price: every link is a launch and a wait on the host (a few µs each), and a grid that
//! starts and leaves at once after the last task (a few µs of GPU time each). So only launches
//! under a scheduler on a time-sliced GPU get links, as many as the milliseconds their kernel
//! and configuration ran the last time (from 1 to `MAX_LINKS`; `UNKNOWN_RUN_LINKS` before it
//! is known): a preemption more than that per launch parks a block, as without links.
//! `CUPREEMPT_LINKS=N` gives every preemptible launch N links, and `CUPREEMPT_LINKS=0` none.

use super::queued::MAX_QUEUED;
use std::sync::OnceLock;

/// Links per launch at most.
pub(crate) const MAX_LINKS: u32 = 32;
/// Links of a launch whose kernel and configuration have not run preemptible before.
const UNKNOWN_RUN_LINKS: u32 = 4;

/// `CUPREEMPT_LINKS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setting {
    /// Links under a scheduler on a time-sliced GPU, sized by the launch's expected run time.
    Auto,
    /// This many links for every preemptible launch (0: none).
    Fixed(u32),
}

impl Setting {
    pub(crate) fn parse(value: Option<&str>) -> Result<Setting, String> {
        let Some(v) = value.map(str::trim) else {
            return Ok(Setting::Auto);
        };
        match v.parse::<u32>() {
            Ok(n) if n <= MAX_LINKS => Ok(Setting::Fixed(n)),
            _ => Err(format!(
                "CUPREEMPT_LINKS={v}: expected a number of links from 0 to {MAX_LINKS}"
            )),
        }
    }

    /// Read once; a bad value is said on stderr and not used.
    pub(crate) fn from_env() -> Setting {
        static S: OnceLock<Setting> = OnceLock::new();
        *S.get_or_init(|| {
            let v = std::env::var("CUPREEMPT_LINKS").ok();
            Setting::parse(v.as_deref()).unwrap_or_else(|e| {
                eprintln!("cupreempt: {e}; links left to the runtime");
                Setting::Auto
            })
        })
    }
}

/// The links of one preemptible launch: `scheduled` (a scheduler daemon steers the process),
/// `mps` (whether the GPU's contexts are shared through MPS; none: unknown), `run_ns` (how
/// long the kernel ran the last time with this configuration, where known).
pub(crate) fn links_for(
    setting: Setting,
    scheduled: bool,
    mps: Option<bool>,
    run_ns: Option<u64>,
) -> u32 {
    match setting {
        Setting::Fixed(n) => n.min(MAX_LINKS),
        Setting::Auto if !scheduled || mps != Some(false) => 0,
        Setting::Auto => run_ns.map_or(UNKNOWN_RUN_LINKS, |ns| {
            (ns / 1_000_000).clamp(1, MAX_LINKS as u64) as u32
        }),
    }
}

/// Launches with `links` links each that may be queued at once: a launch is then `links + 1`
/// kernels and `links` waits where it is otherwise one kernel and an event, and the bound on
/// queued launches (queued.rs) is about the driver's queue.
pub(crate) fn queued_limit(links: u32) -> usize {
    (MAX_QUEUED * 2 / (2 * links as usize + 2)).max(4)
}

/// Whether, with the kernel's `link_announced` and `link_entered` read after a command was
/// published, no block can still start on a forward older than that command without the
/// lanes showing it: no instance announced itself before (its first block then reads the
/// command), or every block of the latest one that did has entered.
pub(crate) fn instance_entered(announced: u32, entered: u32) -> bool {
    entered >= announced
}

/// The value a host writes into the gate's low 16 bits to open gates 1..=opened.
pub(crate) fn host_gate(opened: u32) -> u16 {
    opened.min(MAX_LINKS) as u16
}

/// Whether the stream's wait for `gate >= link` passes with the gate at `value` (what
/// `cuStreamWaitValue32`'s `CU_STREAM_WAIT_VALUE_GEQ` tests: a signed difference).
#[cfg(test)]
fn wait_passes(value: u32, link: u32) -> bool {
    (value.wrapping_sub(link) as i32) >= 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::GATES_OPEN;

    #[test]
    fn links_only_under_a_scheduler_on_a_time_sliced_gpu() {
        let ms = |n: u64| Some(n * 1_000_000);
        assert_eq!(links_for(Setting::Auto, false, Some(false), ms(20)), 0);
        assert_eq!(links_for(Setting::Auto, true, Some(true), ms(20)), 0);
        assert_eq!(links_for(Setting::Auto, true, None, ms(20)), 0);
        assert_eq!(links_for(Setting::Auto, true, Some(false), ms(20)), 20);
        assert_eq!(
            links_for(Setting::Auto, true, Some(false), Some(300_000)),
            1
        );
        assert_eq!(
            links_for(Setting::Auto, true, Some(false), ms(900)),
            MAX_LINKS
        );
        assert_eq!(
            links_for(Setting::Auto, true, Some(false), None),
            UNKNOWN_RUN_LINKS
        );
        // A fixed number holds anywhere, also with no scheduler (tests, chaos runs).
        assert_eq!(links_for(Setting::Fixed(3), false, Some(true), None), 3);
        assert_eq!(links_for(Setting::Fixed(0), true, Some(false), ms(20)), 0);
    }

    #[test]
    fn the_setting_reads_a_number_of_links() {
        assert_eq!(Setting::parse(None), Ok(Setting::Auto));
        assert_eq!(Setting::parse(Some(" 8 ")), Ok(Setting::Fixed(8)));
        assert_eq!(Setting::parse(Some("0")), Ok(Setting::Fixed(0)));
        assert!(Setting::parse(Some("33")).is_err());
        assert!(Setting::parse(Some("many")).is_err());
    }

    #[test]
    fn fewer_launches_with_links_may_be_queued() {
        assert_eq!(queued_limit(0), MAX_QUEUED);
        assert!(queued_limit(4) < MAX_QUEUED / 4);
        assert_eq!(queued_limit(MAX_LINKS), 7);
    }

    /// Blocks of an instance announced before the command may still start on its older
    /// forward until the instance's every block has entered; with none announced, or a
    /// one-block grid whose block entered before announcing, the lanes decide at once.
    #[test]
    fn an_announced_instance_counts_once_every_block_entered() {
        assert!(instance_entered(0, 0), "no link has read the command yet");
        assert!(
            !instance_entered(2, 1),
            "link 2 announced, some of its blocks not in"
        );
        assert!(instance_entered(2, 2));
        assert!(
            instance_entered(2, 3),
            "a one-block link 3 entered before announcing"
        );
        assert!(!instance_entered(5, 0));
    }

    /// The host's bytes and the kernel's byte of the gate: a closed gate stays closed, the
    /// host's count opens exactly its links, and the kernel's byte opens every one, whatever
    /// the host wrote (a plain top byte of 0xff would read as negative and open nothing).
    #[test]
    fn gates_open_as_the_stream_wait_compares() {
        let with_kernel = |host: u16| (GATES_OPEN as u32) << 24 | host as u32;
        for link in 1..=MAX_LINKS {
            assert!(!wait_passes(0, link));
            assert!(wait_passes(host_gate(link) as u32, link));
            assert!(!wait_passes(host_gate(link - 1) as u32, link));
            for host in [0, 1, MAX_LINKS] {
                assert!(wait_passes(with_kernel(host_gate(host)), link));
            }
            assert!(!wait_passes(0xff << 24, link));
        }
        // A launch of L links that failed after enqueueing them opens them all with the host's
        // count at L (Kernel::open_every_gate).
        for links in 1..=MAX_LINKS {
            assert!((1..=links).all(|link| wait_passes(host_gate(links) as u32, link)));
        }
    }
}
