//! Parsing: source text to a tree-sitter tree. Nothing else happens here.

use crate::lang;
use tree_sitter::{Node, Parser, Tree};

pub struct Parsed {
    pub tree: Tree,
}

pub fn parse(src: &str) -> Parsed {
    let mut parser = Parser::new();
    parser
        .set_language(&lang::language())
        .expect("tree-sitter-cuda is built against a compatible tree-sitter ABI");
    // Without a timeout or cancellation flag set, parse only returns None on those conditions.
    let tree = parser.parse(src, None).expect("parse without timeout");
    Parsed { tree }
}

/// Byte ranges of ERROR and MISSING nodes, outermost only.
pub fn error_ranges(root: Node) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    if !root.has_error() {
        return out;
    }
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if n.is_error() || n.is_missing() {
            let r = n.byte_range();
            // A MISSING node is empty; widen it to one byte so that it can be labelled.
            out.push(if r.is_empty() {
                r.start..r.start + 1
            } else {
                r
            });
            continue;
        }
        if n.has_error() {
            let mut c = n.walk();
            stack.extend(n.children(&mut c));
        }
    }
    out.sort_by_key(|r| r.start);
    out
}

/// Counts ERROR/MISSING nodes (used to check that output re-parses without new ones).
pub fn error_count(src: &str) -> usize {
    error_ranges(parse(src).tree.root_node()).len()
}
