//! The decision about one kernel: whether it is transformed, in which form, and why not. Its
//! own refusals, those of the helpers it reaches, and a thread-dependent return that reaches a
//! barrier (the predicated form, or a refusal when a barrier or return cannot be rewritten).

use super::body::{BarrierSite, ReturnSite};
use super::callgraph::CallGraph;
use super::{HelperPlan, KernelPlan, SyncMode};
use crate::diagnostics::{Code, Diagnostic};
use crate::options::Options;
use std::collections::BTreeSet;
use std::ops::Range;
use tree_sitter::Node;

/// The mode, the helpers the kernel reaches, its hazard (a thread-dependent return that
/// reaches a barrier) and its predicated loops (`predicable_loop`).
pub type Decision<'t> = (
    SyncMode,
    BTreeSet<usize>,
    Option<(ReturnSite<'t>, BarrierSite<'t>)>,
    Vec<Node<'t>>,
);

/// Decides whether a kernel is transformed: its mode, the helpers it reaches, its hazard and
/// its predicated loops.
pub fn decide<'t>(
    plan: &KernelPlan<'t>,
    opts: &Options,
    helpers: &[HelperPlan],
    graph: &CallGraph,
    src: &str,
) -> Result<Decision<'t>, Vec<Diagnostic>> {
    let k = &plan.site;
    if !opts.selects(&k.name) || k.pragmas.skip {
        let why = if k.pragmas.skip {
            "`#pragma cupreempt skip`"
        } else {
            "the command line's kernel selection"
        };
        return Err(vec![Diagnostic::new(
            Code::NotSelected,
            format!("kernel `{}` is not transformed: excluded by {why}", k.name),
        )
        .label(k.name_node.byte_range(), "left as it is")]);
    }
    let mut refusals: Vec<Diagnostic> = k.problems.clone();
    refusals.extend(at_grid_barriers(&plan.facts.refusals, k.body, src));

    // Everything the kernel reaches through calls to helpers of this file, each with the
    // kernel's call that leads there (refusals found in a helper are labelled there first, so
    // that they count for the kernel).
    let mut reach: std::collections::BTreeMap<usize, std::ops::Range<usize>> = Default::default();
    // Each call to follow: the callee's name, the kernel's call that leads there, and the
    // helpers called on the way (to name them in messages).
    let mut stack: Vec<(&str, std::ops::Range<usize>, Vec<&str>)> = plan
        .facts
        .calls
        .iter()
        .map(|c| (c.name.as_str(), c.node.byte_range()))
        .chain(
            plan.facts
                .ctx_member_calls
                .iter()
                .map(|(m, c)| (m.as_str(), c.byte_range())),
        )
        .chain(unread_member_calls(&plan.facts, graph, opts))
        .map(|(name, call)| (name, call, Vec::new()))
        .collect();
    let mut external: BTreeSet<&str> = BTreeSet::new();
    while let Some((name, call_site, via)) = stack.pop() {
        // One that only synchronizes is a barrier like a helper of this file's (below).
        if let Some(h) = included_reader(opts, graph, name, false) {
            if external.insert(name) {
                refusals.push(included_helper(h, &call_site));
            }
        }
        for i in graph.callees(name) {
            let h = &helpers[i];
            let std::collections::btree_map::Entry::Vacant(first) = reach.entry(i) else {
                continue;
            };
            first.insert(call_site.clone());
            for r in &at_grid_barriers(&h.facts.refusals, h.site.body, src) {
                refusals.push(from_helper(r, &k.name, &h.site.name, &via, &call_site));
            }
            // A default argument is read where the function is declared, not where it is
            // called: `blockIdx` there is the hardware's, whatever the caller's task.
            if let Some(site) = h
                .declarations()
                .find(|d| default_reads_block_ids(d, &graph.block_names))
                .filter(|_| h.call_defaults.is_none())
            {
                refusals.push(
                    Diagnostic::new(
                        Code::Helper,
                        format!("helper `{}` has a default argument that reads blockIdx/gridDim, which a call without that argument would take from the hardware, not from the task", h.site.name),
                    )
                    .label(call_site.clone(), "called here")
                    .label(site.params.byte_range(), "the default argument is in here")
                    .help("pass the value at the call (`f(blockIdx.x)`) instead of as a default argument"),
                );
            }
            if h.needs_ctx && !h.site.can_take_ctx() {
                let why = if h.site.host {
                    "a __host__ __device__ helper cannot take the task context".to_string()
                } else if h.site.linkage.is_some() {
                    // The context form is a template, and templates have C++ linkage.
                    "a helper with `extern \"C\"` linkage cannot take the task context".to_string()
                } else if h.site.member {
                    // Its context form would have to be declared in the class as well.
                    "a member function defined outside its class, virtual, or an operator, \
                     constructor or destructor cannot take the task context; define it in its \
                     class, make it a free `__device__` function, or pass it the block index \
                     as an argument"
                        .to_string()
                } else {
                    h.site
                        .problems
                        .first()
                        .map(|p| p.message.clone())
                        .unwrap_or_default()
                };
                refusals.push(
                    Diagnostic::new(
                        Code::Helper,
                        format!("helper `{}` reads blockIdx/gridDim but cannot be given the task's values", h.site.name),
                    )
                    .label(call_site.clone(), "called here")
                    .label(h.site.name_node.byte_range(), "this helper")
                    .help(why),
                );
            }
            let mut next = via.clone();
            next.push(h.site.name.as_str());
            for c in &h.facts.calls {
                stack.push((c.name.as_str(), call_site.clone(), next.clone()));
            }
            for (m, _) in &h.facts.ctx_member_calls {
                stack.push((m.as_str(), call_site.clone(), next.clone()));
            }
            for (m, _) in unread_member_calls(&h.facts, graph, opts) {
                stack.push((m, call_site.clone(), next.clone()));
            }
        }
    }
    // Members that read blockIdx/gridDim, called through an object by the kernel or a helper
    // it reaches: they would read the hardware's values (the persistent block's, not the
    // task's) and calls through objects cannot be rewritten: refuse rather than miscompile.
    if !graph.member_ctx.is_empty() {
        // Each body with whether it is rewritten to take the context (the kernel's, or a
        // helper's that needs it): only there are its functor calls passed it.
        let bodies =
            std::iter::once((&plan.facts, k, None, true)).chain(reach.iter().map(|(&i, call)| {
                let h = &helpers[i];
                (&h.facts, &h.site, Some(call), h.needs_ctx)
            }));
        for (facts, site, via, takes_ctx) in bodies {
            let functors = graph.member_ctx.contains("operator()");
            // Each member's calls in this body, in order of first call: one refusal per
            // member, labelled at every call.
            let mut found: Vec<(String, Vec<Range<usize>>)> = Vec::new();
            let mut add = |member: &str, call: Range<usize>| match found
                .iter_mut()
                .find(|(m, _)| m == member)
            {
                Some((_, calls)) => calls.push(call),
                None => found.push((member.to_string(), vec![call])),
            };
            // A call by name that reaches a member that cannot take the context at all, or an
            // included file's, is refused with that member named (the loop above), not twice.
            let unusable = |name: &str| {
                graph
                    .callees(name)
                    .any(|i| helpers[i].needs_ctx && !helpers[i].site.can_take_ctx())
                    || included_reader(opts, graph, name, false).is_some()
            };
            for (member, call) in graph.unresolved_member_calls(facts, site, src) {
                let by_name = call
                    .child_by_field_id(crate::lang::fields().function)
                    .is_some_and(|f| f.kind_id() != crate::lang::kinds().field_expression);
                if !(by_name && unusable(member)) {
                    add(member, call.byte_range());
                }
            }
            for (member, call) in &facts.member_calls {
                if graph.member_ctx.contains(member) {
                    // Above: refused where the context cannot be passed.
                } else if functors && !graph.member_names.contains(member) {
                    // `p.op(x)`: no member function of that name, so a functor held in a field.
                    add("operator()", call.byte_range());
                }
            }
            if functors {
                // Those that pass the context through `cupreempt::call_functor` are fine
                // (`CallGraph::functor_calls`, among `ctx_member_calls`).
                let passed = |c: &super::Call| {
                    takes_ctx
                        && facts
                            .ctx_member_calls
                            .iter()
                            .any(|(_, n)| n.id() == c.node.id())
                };
                let objects = facts
                    .calls
                    .iter()
                    .filter(|c| super::callgraph::names_local(facts, site, &c.name) && !passed(c));
                for c in objects {
                    add("operator()", c.node.byte_range());
                }
                // A call of an expression (`Scale{2.0f}(x)`, `ops[i](x)`) may call a functor
                // too, whose class the text need not name.
                let expressions = facts.indirect_calls.iter().filter(|n| {
                    !(takes_ctx && facts.ctx_member_calls.iter().any(|(_, c)| c.id() == n.id()))
                });
                for n in expressions {
                    add("operator()", n.byte_range());
                }
            }
            let found = found
                .into_iter()
                .map(|(member, calls)| member_reads_block_ids(&member, calls));
            for d in found {
                refusals.push(match via {
                    Some(call_site) => from_helper(&d, &k.name, &site.name, &[], call_site),
                    None => d,
                });
            }
        }
    }
    // The kernel's body and every helper body it reaches: where a path to the hardware's block
    // index can hide (each one refused here, in the body where it is, and named from the kernel).
    let bodies: Vec<(
        &super::BodyFacts,
        &super::FunctionSite,
        Option<&Range<usize>>,
    )> = std::iter::once((&plan.facts, k, None))
        .chain(
            reach
                .iter()
                .map(|(&i, call)| (&helpers[i].facts, &helpers[i].site, Some(call))),
        )
        .collect();
    for &(facts, site, via) in &bodies {
        let found = body_blockers(facts, site, graph, src);
        refusals.extend(found.into_iter().map(|d| match via {
            Some(call_site) => from_helper(&d, &k.name, &site.name, &[], call_site),
            None => d,
        }));
    }
    // A macro that calls a helper needing the context would still call the original, which
    // reads the hardware's blockIdx: refuse rather than miscompile. The helper may be this
    // file's or an included file's (a header's logging macro that calls the header's function,
    // which records the block's index).
    let reads_block_ids =
        |c: &str| graph.ctx_names.contains(c) || included_reader(opts, graph, c, true).is_some();
    // In the kernel's body and in every helper it reaches (a helper's `__syncthreads()` that a
    // header's macro turns into a logging call is the kernel's as much as its own).
    for &(facts, site, via) in &bodies {
        for m in &facts.macro_uses {
            if let Some(h) = m.facts.calls.iter().find(|c| reads_block_ids(c)) {
                let mut d = Diagnostic::new(Code::Helper, macro_calls_reader(&m.name, h))
                    .label(m.node.byte_range(), "macro used here");
                d.blamed_macro = Some(Box::new(crate::diagnostics::BlamedMacro {
                    name: m.name.clone(),
                    used: m.node.byte_range(),
                    reader: h.to_string(),
                }));
                refusals.push(match via {
                    Some(call_site) => from_helper(&d, &k.name, &site.name, &[], call_site),
                    None => d,
                });
            }
        }
    }

    // Barriers: those in the body, plus calls to helpers that synchronize (never rewritten).
    let mut barriers: Vec<BarrierSite<'t>> = plan.facts.barriers.clone();
    let mut syncing_helpers: Vec<(std::ops::Range<usize>, &str)> = Vec::new();
    // Calls by name, each with whether it may reach a helper that synchronizes the block, or
    // a warp (a qualified call only its owner's: `CallGraph::calls_barrier`); then the calls
    // no live copy can stand in for (`CallGraph::hidden_syncs`).
    let calls = plan.facts.calls.iter().map(|c| {
        (
            c.name.as_str(),
            c.node,
            graph.calls_barrier(c, helpers),
            graph.calls_warp_sync(c, helpers),
        )
    });
    let hidden = graph.hidden_syncs(&plan.facts, k, src, helpers);
    let hidden = hidden.iter().copied();
    for (name, node, syncs, _) in calls.clone().chain(hidden.clone()) {
        if syncs {
            syncing_helpers.push((node.byte_range(), name));
            barriers.push(BarrierSite {
                node,
                method: "sync",
                visible: false,
            });
        }
    }
    // A thread-dependent return that reaches a barrier: the predicated form.
    let hazard = plan
        .facts
        .returns
        .iter()
        .filter(|r| r.thread_dependent)
        .find_map(|r| {
            barriers
                .iter()
                .find(|b| plan.facts.reaches(&r.range(), &b.range()))
                .map(|b| (*r, *b))
        });
    // A barrier in a loop that threads may leave after different numbers of rounds: in the
    // original, a thread that leaves it and runs to the end exits, and the barriers stop
    // waiting for it; in a task it stays, and meets the task's own barriers (or the loop's) out
    // of step with the others. Where no barrier can follow the loop, a thread that leaves it
    // early may as well wait inside until the last one leaves, skipping the work of the rounds
    // it no longer has but passing their barriers (`predicate::plan_loops`): the predicated
    // loop. Elsewhere the original relies on the exited threads (a barrier after the loop
    // meets the in-loop barriers of the others), and no rewrite keeps that: refused.
    let mut loops: Vec<Node<'t>> = Vec::new();
    let mut uneven = plan.facts.uneven_loops.clone();
    uneven.sort_by_key(|l| l.start_byte()); // outer loops first
    for l in uneven {
        let Some(b) = barriers.iter().find(|b| in_rounds(l, b.range().start)) else {
            continue;
        };
        // A loop inside a predicated one: its walk checks it (its rounds must be uniform).
        if loops
            .iter()
            .any(|o| o.byte_range().contains(&l.start_byte()))
        {
            continue;
        }
        if hazard.is_none() && predicable_loop(l, k.body, &barriers) {
            loops.push(l);
            continue;
        }
        let what = match syncing_helpers.iter().find(|(r, _)| *r == b.range()) {
            Some((_, helper)) => format!("this call: `{helper}` synchronizes the block"),
            None => "this barrier".to_string(),
        };
        refusals.push(
            Diagnostic::new(
                Code::BarrierHazard,
                format!("kernel `{}`: a barrier in a loop that threads of a block may leave after different numbers of rounds", k.name),
            )
            .label(loop_head(l), "whether a thread stays in this loop depends on the thread")
            .label(b.range(), format!("the threads still in the loop wait at {what}"))
            .help("in the original, a thread that leaves the loop early ends, and the barrier stops waiting for it; a persistent block's thread cannot end. Give every thread of the block the same number of rounds (loop on a block-uniform bound, and guard the work inside with the thread's own condition); a `for` or `while` loop that no barrier follows, with no `return`, `break` or `continue` of its own, is rewritten so"),
        );
        break;
    }
    // The same at a warp's scale: a warp sync by a fixed mask (a shuffle, a ballot, a tile's
    // collective, a helper that does one) waits for every lane of the mask that has not
    // exited. A lane that returns before it, or leaves a loop around it sooner than the
    // others, exits in the original; in a task it stays, and the others wait for it.
    let mut warp_syncs: Vec<(Range<usize>, Option<&str>)> = plan
        .facts
        .warp_syncs
        .iter()
        .map(|w| (w.byte_range(), None))
        .collect();
    for (name, node, _, syncs_warp) in calls.chain(hidden) {
        if syncs_warp {
            warp_syncs.push((node.byte_range(), Some(name)));
        }
    }
    let what = |helper: Option<&str>| match helper {
        Some(h) => format!("this call: `{h}` synchronizes the warp"),
        None => "this warp-synchronous operation".to_string(),
    };
    let lane_loop = plan.facts.lane_uneven_loops.iter().find_map(|l| {
        warp_syncs
            .iter()
            .find(|(w, _)| in_rounds(*l, w.start))
            .map(|w| (*l, w))
    });
    if let Some((l, (w, helper))) = lane_loop {
        refusals.push(
            Diagnostic::new(
                Code::BarrierHazard,
                format!("kernel `{}`: a warp-synchronous operation in a loop that the lanes of a warp may leave after different numbers of rounds", k.name),
            )
            .label(loop_head(l), "whether a lane stays in this loop depends on the lane")
            .label(w.clone(), format!("the lanes still in the loop wait at {}", what(*helper)))
            .help("in the original, a lane that leaves the loop early ends, and the warp's operation stops waiting for it; a persistent block's lane cannot end. Give every lane of the warp the same number of rounds, or name the lanes that take part in the mask (`__ballot_sync`, `__activemask()`)"),
        );
    }
    let lane_return = plan.facts.lane_returns.iter().find_map(|r| {
        warp_syncs
            .iter()
            .find(|(w, _)| plan.facts.reaches(&r.byte_range(), w))
            .map(|w| (*r, w))
    });
    if let Some((r, (w, helper))) = lane_return {
        refusals.push(
            Diagnostic::new(
                Code::BarrierHazard,
                format!("kernel `{}`: a return that differs between the lanes of a warp reaches a warp-synchronous operation", k.name),
            )
            .label(r.byte_range(), "this return depends on the lane")
            .label(w.clone(), format!("and can reach {}", what(*helper)))
            .help("in the original, the returned lanes end, and the warp's operation stops waiting for them; a persistent block's lane cannot end. Let every lane reach the operation (guard the work, not the shuffle), or name the lanes that take part in the mask (`__ballot_sync`, `__activemask()`)"),
        );
    }
    let lane_guarded = warp_syncs.iter().find(|(w, _)| {
        plan.facts
            .lane_guarded
            .iter()
            .any(|g| g.start_byte() == w.start && g.end_byte() == w.end)
    });
    if let Some((w, helper)) = lane_guarded {
        refusals.push(
            Diagnostic::new(
                Code::BarrierHazard,
                format!("kernel `{}`: a warp-synchronous operation under a condition that differs between the lanes of a warp", k.name),
            )
            .label(w.clone(), format!("the lanes that take the branch wait at {}", what(*helper)))
            .help("in the original, the lanes that skip the branch run on to the kernel's end and exit, and the warp's operation stops waiting for them; a persistent block's lane cannot end, so the others would wait for it. Let every lane of the warp reach the operation (guard the work, not the shuffle), or name the lanes that take part in the mask (`__ballot_sync`, `__activemask()`)"),
        );
    }
    let mut mode = if loops.is_empty() {
        SyncMode::Plain
    } else {
        SyncMode::Predicated
    };
    if let Some((ret, bar)) = hazard {
        mode = SyncMode::Predicated;
        // Every return must go through the context; one inside a macro cannot be rewritten.
        if let Some(m) = plan.facts.macro_uses.iter().find(|m| m.facts.returns) {
            refusals.push(
                Diagnostic::new(
                    Code::BarrierHazard,
                    format!("kernel `{}`: a thread-dependent return reaches a barrier, and macro `{}` returns", k.name, m.name),
                )
                .label(ret.range(), "this return depends on the thread")
                .label(bar.range(), "and can reach this barrier")
                .label(m.node.byte_range(), "a return inside this macro cannot be rewritten")
                .help("in the predicated form every return is rewritten; expand the macro by hand"),
            );
        }
        // A call by name of a helper that synchronizes: the predicated form calls its live
        // copy, which `predicate::plan` plans or refuses.
        let live_copy = |b: &BarrierSite| {
            plan.facts
                .calls
                .iter()
                .any(|c| c.node.id() == b.node.id() && graph.calls_barrier(c, helpers))
        };
        if let Some(stuck) = barriers.iter().find(|b| !b.rewritable() && !live_copy(b)) {
            let mut d = match syncing_helpers.iter().find(|(r, _)| *r == stuck.range()) {
                // The barrier is a call to a helper that synchronizes: name the helper.
                Some((_, helper)) => Diagnostic::new(
                    Code::BarrierHazard,
                    format!("kernel `{}`: a thread-dependent return reaches a barrier inside helper `{helper}`, which cannot be rewritten", k.name),
                ),
                None => Diagnostic::new(
                    Code::BarrierHazard,
                    format!("kernel `{}`: a thread-dependent return reaches a barrier that cannot be rewritten", k.name),
                ),
            }
            .label(ret.range(), "this return depends on the thread");
            d = match syncing_helpers.iter().find(|(r, _)| *r == stuck.range()) {
                Some((_, helper)) if bar.range() == stuck.range() => d.label(
                    stuck.range(),
                    format!("and can reach this call: `{helper}` synchronizes the block (directly or through its callees), where the barrier is not rewritten"),
                ),
                Some((_, helper)) => d.label(bar.range(), "and can reach this barrier").label(
                    stuck.range(),
                    format!("`{helper}` synchronizes the block (directly or through its callees), where the barrier is not rewritten"),
                ),
                None => d
                    .label(bar.range(), "and can reach this barrier")
                    .label(stuck.range(), "this barrier is inside a macro, inline PTX or a helper"),
            };
            refusals.push(
                d.help("move the barrier into the kernel body, or make the return block-uniform"),
            );
        }
    }
    if refusals.iter().any(|d| d.is_refusal()) {
        return Err(refusals);
    }
    Ok((mode, reach.into_keys().collect(), hazard, loops))
}

/// Whether loop `l` of kernel body `body`, whose rounds differ between threads and which holds
/// a barrier, can be predicated (`predicate::plan_loops`): a `for` or `while` loop with a
/// condition and a braced body, in no other loop, with no `return` inside (but a lambda's)
/// and no `break` or `continue` of its own (a thread's rounds end only at the condition), and
/// no barrier after it in the body (`barriers`: the body's, and its calls of synchronizing
/// helpers).
fn predicable_loop(l: Node, body: Node, barriers: &[BarrierSite]) -> bool {
    let k = crate::lang::kinds();
    let f = crate::lang::fields();
    let condition = super::flow::loop_condition(l);
    let Some(loop_body) = l.child_by_field_id(f.body) else {
        return false;
    };
    if condition.is_none() || loop_body.kind_id() != k.compound_statement {
        return false;
    }
    let mut at = l;
    while let Some(p) = at.parent().filter(|p| p.id() != body.id()) {
        if super::flow::is_loop(p) {
            return false;
        }
        at = p;
    }
    // A lambda's returns are the lambda's (`auto found = [&] { ... return x; }();`).
    let returns = super::flow::descendants(loop_body)
        .into_iter()
        .filter(|n| n.kind_id() == k.return_statement)
        .any(|r| {
            let mut at = r;
            while let Some(p) = at.parent().filter(|p| p.id() != loop_body.id()) {
                if p.kind() == "lambda_expression" {
                    return false;
                }
                at = p;
            }
            true
        });
    !returns
        && super::flow::escaping_jumps(loop_body).is_empty()
        && barriers.iter().all(|b| b.range().start < l.end_byte())
}

/// A refusal found in a helper, as a refusal of the kernel that reaches it: the message names
/// the kernel, the helper (and the helpers called on the way) and what in it is refused; the
/// first label is the kernel's call, so that the refusal is counted and shown with the kernel,
/// then the helper's own labels.
fn from_helper(
    r: &Diagnostic,
    kernel: &str,
    helper: &str,
    via: &[&str],
    call_site: &std::ops::Range<usize>,
) -> Diagnostic {
    let through = if via.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = via.iter().map(|n| format!("`{n}`")).collect();
        format!(" (through {})", names.join(", "))
    };
    let mut d = Diagnostic::new(
        r.code,
        format!(
            "kernel `{kernel}` calls helper `{helper}`{through}, which is refused: {}",
            r.message
        ),
    )
    .label(
        call_site.clone(),
        format!("`{kernel}` reaches `{helper}` through this call"),
    );
    d.severity = r.severity;
    d.labels.extend(r.labels.iter().cloned());
    d.help = r.help.clone();
    d.blamed_macro = r.blamed_macro.clone();
    d
}

/// The label the body scan gives each grid-group identifier (CP002).
const GRID_GROUP_USED: &str = "grid group used here";

/// `refusals` with the grid-sync refusals of `body` made one per statement, pointing at the
/// grid barrier: the body scan reports every grid-group identifier (`cg::grid_group g =
/// cg::this_grid();` names two), so one statement would be reported twice, at the
/// declaration. Each statement that names the grid group gives one CP002, whose first label
/// is the first `X.sync()` on that group (the group a statement declares, or the
/// `this_grid()` it calls) and whose second is where the group is made; without such a call,
/// the first identifier.
fn at_grid_barriers(refusals: &[Diagnostic], body: Node, src: &str) -> Vec<Diagnostic> {
    let is_grid_use = |d: &Diagnostic| {
        d.code == Code::GridSync
            && d.labels
                .first()
                .is_some_and(|l| l.message == GRID_GROUP_USED)
    };
    let mut out: Vec<Diagnostic> = refusals
        .iter()
        .filter(|d| !is_grid_use(d))
        .cloned()
        .collect();
    // The statements that name the grid group, each with the first refusal in it.
    let mut statements: Vec<(Range<usize>, &Diagnostic)> = Vec::new();
    for d in refusals.iter().filter(|d| is_grid_use(d)) {
        let at = d.labels[0].start..d.labels[0].end;
        let stmt = statement_of(body, at.clone()).map_or(at, |n| n.byte_range());
        if !statements.iter().any(|(r, _)| *r == stmt) {
            statements.push((stmt, d));
        }
    }
    if statements.is_empty() {
        return out;
    }
    let syncs = grid_sync_calls(body, src);
    for (stmt, d) in statements {
        let names = declared_names(body, &stmt, src);
        let call = syncs.iter().find(|c| {
            names.contains(&c.object_text)
                || (stmt.start <= c.object.start && c.object.end <= stmt.end)
        });
        match call {
            Some(c) => {
                let mut one = Diagnostic::new(Code::GridSync, d.message.clone())
                    .label(c.call.clone(), "grid-wide barrier here");
                if !(c.call.start <= d.labels[0].start && d.labels[0].end <= c.call.end) {
                    one = one.label(d.labels[0].start..d.labels[0].end, "grid group made here");
                }
                one.help = d.help.clone();
                out.push(one);
            }
            None => out.push(d.clone()),
        }
    }
    out
}

/// A call `X.sync()` in a body: the call, and the object `X` (its range and text).
struct GridSyncCall {
    call: Range<usize>,
    object: Range<usize>,
    object_text: String,
}

/// Every `X.sync()` call in `body`, walked without recursion.
fn grid_sync_calls(body: Node, src: &str) -> Vec<GridSyncCall> {
    let mut out = Vec::new();
    let mut c = body.walk();
    loop {
        let n = c.node();
        if n.kind() == "call_expression" {
            let callee = n.child_by_field_name("function");
            let no_args = n
                .child_by_field_name("arguments")
                .is_some_and(|a| a.named_child_count() == 0);
            if let Some(callee) = callee.filter(|f| f.kind() == "field_expression" && no_args) {
                let field = callee.child_by_field_name("field");
                let object = callee.child_by_field_name("argument");
                if let (Some(field), Some(object)) = (field, object) {
                    if field.utf8_text(src.as_bytes()).ok() == Some("sync") {
                        out.push(GridSyncCall {
                            call: n.byte_range(),
                            object: object.byte_range(),
                            object_text: object.utf8_text(src.as_bytes()).unwrap_or("").to_string(),
                        });
                    }
                }
            }
        }
        if c.goto_first_child() {
            continue;
        }
        loop {
            if c.goto_next_sibling() {
                break;
            }
            if !c.goto_parent() || c.node() == body {
                return out;
            }
        }
    }
}

/// The statement of `body` (a direct child of a block) that holds `at`.
fn statement_of<'t>(body: Node<'t>, at: Range<usize>) -> Option<Node<'t>> {
    let mut n = body.descendant_for_byte_range(at.start, at.end)?;
    while let Some(p) = n.parent() {
        if p.kind() == "compound_statement" || n == body {
            return Some(n);
        }
        n = p;
    }
    None
}

/// The names a declaration statement spanning `stmt` declares (`g` in `grid_group g = ...;`).
fn declared_names(body: Node, stmt: &Range<usize>, src: &str) -> Vec<String> {
    let Some(n) = body.descendant_for_byte_range(stmt.start, stmt.end) else {
        return Vec::new();
    };
    if n.kind() != "declaration" {
        return Vec::new();
    }
    let mut c = n.walk();
    n.children_by_field_name("declarator", &mut c)
        .filter_map(|d| {
            let d = if d.kind() == "init_declarator" {
                d.child_by_field_name("declarator")?
            } else {
                d
            };
            (d.kind() == "identifier")
                .then(|| d.utf8_text(src.as_bytes()).ok().map(str::to_string))?
        })
        .collect()
}

/// The calls through objects in `facts` whose member's name is a device function that no
/// parse read (`KnownHelper::unread`: a member whose space a macro the run cannot see spells,
/// `scan::unmarked_block_index_readers`), where no helper of the file has that name: they are
/// followed as calls of it.
fn unread_member_calls<'f>(
    facts: &'f super::BodyFacts,
    graph: &CallGraph,
    opts: &Options,
) -> Vec<(&'f str, std::ops::Range<usize>)> {
    facts
        .member_calls
        .iter()
        .filter(|(m, _)| {
            graph.callees(m).next().is_none()
                && opts.known_helpers.iter().any(|h| h.unread && h.name == *m)
        })
        .map(|(m, c)| (m.as_str(), c.byte_range()))
        .collect()
}

/// CP008 for a call to a device function of an included file that reads blockIdx/gridDim: its
/// reads cannot be given the task's values from here.
fn included_helper(h: &crate::program::KnownHelper, call: &std::ops::Range<usize>) -> Diagnostic {
    if h.unread {
        return Diagnostic::new(
            Code::Helper,
            format!("`{}` is a device function the parser could not read as one (a syntax error around it, or an execution space spelled by a macro it cannot see): what it reads is unknown", h.name),
        )
        .label(call.clone(), "called here")
        .help("fix the syntax the parser reports around the function's definition (CP100), give `-I` for the header that defines its execution-space macro, or pass blockIdx/gridDim as arguments");
    }
    let what = "reads blockIdx/gridDim: from this file it cannot be given the task's values";
    Diagnostic::new(
        Code::Helper,
        format!("`{}`, a device function of an included file, {what}", h.name),
    )
    .label(call.clone(), "called here")
    .help("define the function in this file, or pass blockIdx/gridDim (or the values computed from them) as arguments")
}

/// CP008 for the calls through objects, in one body, of a member function that reads
/// blockIdx/gridDim: one diagnostic labelled at each call.
fn member_reads_block_ids(member: &str, calls: Vec<std::ops::Range<usize>>) -> Diagnostic {
    let mut d = Diagnostic::new(
        Code::Helper,
        format!("member function `{member}` reads blockIdx/gridDim, and this call cannot pass it the task's values"),
    );
    for call in calls {
        d = d.label(call, "called here");
    }
    d.help("a member defined in its class (named, not virtual) takes the task's values where the call says its class: through a local or parameter declared with it, `this->`, `Class::f()`, or unqualified inside the class. Otherwise pass the block index to the member as an argument, or make it a free `__device__` function")
}

/// Whether a default argument of `site`'s parameters names `blockIdx` or `gridDim`, or a name
/// of `block_names` (macros and helpers that read one).
pub(super) fn default_reads_block_ids(
    site: &super::FunctionSite,
    block_names: &BTreeSet<String>,
) -> bool {
    site.param_list
        .iter()
        .any(|p| default_text(&p.text).is_some_and(|d| reads_block_ids(d, block_names)))
}

/// A parameter's default argument (the expression after its `=`), if it has one.
fn default_text(param: &str) -> Option<&str> {
    let rest = param[crate::rewrite::strip_default(param).len()..].trim_start();
    rest.strip_prefix('=').map(str::trim)
}

fn reads_block_ids(text: &str, block_names: &BTreeSet<String>) -> bool {
    crate::lang::VIRTUAL_BUILTINS
        .iter()
        .map(|(name, _)| *name)
        .chain(block_names.iter().map(String::as_str))
        .any(|name| crate::lang::has_word(text, name))
}

/// Words a default argument may hold and still mean the same at a call in another function:
/// the built-in variables and their members, built-in types and casts.
const PASSABLE_WORDS: &[&str] = &[
    "blockDim",
    "blockIdx",
    "char",
    "const",
    "gridDim",
    "int",
    "int32_t",
    "int64_t",
    "long",
    "short",
    "signed",
    "size_t",
    "static_cast",
    "threadIdx",
    "uint32_t",
    "uint64_t",
    "unsigned",
    "warpSize",
    "x",
    "y",
    "z",
];

/// The default arguments of a helper's parameters by position (merged over its declarations,
/// `declared`), where some read blockIdx/gridDim and every one of those can be passed at the
/// helper's calls instead (`rewrite::context_calls`): made of the built-in variables, their
/// members, numbers, operators, built-in types and casts only, so that its text means the same
/// at a call in a transformed function, where `blockIdx` and `gridDim` are the task's. None
/// where no default reads them, or one that does names anything else (a constant, a parameter,
/// a helper), or the declarations disagree on the parameters' count.
pub(crate) fn passable_block_defaults(
    declared: &[&super::FunctionSite],
    block_names: &BTreeSet<String>,
) -> Option<Vec<Option<String>>> {
    let count = declared.first()?.param_list.len();
    if declared.iter().any(|d| d.param_list.len() != count) {
        return None;
    }
    let defaults: Vec<Option<String>> = (0..count)
        .map(|i| {
            declared
                .iter()
                .find_map(|d| default_text(&d.param_list[i].text))
                .map(str::to_string)
        })
        .collect();
    // A call may leave out every argument from the first default on; those up to the last
    // that reads the block index are then passed at the call, so each must be passable.
    let last = defaults.iter().rposition(|d| {
        d.as_deref()
            .is_some_and(|d| reads_block_ids(d, block_names))
    })?;
    let passable = |d: &str| {
        // Words, not numbers (`1u`, `0x10` start with a digit).
        d.split(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
            .filter(|w| w.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic()))
            .all(|w| PASSABLE_WORDS.binary_search(&w).is_ok())
    };
    defaults[..=last]
        .iter()
        .flatten()
        .all(|d| passable(d))
        .then_some(defaults)
}

/// The first name among `types` that `body` uses as a type or names, with where.
fn uses_type(body: Node, src: &str, types: &BTreeSet<String>) -> Option<(String, Range<usize>)> {
    let k = crate::lang::kinds();
    let mut found = None;
    if types.is_empty() {
        return found;
    }
    crate::lang::visit(body, |n| {
        let text = crate::lang::text(n, src);
        if found.is_none()
            && (n.kind_id() == k.type_identifier || n.kind_id() == k.identifier)
            && types.contains(text)
        {
            found = Some((text.to_string(), n.byte_range()));
        }
        found.is_none()
    });
    found
}

/// Where a class defined inside `body` names a built-in index (`blockIdx`, `gridDim`,
/// `threadIdx`) or a name of `block_names` (macros and helpers that read them).
fn local_class_naming_shadows(
    body: Node,
    src: &str,
    block_names: &BTreeSet<String>,
) -> Option<Range<usize>> {
    let mut found = None;
    crate::lang::visit(body, |n| {
        let class = n.kind() == "class_specifier" || n.kind() == "struct_specifier";
        if found.is_none() && class {
            found = super::callgraph::first_block_name(n, src, block_names, true)
                .map(|m| m.byte_range());
        }
        found.is_none() && !class
    });
    found
}

/// The refusals that one body (a kernel's, or a helper's it reaches) holds for paths to the
/// hardware's block index that no task context follows: calls through function pointers where
/// the file takes a block-reading helper's address, types whose implicit code reads it, and
/// classes defined in the body that name it. Labelled in the body; the caller names the kernel.
pub(super) fn body_blockers(
    facts: &super::BodyFacts,
    site: &super::FunctionSite,
    graph: &CallGraph,
    src: &str,
) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    // A helper that reads blockIdx/gridDim and whose address the file takes may be reached
    // through a function pointer, whose call cannot pass the context: every call that may
    // go through one (a call of an expression, or of a variable or parameter of the body).
    if let Some(taken) = graph.address_taken.iter().next() {
        let by_name = facts.calls.iter().filter(|c| {
            super::callgraph::names_local(facts, site, &c.name)
                || graph.file_variables.contains(&c.name)
        });
        let calls = facts
            .indirect_calls
            .iter()
            .map(|n| n.byte_range())
            .chain(by_name.map(|c| c.node.byte_range()));
        for call in calls {
            found.push(
                Diagnostic::new(
                    Code::Helper,
                    format!("a call through a function pointer may reach `{taken}`, which reads blockIdx/gridDim and whose address this file takes; such a call cannot be given the task's values"),
                )
                .label(call, "called here")
                .help("call the function by its name, or pass it the block index as an argument"),
            );
        }
    }
    // An object of a class whose constructor, destructor, operators or default member
    // initializers read blockIdx/gridDim runs that code without a call by name.
    if let Some((name, at)) = uses_type(site.body, src, &graph.implicit_readers) {
        found.push(
            Diagnostic::new(
                Code::Helper,
                format!("type `{name}` reads blockIdx/gridDim in code its objects run without a call by name (a constructor, destructor, operator or default member initializer), which cannot be given the task's values"),
            )
            .label(at, "used here")
            .help("pass the block index to the type as a constructor or member argument"),
        );
    }
    // A class defined in the body whose code names blockIdx/gridDim/threadIdx (or calls a
    // helper given the context): in the transformed body those are locals of the enclosing
    // function (and `__cp` a parameter), which a local class may not use; the output would
    // not compile.
    if let Some(at) = local_class_naming_shadows(site.body, src, &graph.block_names) {
        found.push(
            Diagnostic::new(
                Code::Helper,
                "a class defined in the body names blockIdx/gridDim/threadIdx (or calls a helper that reads them), which in the transformed body are the enclosing function's locals, out of a local class's reach",
            )
            .label(at, "named here")
            .help("define the class outside the function, or pass the values to it"),
        );
    }
    found
}

/// Whether byte `at` lies in loop `l` but not in a `for`'s initializer, which runs once,
/// before any thread leaves.
fn in_rounds(l: Node, at: usize) -> bool {
    let once = l.child_by_field_id(crate::lang::fields().initializer);
    l.byte_range().contains(&at) && !once.is_some_and(|i| i.byte_range().contains(&at))
}

/// A loop's head, for a label: from its keyword to the end of its condition (`for (...)`,
/// `while (...)`), or the whole `do` statement.
pub(super) fn loop_head(l: Node) -> Range<usize> {
    let f = crate::lang::fields();
    let end = l
        .child_by_field_id(f.body)
        .filter(|b| b.start_byte() > l.start_byte())
        .map_or(l.end_byte(), |b| b.start_byte());
    let r = l.start_byte()..end;
    if r.is_empty() {
        l.byte_range()
    } else {
        r
    }
}

/// The included files' helper that a call of `name` reaches (this file defines no function of
/// that name), if it reads blockIdx/gridDim where the call reaches it. A call in a body is
/// rewritten to pass the task context to a helper whose file gives it the context form
/// (`with_ctx`), so there only a reader without one counts. A call inside a macro is never
/// rewritten (`in_macro`): any reader counts, and so does a helper whose body was not read
/// (`unread`).
fn included_reader<'o>(
    opts: &'o Options,
    graph: &CallGraph,
    name: &str,
    in_macro: bool,
) -> Option<&'o crate::program::KnownHelper> {
    if graph.callees(name).next().is_some() {
        return None;
    }
    opts.known_helpers.iter().find(|h| {
        h.name == name
            && if in_macro {
                h.reads_block_ids || h.unread
            } else {
                h.reads_block_ids && !h.with_ctx
            }
    })
}

/// The CP008 message for a macro that calls a helper reading blockIdx/gridDim.
fn macro_calls_reader(name: &str, helper: &str) -> String {
    format!("macro `{name}` calls helper `{helper}`, which reads blockIdx/gridDim; calls inside macros cannot be rewritten")
}

#[cfg(test)]
mod tests {
    use super::passable_block_defaults;
    use std::collections::BTreeSet;

    fn defaults(src: &str, block_names: &[&str]) -> Option<Vec<Option<String>>> {
        let parsed = crate::parse::parse(src);
        let a = crate::analysis::analyze(&parsed, src, &crate::Options::default());
        let site = &a.helpers.first().expect("a helper").site;
        let names: BTreeSet<String> = block_names.iter().map(|s| s.to_string()).collect();
        passable_block_defaults(&[site], &names)
    }

    #[test]
    fn defaults_made_of_built_ins_can_be_passed_at_the_call() {
        assert_eq!(
            defaults("__device__ void f(int a, const uint32_t bx = blockIdx.x, int c = 2 * gridDim.y + 1u) {}", &[]),
            Some(vec![None, Some("blockIdx.x".into()), Some("2 * gridDim.y + 1u".into())])
        );
        // Defaults before the last that reads the index are passed too: each must be passable.
        assert!(defaults(
            "__device__ void f(int m = kTile, unsigned b = blockIdx.x) {}",
            &[]
        )
        .is_none());
        assert!(defaults(
            "__device__ void f(unsigned b = blockIdx.x, int m = kTile) {}",
            &[]
        )
        .is_some());
        // What the call's scope may not know, or reads the index through a macro or helper.
        assert!(defaults("__device__ void f(unsigned b = blockIdx.x * N) {}", &[]).is_none());
        assert!(defaults("__device__ void f(unsigned b = BLOCK_Y) {}", &["BLOCK_Y"]).is_none());
        // No default that reads the index: nothing to pass.
        assert!(defaults("__device__ void f(int m = 4) {}", &[]).is_none());
    }
}
