//! Loops that the threads of a block may leave after different numbers of rounds because of
//! the thread's own index: `for (int i = 0; i + tid < n; i += blockDim.x)`, a block-stride loop
//! `for (int i = threadIdx.x; i < n; i += blockDim.x)`, a `break` under `if (threadIdx.x ...)`.
//! In the original, a thread that leaves such a loop and runs to the kernel's end exits, and
//! the barriers the others still meet in the loop stop waiting for it; a persistent block's
//! thread cannot exit (decide.rs refuses a barrier in such a loop, CP004).
//!
//! Unlike `uniformity`, which counts everything it cannot prove uniform as varying (there a
//! wrong "varying" only costs the predicated form), this asks whether a loop *certainly*
//! depends on the thread, since the answer refuses the kernel: a value is the thread's when
//! it is computed from `threadIdx` or from a local computed from it by arithmetic (through
//! assignments, not through the branches that choose them, names resolved by scope; a write
//! reaches the reads after it and those in a loop around it); what
//! memory loads, calls (but pure functions') and shared variables give is not (a partitioner's
//! loop over tasks that thread 0 claims into shared memory is uniform in fact, and such kernels
//! run correctly transformed).

mod warp_stride;

use super::flow::{guards, is_loop, Guard};
use super::uniformity::parents_within;
use crate::lang::{self, kinds, text};
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use tree_sitter::Node;

/// A kernel body's loops and returns, asked at a block's scale and at a warp's. `nodes`: the
/// body and its descendants in pre-order; parents by node id come from one walk
/// (`Node::parent` walks from the root each time), shared by both questions.
///
/// At a warp's scale a value differs between lanes when it is computed from `threadIdx.x` (or
/// a group's `thread_rank()`) and not divided by a warp's width or more (`tid / 32`,
/// `tid >> 5`, `tid / WARP_SIZE` are one warp's); `threadIdx.y` and `.z` differ within a warp
/// only where `blockDim.x` is below 32, which the text does not say.
pub struct Rounds<'t, 's> {
    nodes: &'s [Node<'t>],
    src: &'s str,
    parents: HashMap<usize, Node<'t>>,
}

impl<'t, 's> Rounds<'t, 's> {
    pub fn new(nodes: &'s [Node<'t>], src: &'s str) -> Rounds<'t, 's> {
        let parents = nodes
            .first()
            .map(|b| parents_within(*b))
            .unwrap_or_default();
        Rounds {
            nodes,
            src,
            parents,
        }
    }

    fn parent(&self, n: Node<'t>) -> Option<Node<'t>> {
        self.parents.get(&n.id()).copied()
    }

    /// Of `loops`, those whose condition (a `for`'s condition, a `while`'s or `do`'s) uses the
    /// thread's index, or that a `break` or `goto` under a condition that uses it leaves.
    pub fn uneven_loops(&self, loops: &[Node<'t>]) -> Vec<Node<'t>> {
        let parent = |n: Node<'t>| self.parent(n);
        let thread = Threadness::new(self.nodes, self.src, &parent, Level::Block);
        leaving_unevenly(loops, self.nodes, self.src, &thread, &parent)
    }

    /// The same at a warp's scale (`LaneDependent`), from one reading of the lanes' values.
    pub fn lane_dependent(
        &self,
        loops: &[Node<'t>],
        returns: &[Node<'t>],
        syncs: &[Node<'t>],
    ) -> LaneDependent<'t> {
        let Some(&body) = self.nodes.first() else {
            return LaneDependent::default();
        };
        let parent = |n: Node<'t>| self.parent(n);
        let lanes = Threadness::new(self.nodes, self.src, &parent, Level::Lane);
        let uses_lane = |n: Node| lanes.uses(n);
        let under_lane_condition = |nodes: &[Node<'t>]| -> Vec<Node<'t>> {
            nodes
                .iter()
                .copied()
                .filter(|n| under_condition(*n, body, &uses_lane, &parent))
                .collect()
        };
        LaneDependent {
            loops: leaving_unevenly(loops, self.nodes, self.src, &lanes, &parent),
            returns: under_lane_condition(returns),
            syncs: under_lane_condition(syncs),
        }
    }
}

/// What differs between the lanes of one warp (`Rounds::lane_dependent`).
#[derive(Default)]
pub struct LaneDependent<'t> {
    /// Of the loops asked, those that the lanes may leave after different numbers of rounds.
    pub loops: Vec<Node<'t>>,
    /// Of the returns asked, those under an `if`, `?:`, `switch` or `&&`/`||` whose condition
    /// differs between lanes.
    pub returns: Vec<Node<'t>>,
    /// Of the warp syncs and calls asked, those under such a condition: in the original the
    /// lanes that skip one run on to the kernel's end and exit, and the operation stops
    /// waiting for them; in a task they stay, and wait at the next barrier or take part in the
    /// next task's operation.
    pub syncs: Vec<Node<'t>>,
}

/// Of `loops`, those whose condition uses values of `thread`'s kind, or that a `break` or
/// `goto` under such a condition leaves.
fn leaving_unevenly<'t>(
    loops: &[Node<'t>],
    nodes: &[Node<'t>],
    src: &str,
    thread: &Threadness,
    parent: &dyn Fn(Node<'t>) -> Option<Node<'t>>,
) -> Vec<Node<'t>> {
    let uses_thread = |n: Node| thread.uses(n);
    let f = lang::fields();
    loops
        .iter()
        .copied()
        .filter(|l| {
            let cond = l
                .child_by_field_id(f.condition)
                .or_else(|| l.child_by_field_id(f.right));
            if cond.is_some_and(uses_thread)
                && !counted_evenly(*l, nodes[0], src, thread)
                && !thread
                    .strides
                    .as_ref()
                    .is_some_and(|s| s.keeps_lanes_together(thread, *l))
            {
                return true;
            }
            let range = l.byte_range();
            nodes
                .iter()
                .filter(|n| range.contains(&n.start_byte()) && n.id() != l.id())
                .filter(|n| match n.kind() {
                    "goto_statement" => true,
                    "break_statement" => {
                        innermost_breakable(**n, parent).is_some_and(|b| b.id() == l.id())
                    }
                    _ => false,
                })
                .any(|e| under_condition(*e, *l, &uses_thread, parent))
        })
        .collect()
}

/// Which values count as the thread's: those that differ between the threads of a block, or
/// those that differ between the lanes of a warp (`Rounds::lane_dependent`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Block,
    Lane,
}

/// One variable of the body: its name, the scope it is visible in (the block or statement
/// around its declaration; the whole body for a name the body does not declare, a parameter)
/// and where it is declared.
struct Variable<'s> {
    name: &'s str,
    scope: Range<usize>,
    at: usize,
}

/// A write of a variable: the name written, the value it gets, whether it gets it whole (a
/// declaration's or an `=`, not a `+=`).
type Write<'t> = (Node<'t>, Node<'t>, bool);

/// Which variables of a body hold values computed from the thread's index: declared with, or
/// assigned, an expression that names `threadIdx` or another such variable, to a fixed point.
/// Names are resolved by scope (`for (int i = threadIdx.x; ...)` and a later `for (int i = 0;
/// ...)` are two variables).
struct Threadness<'s> {
    src: &'s str,
    level: Level,
    variables: Vec<Variable<'s>>,
    /// Each name's variables (indices into `variables`).
    by_name: HashMap<&'s str, Vec<usize>>,
    /// Per variable, where the writes that give it a value of the thread's are (their
    /// targets' offsets): a use sees those before it, and those in a loop around it.
    thread: Vec<Vec<usize>>,
    /// The body's loops: a write in one reaches the uses before it in the same loop.
    loops: Vec<Range<usize>>,
    /// Per variable, whether its every write is the thread's linear index
    /// (`linear_thread_index`: `int tid = threadIdx.x;`).
    thread_index_copy: Vec<bool>,
    /// Per variable, whether its every write is `threadIdx.x` itself (`int tid =
    /// threadIdx.x;`, not the 2-D linear index): a value below `blockDim.x`.
    x_index_copy: Vec<bool>,
    /// Per variable, whether its every write is `=` a whole number of `blockDim.x`
    /// (`block_multiple`: `const int padded = blockDim.x * ((n + blockDim.x - 1) /
    /// blockDim.x);`).
    block_multiple: Vec<bool>,
    /// Per variable, the value of its only write where it has one, a whole value (its
    /// declaration's, or an `=`), and is never stepped or address-taken: `last =
    /// start + TILE` (`counted_evenly` reads a bound through it).
    sole_value: Vec<Option<Range<usize>>>,
    /// Names a `static_assert` of the body says are multiples of a warp's width
    /// (`asserted_warp_multiples`).
    warp_multiples: BTreeSet<String>,
    /// At a warp's scale, the variables that keep a warp's lanes together and the bounds at a
    /// warp's edge (`warp_stride`).
    strides: Option<warp_stride::WarpStrides>,
}

impl<'s> Threadness<'s> {
    fn new<'t>(
        nodes: &[Node<'t>],
        src: &'s str,
        parent: &dyn Fn(Node<'t>) -> Option<Node<'t>>,
        level: Level,
    ) -> Threadness<'s> {
        let k = kinds();
        let f = lang::fields();
        let body = nodes.first().map_or(0..src.len(), |b| b.byte_range());
        let mut t = Threadness {
            src,
            level,
            variables: Vec::new(),
            by_name: HashMap::new(),
            thread: Vec::new(),
            loops: nodes
                .iter()
                .filter(|n| is_loop(**n))
                .map(|n| n.byte_range())
                .collect(),
            thread_index_copy: Vec::new(),
            x_index_copy: Vec::new(),
            block_multiple: Vec::new(),
            sole_value: Vec::new(),
            warp_multiples: asserted_warp_multiples(nodes, src),
            strides: None,
        };
        // Each write: the name written, the value it gets, and whether it gets it whole (a
        // declaration's, `=`), not added or shifted in.
        let mut writes: Vec<Write> = Vec::new();
        for &n in nodes {
            let id = n.kind_id();
            if id == k.assignment_expression {
                if let (Some(l), Some(r)) =
                    (n.child_by_field_id(f.left), n.child_by_field_id(f.right))
                {
                    if l.kind_id() == k.identifier {
                        let whole = n
                            .child_by_field_id(f.operator)
                            .is_some_and(|o| text(o, src) == "=");
                        writes.push((l, r, whole));
                    }
                }
                continue;
            }
            let declared: Vec<(Node, Option<Node>)> = if id == k.init_declarator {
                n.child_by_field_id(f.declarator)
                    .map(|d| (d, n.child_by_field_id(f.value)))
                    .into_iter()
                    .collect()
            } else if id == k.declaration {
                // `int i, tid;`: the declarators that are bare names (an `init_declarator` is
                // its own node).
                lang::declarators(n)
                    .into_iter()
                    .map(|d| (d, None))
                    .collect()
            } else {
                continue;
            };
            for (name, value) in declared {
                if name.kind_id() != k.identifier {
                    continue;
                }
                let scope = scope_of(n, parent).map_or(body.clone(), |s| s.byte_range());
                t.add(Variable {
                    name: text(name, src),
                    scope,
                    at: name.start_byte(),
                });
                if let Some(v) = value {
                    writes.push((name, v, true));
                }
            }
        }
        // Copies of the thread's index: every write of the variable is `threadIdx.x` (the
        // linear index, or `threadIdx.x` itself).
        for (i, copy) in t.every_write(&writes, |v, _| linear_thread_index(text(v, src))) {
            t.thread_index_copy[i] = copy;
        }
        for (i, x) in t.every_write(&writes, |v, whole| whole && x_index(text(v, src))) {
            t.x_index_copy[i] = x;
        }
        // Values written once: a variable's writes, then those that step it or take its
        // address (`++last`, `f(&last)`), which disqualify it.
        let mut sole: HashMap<usize, Option<Range<usize>>> = HashMap::new();
        for (target, value, whole) in &writes {
            if let Some(i) = t.resolve(*target) {
                let first = *whole && !sole.contains_key(&i);
                sole.insert(i, first.then(|| value.byte_range()));
            }
        }
        for &n in nodes {
            let operand = match n.kind() {
                "update_expression" => n.child_by_field_id(f.argument),
                "pointer_expression"
                    if n.child_by_field_id(f.operator)
                        .is_some_and(|o| text(o, src) == "&") =>
                {
                    n.child_by_field_id(f.argument)
                }
                _ => None,
            };
            if let Some(i) = operand
                .filter(|o| o.kind_id() == k.identifier)
                .and_then(|o| t.resolve(o))
            {
                sole.insert(i, None);
            }
        }
        for (i, value) in sole {
            t.sole_value[i] = value;
        }
        let declared = t.variables.len();
        loop {
            let mut changed = false;
            for (target, value, _) in &writes {
                let i = match t.resolve(*target) {
                    Some(i) => i,
                    // A parameter or a name of the file: one variable for the whole body.
                    None => t.add(Variable {
                        name: text(*target, src),
                        scope: body.clone(),
                        at: body.start,
                    }),
                };
                let at = target.start_byte();
                if !t.thread[i].contains(&at) && t.uses(*value) {
                    t.thread[i].push(at);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // Whole numbers of `blockDim.x`, once the thread's values are known (the other factor
        // must be free of them).
        let multiples = t.every_write(&writes, |v, whole| whole && t.block_multiple_value(v));
        for (i, multiple) in multiples {
            t.block_multiple[i] = multiple;
        }
        if level == Level::Lane {
            t.strides = Some(warp_stride::WarpStrides::new(&t, nodes, parent, declared));
        }
        t
    }

    /// Adds `v`, not the thread's; its index.
    fn add(&mut self, v: Variable<'s>) -> usize {
        let i = self.variables.len();
        self.by_name.entry(v.name).or_default().push(i);
        self.variables.push(v);
        self.thread.push(Vec::new());
        self.thread_index_copy.push(false);
        self.x_index_copy.push(false);
        self.block_multiple.push(false);
        self.sole_value.push(None);
        i
    }

    /// Per variable that `writes` write, whether `keep` accepts every write's value (and
    /// whether the value is written whole).
    fn every_write<'t>(
        &self,
        writes: &[Write<'t>],
        keep: impl Fn(Node<'t>, bool) -> bool,
    ) -> HashMap<usize, bool> {
        let mut out: HashMap<usize, bool> = HashMap::new();
        for &(target, value, whole) in writes {
            if let Some(i) = self.resolve(target) {
                *out.entry(i).or_insert(true) &= keep(value, whole);
            }
        }
        out
    }

    /// Whether `e` is a whole number of `blockDim.x`: a product with `blockDim.x` as a factor
    /// and another free of the thread's values (`blockDim.x * ((n + blockDim.x - 1) /
    /// blockDim.x)`, `(n + blockDim.x - 1) / blockDim.x * blockDim.x`), or a variable that
    /// only ever holds one.
    fn block_multiple_value(&self, e: Node) -> bool {
        let e = lang::strip_parens(e);
        if e.kind_id() == kinds().identifier {
            return self.resolve(e).is_some_and(|i| self.block_multiple[i]);
        }
        let Some((a, b)) = operands(e, "*", self.src) else {
            return false;
        };
        let block_width = |n: Node| block_width(text(lang::strip_parens(n), self.src));
        (block_width(a) && !self.uses(b)) || (block_width(b) && !self.uses(a))
    }

    /// Whether every variable `e` names is written once (`sole_value`): its value stays what
    /// it was where `e` was written. Names the body does not declare (parameters, the
    /// file's) count as such.
    fn written_once(&self, e: Node) -> bool {
        let mut once = true;
        lang::visit(e, |d| {
            if d.kind_id() == kinds().identifier {
                once &= self.resolve(d).is_none_or(|i| self.sole_value[i].is_some());
            }
            once
        });
        once
    }

    /// Whether `e` is `threadIdx.x`, or a variable that only ever holds it.
    fn x_index_value(&self, e: Node) -> bool {
        let e = lang::strip_parens(e);
        x_index(text(e, self.src))
            || (e.kind_id() == kinds().identifier
                && self.resolve(e).is_some_and(|i| self.x_index_copy[i]))
    }

    /// Whether variable `i` may hold a value of the thread's where it is read at `at`: a write
    /// of such a value comes before, or shares a loop with the read (the next round reads it).
    /// `bool pred = row < n;` before `row = row * stride + lane;` is the warp's: the later write
    /// does not reach it.
    fn thread_at(&self, i: usize, at: usize) -> bool {
        self.thread[i]
            .iter()
            .any(|&w| w < at || self.loops.iter().any(|l| l.contains(&w) && l.contains(&at)))
    }

    /// Whether `e` compares the thread's index itself with a bound at a warp's edge
    /// (`threadIdx.x < 32`, `tid >= 64`, `tid > 31`, `tid < warpSize`): one answer for the lanes
    /// of a warp, where a block's width is a whole number of warps, as a block reduction's
    /// `if (tid < 32)` assumes.
    fn warp_aligned_comparison(&self, e: Node) -> bool {
        let f = lang::fields();
        let op = e
            .child_by_field_id(f.operator)
            .map_or("", |o| text(o, self.src));
        let (Some(l), Some(r)) = (e.child_by_field_id(f.left), e.child_by_field_id(f.right)) else {
            return false;
        };
        let index = |n: Node| {
            linear_thread_index(text(n, self.src))
                || (n.kind_id() == kinds().identifier
                    && self.resolve(n).is_some_and(|i| self.thread_index_copy[i]))
        };
        // The bound, counted in lanes (modulo a warp: only its place in a warp matters): a
        // literal, a warp's width by name, or a name the body asserts a multiple of one
        // (`static_assert(D % (2*WARP_SIZE) == 0)`, `D` a template parameter: every
        // instantiation compiles only if it holds) and declares no variable of.
        let bound = |n: Node| -> Option<u64> {
            let t = text(n, self.src);
            lang::integer_literal(t).or_else(|| {
                if warp_width_name(t) {
                    return Some(32);
                }
                (n.kind_id() == kinds().identifier
                    && self.warp_multiples.contains(t)
                    && self.resolve(n).is_none())
                .then_some(0)
            })
        };
        // Written with the index on the left: `<` and `>=` cut at the bound, `<=` and `>`
        // after it.
        let cut = match (index(l), index(r)) {
            (true, false) => match (op, bound(r)) {
                ("<" | ">=", Some(c)) => c,
                ("<=" | ">", Some(c)) => c + 1,
                _ => return false,
            },
            (false, true) => match (op, bound(l)) {
                (">" | "<=", Some(c)) => c,
                (">=" | "<", Some(c)) => c + 1,
                _ => return false,
            },
            _ => return false,
        };
        cut % 32 == 0
    }

    /// The variable an identifier names: the innermost declaration of its name, before it, in
    /// a scope around it.
    fn resolve(&self, ident: Node) -> Option<usize> {
        let at = ident.start_byte();
        self.by_name
            .get(text(ident, self.src))?
            .iter()
            .copied()
            .filter(|&i| self.variables[i].at <= at && self.variables[i].scope.contains(&at))
            .min_by_key(|&i| self.variables[i].scope.len())
    }

    /// Whether the expression `n` names `threadIdx` or a variable of the thread's, outside
    /// loads and the arguments of calls other than pure functions' (`min`, `sqrtf`...): a
    /// block reduction (`__syncthreads_or(left > 0)`) gives every thread of the block one
    /// value, and what another call returns or a load reads is not known to be the thread's.
    fn uses(&self, n: Node) -> bool {
        let k = kinds();
        let fields = lang::fields();
        let mut found = false;
        lang::visit(n, |d| {
            if self.level == Level::Lane {
                match d.kind() {
                    // `threadIdx.x` differs between lanes; `.y` and `.z` may not.
                    "field_expression"
                        if d.child_by_field_id(fields.argument)
                            .is_some_and(|a| text(a, self.src) == "threadIdx") =>
                    {
                        found |= d
                            .child_by_field_id(fields.field)
                            .is_some_and(|x| text(x, self.src) == "x");
                        return false;
                    }
                    // A warp's index, or whether the lane's warp is past a bound at a warp's
                    // edge: one value for the warp's lanes.
                    "binary_expression"
                        if per_warp(d, self.src) || self.warp_aligned_comparison(d) =>
                    {
                        return false
                    }
                    "call_expression" => {
                        let method = d
                            .child_by_field_id(fields.function)
                            .filter(|c| c.kind_id() == k.field_expression)
                            .and_then(|c| c.child_by_field_id(fields.field))
                            .map_or("", |m| text(m, self.src));
                        if method == "thread_rank" {
                            found = true;
                            return false;
                        }
                    }
                    _ => {}
                }
            }
            if d.kind_id() == k.call_expression {
                let callee = d
                    .child_by_field_id(fields.function)
                    .map_or("", |f| text(f, self.src));
                // A pure function's result is its arguments'; any other call's is not known
                // to be the thread's.
                return lang::is_pure_function(callee) || lang::UNIFORM_FUNCTIONS.contains(&callee);
            }
            // Nor is a load's value, even at the thread's own index (a block's threads may
            // read one value there: ggml reduces a flag through shared memory and reads it
            // back at `buf[tid % WARP_SIZE]`).
            if d.kind() == "subscript_expression" {
                return false;
            }
            if d.kind_id() == k.identifier {
                found |= (self.level == Level::Block && text(d, self.src) == "threadIdx")
                    || self
                        .resolve(d)
                        .is_some_and(|i| self.thread_at(i, d.start_byte()));
            }
            !found
        });
        found
    }
}

/// Whether `text` is `threadIdx.x`.
fn x_index(text: &str) -> bool {
    let t: String = text.split_whitespace().collect();
    t.trim_start_matches('(').trim_end_matches(')') == "threadIdx.x"
}

/// Whether `text` is `blockDim.x`.
fn block_width(text: &str) -> bool {
    let t: String = text.split_whitespace().collect();
    t == "blockDim.x"
}

/// Whether `text` is the thread's linear index within its block, in whose order the block's
/// warps take their lanes: `threadIdx.x`, or `threadIdx.y * blockDim.x + threadIdx.x` with its
/// operands in either order.
fn linear_thread_index(text: &str) -> bool {
    let t: String = text.split_whitespace().collect();
    let t = t.trim_start_matches('(').trim_end_matches(')');
    if t == "threadIdx.x" {
        return true;
    }
    let Some((a, b)) = t.split_once('+') else {
        return false;
    };
    // `threadIdx.y * blockDim.x`, or a row a whole number of warps wide (`WARP_SIZE *
    // threadIdx.y`, as blocks of (WARP_SIZE, nwarps) threads count): where a block's width is
    // a whole number of warps, as the lane rules assume of `threadIdx.y`, each warp's lanes
    // then hold 32 consecutive values from a multiple of 32.
    let row = |r: &str| {
        r.trim_matches(['(', ')'])
            .split_once('*')
            .is_some_and(|(p, q)| {
                (p == "threadIdx.y" && (q == "blockDim.x" || warps_wide(q)))
                    || (q == "threadIdx.y" && (p == "blockDim.x" || warps_wide(p)))
            })
    };
    (a == "threadIdx.x" && row(b)) || (b == "threadIdx.x" && row(a))
}

/// The names that a `static_assert` among `nodes` says are multiples of a warp's width:
/// `static_assert(D % K == 0, ...)` (or `0 == D % K`, parenthesized or not), `K` a literal
/// multiple of 32, a warp's width by name, or a product of such and literals (`2*WARP_SIZE`).
/// Not one inside an `if`: a discarded `if constexpr` branch checks none of its assertions.
fn asserted_warp_multiples(nodes: &[Node], src: &str) -> BTreeSet<String> {
    let f = lang::fields();
    let branches: Vec<Range<usize>> = nodes
        .iter()
        .filter(|n| n.kind_id() == kinds().if_statement)
        .map(|n| n.byte_range())
        .collect();
    let mut out = BTreeSet::new();
    for n in nodes {
        if n.kind() != "static_assert_declaration"
            || branches.iter().any(|b| b.contains(&n.start_byte()))
        {
            continue;
        }
        let Some((l, r)) = n
            .child_by_field_id(f.condition)
            .and_then(|c| operands(c, "==", src))
        else {
            continue;
        };
        let zero = |x: Node| text(x, src).trim() == "0";
        let rem = if zero(r) {
            l
        } else if zero(l) {
            r
        } else {
            continue;
        };
        let Some((name, by)) = operands(rem, "%", src) else {
            continue;
        };
        let name = lang::strip_parens(name);
        if name.kind() == "identifier" && multiple_of_warp(by, src) {
            out.insert(text(name, src).to_string());
        }
    }
    out
}

/// Whether the constant expression `e` is a multiple of 32: a literal multiple of 32, a
/// warp's width by name, or a product with one such factor.
fn multiple_of_warp(e: Node, src: &str) -> bool {
    let literal = |x: Node| lang::integer_literal(text(lang::strip_parens(x), src)).is_some();
    match operands(e, "*", src) {
        Some((a, b)) => {
            (multiple_of_warp(a, src) && (literal(b) || multiple_of_warp(b, src)))
                || (literal(a) && multiple_of_warp(b, src))
        }
        None => warps_wide(text(lang::strip_parens(e), src)),
    }
}

/// The operands of `e` (parenthesized or not) where it applies binary operator `op`.
fn operands<'t>(e: Node<'t>, op: &str, src: &str) -> Option<(Node<'t>, Node<'t>)> {
    let f = lang::fields();
    let e = lang::strip_parens(e);
    if e.kind() != "binary_expression"
        || e.child_by_field_id(f.operator).map(|o| text(o, src)) != Some(op)
    {
        return None;
    }
    Some((e.child_by_field_id(f.left)?, e.child_by_field_id(f.right)?))
}

/// Whether `t` is a whole number of warps: a literal multiple of 32 or a warp's width by name.
fn warps_wide(t: &str) -> bool {
    let t = t.trim_matches(['(', ')']);
    lang::integer_literal(t).is_some_and(|n| n > 0 && n % 32 == 0) || warp_width_name(t)
}

/// `warpSize`, `WARP_SIZE`, `warp_size`, `WARP_SZ`: a warp's width by name (32; 64 on AMD
/// hardware where a HIP build defines it so, a multiple of 32 either way).
///
/// Also with a constant's `k` (`kWarpSize`) or a project's prefix (`C10_WARP_SIZE`), but not a
/// part of a warp (`HALF_WARP_SIZE`, `kSubWarpSize`).
fn warp_width_name(t: &str) -> bool {
    let bare = |w: &str| {
        matches!(
            w.to_ascii_lowercase().as_str(),
            "warpsize" | "warp_size" | "warp_sz"
        )
    };
    if bare(t) {
        return true;
    }
    let constant = t
        .strip_prefix('k')
        .filter(|r| r.starts_with(|c: char| c.is_ascii_uppercase()));
    if constant.is_some_and(bare) {
        return true;
    }
    let lower = t.to_ascii_lowercase();
    let part = ["half", "quarter", "sub", "lane", "group"];
    t.rsplit_once('_').is_some_and(|(prefix, _)| {
        lower.ends_with("_warp_size")
            && !prefix.is_empty()
            && !part.iter().any(|p| prefix.to_ascii_lowercase().contains(p))
    })
}

/// Whether `e` divides by a warp's width or more (`x / 32`, `x >> 5`, `x / WARP_SIZE`,
/// `x / warpSize`): the lanes of one warp get one value where `x` is a thread's index.
fn per_warp(e: Node, src: &str) -> bool {
    let f = lang::fields();
    let op = e.child_by_field_id(f.operator).map_or("", |o| text(o, src));
    let Some(right) = e.child_by_field_id(f.right) else {
        return false;
    };
    let by = text(right, src);
    let number = lang::integer_literal(by);
    match op {
        "/" => number.is_some_and(|n| n >= 32) || by.to_ascii_lowercase().contains("warp"),
        ">>" => number.is_some_and(|n| n >= 5) || by.to_ascii_lowercase().contains("warp"),
        _ => false,
    }
}

/// The block or statement whose scope a declaration at `n` belongs to: the nearest enclosing
/// compound statement, loop, `if` or `switch`.
fn scope_of<'t>(n: Node<'t>, parent: &dyn Fn(Node<'t>) -> Option<Node<'t>>) -> Option<Node<'t>> {
    let k = kinds();
    let mut at = n;
    while let Some(p) = parent(at) {
        let id = p.kind_id();
        if id == k.compound_statement
            || is_loop(p)
            || id == k.if_statement
            || id == k.switch_statement
        {
            return Some(p);
        }
        at = p;
    }
    None
}

/// Whether `l` is a counted loop that runs as many rounds in every thread: its variable is
/// set in its initializer, stepped in its update by a value free of the thread's, compared
/// with a bound, and not written in the body; and the start and the bound carry the same
/// thread terms (none: `for (j = THREADS / 2; j > 0; j /= 2)`, whatever `j` held before; the
/// same: `for (int t = a + tid; t < b + tid; t += c)`, as ggml's recurrent kernels walk a
/// sequence).
fn counted_evenly(l: Node, body: Node, src: &str, thread: &Threadness) -> bool {
    let k = kinds();
    let f = lang::fields();
    if l.kind_id() != k.for_statement {
        return false;
    }
    let Some(init) = l.child_by_field_id(f.initializer) else {
        return false;
    };
    // `int t = start` or `t = start`: the variable and its start.
    let assigned = if init.kind_id() == k.assignment_expression {
        Some(init)
    } else {
        let mut found = None;
        lang::visit(init, |d| {
            if found.is_none() && d.kind_id() == k.init_declarator {
                found = Some(d);
            }
            found.is_none()
        });
        found
    };
    let Some(assigned) = assigned else {
        return false;
    };
    let (var, start) = if assigned.kind_id() == k.init_declarator {
        (
            assigned.child_by_field_id(f.declarator),
            assigned.child_by_field_id(f.value),
        )
    } else {
        (
            assigned.child_by_field_id(f.left),
            assigned.child_by_field_id(f.right),
        )
    };
    let (Some(var), Some(start)) = (var, start) else {
        return false;
    };
    let var = text(var, src);
    let Some(cond) = l.child_by_field_id(f.condition) else {
        return false;
    };
    let op = cond
        .child_by_field_id(f.operator)
        .map(|o| text(o, src))
        .unwrap_or_default();
    if cond.kind() != "binary_expression" || !matches!(op, "<" | "<=" | ">" | ">=" | "!=") {
        return false;
    }
    let (Some(left), Some(right)) = (
        cond.child_by_field_id(f.left),
        cond.child_by_field_id(f.right),
    ) else {
        return false;
    };
    let bound = if text(left, src) == var {
        right
    } else if text(right, src) == var {
        left
    } else {
        return false;
    };
    // The step: `++t`, `t++`, or `t += c` with `c` free of the thread's values.
    let step_varies = l.child_by_field_id(f.update).is_some_and(|u| {
        if u.kind_id() == k.update_expression {
            return false;
        }
        let value = (u.kind_id() == k.assignment_expression
            && u.child_by_field_id(f.left).map(|v| text(v, src)) == Some(var))
        .then(|| u.child_by_field_id(f.right))
        .flatten();
        value.is_none_or(|v| thread.uses(v))
    });
    if step_varies {
        return false;
    }
    // The thread's terms of a sum, a name written once read as its value (`last_idx` as
    // `start_idx + TILE`, `start_idx` as `blockIdx.x * TILE + threadIdx.x`), a few levels.
    let thread_terms = |e: Node| {
        let mut written: Vec<Node> = Vec::new();
        additive_terms(e, &mut written);
        // Each term, and whether it comes from a name's value rather than the text itself.
        let mut terms: Vec<(Node, bool)> = written.into_iter().map(|t| (t, false)).collect();
        let mut own: Vec<String> = Vec::new();
        let mut depth = 0;
        while let Some((t, read_through)) = terms.pop() {
            if !thread.uses(t) {
                continue;
            }
            let value = (t.kind_id() == k.identifier && depth < 8)
                .then(|| thread.resolve(t))
                .flatten()
                .and_then(|i| thread.sole_value[i].clone())
                .and_then(|r| body.descendant_for_byte_range(r.start, r.end));
            match value {
                Some(v) => {
                    depth += 1;
                    let mut inner = Vec::new();
                    additive_terms(v, &mut inner);
                    terms.extend(inner.into_iter().map(|t| (t, true)));
                }
                // A term read through a name's value holds that value only while the names
                // in it keep theirs: each must be written once too (else it matches nothing).
                None if !read_through || thread.written_once(t) => {
                    own.push(text(t, src).split_whitespace().collect())
                }
                None => own.push(format!("unsettled {}", t.start_byte())),
            }
        }
        own.sort();
        own
    };
    // The body's own writes of the variable would count its rounds another way.
    let writes_var = l.child_by_field_id(f.body).is_some_and(|b| {
        let mut found = false;
        lang::visit(b, |d| {
            if d.kind_id() == k.assignment_expression || d.kind_id() == k.update_expression {
                let target = d
                    .child_by_field_id(f.left)
                    .or_else(|| d.child_by_field_id(f.argument));
                found |= target.is_some_and(|t| text(t, src) == var);
            }
            !found
        });
        found
    });
    if writes_var {
        return false;
    }
    // A block-stride loop over a bound padded to a whole number of the block's width (`for
    // (int i = threadIdx.x; i < padded; i += blockDim.x)`, `padded` a multiple of
    // `blockDim.x`): every thread of the block, its index below that width, runs `padded /
    // blockDim.x` rounds, as code that calls a block-wide scan in the loop needs.
    let var_below_bound = match op {
        "<" => text(left, src) == var,
        ">" => text(right, src) == var,
        _ => false,
    };
    let block_step = l.child_by_field_id(f.update).is_some_and(|u| {
        u.kind_id() == k.assignment_expression
            && u.child_by_field_id(f.operator)
                .is_some_and(|o| text(o, src) == "+=")
            && u.child_by_field_id(f.left).map(|v| text(v, src)) == Some(var)
            && u.child_by_field_id(f.right)
                .is_some_and(|v| block_width(text(lang::strip_parens(v), src)))
    });
    let padded = var_below_bound
        && block_step
        && thread.x_index_value(start)
        && thread.block_multiple_value(bound);
    padded || thread_terms(start) == thread_terms(bound)
}

/// The operands of `e`'s sums (`a + (b + c)`: `a`, `b`, `c`).
fn additive_terms<'t>(e: Node<'t>, out: &mut Vec<Node<'t>>) {
    let f = lang::fields();
    let plus = e
        .child_by_field_id(f.operator)
        .is_some_and(|o| o.kind() == "+");
    match e.kind() {
        "parenthesized_expression" => match e.named_child(0) {
            Some(inner) => additive_terms(inner, out),
            None => out.push(e),
        },
        "binary_expression" if plus => {
            for side in [f.left, f.right] {
                if let Some(s) = e.child_by_field_id(side) {
                    additive_terms(s, out);
                }
            }
        }
        _ => out.push(e),
    }
}

/// Whether `n` runs under an `if`, `?:`, `switch` or `&&`/`||` between it and `stop` whose
/// condition satisfies `uses_thread`.
fn under_condition<'t>(
    n: Node<'t>,
    stop: Node<'t>,
    uses_thread: &dyn Fn(Node) -> bool,
    parent: &dyn Fn(Node<'t>) -> Option<Node<'t>>,
) -> bool {
    guards(n, |a| a.id() == stop.id(), parent)
        .into_iter()
        .any(|g| matches!(g, Guard::Condition(c) if uses_thread(c)))
}

/// The loop or `switch` that a `break` at `n` leaves.
fn innermost_breakable<'t>(
    n: Node<'t>,
    parent: &dyn Fn(Node<'t>) -> Option<Node<'t>>,
) -> Option<Node<'t>> {
    let mut at = n;
    while let Some(p) = parent(at) {
        if is_loop(p) || p.kind_id() == kinds().switch_statement {
            return Some(p);
        }
        at = p;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::flow::descendants;

    #[test]
    fn linear_thread_indices() {
        for t in [
            "threadIdx.x",
            "threadIdx.y * blockDim.x + threadIdx.x",
            "threadIdx.x + blockDim.x * threadIdx.y",
            "(threadIdx.y * blockDim.x) + threadIdx.x",
            "WARP_SIZE*threadIdx.y + threadIdx.x",
            "threadIdx.x + threadIdx.y * 64",
        ] {
            assert!(linear_thread_index(t), "{t}");
        }
        for t in [
            "threadIdx.y",
            "threadIdx.x + blockIdx.x * blockDim.x",
            "threadIdx.y * blockDim.y + threadIdx.x",
            "threadIdx.x >> 1",
            "16 * threadIdx.y + threadIdx.x",
            "0 * threadIdx.y + threadIdx.x",
        ] {
            assert!(!linear_thread_index(t), "{t}");
        }
    }

    /// The kernels' loops that `uneven_loops` finds, by their first line.
    fn uneven(src: &str) -> Vec<String> {
        let parsed = crate::parse::parse(src);
        let nodes = descendants(parsed.tree.root_node());
        let loops: Vec<Node> = nodes.iter().copied().filter(|n| is_loop(*n)).collect();
        Rounds::new(&nodes, src)
            .uneven_loops(&loops)
            .into_iter()
            .map(|l| text(l, src).lines().next().unwrap_or("").trim().to_string())
            .collect()
    }

    /// The loops and returns that differ between the lanes of a warp, by their first line.
    fn lane_dependent(src: &str) -> (Vec<String>, Vec<String>) {
        let parsed = crate::parse::parse(src);
        let nodes = descendants(parsed.tree.root_node());
        let body = nodes
            .iter()
            .copied()
            .find(|n| n.kind() == "compound_statement")
            .expect("a body");
        let nodes = descendants(body);
        let loops: Vec<Node> = nodes.iter().copied().filter(|n| is_loop(*n)).collect();
        let returns: Vec<Node> = nodes
            .iter()
            .copied()
            .filter(|n| n.kind() == "return_statement")
            .collect();
        let lanes = Rounds::new(&nodes, src).lane_dependent(&loops, &returns, &[]);
        let (loops, returns) = (lanes.loops, lanes.returns);
        let first = |l: Node| text(l, src).lines().next().unwrap_or("").trim().to_string();
        let line = |r: Node| {
            let start = src[..r.start_byte()].rfind('\n').map_or(0, |i| i + 1);
            src[start..].lines().next().unwrap_or("").trim().to_string()
        };
        (
            loops.into_iter().map(first).collect(),
            returns.into_iter().map(line).collect(),
        )
    }

    #[test]
    fn lanes_differ_by_threadidx_x_but_not_by_warp() {
        let src = "__global__ void k(int* a, int n) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, w2 = threadIdx.x >> 5;
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = gid / WARP_SIZE;
  for (int r = threadIdx.x; r < blockDim.z; r += 4) { a[r] = 0; }
  for (int r = lane; r < n; r += 32) { a[r] = 0; }
  for (int r = warp; r < n; r += 8) { a[r] = 0; }
  for (int r = threadIdx.y; r < n; r += 8) { a[r] = 0; }
  for (int r = row; r < n; r += gridDim.x) { a[r] = 0; }
  for (int r = 0; r < n; ++r) { if (w2 > r) break; }
  for (int r = 0; r < n; ++r) { if (gid > r) break; }
  if (row >= n) return;
  if (threadIdx.z > 0) return;
  if (gid >= n) { return; }
  return;
}
";
        let (loops, returns) = lane_dependent(src);
        assert_eq!(
            loops,
            [
                "for (int r = threadIdx.x; r < blockDim.z; r += 4) { a[r] = 0; }",
                "for (int r = lane; r < n; r += 32) { a[r] = 0; }",
                "for (int r = 0; r < n; ++r) { if (gid > r) break; }",
            ]
        );
        assert_eq!(returns, ["if (gid >= n) { return; }"]);
    }

    #[test]
    fn bounds_asserted_multiples_of_a_warp_are_at_its_edge() {
        let src = "template <int D, int E, int F, int H> __global__ void k(int* a) {
  static_assert(D % (2*WARP_SIZE) == 0, \"D\");
  if constexpr (E > 64) { static_assert(H % 32 == 0, \"H\"); }
  static_assert(0 == (E % 64), \"E\");
  static_assert(F % 16 == 0, \"F\");
  const int tid = WARP_SIZE*threadIdx.y + threadIdx.x;
  const int t16 = 16*threadIdx.y + threadIdx.x;
  if (tid >= D) return;
  if (tid < E) return;
  if (tid > D) return;
  if (tid >= F) return;
  if (t16 >= D) return;
  if (tid >= G) return;
  if (tid >= H) return;
  { const int D = a[0]; if (tid >= D) return; }
}
";
        let (_, returns) = lane_dependent(src);
        assert_eq!(
            returns,
            [
                "if (tid > D) return;",
                "if (tid >= F) return;",
                "if (t16 >= D) return;",
                "if (tid >= G) return;",
                "if (tid >= H) return;",
                "{ const int D = a[0]; if (tid >= D) return; }",
            ]
        );
    }

    #[test]
    fn block_strides_to_a_warp_edge_keep_lanes_together() {
        let src = "template <int D> __global__ void k(float* a, int n, int p) {
  static_assert(D % 64 == 0, \"D\");
  const int tid = threadIdx.x;
  const int limit = roundDown(n, kWarpSize);
  const int masked = n & ~(WARP_SIZE - 1);
  int i = threadIdx.x;
  for (; i < limit; i += blockDim.x) { a[i] = 0; }
  for (int j = tid; j < masked; j += blockDim.x) { a[j] = 0; }
  for (int j = tid; j < (n / 32) * 32; j += 2 * blockDim.x) { a[j] = 0; }
  for (int j = tid; j < n - n % C10_WARP_SIZE; j += 64) { a[j] = 0; }
  for (int j = tid; j < (n & -32); j += D) { a[j] = 0; }
  for (int j = tid; j < utils::round_down(n, (int)32); j += blockDim.x) { a[j] = 0; }
  for (int j = tid; j < n; j += blockDim.x) { a[j] = 0; }
  for (int j = tid; j < roundDown(n, 16); j += blockDim.x) { a[j] = 0; }
  for (int j = tid; j < roundDown(n, HALF_WARP_SIZE); j += blockDim.x) { a[j] = 0; }
  for (int j = tid; j < limit; j += blockDim.x / 2) { a[j] = 0; }
  for (int j = tid; j < limit; j++) { a[j] = 0; }
  for (int j = tid; j < limit; j += blockDim.x) { j += 1; a[j] = 0; }
  for (int j = tid; j < (n & ~15); j += blockDim.x) { a[j] = 0; }
  for (int j = tid + p; j < limit; j += blockDim.x) { a[j] = 0; }
  int h = threadIdx.x;
  if (tid < 5) { for (; h < limit; h += blockDim.x) { a[h] = 0; } }
  for (; h < limit; h += blockDim.x) { a[h] = 0; }
  int bumped = roundDown(n, 32);
  bumped += 3;
  for (int j = tid; j < bumped; j += blockDim.x) { a[j] = 0; }
}
";
        let (loops, _) = lane_dependent(src);
        assert_eq!(
            loops,
            [
                "for (int j = tid; j < n; j += blockDim.x) { a[j] = 0; }",
                "for (int j = tid; j < roundDown(n, 16); j += blockDim.x) { a[j] = 0; }",
                "for (int j = tid; j < roundDown(n, HALF_WARP_SIZE); j += blockDim.x) { a[j] = 0; }",
                "for (int j = tid; j < limit; j += blockDim.x / 2) { a[j] = 0; }",
                "for (int j = tid; j < limit; j++) { a[j] = 0; }",
                "for (int j = tid; j < limit; j += blockDim.x) { j += 1; a[j] = 0; }",
                "for (int j = tid; j < (n & ~15); j += blockDim.x) { a[j] = 0; }",
                "for (int j = tid + p; j < limit; j += blockDim.x) { a[j] = 0; }",
                "for (; h < limit; h += blockDim.x) { a[h] = 0; }",
                "for (; h < limit; h += blockDim.x) { a[h] = 0; }",
                "for (int j = tid; j < bumped; j += blockDim.x) { a[j] = 0; }",
            ]
        );
    }

    #[test]
    fn lane_strides_to_a_warp_edge_keep_lanes_together() {
        // Each warp's lanes step through a row 32 at a time, up to the row's width rounded up
        // to a warp (RAFT's `alignTo`); a lane index within less than a warp, a mask that
        // keeps no whole warp, or an unrounded bound leave lanes behind.
        let src = "__global__ void k(float* a, int n) {
  const int padded = alignTo(n, WarpSize);
  int c = threadIdx.x % WarpSize;
  for (; c < padded; c += WarpSize) { a[c] = 0; }
  for (int j = threadIdx.x & 31; j < padded; j += 32) { a[j] = 0; }
  for (int j = threadIdx.x & (WARP_SIZE - 1); j < (n + 31) / 32 * 32; j += 64) { a[j] = 0; }
  for (int j = threadIdx.x % 64; j < raft::roundUp(n, 64); j += 64) { a[j] = 0; }
  for (int j = threadIdx.x % 16; j < padded; j += 32) { a[j] = 0; }
  for (int j = threadIdx.x & 15; j < padded; j += 32) { a[j] = 0; }
  for (int j = threadIdx.x % 32; j < n; j += 32) { a[j] = 0; }
  for (int j = threadIdx.x % 32; j < roundUp(n, 16); j += 32) { a[j] = 0; }
}
";
        let (loops, _) = lane_dependent(src);
        assert_eq!(
            loops,
            [
                "for (int j = threadIdx.x % 16; j < padded; j += 32) { a[j] = 0; }",
                "for (int j = threadIdx.x & 15; j < padded; j += 32) { a[j] = 0; }",
                "for (int j = threadIdx.x % 32; j < n; j += 32) { a[j] = 0; }",
                "for (int j = threadIdx.x % 32; j < roundUp(n, 16); j += 32) { a[j] = 0; }",
            ]
        );
    }

    #[test]
    fn warp_width_names() {
        for t in [
            "warpSize",
            "WARP_SIZE",
            "kWarpSize",
            "C10_WARP_SIZE",
            "warp_sz",
        ] {
            assert!(warp_width_name(t), "{t}");
        }
        for t in [
            "HALF_WARP_SIZE",
            "kHalfWarpSize",
            "SUB_WARP_SIZE",
            "keyWarpSize",
            "warp",
        ] {
            assert!(!warp_width_name(t), "{t}");
        }
    }

    #[test]
    fn block_stride_loops_over_padded_bounds_are_even() {
        let src = "template <int TB>
__global__ void k(int* a, int n) {
  const int padded = blockDim.x * ((n + blockDim.x - 1) / blockDim.x);
  const int tid = threadIdx.x;
  for (int i = threadIdx.x; i < padded; i += blockDim.x) { __syncthreads(); }
  for (int i = tid; i < (n + blockDim.x - 1) / blockDim.x * blockDim.x; i += blockDim.x) { __syncthreads(); }
  for (int i = threadIdx.x; padded > i; i += blockDim.x) { __syncthreads(); }
  for (int i = threadIdx.x; i < padded; i += TB) { __syncthreads(); }
  for (int i = threadIdx.x; i <= padded; i += blockDim.x) { __syncthreads(); }
  for (int i = threadIdx.x; i < n; i += blockDim.x) { __syncthreads(); }
  for (int i = threadIdx.x; i < blockDim.x * (n + tid); i += blockDim.x) { __syncthreads(); }
  const int flat = threadIdx.y * blockDim.x + threadIdx.x;
  for (int i = flat; i < padded; i += blockDim.x) { __syncthreads(); }
  int grown = blockDim.x * n;
  grown += 1;
  for (int i = threadIdx.x; i < grown; i += blockDim.x) { __syncthreads(); }
  for (int i = threadIdx.x; i < padded; i += blockDim.x) { i += 1; __syncthreads(); }
}
";
        assert_eq!(
            uneven(src),
            [
                "for (int i = threadIdx.x; i < padded; i += TB) { __syncthreads(); }",
                "for (int i = threadIdx.x; i <= padded; i += blockDim.x) { __syncthreads(); }",
                "for (int i = threadIdx.x; i < n; i += blockDim.x) { __syncthreads(); }",
                "for (int i = threadIdx.x; i < blockDim.x * (n + tid); i += blockDim.x) { __syncthreads(); }",
                "for (int i = flat; i < padded; i += blockDim.x) { __syncthreads(); }",
                "for (int i = threadIdx.x; i < grown; i += blockDim.x) { __syncthreads(); }",
                "for (int i = threadIdx.x; i < padded; i += blockDim.x) { i += 1; __syncthreads(); }",
            ]
        );
    }

    #[test]
    fn bounds_read_through_names_written_once() {
        let src = "__global__ void k(int* a, int n) {
  int start = blockIdx.x * 256 + threadIdx.x;
  const int last = start + 256;
  for (int i = start; i < last; i += blockDim.x) { __syncthreads(); }
  int s2 = threadIdx.x;
  int l2 = s2 + 64;
  s2 = 2 * threadIdx.x;
  for (int i = s2; i < l2; i += 32) { __syncthreads(); }
  int l3 = start + 64;
  ++l3;
  for (int i = start; i < l3; i += 32) { __syncthreads(); }
  const int l4 = threadIdx.y + 64;
  for (int i = start; i < l4; i += 32) { __syncthreads(); }
}
";
        assert_eq!(
            uneven(src),
            [
                "for (int i = s2; i < l2; i += 32) { __syncthreads(); }",
                "for (int i = start; i < l3; i += 32) { __syncthreads(); }",
                "for (int i = start; i < l4; i += 32) { __syncthreads(); }",
            ]
        );
    }

    #[test]
    fn loops_bounded_by_the_thread_are_uneven() {
        let src = "__global__ void k(int* a, int n) {
  const int tid = threadIdx.x;
  for (int i = 0; i + tid < n; i += blockDim.x) { __syncthreads(); }
  for (int i = threadIdx.x; i < n; i += blockDim.x) { __syncthreads(); }
  for (int i = 0; i < n; ++i) { if (tid > i) break; __syncthreads(); }
  for (int i = 0; i < n; ++i) { __syncthreads(); }
  for (int i = 0; i < n; ++i) { for (int j = 0; j < 4; ++j) { if (tid > j) break; } __syncthreads(); }
  int left = a[tid];
  while (__syncthreads_or(left > 0)) { --left; }
  while (a[0] > 0) { __syncthreads(); }
  for (int t = 3 * n + tid; t < (4 + n) * n + tid; t += n) { __syncthreads(); }
  for (int t = tid; t < n + 2 * tid; t += n) { __syncthreads(); }
  int j = tid;
  for (j = 64; j > 0; j /= 2) { __syncthreads(); }
  for (j = 64; j > 0; j /= 2) { j -= tid; __syncthreads(); }
}
";
        assert_eq!(
            uneven(src),
            [
                "for (int i = 0; i + tid < n; i += blockDim.x) { __syncthreads(); }",
                "for (int i = threadIdx.x; i < n; i += blockDim.x) { __syncthreads(); }",
                "for (int i = 0; i < n; ++i) { if (tid > i) break; __syncthreads(); }",
                "for (int j = 0; j < 4; ++j) { if (tid > j) break; }",
                "for (int t = tid; t < n + 2 * tid; t += n) { __syncthreads(); }",
                "for (j = 64; j > 0; j /= 2) { j -= tid; __syncthreads(); }",
            ]
        );
    }
}
