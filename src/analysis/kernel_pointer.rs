//! Launches through a local variable that holds a kernel's address, as extension code writes
//! them to set the kernel's attributes first:
//!
//! ```text
//! auto kernel = &scan_kernel<Traits>;
//! cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
//! kernel<<<grid, Traits::kThreads, smem, stream>>>(params);
//! ```
//!
//! Where the variable is declared in the function that launches it, initialized with a name (`k`,
//! `&k`, `ns::k<T>`), and never assigned or given away by reference after, the launch is a
//! launch of that name and is rewritten as one. Anything else (a parameter, a choice between
//! kernels, a later assignment) stays a launch through a pointer (CP101).

use crate::lang::{self, fields, kinds, text};
use tree_sitter::Node;

/// The initializer's name expression (`k<T>` of `auto kernel = &k<T>;`) that the launch's
/// callee `name` (a lone identifier at `call`) stands for, or None.
pub(crate) fn resolve<'t>(call: Node<'t>, name: Node<'t>, src: &str) -> Option<Node<'t>> {
    let k = kinds();
    let wanted = text(name, src);
    let (value, scope) = declaration_before(call, wanted, src)?;
    if !never_changed(scope, wanted, src) {
        return None;
    }
    let mut v = lang::strip_parens(value);
    if v.kind_id() == k.pointer_expression && operator(v, src) == "&" {
        v = lang::strip_parens(v.child_by_field_id(fields().argument)?);
    }
    let named = v.kind_id() == k.identifier
        || v.kind_id() == k.qualified_identifier
        || v.kind_id() == k.template_function;
    (named && text(v, src) != wanted).then_some(v)
}

/// The value of the nearest declaration of `wanted` before `call` in the blocks around it, and
/// the function (or lambda) body that holds both: the scope in which it must not change.
fn declaration_before<'t>(call: Node<'t>, wanted: &str, src: &str) -> Option<(Node<'t>, Node<'t>)> {
    let k = kinds();
    let mut inner = call;
    let mut found = None;
    while let Some(parent) = inner.parent() {
        if parent.kind_id() == k.function_definition || parent.kind_id() == k.lambda_expression {
            return found.map(|v| (v, parent));
        }
        if found.is_none() && parent.kind_id() == k.compound_statement {
            let mut c = parent.walk();
            let before: Vec<Node> = parent
                .named_children(&mut c)
                .take_while(|s| s.end_byte() <= inner.start_byte())
                .collect();
            for statement in before.iter().rev() {
                if statement.kind_id() != k.declaration {
                    continue;
                }
                let hit = lang::declarators(*statement)
                    .into_iter()
                    .find(|d| lang::declarator_name(*d).is_some_and(|n| text(n, src) == wanted));
                if let Some(d) = hit {
                    // `auto kernel;` or `auto kernel{...}`: nothing to resolve, and the
                    // declaration hides any outer one.
                    let value = (d.kind_id() == k.init_declarator)
                        .then(|| d.child_by_field_id(fields().value))
                        .flatten();
                    found = Some(value?);
                    break;
                }
            }
        }
        inner = parent;
    }
    None
}

/// Whether nothing in `scope` assigns `wanted`, increments it, takes its address or binds it to
/// a reference: then it holds its initializer wherever it is read.
fn never_changed(scope: Node, wanted: &str, src: &str) -> bool {
    let k = kinds();
    let mut changed = false;
    lang::visit(scope, |n| {
        if changed {
            return false;
        }
        let target = if n.kind_id() == k.assignment_expression {
            n.child_by_field_id(fields().left)
        } else if n.kind_id() == k.update_expression
            || (n.kind_id() == k.pointer_expression && operator(n, src) == "&")
        {
            n.child_by_field_id(fields().argument)
        } else if n.kind_id() == k.init_declarator
            && n.child_by_field_id(fields().declarator)
                .is_some_and(|d| d.kind_id() == k.reference_declarator)
        {
            n.child_by_field_id(fields().value)
        } else {
            None
        };
        changed = target.is_some_and(|t| text(lang::strip_parens(t), src) == wanted);
        !changed
    });
    !changed
}

/// Whether the launch's callee `name` (a lone identifier at `call`) is an object of the
/// launching code, not a function's name: a parameter of the function or a lambda around the
/// launch, or a variable declared before it in the blocks around it. Such a pointer holds one
/// function whatever its value, so `cupreempt::launch_any` can take it (a function's name may
/// be an overload set or a template, which it cannot).
pub(crate) fn is_object(call: Node, name: Node, src: &str) -> bool {
    let k = kinds();
    let wanted = text(name, src);
    let names = |n: Node| lang::declarator_name(n).is_some_and(|d| text(d, src) == wanted);
    let mut inner = call;
    while let Some(parent) = inner.parent() {
        if parent.kind_id() == k.compound_statement {
            let mut c = parent.walk();
            let declared = parent
                .named_children(&mut c)
                .take_while(|s| s.end_byte() <= inner.start_byte())
                .filter(|s| s.kind_id() == k.declaration)
                .flat_map(lang::declarators)
                .any(|d| d.kind_id() != k.function_declarator && names(d));
            if declared {
                return true;
            }
        }
        let is_function = parent.kind_id() == k.function_definition;
        if is_function || parent.kind_id() == k.lambda_expression {
            let declarator = parent.child_by_field_id(fields().declarator);
            let mut params = None;
            let mut d = declarator;
            while let Some(n) = d {
                if let Some(p) = n.child_by_field_id(fields().parameters) {
                    params = Some(p);
                    break;
                }
                d = n.child_by_field_id(fields().declarator);
            }
            if let Some(list) = params {
                let mut c = list.walk();
                let found = list
                    .named_children(&mut c)
                    .any(|p| p.child_by_field_id(fields().declarator).is_some_and(names));
                if found {
                    return true;
                }
            }
            if is_function {
                return false;
            }
        }
        inner = parent;
    }
    false
}

fn operator<'a>(n: Node, src: &'a str) -> &'a str {
    n.child_by_field_id(fields().operator)
        .map_or("", |o| text(o, src))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f(call, callee)` of each launch in `src`, in order.
    fn per_launch<T>(src: &str, f: impl Fn(Node, Node) -> T) -> Vec<T> {
        let tree = crate::parse::parse(src).tree;
        let mut calls = Vec::new();
        crate::rewrite::macro_launch::launches_in(tree.root_node(), &mut calls);
        calls
            .into_iter()
            .map(|n| f(n, n.child_by_field_id(fields().function).expect("callee")))
            .collect()
    }

    /// The resolved name of each launch in `src`, in order (None: left through the pointer).
    fn resolved(src: &str) -> Vec<Option<String>> {
        per_launch(src, |n, callee| {
            resolve(n, callee, src).map(|v| text(v, src).to_string())
        })
    }

    #[test]
    fn resolves_a_variable_initialized_with_a_kernel() {
        let src = "void f(int s) {\n  auto kernel = &ns::k<T, 4>;\n  if (s > 0) {\n    cudaFuncSetAttribute(kernel, a, s);\n  }\n  kernel<<<1, 2, s>>>(x);\n  void (*plain)(int*) = (k2);\n  plain<<<1, 2>>>(y);\n}\n";
        assert_eq!(
            resolved(src),
            vec![Some("ns::k<T, 4>".to_string()), Some("k2".to_string())]
        );
    }

    #[test]
    fn a_nested_declaration_hides_the_outer_one() {
        let src = "void f() {\n  auto kernel = &a;\n  {\n    auto kernel = &b;\n    kernel<<<1, 1>>>();\n  }\n  kernel<<<1, 1>>>();\n}\n";
        assert_eq!(resolved(src), vec![Some("b".into()), Some("a".into())]);
    }

    /// Each of these must stay a launch through the pointer: a broken check lets one through.
    #[test]
    fn leaves_pointers_that_may_change_or_are_not_names() {
        for body in [
            "auto kernel = &a; kernel = &b;",
            "auto kernel = &a; pick(&kernel);",
            "auto kernel = &a; auto& r = kernel;",
            "auto kernel = c ? &a : &b;",
            "auto kernel = table[i];",
            "auto kernel = make();",
            "decltype(&a) kernel;",
        ] {
            let src = format!("void f(bool c, int i) {{\n  {body}\n  kernel<<<1, 1>>>();\n}}\n");
            assert_eq!(resolved(&src), vec![None], "{body}");
        }
        // A parameter, and a variable declared after the launch or in another function.
        let src = "void f(void (*kernel)()) { kernel<<<1, 1>>>(); }\nvoid g() { kernel<<<1, 1>>>(); auto kernel = &a; }\nvoid h() { auto kernel = &a; }\n";
        assert_eq!(resolved(src), vec![None, None]);
    }

    /// Whether each launch's callee is an object of the launching code (a parameter or a
    /// variable), in order.
    fn objects(src: &str) -> Vec<bool> {
        per_launch(src, |n, callee| is_object(n, callee, src))
    }

    #[test]
    fn parameters_and_variables_are_objects_and_names_are_not() {
        let src = "void f(void (*kernel)(int), bool c) {\n  kernel<<<1, 1>>>(1);\n  auto go = [&](auto k) { k<<<1, 1>>>(2); kernel<<<1, 1>>>(3); };\n  auto chosen = c ? &a : &b;\n  chosen<<<1, 1>>>(4);\n  named<<<1, 1>>>(5);\n  { void declared(int); declared<<<1, 1>>>(6); }\n}\nvoid g() { kernel<<<1, 1>>>(7); }\n";
        assert_eq!(
            objects(src),
            vec![true, true, true, true, false, false, false]
        );
    }

    #[test]
    fn a_lambda_is_a_scope_of_its_own() {
        let src = "void f() {\n  auto kernel = &a;\n  auto go = [&] { kernel<<<1, 1>>>(); };\n  auto run = [&] { auto kernel = &b; kernel<<<1, 1>>>(); };\n}\n";
        // The first launch's lambda does not declare `kernel` (a capture): left as it is.
        assert_eq!(resolved(src), vec![None, Some("b".into())]);
    }
}
