//! Shared scalars the whole block reads alike: `__shared__ int n;` written by one thread, then
//! `__syncthreads()`, then read by every thread (`if (n == 0) return;`). Shared memory is
//! varying in general (any thread may write it), but a read of one shared location is the same
//! in every thread where no write of it can run in the same barrier interval, in any thread.
//!
//! The body becomes a graph of its statements (`Cfg`): leaf statements, and each loop's, `if`'s
//! and `switch`'s head, joined as control can pass between them. A read's interval is what
//! threads run between the barriers (or the body's start) from which the read is reached
//! without passing another barrier, and the barriers after it: every thread of the block
//! passes the same `__syncthreads()` (CUDA requires it), so a write outside the interval comes
//! before a barrier every reader has passed, or after one no reader has reached. A read is a
//! broadcast when its interval holds no write of the variable.
//!
//! Only what the analysis can follow: a scalar of a built-in type declared once in the body,
//! whose address is never taken, that no lambda, inline assembly, macro or call that may bind a
//! reference names, in a body without `goto` or statements the graph does not know. A barrier is
//! a `__syncthreads();` statement; other synchronization (helpers, cooperative groups) counts
//! as none, which only makes intervals longer. Anything else keeps every read varying.

use crate::analysis::macros::MacroFacts;
use crate::lang::{self, fields, kinds, text};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use tree_sitter::Node;

/// The start bytes of the reads of the body's shared scalars that are broadcasts. `all`: the
/// body and its descendants; `parents`: each node's parent inside the body; `macros`: the
/// macros the body may use (a macro that names a candidate or jumps gives up).
pub fn broadcast_reads<'t>(
    body: Node<'t>,
    all: &[Node<'t>],
    src: &str,
    parents: &HashMap<usize, Node<'t>>,
    macros: &BTreeMap<String, MacroFacts>,
) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let candidates = shared_scalars(body, all, src);
    if candidates.is_empty() || macros_hide_jumps(all, src, macros) {
        return out;
    }
    let Some(cfg) = Cfg::of(body, src) else {
        return out;
    };
    for (name, declared_at) in candidates {
        if macros.values().any(|m| m.idents.contains(&name)) {
            continue;
        }
        let mut reads = Vec::new();
        let mut writes = BTreeSet::new();
        let mut followed = true;
        for &n in all {
            if n.kind_id() != kinds().identifier
                || text(n, src) != name
                || n.start_byte() == declared_at
            {
                continue;
            }
            let unit = cfg.unit_at(n.start_byte());
            match (use_of(n, src, parents), unit) {
                (Use::Read, Some(u)) => reads.push((n.start_byte(), u)),
                (Use::Read, None) => {}
                (Use::Write, Some(u)) => {
                    writes.insert(u);
                }
                (Use::Write, None) | (Use::Untracked, _) => followed = false,
            }
        }
        if !followed {
            continue;
        }
        out.extend(
            reads
                .into_iter()
                .filter(|(_, u)| cfg.interval(*u).is_disjoint(&writes))
                .map(|(at, _)| at),
        );
    }
    out
}

/// The body's `__shared__` variables of a built-in scalar type, by name: the byte where each is
/// declared. A name declared more than once in the body, or also a parameter, is left out.
fn shared_scalars(body: Node, all: &[Node], src: &str) -> BTreeMap<String, usize> {
    let (k, f) = (kinds(), fields());
    let mut out = BTreeMap::new();
    let mut declared: BTreeMap<String, usize> = BTreeMap::new();
    for &n in all {
        for d in declarator_children(n) {
            if let Some(name) = lang::declarator_name(d) {
                *declared.entry(text(name, src).to_string()).or_default() += 1;
            }
        }
        if n.kind_id() != k.declaration || !has_qualifier(n, src, "__shared__") {
            continue;
        }
        let scalar = n.child_by_field_id(f.r#type).is_some_and(|t| {
            t.kind() == "primitive_type"
                || t.kind() == "sized_type_specifier"
                || t.kind_id() == k.type_identifier && lang::SCALAR_TYPEDEFS.contains(&text(t, src))
        });
        if !scalar {
            continue;
        }
        for d in lang::declarators(n) {
            if d.kind_id() == k.identifier {
                out.insert(text(d, src).to_string(), d.start_byte());
            }
        }
    }
    let parameters = body
        .parent()
        .and_then(|function| function.child_by_field_id(f.declarator))
        .map(|d| text(d, src))
        .unwrap_or_default();
    out.retain(|name, _| {
        declared.get(name) == Some(&1) && !lang::identifiers(parameters).any(|w| w == name)
    });
    out
}

/// The declarators a node declares through its `declarator` fields (declarations, parameters,
/// conditions, range loops, lambdas' parameters).
fn declarator_children(n: Node) -> Vec<Node> {
    if matches!(
        n.kind(),
        "declaration"
            | "parameter_declaration"
            | "optional_parameter_declaration"
            | "for_range_loop"
            | "condition_clause"
    ) {
        lang::declarators(n)
    } else {
        Vec::new()
    }
}

fn has_qualifier(decl: Node, src: &str, word: &str) -> bool {
    let mut c = decl.walk();
    let found = decl
        .children(&mut c)
        .any(|q| q.kind() == "type_qualifier" && text(q, src) == word);
    found
}

/// Whether the body uses a macro whose replacement jumps (`break`, `continue`, `goto`): the
/// graph would miss the edge.
fn macros_hide_jumps(all: &[Node], src: &str, macros: &BTreeMap<String, MacroFacts>) -> bool {
    all.iter()
        .filter(|n| n.kind_id() == kinds().identifier)
        .filter_map(|n| macros.get(text(*n, src)))
        .any(|m| lang::identifiers(&m.text).any(|w| matches!(w, "break" | "continue" | "goto")))
}

/// What an occurrence of a candidate does with it.
#[derive(Debug, PartialEq)]
enum Use {
    Read,
    /// Assigned, incremented or decremented.
    Write,
    /// Its address or a reference to it may escape, or code the graph does not hold names it.
    Untracked,
}

fn use_of<'t>(id: Node<'t>, src: &str, parents: &HashMap<usize, Node<'t>>) -> Use {
    let f = fields();
    // Another variable of the name (`auto [n, m] = ...`, `int n[4]`, a parameter): its reads
    // are not the shared one's.
    if let Some(&p) = parents.get(&id.id()) {
        let declares = p.kind().ends_with("_declarator") && p.kind() != "init_declarator"
            || p.child_by_field_id(f.declarator)
                .is_some_and(|d| d.id() == id.id());
        if declares {
            return Use::Untracked;
        }
    }
    // Code the graph does not follow: a lambda's body runs where it is called, inline PTX
    // writes its operands.
    let mut a = id;
    while let Some(&p) = parents.get(&a.id()) {
        if matches!(
            p.kind(),
            "lambda_expression"
                | "gnu_asm_expression"
                | "gnu_asm_output_operand"
                | "gnu_asm_input_operand"
        ) {
            return Use::Untracked;
        }
        a = p;
    }
    // Up through what keeps the variable itself (an lvalue): parentheses, casts, the arms of
    // `?:`, a comma's right operand.
    let mut child = id;
    while let Some(&p) = parents.get(&child.id()) {
        let keeps = match p.kind() {
            "parenthesized_expression" | "cast_expression" => true,
            "conditional_expression" => p
                .child_by_field_id(f.condition)
                .is_none_or(|c| c.id() != child.id()),
            "comma_expression" => p
                .child_by_field_id(f.right)
                .is_some_and(|r| r.id() == child.id()),
            _ => false,
        };
        if !keeps {
            return match p.kind() {
                "assignment_expression"
                    if p.child_by_field_id(f.left)
                        .is_some_and(|l| l.id() == child.id()) =>
                {
                    Use::Write
                }
                "update_expression" => Use::Write,
                "pointer_expression" => {
                    let address = p
                        .child_by_field_id(f.operator)
                        .is_some_and(|o| text(o, src) == "&");
                    if !address {
                        Use::Read
                    } else if atomic_target(p, src, parents) {
                        Use::Write
                    } else {
                        Use::Untracked
                    }
                }
                "argument_list" => {
                    let callee = parents
                        .get(&p.id())
                        .and_then(|call| call.child_by_field_id(f.function))
                        .map(|c| text(c, src));
                    // A call that may take it by reference; known value functions take copies.
                    if callee.is_some_and(|c| {
                        lang::is_pure_function(c) || lang::UNIFORM_FUNCTIONS.contains(&c)
                    }) {
                        Use::Read
                    } else {
                        Use::Untracked
                    }
                }
                // `{t}` may initialize a reference member; `int& r = t;` binds one.
                "init_declarator" | "initializer_list" => {
                    let binds = p.kind() == "initializer_list"
                        || p.child_by_field_id(f.declarator)
                            .is_some_and(|d| d.kind() == "reference_declarator");
                    if binds {
                        Use::Untracked
                    } else {
                        Use::Read
                    }
                }
                _ => Use::Read,
            };
        }
        child = p;
    }
    Use::Read
}

/// Whether `&x` is the first argument of an atomic built-in (`atomicAdd(&x, v)`,
/// `atomicMax_block(&x, v)`): a write of `x` there, and the address goes nowhere else.
fn atomic_target<'t>(address: Node<'t>, src: &str, parents: &HashMap<usize, Node<'t>>) -> bool {
    let Some(&args) = parents.get(&address.id()) else {
        return false;
    };
    args.kind() == "argument_list"
        && args.named_child(0).is_some_and(|a| a.id() == address.id())
        && parents
            .get(&args.id())
            .and_then(|call| call.child_by_field_id(fields().function))
            .is_some_and(|c| text(c, src).starts_with("atomic"))
}

/// One statement of the graph: a leaf statement, or a loop's, `if`'s or `switch`'s head.
struct Unit {
    range: Range<usize>,
    /// A `__syncthreads();` statement.
    barrier: bool,
    succ: Vec<usize>,
}

/// The body's statements and how control passes between them. Unit 0 is the body's end.
struct Cfg {
    units: Vec<Unit>,
    preds: Vec<Vec<usize>>,
    entry: usize,
}

/// Statements that hold no other statement and run from start to end.
const LEAVES: &[&str] = &[
    "expression_statement",
    "declaration",
    "type_definition",
    "alias_declaration",
    "using_declaration",
    "static_assert_declaration",
];

/// Lines that are no statement at run time.
const SKIPPED: &[&str] = &[
    "comment",
    "preproc_call",
    "preproc_def",
    "preproc_function_def",
    "preproc_include",
];

struct Builder<'s> {
    src: &'s str,
    units: Vec<Unit>,
    /// The targets of `break` (loops and switches) and `continue` (loops), innermost last.
    breaks: Vec<usize>,
    continues: Vec<usize>,
    failed: bool,
}

impl Cfg {
    fn of(body: Node, src: &str) -> Option<Cfg> {
        let mut b = Builder {
            src,
            units: vec![Unit {
                range: body.end_byte()..body.end_byte(),
                barrier: false,
                succ: Vec::new(),
            }],
            breaks: Vec::new(),
            continues: Vec::new(),
            failed: false,
        };
        let entry = b.statement(body, 0);
        if b.failed {
            return None;
        }
        let mut preds = vec![Vec::new(); b.units.len()];
        for (i, u) in b.units.iter().enumerate() {
            for &s in &u.succ {
                preds[s].push(i);
            }
        }
        Some(Cfg {
            units: b.units,
            preds,
            entry,
        })
    }

    /// The innermost unit whose text holds byte `at`.
    fn unit_at(&self, at: usize) -> Option<usize> {
        self.units
            .iter()
            .enumerate()
            .filter(|(_, u)| u.range.contains(&at))
            .min_by_key(|(_, u)| u.range.len())
            .map(|(i, _)| i)
    }

    /// The units any thread may run in the barrier interval of unit `read`.
    fn interval(&self, read: usize) -> BTreeSet<usize> {
        // Where the interval starts: barriers (and the body's start) that reach `read` without
        // passing another barrier.
        let mut starts: Vec<usize> = Vec::new();
        let mut seen = BTreeSet::from([read]);
        let mut stack = vec![read];
        while let Some(u) = stack.pop() {
            if u == self.entry {
                starts.push(u);
            }
            for &p in &self.preds[u] {
                if self.units[p].barrier {
                    starts.extend(self.units[p].succ.iter().copied());
                } else if seen.insert(p) {
                    stack.push(p);
                }
            }
        }
        // Everything run from there up to the next barriers.
        let mut interval = BTreeSet::new();
        while let Some(u) = starts.pop() {
            if self.units[u].barrier || !interval.insert(u) {
                continue;
            }
            starts.extend(self.units[u].succ.iter().copied());
        }
        interval
    }
}

impl<'s> Builder<'s> {
    fn unit(&mut self, range: Range<usize>, succ: Vec<usize>) -> usize {
        self.units.push(Unit {
            range,
            barrier: false,
            succ,
        });
        self.units.len() - 1
    }

    /// A unit for a head (`cond`, or an empty range at `fallback` where the head has none).
    fn head(&mut self, cond: Option<Node>, fallback: usize) -> usize {
        let range = cond.map_or(fallback..fallback, |c| c.byte_range());
        self.unit(range, Vec::new())
    }

    /// The graph of `s`, which continues at unit `next`; returns the unit it starts with.
    fn statement(&mut self, s: Node, next: usize) -> usize {
        let f = fields();
        if self.failed {
            return next;
        }
        let kind = s.kind();
        if SKIPPED.contains(&kind) {
            return next;
        }
        if LEAVES.contains(&kind) {
            if jumps_inside(s) {
                self.failed = true;
                return next;
            }
            let u = self.unit(s.byte_range(), vec![next]);
            self.units[u].barrier = is_barrier(s, self.src);
            return u;
        }
        match kind {
            "compound_statement" => self.sequence(&named_children(s), next),
            "attributed_statement" => match named_children(s)
                .into_iter()
                .rfind(|c| c.kind() != "attribute_declaration")
            {
                Some(inner) => self.statement(inner, next),
                None => next,
            },
            "if_statement" => {
                let cond = s.child_by_field_id(f.condition);
                let then = s
                    .child_by_field_id(f.consequence)
                    .map_or(next, |c| self.statement(c, next));
                let otherwise = match s.child_by_field_id(f.alternative) {
                    Some(e) if e.kind() == "else_clause" => self.sequence(&named_children(e), next),
                    Some(e) => self.statement(e, next),
                    None => next,
                };
                let h = self.head(cond, s.start_byte());
                self.units[h].succ = vec![then, otherwise];
                h
            }
            "while_statement" | "do_statement" | "for_range_loop" => {
                let cond = if kind == "for_range_loop" {
                    s.child_by_field_id(f.right)
                } else {
                    s.child_by_field_id(f.condition)
                };
                let h = self.head(cond, s.start_byte());
                let entry = self.body_of_loop(s, h, next);
                self.units[h].succ = vec![entry, next];
                if kind == "do_statement" {
                    entry
                } else {
                    h
                }
            }
            "for_statement" => {
                let h = self.head(s.child_by_field_id(f.condition), s.start_byte());
                let cont = match s.child_by_field_id(f.update) {
                    Some(u) => self.unit(u.byte_range(), vec![h]),
                    None => h,
                };
                let entry = self.body_of_loop(s, cont, next);
                self.units[h].succ = vec![entry, next];
                match s.child_by_field_id(f.initializer) {
                    Some(i) => self.unit(i.byte_range(), vec![h]),
                    None => h,
                }
            }
            "switch_statement" => {
                let h = self.head(s.child_by_field_id(f.condition), s.start_byte());
                let cases = s
                    .child_by_field_id(f.body)
                    .map(named_children)
                    .unwrap_or_default();
                self.breaks.push(next);
                let mut at = next;
                let mut entries = Vec::new();
                let mut default = false;
                for case in cases.iter().rev().filter(|c| !SKIPPED.contains(&c.kind())) {
                    if case.kind() != "case_statement" {
                        self.failed = true;
                        break;
                    }
                    let value = case.child_by_field_id(f.value);
                    default |= value.is_none();
                    let body: Vec<Node> = named_children(*case)
                        .into_iter()
                        .filter(|c| value.is_none_or(|v| v.id() != c.id()))
                        .collect();
                    at = self.sequence(&body, at);
                    entries.push(at);
                }
                self.breaks.pop();
                if !default {
                    entries.push(next);
                }
                self.units[h].succ = entries;
                h
            }
            "break_statement" => self.breaks.last().copied().unwrap_or_else(|| {
                self.failed = true;
                next
            }),
            "continue_statement" => self.continues.last().copied().unwrap_or_else(|| {
                self.failed = true;
                next
            }),
            // The thread leaves: nothing follows (its value may read, so it is a unit).
            "return_statement" => self.unit(s.byte_range(), Vec::new()),
            "preproc_if" | "preproc_ifdef" | "preproc_elif" | "preproc_elifdef"
            | "preproc_else" => {
                // Whichever branch is compiled: every one is a way through.
                let alternative = s.child_by_field_id(f.alternative);
                let skip: Vec<usize> = [
                    s.child_by_field_id(f.condition),
                    s.child_by_field_id(f.name),
                    alternative,
                ]
                .into_iter()
                .flatten()
                .map(|n| n.id())
                .collect();
                let body: Vec<Node> = named_children(s)
                    .into_iter()
                    .filter(|c| !skip.contains(&c.id()) && c.kind() != "preproc_directive")
                    .collect();
                let this = self.sequence(&body, next);
                let other = alternative.map_or(next, |a| self.statement(a, next));
                self.unit(s.start_byte()..s.start_byte(), vec![this, other])
            }
            // `goto`, labels, `try`, anything else: not followed.
            _ => {
                self.failed = true;
                next
            }
        }
    }

    fn sequence(&mut self, statements: &[Node], next: usize) -> usize {
        let mut at = next;
        for s in statements.iter().rev() {
            at = self.statement(*s, at);
        }
        at
    }

    /// A loop's body, with `continue` going to `cont` and `break` to `next`.
    fn body_of_loop(&mut self, s: Node, cont: usize, next: usize) -> usize {
        let Some(body) = s.child_by_field_id(fields().body) else {
            return cont;
        };
        self.breaks.push(next);
        self.continues.push(cont);
        let entry = self.statement(body, cont);
        self.breaks.pop();
        self.continues.pop();
        entry
    }
}

fn named_children(n: Node) -> Vec<Node> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// `__syncthreads();`
fn is_barrier(s: Node, src: &str) -> bool {
    let f = fields();
    s.kind() == "expression_statement"
        && s.named_child(0)
            .map(lang::strip_parens)
            .is_some_and(|call| {
                call.kind() == "call_expression"
                    && call
                        .child_by_field_id(f.function)
                        .is_some_and(|c| text(c, src) == "__syncthreads")
                    && call
                        .child_by_field_id(f.arguments)
                        .is_some_and(|a| lang::count_named(a) == 0)
            })
}

/// Whether a leaf statement holds a jump of its own (a statement expression's), outside lambdas.
fn jumps_inside(s: Node) -> bool {
    let mut found = false;
    lang::visit(s, |n| {
        if n.kind() == "lambda_expression" {
            return false;
        }
        if matches!(
            n.kind(),
            "break_statement" | "continue_statement" | "return_statement" | "goto_statement"
        ) {
            found = true;
        }
        !found
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines (1-based) of the broadcast reads of `src`'s first function.
    fn broadcast_lines(src: &str) -> Vec<usize> {
        let parsed = crate::parse::parse(src);
        let root = parsed.tree.root_node();
        let mut body = None;
        lang::visit(root, |n| {
            if body.is_none() && n.kind() == "function_definition" {
                body = n.child_by_field_id(fields().body);
            }
            body.is_none()
        });
        let body = body.expect("a function");
        let all = crate::analysis::flow::descendants(body);
        let parents = super::super::parents_within(body);
        let reads = broadcast_reads(body, &all, src, &parents, &BTreeMap::new());
        let lines = lang::LineStarts::new(src);
        reads.into_iter().map(|at| lines.line(at)).collect()
    }

    #[test]
    fn a_read_after_the_barrier_that_follows_the_write_is_a_broadcast() {
        let src = "__global__ void k(int* q, int n) {\n\
                   __shared__ int total;\n\
                   if (threadIdx.x == 0) total = q[0];\n\
                   __syncthreads();\n\
                   if (total == 0) return;\n\
                   q[threadIdx.x] = total;\n\
                   }\n";
        assert_eq!(broadcast_lines(src), vec![5, 6]);
    }

    #[test]
    fn a_read_in_the_interval_of_a_write_is_not() {
        // Before the barrier; after it with a write later in the same interval; in a loop whose
        // next round writes before any barrier.
        let before = "__global__ void k(int* q) {\n__shared__ int t;\nif (threadIdx.x == 0) t = q[0];\nq[1] = t;\n__syncthreads();\n}\n";
        assert_eq!(broadcast_lines(before), Vec::<usize>::new());
        let after = "__global__ void k(int* q) {\n__shared__ int t;\nif (threadIdx.x == 0) t = q[0];\n__syncthreads();\nq[1] = t;\nif (threadIdx.x == 1) t = 2;\n__syncthreads();\n}\n";
        assert_eq!(broadcast_lines(after), Vec::<usize>::new());
        let round = "__global__ void k(int* q) {\n__shared__ int t;\nfor (int i = 0; i < 4; ++i) {\n__syncthreads();\nq[i] = t;\nif (threadIdx.x == i) t = i;\n}\n}\n";
        assert_eq!(broadcast_lines(round), Vec::<usize>::new());
        // The same loop with a barrier after the write: each round's read is a broadcast.
        let fenced = "__global__ void k(int* q) {\n__shared__ int t;\nfor (int i = 0; i < 4; ++i) {\n__syncthreads();\nq[i] = t;\n__syncthreads();\nif (threadIdx.x == i) t = i;\n}\n}\n";
        assert_eq!(broadcast_lines(fenced), vec![5]);
    }

    #[test]
    fn a_loop_that_counts_down_a_shared_scalar_reads_it_alike() {
        let src = "__global__ void k(int* q) {\n\
                   __shared__ int left;\n\
                   if (threadIdx.x == 0) left = q[0];\n\
                   __syncthreads();\n\
                   while (left > 0) {\n\
                   q[threadIdx.x] += left;\n\
                   __syncthreads();\n\
                   if (threadIdx.x == 0) left--;\n\
                   __syncthreads();\n\
                   }\n\
                   }\n";
        assert_eq!(broadcast_lines(src), vec![5, 6]);
    }

    #[test]
    fn escaping_or_hidden_uses_keep_every_read_varying() {
        for (what, extra) in [
            ("its address", "int* p = &t;"),
            ("a reference", "int& r = t;"),
            ("a call that may take a reference", "update(t);"),
            ("a lambda", "auto f = [&] { t = 1; };"),
            ("a goto", "goto out; out:;"),
        ] {
            let src = format!(
                "__global__ void k(int* q) {{\n__shared__ int t;\nif (threadIdx.x == 0) t = q[0];\n__syncthreads();\nq[1] = t;\n{extra}\n}}\n"
            );
            assert_eq!(broadcast_lines(&src), Vec::<usize>::new(), "{what}");
        }
        // An atomic built-in writes it where it is called; its result is no broadcast.
        let counted = "__global__ void k(int* q) {\n__shared__ int t;\nif (threadIdx.x == 0) t = 0;\n__syncthreads();\nint old = atomicAdd(&t, q[threadIdx.x]);\n__syncthreads();\nq[1] = t + old;\n}\n";
        assert_eq!(broadcast_lines(counted), vec![7]);
        let kept = "__global__ void k(int* q) {\n__shared__ int t;\n__syncthreads();\nq[0] = t;\nint old = atomicAdd(&t, 1);\n__syncthreads();\n}\n";
        assert_eq!(broadcast_lines(kept), Vec::<usize>::new());
        // A value function takes a copy.
        let copy = "__global__ void k(int* q) {\n__shared__ int t;\nif (threadIdx.x == 0) t = q[0];\n__syncthreads();\nq[1] = min(t, 4);\n}\n";
        assert_eq!(broadcast_lines(copy), vec![5]);
        // Arrays, and a name declared twice, are not followed.
        let array = "__global__ void k(int* q) {\n__shared__ int t[1];\nif (threadIdx.x == 0) t[0] = q[0];\n__syncthreads();\nq[1] = t[0];\n}\n";
        assert_eq!(broadcast_lines(array), Vec::<usize>::new());
        let twice = "__global__ void k(int* q) {\n__shared__ int t;\nif (threadIdx.x == 0) t = q[0];\n__syncthreads();\nq[1] = t;\n{ int t = threadIdx.x; q[2] = t; }\n}\n";
        assert_eq!(broadcast_lines(twice), Vec::<usize>::new());
        let bound = "__global__ void k(int* q, int2* p) {\n__shared__ int t;\nif (threadIdx.x == 0) t = q[0];\n__syncthreads();\nq[1] = t;\n{ auto [s, t] = p[threadIdx.x]; q[2] = t; }\n}\n";
        assert_eq!(broadcast_lines(bound), Vec::<usize>::new());
    }

    #[test]
    fn switch_cases_and_breaks_are_ways_through() {
        // A case falls through into a write in the read's interval; a break leaves the loop
        // to a write before the next barrier.
        let fall = "__global__ void k(int* q, int c) {\n__shared__ int t;\n__syncthreads();\nswitch (c) {\ncase 0: q[0] = t;\ncase 1: if (threadIdx.x == 0) t = 1;\n}\n__syncthreads();\n}\n";
        assert_eq!(broadcast_lines(fall), Vec::<usize>::new());
        let broken = "__global__ void k(int* q) {\n__shared__ int t;\nwhile (1) {\n__syncthreads();\nif (t > q[0]) break;\n__syncthreads();\n}\nif (threadIdx.x == 0) t = 3;\n}\n";
        assert_eq!(broadcast_lines(broken), Vec::<usize>::new());
        let kept = "__global__ void k(int* q, int c) {\n__shared__ int t;\n__syncthreads();\nswitch (c) {\ncase 0: q[0] = t; break;\ncase 1: q[1] = t; break;\n}\n__syncthreads();\nif (threadIdx.x == 0) t = 1;\n}\n";
        assert_eq!(broadcast_lines(kept), vec![5, 6]);
    }
}
