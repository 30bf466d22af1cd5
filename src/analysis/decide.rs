//! The decision about one kernel: whether it is transformed, in which form, and why not. Its
//! own refusals, those of the helpers it reaches, and a thread-dependent return that reaches a
//! barrier (the predicated form, or a refusal when a barrier or return cannot be rewritten).

use super::body::{BarrierSite, ReturnSite};
use super::callgraph::CallGraph;
use super::{HelperPlan, KernelPlan, SyncMode};
use crate::diagnostics::{Code, Diagnostic};
use crate::options::Options;
use std::collections::BTreeSet;

/// The mode, the helpers the kernel reaches (indices) and its hazard, if any.
pub type Decision<'t> = (
    SyncMode,
    BTreeSet<usize>,
    Option<(ReturnSite<'t>, BarrierSite<'t>)>,
);

/// Decides whether a kernel is transformed: its mode, the helpers it reaches and its hazard.
pub fn decide<'t>(
    plan: &KernelPlan<'t>,
    opts: &Options,
    helpers: &[HelperPlan],
    graph: &CallGraph,
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
    refusals.extend(plan.facts.refusals.iter().cloned());

    // Everything the kernel reaches through calls to helpers of this file.
    let mut reach: BTreeSet<usize> = BTreeSet::new();
    // Each call to follow: the callee's name, the kernel's call that leads there, and the
    // helpers called on the way (to name them in messages).
    let mut stack: Vec<(&str, std::ops::Range<usize>, Vec<&str>)> = plan
        .facts
        .calls
        .iter()
        .map(|c| (c.name.as_str(), c.node.byte_range(), Vec::new()))
        .collect();
    while let Some((name, call_site, via)) = stack.pop() {
        for i in graph.callees(name) {
            let h = &helpers[i];
            if !reach.insert(i) {
                continue;
            }
            for r in &h.facts.refusals {
                refusals.push(from_helper(r, &k.name, &h.site.name, &via, &call_site));
            }
            if h.needs_ctx && (!h.site.problems.is_empty() || h.site.host) {
                let why = if h.site.host {
                    "a __host__ __device__ helper cannot take the task context".to_string()
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
        }
    }
    // A macro of this file that calls a helper needing the context would still call the
    // original, which reads the hardware's blockIdx: refuse rather than miscompile.
    for m in &plan.facts.macro_uses {
        if let Some(h) = m
            .facts
            .calls
            .iter()
            .find(|c| graph.ctx_names.contains(c.as_str()))
        {
            refusals.push(
                Diagnostic::new(
                    Code::Helper,
                    format!("macro `{}` calls helper `{h}`, which reads blockIdx/gridDim; calls inside macros cannot be rewritten", m.name),
                )
                .label(m.node.byte_range(), "macro used here"),
            );
        }
    }

    // Barriers: those in the body, plus calls to helpers that synchronize (never rewritten).
    let mut barriers: Vec<BarrierSite<'t>> = plan.facts.barriers.clone();
    let mut syncing_helpers: Vec<(std::ops::Range<usize>, &str)> = Vec::new();
    for c in &plan.facts.calls {
        if graph.synchronizes(c) {
            syncing_helpers.push((c.node.byte_range(), c.name.as_str()));
            barriers.push(BarrierSite {
                node: c.node,
                method: "sync",
                visible: false,
            });
        }
    }
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
    let mut mode = SyncMode::Plain;
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
        if let Some(stuck) = barriers.iter().find(|b| !b.rewritable()) {
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
    Ok((mode, reach, hazard))
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
    d
}
