//! A bound on the runtime's launches that are queued or running at once.
//!
//! A program may queue launches far faster than the GPU runs them (HeCBench's lud queues 1,534
//! in 0.6 s). The driver's command queue then fills, and the program's thread waits inside
//! `cuLaunchKernel` holding a driver lock that every other driver call of the process needs.
//! As written that only slows the program. With preemption it can stop it for good: if the
//! launch at the head of the queue is preempted, the queue drains only once it is resumed, and
//! a preemption's own driver calls (the command's writes, the checks that the kernel has
//! yielded, the resumed instance) wait for that lock: the thread that would resume the kernel
//! waits for the kernel (seen with chaos mode on the H100: `cuStreamWriteValue32` waiting in
//! `pthread_rwlock_rdlock` while the program's thread waited in `cuLaunchKernel`).
//!
//! So a launch through the runtime first waits, in the runtime and holding no driver lock,
//! until fewer than `MAX_QUEUED` of the runtime's launches are incomplete, far below where the
//! driver's queue fills (about 1,100 such launches of lud on the H100). A launch is complete
//! once its tail has written its run time in the host mirror, or once its mirror has been
//! handed to a later launch; both are plain reads of host memory, no driver call. The GPU still
//! has `MAX_QUEUED` launches of work queued, so a program is never slower for it.

use super::pool::Mirror;
use std::ptr::addr_of;
use std::sync::Mutex;
use std::time::Duration;

/// Incomplete launches at most; a launch beyond it waits for one to complete.
pub(crate) const MAX_QUEUED: usize = 256;

#[derive(Default)]
pub(crate) struct Queued {
    /// Launches that may be incomplete: each one's host mirror and number.
    launches: Mutex<Vec<(Mirror, u64)>>,
}

// SAFETY: the mirrors are pinned host memory that lives as long as the runtime (its slabs are
// freed only when it is dropped); they are only read here.
unsafe impl Send for Queued {}
unsafe impl Sync for Queued {}

fn complete(&(mirror, number): &(Mirror, u64)) -> bool {
    // SAFETY: see `Queued`; the kernel writes `run_ns` once, the host writes `launch` when it
    // hands the mirror to another launch.
    unsafe {
        addr_of!((*mirror.host).launch).read_volatile() != number
            || addr_of!((*mirror.host).run_ns).read_volatile() != 0
    }
}

impl Queued {
    /// Returns once fewer than `limit` launches are incomplete.
    pub fn wait_for_room(&self, limit: usize) {
        let mut pause = Duration::from_micros(2);
        loop {
            {
                let mut l = super::capi::lock(&self.launches);
                if l.len() < limit {
                    return;
                }
                l.retain(|q| !complete(q));
                if l.len() < limit {
                    return;
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_micros(50));
        }
    }

    /// Counts a launch just made.
    pub fn add(&self, mirror: Mirror, number: u64) {
        super::capi::lock(&self.launches).push((mirror, number));
    }

    /// Launches counted and not yet seen complete (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        super::capi::lock(&self.launches).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::HostMirror;

    #[test]
    fn a_launch_waits_until_an_earlier_one_completes() {
        // SAFETY: plain host memory standing in for pinned mirrors, freed at the end.
        let hosts: Vec<*mut HostMirror> = (0..3)
            .map(|_| Box::into_raw(Box::new(unsafe { std::mem::zeroed::<HostMirror>() })))
            .collect();
        let set = |h: *mut HostMirror, launch: Option<u64>, run_ns: Option<u64>| unsafe {
            if let Some(n) = launch {
                std::ptr::addr_of_mut!((*h).launch).write_volatile(n);
            }
            if let Some(n) = run_ns {
                std::ptr::addr_of_mut!((*h).run_ns).write_volatile(n);
            }
        };
        let q = Queued::default();
        for (i, &h) in hosts.iter().enumerate() {
            set(h, Some(i as u64 + 1), None);
            q.add(Mirror { host: h, device: 0 }, i as u64 + 1);
        }
        // Room below the bound: no wait.
        q.wait_for_room(4);
        assert_eq!(q.len(), 3);
        // At the bound: waits until the second launch's tail writes its run time.
        let second = hosts[1] as usize;
        let tail = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            set(second as *mut HostMirror, None, Some(7));
        });
        let t = std::time::Instant::now();
        q.wait_for_room(3);
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(q.len(), 2);
        tail.join().unwrap();
        // A mirror handed to a later launch counts its old launch as complete.
        set(hosts[0], Some(99), None);
        q.wait_for_room(2);
        assert_eq!(q.len(), 1);
        for h in hosts {
            // SAFETY: made by Box::into_raw above, no longer used.
            drop(unsafe { Box::from_raw(h) });
        }
    }
}
