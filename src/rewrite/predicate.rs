//! Edits of the predicated form (see `analysis::predicate` for why and when).

use super::{body_indent, opens_own_line, CTX_LIVE};
use crate::analysis::{Predication, Step};
use crate::edit::Edit;
use tree_sitter::Node;

pub fn rewrite(p: &Predication, body: Node, src: &str, edits: &mut Vec<Edit>) {
    // After the prologue's shadows (same offset, collected later).
    edits.push(Edit::insert(
        body.start_byte() + 1,
        if opens_own_line(body, src) {
            format!(
                "\n{}bool {CTX_LIVE} = true;  // cupreempt: cleared by `return` (predicated form)",
                body_indent(body, src)
            )
        } else {
            format!(" bool {CTX_LIVE} = true;")
        },
    ));
    for step in &p.steps {
        match step {
            Step::Run {
                range,
                guarded,
                label,
                braced,
            } => {
                let mut head = String::new();
                let mut tail = String::new();
                if *braced {
                    head.push_str("{ ");
                }
                if *guarded {
                    head.push_str(&format!("if ({CTX_LIVE}) {{ "));
                    tail.push_str(" }");
                }
                if let Some(n) = label {
                    tail.push_str(&format!(" {}:;", label_name(*n)));
                }
                if *braced {
                    tail.push_str(" }");
                }
                edits.push(Edit::insert(range.start, head));
                edits.push(Edit::insert(range.end, tail));
            }
            Step::Return { node, label } => {
                let value = node.named_child(0).filter(|v| v.kind() != "comment");
                let mut text = String::new();
                if let Some(v) = value {
                    text.push_str(&format!("{}; ", crate::lang::text(v, src)));
                }
                text.push_str(&format!("{CTX_LIVE} = false;"));
                if let Some(n) = label {
                    text.push_str(&format!(" goto {};", label_name(*n)));
                }
                if value.is_some() || label.is_some() {
                    text = format!("{{ {text} }}");
                }
                edits.push(Edit::replace(node.byte_range(), text));
            }
            Step::LiveInit { value } => {
                edits.push(Edit::insert(
                    value.start_byte(),
                    format!("cupreempt::live_value({CTX_LIVE}, [&] {{ return "),
                ));
                edits.push(Edit::insert(value.end_byte(), "; })"));
            }
            Step::NeutralVote { args, and } => {
                let head = if *and {
                    format!("!{CTX_LIVE} || (")
                } else {
                    format!("{CTX_LIVE} && (")
                };
                edits.push(Edit::insert(args.start_byte() + 1, head));
                edits.push(Edit::insert(args.end_byte() - 1, ")"));
            }
        }
    }
}

fn label_name(n: u32) -> String {
    format!("__cp_after_{n}")
}
