//! Analysis: answers questions about the source and never edits it.
//!
//! The stages, in the order `analyze` runs them:
//!
//! * `scan` walks the file once and finds the pieces (`sites`: kernels, device helpers, their
//!   earlier declarations, launch sites), the facts of its macros (`macros`) and the
//!   `#pragma cupreempt` lines before each function (`pragmas`);
//! * `body` looks inside one function body: virtual built-ins read, calls, barriers, returns,
//!   macro uses and refused constructs; `uniformity` tells which returns are thread-dependent,
//!   using the shapes of control flow in `flow`;
//! * `callgraph` follows calls between helpers by name: which need the task context, which
//!   synchronize the block;
//! * `shared` decides whether a kernel may use shared memory (the barrier between tasks);
//! * `decide` decides, per kernel, whether it is transformed and in which form;
//! * `predicate` plans the predicated form of a kernel whose thread-dependent return reaches a
//!   barrier, using `effects` (what an expression reads and writes).
//!
//! `analyze` runs them and returns one plan per kernel and helper, the launch sites and the
//! diagnostics; `rewrite` turns that into edits.

mod body;
mod callgraph;
mod classes;
mod decide;
mod effects;
mod flow;
mod hidden;
pub use hidden::HeadBranches;
mod kernel_pointer;
mod macros;
mod pragmas;
mod predicate;
mod registers;
pub(crate) mod scan;
mod shared;
mod shared_size;
mod sites;
mod spin;
mod uneven;
mod uniformity;

pub use body::{BarrierSite, BodyFacts, Call, ReturnSite};
pub use callgraph::{owner as helper_owner, FUNCTOR_CALL};
pub use macros::MacroFacts;
pub use pragmas::Pragmas;
pub use predicate::{LiveHelper, PredicatedLoop, Predication, Step};
pub use sites::{
    names_inserted, unconditional_params, FunctionSite, GridConstant, LaunchSite, Linkage, Param,
    TemplateParam,
};
pub use uniformity::IncludedFunctions;

pub use crate::diagnostics::KernelId;

use crate::diagnostics::{Code, Diagnostic};
use crate::lang::text;
use crate::options::Options;
use crate::vocab::CTX_LIVE;
use callgraph::CallGraph;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
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
    /// Its index in `Analysis::kernels`.
    pub id: KernelId,
    pub site: FunctionSite<'t>,
    pub facts: BodyFacts<'t>,
    /// None when the kernel is left untouched (see the diagnostics).
    pub mode: Option<SyncMode>,
    pub chunk: u32,
    pub budget_ns: u32,
    /// Earlier declarations of the same kernel (the first gets the wrapper's declaration).
    pub prior_declarations: Vec<FunctionSite<'t>>,
    /// Another transformed kernel has the same name in the same scope, here or in another file
    /// of the program (its launch types are numbered).
    pub overloaded: bool,
    /// Another transformed kernel of this file has the same name in the same scope: a launch
    /// must choose among them by its arguments (a namesake in another file alone does not).
    pub overloaded_here: bool,
    /// How many transformed kernels of the same name (any scope) come before this one: it
    /// numbers the launch types of overloads.
    pub ordinal: usize,
    /// How the body is predicated (predicated kernels).
    pub predication: Option<Predication<'t>>,
    /// The kernel may use shared memory (keep the barrier between tasks).
    pub may_use_shared: bool,
    /// It gets the second wrapper held to 32 registers: it has no launch bounds of its own
    /// (two sets would not compile), or bounds the capped wrapper raises (`FunctionSite::raisable_bounds`),
    /// and may fit in 32 registers (`registers.rs`).
    pub capped_wrapper: bool,
    /// The capped wrapper is the kernel's own `__launch_bounds__` with more blocks per SM
    /// (`rewrite::kernel`, `vocab::R32_BLOCKS_OF`).
    pub capped_by_own_bounds: bool,
    /// An explicit specialization's number among its template's (from 1; 0 for any other
    /// kernel): the name of its own body (`couple_specializations`).
    pub specialization_ordinal: usize,
    /// On a template's first explicit specialization, where the template is only declared in
    /// this file (no definition: every instance specialized): that declaration, after which
    /// the wrapper templates and launch types are declared, and this plan stands for the
    /// family at launch sites.
    pub family_declaration: Option<FunctionSite<'t>>,
    /// Conditional groups in its head that choose among its attributes (`hidden::HeadBranches`):
    /// the rewrite gives the branches the grammar did not read the body's head too, and copies
    /// the groups into the generated kernels' heads.
    pub head_branches: Option<HeadBranches>,
    /// Its own static shared memory leaves no room for the task loop's under the 48 KB a block
    /// may declare statically: the loop keeps its state in dynamic shared memory, which the
    /// launches add (`shared_size::loop_state`), and the wrappers have names of their own
    /// (`vocab::dynamic_wrapper_name`).
    pub loop_state_dynamic: bool,
    /// A kernel template whose static shared memory the text does not settle: the C++ constant
    /// expression of its bytes, by which each instance's launch types choose the static or the
    /// dynamic form (`shared_size::LoopState::PerInstance`; both are defined). None for an
    /// overload (`number_overloads`).
    pub loop_state_per_instance: Option<String>,
    /// A function of the file that is no kernel has its name (`sites::plain_function_names`):
    /// its launch types name the original by its type, which picks it from the overload set.
    pub function_namesake: bool,
    /// Macros the kernel was judged as if undefined (`Options::assumed_undefined`): its
    /// wrappers are compiled only where each of them is.
    pub assumed_undefined: Vec<String>,
}

impl<'t> KernelPlan<'t> {
    pub fn transformed(&self) -> bool {
        self.mode.is_some()
    }

    /// Whether launches by this kernel's name go through this plan's launch types: every kernel
    /// but an explicit specialization, whose launches go through its template's (the first
    /// specialization of a template only declared here stands for it).
    pub fn launched_by_name(&self) -> bool {
        !self.site.specialization || self.family_declaration.is_some()
    }

    /// The plan before the decision: left untouched until `decide` says otherwise.
    fn untouched(
        id: KernelId,
        site: FunctionSite<'t>,
        facts: BodyFacts<'t>,
        declarations: &[FunctionSite<'t>],
        may_use_shared: bool,
        capped_wrapper: bool,
    ) -> Self {
        KernelPlan {
            id,
            prior_declarations: callgraph::prior_declarations(declarations, &site),
            may_use_shared,
            capped_wrapper,
            capped_by_own_bounds: false,
            chunk: 0,
            budget_ns: 0,
            mode: None,
            overloaded: false,
            overloaded_here: false,
            ordinal: 0,
            predication: None,
            specialization_ordinal: 0,
            family_declaration: None,
            head_branches: None,
            loop_state_dynamic: false,
            loop_state_per_instance: None,
            function_namesake: false,
            assumed_undefined: Vec::new(),
            site,
            facts,
        }
    }
}

#[derive(Debug)]
pub struct HelperPlan<'t> {
    pub site: FunctionSite<'t>,
    pub facts: BodyFacts<'t>,
    /// Gets a task-context parameter (it reads blockIdx/gridDim, maybe through other helpers).
    pub needs_ctx: bool,
    /// Synchronizes the block, directly or through other helpers (`CallGraph::build`).
    pub synchronizes: bool,
    /// Synchronizes the lanes of a warp by a fixed mask, directly or through other helpers
    /// (`CallGraph::build`).
    pub synchronizes_warp: bool,
    /// Is called, directly or not, by a transformed kernel.
    pub reached: bool,
    /// Reaches a read of the block index that no task context can follow (a type's implicit
    /// code, a default argument, a function pointer: `CallGraph::reaches_unfollowed_read`), so
    /// a kernel of another file that calls it is refused like one calling a helper that reads
    /// blockIdx (`KnownHelper::reads_block_ids`).
    pub unfollowed_read: bool,
    pub prior_declarations: Vec<FunctionSite<'t>>,
    /// Its default arguments by position, where some read blockIdx/gridDim and a call from a
    /// transformed function passes them itself (`CallGraph::block_defaults`): in the helper
    /// they would read the hardware's values, at the call they read the task's.
    pub call_defaults: Option<Vec<Option<String>>>,
    /// Where it synchronizes the block and other files' kernels may call it: Ok, its live copy
    /// is made for them (`Analysis::live_exports`), with for each parameter whether their calls
    /// must pass a value that is the same in every thread; Err, why none is made.
    pub live_copy: Option<Result<Vec<bool>, String>>,
}

impl<'t> HelperPlan<'t> {
    /// Its definition and its earlier declarations (where default arguments may stand).
    pub fn declarations(&self) -> impl Iterator<Item = &FunctionSite<'t>> {
        std::iter::once(&self.site).chain(self.prior_declarations.iter())
    }

    /// It returns a block reduction's value, once, at its end (`return __syncthreads_count(p);`,
    /// gsplat's `cta_sync_count`): the same in every thread of the block, returned threads
    /// included where its live copy is called (they vote the neutral value).
    pub fn returns_block_vote(&self) -> bool {
        flow::only_final_return_value(self.site.body).is_some_and(|v| {
            self.facts
                .barriers
                .iter()
                .any(|b| b.node.id() == v.id() && b.method != "sync")
        })
    }
}

pub struct Analysis<'t> {
    pub kernels: Vec<KernelPlan<'t>>,
    pub helpers: Vec<HelperPlan<'t>>,
    pub launches: Vec<LaunchSite<'t>>,
    /// Macro bodies with launches (`rewrite/macro_launch.rs`).
    pub macro_launches: Vec<scan::MacroLaunches>,
    /// Kernels declared here and defined in another translation unit: plain (not templates,
    /// not `extern "C"`, their header readable), one declaration per name and scope.
    pub declared_kernels: Vec<FunctionSite<'t>>,
    pub diagnostics: Vec<Diagnostic>,
    /// Kernel definitions a syntax error hides from the parse, each refused (CP001) with the
    /// id that its diagnostic carries (after the parsed kernels' ids).
    pub lost_kernels: Vec<(KernelId, scan::LostDefinition)>,
    /// Device functions a syntax error hides that may read the block index
    /// (`scan::Found::unread_helpers`, `hidden::unread_may_matter`): published to the files that
    /// include this one as unknown (`KnownHelper::unread`).
    pub unread_helpers: Vec<scan::LostDefinition>,
    /// Where `#include "cupreempt.cuh"` goes: after the leading comments.
    pub include_at: usize,
    /// Live copies of synchronizing helpers made for other files' kernels
    /// (`Options::helpers_for_other_files`, `predicate::exported_copy`).
    pub live_exports: Vec<LiveHelper<'t>>,
}

/// Analyzes `src` through its parse (the tree, and the execution-space macros it read).
pub fn analyze<'t>(parsed: &'t crate::parse::Parsed, src: &'t str, opts: &Options) -> Analysis<'t> {
    let root = parsed.tree.root_node();
    let mut found = scan::scan(parsed, src, &opts.known_macros.definitions);
    mark_specialized_templates(&mut found);
    let mut diagnostics = found.diagnostics;
    let declared_kernels = declared_only(&found.declarations, &found.kernels);
    // The included files' macros first, the file's own over them.
    let file_macros = if opts.known_macros.definitions.is_empty() {
        found.macros
    } else {
        let mut all = macros::of_lists(
            &opts.known_macros.definitions,
            &opts.known_macros.parameters,
        );
        all.extend(found.macros);
        macros::close(all)
    };
    let macros = body::with_body_macros(file_macros, &found.kernels, &found.helpers, src);
    let names = uniformity::FileNames::new(root, src, &macros, &opts.known_macros.functions);
    let mut helpers = helper_plans(found.helpers, &found.declarations, &names);
    // Loops that wait for other blocks (CP014), in helpers (named from the kernels that reach
    // them, as their other refusals are) and kernels.
    let reads = spin::Reads::new(
        root,
        src,
        helpers.iter().map(|h| (h.site.name.as_str(), h.site.body)),
    );
    for h in &mut helpers {
        let waits = spin::waiting_loops(h.site.body, src, &reads);
        h.facts.refusals.extend(waits);
    }
    // Device functions of this file that a syntax error hides, where no helper of that name was
    // read and their text may read the block index (`hidden::unread_may_matter`): unknown, so
    // counted as reading it and synchronizing, like such helpers of other files.
    let unread_helpers: Vec<scan::LostDefinition> = found
        .unread_helpers
        .into_iter()
        .filter(|u| !helpers.iter().any(|h| h.site.name == u.name))
        .filter(|u| hidden::unread_may_matter(src, u.at.end))
        .collect();
    let with_unread;
    let opts = if unread_helpers.is_empty() {
        opts
    } else {
        let mut o = opts.clone();
        o.known_helpers.extend(
            unread_helpers
                .iter()
                .map(|u| crate::program::KnownHelper::unread(&u.name)),
        );
        with_unread = o;
        &with_unread
    };
    let known_where = |is: fn(&crate::program::KnownHelper) -> bool| -> Vec<&str> {
        opts.known_helpers
            .iter()
            .filter(|h| is(h))
            .map(|h| h.name.as_str())
            .collect()
    };
    let build = |helpers: &mut Vec<HelperPlan<'_>>, forced: &BTreeSet<String>| {
        let mut external_owned: BTreeMap<(String, String), (bool, bool)> = BTreeMap::new();
        for h in &opts.known_helpers {
            if let Some(o) = &h.owner {
                let e = external_owned
                    .entry((o.clone(), h.name.clone()))
                    .or_default();
                e.0 |= h.synchronizes;
                e.1 |= h.synchronizes_warp;
            }
        }
        // Where the file takes the address of a helper that synchronizes, a helper that calls
        // through a function pointer may too, and so may its callers: built again with that
        // known until the answer stays (it only grows).
        let calls_pointers = helpers.iter().any(|h| callgraph::calls_through_pointer(h));
        let mut pointers = (false, false);
        let (mut graph, taken) = loop {
            let graph = CallGraph::build(
                helpers,
                &known_where(|h| h.synchronizes),
                &known_where(|h| h.synchronizes_warp),
                external_owned.clone(),
                &known_where(|h| h.reads_block_ids && h.with_ctx),
                forced,
                pointers,
            );
            let taken = (
                !callgraph::address_taken(root, src, &graph.barrier_names).is_empty(),
                !callgraph::address_taken(root, src, &graph.warp_sync_names).is_empty(),
            );
            if taken == pointers || !calls_pointers {
                break (graph, taken);
            }
            pointers = taken;
        };
        graph.address_taken = callgraph::address_taken(root, src, &graph.ctx_names);
        graph.pointer_syncs = taken;
        graph.file_variables = callgraph::file_variables(root, src);
        // Names whose use reads the block index: macros that read it, and helpers that do (a
        // call from implicit code or a default argument passes no context).
        graph.block_names = macros
            .iter()
            .filter(|(_, m)| !m.virtual_reads.is_empty())
            .map(|(name, _)| name.clone())
            .chain(graph.ctx_names.iter().cloned())
            .collect();
        graph.implicit_readers =
            callgraph::implicit_block_readers(root, src, &graph.block_names, true);
        let call_defaults: Vec<_> = helpers.iter().map(|h| graph.block_defaults(h)).collect();
        for (h, d) in helpers.iter_mut().zip(call_defaults) {
            h.call_defaults = d;
        }
        // Members of the files that include this one (`program::known_from`), which a kernel
        // template here may call through a functor of its template type.
        graph.member_ctx.extend(
            opts.known_helpers
                .iter()
                .filter(|h| h.member && h.reads_block_ids)
                .map(|h| h.name.clone()),
        );
        // And the member functions of the files this one includes: `volume.ptr(y)` calls
        // the `ptr` of a header's `PtrStep`, not a functor held in a field
        // (decide.rs refuses the latter where functors read the block index).
        graph.member_names.extend(
            opts.known_helpers
                .iter()
                .filter(|h| h.member)
                .map(|h| h.name.clone()),
        );
        let functor = callgraph::FUNCTOR_CALL;
        graph.functors_take_ctx = graph.member_ctx.contains(functor)
            && !helpers
                .iter()
                .any(|h| h.site.name == functor && h.needs_ctx && !h.site.context_member())
            && !opts
                .known_helpers
                .iter()
                .any(|h| h.name == functor && h.member && h.reads_block_ids && !h.with_ctx);
        if graph.functors_take_ctx {
            // Calls of functors pass the context: a type whose function-call operator reads
            // the block index is no longer one whose objects read it unseen.
            graph.implicit_readers =
                callgraph::implicit_block_readers(root, src, &graph.block_names, false);
        }
        graph
    };
    let mut graph = build(&mut helpers, &BTreeSet::new());
    // Helpers that call functors take the context to pass it on (`CallGraph::functor_helpers`),
    // and so do their callers: the graph again, with them.
    let forced = graph.functor_helpers(&helpers);
    if !forced.is_empty() {
        for h in &mut helpers {
            h.needs_ctx = false;
        }
        graph = build(&mut helpers, &forced);
    }
    // Read only where a member call can need it (`CallGraph::member_calls_of` looks at the
    // calls of members in `member_ctx` alone): most files have none, and this walks the tree.
    if !graph.member_ctx.is_empty() {
        graph.classes = classes::Classes::new(root, src);
    }
    for h in &mut helpers {
        h.facts.ctx_member_calls = graph.ctx_member_calls(&h.facts, &h.site, src);
    }
    let file_shared = shared::file_scope_shared(src, &bodies(&found.kernels, &helpers));
    let plain_names = {
        let kernel_sites: Vec<&FunctionSite> =
            found.kernels.iter().chain(&found.declarations).collect();
        sites::plain_function_names(root, src, &kernel_sites)
    };
    let file_shared_sizes = shared_size::FileShared::new(root, src, &opts.known_macros.definitions);
    let mut kernels = Vec::new();
    for (i, site) in found.kernels.into_iter().enumerate() {
        let mut facts = body::facts(site.body, &names, true);
        facts.ctx_member_calls = graph.ctx_member_calls(&facts, &site, src);
        facts
            .refusals
            .extend(spin::waiting_loops(site.body, src, &reads));
        let may_use_shared = file_shared
            || shared::may_use_shared(text(site.body, src), &facts, &helpers, &graph, src);
        let tensor_core = registers::tensor_core(text(site.body, src))
            || graph
                .reachable(&facts, &helpers)
                .into_iter()
                .any(|h| registers::tensor_core(text(helpers[h].site.body, src)));
        let head_branches =
            hidden::head_branches(&site, &parsed.hidden, &parsed.hidden_groups, src);
        // Bounds in a branch the grammar did not read would meet the cap's. A kernel's own
        // `__launch_bounds__(T)` or `(T, M)` are raised to 32 registers in the capped wrapper
        // (`FunctionSite::raisable_bounds`).
        // Not where the preprocessor chooses the head: another configuration's bounds (or
        // none) would not be the ones raised.
        let own_bounds = site.raisable_bounds(src).is_some() && head_branches.is_none();
        let capped_wrapper = (site.launch_bounds.is_empty() || own_bounds)
            && site.head_attributes.is_empty()
            && !tensor_core
            && !head_branches.as_ref().is_some_and(|h| h.bounds);
        let mut plan = KernelPlan::untouched(
            KernelId(i),
            site,
            facts,
            &found.declarations,
            may_use_shared,
            capped_wrapper,
        );
        // An earlier declaration would carry the wrapper's declaration with bounds of its own.
        if own_bounds && !plan.prior_declarations.is_empty() {
            plan.capped_wrapper = false;
        }
        plan.capped_by_own_bounds = own_bounds && plan.capped_wrapper;
        plan.head_branches = head_branches;
        plan.function_namesake = plain_names.contains(&plan.site.name);
        plan.assumed_undefined = opts.assumed_undefined.clone();
        let loop_state = shared_size::loop_state(&plan, &helpers, &graph, src, &file_shared_sizes);
        plan.loop_state_dynamic = matches!(loop_state, Ok(shared_size::LoopState::Dynamic));
        if let Ok(shared_size::LoopState::PerInstance(bytes)) = &loop_state {
            plan.loop_state_per_instance = Some(bytes.clone());
        }
        // Branches of conditionals the grammar did not read (`Parsed::hidden`).
        let decided =
            match hidden::refusal(&plan, &parsed.hidden, &helpers, &graph, &macros, root, src)
                .or_else(|| {
                    hidden::statement_macro_refusal(
                        &plan,
                        &parsed.statement_macros,
                        &helpers,
                        &graph,
                        src,
                    )
                })
                .or_else(|| loop_state.err())
            {
                Some(d) => Err(vec![d]),
                None => decide::decide(&plan, opts, &helpers, &graph, src),
            }
            .and_then(
                |(mode, reach, hazard, loops)| match hidden::predicated_refusal(
                    mode,
                    &plan,
                    &parsed.hidden,
                    src,
                ) {
                    Some(d) => Err(vec![d]),
                    None => Ok((mode, reach, hazard, loops)),
                },
            );
        match decided {
            Ok((mode, reach, hazard, loops)) => {
                for i in reach {
                    helpers[i].reached = true;
                }
                let helpers = predicate::Helpers {
                    plans: &helpers,
                    graph: &graph,
                    known: &opts.known_helpers,
                };
                let note =
                    transformed(&mut plan, mode, (hazard, loops), opts, src, &names, helpers);
                diagnostics.extend(note.map(|d| d.kernel(plan.id, &plan.site.name)));
            }
            Err(refusals) => {
                let (id, name) = (plan.id, &plan.site.name);
                diagnostics.extend(refusals.into_iter().map(|d| d.kernel(id, name)));
            }
        }
        kernels.push(plan);
    }
    couple_specializations(&mut kernels, &found.declarations, &mut diagnostics, src);
    couple_alternatives(&mut kernels, &mut diagnostics, src);
    number_overloads(&mut kernels, &opts.namesakes);
    for i in 0..helpers.len() {
        helpers[i].unfollowed_read = graph.reaches_unfollowed_read(i, &helpers, src);
    }
    let mut live_exports = Vec::new();
    if opts.helpers_for_other_files {
        // Kernels of other files in the run may call them (`KnownHelper::with_ctx`): those whose
        // every path to a block index the context can follow. One that reaches a member call of
        // uncertain class, or a helper that cannot take the context, would pass the context on
        // to a call that drops it; the other file's kernel is then refused, as for any helper
        // that reads the index without taking the context. Members that take the context get
        // their context form here too, for the helpers that call them; other files call them
        // by name only through such helpers (`KnownHelper::of_all` gives members no context).
        // Nor one with a branch the grammar did not read (`hidden::unread_in`): its context
        // form would be made from the branches that were read.
        let exported: Vec<usize> = (0..helpers.len())
            .filter(|&i| {
                let h = &helpers[i];
                h.needs_ctx
                    && h.site.can_take_ctx()
                    && graph.context_reaches_every_read(i, &helpers, src)
                    && !hidden::unread_in(&h.site, &parsed.hidden, &graph, &macros, src)
            })
            .collect();
        for &i in &exported {
            helpers[i].reached = true;
        }
        // Their live copies, for other files' predicated kernels that call them after a
        // return (`predicate::exported_copy`, `KnownHelper::live_copy`): of those that
        // synchronize the block, one definition of their name, and, where they read the
        // block index, whose context form is given to other files.
        type Copy<'t> = Result<(Vec<LiveHelper<'t>>, Vec<bool>), String>;
        let live: Vec<(usize, Copy<'t>)> = (0..helpers.len())
            .filter(|&i| {
                let h = &helpers[i];
                h.synchronizes
                    && graph
                        .by_name
                        .get(&h.site.name)
                        .is_some_and(|v| v.len() == 1)
                    && (!h.needs_ctx || exported.contains(&i))
                    && !hidden::unread_in(&h.site, &parsed.hidden, &graph, &macros, src)
            })
            .map(|i| {
                let known = predicate::Helpers {
                    plans: &helpers,
                    graph: &graph,
                    known: &opts.known_helpers,
                };
                (i, predicate::exported_copy(i, known, src, &names))
            })
            .collect();
        for (i, copy) in live {
            helpers[i].live_copy = Some(copy.map(|(copies, uniform)| {
                live_exports.extend(copies);
                uniform
            }));
        }
    }
    let lost_kernels: Vec<(KernelId, scan::LostDefinition)> = found
        .lost_kernels
        .into_iter()
        .filter(|k| opts.selects(&k.name))
        .enumerate()
        .map(|(i, k)| (KernelId(kernels.len() + i), k))
        .collect();
    diagnostics.extend(lost_kernels.iter().map(|(id, k)| {
        match &k.in_macro {
            None => Diagnostic::new(
                Code::ParseErrorInKernel,
                format!(
                    "`{}` lies in a region the parser cannot read (a syntax error around it); it is left as it is",
                    k.name
                ),
            )
            .label(k.at.clone(), "not read as a kernel")
            .help("preprocessor branches that each open or close a brace are the usual cause: keep both braces of a block in the same branch"),
            Some(m) => Diagnostic::new(
                Code::Unsupported,
                format!(
                    "kernel `{}` is defined in the body of the macro `{m}`: the kernels its uses define are left as they are",
                    k.name
                ),
            )
            .label(k.at.clone(), "each use of the macro defines this kernel as written")
            .help("define the kernel outside the macro (a kernel template that takes the operation as a functor type, say) and let the macro launch it; it is then transformed like any other"),
        }
        .kernel(*id, &k.name)
    }));
    Analysis {
        kernels,
        helpers,
        launches: found.launches,
        macro_launches: found.macro_launches,
        declared_kernels,
        diagnostics,
        lost_kernels,
        unread_helpers,
        include_at: found.include_at,
        live_exports,
    }
}

/// `__global__` declarations of kernels that this file does not define.
fn declared_only<'t>(
    declarations: &[FunctionSite<'t>],
    kernels: &[FunctionSite<'t>],
) -> Vec<FunctionSite<'t>> {
    let mut out: Vec<FunctionSite<'t>> = Vec::new();
    for d in declarations {
        // A parameter list that the preprocessor chooses from stays out: the weak declarations
        // of the wrappers would need its configurations too.
        // A template too (its weak declarations are templates, `rewrite::declared`), not an
        // explicit specialization's declaration.
        let plain = d.global_kw.is_some()
            && !d.specialization
            && d.linkage.is_none()
            && d.problems.is_empty()
            && !d.has_conditional_params();
        let defined = kernels
            .iter()
            .any(|k| k.name == d.name && k.scope == d.scope);
        let seen = out.iter().any(|o| o.name == d.name && o.scope == d.scope);
        if plain && !defined && !seen {
            out.push(d.clone());
        }
    }
    // Overloads (declarations of one name with different parameters) would need one launch
    // type each: their launches stay as they are.
    out.retain(|o| {
        declarations
            .iter()
            .all(|d| d.name != o.name || d.scope != o.scope || d.named_params() == o.named_params())
    });
    out
}

/// The byte ranges of every function body (what `__shared__` outside them is outside of).
fn bodies(kernels: &[FunctionSite], helpers: &[HelperPlan]) -> Vec<Range<usize>> {
    kernels
        .iter()
        .map(|k| k.body.byte_range())
        .chain(helpers.iter().map(|h| h.site.body.byte_range()))
        .collect()
}

/// Templates with explicit specializations. A kernel template and its specializations are
/// transformed together (`couple_specializations`): each specialization gets its own body and
/// explicit specializations of the wrapper templates, so that a launch of the specialized
/// instance runs the specialization's body in either form. A specialization that leaves its
/// template arguments to deduction (`template <> __global__ void k(float*)`, as a public
/// inference library writes them) gets wrappers spelled the same way: their parameters are
/// the kernel's after the launch's own, which names no template parameter, so the compiler
/// deduces the same instance for them. They are refused together where that cannot be done:
/// a specialization only declared here (its wrappers belong where it is defined), or a
/// template not defined in this file (its wrapper templates are not here to specialize). A device function: its task-context form would be a different
/// template, which the specializations no longer specialize, so none of them takes the context
/// (a kernel that needs it through them is refused, CP008).
fn mark_specialized_templates(found: &mut scan::Found) {
    type Family = (bool, Vec<String>, String);
    let key = |s: &FunctionSite| (s.global_kw.is_some(), s.scope.clone(), s.name.clone());
    let specialized: BTreeSet<Family> = found
        .kernels
        .iter()
        .chain(&found.helpers)
        .chain(&found.declarations)
        .filter(|s| s.specialization)
        .map(key)
        .collect();
    if specialized.is_empty() {
        return;
    }
    // Kernel families whose specializations can have wrappers of their own.
    let supported: BTreeSet<Family> = specialized
        .iter()
        .filter(|f| f.0)
        .filter(|f| {
            let members = || found.kernels.iter().filter(|s| key(s) == **f);
            let declared = found
                .declarations
                .iter()
                .any(|d| key(d) == **f && d.specialization);
            // The template defined here, or declared here with every instance specialized.
            let primary = members().any(|s| !s.specialization && s.is_template())
                || template_declaration(&found.declarations, &f.1, &f.2).is_some();
            !declared && primary
        })
        .cloned()
        .collect();
    let kernels = found.kernels.iter_mut().map(|s| (true, s));
    for (kernel, site) in kernels.chain(found.helpers.iter_mut().map(|s| (false, s))) {
        let family = key(site);
        if !specialized.contains(&family) || supported.contains(&family) {
            continue;
        }
        let name = &site.name;
        let what = match (kernel, site.specialization) {
            (true, true) => format!("`{name}` is an explicit specialization of a kernel template"),
            (true, false) => format!("kernel template `{name}` has explicit specializations"),
            (false, _) => format!("device function template `{name}` has explicit specializations"),
        };
        let d = Diagnostic::new(Code::Unsupported, what);
        let d = if kernel {
            d.label(site.name_node.byte_range(), "left as it is")
                .help("a launch of a specialized instance must run the specialization's body, which needs the template defined (or declared) in this file and every specialization defined here: the template and its specializations are left as written")
        } else {
            d.label(site.name_node.byte_range(), "not given the task context")
        };
        site.problems.push(d);
    }
}

/// Leaves the transformed ones of `members` as written, each with a CP007 saying why
/// (`message` of its name); what was said of their transformed forms (e.g. CP200) no longer
/// holds and is dropped.
fn leave_together(
    kernels: &mut [KernelPlan],
    members: &[usize],
    diagnostics: &mut Vec<Diagnostic>,
    message: impl Fn(&str) -> String,
    help: &str,
) {
    for &i in members {
        if kernels[i].transformed() {
            kernels[i].mode = None;
            let (id, name) = (kernels[i].id, kernels[i].site.name.clone());
            diagnostics.retain(|d| d.kernel.as_ref().is_none_or(|t| t.id != id));
            diagnostics.push(
                Diagnostic::new(Code::Unsupported, message(&name))
                    .label(kernels[i].site.name_node.byte_range(), "left as it is")
                    .help(help)
                    .kernel(id, &name),
            );
        }
    }
}

/// Definitions of one kernel with as many parameters in one scope are the preprocessor's
/// alternatives (SHOC's BFS defines each kernel under `#if __CUDA_ARCH__ >= 120` and as an empty
/// stub under `#else`, so the host pass reads one and the device pass the other): they are
/// transformed together or not at all, and with the same wrappers, since a launch in either
/// pass names the wrappers the other pass must define. The parameters' spelling is not
/// compared: a stub may write them otherwise (`uint2 *const __restrict__ p` and `uint2 *p` in
/// a public hashing miner), and the transformed unit then launched wrappers its host pass
/// lacked. Overloads with as many parameters are coupled too, which at worst leaves one as
/// written.
fn couple_alternatives(kernels: &mut [KernelPlan], diagnostics: &mut Vec<Diagnostic>, src: &str) {
    let key = |k: &KernelPlan| {
        (
            k.site.scope.clone(),
            k.site.name.clone(),
            k.site.param_list.len(),
        )
    };
    type Key = (Vec<String>, String, usize);
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (i, k) in kernels.iter().enumerate() {
        if !k.site.specialization {
            groups.entry(key(k)).or_default().push(i);
        }
    }
    for members in groups.into_values().filter(|m| m.len() > 1) {
        let Some(&left) = members.iter().find(|&&i| !kernels[i].transformed()) else {
            // One wrapper set for all: the capped one only where every definition can have it
            // (a launch type in one pass names the capped wrapper the other pass defines).
            let capped = capped_together(kernels, &members);
            for &i in &members {
                kernels[i].capped_wrapper = capped;
            }
            continue;
        };
        let line =
            crate::lang::LineStarts::new(src).line(kernels[left].site.name_node.start_byte());
        leave_together(
            kernels,
            &members,
            diagnostics,
            |name| format!("`{name}` is left as written with its other definition (line {line}), which cannot be transformed"),
            "definitions of one kernel chosen by the preprocessor are transformed together, so that a launch in any compilation pass finds the same wrappers",
        );
    }
}

/// A kernel template and its explicit specializations are transformed together or not at all:
/// the wrappers of a specialization are explicit specializations of the template's wrappers,
/// and a launch of a specialized instance goes through the template's launch types, which
/// must then name the specialization's wrappers. Each gets the same wrappers (the capped one
/// only where every member can have it), and each specialization its ordinal (the name of its body). A
/// template only declared here is declared with its wrappers by its first specialization's
/// rewrite (`KernelPlan::family_declaration`).
fn couple_specializations<'t>(
    kernels: &mut [KernelPlan<'t>],
    declarations: &[FunctionSite<'t>],
    diagnostics: &mut Vec<Diagnostic>,
    src: &str,
) {
    let family = |k: &KernelPlan| (k.site.scope.clone(), k.site.name.clone());
    let families: BTreeSet<(Vec<String>, String)> = kernels
        .iter()
        .filter(|k| k.site.specialization)
        .map(family)
        .collect();
    for f in families {
        let members: Vec<usize> = (0..kernels.len())
            .filter(|&i| family(&kernels[i]) == f)
            .collect();
        let left = members
            .iter()
            .find(|&&i| !kernels[i].transformed())
            .copied();
        if let Some(l) = left {
            let why = &kernels[l].site;
            let which = match &why.specialized_args {
                Some(r) => format!("`{}{}`", why.name, &src[r.clone()]),
                None => format!("the template `{}`", why.name),
            };
            leave_together(
                kernels,
                &members,
                diagnostics,
                |name| format!("`{name}` is left as written with its whole template family: {which} cannot be transformed"),
                "a kernel template and its explicit specializations are transformed together, so that a launch of any instance runs that instance's body",
            );
            continue;
        }
        // One wrapper set for the family: the capped one only where every member can have it
        // (a member's own launch bounds would meet the cap's).
        let capped = capped_together(kernels, &members);
        let mut ordinal = 0;
        for &i in &members {
            kernels[i].capped_wrapper = capped;
            if kernels[i].site.specialization {
                ordinal += 1;
                kernels[i].specialization_ordinal = ordinal;
            }
        }
        let defined = members.iter().any(|&i| !kernels[i].site.specialization);
        if let (false, Some(&first)) = (defined, members.first()) {
            kernels[first].family_declaration =
                template_declaration(declarations, &f.0, &f.1).cloned();
        }
    }
}

/// The declaration (no definition) of kernel template `name` in `scope`, if the file has one.
fn template_declaration<'a, 't>(
    declarations: &'a [FunctionSite<'t>],
    scope: &[String],
    name: &str,
) -> Option<&'a FunctionSite<'t>> {
    declarations.iter().find(|d| {
        !d.specialization
            && d.is_template()
            && d.global_kw.is_some()
            && d.scope == scope
            && d.name == name
    })
}

/// The file's device helpers with their body facts.
fn helper_plans<'t>(
    sites: Vec<FunctionSite<'t>>,
    declarations: &[FunctionSite<'t>],
    names: &uniformity::FileNames<'t, '_>,
) -> Vec<HelperPlan<'t>> {
    sites
        .into_iter()
        .map(|h| HelperPlan {
            facts: body::facts(h.body, names, false),
            prior_declarations: callgraph::prior_declarations(declarations, &h),
            site: h,
            needs_ctx: false,
            synchronizes: false,
            synchronizes_warp: false,
            reached: false,
            unfollowed_read: false,
            call_defaults: None,
            live_copy: None,
        })
        .collect()
}

/// Fills in a kernel that is transformed: its chunking and, for the predicated form, how its
/// body is predicated. Returns the note that says so, or the refusal when the body cannot be
/// predicated (then the kernel stays untouched).
#[allow(clippy::type_complexity)]
fn transformed<'t>(
    plan: &mut KernelPlan<'t>,
    mode: SyncMode,
    (hazard, loops): (Option<(ReturnSite<'t>, BarrierSite<'t>)>, Vec<Node<'t>>),
    opts: &Options,
    src: &'t str,
    names: &uniformity::FileNames<'t, '_>,
    helpers: predicate::Helpers<'_, 't>,
) -> Option<Diagnostic> {
    plan.mode = Some(mode);
    (plan.chunk, plan.budget_ns) = pragmas::chunking(opts, &plan.site.name, &plan.site.pragmas);
    if mode != SyncMode::Predicated {
        return None;
    }
    let params: Vec<String> = plan
        .site
        .param_list
        .iter()
        .map(|p| p.name.clone())
        .collect();
    let scope = predicate::Scope {
        site: &plan.site,
        params: &params,
        facts: &plan.facts,
        src,
        names,
        helpers,
    };
    let Some((ret, bar)) = hazard else {
        let planned = predicate::plan_loops(&scope, &loops);
        return predicated_loops(plan, planned, &loops);
    };
    match predicate::plan(&scope, (ret.range(), bar.range())) {
        Ok(p) => {
            let mut note = Diagnostic::new(
                Code::PredicatedRewrite,
                format!(
                    "kernel `{}`: a thread-dependent return reaches a barrier; the body is rewritten into the predicated form",
                    plan.site.name
                ),
            )
            .label(ret.range(), "this return depends on the thread")
            .label(bar.range(), "and this barrier can follow it");
            let mut help = format!("a returned thread stays with `{CTX_LIVE}` cleared: it skips the work after its return, passes the remaining barriers and votes the neutral value in block reductions");
            // A skipped call that synchronizes would leave the live threads waiting: say which
            // calls the run cannot vouch for.
            let mut unseen: Vec<&predicate::UnseenCall> = Vec::new();
            for c in &p.unseen_calls {
                if !unseen.iter().any(|u| u.range == c.range) {
                    unseen.push(c);
                }
            }
            for c in unseen.iter().take(3) {
                note = note.label(
                    c.range.clone(),
                    format!(
                        "returned threads skip this call of `{}`, which this file does not define",
                        c.name
                    ),
                );
            }
            if !unseen.is_empty() {
                help.push_str("; a skipped function that synchronizes the block would leave the live threads waiting at its barrier: the tool sees the barriers of the files it reads (included ones found through `-I`, and the other inputs of the run) and refuses where they would be skipped");
            }
            plan.predication = Some(p);
            Some(note.help(help))
        }
        Err(d) => {
            plan.mode = None;
            Some(d)
        }
    }
}

/// A kernel's predicated loops as planned (`predicate::plan_loops`): the note that says so,
/// or the refusal (the kernel then stays untouched).
fn predicated_loops<'t>(
    plan: &mut KernelPlan<'t>,
    planned: Result<Predication<'t>, Diagnostic>,
    loops: &[Node<'t>],
) -> Option<Diagnostic> {
    match planned {
        Ok(p) => {
            let mut note = Diagnostic::new(
                Code::PredicatedRewrite,
                format!(
                    "kernel `{}`: a loop that threads leave after different numbers of rounds holds a barrier; the loop is rewritten into the predicated form",
                    plan.site.name
                ),
            );
            for l in loops {
                note = note.label(
                    decide::loop_head(*l),
                    "a thread whose rounds end here waits in the loop until the last one's end",
                );
            }
            let mut help = format!("a thread whose rounds have ended stays in the loop with `{CTX_LIVE}` cleared: it skips the work of the other threads' rounds, passes their barriers and votes the neutral value in block reductions, and all leave the loop together");
            for c in p.unseen_calls.iter().take(3) {
                note = note.label(
                    c.range.clone(),
                    format!(
                        "threads whose rounds have ended skip this call of `{}`, which this file does not define",
                        c.name
                    ),
                );
            }
            if !p.unseen_calls.is_empty() {
                help.push_str("; a skipped function that synchronizes the block would leave the others waiting at its barrier: the tool sees the barriers of the files it reads (included ones found through `-I`, and the other inputs of the run) and refuses where they would be skipped");
            }
            plan.predication = Some(p);
            Some(note.help(help))
        }
        Err(d) => {
            plan.mode = None;
            Some(d)
        }
    }
}

/// Transformed kernels sharing a name in one scope need the deducing launch form; each
/// transformed kernel gets its ordinal among the transformed kernels of its name. A name that
/// other files of the program transform too (`namesakes`: how many of theirs come first)
/// counts as overloaded, and its ordinals follow theirs.
fn number_overloads(
    kernels: &mut [KernelPlan],
    namesakes: &std::collections::BTreeMap<String, usize>,
) {
    for i in 0..kernels.len() {
        let k = &kernels[i];
        let namesake =
            |o: &&KernelPlan| o.transformed() && o.launched_by_name() && o.site.name == k.site.name;
        let elsewhere = namesakes.get(&k.site.name);
        let here = kernels
            .iter()
            .enumerate()
            .any(|(j, o)| j != i && namesake(&o) && o.site.scope == k.site.scope);
        let ordinal = elsewhere.unwrap_or(&0) + kernels[..i].iter().filter(namesake).count();
        kernels[i].overloaded = here || elsewhere.is_some();
        if kernels[i].overloaded {
            // An overload's launch types are function pointers of one form.
            kernels[i].loop_state_per_instance = None;
        }
        kernels[i].overloaded_here = here;
        kernels[i].ordinal = ordinal;
    }
}

/// Whether the definitions that share one wrapper set (a template and its explicit
/// specializations, or the preprocessor's alternatives) all get the capped wrapper: each can,
/// and none raises its own bounds (the members' capped wrappers would then differ in their
/// attributes).
fn capped_together(kernels: &[KernelPlan], members: &[usize]) -> bool {
    members
        .iter()
        .all(|&i| kernels[i].capped_wrapper && !kernels[i].capped_by_own_bounds)
}
