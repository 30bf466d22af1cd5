//! Facts about the file's `#define`s: what each macro expands to, as far as its tokens tell,
//! closed over macros that use other macros.

use crate::lang;
use std::collections::BTreeMap;

/// What a macro of this file expands to, as far as tokens tell.
#[derive(Debug, Clone, Default)]
pub struct MacroFacts {
    pub virtual_reads: Vec<&'static str>,
    pub thread_varying: bool,
    /// Reads `threadIdx`.
    pub thread_idx: bool,
    pub barrier: bool,
    pub returns: bool,
    pub grid_sync: bool,
    pub launches: bool,
    /// Names `__shared__`.
    pub shared: bool,
    /// Names blockIdx, gridDim or threadIdx with the global scope's `::`, which passes over
    /// the locals that the rewrite declares for the task's values.
    pub global_builtin: Option<&'static str>,
    /// Identifiers followed by `(`.
    pub calls: Vec<String>,
    /// Every identifier (to follow macros that use other macros).
    pub idents: Vec<String>,
    /// The replacement text.
    pub text: String,
    /// Defined more than once with different replacement texts (under `#if` branches, say):
    /// the other fields describe the last definition only.
    pub redefined: bool,
}

/// Records a `#define`: a second definition with another replacement text marks the macro
/// `redefined`.
pub fn define(macros: &mut BTreeMap<String, MacroFacts>, name: &str, body: &str) {
    let mut f = facts(body);
    if let Some(old) = macros.get(name) {
        f.redefined = old.redefined || old.text != f.text;
    }
    macros.insert(name.to_string(), f);
}

pub(super) fn identifiers(s: &str) -> impl Iterator<Item = (usize, &str)> {
    let bytes = s.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let b = bytes[i];
            if b.is_ascii_alphabetic() || b == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                return Some((start, &s[start..i]));
            }
            if b.is_ascii_digit() {
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.')
                {
                    i += 1;
                }
                continue;
            }
            i += 1;
        }
        None
    })
}

pub fn facts(body: &str) -> MacroFacts {
    let mut f = MacroFacts::default();
    for (at, id) in identifiers(body) {
        if let Some((name, _)) = lang::VIRTUAL_BUILTINS.iter().find(|(n, _)| *n == id) {
            if !f.virtual_reads.contains(name) {
                f.virtual_reads.push(name);
            }
            if body[..at].trim_end().ends_with("::") {
                f.global_builtin = f.global_builtin.or(Some(name));
            }
        }
        if id == "threadIdx" && body[..at].trim_end().ends_with("::") {
            f.global_builtin = f.global_builtin.or(Some("threadIdx"));
        }
        f.thread_varying |= lang::THREAD_VARYING.contains(&id);
        f.thread_idx |= id == "threadIdx";
        f.barrier |=
            lang::BARRIER_FUNCTIONS.iter().any(|(n, _)| *n == id) || id == "this_thread_block";
        f.returns |= id == "return";
        f.grid_sync |= lang::GRID_SYNC.contains(&id);
        let rest = body[at + id.len()..].trim_start();
        if rest.starts_with('(') && !f.calls.iter().any(|c| c == id) {
            f.calls.push(id.to_string());
        }
        if !f.idents.iter().any(|c| c == id) {
            f.idents.push(id.to_string());
        }
    }
    f.text = body.trim().to_string();
    f.barrier |= body.contains(".sync()") && body.contains("thread_block");
    f.launches = body.contains("<<<");
    f.shared = body.contains("__shared__");
    f
}

impl MacroFacts {
    /// Takes in what another macro (used by this one) expands to; true if anything changed.
    fn absorb(&mut self, g: &MacroFacts) -> bool {
        let mut changed = false;
        if g.thread_idx && !self.thread_idx {
            self.thread_idx = true;
            changed = true;
        }
        for v in &g.virtual_reads {
            if !self.virtual_reads.contains(v) {
                self.virtual_reads.push(v);
                changed = true;
            }
        }
        if self.global_builtin.is_none() && g.global_builtin.is_some() {
            self.global_builtin = g.global_builtin;
            changed = true;
        }
        for c in &g.calls {
            if !self.calls.contains(c) {
                self.calls.push(c.clone());
                changed = true;
            }
        }
        for (mine, theirs) in [
            (&mut self.thread_varying, g.thread_varying),
            (&mut self.barrier, g.barrier),
            (&mut self.returns, g.returns),
            (&mut self.grid_sync, g.grid_sync),
            (&mut self.launches, g.launches),
            (&mut self.shared, g.shared),
            (&mut self.redefined, g.redefined),
        ] {
            changed |= theirs && !*mine;
            *mine |= theirs;
        }
        changed
    }
}

/// A macro that uses another macro inherits its facts (to a fixpoint).
pub fn close(mut m: BTreeMap<String, MacroFacts>) -> BTreeMap<String, MacroFacts> {
    loop {
        let snapshot = m.clone();
        let mut changed = false;
        for f in m.values_mut() {
            for used in f.idents.clone() {
                if let Some(g) = snapshot.get(&used) {
                    changed |= f.absorb(g);
                }
            }
        }
        if !changed {
            return m;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macro_tokens() {
        let f = facts("(blockIdx.x * blockDim.x + threadIdx.x)");
        assert_eq!(f.virtual_reads, vec!["blockIdx"]);
        assert!(f.thread_varying && !f.barrier && !f.returns);
        let g = facts("do { if (x) return; __syncthreads(); } while (0)");
        assert!(g.barrier && g.returns);
        assert!(g.calls.contains(&"__syncthreads".to_string()));
    }
}
