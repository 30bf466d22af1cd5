//! Functions of the file whose results follow from their arguments and the block's built-ins.
//!
//! Real kernels compute their block's coordinates in a helper that writes them through
//! reference parameters (`get_block_addresses(start, size, dims, params, outer, start_idx)`, then
//! `if (outer.x >= dims.x) return;` before a block reduction). A call may write its arguments
//! with anything, so those were varying, and the return before the barrier made the kernel
//! refused. A helper that reads nothing but its parameters, its locals, the block's built-ins
//! and the file's constants, and calls nothing but pure functions and other such helpers, gives
//! every thread of a block the same results for the same arguments: its return value and what
//! it writes through a reference parameter are uniform where every argument is.

use super::*;
use std::collections::HashSet;

/// The names of the file's functions that are uniform helpers. Every definition of the name
/// must be one (a call is matched by name, not by overload), and every declaration of it must
/// have a definition here with as many parameters (an overload only declared is defined in
/// another file, unseen); a function template's non-type parameters, a member's fields and
/// anything the file does not declare make it none. `included`: the included files' uniform
/// helpers that this file does not define, which a helper here may call.
pub(super) fn uniform_helpers(
    root: Node,
    src: &str,
    file: &Declared,
    macros: &BTreeMap<String, MacroFacts>,
    included: &BTreeSet<String>,
) -> HashSet<String> {
    let (definitions, declared): (Vec<_>, Vec<_>) = function_sites(root, src)
        .into_iter()
        .partition(|(_, n)| n.kind() == "function_definition");
    let mut calls: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut rejected: HashSet<String> = HashSet::new();
    for (name, declaration) in &declared {
        let count = parameter_count(*declaration);
        let defined = definitions
            .iter()
            .any(|(d, f)| d == name && count.is_some() && parameter_count(*f) == count);
        if !defined {
            rejected.insert(name.clone());
        }
    }
    for (name, function) in &definitions {
        match own_calls(*function, src, file, macros) {
            Some(called) => calls.entry(name.clone()).or_default().extend(called),
            None => {
                rejected.insert(name.clone());
            }
        }
    }
    let mut helpers: HashSet<String> = calls
        .keys()
        .filter(|n| !rejected.contains(*n))
        .cloned()
        .collect();
    // A helper that calls a function which is none is none (to a fixed point).
    loop {
        let before = helpers.len();
        let drop: Vec<String> = helpers
            .iter()
            .filter(|h| {
                calls[*h].iter().any(|c| {
                    !helpers.contains(c)
                        && !included.contains(c)
                        && !lang::is_pure_function(c.as_str())
                        && !lang::UNIFORM_FUNCTIONS.contains(&c.as_str())
                })
            })
            .cloned()
            .collect();
        for d in drop {
            helpers.remove(&d);
        }
        if helpers.len() == before {
            return helpers;
        }
    }
}

/// The name of a parameter that is one pointer level to non-`const` data, nothing `volatile`
/// (`int* row`), else None.
fn out_pointer(param: Node, declarator: Node, src: &str) -> Option<String> {
    if has_const(param, src) || text(param, src).contains("volatile") {
        return None;
    }
    let mut c = declarator.walk();
    if declarator
        .children(&mut c)
        .any(|q| q.kind_id() == kinds().type_qualifier)
    {
        return None; // `int* const p`, `int* __restrict__ p`: kept simple
    }
    one_pointer_level(declarator, false).map(|i| text(i, src).to_string())
}

/// How many parameters a definition or declaration of a function lists (None: it has no
/// parameter list, or a pack or `...` that matches any count).
fn parameter_count(n: Node) -> Option<usize> {
    let list = function_declarator(n)?.child_by_field_id(crate::lang::fields().parameters)?;
    let mut c = list.walk();
    let params: Vec<Node> = list
        .named_children(&mut c)
        .filter(|p| p.kind() != "comment")
        .collect();
    params
        .iter()
        .all(|p| {
            p.kind() == "parameter_declaration" || p.kind() == "optional_parameter_declaration"
        })
        .then_some(params.len())
}

/// The names a definition calls, if its body keeps to the rules (module comment); None if it
/// does not.
fn own_calls(
    function: Node,
    src: &str,
    file: &Declared,
    macros: &BTreeMap<String, MacroFacts>,
) -> Option<BTreeSet<String>> {
    let k = kinds();
    let f = crate::lang::fields();
    let body = function.child_by_field_id(f.body)?;
    // Parameters, by value or by reference (the call site's arguments decide their values),
    // and C's out-parameters: one pointer level to non-`const`, only ever written through
    // (`*row = r;`), which a caller passes as `&local`.
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut out_pointers: BTreeSet<String> = BTreeSet::new();
    if let Some(list) =
        function_declarator(function).and_then(|d| d.child_by_field_id(f.parameters))
    {
        let mut c = list.walk();
        for p in list.named_children(&mut c) {
            match p.kind() {
                "comment" => {}
                "parameter_declaration" => {
                    if let Some(d) = p.child_by_field_id(f.declarator) {
                        match out_pointer(p, d, src) {
                            Some(name) => {
                                out_pointers.insert(name);
                            }
                            None => names.extend(declared_names(d, src)),
                        }
                    }
                }
                _ => return None, // a pack, a default argument, `...`: not followed
            }
        }
    }
    // Locals, and which of them are arrays of the helper's own (a pointer local could point
    // anywhere, but reading through it is refused).
    let mut arrays: BTreeSet<String> = BTreeSet::new();
    let mut ok = true;
    lang::visit(body, |n| {
        if n.kind_id() == k.declaration {
            // Storage beyond one call (`static`, `extern`, a CUDA memory space) may hold
            // another thread's writes.
            ok &= !declare(n, src, false, &mut Declared::default());
            for d in lang::declarators(n) {
                if let Some(name) = lang::declarator_name(d) {
                    names.insert(text(name, src).to_string());
                }
                if contains_kind(d, k.array_declarator) {
                    arrays.extend(declared_names(d, src));
                }
            }
        }
        ok
    });
    let mut called = BTreeSet::new();
    // A local of the name hides the out-parameter: the rules would not tell them apart.
    if out_pointers.iter().any(|p| names.contains(p)) {
        return None;
    }
    let rules = Rules {
        src,
        names: &names,
        arrays: &arrays,
        out_pointers: &out_pointers,
        file,
        macros,
    };
    (ok && rules.allowed(body, &mut called)).then_some(called)
}

/// What a uniform helper's body may hold (module comment), given its own names.
struct Rules<'a> {
    src: &'a str,
    /// Its parameters and locals.
    names: &'a BTreeSet<String>,
    /// Its local arrays, which it may index.
    arrays: &'a BTreeSet<String>,
    /// Its out-parameters (`out_pointer`): only `*p = value;` may name them.
    out_pointers: &'a BTreeSet<String>,
    file: &'a Declared,
    macros: &'a BTreeMap<String, MacroFacts>,
}

impl Rules<'_> {
    /// Whether `n` keeps to the rules; the functions it calls go to `called`.
    fn allowed(&self, n: Node, called: &mut BTreeSet<String>) -> bool {
        let k = kinds();
        let f = crate::lang::fields();
        let src = self.src;
        let mut ok = true;
        lang::visit(n, |x| {
            if !ok {
                return false;
            }
            let id = x.kind_id();
            let operator = || x.child_by_field_id(f.operator).map(|o| text(o, src));
            if id == k.identifier {
                ok &= self.name_allowed(text(x, src), 0);
                return false;
            }
            if id == k.call_expression {
                let name = x
                    .child_by_field_id(f.function)
                    .and_then(|c| unqualified_callee(c, src));
                ok &= match name {
                    // A variable (a functor) is no function of the file.
                    Some(name) if self.names.contains(name) => false,
                    Some(name) if self.macros.contains_key(name) => {
                        self.function_macro_allowed(name)
                    }
                    Some(name) => {
                        called.insert(name.to_string());
                        true
                    }
                    None => false,
                };
                // The arguments, not the callee's name, are values to check.
                if let Some(args) = x.child_by_field_id(f.arguments) {
                    ok &= self.allowed(args, called);
                }
                return false;
            }
            if id == k.assignment_expression && operator() == Some("=") {
                let target = x.child_by_field_id(f.left).map(crate::lang::strip_parens);
                let through_out_pointer = target.is_some_and(|t| {
                    t.kind_id() == k.pointer_expression
                        && t.child_by_field_id(f.operator).map(|o| text(o, src)) == Some("*")
                        && t.child_by_field_id(f.argument)
                            .map(crate::lang::strip_parens)
                            .is_some_and(|p| {
                                p.kind_id() == k.identifier
                                    && self.out_pointers.contains(text(p, src))
                            })
                });
                if through_out_pointer {
                    ok &= x
                        .child_by_field_id(f.right)
                        .is_some_and(|v| self.allowed(v, called));
                    return false;
                }
            }
            if id == k.subscript_expression {
                // A load from memory, unless from the helper's own array.
                ok &= x.child_by_field_id(f.argument).is_some_and(|b| {
                    b.kind_id() == k.identifier && self.arrays.contains(text(b, src))
                });
                return ok;
            }
            if id == k.field_expression {
                // `s.x`: the object's value; the field's name is no variable. `p->x` loads.
                ok &= operator() != Some("->")
                    && x.child_by_field_id(f.argument)
                        .is_some_and(|object| self.allowed(object, called));
                return false;
            }
            if id == k.pointer_expression || id == k.gnu_asm_expression || id == k.lambda_expression
            {
                ok = false;
                return false;
            }
            match x.kind() {
                "this"
                | "new_expression"
                | "delete_expression"
                | "throw_statement"
                | "qualified_identifier"
                | "co_await_expression" => {
                    ok = false;
                    false
                }
                // Not evaluated; types and fields name no value.
                "sizeof_expression" | "alignof_expression" | "type_identifier"
                | "field_identifier" => false,
                _ => true,
            }
        });
        ok
    }

    /// A name a uniform helper may read: its own, a built-in with one value per block, a
    /// constant of the file or a standard header, or an object-like macro that expands to such
    /// names only.
    fn name_allowed(&self, name: &str, depth: usize) -> bool {
        if lang::THREAD_VARYING.contains(&name) || depth > 16 {
            return false;
        }
        if let Some(m) = self.macros.get(name) {
            return self.macro_text_allowed(name, m, &[], depth);
        }
        self.names.contains(name)
            || lang::UNIFORM_BUILTINS.contains(&name)
            || lang::STANDARD_CONSTANTS.contains(&name)
            || lang::valueless_word(name)
            || self.file.uniform.contains(name) && !self.file.other.contains(name)
    }

    /// A use of function-like macro `name` (as a call) whose replacement text a uniform helper
    /// may contain; the arguments are checked at the use. One whose parameters are not known
    /// is refused.
    fn function_macro_allowed(&self, name: &str) -> bool {
        self.macros.get(name).is_some_and(|m| {
            m.params
                .as_ref()
                .is_some_and(|params| self.macro_text_allowed(name, m, params, 0))
        })
    }

    /// Whether macro `name`'s text reads nothing but `params` and names `name_allowed`
    /// accepts, and calls, loads, synchronizes and returns nothing. An object-like macro
    /// named alone (no `params`) whose text names parameters of its own is refused with them.
    fn macro_text_allowed(
        &self,
        name: &str,
        m: &MacroFacts,
        params: &[String],
        depth: usize,
    ) -> bool {
        !m.thread_varying
            && !m.redefined
            && !m.barrier
            && !m.returns
            && !m.shared
            && m.calls
                .iter()
                .all(|c| lang::UNEVALUATED_OPERATORS.contains(&c.as_str()))
            && !reads_memory(&m.text)
            && macro_value_names(&m.text).into_iter().all(|i| {
                params.iter().any(|p| p == i)
                    || i != name && (lang::valueless_word(i) || self.name_allowed(i, depth + 1))
            })
    }
}

/// The block reductions, whose value is the same in every thread of the block.
pub(super) const BLOCK_VOTES: &[&str] = &[
    "__syncthreads_count",
    "__syncthreads_and",
    "__syncthreads_or",
];

/// The names of the file's functions that return a block reduction's value, once, at their end
/// (`return __syncthreads_count(p ? 1 : 0);`, gsplat's `cta_sync_count`): their value is the
/// same in every thread of the block, whatever the arguments. Every definition of the name
/// must be one.
pub(super) fn vote_helpers(root: Node, src: &str) -> HashSet<String> {
    let k = kinds();
    let f = crate::lang::fields();
    let mut votes = HashSet::new();
    let mut others = HashSet::new();
    for (name, n) in function_sites(root, src) {
        if n.kind() != "function_definition" {
            continue;
        }
        let returns_vote = n
            .child_by_field_id(f.body)
            .and_then(crate::analysis::flow::only_final_return_value)
            .filter(|v| v.kind_id() == k.call_expression)
            .and_then(|v| v.child_by_field_id(f.function))
            .is_some_and(|callee| BLOCK_VOTES.contains(&text(callee, src)));
        if returns_vote {
            votes.insert(name);
        } else {
            others.insert(name);
        }
    }
    votes.retain(|n| !others.contains(n));
    votes
}
