//! Loops that wait for other blocks (CP014): a loop that does nothing but read memory through
//! a `volatile` access or an atomic read, until another thread changes it. Across blocks this
//! is a software grid barrier (`atomicAdd(&count, 1); while (count < blocks);`) or a flag set
//! by another block. Persistent blocks run the original blocks one after another, so the block
//! waited for may not have started, and a waiting task never ends: the kernel could neither
//! finish nor yield. cupreempt cannot tell a wait for blocks that surely started (lower indices,
//! a look-back scan) or for threads of the same block from one that deadlocks, so the kernel
//! is left as written.
//!
//! A loop waits when its condition or body reads such memory (directly, or through a helper of
//! the file that does nothing but such a read) and the body does nothing else:
//! no store through a pointer, an index or a field, no counter (`++`, `+=`: a bounded or
//! progressing loop), no call but fences, sleeps and the reads themselves; its assignments
//! only take what such a read gives. A compare-and-swap loop that writes (a lock, a
//! floating-point `atomicAdd`) makes progress on its own or waits only for running threads.

use crate::diagnostics::{Code, Diagnostic};
use crate::lang::{self, fields, kinds};
use std::collections::BTreeSet;
use tree_sitter::Node;

/// Calls a waiting loop may make besides its reads.
const QUIET_CALLS: &[&str] = &[
    "__nanosleep",
    "__threadfence",
    "__threadfence_block",
    "__threadfence_system",
    "__syncwarp",
    "__builtin_expect",
];

/// Loads that bypass or refresh the cache: how code reads a flag another block writes.
const FRESH_LOADS: &[&str] = &[
    "__ldcv",
    "__ldcg",
    "__ldvolatile",
    "__ldlu",
    "atomic_load",
    "atomic_load_explicit",
    "__atomic_load_n",
    "__atomic_load",
];

/// The names the file declares `volatile` (variables, parameters, fields), by name.
pub fn volatile_names(root: Node, src: &str) -> BTreeSet<String> {
    let k = kinds();
    let mut names = BTreeSet::new();
    // A walk of the whole tree cost 73.6 M instructions on docs/benchmarks.md's input, a fifth
    // of its parse: not for a file that never says `volatile`.
    if !src.contains("volatile") {
        return names;
    }
    lang::visit(root, |n| {
        if n.kind_id() == k.type_qualifier && text(n, src) == "volatile" {
            if let Some(decl) = n.parent() {
                let mut c = decl.walk();
                for d in decl.children_by_field_name("declarator", &mut c) {
                    names.extend(innermost_name(d, src));
                }
            }
        }
        true
    });
    names
}

/// The identifier a declarator declares (`*p`, `p[4]`, `&r`, `p = x`).
fn innermost_name(mut d: Node, src: &str) -> Option<String> {
    let k = kinds();
    loop {
        if d.kind_id() == k.identifier || d.kind_id() == k.field_identifier {
            return Some(text(d, src).to_string());
        }
        d = d
            .child_by_field_id(fields().declarator)
            .or_else(|| d.named_child(0))?;
    }
}

/// What a loop's reads are recognized by: the file's `volatile` names and its helpers that do
/// nothing but such a read (`load_acquire(p)` around `ld.acquire` in inline PTX).
pub struct Reads {
    pub volatile: BTreeSet<String>,
    pub helpers: BTreeSet<String>,
}

impl Reads {
    /// `helpers`: the file's device helpers, by name and body.
    pub fn new<'t>(
        root: Node<'t>,
        src: &str,
        helpers: impl Iterator<Item = (&'t str, Node<'t>)> + Clone,
    ) -> Reads {
        let mut r = Reads {
            volatile: volatile_names(root, src),
            helpers: BTreeSet::new(),
        };
        // A helper that calls another read helper reads too: to a fixed point.
        loop {
            let found: BTreeSet<String> = helpers
                .clone()
                .filter(|(_, body)| only_reads(*body, src, &r))
                .map(|(name, _)| name.to_string())
                .collect();
            if found == r.helpers {
                return r;
            }
            r.helpers = found;
        }
    }
}

/// CP014 for each loop of `body` that waits for memory another thread writes.
pub fn waiting_loops(body: Node, src: &str, reads: &Reads) -> Vec<Diagnostic> {
    let k = kinds();
    let mut out = Vec::new();
    lang::visit(body, |n| {
        let id = n.kind_id();
        let counted = id == k.for_statement && n.child_by_field_name("update").is_some();
        let is_loop = id == k.while_statement || id == k.do_statement || id == k.for_statement;
        if !is_loop || counted || !only_reads(n, src, reads) {
            return true;
        }
        let head = n
            .child_by_field_id(fields().condition)
            .map_or(n.start_byte()..n.start_byte() + 2, |c| c.byte_range());
        out.push(
            Diagnostic::new(
                Code::WaitsForBlocks,
                "a loop waits for memory that another block or the host writes (a barrier or a flag across blocks): persistent blocks run the original blocks one after another, so the block waited for may not have started, and a waiting task can neither end nor yield",
            )
            .label(head, "this loop only reads until the value changes")
            .help("a wait for blocks of lower index only (a look-back scan), or for threads of the same block, cannot deadlock, but cupreempt cannot tell it from a grid barrier; the kernel is left as written"),
        );
        false // one diagnostic for a wait, not one per enclosing loop
    });
    out
}

/// Whether `l` (a loop, a helper's body) reads synchronizing memory and does nothing else.
fn only_reads(l: Node, src: &str, known: &Reads) -> bool {
    let volatile = &known.volatile;
    let k = kinds();
    let mut reads = false;
    let mut other = false;
    lang::visit(l, |n| {
        let id = n.kind_id();
        let volatile_read = (id == k.identifier && volatile.contains(text(n, src)))
            || (id == k.type_qualifier && text(n, src) == "volatile");
        if volatile_read {
            reads = true;
        } else if id == k.gnu_asm_expression {
            let t = text(n, src);
            if t.contains("ld.volatile") || t.contains("ld.acquire") || t.contains("ld.relaxed") {
                reads = true;
            } else {
                other = true;
            }
        } else if id == k.call_expression {
            match call_kind(n, src, &known.helpers) {
                CallKind::Read => reads = true,
                CallKind::Quiet => {}
                CallKind::Other => other = true,
            }
        } else if id == k.update_expression {
            other = true;
        } else if id == k.assignment_expression {
            let left = n.child_by_field_id(fields().left);
            let to_memory = left.is_some_and(|l| {
                let lk = l.kind_id();
                lk == k.subscript_expression
                    || lk == k.pointer_expression
                    || lk == k.field_expression
            });
            let operator = n
                .child_by_field_id(fields().operator)
                .map_or("=", |o| text(o, src));
            if to_memory || operator != "=" {
                other = true;
            }
        }
        true
    });
    reads && !other
}

enum CallKind {
    /// A read of memory another thread writes: an atomic that changes nothing, a fresh load.
    Read,
    /// A fence, a sleep: no progress of its own.
    Quiet,
    Other,
}

fn call_kind(call: Node, src: &str, read_helpers: &BTreeSet<String>) -> CallKind {
    let Some(callee) = call.child_by_field_id(fields().function) else {
        return CallKind::Other;
    };
    let name = text(callee, src);
    let name = name.rsplit("::").next().unwrap_or(name);
    // `atomicAdd_system`, `atomicCAS_block`: the same read at another scope.
    let name = name
        .strip_suffix("_system")
        .or_else(|| name.strip_suffix("_block"))
        .unwrap_or(name);
    let args: Vec<&str> = call
        .child_by_field_id(fields().arguments)
        .map(|a| {
            let mut c = a.walk();
            a.named_children(&mut c)
                .map(|x| text(x, src).trim())
                .collect()
        })
        .unwrap_or_default();
    let zero = |i: usize| args.get(i).is_some_and(|a| *a == "0" || *a == "0u");
    let read = match name {
        "atomicAdd" | "atomicOr" | "atomicXor" | "atomicSub" => zero(1),
        "atomicCAS" => args.len() == 3 && args[1] == args[2],
        n if FRESH_LOADS.contains(&n) || read_helpers.contains(n) => true,
        // `cuda::atomic_ref<int> r(x); while (r.load() < n);`
        "load" => callee.kind_id() == kinds().field_expression,
        _ => false,
    };
    if read {
        CallKind::Read
    } else if QUIET_CALLS.contains(&name) {
        CallKind::Quiet
    } else {
        CallKind::Other
    }
}

fn text<'a>(n: Node, src: &'a str) -> &'a str {
    &src[n.byte_range()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiting loops of the whole of `src`, its `__device__` functions counted as helpers.
    fn loops(src: &str) -> usize {
        let parsed = crate::parse::parse(src);
        let root = parsed.tree.root_node();
        let mut functions = Vec::new();
        crate::lang::visit(root, |n| {
            if n.kind_id() == kinds().function_definition {
                let name = n
                    .child_by_field_id(fields().declarator)
                    .and_then(|d| d.child_by_field_id(fields().declarator))
                    .map(|d| &src[d.byte_range()]);
                if let (Some(name), Some(body)) = (name, n.child_by_field_id(fields().body)) {
                    functions.push((name, body));
                }
            }
            true
        });
        let reads = Reads::new(root, src, functions.into_iter());
        waiting_loops(root, src, &reads).len()
    }

    #[test]
    fn a_grid_barrier_waits() {
        let src = "volatile __device__ int g_count;\n\
                   __device__ void grid_sync(int n) {\n\
                     if (threadIdx.x == 0) { atomicAdd((int*)&g_count, 1); while (g_count < n); }\n\
                     __syncthreads();\n}\n";
        assert_eq!(loops(src), 1);
        let cas = "__device__ int c;\n__device__ void s(int goal) {\n\
                   while (atomicCAS(&c, goal, goal) != goal) {}\n}\n";
        assert_eq!(
            loops(cas),
            1,
            "a compare-and-swap that changes nothing is a read"
        );
        let flag = "__global__ void k(volatile int* flags, int* out) {\n\
                    int f;\n do { f = flags[blockIdx.x - 1]; __nanosleep(100); } while (f == 0);\n\
                    out[blockIdx.x] = f;\n}\n";
        assert_eq!(loops(flag), 1, "a look-back wait is refused too");
        let cast = "__global__ void k(int* flag) { while (*(volatile int*)flag == 0) { } }\n";
        assert_eq!(loops(cast), 1);
        let system = "__global__ void k(int* flag) { while (atomicAdd_system(flag, 0) == 0); }\n";
        assert_eq!(
            loops(system),
            1,
            "an atomic of another scope reads the same"
        );
        let builtin =
            "__global__ void k(int* f) { while (__atomic_load_n(f, __ATOMIC_ACQUIRE) == 0) {} }\n";
        assert_eq!(loops(builtin), 1);
        let helper = "__device__ int load_acquire(const int* p) {\n\
                      int v; asm volatile(\"ld.acquire.gpu.b32 %0, [%1];\" : \"=r\"(v) : \"l\"(p)); return v;\n}\n\
                      __global__ void k(int* f) { while (load_acquire(f) == 0); }\n";
        assert_eq!(loops(helper), 1, "a helper that only reads is a read");
    }

    #[test]
    fn loops_that_progress_or_write_do_not_wait() {
        let lock = "__device__ int lock;\n__device__ void acquire() { while (atomicCAS(&lock, 0, 1) != 0); }\n";
        assert_eq!(loops(lock), 0, "a lock's holder is running");
        let add = "__device__ double add(double* a, double v) {\n\
                   unsigned long long* p = (unsigned long long*)a; unsigned long long old = *p, assumed;\n\
                   do { assumed = old; old = atomicCAS(p, assumed, __double_as_longlong(v + __longlong_as_double(assumed))); } while (assumed != old);\n\
                   return __longlong_as_double(old);\n}\n";
        assert_eq!(
            loops(add),
            0,
            "a floating-point atomicAdd retries only on contention"
        );
        let counted = "__global__ void k(volatile float* s, float* out, int n) {\n\
                       float acc = 0; for (int i = 0; i < n; i++) acc += s[i];\n\
                       int j = 0; while (j < n) { acc += s[j]; j++; }\n out[0] = acc;\n}\n";
        assert_eq!(
            loops(counted),
            0,
            "counted loops over volatile memory progress"
        );
        let bounded = "volatile __device__ int ready;\n__device__ void w() { int tries = 0; while (!ready && tries < 100) tries++; }\n";
        assert_eq!(loops(bounded), 0, "a bounded wait ends");
        let writes =
            "__global__ void k(volatile int* q, int* out) { while (q[0] == 0) { out[0] = 1; } }\n";
        assert_eq!(loops(writes), 0);
        let plain = "__global__ void k(int* p, int n) { int i = 0; while (p[i] != 0 && i < n) i = p[i]; }\n";
        assert_eq!(loops(plain), 0, "no volatile or atomic read");
    }
}
