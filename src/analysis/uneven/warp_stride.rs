//! Block-stride loops that keep a warp's lanes together (`Rounds::lane_dependent`):
//! `for (i = threadIdx.x; i < limit; i += blockDim.x)` where `limit` is a multiple of a warp's
//! width (`roundDown(n, kWarpSize)`, `n & ~31`, `(n / 32) * 32`). The linear index gives a
//! warp's lanes 32 consecutive values from a multiple of 32 (where a block's width is a whole
//! number of warps, as the lane rules assume of `threadIdx.x < 32`); a step of whole warps
//! keeps them so, and all 32 then pass a bound at a warp's edge in the same round: the lanes
//! leave the loop together. Warp-synchronous selections loop so over whole warps of elements
//! and leave the last part-warp to a branch after the loop.
//!
//! Like the rest of `uneven`, this reads the text: a bound the loop loads, or a call's result,
//! counts as one value for the warp's lanes.

use super::{
    lang, multiple_of_warp, operands, under_condition, warp_width_name, warps_wide, Threadness,
};
use crate::analysis::flow::is_loop;
use crate::lang::{kinds, text};
use tree_sitter::Node;

/// Per variable of a body (`Threadness`'s indices), at a warp's scale.
pub(super) struct WarpStrides {
    /// Whether every write keeps a warp's lanes at 32 consecutive values from a multiple of
    /// 32: the linear thread index, or `+=` a whole number of warps as the update of a `for`
    /// that no condition differing between lanes guards. Only variables the body declares:
    /// a parameter's first value is one for the block.
    aligned: Vec<bool>,
    /// Whether every write gives a multiple of a warp's width (`warp_aligned_value`), and the
    /// body declares the variable.
    bounds: Vec<bool>,
}

impl WarpStrides {
    /// `declared`: how many of `t`'s variables come from the body's declarations (the later
    /// ones are names it writes without declaring them).
    pub(super) fn new<'t>(
        t: &Threadness,
        nodes: &[Node<'t>],
        parent: &dyn Fn(Node<'t>) -> Option<Node<'t>>,
        declared: usize,
    ) -> WarpStrides {
        let k = kinds();
        let f = lang::fields();
        let n = t.variables.len();
        let mut aligned: Vec<bool> = (0..n).map(|i| i < declared).collect();
        let mut bounds = aligned.clone();
        let Some(&body) = nodes.first() else {
            return WarpStrides { aligned, bounds };
        };
        let src = t.src;
        for &w in nodes {
            let id = w.kind_id();
            // (the variable, `=`'s value or None for any other write, the write)
            let (target, value, stepped) = if id == k.init_declarator {
                match (
                    w.child_by_field_id(f.declarator),
                    w.child_by_field_id(f.value),
                ) {
                    (Some(d), Some(v)) => (d, Some(v), false),
                    _ => continue,
                }
            } else if id == k.assignment_expression {
                let Some(l) = w.child_by_field_id(f.left) else {
                    continue;
                };
                let op = w.child_by_field_id(f.operator).map_or("", |o| text(o, src));
                let r = w.child_by_field_id(f.right);
                match op {
                    "=" => (l, r, false),
                    "+=" => (l, r, true),
                    _ => (l, None, false),
                }
            } else if id == k.update_expression {
                match w.child_by_field_id(f.argument) {
                    Some(a) => (a, None, false),
                    None => continue,
                }
            } else {
                continue;
            };
            if target.kind_id() != k.identifier {
                continue;
            }
            let Some(i) = t.resolve(target) else {
                continue;
            };
            let keeps = match value {
                Some(v) if stepped => {
                    whole_warps(t, v) && steps_a_lane_even_for(t, w, body, parent)
                }
                Some(v) => lane_index(t, v),
                None => false,
            };
            aligned[i] &= keeps;
            bounds[i] &= !stepped && value.is_some_and(|v| warp_aligned_value(t, v, None));
        }
        WarpStrides { aligned, bounds }
    }

    /// Whether the `for` loop `l` keeps a warp's lanes together: `v < bound` (or `bound > v`)
    /// with `v` a variable whose every write keeps the lanes aligned (`aligned`), `bound` one
    /// value for the warp and a multiple of its width.
    pub(super) fn keeps_lanes_together(&self, t: &Threadness, l: Node) -> bool {
        let f = lang::fields();
        if l.kind_id() != kinds().for_statement {
            return false;
        }
        let Some(cond) = l.child_by_field_id(f.condition) else {
            return false;
        };
        let cond = lang::strip_parens(cond);
        let (var, bound) = match (operands(cond, "<", t.src), operands(cond, ">", t.src)) {
            (Some((v, b)), _) | (_, Some((b, v))) => (v, b),
            _ => return false,
        };
        let var = lang::strip_parens(var);
        var.kind_id() == kinds().identifier
            && t.resolve(var).is_some_and(|i| self.aligned[i])
            && warp_aligned_value(t, bound, Some(self))
    }
}

/// Whether `e` gives a warp's lanes 32 consecutive values from a multiple of 32: the thread's
/// linear index (`threadIdx.x` and its row-major forms, `linear_thread_index`, or a variable
/// whose every write is one), or its lane within a whole number of warps (`tid % 32`, `tid %
/// WarpSize`, `tid & 31`, `tid & (WARP_SIZE - 1)`), as lane-stride loops start (`for (c = tid %
/// 32; c < padded; c += 32)`).
fn lane_index(t: &Threadness, e: Node) -> bool {
    let e = strip_conversions(e, t.src);
    let src = t.src;
    if let Some((x, w)) = operands(e, "%", src) {
        return lane_index(t, x) && multiple_of_warp(strip_conversions(w, src), src);
    }
    if let Some((x, m)) = operands(e, "&", src) {
        return lane_index(t, x) && low_bits_kept(m, src);
    }
    super::linear_thread_index(text(e, src))
        || (e.kind_id() == kinds().identifier
            && t.resolve(e).is_some_and(|i| t.thread_index_copy[i]))
}

/// Whether the mask `m` keeps the low bits of a whole number of warps that is a power of two:
/// `31`, `63`, ..., or `W - 1` with `W` such.
fn low_bits_kept(m: Node, src: &str) -> bool {
    let m = strip_conversions(m, src);
    if let Some(n) = lang::integer_literal(text(m, src)) {
        return (n + 1) % 32 == 0 && (n + 1).is_power_of_two();
    }
    operands(m, "-", src).is_some_and(|(w, one)| {
        lang::integer_literal(text(one, src)) == Some(1)
            && multiple_of_warp(strip_conversions(w, src), src)
    })
}

/// Whether `e` is a step of whole warps, one for the warp's lanes: `blockDim.x` (a block's
/// width, a whole number of warps as the lane rules assume), a multiple of a warp's width
/// (`multiple_of_factor`), or a product with one of these.
fn whole_warps(t: &Threadness, e: Node) -> bool {
    let e = strip_conversions(e, t.src);
    if t.uses(e) {
        return false;
    }
    super::block_width(text(e, t.src))
        || multiple_of_factor(t, e)
        || operands(e, "*", t.src).is_some_and(|(a, b)| whole_warps(t, a) || whole_warps(t, b))
}

/// Whether the `+=` at `w` is the update of a `for` loop and runs as often in every lane: no
/// condition around it, and no other loop around it, differs between lanes.
fn steps_a_lane_even_for<'t>(
    t: &Threadness,
    w: Node<'t>,
    body: Node<'t>,
    parent: &dyn Fn(Node<'t>) -> Option<Node<'t>>,
) -> bool {
    let f = lang::fields();
    let Some(owner) = parent(w) else {
        return false;
    };
    let is_update = owner.kind_id() == kinds().for_statement
        && owner.child_by_field_id(f.update).map(|u| u.id()) == Some(w.id());
    if !is_update {
        return false;
    }
    let uses_lane = |c: Node| t.uses(c);
    if under_condition(owner, body, &uses_lane, parent) {
        return false;
    }
    let mut at = owner;
    while let Some(p) = parent(at) {
        if p.id() == body.id() {
            break;
        }
        let cond = p
            .child_by_field_id(f.condition)
            .or_else(|| p.child_by_field_id(f.right));
        if is_loop(p) && cond.is_none_or(|c| t.uses(c)) {
            return false;
        }
        at = p;
    }
    true
}

/// Whether `e` is one value for a warp's lanes and a multiple of a warp's width: a multiple by
/// its factors (`multiple_of_factor`), `x & ~(W - 1)` (or `~31`, `-32`), `x - x % W`,
/// `roundDown(x, W)` and its spellings (`round_down`, `align_down`), the same rounded up
/// (`roundUp`, `align_up`, RAFT's `alignTo`), sums and differences of
/// such, and, where `strides` is given, a variable the body declares and gives only such
/// values. `W`: a whole number of warps.
fn warp_aligned_value(t: &Threadness, e: Node, strides: Option<&WarpStrides>) -> bool {
    let e = strip_conversions(e, t.src);
    if t.uses(e) {
        return false;
    }
    let src = t.src;
    if e.kind_id() == kinds().identifier {
        if let Some(i) = t.resolve(e) {
            return strides.is_some_and(|s| s.bounds[i]);
        }
    }
    if multiple_of_factor(t, e) {
        return true;
    }
    if let Some((a, b)) = operands(e, "&", src) {
        return low_bits_cleared(b, src) || low_bits_cleared(a, src);
    }
    if let Some((a, b)) = operands(e, "-", src) {
        let remainder_of_a = operands(b, "%", src).is_some_and(|(x, w)| {
            text(x, src)
                .split_whitespace()
                .eq(text(a, src).split_whitespace())
                && multiple_of_warp(strip_conversions(w, src), src)
        });
        return remainder_of_a
            || (warp_aligned_value(t, a, strides) && warp_aligned_value(t, b, strides));
    }
    if let Some((a, b)) = operands(e, "+", src) {
        return warp_aligned_value(t, a, strides) && warp_aligned_value(t, b, strides);
    }
    if e.kind_id() == kinds().call_expression {
        let f = lang::fields();
        let callee = e.child_by_field_id(f.function).map_or("", |c| text(c, src));
        let name = callee.rsplit("::").next().unwrap_or("");
        let rounds_down = matches!(
            name.to_ascii_lowercase().replace('_', "").as_str(),
            "rounddown" | "aligndown" | "roundup" | "alignup" | "alignto"
        );
        let args: Vec<Node> = e
            .child_by_field_id(f.arguments)
            .map(|a| {
                let mut c = a.walk();
                a.named_children(&mut c).collect()
            })
            .unwrap_or_default();
        return rounds_down
            && args.len() == 2
            && multiple_of_warp(strip_conversions(args[1], src), src);
    }
    false
}

/// Whether `e` is a product with a factor that is a whole number of warps: a literal multiple
/// of 32 (0 too), a warp's width by name, a name the body asserts a multiple of one
/// (`static_assert`) and declares no variable of. `(n / 32) * 32` is one.
fn multiple_of_factor(t: &Threadness, e: Node) -> bool {
    let e = strip_conversions(e, t.src);
    let word = text(e, t.src);
    if lang::integer_literal(word).is_some_and(|n| n % 32 == 0) || warps_wide(word) {
        return true;
    }
    if e.kind_id() == kinds().identifier
        && t.resolve(e).is_none()
        && (t.warp_multiples.contains(word) || warp_width_name(word))
    {
        return true;
    }
    operands(e, "*", t.src)
        .is_some_and(|(a, b)| multiple_of_factor(t, a) || multiple_of_factor(t, b))
}

/// Whether the mask `m` clears a warp's low bits and keeps the rest: `~(W - 1)` with `W` a
/// whole number of warps that is a power of two, `~K` with `K + 1` such, or `-K` with `K`
/// such.
fn low_bits_cleared(m: Node, src: &str) -> bool {
    let m = lang::strip_parens(m);
    let power = |n: u64| n >= 32 && n.is_power_of_two();
    let number = |x: Node| lang::integer_literal(text(lang::strip_parens(x), src));
    // The grammar reads a signed literal (`-32`) as one number.
    if let Some(n) = text(m, src)
        .trim()
        .strip_prefix('-')
        .and_then(lang::integer_literal)
    {
        return power(n);
    }
    if m.kind() != "unary_expression" {
        return false;
    }
    let f = lang::fields();
    let op = m.child_by_field_id(f.operator).map_or("", |o| text(o, src));
    let Some(arg) = m.child_by_field_id(f.argument) else {
        return false;
    };
    match op {
        "~" => {
            if let Some(n) = number(arg) {
                return power(n + 1);
            }
            operands(arg, "-", src).is_some_and(|(w, one)| {
                number(one) == Some(1)
                    && (number(w).is_some_and(power) || warp_width_name(text(w, src).trim()))
            })
        }
        "-" => number(arg).is_some_and(power),
        _ => false,
    }
}

/// `e` without parentheses and conversions: `(T)x`, `static_cast<T>(x)`, `T(x)` of a scalar
/// type.
fn strip_conversions<'t>(e: Node<'t>, src: &str) -> Node<'t> {
    let f = lang::fields();
    let mut e = lang::strip_parens(e);
    loop {
        let inner = match e.kind() {
            "cast_expression" => e.child_by_field_id(f.value),
            "call_expression" => {
                let callee = e.child_by_field_id(f.function);
                let conversion = callee.is_some_and(|c| {
                    lang::is_named_cast(c, src) || lang::SCALAR_TYPEDEFS.contains(&text(c, src))
                });
                let args = e.child_by_field_id(f.arguments);
                match args {
                    Some(a) if conversion && a.named_child_count() == 1 => a.named_child(0),
                    _ => None,
                }
            }
            _ => None,
        };
        match inner {
            Some(i) => e = lang::strip_parens(i),
            None => return e,
        }
    }
}
