//! What the transformation changed, line by line, as data: the hunks of a unified diff, the rows
//! of a side-by-side view, or counts. The command line draws them (src/cli/diff.rs).

use similar::{ChangeTag, DiffOp, TextDiff};

/// A line of a unified diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Equal,
    Delete,
    Insert,
}

#[derive(Debug, Clone)]
pub struct Line {
    pub change: Change,
    /// Without its line end.
    pub text: String,
    /// The file ends here without a newline.
    pub missing_newline: bool,
}

#[derive(Debug, Clone)]
pub struct Hunk {
    /// `@@ -1,3 +1,3 @@`
    pub header: String,
    pub lines: Vec<Line>,
}

/// The hunks of a unified diff with three lines of context; none when the texts are equal.
pub fn unified(old: &str, new: &str) -> Vec<Hunk> {
    let diff = TextDiff::from_lines(old, new);
    if diff.ratio() == 1.0 {
        return Vec::new();
    }
    diff.unified_diff()
        .context_radius(3)
        .iter_hunks()
        .map(|hunk| Hunk {
            header: hunk.header().to_string(),
            lines: hunk
                .iter_changes()
                .map(|change| {
                    let line = change.value();
                    Line {
                        change: match change.tag() {
                            ChangeTag::Delete => Change::Delete,
                            ChangeTag::Insert => Change::Insert,
                            ChangeTag::Equal => Change::Equal,
                        },
                        text: line.strip_suffix('\n').unwrap_or(line).to_string(),
                        missing_newline: change.missing_newline(),
                    }
                })
                .collect(),
        })
        .collect()
}

/// How the two sides of a side-by-side row relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Same,
    /// Only on the left: deleted.
    Old,
    /// Only on the right: inserted.
    New,
    /// Both sides, different.
    Changed,
}

/// One row of a side-by-side view: 0-based line numbers on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub old: Option<usize>,
    pub new: Option<usize>,
    pub mark: Mark,
}

/// The rows of a side-by-side view, in groups of changes with three lines of context.
pub fn side_by_side(old: &str, new: &str) -> Vec<Vec<Row>> {
    let diff = TextDiff::from_lines(old, new);
    let row = |old, new, mark| Row { old, new, mark };
    diff.grouped_ops(3)
        .iter()
        .map(|group| {
            group
                .iter()
                .flat_map(|op| -> Vec<Row> {
                    match *op {
                        DiffOp::Equal {
                            old_index,
                            new_index,
                            len,
                        } => (0..len)
                            .map(|i| row(Some(old_index + i), Some(new_index + i), Mark::Same))
                            .collect(),
                        DiffOp::Delete {
                            old_index, old_len, ..
                        } => (0..old_len)
                            .map(|i| row(Some(old_index + i), None, Mark::Old))
                            .collect(),
                        DiffOp::Insert {
                            new_index, new_len, ..
                        } => (0..new_len)
                            .map(|i| row(None, Some(new_index + i), Mark::New))
                            .collect(),
                        DiffOp::Replace {
                            old_index,
                            old_len,
                            new_index,
                            new_len,
                        } => (0..old_len.max(new_len))
                            .map(|i| {
                                let l = (i < old_len).then_some(old_index + i);
                                let r = (i < new_len).then_some(new_index + i);
                                let mark = match (l, r) {
                                    (None, _) => Mark::New,
                                    (_, None) => Mark::Old,
                                    _ => Mark::Changed,
                                };
                                row(l, r, mark)
                            })
                            .collect(),
                    }
                })
                .collect()
        })
        .collect()
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
    fn equal_texts_have_no_hunks() {
        assert!(unified("a\n", "a\n").is_empty());
        let h = unified("a\nb\nc\n", "a\nB\nc\n");
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].header, "@@ -1,3 +1,3 @@");
        let changes: Vec<Change> = h[0].lines.iter().map(|l| l.change).collect();
        use Change::*;
        assert_eq!(changes, [Equal, Delete, Insert, Equal]);
    }

    #[test]
    fn side_by_side_pairs_lines() {
        let rows = side_by_side("a\nb\n", "a\nc\nd\n");
        assert_eq!(
            rows.concat(),
            [
                Row {
                    old: Some(0),
                    new: Some(0),
                    mark: Mark::Same
                },
                Row {
                    old: Some(1),
                    new: Some(1),
                    mark: Mark::Changed
                },
                Row {
                    old: None,
                    new: Some(2),
                    mark: Mark::New
                },
            ]
        );
    }

    #[test]
    fn counts_lines() {
        assert_eq!(counts("a\nb\n", "a\nc\nd\n"), (2, 1));
    }
}
