//! Facts about one function body: virtual built-ins read, calls, barriers, returns, macro uses,
//! and constructs that make the kernel impossible to transform.

use super::flow::{descendants, is_loop};
use super::macros::MacroFacts;
use super::sites::FunctionSite;
use super::uniformity::{FileNames, Uniformity};
use crate::diagnostics::{Code, Diagnostic};
use crate::lang::{self, kinds, text};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use tree_sitter::Node;

#[derive(Debug, Clone)]
pub struct Call<'t> {
    pub name: String,
    /// The class or namespace that qualifies the callee's name, without template arguments
    /// (`Math` for `Math<T>::add(a, b)`, `b` for `a::b::f(x)`); None for an unqualified call.
    pub qualifier: Option<String>,
    pub node: Node<'t>,
    pub args: Node<'t>,
    pub arg_count: usize,
}

#[derive(Debug, Clone)]
pub struct MacroUse<'t> {
    pub name: String,
    pub node: Node<'t>,
    pub facts: MacroFacts,
}

#[derive(Debug, Clone, Copy)]
pub struct ReturnSite<'t> {
    pub node: Node<'t>,
    pub thread_dependent: bool,
}

impl ReturnSite<'_> {
    pub fn range(&self) -> Range<usize> {
        self.node.byte_range()
    }
}

#[derive(Debug, Clone, Copy)]
pub struct BarrierSite<'t> {
    pub node: Node<'t>,
    pub method: &'static str,
    /// False: inside a macro, inline PTX or a helper, where the predicated form cannot reach.
    pub visible: bool,
}

impl BarrierSite<'_> {
    pub fn range(&self) -> Range<usize> {
        self.node.byte_range()
    }
    pub fn rewritable(&self) -> bool {
        self.visible
    }
}

#[derive(Debug, Clone)]
pub struct BodyFacts<'t> {
    /// `blockIdx`, `gridDim`: read directly or through a macro of this file.
    pub virtual_reads: BTreeSet<&'static str>,
    /// Reads `threadIdx`, directly or through a macro of this file.
    pub reads_thread_idx: bool,
    /// `::blockIdx`, `::gridDim`, `::threadIdx`: names of the global scope, which the body's
    /// locals of the task's values (the rewrite's prologue) do not shadow. The rewrite drops
    /// the `::` where it declares that local.
    pub global_builtins: Vec<Node<'t>>,
    pub calls: Vec<Call<'t>>,
    /// Calls of members (`x.f()`, `p->f()`): the member's name and the call.
    pub member_calls: Vec<(String, Node<'t>)>,
    /// The calls (by name or through objects) that pass the task context to a member
    /// (`CallGraph::ctx_member_calls`): filled once the file's call graph is known.
    pub ctx_member_calls: Vec<(String, Node<'t>)>,
    /// `block.group_index()` of this thread block: the block's index, which the rewrite
    /// replaces with the task's (`::dim3(blockIdx)`).
    pub block_index_calls: Vec<Node<'t>>,
    /// Queries of the grid's shape or of this thread's place in it on `cg::this_grid()`
    /// (`cg::this_grid().thread_rank()`, `GRID_GROUP_QUERIES`): the rewrite replaces the
    /// `this_grid()` call with the task's grid (`::cupreempt::task_grid`), which answers from
    /// the task's blockIdx and gridDim.
    pub grid_queries: Vec<Node<'t>>,
    /// Calls through an expression that names no function (`table[i](x)`, `(*fp)(x)`): they may
    /// reach a helper whose address the file takes (`CallGraph::address_taken`).
    pub indirect_calls: Vec<Node<'t>>,
    /// Names of the variables the body declares (a call of one is a call of an object's
    /// `operator()`, or of a function pointer).
    pub declared: BTreeSet<String>,
    /// The variables the body declares with a class type, and that class's name
    /// (`lang::class_name_of_type`): whose member a call `x.f()` or `p->f()` names.
    pub declared_classes: BTreeMap<String, String>,
    pub barriers: Vec<BarrierSite<'t>>,
    pub returns: Vec<ReturnSite<'t>>,
    /// Loops, to tell whether a barrier can run after a return.
    pub loops: Vec<Range<usize>>,
    /// Loops (kernels only) that threads of a block may leave after different numbers of
    /// rounds because of the thread's index (`uneven::Rounds::uneven_loops`), among those that hold a
    /// barrier, a call or a macro: a thread that leaves one ends the original kernel, but not
    /// a task.
    pub uneven_loops: Vec<Node<'t>>,
    /// Calls that synchronize the lanes of a warp named by a fixed mask (`__shfl_down_sync(
    /// 0xffffffff, ...)`, `__syncwarp()`, a tile's `shfl_down`, `cg::reduce(tile, ...)`):
    /// the lanes that have exited count as arrived (`lang::WARP_SYNC_FUNCTIONS`).
    pub warp_syncs: Vec<Node<'t>>,
    /// Loops (kernels only) that the lanes of one warp may leave after different numbers of
    /// rounds (`uneven::Rounds::lane_dependent`), among those that hold a warp sync or a call.
    pub lane_uneven_loops: Vec<Node<'t>>,
    /// Returns (kernels only) under a condition that differs between the lanes of a warp
    /// (`uneven::Rounds::lane_dependent`): in the original those lanes exit, and a warp sync after
    /// stops waiting for them.
    pub lane_returns: Vec<Node<'t>>,
    /// Warp syncs and calls (kernels only) under a condition that differs between the lanes of
    /// a warp (`uneven::LaneDependent::syncs`): in the original the lanes that skip one exit.
    pub lane_guarded: Vec<Node<'t>>,
    pub macro_uses: Vec<MacroUse<'t>>,
    /// Uses of a statement-head macro followed by its block (`KERNEL_LOOP(i, n) { ... }`),
    /// which the grammar reads as a call statement and a block (the masked view's `;`): the
    /// macro's name.
    pub head_macros: Vec<Node<'t>>,
    pub refusals: Vec<Diagnostic>,
    /// The body and its descendants in pre-order (kernels only: later analyses walk them again
    /// and a tree walk costs more than keeping the list).
    pub nodes: Vec<Node<'t>>,
}

impl BodyFacts<'_> {
    /// Whether `barrier` can execute after `ret` in some thread that did not return: it comes
    /// later in the text, or a loop holds both.
    pub fn reaches(&self, ret: &Range<usize>, barrier: &Range<usize>) -> bool {
        barrier.start >= ret.end
            || self
                .loops
                .iter()
                .any(|l| l.contains(&ret.start) && l.contains(&barrier.start))
    }
}

/// The file's macros with those `#define`d inside function bodies added (the scan does not look
/// inside bodies; a macro defined there is as visible to the rest of the file as any other).
pub fn with_body_macros(
    mut macros: BTreeMap<String, MacroFacts>,
    kernels: &[FunctionSite],
    helpers: &[FunctionSite],
    src: &str,
) -> BTreeMap<String, MacroFacts> {
    let k = kinds();
    let mut added = false;
    for f in kernels.iter().chain(helpers) {
        if !text(f.body, src).contains("define") {
            continue;
        }
        lang::visit(f.body, |n| {
            let id = n.kind_id();
            if id == k.preproc_def || id == k.preproc_function_def {
                if n.child_by_field_id(crate::lang::fields().name).is_some() {
                    super::macros::define_node(&mut macros, n, src);
                    added = true;
                }
                return false;
            }
            true
        });
    }
    if added {
        super::macros::close(macros)
    } else {
        macros
    }
}

/// The members of a grid group that ask for its shape or for this thread's place in it, which
/// `::cupreempt::task_grid` answers for the task (cuda_support/cupreempt/task_loop.cuh); never
/// `sync`, which stays a grid barrier (CP002).
const GRID_GROUP_QUERIES: &[&str] = &[
    "thread_rank",
    "size",
    "num_threads",
    "block_rank",
    "num_blocks",
    "block_index",
    "dim_blocks",
    "thread_index",
    "dim_threads",
    "group_dim",
];

/// Queries of this thread block whose answer is one per block (its index, shape and size):
/// the uniformity analysis reads them as uniform, as it reads blockIdx and blockDim.
const BLOCK_UNIFORM_QUERIES: &[&str] = &[
    "group_index",
    "group_dim",
    "dim_threads",
    "size",
    "num_threads",
];

/// The queries of `GRID_GROUP_QUERIES` that answer for the asking thread; the others are the
/// same in every thread of a block.
const THREAD_OWN_QUERIES: &[&str] = &["thread_rank", "thread_index"];

/// A call of a member, `object.method(args)`: the object, the method's name (`f` of
/// `x.f<1>()` and `x.template f<1>()`) and how many arguments it is given.
fn member_call<'t, 's>(call: Node<'t>, src: &'s str) -> Option<(Node<'t>, &'s str, usize)> {
    let fields = crate::lang::fields();
    let callee = call
        .child_by_field_id(fields.function)
        .filter(|c| c.kind_id() == kinds().field_expression)?;
    let args = lang::count_named(call.child_by_field_id(fields.arguments)?);
    let field = callee.child_by_field_id(fields.field)?;
    // `x.template f<true>()`: the grammar wraps the template method in a dependent name.
    let field = if field.kind() == "dependent_name" {
        field.named_child(0)?
    } else {
        field
    };
    let name = (field.kind_id() == kinds().template_method)
        .then(|| field.child_by_field_id(fields.name))
        .flatten();
    Some((
        callee.child_by_field_id(fields.argument)?,
        text(name.unwrap_or(field), src),
        args,
    ))
}

/// Whether `call` asks this thread block or `this_grid()` for a value that is the same in
/// every thread of a block (`block.group_index()`, `cg::this_grid().num_blocks()`). Both are
/// the task's values after the rewrite (`BodyFacts::block_index_calls`, `grid_queries`).
pub fn block_uniform_query(call: Node, src: &str, block_vars: &BTreeSet<String>) -> bool {
    let Some((object, method, 0)) = member_call(call, src) else {
        return false;
    };
    BLOCK_UNIFORM_QUERIES.contains(&method) && is_thread_block(object, src, block_vars)
        || GRID_GROUP_QUERIES.contains(&method)
            && !THREAD_OWN_QUERIES.contains(&method)
            && is_this_grid(object, src)
}

/// `body`: a function body of the file that `names` was made from; `kernel`: whether returns
/// matter (a helper's return only ends the helper, so its returns are not analysed for thread
/// dependence).
pub fn facts<'t>(body: Node<'t>, names: &FileNames<'t, '_>, kernel: bool) -> BodyFacts<'t> {
    let src = names.src();
    let k = kinds();
    let macros = names.macros();
    let nodes = descendants(body);
    // The uniformity analysis is the expensive part: only kernels with a return need it. And
    // `Node::parent` searches from the root: look for enclosing lambdas only if there are any.
    let (mut has_return, mut has_lambda) = (false, false);
    for n in &nodes {
        let id = n.kind_id();
        has_return |= id == k.return_statement;
        has_lambda |= id == k.lambda_expression;
    }
    let block_vars = thread_block_variables(body, &nodes, src);
    let uni =
        (kernel && has_return).then(|| Uniformity::new(body, &nodes, names, block_vars.clone()));
    let mut f = BodyFacts {
        virtual_reads: BTreeSet::new(),
        reads_thread_idx: false,
        global_builtins: Vec::new(),
        calls: Vec::new(),
        member_calls: Vec::new(),
        ctx_member_calls: Vec::new(),
        block_index_calls: Vec::new(),
        grid_queries: Vec::new(),
        indirect_calls: Vec::new(),
        declared: BTreeSet::new(),
        declared_classes: BTreeMap::new(),
        barriers: Vec::new(),
        returns: Vec::new(),
        loops: Vec::new(),
        uneven_loops: Vec::new(),
        warp_syncs: Vec::new(),
        lane_uneven_loops: Vec::new(),
        lane_returns: Vec::new(),
        lane_guarded: Vec::new(),
        macro_uses: Vec::new(),
        head_macros: Vec::new(),
        refusals: Vec::new(),
        nodes: Vec::new(),
    };
    let tile_vars = tile_variables(body, &nodes, src);
    for &n in &nodes {
        let id = n.kind_id();
        if id == k.declaration {
            let names = lang::declarators(n)
                .into_iter()
                .filter_map(lang::declarator_name);
            f.declared
                .extend(names.map(|name| text(name, src).to_string()));
            let class = n
                .child_by_field_id(crate::lang::fields().r#type)
                .and_then(|t| lang::class_name_of_type(t, src));
            if let Some(class) = class {
                for name in lang::declarators(n)
                    .into_iter()
                    .filter_map(lang::declarator_name)
                {
                    f.declared_classes
                        .insert(text(name, src).to_string(), class.to_string());
                }
            }
            if let Some(d) = lang::declarators(n)
                .into_iter()
                .find(|d| braces_elided(n, *d, src))
            {
                f.refusals.push(
                    Diagnostic::new(
                        Code::Unsupported,
                        "an array initialized without the braces of its elements (`uint2 m[2] = {1, 2, 3, 4};`), which nvcc rejects in the function template a transformed body becomes",
                    )
                    .label(d.byte_range(), "braces left out")
                    .help("brace each element: `uint2 m[2] = {{1, 2}, {3, 4}};`"),
                );
            }
        }
        if id == k.identifier || id == k.field_identifier || id == k.type_identifier {
            let name = text(n, src);
            if id == k.identifier && lang::VIRTUAL_BUILTINS.iter().any(|(v, _)| *v == name) {
                f.virtual_reads.insert(if name == "blockIdx" {
                    "blockIdx"
                } else {
                    "gridDim"
                });
            }
            f.reads_thread_idx |= id == k.identifier && name == "threadIdx";
            if let Some(q) = global_builtin(n, name) {
                f.global_builtins.push(q);
            }
            identifier_refusals(&mut f, n, name, id == k.field_identifier);
            // The name in a `#define` inside the body is no use of the macro. The parent is
            // asked last: `Node::parent` searches down from the root.
            if id == k.identifier {
                if let Some(m) = macros.get(name) {
                    let defined = n.parent().is_some_and(|p| {
                        p.kind_id() == k.preproc_def || p.kind_id() == k.preproc_function_def
                    });
                    if !defined {
                        record_macro_use(&mut f, n, name, m);
                    }
                }
            }
        } else if id == k.kernel_call_syntax {
            f.refusals.push(
                Diagnostic::new(
                    Code::DynamicParallelism,
                    "dynamic parallelism: a kernel launch inside device code",
                )
                .label(n.parent().unwrap_or(n).byte_range(), "device-side launch"),
            );
        } else if id == k.gnu_asm_expression {
            let t = text(n, src);
            if let Some(h) = lang::ASM_HAZARDS.iter().find(|h| t.contains(*h)) {
                f.refusals.push(
                    Diagnostic::new(
                        Code::InlineAsm,
                        format!(
                            "inline PTX `{}` reads the hardware block's index or cluster, waits for the cluster, or ends the thread",
                            h.trim_end_matches(';')
                        ),
                    )
                    .label(n.byte_range(), "inline PTX"),
                );
            } else if lang::asm_block_barrier(t) {
                // As `__syncthreads()` where every thread reaches it; where a return may come
                // first, the predicated form cannot rewrite it (CP004).
                f.barriers.push(BarrierSite {
                    node: n,
                    method: "sync",
                    visible: false,
                });
            }
        } else if id == k.return_statement {
            if !(has_lambda && lang::inside_lambda(n, body)) {
                let thread_dependent = uni.as_ref().is_some_and(|u| u.controlled(n, None));
                f.returns.push(ReturnSite {
                    node: n,
                    thread_dependent,
                });
            }
        } else if is_loop(n) {
            f.loops.push(n.byte_range());
        } else if id == k.call_expression {
            if warp_sync(n, src, &tile_vars) {
                f.warp_syncs.push(n);
            }
            record_call(&mut f, n, src, &block_vars);
            head_macro_use(&mut f, n, src);
        }
    }
    f.returns.sort_by_key(|r| r.node.start_byte());
    f.barriers.sort_by_key(|b| b.node.start_byte());
    if kernel {
        // Loops that may synchronize the block (a barrier, a call: a helper may, a member
        // called through an object may, or a macro in them) or a warp (a warp sync or a call),
        // and the returns a warp sync may follow.
        let loops: Vec<Node> = nodes.iter().copied().filter(|n| is_loop(*n)).collect();
        let holding = |at: &dyn Fn(&Node) -> bool| -> Vec<Node> {
            loops.iter().copied().filter(|l| at(l)).collect()
        };
        let holds = |l: &Node, n: &Node| l.byte_range().contains(&n.start_byte());
        let holds_call = |l: &Node| {
            f.calls.iter().any(|c| holds(l, &c.node))
                || f.member_calls.iter().any(|(_, c)| holds(l, c))
                || f.indirect_calls.iter().any(|c| holds(l, c))
        };
        let block_loops = holding(&|l| {
            holds_call(l)
                || f.barriers.iter().any(|b| holds(l, &b.node))
                || f.macro_uses.iter().any(|m| holds(l, &m.node))
        });
        let warp_loops = holding(&|l| {
            holds_call(l)
                || f.warp_syncs.iter().any(|w| holds(l, w))
                || f.macro_uses.iter().any(|m| holds(l, &m.node))
        });
        // A return matters only where a warp sync, or a call that may do one, can follow it.
        let may_sync_warp = !f.warp_syncs.is_empty()
            || !f.calls.is_empty()
            || !f.member_calls.is_empty()
            || !f.macro_uses.is_empty();
        let returns: Vec<Node> = f
            .returns
            .iter()
            .filter(|r| may_sync_warp && r.thread_dependent)
            .filter(|r| r.node.kind_id() == k.return_statement)
            .map(|r| r.node)
            .collect();
        // Warp loops and lane returns are asked only where a warp sync or a call may follow.
        if !block_loops.is_empty() || may_sync_warp {
            let rounds = super::uneven::Rounds::new(&nodes, src);
            if !block_loops.is_empty() {
                f.uneven_loops = rounds.uneven_loops(&block_loops);
            }
            if may_sync_warp {
                // A tile's operations (`tile8.shfl_down(...)`, `cg::reduce(tile, ...)`) wait
                // for the tile's lanes, which a guard at the tile's edge keeps together
                // (`if (threadIdx.x < 8)` around an 8-lane tile's reduction): only intrinsics
                // by a warp's mask and calls of helpers are asked whether a condition guards
                // them.
                let by_mask = |w: &&Node| {
                    w.child_by_field_id(lang::fields().function)
                        .is_some_and(|c| lang::WARP_SYNC_FUNCTIONS.contains(&text(c, src)))
                };
                let syncs: Vec<Node> = f
                    .warp_syncs
                    .iter()
                    .filter(by_mask)
                    .copied()
                    .chain(f.calls.iter().map(|c| c.node))
                    // A member the file defines may synchronize the warp too; a tile's own
                    // collectives (`tile.shfl_down`) are warp syncs, left out above.
                    .chain(
                        f.member_calls
                            .iter()
                            .map(|(_, c)| *c)
                            .filter(|c| !f.warp_syncs.iter().any(|w| w.id() == c.id())),
                    )
                    // A macro may call a helper that synchronizes the warp.
                    .chain(f.macro_uses.iter().map(|m| m.node))
                    .collect();
                let lanes = rounds.lane_dependent(&warp_loops, &returns, &syncs);
                f.lane_uneven_loops = lanes.loops;
                f.lane_returns = lanes.returns;
                f.lane_guarded = lanes.syncs;
            }
        }
    }
    if let Some(&node) = f.head_macros.first() {
        let name = text(node, src);
        if kernel && !f.returns.is_empty() && !f.barriers.is_empty() {
            // The predicated form guards statements after a return; the grammar sees the loop's
            // call and block as two statements, so a guard could open between them.
            f.refusals.push(
                Diagnostic::new(
                    Code::Unsupported,
                    format!("the loop macro `{name}` in a kernel with a return and a barrier"),
                )
                .label(node.byte_range(), "loop macro")
                .help("a kernel whose returns can reach a barrier is rewritten in the predicated form, which needs the loop written out"),
            );
        }
    }
    if kernel {
        f.nodes = nodes;
    }
    f
}

/// A call statement whose `;` is not in the text, followed by a block: a statement-head macro
/// and its block (`KERNEL_LOOP(i, n) { ... }`), separated by the masked view
/// (parse.rs, `loop_macro_separators`), of this file, an included header or unknown. The pair
/// counts as a loop (`reaches`). The plain form keeps both as written, so what the block does
/// means what it meant; a kernel that would need the predicated form is refused (`facts`),
/// since the grammar shows no loop there.
/// Whether `d` (a declarator) declares an array with a literal size initialized by a list of
/// more values than that size, none of them braced: an initializer that elides the braces of
/// its elements (`const uint2 mask[2] = {32u, 0u, 8u, 0u};`, public hashing kernels). nvcc
/// takes it in a function, and refuses it ("too many initializer values") in a function
/// template, which a transformed body is.
fn braces_elided(decl: Node, d: Node, src: &str) -> bool {
    let k = kinds();
    if d.kind_id() != k.init_declarator {
        return false;
    }
    // Scalar elements (`uint32_t x[2][2] = {1, 2, 3, 4}`) fill a template's array as they fill a
    // function's; nvcc's template parse rejects the elision for elements of class type only.
    let scalar = decl
        .child_by_field_id(crate::lang::fields().r#type)
        .is_some_and(|t| {
            t.kind() == "primitive_type"
                || t.kind() == "sized_type_specifier"
                || lang::SCALAR_TYPEDEFS.contains(&text(t, src))
        });
    if scalar {
        return false;
    }
    let (Some(array), Some(value)) = (
        d.child_by_field_id(crate::lang::fields().declarator),
        d.child_by_field_id(crate::lang::fields().value),
    ) else {
        return false;
    };
    if array.kind_id() != k.array_declarator || value.kind() != "initializer_list" {
        return false;
    }
    let size = array
        .child_by_field_id(crate::lang::fields().size)
        .and_then(|n| {
            text(n, src)
                .trim_end_matches(['u', 'U'])
                .parse::<usize>()
                .ok()
        });
    let mut c = value.walk();
    let items: Vec<Node> = value
        .named_children(&mut c)
        .filter(|x| x.kind_id() != k.comment)
        .collect();
    size.is_some_and(|n| items.len() > n) && !items.iter().any(|x| x.kind() == "initializer_list")
}

fn head_macro_use<'t>(f: &mut BodyFacts<'t>, call: Node<'t>, src: &str) {
    let k = kinds();
    let Some(name) = call
        .child_by_field_id(crate::lang::fields().function)
        .filter(|n| n.kind_id() == k.identifier)
    else {
        return;
    };
    let pair = call
        .parent()
        .filter(|s| s.kind_id() == k.expression_statement)
        .filter(|s| src.as_bytes().get(s.end_byte().wrapping_sub(1)) != Some(&b';'))
        .and_then(|s| s.next_named_sibling().map(|b| (s, b)))
        .filter(|(_, b)| b.kind_id() == k.compound_statement);
    if let Some((statement, block)) = pair {
        f.loops.push(statement.start_byte()..block.end_byte());
        f.head_macros.push(name);
    }
}

fn identifier_refusals(f: &mut BodyFacts, n: Node, name: &str, field: bool) {
    // `cg::this_grid().thread_rank()` is rewritten (`grid_queries`, found at the call, which
    // comes first in the walk): no grid barrier.
    let grid_query = f
        .grid_queries
        .iter()
        .any(|c| c.byte_range().contains(&n.start_byte()));
    if lang::GRID_SYNC.contains(&name) && !grid_query {
        f.refusals.push(
            Diagnostic::new(Code::GridSync, "grid-wide synchronization: a persistent grid cannot honour it")
                .label(n.byte_range(), "grid group used here")
                .help("persistent blocks run tasks one after another; a grid barrier would wait for tasks that have not started"),
        );
    }
    if lang::CLUSTER.contains(&name) {
        f.refusals.push(
            Diagnostic::new(
                Code::Clusters,
                "thread-block clusters tie blocks to hardware placement",
            )
            .label(n.byte_range(), "cluster used here"),
        );
    }
    if lang::DEVICE_LAUNCH.contains(&name) {
        f.refusals.push(
            Diagnostic::new(
                Code::DynamicParallelism,
                "dynamic parallelism: the kernel launches or waits for work from the device",
            )
            .label(n.byte_range(), "device-side launch API"),
        );
    }
    // The thread block's own index is rewritten (`block_index_calls`, found at the call,
    // which comes first in the walk); other groups' block queries are not.
    let rewritten = || {
        f.block_index_calls
            .iter()
            .any(|c| c.byte_range().contains(&n.start_byte()))
    };
    let block_group_query =
        lang::BLOCK_INDEX_QUERIES.contains(&name) || lang::GRID_SHAPE_QUERIES.contains(&name);
    if field && block_group_query && !rewritten() && !grid_query {
        f.refusals.push(
            Diagnostic::new(
                Code::Unsupported,
                format!("cooperative-groups query `{name}` reads the hardware block index"),
            )
            .label(n.byte_range(), "not rewritten")
            .help("use blockIdx/gridDim, which are rewritten"),
        );
    }
}

/// The `::name` around `n` where `n` names blockIdx, gridDim or threadIdx with the global
/// scope's `::` and nothing before it.
fn global_builtin<'t>(n: Node<'t>, name: &str) -> Option<Node<'t>> {
    let k = kinds();
    let builtin = name == "threadIdx" || lang::VIRTUAL_BUILTINS.iter().any(|(v, _)| *v == name);
    if !builtin || n.kind_id() != k.identifier {
        return None; // before the parent: `Node::parent` searches down from the root
    }
    let q = n.parent()?;
    let global = q.kind_id() == k.qualified_identifier
        && q.child_by_field_id(crate::lang::fields().scope).is_none()
        && q.child_by_field_id(crate::lang::fields().name) == Some(n);
    global.then_some(q)
}

fn record_macro_use<'t>(f: &mut BodyFacts<'t>, n: Node<'t>, name: &str, m: &MacroFacts) {
    f.virtual_reads.extend(m.virtual_reads.iter().copied());
    f.reads_thread_idx |= m.thread_idx;
    if m.barrier {
        f.barriers.push(BarrierSite {
            node: n,
            method: "sync",
            visible: false,
        });
    }
    if m.returns {
        // We cannot see the condition inside the macro: assume the worst.
        f.returns.push(ReturnSite {
            node: n,
            thread_dependent: true,
        });
    }
    if let Some(builtin) = m.global_builtin {
        f.refusals.push(
            Diagnostic::new(
                Code::Helper,
                format!("macro `{name}` reads `::{builtin}`, the hardware's, which the task's values in the transformed body cannot replace"),
            )
            .label(n.byte_range(), "macro used here")
            .help(format!("write `{builtin}` without the `::`")),
        );
    }
    if m.grid_sync {
        f.refusals.push(
            Diagnostic::new(
                Code::GridSync,
                format!("macro `{name}` uses grid-wide synchronization"),
            )
            .label(n.byte_range(), "macro used here"),
        );
    }
    if m.launches {
        f.refusals.push(
            Diagnostic::new(
                Code::DynamicParallelism,
                format!("macro `{name}` launches a kernel from device code"),
            )
            .label(n.byte_range(), "macro used here"),
        );
    }
    f.macro_uses.push(MacroUse {
        name: name.to_string(),
        node: n,
        facts: m.clone(),
    });
}

/// The callee's last name: `f`, `ns::f`, `f<T>`.
fn callee_name<'t>(callee: Node<'t>) -> Option<Node<'t>> {
    let k = kinds();
    let mut n = callee;
    loop {
        if n.kind_id() == k.identifier {
            return Some(n);
        }
        if n.kind_id() == k.qualified_identifier || n.kind_id() == k.template_function {
            n = n.child_by_field_id(crate::lang::fields().name)?;
            continue;
        }
        return None;
    }
}

/// The class or namespace right before the name of a qualified callee (`Call::qualifier`).
fn callee_qualifier(callee: Node, src: &str) -> Option<String> {
    let k = kinds();
    let f = crate::lang::fields();
    let mut n = callee;
    let mut scope = None;
    loop {
        if n.kind_id() == k.qualified_identifier {
            scope = n.child_by_field_id(f.scope);
            n = n.child_by_field_id(f.name)?;
        } else if n.kind_id() == k.template_function {
            n = n.child_by_field_id(f.name)?;
        } else {
            break;
        }
    }
    let scope = scope?;
    // `Math<T>`: the template's name.
    let named = if scope.kind() == "template_type" {
        scope.child_by_field_id(f.name)?
    } else {
        scope
    };
    matches!(
        named.kind(),
        "namespace_identifier" | "type_identifier" | "identifier"
    )
    .then(|| text(named, src).to_string())
}

fn record_call<'t>(
    f: &mut BodyFacts<'t>,
    call: Node<'t>,
    src: &str,
    block_vars: &BTreeSet<String>,
) {
    let k = kinds();
    let Some(callee) = call.child_by_field_id(crate::lang::fields().function) else {
        return;
    };
    let Some(args) = call.child_by_field_id(crate::lang::fields().arguments) else {
        return;
    };
    let arg_count = lang::count_named(args);
    // `x.sync()` where x is this thread block; `this_thread_block().sync()`.
    if callee.kind_id() == k.field_expression {
        let Some((object, field, arg_count)) = member_call(call, src) else {
            return;
        };
        if field == "sync" && arg_count == 0 && is_thread_block(object, src, block_vars) {
            f.barriers.push(BarrierSite {
                node: call,
                method: "sync",
                visible: true,
            });
        } else if field == "group_index"
            && arg_count == 0
            && is_thread_block(object, src, block_vars)
        {
            f.block_index_calls.push(call);
            f.virtual_reads.insert("blockIdx");
        } else if arg_count == 0 && GRID_GROUP_QUERIES.contains(&field) && is_this_grid(object, src)
        {
            // The task's grid answers from the body's blockIdx, gridDim and threadIdx (the
            // task's): the prologue must declare them.
            f.grid_queries.push(call);
            f.virtual_reads.insert("blockIdx");
            f.virtual_reads.insert("gridDim");
            f.reads_thread_idx = true;
        } else {
            f.member_calls.push((field.to_string(), call));
        }
        return;
    }
    let Some(name_node) = callee_name(callee) else {
        f.indirect_calls.push(call);
        return;
    };
    let name = text(name_node, src);
    if let Some((_, method)) = lang::BARRIER_FUNCTIONS.iter().find(|(b, _)| *b == name) {
        f.barriers.push(BarrierSite {
            node: call,
            method,
            visible: true,
        });
        return;
    }
    // `cg::sync(block)`
    if name == "sync" && arg_count == 1 {
        let arg = args.named_child(0);
        if arg.is_some_and(|a| is_thread_block(a, src, block_vars)) {
            f.barriers.push(BarrierSite {
                node: call,
                method: "sync",
                visible: true,
            });
            return;
        }
    }
    f.calls.push(Call {
        name: name.to_string(),
        qualifier: callee_qualifier(callee, src),
        node: call,
        args,
        arg_count,
    });
}

/// Whether `n` is a call of `this_grid()` (`cg::this_grid()`, `cooperative_groups::this_grid()`).
fn is_this_grid(n: Node, src: &str) -> bool {
    let k = kinds();
    n.kind_id() == k.call_expression
        && n.child_by_field_id(crate::lang::fields().arguments)
            .is_some_and(|a| lang::count_named(a) == 0)
        && n.child_by_field_id(crate::lang::fields().function)
            .and_then(callee_name)
            .is_some_and(|c| text(c, src) == "this_grid")
}

fn is_thread_block(n: Node, src: &str, block_vars: &BTreeSet<String>) -> bool {
    let k = kinds();
    if n.kind_id() == k.identifier {
        return block_vars.contains(text(n, src));
    }
    if n.kind_id() == k.call_expression {
        let callee = n
            .child_by_field_id(crate::lang::fields().function)
            .and_then(callee_name);
        return callee.is_some_and(|c| text(c, src) == "this_thread_block");
    }
    false
}

/// Whether `call` synchronizes the lanes of a warp named by a fixed mask: an intrinsic of
/// `lang::WARP_SYNC_FUNCTIONS` with a literal or macro mask, a tile's member of
/// `lang::TILE_SYNC_METHODS`, or a collective over a tile (`cg::reduce(tile, v, op)`).
fn warp_sync(call: Node, src: &str, tile_vars: &BTreeSet<String>) -> bool {
    let k = kinds();
    let fields = crate::lang::fields();
    let (Some(callee), Some(args)) = (
        call.child_by_field_id(fields.function),
        call.child_by_field_id(fields.arguments),
    ) else {
        return false;
    };
    let is_tile = |n: Option<Node>| {
        n.is_some_and(|n| n.kind_id() == k.identifier && tile_vars.contains(text(n, src)))
    };
    if callee.kind_id() == k.field_expression {
        let method = callee
            .child_by_field_id(fields.field)
            .map_or("", |m| text(m, src));
        return lang::TILE_SYNC_METHODS.contains(&method)
            && is_tile(callee.child_by_field_id(fields.argument));
    }
    let Some(name) = callee_name(callee).map(|n| text(n, src)) else {
        return false;
    };
    if lang::WARP_SYNC_FUNCTIONS.contains(&name) {
        return lang::fixed_warp_mask(args.named_child(0), src);
    }
    lang::GROUP_COLLECTIVES.contains(&name) && is_tile(args.named_child(0))
}

/// Variables and parameters that hold a cooperative-groups tile of fixed lanes: declared as a
/// `thread_block_tile<...>` or from `tiled_partition`.
fn tile_variables(body: Node, nodes: &[Node], src: &str) -> BTreeSet<String> {
    let is_tile_type = |t: &str| t.contains("thread_block_tile");
    let mut out = declared_names(nodes, src, |ty, value| {
        is_tile_type(ty) || value.contains("tiled_partition")
    });
    // Parameters: `cg::thread_block_tile<32> warp`, `const thread_block_tile<32>& g`.
    out.extend(typed_parameters(body, src, is_tile_type));
    out
}

/// The parameters of the function whose body is `body` that are declared with a type `keep`
/// accepts (a function returning a pointer or a reference too: its declarator wraps the
/// parameter list, `float* stage(cg::thread_block b, ...)`).
fn typed_parameters(body: Node, src: &str, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let fields = crate::lang::fields();
    let mut out = Vec::new();
    if let Some(params) = body
        .parent()
        .and_then(lang::function_declarator)
        .and_then(|d| d.child_by_field_id(fields.parameters))
    {
        let mut c = params.walk();
        for p in params.named_children(&mut c) {
            let ty = p
                .child_by_field_id(fields.r#type)
                .map_or("", |t| text(t, src));
            if keep(ty) {
                if let Some(name) = p
                    .child_by_field_id(fields.declarator)
                    .and_then(lang::declarator_name)
                {
                    out.push(text(name, src).to_string());
                }
            }
        }
    }
    out
}

/// Locals and parameters that hold this thread block: `thread_block b = ...`, `auto b =
/// this_thread_block()`, a helper's `cg::thread_block block` or `const thread_block& b`. A
/// `thread_group` may hold the block too: its `sync()` counts as the block's barrier, which
/// is what it is or more than it needs (a tile's).
pub fn thread_block_variables(body: Node, nodes: &[Node], src: &str) -> BTreeSet<String> {
    let block_type = |ty: &str| {
        (ty.ends_with("thread_block") || ty.ends_with("thread_group")) && !ty.contains("tile")
    };
    let mut out = declared_names(nodes, src, |ty, value| {
        let tile = value.contains("tiled_partition");
        let from_call = value.contains("this_thread_block()") && !tile;
        (block_type(ty) && !tile) || (ty == "auto" && from_call)
    });
    out.extend(typed_parameters(body, src, block_type));
    out
}

/// Names declared in `nodes` whose declaration's type and initializer's text satisfy `keep`.
fn declared_names(
    nodes: &[Node],
    src: &str,
    keep: impl Fn(&str, &str) -> bool,
) -> BTreeSet<String> {
    let k = kinds();
    let fields = crate::lang::fields();
    let mut out = BTreeSet::new();
    for &n in nodes {
        if n.kind_id() != k.declaration {
            continue;
        }
        let ty = n
            .child_by_field_id(fields.r#type)
            .map_or("", |t| text(t, src));
        for d in lang::declarators(n) {
            let value = d
                .child_by_field_id(fields.value)
                .map_or("", |v| text(v, src));
            if keep(ty, value) {
                if let Some(name) = lang::declarator_name(d) {
                    out.insert(text(name, src).to_string());
                }
            }
        }
    }
    out
}
