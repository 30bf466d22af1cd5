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

/// What decides whether a node runs, as one enclosing construct shows it (`guards`).
#[derive(Debug, Clone, Copy)]
pub enum Guard<'t> {
    /// The condition of an `if`, `?:` or `switch` the node sits under (not in its condition),
    /// or the left operand of a `&&`/`||` whose right operand holds the node.
    Condition(Node<'t>),
    /// A loop around the node.
    Loop(Node<'t>),
    /// A lambda the node is inside: when it runs is the caller's business.
    Lambda,
}

/// The guards of `n`, innermost first: the constructs between `n` and the first ancestor that
/// `until` accepts (exclusive; the root, if none), found through `parent` (a map of parents
/// built once, or tree-sitter's own walk).
pub fn guards<'t>(
    n: Node<'t>,
    until: impl Fn(Node<'t>) -> bool,
    parent: impl Fn(Node<'t>) -> Option<Node<'t>>,
) -> Vec<Guard<'t>> {
    let (k, f) = (kinds(), fields());
    let mut out = Vec::new();
    let mut child = n;
    while let Some(a) = parent(child) {
        if until(a) {
            break;
        }
        let id = a.kind_id();
        if id == k.if_statement || id == k.conditional_expression || id == k.switch_statement {
            if let Some(c) = a
                .child_by_field_id(f.condition)
                .filter(|c| c.id() != child.id())
            {
                out.push(Guard::Condition(c));
            }
        } else if is_loop(a) {
            out.push(Guard::Loop(a));
        } else if a.kind() == "binary_expression" {
            let logical = a
                .child_by_field_id(f.operator)
                .is_some_and(|o| matches!(o.kind(), "&&" | "||"));
            if let Some(l) = a
                .child_by_field_id(f.left)
                .filter(|l| logical && l.id() != child.id())
            {
                out.push(Guard::Condition(l));
            }
        } else if id == k.lambda_expression {
            out.push(Guard::Lambda);
        }
        child = a;
    }
    out
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

/// A `for` loop's condition, or a `while` loop's expression; None for other loops, a `for`
/// without one, and a `while` whose condition declares (`while (T x = f())`).
pub fn loop_condition(l: Node) -> Option<Node> {
    let k = kinds();
    let c = l.child_by_field_id(crate::lang::fields().condition)?;
    if l.kind_id() == k.for_statement {
        Some(c)
    } else if l.kind_id() == k.while_statement {
        (c.kind_id() == k.condition_clause && c.named_child_count() == 1)
            .then(|| c.child_by_field_id(crate::lang::fields().value))
            .flatten()
    } else {
        None
    }
}

/// Named children that are statements (comments included; the caller skips them).
pub fn children<'t>(n: Node<'t>) -> Vec<Node<'t>> {
    let mut c = n.walk();
    n.named_children(&mut c).collect()
}

/// The value of a function body's one `return`, where that return is the body's last statement
/// (returns inside lambdas are the lambdas'): `return __syncthreads_count(p);` at the end of a
/// helper whose value is then the block reduction's (`HelperPlan::returns_block_vote`,
/// `uniformity::helpers::vote_helpers`). Parentheses stripped.
pub fn only_final_return_value(body: Node) -> Option<Node> {
    let k = kinds();
    let mut returns = 0;
    lang::visit(body, |x| {
        returns += usize::from(x.kind_id() == k.return_statement);
        x.kind() != "lambda_expression"
    });
    let last = children(body)
        .into_iter()
        .rfind(|n| n.kind_id() != k.comment)
        .filter(|l| l.kind_id() == k.return_statement)?;
    (returns == 1)
        .then(|| last.named_child(0))
        .flatten()
        .map(lang::strip_parens)
}

/// Whether `ret` is the last thing `last` does on its path: nothing after it in `last` would run.
pub fn ends(ret: Node, last: Node) -> bool {
    let k = kinds();
    // The path from `last` down to `ret`, found from the top: tree-sitter finds a node's parent
    // by a walk from the root, so climbing from `ret` would cost the depth at every step.
    let mut path = vec![last];
    let mut at = last;
    while at.id() != ret.id() {
        let Some(next) = at.child_with_descendant(ret) else {
            return false;
        };
        path.push(next);
        at = next;
    }
    path.windows(2).all(|w| {
        let (p, n) = (w[0], w[1]);
        match p.kind() {
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
        }
    })
}

/// The loop a `continue` (or any node) belongs to: its innermost enclosing loop, found through
/// `parent` (a map of parents built once, or tree-sitter's own walk).
pub fn enclosing_loop<'t>(
    n: Node<'t>,
    parent: impl Fn(Node<'t>) -> Option<Node<'t>>,
) -> Option<Node<'t>> {
    let mut at = n;
    while let Some(p) = parent(at) {
        if is_loop(p) {
            return Some(p);
        }
        at = p;
    }
    None
}

/// The `break`s and `continue`s inside `s` that leave `s` (their loop or switch is outside), in
/// source order. One walk that counts the loops and switches open around the cursor (`s`
/// included).
pub fn escaping_jumps(s: Node) -> Vec<Node> {
    let mut out = Vec::new();
    let mut c = s.walk();
    let (mut loops, mut switches) = (0usize, 0usize);
    // Per level entered: 1 a loop, 2 a switch, 0 neither.
    let mut open: Vec<u8> = Vec::new();
    loop {
        let n = c.node();
        match n.kind() {
            "break_statement" if loops + switches == 0 => out.push(n),
            "continue_statement" if loops == 0 => out.push(n),
            _ => {}
        }
        let mark = if is_loop(n) {
            1
        } else if n.kind() == "switch_statement" {
            2
        } else {
            0
        };
        if c.goto_first_child() {
            open.push(mark);
            loops += usize::from(mark == 1);
            switches += usize::from(mark == 2);
            continue;
        }
        // A cursor made from `s` cannot leave it: goto_parent fails back at `s`.
        while !c.goto_next_sibling() {
            if !c.goto_parent() {
                return out;
            }
            match open.pop() {
                Some(1) => loops -= 1,
                Some(2) => switches -= 1,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statements of `f`'s body (the only function of `src`).
    fn body_statements(tree: &tree_sitter::Tree) -> Vec<Node<'_>> {
        let f = descendants(tree.root_node())
            .into_iter()
            .find(|n| n.kind() == "function_definition")
            .expect("a function");
        let body = f.child_by_field_id(fields().body).expect("a body");
        children(body)
    }

    #[test]
    fn breaks_and_continues_that_leave_a_statement() {
        let src = "void f(int x) {\n\
                   for (;;) { if (x) break; continue; }\n\
                   if (x) { break; }\n\
                   if (x) { continue; }\n\
                   switch (x) { case 1: break; default: continue; }\n\
                   switch (x) { case 1: for (;;) { continue; } break; }\n\
                   while (x) { switch (x) { case 2: break; } }\n\
                   }\n";
        let tree = crate::parse::parse(src).tree;
        let got: Vec<Vec<&str>> = body_statements(&tree)
            .into_iter()
            .map(|s| escaping_jumps(s).into_iter().map(|j| j.kind()).collect())
            .collect();
        let none: Vec<&str> = Vec::new();
        assert_eq!(
            got,
            [
                none.clone(),
                vec!["break_statement"],
                vec!["continue_statement"],
                vec!["continue_statement"],
                none.clone(),
                none
            ]
        );
    }

    #[test]
    fn returns_that_end_a_statement() {
        let src =
            "void f(int x) {\n{ if (x) { return; } else return; }\n{ if (x) return; x++; }\n}\n";
        let tree = crate::parse::parse(src).tree;
        let stmts = body_statements(&tree);
        let returns = |s: Node<'_>| -> Vec<bool> {
            descendants(s)
                .into_iter()
                .filter(|n| n.kind() == "return_statement")
                .map(|r| ends(r, s))
                .collect()
        };
        assert_eq!(returns(stmts[0]), [true, true]);
        assert_eq!(returns(stmts[1]), [false]);
        // A node outside `last` never ends it.
        let outside = descendants(stmts[0])
            .into_iter()
            .find(|n| n.kind() == "return_statement")
            .unwrap();
        assert!(!ends(outside, stmts[1]));
    }
}
