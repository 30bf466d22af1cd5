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
/// must be one (a call is matched by name, not by overload); a function template's non-type
/// parameters, a member's fields and anything the file does not declare make it none.
pub(super) fn uniform_helpers(
    root: Node,
    src: &str,
    file: &Declared,
    macros: &BTreeMap<String, MacroFacts>,
) -> HashSet<String> {
    let mut definitions: Vec<(String, Node)> = Vec::new();
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        let kind = n.kind();
        if kind == "function_definition" {
            if let Some(name) = function_name(n, src) {
                definitions.push((name, n));
            }
            continue;
        }
        if crate::lang::scope_container(kind, false) {
            let mut c = n.walk();
            stack.extend(n.children(&mut c));
        }
    }
    let mut calls: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut rejected: HashSet<String> = HashSet::new();
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
                        && !lang::PURE_FUNCTIONS.contains(&c.as_str())
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

/// A definition's unqualified name.
fn function_name(function: Node, src: &str) -> Option<String> {
    let f = crate::lang::fields();
    let mut found = None;
    lang::visit(function.child_by_field_id(f.declarator)?, |x| {
        if found.is_none() && x.kind_id() == kinds().function_declarator {
            found = x.child_by_field_id(f.declarator);
        }
        found.is_none()
    });
    let name = text(found?, src);
    Some(name.rsplit("::").next().unwrap_or(name).trim().to_string())
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
    let declarator = function.child_by_field_id(f.declarator)?;
    // Parameters, by value or by reference (the call site's arguments decide their values).
    let mut names: BTreeSet<String> = BTreeSet::new();
    if let Some(list) =
        lang_function_declarator(declarator).and_then(|d| d.child_by_field_id(f.parameters))
    {
        let mut c = list.walk();
        for p in list.named_children(&mut c) {
            if p.kind() != "parameter_declaration" {
                if p.kind() == "comment" {
                    continue;
                }
                return None; // a pack, a default argument, `...`: not followed
            }
            if let Some(d) = p.child_by_field_id(f.declarator) {
                names.extend(declared_names(d, src));
            }
        }
    }
    // Locals: scalars and arrays of the helper's own (a pointer local could point anywhere,
    // but reading through it is refused below).
    let mut arrays: BTreeSet<String> = BTreeSet::new();
    let mut ok = true;
    lang::visit(body, |n| {
        if n.kind_id() == k.declaration {
            let t = text(n, src);
            if t.contains("__shared__") || t.contains("static") || t.contains("extern") {
                ok = false;
            }
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
    if !ok {
        return None;
    }
    let mut called = BTreeSet::new();
    lang::visit(body, |n| {
        if !ok {
            return false;
        }
        let id = n.kind_id();
        let operator = || n.child_by_field_id(f.operator).map(|o| text(o, src));
        if id == k.call_expression {
            let callee = n.child_by_field_id(f.function);
            let name = match callee.map(|c| (c.kind(), c)) {
                Some(("identifier", c)) => Some(text(c, src)),
                Some(("template_function", c)) => c.child_by_field_id(f.name).map(|x| text(x, src)),
                _ => None,
            };
            match name {
                // A function-like macro of the file whose text keeps to the rules.
                Some(name) if !names.contains(name) && macros.contains_key(name) => {
                    ok &= function_macro_allowed(name, &names, file, macros);
                    if let Some(args) = n.child_by_field_id(f.arguments) {
                        let mut c = args.walk();
                        for a in args.named_children(&mut c) {
                            ok &=
                                values_allowed(a, src, &names, &arrays, file, macros, &mut called);
                        }
                    }
                }
                // A variable (a functor) is no function of the file.
                Some(name) if !names.contains(name) => {
                    called.insert(name.to_string());
                    // The arguments, not the callee's name, are values to check.
                    if let Some(args) = n.child_by_field_id(f.arguments) {
                        let mut c = args.walk();
                        for a in args.named_children(&mut c) {
                            ok &=
                                values_allowed(a, src, &names, &arrays, file, macros, &mut called);
                        }
                    }
                }
                _ => ok = false,
            }
            return false;
        }
        if id == k.identifier {
            ok &= name_allowed(text(n, src), &names, file, macros);
            return false;
        }
        if id == k.subscript_expression {
            // A load from memory, unless from the helper's own array.
            let base = n.child_by_field_id(f.argument);
            ok &=
                base.is_some_and(|b| b.kind_id() == k.identifier && arrays.contains(text(b, src)));
            return ok;
        }
        if id == k.pointer_expression || (id == k.field_expression && operator() == Some("->")) {
            ok = false;
            return false;
        }
        if id == k.field_expression {
            // `s.x`: the object's value; the field's name is no variable.
            if let Some(object) = n.child_by_field_id(f.argument) {
                ok &= values_allowed(object, src, &names, &arrays, file, macros, &mut called);
            }
            return false;
        }
        if id == k.gnu_asm_expression || id == k.lambda_expression {
            ok = false;
            return false;
        }
        match n.kind() {
            "this"
            | "new_expression"
            | "delete_expression"
            | "throw_statement"
            | "qualified_identifier"
            | "co_await_expression" => {
                ok = false;
                false
            }
            "sizeof_expression" | "alignof_expression" => false,
            // Types, fields and labels name no value.
            "type_identifier"
            | "field_identifier"
            | "statement_identifier"
            | "namespace_identifier"
            | "primitive_type" => false,
            _ => true,
        }
    });
    ok.then_some(called)
}

/// `own_calls`' rules applied to one expression inside the body.
fn values_allowed(
    n: Node,
    src: &str,
    names: &BTreeSet<String>,
    arrays: &BTreeSet<String>,
    file: &Declared,
    macros: &BTreeMap<String, MacroFacts>,
    called: &mut BTreeSet<String>,
) -> bool {
    let k = kinds();
    let f = crate::lang::fields();
    let mut ok = true;
    lang::visit(n, |x| {
        if !ok {
            return false;
        }
        let id = x.kind_id();
        if id == k.identifier {
            ok &= name_allowed(text(x, src), names, file, macros);
            return false;
        }
        if id == k.call_expression {
            match x.child_by_field_id(f.function) {
                Some(c) if c.kind_id() == k.identifier => {
                    let name = text(c, src);
                    if names.contains(name) {
                        ok = false;
                        return false;
                    }
                    if macros.contains_key(name) {
                        ok &= function_macro_allowed(name, names, file, macros);
                    } else {
                        called.insert(name.to_string());
                    }
                    if let Some(args) = x.child_by_field_id(f.arguments) {
                        ok &= values_allowed(args, src, names, arrays, file, macros, called);
                    }
                }
                _ => ok = false,
            }
            return false;
        }
        if id == k.subscript_expression {
            let base = x.child_by_field_id(f.argument);
            ok &=
                base.is_some_and(|b| b.kind_id() == k.identifier && arrays.contains(text(b, src)));
            return ok;
        }
        if id == k.pointer_expression
            || id == k.gnu_asm_expression
            || id == k.lambda_expression
            || matches!(x.kind(), "this" | "qualified_identifier" | "new_expression")
        {
            ok = false;
            return false;
        }
        if id == k.field_expression {
            if x.child_by_field_id(f.operator)
                .is_some_and(|o| text(o, src) == "->")
            {
                ok = false;
                return false;
            }
            if let Some(object) = x.child_by_field_id(f.argument) {
                ok &= values_allowed(object, src, names, arrays, file, macros, called);
            }
            return false;
        }
        !matches!(
            x.kind(),
            "sizeof_expression" | "alignof_expression" | "type_identifier" | "field_identifier"
        )
    });
    ok
}

/// A name a uniform helper may read: its own, a built-in with one value per block, a constant
/// of the file or a standard header, or an object-like macro that expands to such names only.
fn name_allowed(
    name: &str,
    names: &BTreeSet<String>,
    file: &Declared,
    macros: &BTreeMap<String, MacroFacts>,
) -> bool {
    macro_allowed(name, names, file, macros, 0)
}

fn macro_allowed(
    name: &str,
    names: &BTreeSet<String>,
    file: &Declared,
    macros: &BTreeMap<String, MacroFacts>,
    depth: usize,
) -> bool {
    if lang::THREAD_VARYING.contains(&name) || depth > 16 {
        return false;
    }
    if let Some(m) = macros.get(name) {
        // Not a function-like macro's use (a call, refused above): its parameters are not
        // known here, so its text cannot be judged.
        return !m.thread_varying
            && !m.redefined
            && !m.barrier
            && !m.returns
            && !m.shared
            && m.calls
                .iter()
                .all(|c| lang::UNEVALUATED_OPERATORS.contains(&c.as_str()))
            && !reads_memory(&m.text)
            && macro_value_names(&m.text).into_iter().all(|i| {
                i != name
                    && (lang::VALUELESS_WORDS.contains(&i)
                        || macro_allowed(i, names, file, macros, depth + 1))
            });
    }
    names.contains(name)
        || lang::UNIFORM_BUILTINS.contains(&name)
        || lang::STANDARD_CONSTANTS.contains(&name)
        || lang::VALUELESS_WORDS.contains(&name)
        || file.uniform.contains(name) && !file.other.contains(name)
}

/// A use of function-like macro `name` (as a call) whose replacement text a uniform helper may
/// contain: nothing but its parameters and names `macro_allowed` accepts, no call, no memory.
/// The arguments are checked at the use. An included file's macro, whose parameters are not
/// kept, is refused.
fn function_macro_allowed(
    name: &str,
    names: &BTreeSet<String>,
    file: &Declared,
    macros: &BTreeMap<String, MacroFacts>,
) -> bool {
    let Some(m) = macros.get(name) else {
        return false;
    };
    let Some(params) = &m.params else {
        return false;
    };
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
                || i != name
                    && (lang::VALUELESS_WORDS.contains(&i)
                        || macro_allowed(i, names, file, macros, 0))
        })
}

/// The function declarator inside a definition's declarator.
fn lang_function_declarator(declarator: Node) -> Option<Node> {
    let mut found = None;
    lang::visit(declarator, |x| {
        if found.is_none() && x.kind_id() == kinds().function_declarator {
            found = Some(x);
        }
        found.is_none()
    });
    found
}
