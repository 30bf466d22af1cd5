//! Names whose values may differ between threads, each with where the writes that made it so
//! are compiled.
//!
//! Only one branch of an `#if` chain is compiled, so a write in one branch cannot reach a read
//! in another: real kernels put their code under `#if ARCH_HAS_FEATURE` and, under `#else`,
//! hand every parameter to an "unused" macro of a header (llama.cpp's flash attention:
//! `GGML_UNUSED_VARS(Q_ptr, ..., ne03);`), a call that may write them, which made every
//! parameter varying in the branch that computes.

use std::collections::BTreeMap;

/// Where a node is compiled: for each `#if`/`#ifdef`/`#elif` of the body that holds it (by
/// node id), whether it lies in that conditional's alternative (its `#elif` or `#else`) or in
/// its own branch. Sorted; empty outside every conditional.
pub(super) type Branches = Vec<(usize, bool)>;

/// Whether two places can be compiled together: no conditional holds them in different
/// branches.
pub(super) fn together(a: &Branches, b: &Branches) -> bool {
    !a.iter()
        .any(|(p, side)| b.iter().any(|(q, other)| p == q && side != other))
}

#[derive(Default)]
pub(super) struct Varying {
    names: BTreeMap<String, Vec<Branches>>,
    /// Counts the inserts that added something (for fixed points).
    changes: usize,
}

impl Varying {
    /// `name` is varying wherever a write at `at` is compiled. Returns whether that is new: no
    /// entry of fewer conditions (which holds everywhere `at` does) was there.
    pub(super) fn insert(&mut self, name: String, at: Branches) -> bool {
        if self.covers(&name, &at) {
            return false;
        }
        let list = self.names.entry(name).or_default();
        list.retain(|b| !at.iter().all(|x| b.contains(x)));
        list.push(at);
        self.changes += 1;
        true
    }

    /// `name` varying everywhere (a write whose place does not matter).
    pub(super) fn insert_everywhere(&mut self, name: String) -> bool {
        self.insert(name, Branches::new())
    }

    /// Whether `name` is already varying everywhere `at` is compiled.
    pub(super) fn covers(&self, name: &str, at: &Branches) -> bool {
        self.names
            .get(name)
            .is_some_and(|l| l.iter().any(|b| b.iter().all(|x| at.contains(x))))
    }

    /// Whether a read of `name` compiled at `at` may see a varying value.
    pub(super) fn contains(&self, name: &str, at: &Branches) -> bool {
        self.names
            .get(name)
            .is_some_and(|l| l.iter().any(|b| together(b, at)))
    }

    /// Whether `name` is varying anywhere.
    pub(super) fn anywhere(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    pub(super) fn changes(&self) -> usize {
        self.changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_reaches_the_reads_compiled_with_it() {
        let mut v = Varying::default();
        let (if_side, else_side) = (vec![(7, false)], vec![(7, true)]);
        assert!(v.insert("x".into(), else_side.clone()));
        assert!(v.contains("x", &else_side));
        assert!(v.contains("x", &vec![]));
        assert!(!v.contains("x", &if_side));
        assert!(!v.contains("x", &vec![(7, false), (9, true)]));
        assert!(v.contains("x", &vec![(7, true), (9, true)]));
        // A write outside the conditional reaches both branches.
        assert!(v.insert("x".into(), vec![]));
        assert!(v.contains("x", &if_side));
        assert!(!v.insert("x".into(), else_side));
        assert!(v.covers("x", &if_side));
    }
}
