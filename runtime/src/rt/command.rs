//! What the host asks of a kernel's blocks: the control word's command bits and SM mask, and
//! the rules for changing them. Pure bookkeeping, tested without a GPU; `Kernel` writes the
//! result to device memory.

use super::error::{Error, Result};
use crate::control::{YIELD_ALL, YIELD_SMS};
use crate::smset::SmSet;

/// Which SMs a preempt or resume is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Every SM: temporal preemption, or resuming everywhere.
    All,
    /// Only these SMs: spatial preemption, or resuming on part of the GPU.
    Sms(SmSet),
}

/// The command the control word carries now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Command {
    yield_all: bool,
    sms: SmSet,
}

impl Command {
    /// `cupreempt_control.command`.
    pub fn word(&self) -> u32 {
        if self.yield_all {
            YIELD_ALL
        } else if !self.sms.is_empty() {
            YIELD_SMS
        } else {
            0
        }
    }

    /// `cupreempt_control.sm_mask`.
    pub fn mask(&self) -> &SmSet {
        &self.sms
    }

    /// True while some SM is told to yield.
    pub fn is_preempted(&self) -> bool {
        self.word() != 0
    }

    /// The SMs on which no block may run now (`sm_count` SMs in the device).
    pub fn yielded_sms(&self, sm_count: u32) -> SmSet {
        if self.yield_all {
            SmSet::below(sm_count.min(crate::smset::MAX_SMS as u32)).unwrap_or_default()
        } else {
            self.sms
        }
    }

    /// Adds `target` to the yielded SMs. Asking again for SMs that all yield already is an
    /// error, so a scheduler notices when its view and the kernel's disagree.
    pub fn preempt(&mut self, target: &Target) -> Result<()> {
        if self.yield_all {
            return Err(Error::AlreadyPreempted);
        }
        match target {
            Target::All => self.yield_all = true,
            Target::Sms(set) => {
                if set.is_empty() {
                    return Err(Error::InvalidArgument("empty SM set"));
                }
                if set.iter().all(|s| self.sms.contains(s)) {
                    return Err(Error::AlreadyPreempted);
                }
                self.sms = self.sms.union(set);
            }
        }
        Ok(())
    }

    /// Lets blocks run on `target` again and returns the SMs that became free for the kernel,
    /// which sizes the instance launched to use them. Resuming SMs that were not preempted is
    /// an error (a double resume).
    pub fn resume(&mut self, target: &Target, sm_count: u32) -> Result<SmSet> {
        let yielded = self.yielded_sms(sm_count);
        let freed = match target {
            Target::All => yielded,
            Target::Sms(set) => set.intersection(&yielded),
        };
        if freed.is_empty() {
            return Err(Error::NotPreempted);
        }
        let left = yielded.difference(&freed);
        self.yield_all = false;
        self.sms = left;
        Ok(freed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sms(ids: &[u32]) -> SmSet {
        SmSet::from_ids(ids.iter().copied()).unwrap()
    }

    #[test]
    fn temporal_preempt_and_resume() {
        let mut c = Command::default();
        assert_eq!(c.word(), 0);
        c.preempt(&Target::All).unwrap();
        assert_eq!(c.word(), YIELD_ALL);
        assert_eq!(c.preempt(&Target::All), Err(Error::AlreadyPreempted));
        assert_eq!(c.resume(&Target::All, 4).unwrap(), sms(&[0, 1, 2, 3]));
        assert_eq!(c.word(), 0);
        assert_eq!(c.resume(&Target::All, 4), Err(Error::NotPreempted));
    }

    #[test]
    fn spatial_sets_accumulate_and_resume_in_parts() {
        let mut c = Command::default();
        c.preempt(&Target::Sms(sms(&[0, 1]))).unwrap();
        c.preempt(&Target::Sms(sms(&[1, 5]))).unwrap();
        assert_eq!(c.word(), YIELD_SMS);
        assert_eq!(*c.mask(), sms(&[0, 1, 5]));
        assert_eq!(
            c.preempt(&Target::Sms(sms(&[0, 5]))),
            Err(Error::AlreadyPreempted)
        );
        assert_eq!(c.resume(&Target::Sms(sms(&[1, 7])), 8).unwrap(), sms(&[1]));
        assert_eq!(*c.mask(), sms(&[0, 5]));
        assert_eq!(
            c.resume(&Target::Sms(sms(&[7])), 8),
            Err(Error::NotPreempted)
        );
        assert_eq!(c.resume(&Target::All, 8).unwrap(), sms(&[0, 5]));
        assert!(!c.is_preempted());
    }

    #[test]
    fn resuming_part_of_a_temporal_preemption_leaves_the_rest_yielded() {
        let mut c = Command::default();
        c.preempt(&Target::All).unwrap();
        assert_eq!(
            c.resume(&Target::Sms(sms(&[2, 3])), 4).unwrap(),
            sms(&[2, 3])
        );
        assert_eq!(c.word(), YIELD_SMS);
        assert_eq!(*c.mask(), sms(&[0, 1]));
    }

    #[test]
    fn empty_sets_are_refused() {
        let mut c = Command::default();
        assert!(matches!(
            c.preempt(&Target::Sms(SmSet::empty())),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(c, Command::default());
    }
}
