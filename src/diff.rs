//! Showing what the transformation did: unified diff, side by side, or a summary.

use similar::{ChangeTag, DiffOp, TextDiff};
use std::fmt::Write;

const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

pub struct Style {
    pub color: bool,
}

impl Style {
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("{code}{s}{RESET}")
        } else {
            s.to_string()
        }
    }
}

/// A unified diff with three lines of context.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str, style: &Style) -> String {
    let diff = TextDiff::from_lines(old, new);
    let mut out = String::new();
    if diff.ratio() == 1.0 {
        return out;
    }
    let _ = writeln!(out, "{}", style.paint(BOLD, &format!("--- {old_name}")));
    let _ = writeln!(out, "{}", style.paint(BOLD, &format!("+++ {new_name}")));
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        let _ = writeln!(out, "{}", style.paint(CYAN, &hunk.header().to_string()));
        for change in hunk.iter_changes() {
            let line = change.value();
            let line = line.strip_suffix('\n').unwrap_or(line);
            let s = match change.tag() {
                ChangeTag::Delete => style.paint(RED, &format!("-{line}")),
                ChangeTag::Insert => style.paint(GREEN, &format!("+{line}")),
                ChangeTag::Equal => format!(" {line}"),
            };
            let _ = writeln!(out, "{s}");
            if change.missing_newline() {
                let _ = writeln!(out, "\\ No newline at end of file");
            }
        }
    }
    out
}

/// Two columns, original on the left, with line numbers; `width` is the whole line.
pub fn side_by_side(old: &str, new: &str, width: usize, style: &Style) -> String {
    let diff = TextDiff::from_lines(old, new);
    let col = width.saturating_sub(17).max(20) / 2;
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out = String::new();
    let cell = |n: Option<usize>, lines: &[&str]| -> (String, String) {
        match n {
            Some(i) => (
                format!("{:>5}", i + 1),
                fit(lines.get(i).copied().unwrap_or(""), col),
            ),
            None => ("     ".to_string(), " ".repeat(col)),
        }
    };
    for (g, group) in diff.grouped_ops(3).iter().enumerate() {
        if g > 0 {
            let _ = writeln!(out, "{}", style.paint(DIM, &"┄".repeat(col * 2 + 15)));
        }
        for op in group {
            let rows: Vec<(Option<usize>, Option<usize>, char)> = match *op {
                DiffOp::Equal {
                    old_index,
                    new_index,
                    len,
                } => (0..len)
                    .map(|i| (Some(old_index + i), Some(new_index + i), ' '))
                    .collect(),
                DiffOp::Delete {
                    old_index, old_len, ..
                } => (0..old_len)
                    .map(|i| (Some(old_index + i), None, '<'))
                    .collect(),
                DiffOp::Insert {
                    new_index, new_len, ..
                } => (0..new_len)
                    .map(|i| (None, Some(new_index + i), '>'))
                    .collect(),
                DiffOp::Replace {
                    old_index,
                    old_len,
                    new_index,
                    new_len,
                } => (0..old_len.max(new_len))
                    .map(|i| {
                        let (l, r) = (
                            (i < old_len).then_some(old_index + i),
                            (i < new_len).then_some(new_index + i),
                        );
                        (
                            l,
                            r,
                            if l.is_none() {
                                '>'
                            } else if r.is_none() {
                                '<'
                            } else {
                                '|'
                            },
                        )
                    })
                    .collect(),
            };
            for (l, r, mark) in rows {
                let (ln, lt) = cell(l, &old_lines);
                let (rn, rt) = cell(r, &new_lines);
                let (lt, rt) = match mark {
                    '<' => (style.paint(RED, &lt), rt),
                    '>' => (lt, style.paint(GREEN, &rt)),
                    '|' => (style.paint(RED, &lt), style.paint(GREEN, &rt)),
                    _ => (lt, rt),
                };
                let _ = writeln!(out, "{ln} {lt} {mark} {rn} {rt}");
            }
        }
    }
    out
}

fn fit(s: &str, width: usize) -> String {
    let s = s.replace('\t', "    ");
    let n = s.chars().count();
    if n > width {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    } else {
        format!("{s}{}", " ".repeat(width - n))
    }
}

/// (inserted lines, deleted lines)
pub fn counts(old: &str, new: &str) -> (usize, usize) {
    let diff = TextDiff::from_lines(old, new);
    let mut ins = 0;
    let mut del = 0;
    for c in diff.iter_all_changes() {
        match c.tag() {
            ChangeTag::Insert => ins += 1,
            ChangeTag::Delete => del += 1,
            ChangeTag::Equal => {}
        }
    }
    (ins, del)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_marks_changes_and_is_empty_when_equal() {
        let s = Style { color: false };
        assert_eq!(unified("a\n", "a\n", "x", "y", &s), "");
        let d = unified("a\nb\nc\n", "a\nB\nc\n", "x", "y", &s);
        assert!(
            d.contains("--- x\n+++ y\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"),
            "{d}"
        );
    }

    #[test]
    fn side_by_side_pairs_lines() {
        let s = Style { color: false };
        let d = side_by_side("a\nb\n", "a\nc\nd\n", 80, &s);
        assert!(
            d.lines()
                .any(|l| l.contains(" b ") && l.contains('|') && l.contains(" c")),
            "{d}"
        );
        assert!(
            d.lines()
                .any(|l| l.contains('>') && l.trim_end().ends_with('d')),
            "{d}"
        );
    }

    #[test]
    fn counts_lines() {
        assert_eq!(counts("a\nb\n", "a\nc\nd\n"), (2, 1));
    }
}
