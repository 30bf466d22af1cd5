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
//! Synchronizing helpers. A call after the return of a helper of this file that synchronizes
//! the block (`stage(s, v, i);`, `x = block_sum(x);`) is a barrier the returned threads must
//! reach too: it calls the helper's live copy, `stage__cp_live(__cp_live, s, v, i)`, whose
//! body is predicated as a kernel's is, every statement exposed (a thread may enter it
//! returned). Its own returns clear its copy of the flag; a value-returning helper returns
//! once, at its end, a value that returned threads do not compute (`live_value`). Arguments
//! that read memory are evaluated only while live. Its parameters are uniform where the call
//! passes uniform values, its conditions are checked as the kernel's are, and the synchronizing
//! helpers it calls get live copies in turn. A helper that reads blockIdx/gridDim gets a copy of
//! its task-context form (`H__cp_live(__cp, __cp_live, ...)`). A member, a helper defined after
//! its caller or in another file, one of several overloads, a recursive one, or one whose
//! default arguments read blockIdx is refused, labelled.
//!
//! This module only decides; `rewrite::predicate` turns the steps into edits.

use super::body::{BarrierSite, BodyFacts, Call};
use super::callgraph::CallGraph;
use super::effects::Effects;
use super::flow::{children, descendants, enclosing_loop, ends, escaping_jumps};
use super::uniformity::{FileNames, Uniformity};
use super::{FunctionSite, HelperPlan};
use crate::diagnostics::{Code, Diagnostic};
use crate::lang::{self, fields, kinds, text};
use crate::program::KnownHelper;
use std::collections::{BTreeMap, BTreeSet};
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
    /// A `return`: clears `__cp_live`, then jumps to `label` when it is inside a run. `hold`:
    /// in a live copy that returns at its end what its returns stored, a live thread first
    /// stores the value in `__cp_ret`.
    Return {
        node: Node<'t>,
        label: Option<u32>,
        hold: bool,
    },
    /// A declaration's initializer that reads memory or calls: evaluated only while live.
    LiveInit { value: Node<'t> },
    /// A declaration that constructs its variable from arguments that read memory or call
    /// (`Span s(in[i], in[j]);`, `T x{a, b};`): it becomes `T x = live_value(__cp_live, [&] {
    /// return T(...); })`. `value`: the argument or initializer list; `ty`: the declared type's
    /// text; `assigned`: the declarator already has `=` (`T x = {a, b}`).
    LiveConstruct {
        value: Node<'t>,
        ty: String,
        assigned: bool,
    },
    /// A block reduction's argument list: returned threads vote the neutral value.
    NeutralVote { args: Node<'t>, and: bool },
    /// A call of a synchronizing helper: it calls the live copy (`name`: the callee's name),
    /// passing the flag first; the arguments in `wrap` read memory and are evaluated only while
    /// live.
    LiveCall {
        name: Range<usize>,
        args: Node<'t>,
        wrap: Vec<Node<'t>>,
        /// The helper takes the task context, which the call passes first (the flag follows).
        ctx: bool,
    },
}

#[derive(Debug, Clone, Default)]
pub struct Predication<'t> {
    pub steps: Vec<Step<'t>>,
    /// The predicated loops (`plan_loops`); where there are any, the flag is each loop's own,
    /// and the body has none (a kernel with a thread-dependent return before a barrier has no
    /// predicated loop).
    pub loops: Vec<PredicatedLoop<'t>>,
    /// The live copies the steps call, directly or through other copies, callees first.
    pub live_helpers: Vec<LiveHelper<'t>>,
    /// Calls that returned threads skip (in the body or a live copy) of functions this file
    /// does not define: whether they synchronize the block the analysis may not know (the
    /// CP200 note names them).
    pub unseen_calls: Vec<UnseenCall>,
}

/// A loop whose rounds differ between threads, predicated: a thread whose rounds have ended
/// (its condition false once) stays in the loop with its own `__cp_live` cleared, skips the
/// work of the rounds the others still run (the walk's steps) and passes their barriers; the
/// loop ends once no thread is live.
#[derive(Debug, Clone)]
pub struct PredicatedLoop<'t> {
    pub node: Node<'t>,
    /// The condition's expression: live threads evaluate it, and it clears the flag.
    pub condition: Node<'t>,
    /// A `for` loop's update that only live threads may run: it writes a variable that
    /// outlives the loop, or memory.
    pub guarded_update: Option<Node<'t>>,
    /// The body's first barrier, a `__syncthreads();` of its own: it becomes the loop's exit
    /// test (`if (!__syncthreads_or(__cp_live)) break;`). Without one the condition holds the
    /// test, a barrier of its own per round.
    pub exit_barrier: Option<Node<'t>>,
}

/// A call of a function this file does not define, which returned threads skip.
#[derive(Debug, Clone)]
pub struct UnseenCall {
    pub name: String,
    pub range: Range<usize>,
}

/// A synchronizing helper's live copy: the helper (an index into the analysis' helpers) and
/// how its body is predicated.
#[derive(Debug, Clone)]
pub struct LiveHelper<'t> {
    pub helper: usize,
    pub steps: Vec<Step<'t>>,
    /// Calls of unseen functions its body skips in returned threads (`Predication::unseen_calls`).
    pub unseen_calls: Vec<UnseenCall>,
    /// The type of `__cp_ret`, where the helper returns a value in several places
    /// (`CopyResult::Held`).
    pub result_type: Option<String>,
}

/// Where the calls of synchronizing helpers lead: the file's helpers and their call graph.
#[derive(Clone, Copy)]
pub struct Helpers<'a, 't> {
    pub plans: &'a [HelperPlan<'t>],
    pub graph: &'a CallGraph,
    /// The functions of other files in the run (`Options::known_helpers`).
    pub known: &'a [KnownHelper],
}

/// A function body the walker predicates: a kernel's, or a helper's live copy.
enum Body<'t> {
    Kernel,
    /// A helper's live copy: every statement is exposed; `result`: how the copy returns the
    /// helper's value; `helper`: its name (refusals name it); `varying_params`: its parameters
    /// that some call passes a value that may differ between threads
    /// (`Uniformity::for_live_helper`).
    LiveCopy {
        result: CopyResult<'t>,
        helper: String,
        varying_params: BTreeSet<String>,
    },
    /// A predicated loop's body (`plan_loops`): every statement in it is exposed, to threads
    /// whose rounds have ended; `head`: the loop's head (refusals label it).
    Loop {
        body: Node<'t>,
        head: Range<usize>,
    },
}

/// How a live copy returns its helper's value; returned threads compute none and get a
/// value-initialized one.
enum CopyResult<'t> {
    /// A `void` helper.
    Void,
    /// One `return` at the end: its value goes through `live_value`.
    AtEnd(Node<'t>),
    /// Returns in several places: each stores its value in `__cp_ret` (of this type, declared
    /// value-initialized at the top) while live, and the copy returns `__cp_ret` at its end.
    Held(String),
}

/// Plans the predicated form of a kernel whose thread-dependent return reaches a barrier
/// (`hazard`: the two); Err: why it cannot be predicated.
pub fn plan<'t>(
    scope: &Scope<'_, 't>,
    hazard: (Range<usize>, Range<usize>),
) -> Result<Predication<'t>, Diagnostic> {
    let mut out = Predication::default();
    walked(scope, hazard, Body::Kernel, &mut out)?;
    Ok(out)
}

/// What both plans walk in: the kernel (its parameters' names, its body's facts) and the file.
pub struct Scope<'a, 't> {
    pub site: &'a FunctionSite<'t>,
    pub params: &'a [String],
    pub facts: &'a BodyFacts<'t>,
    pub src: &'t str,
    pub names: &'a FileNames<'t, 'a>,
    pub helpers: Helpers<'a, 't>,
}

/// Walks one body (`kind`) and adds its steps, live copies and unseen calls to `out`. Labels
/// are numbered after `out`'s steps: they are the function's, never reused.
fn walked<'a, 't>(
    s: &Scope<'a, 't>,
    hazard: (Range<usize>, Range<usize>),
    kind: Body<'t>,
    out: &mut Predication<'t>,
) -> Result<(), Diagnostic> {
    let mut w = Walker::new(
        s.site,
        &s.facts.nodes,
        s.params,
        s.facts,
        s.src,
        s.names,
        s.helpers,
        hazard,
        kind,
    );
    w.labels = out.steps.len() as u32;
    w.walk()?;
    out.unseen_calls.extend(w.unseen_calls());
    for l in &w.live {
        out.unseen_calls.extend(l.unseen_calls.iter().cloned());
    }
    out.steps.append(&mut w.steps);
    out.live_helpers.append(&mut w.live);
    Ok(())
}

/// Plans the predicated loops of a kernel (`decide::predicable_loop`): each loop's body is
/// walked as a body after a return is (every statement exposed, to the threads whose rounds
/// have ended), with the conditions of its barriers checked the same way. Err: why one cannot
/// be predicated.
pub fn plan_loops<'t>(
    scope: &Scope<'_, 't>,
    loops: &[Node<'t>],
) -> Result<Predication<'t>, Diagnostic> {
    let f = fields();
    let k = kinds();
    let Scope {
        site,
        params,
        facts,
        src,
        helpers,
        ..
    } = *scope;
    let effects = Effects::new(&facts.nodes, src, params);
    let mut out = Predication::default();
    for &l in loops {
        let (Some(body), Some(condition)) =
            (l.child_by_field_id(f.body), super::flow::loop_condition(l))
        else {
            continue; // `decide::predicable_loop` lets none such through
        };
        let barrier = first_barrier(facts, helpers, body);
        let head = super::decide::loop_head(l);
        let hazard = (
            head.clone(),
            barrier.map_or(body.byte_range(), |b| b.byte_range()),
        );
        walked(scope, hazard, Body::Loop { body, head }, &mut out)?;
        let guarded_update = l.child_by_field_id(f.update).filter(|u| {
            !(effects.local_effects_only(*u) && writes_declared_within(*u, l, site.body, src))
        });
        // The body's first barrier, where it is a `__syncthreads();` of the body's own list:
        // before it, threads whose rounds have ended do nothing that shows, so a round in which
        // no thread is live may as well end there.
        let exit_barrier = barrier
            .and_then(|b| b.parent())
            .filter(|st| {
                st.kind() == "expression_statement"
                    && st.parent().is_some_and(|p| p.id() == body.id())
            })
            .filter(|st| {
                st.named_child(0).map(lang::strip_parens).is_some_and(|e| {
                    e.kind_id() == k.call_expression
                        && e.child_by_field_id(f.function)
                            .is_some_and(|n| text(n, src) == "__syncthreads")
                        && e.child_by_field_id(f.arguments)
                            .is_some_and(|a| lang::count_named(a) == 0)
                })
            });
        out.loops.push(PredicatedLoop {
            node: l,
            condition,
            guarded_update,
            exit_barrier,
        });
    }
    Ok(out)
}

/// The first barrier in `body` (a barrier of the facts, or a call of a synchronizing helper).
fn first_barrier<'t>(
    facts: &BodyFacts<'t>,
    helpers: Helpers<'_, 't>,
    body: Node<'t>,
) -> Option<Node<'t>> {
    let within = |n: &Node| body.byte_range().contains(&n.start_byte());
    let barriers = facts.barriers.iter().map(|b| b.node);
    let calls = facts
        .calls
        .iter()
        .filter(|c| helpers.graph.calls_barrier(c, helpers.plans))
        .map(|c| c.node);
    barriers
        .chain(calls)
        .filter(within)
        .min_by_key(|n| n.start_byte())
}

/// Whether every variable that `s` assigns or steps is declared inside `within` (a scope of
/// the function body `body`).
fn writes_declared_within(s: Node, within: Node, body: Node, src: &str) -> bool {
    let k = kinds();
    let f = fields();
    descendants(s).into_iter().all(|n| {
        let target = if n.kind_id() == k.assignment_expression {
            n.child_by_field_id(f.left)
        } else if n.kind_id() == k.update_expression {
            n.child_by_field_id(f.argument)
        } else {
            return true;
        };
        target.is_some_and(|t| {
            let t = lang::strip_parens(t);
            t.kind_id() == k.identifier
                && declaring_scope(n, text(t, src), body, src)
                    .is_some_and(|r| within.byte_range().contains(&r.start))
        })
    })
}

struct Walker<'a, 't> {
    src: &'t str,
    facts: &'a BodyFacts<'t>,
    /// Built on first use: most predicated kernels have no condition to check.
    uni: Option<Uniformity<'t, 'a>>,
    /// The function whose body is walked (the kernel, or the helper of a live copy).
    site: &'a FunctionSite<'t>,
    body: Node<'t>,
    /// The file's names, for the uniformity analysis.
    names: &'a FileNames<'t, 'a>,
    returns: Vec<Node<'t>>,
    /// The body and its descendants, in pre-order.
    all: &'a [Node<'t>],
    /// What the body's expressions read and write.
    effects: Effects<'a, 't>,
    /// Variables read by conditions that returned threads evaluate, and where.
    control: BTreeMap<String, Vec<Range<usize>>>,
    /// Ranges that returned threads skip.
    guarded: Vec<Range<usize>>,
    steps: Vec<Step<'t>>,
    labels: u32,
    hazard: (Range<usize>, Range<usize>),
    helpers: Helpers<'a, 't>,
    /// The body's calls of helpers that synchronize the block (`CallGraph::barrier_names`).
    syncing_calls: Vec<&'a Call<'t>>,
    kind: Body<'t>,
    /// The live copies planned so far (callees first), and the helpers being planned (a
    /// recursive call is refused).
    live: Vec<LiveHelper<'t>>,
    planning: Vec<usize>,
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
    #[allow(clippy::too_many_arguments)]
    fn new(
        site: &'a FunctionSite<'t>,
        all: &'a [Node<'t>],
        params: &'a [String],
        facts: &'a BodyFacts<'t>,
        src: &'t str,
        names: &'a FileNames<'t, 'a>,
        helpers: Helpers<'a, 't>,
        hazard: (Range<usize>, Range<usize>),
        kind: Body<'t>,
    ) -> Self {
        let result = match &kind {
            Body::LiveCopy {
                result: CopyResult::AtEnd(r),
                ..
            } => Some(r.id()),
            _ => None,
        };
        let in_loop = matches!(kind, Body::Loop { .. });
        Walker {
            src,
            facts,
            uni: None,
            site,
            body: site.body,
            names,
            returns: facts
                .returns
                .iter()
                .filter(|_| !in_loop)
                .filter(|r| r.node.kind_id() == kinds().return_statement)
                .filter(|r| Some(r.node.id()) != result)
                .map(|r| r.node)
                .collect(),
            effects: Effects::new(all, src, params),
            all,
            control: BTreeMap::new(),
            guarded: Vec::new(),
            steps: Vec::new(),
            labels: 0,
            hazard,
            helpers,
            syncing_calls: facts
                .calls
                .iter()
                .filter(|c| helpers.graph.calls_barrier(c, helpers.plans))
                .collect(),
            kind,
            live: Vec::new(),
            planning: Vec::new(),
        }
    }

    fn walk(&mut self) -> Result<(), Diagnostic> {
        let (goto, label) = (kinds().goto_statement, kinds().labeled_statement);
        if let Some(g) = self
            .all
            .iter()
            .find(|n| n.kind_id() == goto || n.kind_id() == label)
        {
            return Err(self.refusal(g.byte_range(), "`goto` and labels are not predicated"));
        }
        // A member, functor, lambda, macro or function pointer that synchronizes, where
        // returned threads reach the call: no live copy is made of any, and guarded, the call
        // would be skipped.
        let hidden =
            self.helpers
                .graph
                .hidden_syncs(self.facts, self.site, self.src, self.helpers.plans);
        let member_barrier = hidden
            .iter()
            .find(|&&(_, n, block, _)| block && self.exposed(&n.byte_range()))
            .map(|&(m, n, _, _)| (m, n));
        if let Some((m, n)) = member_barrier {
            return Err(self.refusal(
                n.byte_range(),
                &format!("this use of `{m}`, a member, functor, lambda, macro or function pointer, synchronizes the block, and none of those gets a live copy"),
            ));
        }
        for &r in &self.returns {
            self.no_barrier_in_return(r)?;
        }
        match self.kind {
            Body::Loop { body, .. } => self.sequence(&children(body), false, true)?,
            _ => self.sequence(&children(self.body), false, false)?,
        }
        self.check_control_writes()
    }

    /// The body's calls that returned threads skip, of functions that neither this file, a
    /// macro nor CUDA's built-ins define, and that no other file of the run defines as one that
    /// synchronizes (`Options::known_helpers` holds only those that matter to callers).
    fn unseen_calls(&self) -> Vec<UnseenCall> {
        let seen = |name: &str| {
            matches!(
                name,
                "static_cast" | "reinterpret_cast" | "const_cast" | "dynamic_cast"
            ) || self.helpers.graph.by_name.contains_key(name)
                || self.helpers.known.iter().any(|k| k.name == name)
                || self.facts.macro_uses.iter().any(|m| m.name == name)
                || super::shared::builtin(name)
                || lang::is_pure_function(name)
        };
        self.facts
            .calls
            .iter()
            .filter(|c| {
                self.guarded
                    .iter()
                    .any(|g| g.contains(&c.node.start_byte()))
            })
            .filter(|c| !seen(&c.name))
            .map(|c| UnseenCall {
                name: c.name.clone(),
                range: c.node.byte_range(),
            })
            .collect()
    }

    fn refusal(&self, at: Range<usize>, why: &str) -> Diagnostic {
        let message = match &self.kind {
            Body::LiveCopy { helper: h, .. } => format!("a thread-dependent return reaches `{h}`, which synchronizes the block, and in its live copy {why}"),
            Body::Kernel => format!("a thread-dependent return reaches a barrier, and {why}"),
            Body::Loop { head, .. } => {
                return Diagnostic::new(Code::BarrierHazard, format!("a loop that threads of a block leave after different numbers of rounds holds a barrier, and {why}"))
                    .label(head.clone(), "whether a thread stays in this loop depends on the thread")
                    .label(self.hazard.1.clone(), "the threads still in the loop wait at this barrier")
                    .label(at, "threads whose rounds have ended cannot follow the others here")
                    .help("a thread whose rounds have ended stays in the loop and must pass the same barriers as the others: keep the loop's barriers in straight-line code or under conditions that are the same in every thread of the block, or loop on a block-uniform bound and guard the work inside with the thread's own condition");
            }
        };
        Diagnostic::new(Code::BarrierHazard, message)
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
        let hold = self.holds_result();
        for (x, jump) in inside.into_iter().zip(needs_jump) {
            self.steps.push(Step::Return {
                node: x,
                label: if jump { label } else { None },
                hold,
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
        if let Body::LiveCopy {
            result: CopyResult::AtEnd(result),
            ..
        } = self.kind
        {
            if result.id() == s.id() {
                let value = s.named_child(0).filter(|v| v.kind() != "comment");
                match value {
                    // A block reduction's value (`return __syncthreads_count(p);`), or a
                    // synchronizing helper's: every thread computes it, the returned ones
                    // voting the neutral value.
                    Some(v) if self.has_barrier(&v.byte_range()) => {
                        match self.barrier_call(lang::strip_parens(v)) {
                            Some(b) => self.vote(b)?,
                            None => self.live_calls_in(
                                v,
                                false,
                                "this return's value does more than synchronize",
                            )?,
                        }
                    }
                    // Returned threads return a value-initialized one and compute nothing.
                    Some(v) if !self.effects.pure(v) => {
                        self.steps.push(Step::LiveInit { value: v })
                    }
                    _ => {}
                }
                return Ok(Class::Apart);
            }
        }
        if s.kind_id() == k.return_statement {
            self.steps.push(Step::Return {
                node: s,
                label: None,
                hold: self.holds_result(),
            });
            return Ok(Class::Apart);
        }
        let sync = self.has_barrier(&range) || (in_loop && self.jump_skips_barrier(s));
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
            // pyramidal Lucas-Kanade). A return inside gets its step as one in any guarded
            // statement does (`close`); a declaration would end up inside the guard's braces,
            // out of reach of what follows.
            if declares_in_branches(s) {
                // Branches of constants and pure values only (`#if ARCH` around `constexpr int
                // ne_block = ...;`, llama.cpp's mul_mat_q): whichever is compiled runs for
                // every thread, outside any guard, so what follows sees its names.
                if !has_return && self.computed_by_all(s) {
                    return Ok(Class::Apart);
                }
                return Err(self.refusal(range, "conditional compilation follows it"));
            }
        }
        if s.kind() == "expression_statement"
            && self.effects.local_writes_only(s)
            && self.writes_die_with_round(s)
        {
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
                // In a predicated loop the statement runs in every thread, and a variable it
                // assigns that outlives the loop would take the votes of rounds the thread no
                // longer has.
                if call.is_some() && !self.writes_die_with_round(s) {
                    return Err(self.refusal(s.byte_range(), "this statement stores a block reduction in a variable that outlives the loop, which threads whose rounds have ended would change (declare the result inside the loop: `int c = __syncthreads_count(p);`)"));
                }
                match (call, e) {
                    (Some(b), _) => self.vote(b),
                    (None, Some(e)) => self.live_calls_in(e, true, "this statement does more than synchronize (write `int c = __syncthreads_count(p);` on its own line)"),
                    (None, None) => Err(self.refusal(s.byte_range(), "this statement does more than synchronize")),
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
                // A constant expression takes returned threads the same way as live ones.
                if !lang::is_if_constexpr(s) {
                    self.condition(cond)?;
                }
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
                // In a predicated loop every thread runs this one: what it writes must not
                // outlive the predicated loop's round.
                let outliving = [f.initializer, f.update]
                    .into_iter()
                    .filter_map(|field| s.child_by_field_id(field))
                    .find(|x| !self.writes_die_with_round(*x));
                if let Some(x) = outliving {
                    return Err(self.refusal(
                        x.byte_range(),
                        "this loop's counter outlives the predicated loop's round, and threads whose rounds have ended would change it",
                    ));
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
        // Block reductions, and calls of helpers that return one (`cta_sync_count(p) >= n`),
        // hand every thread the same value; the rest must be uniform and read no memory.
        let range = e.byte_range();
        let mut votes: Vec<BarrierSite<'t>> = Vec::new();
        for b in self
            .facts
            .barriers
            .iter()
            .filter(|b| range.contains(&b.node.start_byte()))
        {
            votes.push(*b);
        }
        for call in self
            .syncing_calls
            .iter()
            .filter(|c| range.contains(&c.node.start_byte()))
        {
            if !self.returns_block_vote(call) {
                return Err(self.refusal(c.byte_range(), "this condition is the value of a helper that synchronizes the block, which may differ between threads"));
            }
            votes.push(BarrierSite {
                node: call.node,
                method: LIVE_CALL,
                visible: true,
            });
        }
        let inside = |outer: Node, inner: Node| {
            outer.id() != inner.id() && outer.byte_range().contains(&inner.start_byte())
        };
        let nested = votes
            .iter()
            .any(|a| votes.iter().any(|b| inside(b.node, a.node)));
        let holes: Vec<Node<'t>> = votes.iter().map(|b| b.node).collect();
        let uniform_around = |w: &mut Self| {
            // The names of `static_cast<T>` and its kind are no values.
            let casts: Vec<Range<usize>> = descendants(e)
                .into_iter()
                .filter(|n| lang::is_named_cast(*n, w.src))
                .map(|n| n.byte_range())
                .collect();
            let names: Vec<Node<'t>> = descendants(e)
                .into_iter()
                .filter(|n| n.kind_id() == kinds().identifier)
                .filter(|n| {
                    !holes
                        .iter()
                        .any(|h| h.byte_range().contains(&n.start_byte()))
                })
                .filter(|n| !casts.iter().any(|c| c.contains(&n.start_byte())))
                .collect();
            let uniform = names.iter().all(|n| !w.uniformity().expr_varying(*n));
            (uniform, names)
        };
        if !nested && self.effects.pure_around(e, &holes) {
            let (uniform, names) = uniform_around(self);
            if uniform {
                for n in names {
                    self.control
                        .entry(text(n, self.src).to_string())
                        .or_default()
                        .push(n.byte_range());
                }
                for v in votes {
                    self.vote(v)?;
                }
                return Ok(());
            }
        }
        Err(self.refusal(
            c.byte_range(),
            "this condition may differ between threads or reads memory",
        ))
    }

    /// A call of a synchronizing helper whose value is a block reduction's (`returns_block_vote`
    /// here, `KnownHelper::returns_block_vote` of another file's).
    fn returns_block_vote(&self, call: &Call<'t>) -> bool {
        match self
            .helpers
            .graph
            .by_name
            .get(&call.name)
            .map(Vec::as_slice)
        {
            Some([i]) => self.helpers.plans[*i].returns_block_vote(),
            Some(_) => false,
            None => {
                let mut known = self
                    .helpers
                    .known
                    .iter()
                    .filter(|k| k.name == call.name && k.synchronizes);
                matches!((known.next(), known.next()), (Some(k), None) if k.returns_block_vote)
            }
        }
    }

    fn uniformity(&mut self) -> &Uniformity<'t, 'a> {
        let (body, src, names, all) = (self.body, self.src, self.names, self.all);
        let kind = &self.kind;
        self.uni.get_or_insert_with(|| {
            let blocks = super::body::thread_block_variables(body, all, src);
            match kind {
                Body::LiveCopy { varying_params, .. } => {
                    Uniformity::for_live_helper(body, all, names, blocks, varying_params)
                }
                Body::Kernel | Body::Loop { .. } => {
                    Uniformity::with_exits(body, all, names, blocks, false)
                }
            }
        })
    }

    fn vote(&mut self, b: BarrierSite<'t>) -> Result<(), Diagnostic> {
        let and = match b.method {
            "sync" => return Ok(()),
            LIVE_CALL => return self.live_call(b.node),
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

    /// Whether every branch of a conditional-compilation chain holds only what returned
    /// threads may compute as well: declarations that are `constexpr`, declare without a value
    /// or take pure values, and nested chains of the same. No barrier, no call, no store.
    fn computed_by_all(&self, chain: Node<'t>) -> bool {
        if self.has_barrier(&chain.byte_range()) {
            return false;
        }
        let k = kinds();
        let f = fields();
        // The chain's own parts (its condition or name) and comments hold no statement.
        let own = |x: Node| {
            [f.condition, f.name].iter().any(|&field| {
                chain
                    .child_by_field_id(field)
                    .is_some_and(|c| c.id() == x.id())
            }) || x.kind() == "comment"
        };
        let mut c = chain.walk();
        let all = chain.named_children(&mut c).all(|x| match x.kind() {
            _ if own(x) => true,
            "declaration" => {
                lang::is_constexpr_declaration(x, self.src)
                    || lang::declarators(x).into_iter().all(|decl| {
                        decl.kind_id() != k.init_declarator
                            || decl
                                .child_by_field_id(f.value)
                                .is_some_and(|v| self.effects.pure(v))
                    })
            }
            "preproc_if" | "preproc_ifdef" | "preproc_else" | "preproc_elif"
            | "preproc_elifdef" => self.computed_by_all(x),
            _ => false,
        });
        all
    }

    fn declaration(&mut self, d: Node<'t>) -> Result<(), Diagnostic> {
        let k = kinds();
        let f = fields();
        if lang::is_constexpr_declaration(d, self.src) {
            // A constant expression: returned threads compute it too, reading nothing.
            return Ok(());
        }
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
                self.live_calls_in(value, false, "this initializer does more than synchronize")?;
                continue;
            }
            if self.effects.pure(value) {
                continue; // returned threads compute it too, harmlessly
            }
            let plain = decl
                .child_by_field_id(f.declarator)
                .is_some_and(|x| matches!(x.kind(), "identifier" | "pointer_declarator"));
            let list = value.kind() == "initializer_list" || value.kind_id() == k.argument_list;
            let refused = || {
                self.refusal(decl.byte_range(), "this declaration reads memory in a form that cannot be made conditional (write `T x = expr;`)")
            };
            if !plain {
                return Err(refused());
            }
            if list {
                // `T x(args)`, `T x{args}`, `T x = {args}`: constructed while live, where the
                // variable is a name and its type can be named again (not `auto`, no storage
                // class: a `static` is initialized once).
                let named = decl
                    .child_by_field_id(f.declarator)
                    .is_some_and(|x| x.kind() == "identifier");
                let ty = d.child_by_field_id(f.r#type);
                let nameable = ty.is_some_and(|t| {
                    let t = lang::text(t, self.src);
                    !lang::has_word(t, "auto") && !lang::has_word(t, "decltype")
                });
                let mut c = d.walk();
                let stored = d
                    .children(&mut c)
                    .any(|x| x.kind() == "storage_class_specifier");
                let (Some(ty), true, true, false) = (ty, named, nameable, stored) else {
                    return Err(refused());
                };
                let mut c = decl.walk();
                let assigned = decl.children(&mut c).any(|x| x.kind() == "=");
                self.steps.push(Step::LiveConstruct {
                    value,
                    ty: lang::text(ty, self.src).to_string(),
                    assigned,
                });
                continue;
            }
            self.steps.push(Step::LiveInit { value });
        }
        Ok(())
    }

    /// An expression that returned threads evaluate whole because it calls helpers that
    /// synchronize the block (`float mean = row_sum(s, v) / n;`): each call goes to the
    /// helper's live copy, and the rest must read no memory and write, with `writes_ok`, only
    /// locals. `why` refuses one that holds a barrier of its own.
    fn live_calls_in(&mut self, e: Node<'t>, writes_ok: bool, why: &str) -> Result<(), Diagnostic> {
        let range = e.byte_range();
        // Block reductions (`__syncthreads_count(p) > 0`) vote as they do standing alone; a
        // plain barrier is no value.
        let votes: Vec<BarrierSite<'t>> = self
            .facts
            .barriers
            .iter()
            .filter(|b| range.contains(&b.node.start_byte()))
            .copied()
            .collect();
        if votes.iter().any(|b| b.method == "sync" || !b.rewritable()) {
            return Err(self.refusal(range, why));
        }
        let calls: Vec<Node<'t>> = self
            .syncing_calls
            .iter()
            .map(|c| c.node)
            .filter(|n| range.contains(&n.start_byte()))
            .collect();
        let holes: Vec<Node<'t>> = calls
            .iter()
            .copied()
            .chain(votes.iter().map(|b| b.node))
            .collect();
        let inside = |outer: Node, inner: Node| {
            outer.id() != inner.id() && outer.byte_range().contains(&inner.start_byte())
        };
        if let Some(&inner) = holes.iter().find(|&&c| holes.iter().any(|&o| inside(o, c))) {
            return Err(self.refusal(
                inner.byte_range(),
                "this call that synchronizes the block is an argument of another",
            ));
        }
        // Every thread must make the call: none may sit where only some threads evaluate.
        for n in descendants(e) {
            let branches = n.kind() == "conditional_expression"
                || (n.kind() == "binary_expression"
                    && n.child_by_field_id(fields().operator)
                        .is_some_and(|o| matches!(text(o, self.src), "&&" | "||")));
            if let Some(&c) = holes.iter().find(|&&c| branches && inside(n, c)) {
                return Err(self
                    .refusal(
                        c.byte_range(),
                        "this call synchronizes the block, and only some threads may make it",
                    )
                    .label(n.byte_range(), "it is one branch of this expression"));
            }
        }
        let clean = if writes_ok {
            self.effects.local_effects_only_around(e, &holes)
        } else {
            self.effects.pure_around(e, &holes)
        };
        if !clean {
            // Block reductions alone: the caller's own words say how to write it.
            let Some(&first) = calls.first() else {
                return Err(self.refusal(range, why));
            };
            return Err(self
                .refusal(range, "returned threads evaluate this expression, for its call of a helper that synchronizes the block, and the rest of it reads memory or writes it (give the call's value a variable of its own first: `float t = helper(...);`)")
                .label(first.byte_range(), "the call"));
        }
        for b in votes {
            self.vote(b)?;
        }
        for c in calls {
            self.live_call(c)?;
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
            let Some((name, reads)) = target.and_then(|t| Some((t, self.control.get(t)?))) else {
                continue;
            };
            // A variable of the same name declared in a scope around the write that holds no
            // such read is another variable (`for (int i ...)` loops side by side).
            let scope = declaring_scope(*n, name, self.body, self.src);
            let read = reads
                .iter()
                .find(|r| scope.as_ref().is_none_or(|s| s.contains(&r.start)));
            if let Some(read) = read {
                return Err(self
                    .refusal(n.byte_range(), "this write, which returned threads skip, changes a value that a barrier's condition reads")
                    .label(read.clone(), "read here"));
            }
        }
        Ok(())
    }

    /// A return other than a live copy's at its end runs only in the threads that take it: a
    /// barrier in its value (`return __syncthreads_count(p);` among several returns) would be
    /// passed by those alone.
    fn no_barrier_in_return(&self, r: Node<'t>) -> Result<(), Diagnostic> {
        match r.named_child(0) {
            Some(v) if self.has_barrier(&v.byte_range()) => Err(self.refusal(
                v.byte_range(),
                "this return's value synchronizes the block, and only the threads that return compute it",
            )),
            _ => Ok(()),
        }
    }

    fn holds_result(&self) -> bool {
        matches!(
            self.kind,
            Body::LiveCopy {
                result: CopyResult::Held(_),
                ..
            }
        )
    }

    fn exposed(&self, range: &Range<usize>) -> bool {
        if let Body::Loop { body, .. } = self.kind {
            return body.byte_range().contains(&range.start);
        }
        matches!(self.kind, Body::LiveCopy { .. })
            || self
                .returns
                .iter()
                .any(|r| self.facts.reaches(&r.byte_range(), range))
    }

    /// In a predicated loop, whether every variable that statement `s` writes is declared
    /// inside the loop's body, so that the rounds a thread runs after its own have ended leave
    /// nothing behind: a variable that outlives the loop (its counter, `i += stride;`) keeps
    /// the value of the thread's last round, so only live threads may write it. True elsewhere.
    fn writes_die_with_round(&self, s: Node<'t>) -> bool {
        let Body::Loop { body, .. } = self.kind else {
            return true;
        };
        writes_declared_within(s, body, self.body, self.src)
    }

    /// Whether a `break` or `continue` that leaves `s` (inside a loop that holds a barrier)
    /// takes the threads that follow it past a barrier that the others pass, so that returned
    /// threads must follow it too: a `break` leaves the loop; a `continue` skips the rest of
    /// its loop's body, which matters only where a barrier follows it there. After the body's
    /// last barrier a `continue` is work like any other: live threads take it alone (as the
    /// original's threads do), and returned ones, which do no work, meet them at the next
    /// iteration's first barrier. TensorRT's box suppression loops so: `if (state == -1)
    /// continue;` on a shared flag after the loop's one barrier.
    fn jump_skips_barrier(&self, s: Node<'t>) -> bool {
        escaping_jumps(s).into_iter().any(|jump| {
            if jump.kind() != "continue_statement" {
                return true;
            }
            enclosing_loop(jump, |n| n.parent())
                .and_then(|l| l.child_by_field_id(fields().body))
                .is_none_or(|b| self.has_barrier(&(jump.end_byte()..b.end_byte())))
        })
    }

    fn has_barrier(&self, range: &Range<usize>) -> bool {
        self.facts
            .barriers
            .iter()
            .any(|b| range.contains(&b.node.start_byte()))
            || self
                .syncing_calls
                .iter()
                .any(|c| range.contains(&c.node.start_byte()))
    }

    /// `e` as a barrier: a barrier call, or a call of a synchronizing helper (`LIVE_CALL`).
    fn barrier_call(&self, e: Node<'t>) -> Option<BarrierSite<'t>> {
        let call = self.syncing_calls.iter().find(|c| c.node.id() == e.id());
        self.facts
            .barriers
            .iter()
            .copied()
            .find(|b| b.node.id() == e.id())
            .or(call.map(|c| BarrierSite {
                node: c.node,
                method: LIVE_CALL,
                visible: true,
            }))
    }

    /// A call of a synchronizing helper that returned threads reach: it calls the helper's
    /// live copy, planned here (with the copies of the helpers it calls in turn), or the one
    /// the helper's own file makes where another file of the run defines it
    /// (`KnownHelper::live_copy`).
    fn live_call(&mut self, node: Node<'t>) -> Result<(), Diagnostic> {
        let Some(call) = self
            .syncing_calls
            .iter()
            .copied()
            .find(|c| c.node.id() == node.id())
        else {
            return Err(self.refusal(node.byte_range(), "this call synchronizes the block"));
        };
        let name = call.name.as_str();
        let refuse = |w: &Self, why: &str| {
            Err(w.refusal(
                node.byte_range(),
                &format!("`{name}`, which synchronizes the block, gets no live copy: {why}"),
            ))
        };
        let name_range = node
            .child_by_field_id(fields().function)
            .and_then(|callee| callee_name(callee, self.src, name));
        let Some(name_range) = name_range else {
            return refuse(self, "its callee has no name we can read");
        };
        let args: Vec<Node<'t>> = children(call.args)
            .into_iter()
            .filter(|a| a.kind_id() != kinds().comment)
            .collect();
        let found = self.helpers.graph.by_name.get(name);
        let index = match found.map(Vec::as_slice) {
            Some([i]) => *i,
            Some(_) => return refuse(self, "it has several overloads"),
            None => return self.known_live_call(node, call, name_range, &args),
        };
        let h: &'a HelperPlan<'t> = &self.helpers.plans[index];
        if h.site.outer.end_byte() > node.start_byte() {
            return refuse(
                self,
                "it is defined after this call (the copy follows the definition)",
            );
        }
        let params = &h.site.param_list;
        if params.iter().any(|p| p.pack) || args.len() > params.len() {
            return refuse(
                self,
                "its parameters do not match this call's arguments one to one",
            );
        }
        self.no_barrier_in_arguments(&args)?;
        let mut wrap = Vec::new();
        let mut varying_params: BTreeSet<String> = params.iter().map(|p| p.name.clone()).collect();
        for (a, p) in args.iter().zip(params) {
            if !self.effects.pure(*a) {
                if p.text.contains('&') {
                    return Err(self.by_reference(*a, name));
                }
                wrap.push(*a);
            }
            if !self.uniformity().expr_varying(*a) {
                varying_params.remove(&p.name);
            }
        }
        let copy = plan_copy(
            index,
            self.helpers,
            self.src,
            self.names,
            self.hazard.clone(),
            varying_params,
            &self.planning,
        );
        match copy {
            Ok(mut copies) => self.live.append(&mut copies),
            Err(CopyRefusal::Helper(why)) => return refuse(self, &why),
            Err(CopyRefusal::Body(d)) => {
                return Err(d.label(
                    node.byte_range(),
                    format!("in `{name}`'s live copy, which this call calls"),
                ))
            }
        }
        self.steps.push(Step::LiveCall {
            name: name_range,
            args: call.args,
            wrap,
            ctx: h.needs_ctx,
        });
        Ok(())
    }

    /// `live_call` of a helper another file of the run defines: the copy its file makes, if
    /// it makes one, whose parameters that its conditions read get uniform values here.
    fn known_live_call(
        &mut self,
        node: Node<'t>,
        call: &Call<'t>,
        name_range: Range<usize>,
        args: &[Node<'t>],
    ) -> Result<(), Diagnostic> {
        let name = call.name.as_str();
        let mut known = self
            .helpers
            .known
            .iter()
            .filter(|k| k.name == name && k.synchronizes);
        let (known, params) = match (known.next(), known.next()) {
            (Some(k), None) => match &k.live_copy {
                Some(Ok(c)) => (k, c),
                Some(Err(why)) => return Err(self.refusal(
                    node.byte_range(),
                    &format!("`{name}`, which synchronizes the block, gets no live copy in its file: {why}"),
                )),
                None => return Err(self.refusal(
                    node.byte_range(),
                    &format!("`{name}`, which synchronizes the block, gets no live copy: it is defined in another file that is not transformed in the same run"),
                )),
            },
            (Some(_), Some(_)) => return Err(self.refusal(
                node.byte_range(),
                &format!("`{name}`, which synchronizes the block, gets no live copy: other files define several functions of that name"),
            )),
            (None, _) => return Err(self.refusal(
                node.byte_range(),
                &format!("`{name}`, which synchronizes the block, gets no live copy: it is defined in another file that is not transformed in the same run"),
            )),
        };
        if args.len() > params.len() {
            return Err(self.refusal(
                node.byte_range(),
                &format!("`{name}`, which synchronizes the block, gets no live copy: its parameters do not match this call's arguments one to one"),
            ));
        }
        self.no_barrier_in_arguments(args)?;
        let mut wrap = Vec::new();
        for (a, p) in args.iter().zip(params) {
            if !self.effects.pure(*a) {
                if p.by_reference {
                    return Err(self.by_reference(*a, name));
                }
                wrap.push(*a);
            }
            if p.uniform && self.uniformity().expr_varying(*a) {
                return Err(self.refusal(a.byte_range(), &format!("this argument may differ between threads, where a barrier's condition in `{name}` reads the parameter")));
            }
        }
        self.steps.push(Step::LiveCall {
            name: name_range,
            args: call.args,
            wrap,
            ctx: known.with_ctx && known.reads_block_ids,
        });
        Ok(())
    }

    /// A live call's arguments that read memory are evaluated only while live: a barrier
    /// among them would be passed by live threads alone.
    fn no_barrier_in_arguments(&self, args: &[Node<'t>]) -> Result<(), Diagnostic> {
        match args.iter().find(|a| self.has_barrier(&a.byte_range())) {
            Some(a) => Err(self.refusal(
                a.byte_range(),
                "this argument of a call of a helper that synchronizes the block synchronizes it too (give it a variable of its own first)",
            )),
            None => Ok(()),
        }
    }

    fn by_reference(&self, arg: Node<'t>, helper: &str) -> Diagnostic {
        self.refusal(
            arg.byte_range(),
            &format!("this argument reads memory, and `{helper}` takes it by reference (returned threads must not evaluate it)"),
        )
    }
}

/// Why a helper gets no live copy: something of the helper itself, or a statement of its body
/// that returned threads cannot pass (the walker's refusal).
enum CopyRefusal {
    Helper(String),
    Body(Diagnostic),
}

/// The live copy of helper `index`, its parameters in `varying_params` taking values that may
/// differ between threads: the copies to make, those it calls first, itself last. `planning`:
/// the helpers whose copies are being planned around this one (a recursive call is refused).
fn plan_copy<'a, 't>(
    index: usize,
    helpers: Helpers<'a, 't>,
    src: &'t str,
    names: &'a FileNames<'t, 'a>,
    hazard: (Range<usize>, Range<usize>),
    varying_params: BTreeSet<String>,
    planning: &[usize],
) -> Result<Vec<LiveHelper<'t>>, CopyRefusal> {
    let h: &'a HelperPlan<'t> = &helpers.plans[index];
    let refuse = |why: &str| Err(CopyRefusal::Helper(why.to_string()));
    if h.call_defaults.is_some() {
        return refuse("a default argument of it reads blockIdx/gridDim");
    }
    if h.site.member {
        return refuse("it is a member function");
    }
    if h.facts.barriers.iter().any(|b| !b.rewritable()) {
        return refuse("a barrier in it is inside a macro or inline PTX");
    }
    if let Some(m) = h.facts.macro_uses.iter().find(|m| m.facts.returns) {
        return refuse(&format!("macro `{}` in it returns", m.name));
    }
    if planning.contains(&index) {
        return refuse("it calls itself");
    }
    if h.site.param_list.iter().any(|p| p.pack) {
        return refuse("it takes a parameter pack");
    }
    // The copy repeats the definition's text: a conditional that it closes or opens without
    // the other half (a head chosen by `#ifdef` ... `#else` ... `#endif`, the braces in the
    // last branch) would be half a conditional in the copy, which does not compile.
    if let Some(at) = h.site.crossing_conditional {
        let line = src[..at].matches('\n').count() + 1;
        let directive = src[at..].lines().next().unwrap_or_default().trim_end();
        return refuse(&format!(
            "a preprocessor conditional crosses its definition (`{directive}` on line {line} belongs to a conditional that opens or closes outside it), and a copy of half a conditional does not compile"
        ));
    }
    let result = live_result(h, src).map_err(CopyRefusal::Helper)?;
    let result_type = match &result {
        CopyResult::Held(t) => Some(t.clone()),
        _ => None,
    };
    let by_value: Vec<String> = h
        .site
        .param_list
        .iter()
        .filter(|p| !p.text.contains('&'))
        .map(|p| p.name.clone())
        .collect();
    let all = descendants(h.site.body);
    let mut inner = Walker::new(
        &h.site,
        &all,
        &by_value,
        &h.facts,
        src,
        names,
        helpers,
        hazard,
        Body::LiveCopy {
            result,
            helper: h.site.name.clone(),
            varying_params,
        },
    );
    inner.planning = planning.to_vec();
    inner.planning.push(index);
    inner.walk().map_err(CopyRefusal::Body)?;
    let unseen_calls = inner.unseen_calls();
    let mut copies = inner.live;
    copies.push(LiveHelper {
        helper: index,
        unseen_calls,
        steps: inner.steps,
        result_type,
    });
    Ok(copies)
}

/// For other files' calls (`Options::helpers_for_other_files`): the live copy of helper
/// `index`, planned with every parameter uniform, and which parameters must stay uniform for
/// it (one at a time taken as varying, the copy is refused). None: it gets no copy.
pub fn exported_copy<'t>(
    index: usize,
    helpers: Helpers<'_, 't>,
    src: &'t str,
    names: &FileNames<'t, '_>,
) -> Result<(Vec<LiveHelper<'t>>, Vec<bool>), String> {
    let h = &helpers.plans[index];
    let hazard = (h.site.name_node.byte_range(), h.site.body.byte_range());
    let plan = |varying: BTreeSet<String>| {
        plan_copy(index, helpers, src, names, hazard.clone(), varying, &[])
    };
    let copies = match plan(BTreeSet::new()) {
        Ok(c) => c,
        Err(CopyRefusal::Helper(why)) => return Err(why),
        Err(CopyRefusal::Body(d)) => {
            let why = d
                .message
                .split_once(" in its live copy ")
                .map_or(d.message.as_str(), |(_, why)| why);
            let at = d.labels.last().map_or(0, |l| l.start);
            let line = src[..at].matches('\n').count() + 1;
            return Err(format!("{why} (line {line} of its file)"));
        }
    };
    let uniform = h
        .site
        .param_list
        .iter()
        .map(|p| plan(BTreeSet::from([p.name.clone()])).is_err())
        .collect();
    Ok((copies, uniform))
}

/// The innermost scope around `at` (up to `body`) that declares `name`: a `for` loop's
/// initializer or a block's own declaration before `at`. None: declared outside the scopes
/// around it (a parameter, or a local of an enclosing scope further out than `body`).
fn declaring_scope(at: Node, name: &str, body: Node, src: &str) -> Option<Range<usize>> {
    let k = kinds();
    let declares = |d: Node| {
        d.kind_id() == k.declaration
            && lang::declarators(d)
                .into_iter()
                .filter_map(lang::declarator_name)
                .any(|x| text(x, src) == name)
    };
    let mut n = at;
    while let Some(p) = n.parent() {
        if p.kind_id() == k.for_statement {
            if p.child_by_field_id(fields().initializer)
                .is_some_and(declares)
            {
                return Some(p.byte_range());
            }
        } else if p.kind_id() == k.compound_statement
            && children(p)
                .into_iter()
                .any(|c| c.start_byte() < at.start_byte() && declares(c))
        {
            return Some(p.byte_range());
        }
        if p.id() == body.id() {
            break;
        }
        n = p;
    }
    None
}

/// The `method` of a call of a synchronizing helper taken as a barrier (`Walker::barrier_call`).
const LIVE_CALL: &str = "live";

/// The byte range of a callee's own name, `f` of `f`, `f<T>` or `ns::f`.
fn callee_name(callee: Node, src: &str, name: &str) -> Option<Range<usize>> {
    let f = fields();
    let mut n = callee;
    loop {
        match n.kind() {
            "identifier" => return (text(n, src) == name).then(|| n.byte_range()),
            "template_function" | "qualified_identifier" => n = n.child_by_field_id(f.name)?,
            _ => return None,
        }
    }
}

/// How a helper's live copy returns the helper's value. Err: why it cannot.
fn live_result<'t>(h: &HelperPlan<'t>, src: &str) -> Result<CopyResult<'t>, String> {
    let f = fields();
    let func = h.site.func;
    let declarator = func.child_by_field_id(f.declarator);
    let void = func
        .child_by_field_id(f.r#type)
        .is_some_and(|t| text(t, src) == "void")
        && declarator.is_some_and(|d| d.kind() == "function_declarator");
    if declarator.is_some_and(|d| d.kind() == "reference_declarator") {
        return Err("it returns a reference".into());
    }
    if void {
        return Ok(CopyResult::Void);
    }
    let last = children(h.site.body)
        .into_iter()
        .rfind(|n| n.kind_id() != kinds().comment)
        .filter(|l| l.kind_id() == kinds().return_statement);
    let others = |last: Node| {
        h.facts
            .returns
            .iter()
            .any(|r| r.node.kind_id() == kinds().return_statement && r.node.id() != last.id())
    };
    if let Some(last) = last.filter(|l| !others(*l)) {
        return Ok(CopyResult::AtEnd(last));
    }
    // `__cp_ret` needs the return type spelled as a type: not deduced, not a pointer's or a
    // function pointer's, which the declarator spells.
    let ty = func
        .child_by_field_id(f.r#type)
        .map(|t| text(t, src))
        .filter(|t| !lang::has_word(t, "auto") && !lang::has_word(t, "decltype"));
    match (ty, declarator) {
        (Some(t), Some(d)) if d.kind() == "function_declarator" => {
            Ok(CopyResult::Held(t.to_string()))
        }
        _ => Err(
            "it returns a value in several places, and its return type is deduced or a pointer"
                .into(),
        ),
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
    fn a_constructed_value_of_a_type_whose_name_holds_auto_is_made_live() {
        // `autoscale_span s(...)` names its type again (`live_value`); `auto s(...)` cannot.
        let head = "struct autoscale_span { float lo, hi; __device__ autoscale_span(float a, float b) : lo(a), hi(b) {} };\n";
        let kernel = |decl: &str| {
            format!("{head}__global__ void k(const float* in, float* out, int m) {{\n  __shared__ float s[128];\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= m) return;\n  {decl}\n  s[threadIdx.x] = v.hi - v.lo;\n  __syncthreads();\n  out[i] = s[threadIdx.x];\n}}\n")
        };
        let transformed = |src: String| {
            let parsed = crate::parse::parse(&src);
            analyze(&parsed, &src, &Options::default()).kernels[0].transformed()
        };
        assert!(transformed(kernel("autoscale_span v{in[i], in[i + 1]};")));
        assert!(!transformed(kernel(
            "const auto v(autoscale_span(in[i], in[i + 1]));"
        )));
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
    fn a_skipped_loop_of_its_own_counter_leaves_a_barrier_loop_of_the_same_name_alone() {
        // Side by side, each `r` its own: the skipped loop's `++r` is not the barrier loop's.
        assert!(predicated(
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= m) return;\n  for (int r = 0; r < 4; ++r) out[i] += in[r];\n  for (int r = 0; r < m; ++r) __syncthreads();"
        ));
        assert!(predicated(
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= m) return;\n  { int r = 2; out[i] = r; r = 5; out[i] += r; }\n  for (int r = 0; r < m; ++r) __syncthreads();"
        ));
        // The same variable: refused.
        refused_because(
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n  int r = 0;\n  for (r = 0; r < 4; ++r) out[i] += in[r];\n  for (; r < m; ++r) __syncthreads();",
            "returned threads skip",
        );
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

    /// The predicated form's note names the skipped calls of functions the file does not
    /// define (a barrier in one would be skipped too), and only those: not the file's own
    /// helpers, built-ins, pure math or casts, nor calls every thread makes.
    #[test]
    fn the_note_names_skipped_calls_of_functions_the_file_does_not_define() {
        let src = "__device__ float twice(float v) { return 2.0f * v; }\n\
            __global__ void k(const float* in, float* out, int n) {\n\
            __shared__ float s[64];\n\
            int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
            external_before(s);\n\
            if (i >= n) return;\n\
            s[threadIdx.x] = twice(sqrtf(in[i])) + static_cast<float>(i);\n\
            atomicAdd(out, 1.0f);\n\
            external_reduce(s, in[i]);\n\
            __syncthreads();\n\
            out[i] = s[0];\n}\n";
        let parsed = crate::parse::parse(src);
        let a = analyze(&parsed, src, &Options::default());
        assert!(a.kernels[0].transformed());
        let note = a
            .diagnostics
            .iter()
            .find(|d| d.code.id() == "CP200")
            .expect("the predicated form's note");
        let named: Vec<&str> = note
            .labels
            .iter()
            .filter(|l| l.message.contains("which this file does not define"))
            .map(|l| &src[l.start..l.end])
            .collect();
        assert_eq!(named, ["external_reduce(s, in[i])"], "{note:?}");
        assert!(note
            .help
            .as_deref()
            .is_some_and(|h| h.contains("live threads waiting")));
    }
}
