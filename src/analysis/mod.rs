//! Analysis: answers questions about the source and never edits it.
//!
//! `scan` finds the pieces (kernels, device helpers, launch sites, macros, pragmas); `body`
//! looks inside one function body (virtual built-ins, barriers, returns, refused constructs);
//! `uniformity` decides which returns are thread-dependent; `analyze` puts it together and
//! decides, per kernel, whether and how it is transformed.

mod body;
mod pragmas;
mod predicate;
mod scan;
mod shared;
mod uniformity;

pub use body::{callee_name, BarrierSite, BodyFacts, Call, ReturnSite};
pub use pragmas::Pragmas;
pub use predicate::{Predication, Step};
pub use scan::{FunctionSite, LaunchSite, Linkage, MacroFacts, Param, TemplateParam};

use crate::diagnostics::{Code, Diagnostic};
use crate::options::Options;
use std::collections::{BTreeMap, BTreeSet};
use tree_sitter::Node;

/// How a kernel is transformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncMode {
    /// No thread-dependent return reaches a barrier: barriers stay as they are.
    Plain,
    /// A thread-dependent return reaches a barrier: returned threads stay, skip the work after
    /// their return and go through the remaining barriers (`predicate`).
    Predicated,
}

impl SyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Plain => "plain",
            SyncMode::Predicated => "predicated",
        }
    }
}

#[derive(Debug)]
pub struct KernelPlan<'t> {
    pub site: FunctionSite<'t>,
    pub facts: BodyFacts<'t>,
    /// None when the kernel is left untouched (see the diagnostics).
    pub mode: Option<SyncMode>,
    pub chunk: u32,
    pub budget_ns: u32,
    /// Earlier declarations of the same kernel (the first gets the wrapper's declaration).
    pub prior_declarations: Vec<FunctionSite<'t>>,
    /// Another transformed kernel has the same name in the same scope.
    pub overloaded: bool,
    /// The thread-dependent return and the barrier it reaches (predicated kernels).
    pub hazard: Option<(ReturnSite<'t>, BarrierSite<'t>)>,
    /// How the body is predicated (predicated kernels).
    pub predication: Option<Predication<'t>>,
    /// The kernel may use shared memory (keep the barrier between tasks).
    pub may_use_shared: bool,
}

impl KernelPlan<'_> {
    pub fn transformed(&self) -> bool {
        self.mode.is_some()
    }
}

#[derive(Debug)]
pub struct HelperPlan<'t> {
    pub site: FunctionSite<'t>,
    pub facts: BodyFacts<'t>,
    /// Gets a task-context parameter (it reads blockIdx/gridDim, maybe through other helpers).
    pub needs_ctx: bool,
    /// Is called, directly or not, by a transformed kernel.
    pub reached: bool,
    pub prior_declarations: Vec<FunctionSite<'t>>,
}

pub struct Analysis<'t> {
    pub kernels: Vec<KernelPlan<'t>>,
    pub helpers: Vec<HelperPlan<'t>>,
    pub launches: Vec<LaunchSite<'t>>,
    pub diagnostics: Vec<Diagnostic>,
    /// Where `#include "cupreempt.cuh"` goes: after the leading comments.
    pub include_at: usize,
}

impl Analysis<'_> {
    pub fn kernel(&self, name: &str) -> Option<&KernelPlan<'_>> {
        self.kernels.iter().find(|k| k.site.name == name)
    }
}

pub fn analyze<'t>(root: Node<'t>, src: &'t str, opts: &Options) -> Analysis<'t> {
    let found = scan::scan(root, src);
    let mut diagnostics = found.diagnostics;
    let macros = &found.macros;

    // Helpers: facts, then which need a context (fixpoint over the call graph by name).
    let mut helpers: Vec<HelperPlan> = found
        .helpers
        .into_iter()
        .map(|h| {
            let facts = body::facts(h.body, src, macros, false);
            let prior = prior_declarations(&found.declarations, &h);
            HelperPlan {
                site: h,
                facts,
                needs_ctx: false,
                reached: false,
                prior_declarations: prior,
            }
        })
        .collect();
    let mut ctx_names: BTreeSet<String> = BTreeSet::new();
    loop {
        let mut changed = false;
        for h in helpers.iter_mut() {
            if h.needs_ctx {
                continue;
            }
            let needs = !h.facts.virtual_reads.is_empty()
                || h.facts.calls.iter().any(|c| ctx_names.contains(&c.name));
            if needs {
                h.needs_ctx = true;
                ctx_names.insert(h.site.name.clone());
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // All overloads of a name get a context version: calls are rewritten by name.
    for h in helpers.iter_mut() {
        if ctx_names.contains(&h.site.name) {
            h.needs_ctx = true;
        }
    }
    // Helpers that synchronize the block, directly or through other helpers.
    let mut barrier_names: BTreeSet<String> = BTreeSet::new();
    loop {
        let before = barrier_names.len();
        for h in &helpers {
            if !h.facts.barriers.is_empty()
                || h.facts
                    .calls
                    .iter()
                    .any(|c| barrier_names.contains(&c.name))
            {
                barrier_names.insert(h.site.name.clone());
            }
        }
        if barrier_names.len() == before {
            break;
        }
    }
    let helper_index: BTreeMap<&str, Vec<usize>> =
        helpers
            .iter()
            .enumerate()
            .fold(BTreeMap::new(), |mut m, (i, h)| {
                m.entry(h.site.name.as_str()).or_default().push(i);
                m
            });

    let bodies: Vec<std::ops::Range<usize>> = found
        .kernels
        .iter()
        .map(|k| k.body.byte_range())
        .chain(helpers.iter().map(|h| h.site.body.byte_range()))
        .collect();
    let file_shared = shared::file_scope_shared(src, &bodies);

    let mut kernels = Vec::new();
    let mut reached: BTreeSet<usize> = BTreeSet::new();
    for k in found.kernels {
        let facts = body::facts(k.body, src, macros, true);
        let prior = prior_declarations(&found.declarations, &k);
        let may_use_shared = file_shared
            || shared::may_use_shared(
                crate::lang::text(k.body, src),
                &facts,
                &helpers,
                &helper_index,
                src,
            );
        let mut plan = KernelPlan {
            may_use_shared,
            chunk: 0,
            budget_ns: 0,
            mode: None,
            prior_declarations: prior,
            overloaded: false,
            hazard: None,
            predication: None,
            site: k,
            facts,
        };
        let decision = decide(
            &plan,
            opts,
            &helpers,
            &helper_index,
            &ctx_names,
            &barrier_names,
        );
        match decision {
            Ok((mode, reach, hazard)) => {
                plan.mode = Some(mode);
                plan.hazard = hazard;
                reached.extend(reach);
                let (chunk, budget) = pragmas::chunking(opts, &plan.site.name, &plan.site.pragmas);
                plan.chunk = chunk;
                plan.budget_ns = budget;
                if mode == SyncMode::Predicated {
                    let (ret, bar) = plan.hazard.expect("predicated implies a hazard");
                    let params: Vec<String> = plan
                        .site
                        .param_list
                        .iter()
                        .map(|p| p.name.clone())
                        .collect();
                    match predicate::plan(
                        plan.site.body,
                        &params,
                        &plan.facts,
                        src,
                        macros,
                        (ret.range(), bar.range()),
                    ) {
                        Ok(p) => {
                            plan.predication = Some(p);
                            diagnostics.push(
                                Diagnostic::new(
                                    Code::PredicatedRewrite,
                                    format!(
                                        "kernel `{}`: a thread-dependent return reaches a barrier; the body is rewritten into the predicated form",
                                        plan.site.name
                                    ),
                                )
                                .kernel(&plan.site.name)
                                .label(ret.range(), "this return depends on the thread")
                                .label(bar.range(), "and this barrier can follow it")
                                .help("a returned thread stays with `__cp_live` cleared: it skips the work after its return, passes the remaining barriers and votes the neutral value in block reductions"),
                            );
                        }
                        Err(d) => {
                            plan.mode = None;
                            diagnostics.push(d.kernel(&plan.site.name));
                        }
                    }
                }
            }
            Err(mut d) => {
                for x in d.iter_mut() {
                    x.kernel = Some(plan.site.name.clone());
                }
                diagnostics.extend(d);
            }
        }
        kernels.push(plan);
    }
    for i in reached {
        helpers[i].reached = true;
    }
    // Transformed kernels sharing a name in one scope need the deducing launch form.
    for i in 0..kernels.len() {
        let same = kernels.iter().enumerate().any(|(j, o)| {
            j != i
                && o.transformed()
                && o.site.name == kernels[i].site.name
                && o.site.scope == kernels[i].site.scope
        });
        kernels[i].overloaded = same;
    }

    Analysis {
        kernels,
        helpers,
        launches: found.launches,
        diagnostics,
        include_at: found.include_at,
    }
}

fn prior_declarations<'t>(
    decls: &[FunctionSite<'t>],
    def: &FunctionSite<'t>,
) -> Vec<FunctionSite<'t>> {
    decls
        .iter()
        .filter(|d| {
            d.name == def.name
                && d.scope == def.scope
                && d.outer.end_byte() <= def.outer.start_byte()
        })
        .cloned()
        .collect()
}

type Decision<'t> = (
    SyncMode,
    BTreeSet<usize>,
    Option<(ReturnSite<'t>, BarrierSite<'t>)>,
);

/// Decides whether a kernel is transformed: its mode, the helpers it reaches and its hazard.
fn decide<'t>(
    plan: &KernelPlan<'t>,
    opts: &Options,
    helpers: &[HelperPlan],
    index: &BTreeMap<&str, Vec<usize>>,
    ctx_names: &BTreeSet<String>,
    barrier_names: &BTreeSet<String>,
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
    let mut stack: Vec<(&str, std::ops::Range<usize>)> = plan
        .facts
        .calls
        .iter()
        .map(|c| (c.name.as_str(), c.node.byte_range()))
        .collect();
    while let Some((name, call_site)) = stack.pop() {
        for &i in index.get(name).into_iter().flatten() {
            let h = &helpers[i];
            if !reach.insert(i) {
                continue;
            }
            for r in &h.facts.refusals {
                refusals.push(r.clone().label(
                    call_site.clone(),
                    format!("reached from `{}` through this call", k.name),
                ));
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
            for c in &h.facts.calls {
                stack.push((c.name.as_str(), call_site.clone()));
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
            .find(|c| ctx_names.contains(c.as_str()))
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
    for c in &plan.facts.calls {
        if barrier_names.contains(&c.name) {
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
            refusals.push(
                Diagnostic::new(
                    Code::BarrierHazard,
                    format!("kernel `{}`: a thread-dependent return reaches a barrier that cannot be rewritten", k.name),
                )
                .label(ret.range(), "this return depends on the thread")
                .label(bar.range(), "and can reach this barrier")
                .label(stuck.range(), "this barrier is inside a macro, inline PTX or a helper")
                .help("move the barrier into the kernel body, or make the return block-uniform"),
            );
        }
    }
    if refusals.iter().any(|d| d.is_refusal()) {
        return Err(refusals);
    }
    Ok((mode, reach, hazard))
}
