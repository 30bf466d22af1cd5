//! What an expression may read and write, for the code that returned threads still evaluate in
//! the predicated form: a value is safe to compute in a returned thread when it reads no memory,
//! and a statement is safe to run when it writes only the thread's own locals.

use crate::lang::{self, fields, kinds, text};
use std::cell::OnceCell;
use std::collections::BTreeSet;
use tree_sitter::Node;

pub struct Effects<'a, 't> {
    src: &'t str,
    /// The body and its descendants, in pre-order.
    all: &'a [Node<'t>],
    params: &'a [String],
    /// Locals and parameters held by value: writing them touches no memory (built on first use).
    locals: OnceCell<BTreeSet<String>>,
}

impl<'a, 't> Effects<'a, 't> {
    pub fn new(all: &'a [Node<'t>], src: &'t str, params: &'a [String]) -> Self {
        Effects {
            src,
            all,
            params,
            locals: OnceCell::new(),
        }
    }

    pub fn is_local(&self, n: Node) -> bool {
        let n = lang::strip_parens(n);
        if n.kind_id() != kinds().identifier {
            return false;
        }
        self.locals
            .get_or_init(|| local_names(self.all, self.src, self.params))
            .contains(text(n, self.src))
    }

    /// An expression statement whose only effects are writes to locals, with pure values.
    pub fn local_writes_only(&self, s: Node) -> bool {
        s.named_child(0).is_some_and(|e| self.local_effects_only(e))
    }

    pub fn local_effects_only(&self, e: Node) -> bool {
        self.local_effects_only_around(e, &[])
    }

    /// As `local_effects_only`, taking each of `holes` (subexpressions the caller handles
    /// itself: calls of synchronizing helpers) as neither reading nor writing.
    pub fn local_effects_only_around(&self, e: Node, holes: &[Node]) -> bool {
        self.writes_locals_only(e) && self.pure_inner(e, true, holes)
    }

    fn writes_locals_only(&self, e: Node) -> bool {
        let k = kinds();
        let f = fields();
        let mut ok = true;
        lang::visit(e, |n| {
            if n.kind_id() == k.assignment_expression {
                ok &= n
                    .child_by_field_id(f.left)
                    .is_some_and(|l| self.is_local(l));
            } else if n.kind_id() == k.update_expression {
                ok &= n
                    .child_by_field_id(f.argument)
                    .is_some_and(|a| self.is_local(a));
            }
            ok
        });
        ok
    }

    /// Reads no memory, calls nothing with effects, writes nothing.
    pub fn pure(&self, e: Node) -> bool {
        self.pure_inner(e, false, &[])
    }

    /// As `pure`, taking each of `holes` as pure.
    pub fn pure_around(&self, e: Node, holes: &[Node]) -> bool {
        self.pure_inner(e, false, holes)
    }

    fn pure_inner(&self, e: Node, writes_ok: bool, holes: &[Node]) -> bool {
        let k = kinds();
        let f = fields();
        let mut ok = true;
        lang::visit(e, |n| {
            if !ok || holes.iter().any(|h| h.id() == n.id()) {
                return false; // a hole's subtree is not looked at
            }
            let id = n.kind_id();
            match n.kind() {
                "identifier"
                | "number_literal"
                | "true"
                | "false"
                | "null"
                | "nullptr"
                | "char_literal"
                | "string_literal"
                | "binary_expression"
                | "unary_expression"
                | "parenthesized_expression"
                | "conditional_expression"
                | "comma_expression"
                | "qualified_identifier"
                | "namespace_identifier"
                | "field_identifier"
                | "declaration"
                | "init_declarator"
                | "primitive_type"
                | "type_identifier"
                | "sized_type_specifier"
                | "type_qualifier"
                | "template_type"
                | "template_argument_list"
                | "type_descriptor"
                | "abstract_pointer_declarator"
                // `{0.0f}`, `{.x = 1}`: the elements are looked at in turn.
                | "initializer_list"
                | "initializer_pair"
                | "field_designator"
                | "comment" => true,
                "sizeof_expression" | "alignof_expression" => false, // unevaluated
                "cast_expression" => true,
                "field_expression" => {
                    ok = n
                        .child_by_field_id(f.operator)
                        .is_some_and(|o| text(o, self.src) == ".");
                    ok
                }
                "pointer_expression" => {
                    ok = n
                        .child_by_field_id(f.operator)
                        .is_some_and(|o| text(o, self.src) == "&");
                    ok
                }
                "assignment_expression" | "update_expression" => {
                    ok = writes_ok;
                    ok
                }
                _ if id == k.call_expression => {
                    let callee = n.child_by_field_id(f.function);
                    if callee.is_some_and(|c| lang::is_named_cast(c, self.src)) {
                        // Only the argument list is looked at (the callee names a type).
                        if let Some(args) = n.child_by_field_id(f.arguments) {
                            ok = self.pure_inner(args, writes_ok, holes);
                        }
                        return false;
                    }
                    ok = callee.is_some_and(|c| lang::is_pure_function(text(c, self.src)));
                    ok
                }
                _ if id == k.argument_list => true,
                _ => {
                    // Operators and punctuation are unnamed; anything else named is not known
                    // to be free of memory reads.
                    ok = !n.is_named();
                    ok
                }
            }
        });
        ok
    }
}

/// Parameters and locals held by value: not `__shared__`, not `static`, not references.
fn local_names(all: &[Node], src: &str, params: &[String]) -> BTreeSet<String> {
    let k = kinds();
    let mut out: BTreeSet<String> = params.iter().cloned().collect();
    let mut not_local = BTreeSet::new();
    for &n in all {
        if n.kind_id() != k.declaration {
            continue;
        }
        let t = text(n, src);
        let shared = t.contains("__shared__") || t.trim_start().starts_with("static");
        for d in lang::declarators(n) {
            let Some(name) = lang::declarator_name(d) else {
                continue;
            };
            let name = text(name, src).to_string();
            let mut reference = false;
            lang::visit(d, |x| {
                reference |= x.kind_id() == k.reference_declarator;
                !reference
            });
            if shared || reference {
                not_local.insert(name);
            } else {
                out.insert(name);
            }
        }
    }
    out.retain(|n| !not_local.contains(n));
    out
}
