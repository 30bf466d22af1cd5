//! Emitting: a change is a byte range of the original plus replacement text. Edits are collected
//! first, sorted, checked for overlaps and applied once. Emitting never decides anything.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub start: usize,
    pub end: usize,
    pub text: String,
}

impl Edit {
    pub fn replace(range: std::ops::Range<usize>, text: impl Into<String>) -> Edit {
        Edit {
            start: range.start,
            end: range.end,
            text: text.into(),
        }
    }
    pub fn insert(at: usize, text: impl Into<String>) -> Edit {
        Edit {
            start: at,
            end: at,
            text: text.into(),
        }
    }
    pub fn delete(range: std::ops::Range<usize>) -> Edit {
        Edit::replace(range, "")
    }
}

/// Two edits touch the same bytes: a bug in the rewriter, never the user's fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlapError {
    pub first: (usize, usize),
    pub second: (usize, usize),
}

impl fmt::Display for OverlapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "internal error: overlapping edits {}..{} and {}..{}",
            self.first.0, self.first.1, self.second.0, self.second.1
        )
    }
}

impl std::error::Error for OverlapError {}

/// Where `#line` directives should point, when asked for: the file named, or (None) the name
/// the compiler already has for it.
pub struct LineMap<'a> {
    pub file_name: Option<&'a str>,
}

/// The file's line end: `"\r\n"` when its first line ends so, else `"\n"`.
pub fn line_end(src: &str) -> &'static str {
    match src.find('\n') {
        Some(i) if i > 0 && src.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// Generated text with the file's line ends (it is written with `\n`).
pub fn with_line_end(text: &str, eol: &str) -> String {
    if eol == "\n" {
        return text.to_string();
    }
    text.replace("\r\n", "\n").replace('\n', eol)
}

/// Applies `edits` to `src`. Insertions at the same offset keep their order of collection.
/// With `lines`, generated text that ends a line is followed by a `#line` directive, so that
/// compiler messages and debuggers point into the original file.
pub fn apply(src: &str, edits: &[Edit], lines: Option<&LineMap>) -> Result<String, OverlapError> {
    // Stable sort: same-offset insertions stay in collection order.
    let mut edits: Vec<&Edit> = edits.iter().collect();
    edits.sort_by_key(|e| (e.start, e.end));
    for w in edits.windows(2) {
        let (a, b) = (w[0], w[1]);
        let overlap = b.start < a.end || (a.start == b.start && a.end > a.start && b.end > b.start);
        if overlap {
            return Err(OverlapError {
                first: (a.start, a.end),
                second: (b.start, b.end),
            });
        }
    }
    let extra: usize = edits.iter().map(|e| e.text.len()).sum();
    let mut out = String::with_capacity(src.len() + extra);
    // A file with CRLF line ends gets CRLF after its `#line` directives too.
    let eol = line_end(src);
    let mut pos = 0;
    for (i, e) in edits.iter().enumerate() {
        out.push_str(&src[pos..e.start]);
        out.push_str(&e.text);
        pos = e.end;
        if let Some(map) = lines {
            // The directive takes the line end after the text; not when the next edit starts
            // before that line end is over (it would have to cut into it): that edit places
            // the directive, if any.
            let next_start = edits.get(i + 1).map_or(usize::MAX, |n| n.start);
            let takes_eol = src[pos..].starts_with(eol) && next_start >= pos + eol.len();
            // Only after multi-line generated text that changes the number of lines (the lines
            // after an edit that keeps it keep their numbers) and leaves us at the start of a
            // line. A deletion gets none: the place of deleted lines can lie between a template's
            // head and its declaration, where the grammar cannot read a directive.
            let shifts = e.text.contains('\n')
                && e.text.matches('\n').count() != src[e.start..e.end].matches('\n').count();
            if shifts && (out.ends_with('\n') || takes_eol) {
                let resume = if out.ends_with('\n') {
                    pos
                } else {
                    pos + eol.len()
                };
                let line = src[..resume].matches('\n').count() + 1;
                if !out.ends_with('\n') {
                    out.push_str(eol);
                    pos += eol.len();
                }
                match map.file_name {
                    Some(name) => out.push_str(&format!(
                        "#line {line} \"{}\"{eol}",
                        name.replace('\\', "/")
                    )),
                    None => out.push_str(&format!("#line {line}{eol}")),
                }
            }
        }
    }
    out.push_str(&src[pos..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_in_order_and_keeps_untouched_text() {
        let src = "abc def ghi";
        let out = apply(
            src,
            &[
                Edit::replace(4..7, "DEF"),
                Edit::insert(0, ">"),
                Edit::delete(8..11),
            ],
            None,
        )
        .unwrap();
        assert_eq!(out, ">abc DEF ");
    }

    #[test]
    fn same_offset_insertions_keep_collection_order() {
        let out = apply("x", &[Edit::insert(0, "1"), Edit::insert(0, "2")], None).unwrap();
        assert_eq!(out, "12x");
    }

    #[test]
    fn overlapping_edits_are_rejected() {
        let err = apply(
            "abcdef",
            &[Edit::replace(0..3, "x"), Edit::replace(2..4, "y")],
            None,
        )
        .unwrap_err();
        assert_eq!(err.first, (0, 3));
        assert_eq!(err.second, (2, 4));
        assert!(apply(
            "abc",
            &[Edit::replace(0..2, "x"), Edit::replace(0..1, "y")],
            None
        )
        .is_err());
    }

    #[test]
    fn insertion_at_the_end_of_a_replacement_is_not_an_overlap() {
        let out = apply(
            "abc",
            &[Edit::replace(0..2, "X"), Edit::insert(2, "+")],
            None,
        )
        .unwrap();
        assert_eq!(out, "X+c");
    }

    #[test]
    fn line_directives_follow_generated_lines() {
        let src = "a\nb\nc\n";
        let out = apply(
            src,
            &[Edit::insert(2, "gen1\ngen2\n")],
            Some(&LineMap {
                file_name: Some("f.cu"),
            }),
        )
        .unwrap();
        assert_eq!(out, "a\ngen1\ngen2\n#line 2 \"f.cu\"\nb\nc\n");
        // Without a name: the compiler keeps the one it has (a file written in place).
        let out = apply(
            src,
            &[Edit::insert(2, "gen1\ngen2\n")],
            Some(&LineMap { file_name: None }),
        )
        .unwrap();
        assert_eq!(out, "a\ngen1\ngen2\n#line 2\nb\nc\n");
    }

    #[test]
    fn an_edit_that_keeps_the_line_count_needs_no_line_directive() {
        let src = "a\nb(x,\n  y)\nc\n";
        let at = src.find("b(").unwrap();
        let edits = [Edit::replace(at..at + 2, "f(\n".to_string())];
        let map = LineMap { file_name: None };
        let out = apply(
            src,
            &[Edit::replace(
                at..src.find("  y").unwrap(),
                "f(x,\n".to_string(),
            )],
            Some(&map),
        )
        .unwrap();
        assert_eq!(out, "a\nf(x,\n  y)\nc\n");
        // One more line than it replaced: the directive follows.
        let out = apply(src, &edits, Some(&map)).unwrap();
        assert_eq!(out, "a\nf(\n#line 2\nx,\n  y)\nc\n");
        // A deleted line gets none: its place here is between a template's head and its
        // declaration, where the grammar cannot read a directive.
        let src = "template <int N>\n__launch_bounds__(128)\nvoid f();\n";
        let at = src.find("__launch").unwrap();
        let gone = [Edit::delete(at..src.find("void").unwrap())];
        let out = apply(src, &gone, Some(&map)).unwrap();
        assert_eq!(out, "template <int N>\nvoid f();\n");
    }

    #[test]
    fn a_line_directive_leaves_the_line_end_to_an_edit_right_before_it() {
        // Multi-line text replacing "b", then an insertion at the line end after it (the
        // shape of a predicated kernel's rewrite): the directive must not take that line end.
        let src = "a\nb\nc\n";
        let map = LineMap {
            file_name: Some("f.cu"),
        };
        let edits = [Edit::replace(2..3, "x\ny"), Edit::insert(3, ";")];
        let out = apply(src, &edits, Some(&map)).unwrap();
        assert_eq!(out, "a\nx\ny;\nc\n");
        for crlf in [false, true] {
            let src = if crlf { "a\r\nb\r\nc\r\n" } else { "a\nb\nc\n" };
            let nl = if crlf { 3 } else { 2 };
            let edits = [Edit::replace(nl..nl + 1, "x\ny"), Edit::insert(nl + 1, ";")];
            assert!(apply(src, &edits, Some(&map)).is_ok());
        }
    }
}
