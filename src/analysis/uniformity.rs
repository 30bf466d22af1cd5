//! Which values and which control flow may differ between the threads of one block.
//!
//! Conservative: a value is *uniform* only if it is built from kernel parameters, constants,
//! blockIdx/blockDim/gridDim and uniform locals. Memory loads, calls to functions we do not
//! know, threadIdx and anything written under thread-dependent control are *varying*. A wrong
//! "varying" costs a predicated rewrite (a little speed); a wrong "uniform" could deadlock, so
//! every doubt goes to varying.

use super::flow::is_loop;
use super::macros::MacroFacts;
use crate::lang::{self, kinds, text};
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

pub struct Uniformity<'t, 'm> {
    src: &'t str,
    body: Node<'t>,
    macros: &'m BTreeMap<String, MacroFacts>,
    varying: BTreeSet<String>,
    /// Loops whose trip count may differ between threads (node ids).
    varying_loops: BTreeSet<usize>,
}

struct Assignment<'t> {
    target: String,
    value: Option<Node<'t>>,
    at: Node<'t>,
}

impl<'t, 'm> Uniformity<'t, 'm> {
    /// `all`: the body and its descendants, in pre-order.
    pub fn new(
        body: Node<'t>,
        all: &[Node<'t>],
        src: &'t str,
        macros: &'m BTreeMap<String, MacroFacts>,
    ) -> Self {
        Self::with_exits(body, all, src, macros, true)
    }

    /// `returns_exit`: false for the predicated form, where a `return` only clears a flag and
    /// the thread goes on through the loops around it.
    pub fn with_exits(
        body: Node<'t>,
        all: &[Node<'t>],
        src: &'t str,
        macros: &'m BTreeMap<String, MacroFacts>,
        returns_exit: bool,
    ) -> Self {
        let mut u = Uniformity {
            src,
            body,
            macros,
            varying: BTreeSet::new(),
            varying_loops: BTreeSet::new(),
        };
        let assignments = u.assignments(all);
        let loops: Vec<Node> = all.iter().copied().filter(|n| is_loop(*n)).collect();
        let exits: Vec<Node> = all
            .iter()
            .copied()
            .filter(|n| {
                let kind = n.kind();
                (returns_exit && n.kind_id() == kinds().return_statement)
                    || kind == "break_statement"
                    || kind == "continue_statement"
                    || kind == "goto_statement"
            })
            .collect();
        loop {
            let mut changed = false;
            for a in &assignments {
                if u.varying.contains(&a.target) {
                    continue;
                }
                if a.value.is_some_and(|v| u.expr_varying(v)) || u.controlled(a.at, None) {
                    u.varying.insert(a.target.clone());
                    changed = true;
                }
            }
            for l in &loops {
                if u.varying_loops.contains(&l.id()) {
                    continue;
                }
                let cond = l
                    .child_by_field_id(crate::lang::fields().condition)
                    .or_else(|| l.child_by_field_id(crate::lang::fields().right));
                let exit_varies = exits.iter().any(|e| {
                    l.byte_range().contains(&e.start_byte())
                        && e.id() != l.id()
                        && u.controlled(*e, Some(*l))
                });
                if cond.is_some_and(|c| u.expr_varying(c)) || exit_varies {
                    u.varying_loops.insert(l.id());
                    changed = true;
                }
            }
            if !changed {
                return u;
            }
        }
    }

    fn assignments(&mut self, all: &[Node<'t>]) -> Vec<Assignment<'t>> {
        let k = kinds();
        let mut out = Vec::new();
        for &n in all {
            let id = n.kind_id();
            if id == k.init_declarator {
                if let Some(name) = n
                    .child_by_field_id(crate::lang::fields().declarator)
                    .and_then(lang::declarator_name)
                {
                    out.push(Assignment {
                        target: text(name, self.src).into(),
                        value: n.child_by_field_id(crate::lang::fields().value),
                        at: n,
                    });
                }
            } else if id == k.declaration && text(n, self.src).contains("__shared__") {
                // Shared memory holds data written by any thread.
                for d in lang::declarators(n) {
                    if let Some(name) = lang::declarator_name(d) {
                        self.varying.insert(text(name, self.src).into());
                    }
                }
            } else if id == k.assignment_expression || id == k.update_expression {
                let target = n
                    .child_by_field_id(crate::lang::fields().left)
                    .or_else(|| n.child_by_field_id(crate::lang::fields().argument));
                if let Some(name) = target.and_then(|t| base_identifier(t, self.src)) {
                    let value = if id == k.assignment_expression {
                        n.child_by_field_id(crate::lang::fields().right)
                    } else {
                        None
                    };
                    out.push(Assignment {
                        target: name,
                        value,
                        at: n,
                    });
                }
            } else if id == k.pointer_expression
                && n.child_by_field_id(crate::lang::fields().operator)
                    .is_some_and(|o| text(o, self.src) == "&")
            {
                // Written through a pointer somewhere we cannot follow.
                if let Some(name) = n
                    .child_by_field_id(crate::lang::fields().argument)
                    .and_then(|a| base_identifier(a, self.src))
                {
                    self.varying.insert(name);
                }
            } else if id == k.for_range_loop {
                if let Some(name) = n
                    .child_by_field_id(crate::lang::fields().declarator)
                    .and_then(lang::declarator_name)
                {
                    out.push(Assignment {
                        target: text(name, self.src).into(),
                        value: n.child_by_field_id(crate::lang::fields().right),
                        at: n,
                    });
                }
            }
        }
        out
    }

    /// Whether the value of `n` may differ between threads of a block.
    pub fn expr_varying(&self, n: Node) -> bool {
        let k = kinds();
        let mut varying = false;
        lang::visit(n, |x| {
            if varying {
                return false;
            }
            let id = x.kind_id();
            if id == k.identifier {
                let name = text(x, self.src);
                varying = lang::THREAD_VARYING.contains(&name)
                    || self.varying.contains(name)
                    || self
                        .macros
                        .get(name)
                        .is_some_and(|m| m.thread_varying || !m.calls.is_empty());
            } else if id == k.subscript_expression || id == k.lambda_expression {
                varying = true; // a memory load, or code we do not follow
            } else if id == k.field_expression {
                varying = x
                    .child_by_field_id(crate::lang::fields().operator)
                    .is_some_and(|o| text(o, self.src) == "->");
            } else if id == k.pointer_expression {
                varying = x
                    .child_by_field_id(crate::lang::fields().operator)
                    .is_some_and(|o| text(o, self.src) == "*");
            } else if id == k.call_expression {
                let f = x.child_by_field_id(crate::lang::fields().function);
                if !f.is_some_and(|f| lang::UNIFORM_FUNCTIONS.contains(&text(f, self.src))) {
                    varying = true;
                }
            }
            !varying
        });
        varying
    }

    /// Whether `n` runs under control flow that may differ between threads, looking at the
    /// enclosing statements up to `stop` (exclusive) or the body.
    pub fn controlled(&self, n: Node, stop: Option<Node>) -> bool {
        let k = kinds();
        let mut child = n;
        while let Some(a) = child.parent() {
            if a.id() == self.body.id() || stop.is_some_and(|s| s.id() == a.id()) {
                return false;
            }
            let id = a.kind_id();
            let cond = a.child_by_field_id(crate::lang::fields().condition);
            let in_cond = cond.is_some_and(|c| c.id() == child.id());
            if id == k.if_statement || id == k.conditional_expression || id == k.switch_statement {
                if !in_cond && cond.is_some_and(|c| self.expr_varying(c)) {
                    return true;
                }
            } else if is_loop(a) {
                if self.varying_loops.contains(&a.id()) {
                    return true;
                }
            } else if a.kind() == "binary_expression" {
                let op = a
                    .child_by_field_id(crate::lang::fields().operator)
                    .map(|o| text(o, self.src));
                let left = a.child_by_field_id(crate::lang::fields().left);
                if matches!(op, Some("&&") | Some("||"))
                    && left.is_some_and(|l| l.id() != child.id() && self.expr_varying(l))
                {
                    return true;
                }
            } else if id == k.lambda_expression {
                return true;
            }
            child = a;
        }
        false
    }
}

/// `x` in `x`, `x.f`, `(x)`: the local that an assignment changes. None for memory.
fn base_identifier(n: Node, src: &str) -> Option<String> {
    let k = kinds();
    let mut x = n;
    loop {
        if x.kind_id() == k.identifier {
            return Some(text(x, src).to_string());
        }
        if x.kind_id() == k.field_expression
            && x.child_by_field_id(crate::lang::fields().operator)
                .is_some_and(|o| text(o, src) == ".")
        {
            x = x.child_by_field_id(crate::lang::fields().argument)?;
            continue;
        }
        if x.kind() == "parenthesized_expression" {
            x = x.named_child(0)?;
            continue;
        }
        return None;
    }
}
