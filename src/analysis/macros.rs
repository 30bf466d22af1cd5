//! Facts about the file's `#define`s: what each macro expands to, as far as its tokens tell,
//! closed over macros that use other macros.

use crate::lang;
use std::collections::{BTreeMap, HashSet};

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
    /// A function-like macro's parameters (`set_params`; None: object-like, or not known).
    pub params: Option<Vec<String>>,
}

/// Records a `#define`: a second definition with another replacement text marks the macro
/// `redefined`.
pub fn define(macros: &mut BTreeMap<String, MacroFacts>, name: &str, body: &str) {
    let mut f = facts(body);
    if let Some(old) = macros.get(name) {
        f.redefined = old.redefined || old.text != f.text;
        // Which definition is in effect is the preprocessor's choice (`#ifdef DEBUG` one,
        // `#else` another): the macro may do what any of them does. Its text stays the last's.
        if f.redefined {
            f.absorb(old);
        }
    }
    macros.insert(name.to_string(), f);
}

/// The facts of a list of `#define`s (name, replacement text) and the function-like ones'
/// parameters, as another file gives them (`program::IncludedMacros`), not yet `close`d.
pub fn of_lists(
    definitions: &[(String, String)],
    parameters: &[(String, Vec<String>)],
) -> BTreeMap<String, MacroFacts> {
    let mut all = BTreeMap::new();
    for (name, text) in definitions {
        define(&mut all, name, text);
    }
    for (name, params) in parameters {
        set_params(&mut all, name, params.clone());
    }
    all
}

/// Records a `#define` of the file (`preproc_def` or `preproc_function_def`, at file scope or
/// in a body): its replacement text and, for a function-like macro, its parameters.
pub fn define_node(macros: &mut BTreeMap<String, MacroFacts>, node: tree_sitter::Node, src: &str) {
    let fields = lang::fields();
    let Some(name) = node.child_by_field_id(fields.name) else {
        return;
    };
    let name = lang::text(name, src);
    let body = node
        .child_by_field_id(fields.value)
        .filter(|v| v.kind_id() == lang::kinds().preproc_arg)
        .map(|v| lang::text(v, src))
        .unwrap_or("");
    define(macros, name, body);
    if let Some(params) = node.child_by_field_id(fields.parameters) {
        let list = crate::parse::macro_parameter_list(lang::text(params, src));
        set_params(macros, name, list);
    }
}

/// Records the parameters of a function-like macro, after `define` (this file's, from its
/// `preproc_params`, `define_node`; an included file's, `Options::known_macros`).
pub fn set_params(macros: &mut BTreeMap<String, MacroFacts>, name: &str, params: Vec<String>) {
    if let Some(m) = macros.get_mut(name) {
        m.params = Some(params);
    }
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
    /// Takes in what another macro (used by this one) expands to.
    fn absorb(&mut self, g: &MacroFacts) {
        let mut have = self.calls.iter().cloned().collect();
        self.absorb_with(g, &mut have);
    }

    /// `absorb`, with `have` the set of `self.calls` kept by the caller across many absorbs (a
    /// header's macros can reach hundreds of calls, and a group of them absorbs once per edge).
    fn absorb_with(&mut self, g: &MacroFacts, have: &mut HashSet<String>) {
        self.thread_idx |= g.thread_idx;
        for v in &g.virtual_reads {
            if !self.virtual_reads.contains(v) {
                self.virtual_reads.push(v);
            }
        }
        self.global_builtin = self.global_builtin.or(g.global_builtin);
        for c in &g.calls {
            if have.insert(c.clone()) {
                self.calls.push(c.clone());
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
            *mine |= theirs;
        }
    }
}

/// A macro that uses another macro inherits its facts, transitively: each macro ends with the
/// facts of every macro it reaches through the identifiers of its replacement text. Computed
/// once per strongly connected group of macros, callees first (Tarjan's order), so a header set
/// of thousands of macros costs one pass: a fixpoint over the whole map, cloned each round,
/// took minutes on libcu++'s headers (`check -I` over CUB's kernels).
pub fn close(mut m: BTreeMap<String, MacroFacts>) -> BTreeMap<String, MacroFacts> {
    let names: Vec<String> = m.keys().cloned().collect();
    let index: std::collections::HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let edges: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            m[n].idents
                .iter()
                .filter_map(|id| index.get(id.as_str()).copied())
                .collect()
        })
        .collect();
    let groups = strongly_connected(&edges);
    let mut group_of = vec![0; names.len()];
    for (g, members) in groups.iter().enumerate() {
        for &v in members {
            group_of[v] = g;
        }
    }
    // What each group's members reach, in Tarjan's order: a group's callees come before it.
    let mut reached: Vec<MacroFacts> = Vec::with_capacity(groups.len());
    for (g, members) in groups.iter().enumerate() {
        let mut all = MacroFacts::default();
        let mut have = HashSet::new();
        for &v in members {
            all.absorb_with(&m[&names[v]], &mut have);
            for &w in &edges[v] {
                if group_of[w] != g {
                    all.absorb_with(&reached[group_of[w]], &mut have);
                }
            }
        }
        reached.push(all);
    }
    for (v, name) in names.iter().enumerate() {
        if let Some(f) = m.get_mut(name) {
            f.absorb(&reached[group_of[v]]);
        }
    }
    m
}

/// The strongly connected components of a graph given by its successor lists, each component
/// after every component it reaches (Tarjan's algorithm, without recursion: a macro chain may
/// be thousands deep).
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    const UNSEEN: usize = usize::MAX;
    let n = edges.len();
    let (mut order, mut low) = (vec![UNSEEN; n], vec![0; n]);
    let mut on_stack = vec![false; n];
    let (mut stack, mut out, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if order[root] != UNSEEN {
            continue;
        }
        // (node, index of its next successor to look at)
        let mut calls = vec![(root, 0usize)];
        order[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut i)) = calls.last_mut() {
            if let Some(&w) = edges[v].get(*i) {
                *i += 1;
                if order[w] == UNSEEN {
                    order[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(order[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == order[v] {
                let mut members = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    members.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(members);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_reach_through_chains_and_cycles() {
        let mut m = BTreeMap::new();
        define(&mut m, "A", "B(x) + 1");
        define(&mut m, "B", "C(x)");
        define(&mut m, "C", "blockIdx.x + D");
        define(&mut m, "D", "E");
        define(&mut m, "E", "D + __syncthreads()");
        define(&mut m, "F", "42");
        let m = close(m);
        for name in ["A", "B", "C"] {
            assert_eq!(m[name].virtual_reads, vec!["blockIdx"], "{name}");
            assert!(m[name].barrier, "{name}");
        }
        // D and E use each other: both end with the barrier, neither reads blockIdx.
        assert!(m["D"].barrier && m["E"].barrier);
        assert!(m["D"].virtual_reads.is_empty());
        assert!(!m["F"].barrier && m["F"].virtual_reads.is_empty());
        assert!(m["A"].calls.contains(&"__syncthreads".to_string()));
    }

    #[test]
    fn a_chain_of_thousands_of_macros_closes_at_once() {
        let mut m = BTreeMap::new();
        for i in 0..20_000 {
            define(&mut m, &format!("M{i}"), &format!("M{} + {i}", i + 1));
        }
        define(&mut m, "M20000", "threadIdx.x");
        // One pass: a fixpoint over the map took a round per link (20,000 rounds, each
        // cloning the map).
        let m = close(m);
        assert!(m["M0"].thread_idx && m["M19999"].thread_idx);
    }

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
