//! What names the function it runs in, inside a kernel's body: `__func__`, `__FUNCTION__`,
//! `__PRETTY_FUNCTION__`, and `assert`, whose failure message prints the function's pretty
//! name (glibc's `assert` passes `__ASSERT_FUNCTION`, which is `__PRETTY_FUNCTION__`). In the
//! shared body these would name `K__cupreempt_body`, a template on the task context, so a
//! device assertion of the transformed program would print another function than the
//! original's (the CUDA samples' simpleAssert). So:
//!
//! * `__func__` and `__FUNCTION__` become the string literal `"K"` (their value in `K`);
//! * `__PRETTY_FUNCTION__` and `assert`'s function name become a parameter of the body,
//!   `__cp_function`, which the original symbol fills with its own `__PRETTY_FUNCTION__` (the
//!   same text as the original kernel's, template arguments included) and each wrapper with
//!   its own;
//! * around the body, `__ASSERT_FUNCTION` is redefined to that parameter (`push_macro`, restored
//!   after the body), where the C library defines it; elsewhere nothing changes.
//!
//! A body that has none of these is left as it was. One that uses them inside a lambda or a
//! local class's member function (where they name that function) is left as it was too.
//! Helpers keep their own names (their task-context versions name themselves), as do macros of
//! other files that expand to `assert` (the analysis does not see into them).

use crate::edit::Edit;
use crate::lang;
use crate::vocab::FUNCTION_PARAM;
use tree_sitter::Node;

/// The identifiers whose value depends on the enclosing function.
const NAMES: [&str; 4] = ["__func__", "__FUNCTION__", "__PRETTY_FUNCTION__", "assert"];
/// The C library's macro that `assert` passes as the function's name.
const ASSERT_MACRO: &str = "__ASSERT_FUNCTION";

/// A kernel body's uses of the names above.
pub struct FunctionNames<'t> {
    uses: Vec<(Node<'t>, &'static str)>,
}

impl<'t> FunctionNames<'t> {
    /// The uses in `body`; none where there are none, or where one lies in a nested function.
    pub fn of(body: Node<'t>, src: &str) -> Option<FunctionNames<'t>> {
        let id = lang::kinds().identifier;
        let mut uses = Vec::new();
        lang::visit(body, |n| {
            if n.kind_id() == id {
                if let Some(name) = NAMES.iter().find(|&&s| s == &src[n.byte_range()]) {
                    uses.push((n, *name));
                }
            }
            true
        });
        if uses.is_empty()
            || uses
                .iter()
                .any(|(n, _)| lang::inside_nested_function(*n, body))
        {
            return None;
        }
        Some(FunctionNames { uses })
    }

    /// Whether the body takes the function's pretty name as a parameter.
    pub fn takes_parameter(&self) -> bool {
        self.uses
            .iter()
            .any(|(_, s)| matches!(*s, "__PRETTY_FUNCTION__" | "assert"))
    }

    fn asserts(&self) -> bool {
        self.uses.iter().any(|(_, s)| *s == "assert")
    }

    /// The edits inside the body: replaced names, and `__ASSERT_FUNCTION` redefined at its top
    /// (`open`: just after its `{`).
    pub fn rewrite(&self, kernel: &str, open: usize, edits: &mut Vec<Edit>) {
        for (n, name) in &self.uses {
            match *name {
                "__func__" | "__FUNCTION__" => {
                    edits.push(Edit::replace(n.byte_range(), format!("\"{kernel}\"")))
                }
                "__PRETTY_FUNCTION__" => edits.push(Edit::replace(n.byte_range(), FUNCTION_PARAM)),
                _ => {}
            }
        }
        if self.asserts() {
            edits.push(Edit::insert(
                open,
                format!(
                    "\n#pragma push_macro(\"{ASSERT_MACRO}\")\n#undef {ASSERT_MACRO}\n\
                     #define {ASSERT_MACRO} {FUNCTION_PARAM}  // cupreempt: the kernel's name in assert messages\n"
                ),
            ));
        }
    }

    /// What follows the body's closing brace (on a line of its own): the macro restored.
    pub fn after_body(&self) -> String {
        if self.asserts() {
            format!("#pragma pop_macro(\"{ASSERT_MACRO}\")\n")
        } else {
            String::new()
        }
    }
}
