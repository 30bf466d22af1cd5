//! Shapes of control flow in a body, as the tree shows them: loops, where a `return` is the
//! last thing a statement does, and `break`/`continue` that leave a statement.

use crate::lang::{self, fields, kinds};
use tree_sitter::Node;

pub fn is_loop(n: Node) -> bool {
    let k = kinds();
    let id = n.kind_id();
    id == k.for_statement
        || id == k.while_statement
        || id == k.do_statement
        || id == k.for_range_loop
}

/// `n` and its descendants in pre-order.
pub fn descendants(n: Node) -> Vec<Node> {
    let mut out = Vec::new();
    lang::visit(n, |x| {
        out.push(x);
        true
    });
    out
}

/// Named children that are statements (comments included; the caller skips them).
pub fn children<'t>(n: Node<'t>) -> Vec<Node<'t>> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// Whether `ret` is the last thing `last` does on its path: nothing after it in `last` would run.
pub fn ends(ret: Node, last: Node) -> bool {
    let k = kinds();
    let mut n = ret;
    while n.id() != last.id() {
        let Some(p) = n.parent() else { return false };
        let fine = match p.kind() {
            "if_statement" => p
                .child_by_field_id(fields().condition)
                .is_some_and(|c| c.id() != n.id()),
            "else_clause" => true,
            _ if p.kind_id() == k.compound_statement => {
                let mut c = p.walk();
                let last_stmt = p
                    .named_children(&mut c)
                    .filter(|x| x.kind_id() != k.comment)
                    .last();
                last_stmt.is_some_and(|l| l.id() == n.id())
            }
            _ => false,
        };
        if !fine {
            return false;
        }
        n = p;
    }
    true
}

/// A `break` or `continue` inside `s` that leaves `s` (its loop or switch is outside).
pub fn escapes(s: Node) -> bool {
    let mut found = false;
    lang::visit(s, |n| {
        if found {
            return false;
        }
        let kind = n.kind();
        if kind == "break_statement" || kind == "continue_statement" {
            let mut a = n.parent();
            let mut inside = false;
            while let Some(p) = a {
                let target =
                    is_loop(p) || (kind == "break_statement" && p.kind() == "switch_statement");
                if target {
                    inside = s.byte_range().contains(&p.start_byte());
                    break;
                }
                if p.id() == s.id() {
                    break;
                }
                a = p.parent();
            }
            found = !inside;
        }
        true
    });
    found
}
