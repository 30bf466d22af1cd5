//! The predicated form of a kernel whose thread-dependent return reaches a barrier.
//!
//! In the original kernel a returned thread exits, and barriers stop waiting for it. A
//! persistent block cannot let a thread exit (the block runs more tasks after this one), so the
//! thread stays with a flag, `__cp_live`, cleared: it skips the work that follows its return but
//! goes through every barrier with the live threads, and votes the neutral value in block
//! reductions (0 for count/or, 1 for and), as an exited thread would not vote at all. Threads of
//! one warp then reach each barrier together, as compute-sanitizer's synccheck requires.
//!
//! That is sound only if returned threads can follow the live ones through the barriers: after
//! a return, a barrier may sit in straight-line code, in braces, or under `if`/loops whose
//! conditions are block-uniform and read no memory (so returned threads compute the same
//! values), or are block reductions themselves. Anything else is refused (CP004), labelled.
//!
//! This module only decides; `rewrite::predicate` turns the steps into edits.

use super::body::{BarrierSite, BodyFacts};
use super::effects::Effects;
use super::flow::{children, descendants, ends, escapes};
use super::uniformity::{FileNames, Uniformity};
use crate::diagnostics::{Code, Diagnostic};
use crate::lang::{self, fields, kinds, text};
use std::collections::BTreeMap;
use std::ops::Range;
use tree_sitter::Node;

/// One change the predicated form makes to the body.
#[derive(Debug, Clone)]
pub enum Step<'t> {
    /// Statements in `range` run only while the thread is live (`guarded`), and returns inside
    /// jump past them to `label`. `braced`: the range is a lone statement (an `if` or loop body
    /// without braces), so the pieces are wrapped in braces to stay one statement.
    Run {
        range: Range<usize>,
        guarded: bool,
        label: Option<u32>,
        braced: bool,
    },
    /// A `return`: clears `__cp_live`, then jumps to `label` when it is inside a run.
    Return { node: Node<'t>, label: Option<u32> },
    /// A declaration's initializer that reads memory or calls: evaluated only while live.
    LiveInit { value: Node<'t> },
    /// A block reduction's argument list: returned threads vote the neutral value.
    NeutralVote { args: Node<'t>, and: bool },
}

#[derive(Debug, Clone, Default)]
pub struct Predication<'t> {
    pub steps: Vec<Step<'t>>,
}

/// Plans the predicated form of `body`; Err: why it cannot be predicated.
pub fn plan<'t>(
    body: Node<'t>,
    params: &[String],
    facts: &BodyFacts<'t>,
    src: &'t str,
    names: &FileNames<'t, '_>,
    hazard: (Range<usize>, Range<usize>),
) -> Result<Predication<'t>, Diagnostic> {
    let all = &facts.nodes;
    let mut w = Walker {
        src,
        facts,
        uni: None,
        body,
        names,
        returns: facts
            .returns
            .iter()
            .filter(|r| r.node.kind_id() == kinds().return_statement)
            .map(|r| r.node)
            .collect(),
        effects: Effects::new(all, src, params),
        all,
        control: BTreeMap::new(),
        guarded: Vec::new(),
        steps: Vec::new(),
        labels: 0,
        hazard,
    };
    let (goto, label) = (kinds().goto_statement, kinds().labeled_statement);
    if let Some(g) = all
        .iter()
        .find(|n| n.kind_id() == goto || n.kind_id() == label)
    {
        return Err(w.refusal(g.byte_range(), "`goto` and labels are not predicated"));
    }
    w.sequence(&children(body), false, false)?;
    w.check_control_writes()?;
    Ok(Predication { steps: w.steps })
}

struct Walker<'a, 't> {
    src: &'t str,
    facts: &'a BodyFacts<'t>,
    /// Built on first use: most predicated kernels have no condition to check.
    uni: Option<Uniformity<'t, 'a>>,
    body: Node<'t>,
    /// The file's names, for the uniformity analysis.
    names: &'a FileNames<'t, 'a>,
    returns: Vec<Node<'t>>,
    /// The body and its descendants, in pre-order.
    all: &'a [Node<'t>],
    /// What the body's expressions read and write.
    effects: Effects<'a, 't>,
    /// Variables read by conditions that returned threads evaluate, and where.
    control: BTreeMap<String, Range<usize>>,
    /// Ranges that returned threads skip.
    guarded: Vec<Range<usize>>,
    steps: Vec<Step<'t>>,
    labels: u32,
    hazard: (Range<usize>, Range<usize>),
}

/// What a statement needs.
enum Class {
    /// It stands apart and ends any run: it runs for every thread as written, or its own steps
    /// are recorded.
    Apart,
    /// Part of a run of statements that returned threads skip (`exposed`: a return may come
    /// before it; otherwise it is only there for the returns it holds).
    Run { exposed: bool },
}

struct OpenRun<'t> {
    start: usize,
    last: Node<'t>,
    exposed: bool,
}

impl<'a, 't> Walker<'a, 't> {
    fn refusal(&self, at: Range<usize>, why: &str) -> Diagnostic {
        Diagnostic::new(
            Code::BarrierHazard,
            format!("a thread-dependent return reaches a barrier, and {why}"),
        )
        .label(self.hazard.0.clone(), "this return depends on the thread")
        .label(self.hazard.1.clone(), "and can reach this barrier")
        .label(at, "returned threads cannot follow the live ones here")
        .help("returned threads must pass the same barriers as live ones: keep barriers in straight-line code or under conditions that are the same in every thread of the block, or make the return block-uniform")
    }

    /// `stmts`: a compound statement's children, or one statement (`single`: an `if` or loop
    /// body without braces). `in_loop`: inside a loop that holds a barrier.
    fn sequence(
        &mut self,
        stmts: &[Node<'t>],
        single: bool,
        in_loop: bool,
    ) -> Result<(), Diagnostic> {
        let k = kinds();
        let mut run: Option<OpenRun<'t>> = None;
        // Comments and `#pragma`s just before a run belong to it (`#pragma unroll` must stay
        // right before its loop).
        let mut lead: Option<usize> = None;
        for &s in stmts {
            if s.kind_id() == k.comment || s.kind_id() == k.preproc_call {
                if run.is_none() && lead.is_none() {
                    lead = Some(s.start_byte());
                }
                continue;
            }
            match self.classify(s, in_loop)? {
                Class::Run { exposed } => {
                    // A statement that holds the first return stays out of the guarded run that
                    // follows it, so that its return needs no jump.
                    if let Some(r) = run.take_if(|r| r.exposed != exposed) {
                        self.close(r, single);
                    }
                    match run.as_mut() {
                        Some(r) => r.last = s,
                        None => {
                            run = Some(OpenRun {
                                start: lead.unwrap_or(s.start_byte()),
                                last: s,
                                exposed,
                            })
                        }
                    }
                }
                Class::Apart => {
                    if let Some(r) = run.take() {
                        self.close(r, single);
                    }
                }
            }
            lead = None;
        }
        if let Some(r) = run.take() {
            self.close(r, single);
        }
        Ok(())
    }

    fn close(&mut self, r: OpenRun<'t>, single: bool) {
        let range = r.start..r.last.end_byte();
        let inside: Vec<Node<'t>> = self
            .returns
            .iter()
            .copied()
            .filter(|x| range.contains(&x.start_byte()))
            .collect();
        let needs_jump: Vec<bool> = inside.iter().map(|x| !ends(*x, r.last)).collect();
        let label = needs_jump.iter().any(|j| *j).then(|| {
            self.labels += 1;
            self.labels
        });
        for (x, jump) in inside.into_iter().zip(needs_jump) {
            self.steps.push(Step::Return {
                node: x,
                label: if jump { label } else { None },
            });
        }
        if r.exposed {
            self.guarded.push(range.clone());
        }
        if r.exposed || label.is_some() {
            self.steps.push(Step::Run {
                range,
                guarded: r.exposed,
                label,
                braced: single && label.is_some(),
            });
        }
    }

    fn classify(&mut self, s: Node<'t>, in_loop: bool) -> Result<Class, Diagnostic> {
        let k = kinds();
        let range = s.byte_range();
        let has_return = self.returns.iter().any(|r| range.contains(&r.start_byte()));
        let exposed = self.exposed(&range);
        if s.kind_id() == k.return_statement {
            self.steps.push(Step::Return {
                node: s,
                label: None,
            });
            return Ok(Class::Apart);
        }
        let sync = self.has_barrier(&range) || (in_loop && escapes(s));
        if !exposed && !has_return {
            return Ok(Class::Apart); // every thread is live here
        }
        if sync {
            self.sync_statement(s, in_loop)?;
            return Ok(Class::Apart);
        }
        if s.kind_id() == k.declaration {
            self.declaration(s)?;
            return Ok(Class::Apart);
        }
        if matches!(s.kind(), "preproc_if" | "preproc_ifdef") {
            // Guarded whole, as one statement: whichever branch is compiled runs only while
            // live (`#if __CUDA_ARCH__ >= 300` around a store before a barrier, OpenCV's
            // pyramidal Lucas-Kanade). A return inside would need its own steps, and a
            // declaration would end up inside the guard's braces, out of reach of what follows.
            if has_return || declares_in_branches(s) {
                return Err(self.refusal(range, "conditional compilation follows it"));
            }
        }
        if s.kind() == "expression_statement" && self.effects.local_writes_only(s) {
            return Ok(Class::Apart); // returned threads compute it too: it may feed a condition
        }
        Ok(Class::Run { exposed })
    }

    /// A statement holding a barrier (or a `break`/`continue` of a loop that does), that
    /// returned threads must go through.
    fn sync_statement(&mut self, s: Node<'t>, in_loop: bool) -> Result<(), Diagnostic> {
        let k = kinds();
        let f = fields();
        let id = s.kind_id();
        match s.kind() {
            "break_statement" | "continue_statement" => Ok(()),
            "expression_statement" => {
                let e = s.named_child(0).map(lang::strip_parens);
                let call = e.and_then(|e| {
                    self.barrier_call(e).or_else(|| {
                        let assigns_local = e.kind_id() == k.assignment_expression
                            && e.child_by_field_id(f.left)
                                .is_some_and(|l| self.effects.is_local(l));
                        let right = e.child_by_field_id(f.right).map(lang::strip_parens);
                        right
                            .filter(|_| assigns_local)
                            .and_then(|r| self.barrier_call(r))
                    })
                });
                match call {
                    Some(b) => self.vote(b),
                    None => Err(self.refusal(s.byte_range(), "this statement does more than synchronize (write `int c = __syncthreads_count(p);` on its own line)")),
                }
            }
            "declaration" => self.declaration(s),
            "compound_statement" => self.sequence(&children(s), false, in_loop),
            "if_statement" => {
                let clause = s.child_by_field_id(f.condition);
                let cond = clause.and_then(|c| {
                    if c.kind_id() == k.condition_clause {
                        (c.named_child_count() == 1)
                            .then(|| c.child_by_field_id(f.value))
                            .flatten()
                    } else {
                        Some(c)
                    }
                });
                let Some(cond) = cond else {
                    return Err(self.refusal(s.byte_range(), "this `if` declares in its condition"));
                };
                self.condition(cond)?;
                if let Some(then) = s.child_by_field_id(f.consequence) {
                    self.branch(then, in_loop)?;
                }
                if let Some(other) = s.child_by_field_id(f.alternative) {
                    let stmt = if other.kind() == "else_clause" {
                        other.named_child(0)
                    } else {
                        Some(other)
                    };
                    if let Some(stmt) = stmt {
                        self.branch(stmt, in_loop)?;
                    }
                }
                Ok(())
            }
            _ if id == k.for_statement => {
                if let Some(init) = s.child_by_field_id(f.initializer) {
                    if !self.effects.local_effects_only(init) {
                        return Err(self.refusal(
                            init.byte_range(),
                            "this loop's initializer reads memory or has effects",
                        ));
                    }
                }
                if let Some(c) = s.child_by_field_id(f.condition) {
                    self.condition(c)?;
                }
                if let Some(u) = s.child_by_field_id(f.update) {
                    if !self.effects.local_effects_only(u) {
                        return Err(self.refusal(
                            u.byte_range(),
                            "this loop's update reads memory or writes it",
                        ));
                    }
                }
                self.loop_body(s)
            }
            _ if id == k.while_statement || id == k.do_statement => {
                let c = s.child_by_field_id(f.condition).map(|c| {
                    if c.kind_id() == k.condition_clause {
                        c.child_by_field_id(f.value).unwrap_or(c)
                    } else {
                        c
                    }
                });
                match c {
                    Some(c) => self.condition(c)?,
                    None => {
                        return Err(
                            self.refusal(s.byte_range(), "this loop has no condition we can read")
                        )
                    }
                }
                self.loop_body(s)
            }
            other => Err(self.refusal(
                s.byte_range(),
                &format!("a barrier sits inside a `{}`", other.replace('_', " ")),
            )),
        }
    }

    fn loop_body(&mut self, s: Node<'t>) -> Result<(), Diagnostic> {
        match s.child_by_field_id(fields().body) {
            Some(b) => self.branch(b, true),
            None => Ok(()),
        }
    }

    fn branch(&mut self, stmt: Node<'t>, in_loop: bool) -> Result<(), Diagnostic> {
        if stmt.kind_id() == kinds().compound_statement {
            self.sequence(&children(stmt), false, in_loop)
        } else {
            self.sequence(&[stmt], true, in_loop)
        }
    }

    /// A condition that returned threads evaluate: a block reduction (its result is the same
    /// everywhere) or a block-uniform expression that reads no memory.
    fn condition(&mut self, c: Node<'t>) -> Result<(), Diagnostic> {
        let e = lang::strip_parens(c);
        if let Some(b) = self.barrier_call(e) {
            return self.vote(b);
        }
        if self.effects.pure(e) && !self.uniformity().expr_varying(e) {
            for n in descendants(e) {
                if n.kind_id() == kinds().identifier {
                    self.control
                        .entry(text(n, self.src).to_string())
                        .or_insert(n.byte_range());
                }
            }
            return Ok(());
        }
        Err(self.refusal(
            c.byte_range(),
            "this condition may differ between threads or reads memory",
        ))
    }

    fn uniformity(&mut self) -> &Uniformity<'t, 'a> {
        let (body, src, names) = (self.body, self.src, self.names);
        let all = self.all;
        self.uni.get_or_insert_with(|| {
            let blocks = super::body::thread_block_variables(all, src);
            Uniformity::with_exits(body, all, names, blocks, false)
        })
    }

    fn vote(&mut self, b: BarrierSite<'t>) -> Result<(), Diagnostic> {
        let and = match b.method {
            "sync" => return Ok(()),
            "sync_and" => true,
            _ => false,
        };
        match b.node.child_by_field_id(fields().arguments) {
            Some(args) if lang::count_named(args) == 1 => {
                self.steps.push(Step::NeutralVote { args, and });
                Ok(())
            }
            _ => Err(self.refusal(b.range(), "this block reduction does not take one argument")),
        }
    }

    fn declaration(&mut self, d: Node<'t>) -> Result<(), Diagnostic> {
        let k = kinds();
        let f = fields();
        for decl in lang::declarators(d) {
            if decl.kind_id() != k.init_declarator {
                continue;
            }
            let Some(value) = decl.child_by_field_id(f.value) else {
                continue;
            };
            let v = lang::strip_parens(value);
            if let Some(b) = self.barrier_call(v) {
                self.vote(b)?;
                continue;
            }
            if self.has_barrier(&value.byte_range()) {
                return Err(self.refusal(
                    value.byte_range(),
                    "this initializer does more than synchronize",
                ));
            }
            if self.effects.pure(value) {
                continue; // returned threads compute it too, harmlessly
            }
            let plain = decl
                .child_by_field_id(f.declarator)
                .is_some_and(|x| matches!(x.kind(), "identifier" | "pointer_declarator"));
            let list = value.kind() == "initializer_list" || value.kind_id() == k.argument_list;
            if !plain || list {
                return Err(self.refusal(decl.byte_range(), "this declaration reads memory in a form that cannot be made conditional (write `T x = expr;`)"));
            }
            self.steps.push(Step::LiveInit { value });
        }
        Ok(())
    }

    /// Guarded code must not change what returned threads' conditions read.
    fn check_control_writes(&self) -> Result<(), Diagnostic> {
        let k = kinds();
        for n in self.all {
            if n.kind_id() != k.assignment_expression && n.kind_id() != k.update_expression {
                continue;
            }
            if !self.guarded.iter().any(|r| r.contains(&n.start_byte())) {
                continue;
            }
            let target = n
                .child_by_field_id(fields().left)
                .or_else(|| n.child_by_field_id(fields().argument))
                .map(|t| text(lang::strip_parens(t), self.src));
            if let Some(cond) = target.and_then(|t| self.control.get(t)) {
                return Err(self
                    .refusal(n.byte_range(), "this write, which returned threads skip, changes a value that a barrier's condition reads")
                    .label(cond.clone(), "read here"));
            }
        }
        Ok(())
    }

    fn exposed(&self, range: &Range<usize>) -> bool {
        self.returns
            .iter()
            .any(|r| self.facts.reaches(&r.byte_range(), range))
    }

    fn has_barrier(&self, range: &Range<usize>) -> bool {
        self.facts
            .barriers
            .iter()
            .any(|b| range.contains(&b.node.start_byte()))
    }

    fn barrier_call(&self, e: Node<'t>) -> Option<BarrierSite<'t>> {
        self.facts
            .barriers
            .iter()
            .copied()
            .find(|b| b.node.id() == e.id())
    }
}

/// Whether a branch of a preprocessor conditional (or of one nested in it) declares a name
/// as one of its own statements.
fn declares_in_branches(n: Node) -> bool {
    let mut c = n.walk();
    let found = n.named_children(&mut c).any(|x| match x.kind() {
        "declaration" => true,
        "preproc_if" | "preproc_ifdef" | "preproc_else" | "preproc_elif" | "preproc_elifdef" => {
            declares_in_branches(x)
        }
        _ => false,
    });
    found
}

#[cfg(test)]
mod tests {
    use crate::analysis::analyze;
    use crate::options::Options;

    fn refused_because(body: &str, why: &str) {
        let src = format!(
            "__global__ void k(const float* in, float* out, int n, int m) {{\n{body}\n}}\n"
        );
        let parsed = crate::parse::parse(&src);
        let a = analyze(&parsed, &src, &Options::default());
        assert!(!a.kernels[0].transformed(), "{body}");
        let d = a
            .diagnostics
            .iter()
            .find(|d| d.is_refusal())
            .expect("a refusal");
        assert_eq!(d.code.id(), "CP004");
        assert!(d.message.contains(why), "{}", d.message);
        assert!(
            d.labels.len() >= 3,
            "return, barrier and the construct: {d:?}"
        );
    }

    const HEAD: &str = "  __shared__ float s[64];\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n";

    #[test]
    fn a_barrier_under_a_thread_dependent_condition_is_refused() {
        refused_because(
            &format!("{HEAD}  if (threadIdx.x < 32) {{ __syncthreads(); }}"),
            "condition may differ",
        );
    }

    #[test]
    fn a_loop_bound_read_from_memory_is_refused() {
        refused_because(
            &format!("{HEAD}  for (int k = 0; k < (int)in[0]; ++k) __syncthreads();"),
            "condition may differ",
        );
    }

    fn predicated(body: &str) -> bool {
        let src = format!(
            "__global__ void k(const int* lens, const float* in, float* out, int m) {{\n{body}\n}}\n"
        );
        let parsed = crate::parse::parse(&src);
        let a = analyze(&parsed, &src, &Options::default());
        a.kernels[0].transformed()
    }

    #[test]
    fn a_bound_every_thread_loaded_before_the_return_is_followed() {
        // One row per block, its length read through a read-only parameter at the block's
        // index by every thread before any returns: returned threads hold the same bound.
        let ragged = "  int n = min(lens[blockIdx.x], m);\n  if (blockIdx.y > 7) return;\n  if ((int)threadIdx.x >= n) return;\n  for (int r = 0; r < n; ++r) { __syncthreads(); out[threadIdx.x] += in[r]; }";
        assert!(predicated(ragged));
        // Loaded after the thread-dependent return: returned threads skip the load.
        assert!(!predicated("  if ((int)threadIdx.x >= m) return;\n  int n = lens[blockIdx.x];\n  for (int r = 0; r < n; ++r) __syncthreads();"));
        // Loaded in a loop that also returns: a later round's load is skipped by the returned.
        assert!(!predicated("  for (int t = 0; t < m; ++t) {\n    int n = lens[blockIdx.x + t];\n    if ((int)threadIdx.x >= n) return;\n    for (int r = 0; r < n; ++r) __syncthreads();\n  }"));
        // Through a parameter the kernel may write, or at a thread's index: not uniform.
        assert!(!predicated("  int n = lens[threadIdx.x];\n  if ((int)threadIdx.x >= m) return;\n  for (int r = 0; r < n; ++r) __syncthreads();"));
        assert!(!predicated("  int n = (int)out[blockIdx.x];\n  if ((int)threadIdx.x >= m) return;\n  for (int r = 0; r < n; ++r) __syncthreads();\n  out[threadIdx.x] = 0;"));
        // Not `const`, but never written by the kernel: as constant as a `const` one.
        assert!(predicated("  int n = (int)out[blockIdx.x];\n  if ((int)threadIdx.x >= m) return;\n  for (int r = 0; r < n; ++r) __syncthreads();"));
    }

    #[test]
    fn a_barrier_mixed_with_work_is_refused() {
        refused_because(
            &format!("{HEAD}  out[i] = __syncthreads_count(1);"),
            "does more than synchronize",
        );
    }

    #[test]
    fn a_skipped_write_to_a_barrier_condition_is_refused() {
        refused_because(&format!("{HEAD}  int rounds = m;\n  if (in[i] > 0) rounds = 3;\n  for (int r = 0; r < rounds; ++r) __syncthreads();"), "condition may differ");
        refused_because(&format!("{HEAD}  int rounds = m;\n  if (m > 2) {{ out[i] = 1; rounds = 3; }}\n  for (int r = 0; r < rounds; ++r) __syncthreads();"), "returned threads skip");
    }

    #[test]
    fn goto_and_switch_are_refused() {
        refused_because(
            &format!("{HEAD}  goto end;\n  __syncthreads();\n  end: out[i] = 1;"),
            "`goto`",
        );
        refused_because(
            &format!("{HEAD}  switch (m) {{ case 1: __syncthreads(); }}"),
            "switch statement",
        );
    }
}
