//! Statements whose parts the preprocessor chooses: `for (...)` then `#ifdef A` one body
//! `#else` another `#endif`, or an `if (...)` head in each branch of a conditional and one body
//! after it. The grammar reads a conditional only where a whole statement or declaration may
//! stand, so such a statement is a syntax error (CP001), and its kernel was left as it is.
//!
//! An `if (...) {...} else` inside a group with no `#else` and its last body after the `#endif`
//! is the same kind of statement: the group is read with its text (an empty second branch).
//!
//! Where a syntax error points into such a conditional (or just before it) inside a block of
//! statements, the grammar is given one branch of the conditional alone, the first that parses
//! better than the file as it is (`kept_branches`; a first branch that does not read itself,
//! a macro call without its `;`, gives way to the second): its directive lines and its other
//! branches are blanked in the masked view (same length, newlines kept). The other branches' text stays in
//! the file and in any output, untouched; `Parsed::hidden` lists them, and the analysis refuses
//! a kernel whose hidden text holds anything it would have to see (analysis::hidden).

use std::ops::Range;
use tree_sitter::Tree;

/// One `#if`/`#ifdef`/`#ifndef` group, closed by its `#endif`.
#[derive(Debug, PartialEq)]
pub(super) struct Conditional {
    /// From the `#if` line's start to the `#endif` line's end.
    span: Range<usize>,
    /// Every directive line of the group (`#if`, `#elif`, `#else`, `#endif`), with its
    /// backslash continuations.
    directives: Vec<Range<usize>>,
    /// The text between two directive lines, in order.
    branches: Vec<Range<usize>>,
}

/// Every closed conditional group of `src` (nested ones too), in the order they close. Lines
/// inside block comments are skipped.
pub(super) fn conditionals(src: &str) -> Vec<Conditional> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    // Open groups: what they have so far, and where the current branch starts.
    let mut open: Vec<(Conditional, usize)> = Vec::new();
    let mut in_comment = false;
    let mut i = 0;
    while i < b.len() {
        let line_end = b[i..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |p| i + p);
        let line = &src[i..line_end];
        let trimmed = line.trim_start();
        if !in_comment && trimmed.starts_with('#') {
            // The directive and its continuation lines.
            let end = directive_end(b, line_end);
            let word: String = trimmed[1..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            let directive = i..end;
            match word.as_str() {
                "if" | "ifdef" | "ifndef" => open.push((
                    Conditional {
                        span: i..end,
                        directives: vec![directive],
                        branches: Vec::new(),
                    },
                    end,
                )),
                "elif" | "else" | "elifdef" | "elifndef" => {
                    if let Some((g, from)) = open.last_mut() {
                        g.branches.push(*from..i);
                        g.directives.push(directive);
                        *from = end;
                    }
                }
                "endif" => {
                    if let Some((mut g, from)) = open.pop() {
                        g.branches.push(from..i);
                        g.directives.push(directive);
                        g.span.end = end;
                        out.push(g);
                    }
                }
                _ => {}
            }
            i = end + 1;
            continue;
        }
        // Block comments that span lines (a `#` inside one is no directive).
        let mut rest = line;
        loop {
            if in_comment {
                match rest.find("*/") {
                    Some(p) => {
                        in_comment = false;
                        rest = &rest[p + 2..];
                    }
                    None => break,
                }
            } else {
                let open_at = rest.find("/*");
                let line_comment = rest.find("//");
                match open_at {
                    Some(p) if line_comment.is_none_or(|l| p < l) => {
                        in_comment = true;
                        rest = &rest[p + 2..];
                    }
                    _ => break,
                }
            }
        }
        i = line_end + 1;
    }
    out
}

/// The branches of `src`'s conditionals that are in effect only where a macro is defined,
/// each with that macro's name: the first branch of `#ifdef X`, `#if defined(X)` and `#if
/// defined X`; a branch opened by `#elif defined(X)` or `#elifdef X`; every branch after the
/// first of `#ifndef X` and `#if !defined(X)`. Only a condition that tests one macro alone
/// counts (`#if defined(A) && B` says nothing about A's branch alone); nested branches each
/// give their own.
pub(crate) fn defined_only_branches(src: &str) -> Vec<(Range<usize>, String)> {
    let mut out = Vec::new();
    if !src.contains("def") {
        return out;
    }
    for g in conditionals(src) {
        for (k, (directive, branch)) in g.directives.iter().zip(&g.branches).enumerate() {
            match lone_test(&src[directive.clone()]) {
                Some((name, true)) => out.push((branch.clone(), name)),
                Some((name, false)) if k == 0 => {
                    for later in &g.branches[1..] {
                        out.push((later.clone(), name.clone()));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The macro a directive line tests alone and whether it wants it defined: `#ifdef X`, `#if
/// defined(X)`, `#if defined X`, `#elif defined(X)`, `#elifdef X` (true); `#ifndef X`, `#if
/// !defined(X)`, `#elifndef X` (false). None for any other directive or condition.
fn lone_test(directive: &str) -> Option<(String, bool)> {
    let text = directive.trim_start().strip_prefix('#')?.trim_start();
    // A comment after the condition (`#ifdef X // why`) says nothing.
    let text = text.split("//").next().unwrap_or(text);
    let text = text.split("/*").next().unwrap_or(text).trim_end();
    let word_end = text
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (word, rest) = text.split_at(word_end);
    let rest = rest.trim();
    let (test, wanted) = match word {
        "ifdef" | "elifdef" => (rest, true),
        "ifndef" | "elifndef" => (rest, false),
        "if" | "elif" => {
            let (negated, rest) = match rest.strip_prefix('!') {
                Some(r) => (true, r.trim_start()),
                None => (false, rest),
            };
            let operand = rest.strip_prefix("defined")?.trim();
            let operand = match operand.strip_prefix('(') {
                Some(inner) => inner.strip_suffix(')')?.trim(),
                None => operand,
            };
            (operand, !negated)
        }
        _ => return None,
    };
    let is_name = crate::lang::leading_identifier(test).is_some_and(|name| name == test);
    is_name.then(|| (test.to_string(), wanted))
}

/// The end of a directive whose first line ends at `line_end`: past its backslash-continued
/// lines.
pub(super) fn directive_end(b: &[u8], line_end: usize) -> usize {
    let mut end = line_end;
    while end < b.len() && end > 0 && b[end - 1] == b'\\' {
        end = b[end + 1..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |p| end + 1 + p);
    }
    end
}

/// The most branches a reduction tries for each conditional (`parse_with` tries the first
/// branch, then the second... while none parses better).
pub(super) const MOST_BRANCHES_TRIED: usize = 4;

/// A view with some conditionals reduced to one branch (`FileGroups::kept_branches`).
pub(super) struct Reduced {
    pub view: Vec<u8>,
    /// The other branches' text, blanked in the view.
    pub hidden: Vec<Range<usize>>,
    /// The groups those branches belong to, each from its `#if` line's start to its `#endif`
    /// line's end.
    pub groups: Vec<Range<usize>>,
}

/// A file's conditional groups and what the reductions ask of each, found once per parse.
pub(super) struct FileGroups<'a> {
    src: &'a str,
    groups: Vec<Conditional>,
    space_macros: &'a super::SpaceMacros,
    /// Per group, whether the text's braces place it in a function's body
    /// (`in_function_text`).
    in_function: Vec<bool>,
    /// Per group, whether its branches are heads alone, read with the first outside a block
    /// too (`head_part`, `split_device_head`): found once, not at each reduction tried.
    heads: Vec<bool>,
    /// Per group, whether it is a device helper's heads with their brace (`split_device_head`):
    /// its other heads are blanked and not hidden text, since the body after them is read.
    split_heads: Vec<bool>,
}

impl<'a> FileGroups<'a> {
    pub(super) fn new(src: &'a str, space_macros: &'a super::SpaceMacros) -> FileGroups<'a> {
        let groups = conditionals(src);
        let in_function = in_function_text(src, &groups);
        let split_heads: Vec<bool> = groups.iter().map(|g| split_device_head(g, src)).collect();
        let heads = groups
            .iter()
            .zip(&split_heads)
            .map(|(g, &split)| split || head_part(g, src))
            .collect();
        FileGroups {
            src,
            groups,
            space_macros,
            in_function,
            heads,
            split_heads,
        }
    }

    /// The view with the conditionals that syntax errors of `tree` point into reduced to
    /// their branch number `keep` (their last where they have fewer), the other branches
    /// blanked (`Reduced`); None where no conditional is near an error. With
    /// `unbalanced_only`, only the groups whose branches open or close braces alone. A group
    /// with one branch (no `#else`) is read with its text, its directive lines alone blanked:
    /// `#ifdef A` `if (a) {...} else` `#endif` `{...}` reads as the `if` with both bodies, and
    /// `#ifdef A` `__device__` `#endif` `inline int f()` as the function with its specifier,
    /// the configuration that defines A; nothing is hidden. `blocks`: the tree's blocks
    /// (`compound_statements`).
    pub(super) fn kept_branches(
        &self,
        view: &[u8],
        tree: &Tree,
        blocks: &[Range<usize>],
        unbalanced_only: bool,
        keep: usize,
    ) -> Option<Reduced> {
        let FileGroups {
            src,
            groups,
            space_macros,
            in_function,
            heads,
            split_heads,
        } = self;
        let kept = |g: &Conditional| keep.min(g.branches.len() - 1);
        let errors = super::error_ranges(tree.root_node());
        let near = |g: &Conditional| {
            errors.iter().any(|e| {
                let overlaps = e.start < g.span.end && g.span.start < e.end;
                // An error just before the group: only blanks between them (`for (...)` whose
                // body the group chooses).
                let before = e.start <= g.span.start
                    && src
                        .get(e.start..g.span.start)
                        .is_some_and(|t| t.trim().is_empty());
                // Among the groups whose branches open or close braces alone, an error anywhere
                // after one: read with every branch, the braces of all of them count, and the
                // grammar may meet the brace left open only where the file ends (an `if (...)
                // {` head in each branch of `#ifdef ENABLE_BF16` `#else` `#endif` in a host
                // launcher, then the file's explicit instantiations: errors at its last lines).
                let after = unbalanced_only && e.start >= g.span.end;
                overlaps || before || after
            })
        };
        // Inside a block of statements; elsewhere (file, namespace or class scope) only where the
        // other branches are host code: a conditional there may choose between whole definitions
        // (a header's CPU and GPU versions of its functions), and a device definition the grammar
        // does not read is one that no analysis, here or in the files that include this one, sees.
        // `blocks` are found once per tree: a node's parent costs a walk from the root, and
        // climbing from every group of a deeply nested file took seconds.
        // `in_function`: the same question answered from the text's braces, for a group the
        // grammar read no block around (`in_function_text`).
        let in_block = |i: usize, g: &Conditional| {
            in_function[i]
                || blocks
                    .iter()
                    .any(|b| b.start < g.span.start && g.span.start < b.end)
        };
        let others = |g: &Conditional| -> Vec<Range<usize>> {
            let k = kept(g);
            g.branches
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != k)
                .map(|(_, r)| r.clone())
                .collect()
        };
        let host_only = |g: &Conditional| {
            others(g)
                .into_iter()
                .all(|r| host_text(&src[r], space_macros))
        };
        let mut chosen: Vec<(&Conditional, bool)> = groups
            .iter()
            .enumerate()
            .filter(|&(i, g)| near(g) && (in_block(i, g) || host_only(g) || heads[i]))
            .map(|(i, g)| (g, split_heads[i]))
            .collect();
        // An error as wide as the file is near every group; the groups whose branches open or
        // close more braces than they close or open, or end in a statement's head whose body
        // follows the group (`#ifndef HIP` `if constexpr (D <= 256)` `#endif` `{...}`), are the
        // ones that can have caused it, and a group of whole statements (`return 2;` `#else`
        // `return 4;`) is better left to be read with its first branch by the compiler alone
        // than hidden from the analysis.
        if unbalanced_only {
            chosen.retain(|(g, _)| {
                g.branches.iter().any(|r| {
                    let text = &src[r.clone()];
                    brace_balance(text) != 0 || ends_in_statement_head(text)
                })
            });
        }
        // A group keeps its last branch where it has fewer than `keep + 1`: past every group's
        // branch count, the view is the one `keep - 1` gave, already parsed.
        if chosen.is_empty() || (keep > 0 && !chosen.iter().any(|(g, _)| g.branches.len() > keep)) {
            return None;
        }
        let mut bytes = view.to_vec();
        let mut hidden = Vec::new();
        let mut spans = Vec::new();
        for (g, split_head) in chosen {
            for r in g.directives.iter().cloned().chain(others(g)) {
                for b in &mut bytes[r] {
                    if *b != b'\n' {
                        *b = b' ';
                    }
                }
            }
            if split_head {
                // Blanked as the directive lines are: what the other heads hold (the same
                // function's name and parameters) is read in the first, and the body after
                // them is read, so no analysis needs to know they were there.
                continue;
            }
            let before = hidden.len();
            hidden.extend(
                others(g)
                    .into_iter()
                    .filter(|r| !src[r.clone()].trim().is_empty()),
            );
            if hidden.len() > before {
                spans.push(g.span.clone());
            }
        }
        Some(Reduced {
            view: bytes,
            hidden,
            groups: spans,
        })
    }
}

/// Whether `text`'s code ends with the head of a statement whose body comes after it: `if
/// (...)`, `for (...)`, `while (...)`, `switch (...)`, `else` or `do`.
fn ends_in_statement_head(text: &str) -> bool {
    let code = crate::lang::without_comments(text);
    let code = code.trim_end();
    let word_before = |end: usize| super::last_word(&code[..end]);
    if matches!(word_before(code.len()), "else" | "do") {
        return true;
    }
    if !code.ends_with(')') {
        return false;
    }
    // The `(` that the last `)` closes, and the word before it (`if constexpr (`: two).
    let mut depth = 0usize;
    let open = code.char_indices().rev().find_map(|(i, c)| {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        None
    });
    let Some(open) = open else {
        return false;
    };
    let mut word = word_before(open);
    if word == "constexpr" {
        let at = code[..open].trim_end().len() - word.len();
        word = word_before(at);
    }
    matches!(word, "if" | "for" | "while" | "switch")
}

/// Whether every branch of `g` is part of one declaration's head: no `;`, `{` or `}` and no
/// directive of its own (`#if USE_SHARED` `__global__ void __launch_bounds__(256)` `#else`
/// `__global__ void` `#endif` `k(...) {...}`, public hashing miners' kernels). Whole
/// definitions, which a file-scope conditional may choose between, hold braces; whole
/// declarations end with `;`. Read with its first branch, the definition is found, and the
/// analysis refuses it with the reason (`analysis::hidden`: a branch in the head) rather than
/// the kernel vanishing from the report.
fn head_part(g: &Conditional, src: &str) -> bool {
    g.branches.iter().all(|r| {
        let text = crate::lang::without_comments(&src[r.clone()]);
        !text.contains([';', '{', '}']) && !text.lines().any(|l| l.trim_start().starts_with('#'))
    }) && g.branches.iter().any(|r| !src[r.clone()].trim().is_empty())
}

/// Whether every branch of `g` is a whole device function's head with its body's opening brace
/// and nothing after it (`#ifdef WIDE` `__device__ void load(int *out, int *wide) {` `#else`
/// `__device__ void load(int *out) {` `#endif`, then one body: a public key-search program
/// writes its GPU helpers so). The grammar reads two heads and one body, and everything from
/// there to the end of the file was a syntax error (CP100): every launch after it was left as
/// written (CP101). Read with its first branch, the helper is one definition, and the other
/// heads are blanked as its directive lines are, not hidden text (`kept_branches`). Not kernels (`__global__`): a kernel's body is copied into its
/// wrappers, and would carry the other heads with it. A helper whose definition the
/// conditional crosses gets no copy of its own (`lang::unbalanced_conditional`).
fn split_device_head(g: &Conditional, src: &str) -> bool {
    g.branches.len() > 1
        && g.branches
            .iter()
            .all(|r| is_device_head_with_brace(&src[r.clone()]))
}

/// Whether `text` (comments aside) is a device function's head and its body's opening brace,
/// and nothing else: one `{`, last; no `;`, `}` or directive; `__device__` and not
/// `__global__` (`split_device_head`).
pub(super) fn is_device_head_with_brace(text: &str) -> bool {
    let code = crate::lang::without_comments(text);
    let code = code.trim();
    let Some(head) = code.strip_suffix('{') else {
        return false;
    };
    !head.contains([';', '{', '}'])
        && !code.lines().any(|l| l.trim_start().starts_with('#'))
        && crate::lang::has_word(head, "__device__")
        && !crate::lang::has_word(head, "__global__")
        && opens_function_body(head)
}

/// For each of `groups`, whether its `#if` line lies inside a function's body as the text's
/// braces say, counted with every conditional's first branch (as the preprocessor reads the
/// configuration that defines every name the `#if`s test). The tree's blocks answer this where
/// the grammar read the function; a conditional whose every branch opens a brace that closes
/// after its `#endif` (ggml's `mul_mat_f`: `if constexpr (...) {...} else {` and typedefs in
/// each branch) can leave the grammar no function at all, the whole file one error, and the
/// group then lies in no block of the tree.
///
/// A brace opens a function's body where the text before it, back to the last `;`, `{` or `}`,
/// ends with `)`, or with `)` and qualifiers (`const`, `noexcept`, `override`, a trailing
/// return type), and does not start a namespace, class or `extern "C"` block; anything inside
/// a function's body is inside it too. Comments, string and character literals and directive
/// lines (a `#define` of a brace) are skipped.
pub(super) fn in_function_text(src: &str, groups: &[Conditional]) -> Vec<bool> {
    let b = src.as_bytes();
    // What the scan skips: every directive line and every branch but a group's first.
    let mut skips: Vec<Range<usize>> = groups
        .iter()
        .flat_map(|g| {
            g.directives
                .iter()
                .cloned()
                .chain(g.branches.iter().skip(1).cloned())
        })
        .collect();
    skips.sort_by_key(|r| r.start);
    let mut starts: Vec<(usize, usize)> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.span.start, i))
        .collect();
    starts.sort_unstable();
    let mut out = vec![false; groups.len()];
    let mut next_start = starts.iter().peekable();
    let mut next_skip = skips.iter().peekable();
    // Open braces: whether each opens a function's body (or lies inside one).
    let mut open: Vec<bool> = Vec::new();
    let mut head = String::new();
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        while let Some(&&(at, g)) = next_start.peek() {
            if at > i {
                break;
            }
            out[g] = open.last().copied().unwrap_or(false);
            next_start.next();
        }
        if let Some(r) = next_skip.peek() {
            if r.start <= i {
                let end = r.end;
                next_skip.next();
                if end > i {
                    i = end;
                    continue;
                }
            }
        }
        let c = b[i];
        if line_start && c == b'#' {
            // A directive outside every group (`#define`, `#include`): to its last
            // continuation line's end.
            let line_end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            i = directive_end(b, line_end);
            continue;
        }
        if c == b'\n' {
            line_start = true;
            head.push(' ');
            i += 1;
            continue;
        }
        if !c.is_ascii_whitespace() {
            line_start = false;
        }
        if let Some(end) = past_comment_or_literal(src, i) {
            head.push(' ');
            i = end;
            continue;
        }
        match c {
            b'{' => {
                let inside = open.last().copied().unwrap_or(false);
                open.push(inside || opens_function_body(&head));
                head.clear();
            }
            b'}' => {
                open.pop();
                head.clear();
            }
            b';' => head.clear(),
            _ => head.push(c as char),
        }
        i += 1;
    }
    for &(_, g) in next_start {
        out[g] = open.last().copied().unwrap_or(false);
    }
    out
}

/// Opening braces minus closing ones in `text`, outside comments and literals.
fn brace_balance(text: &str) -> i64 {
    let b = text.as_bytes();
    let mut n = 0;
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = past_comment_or_literal(text, i) {
            i = end;
            continue;
        }
        match b[i] {
            b'{' => n += 1,
            b'}' => n -= 1,
            _ => {}
        }
        i += 1;
    }
    n
}

/// Where a comment, or a string or character literal, that starts at `i` ends (the index past
/// it; a line comment's newline is not part of it), or None where none starts there (a digit
/// separator, `1'000`, opens none: `parse::opens_literal`).
pub(super) fn past_comment_or_literal(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    match b[i] {
        b'/' if b.get(i + 1) == Some(&b'/') => Some(
            b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p),
        ),
        b'/' if b.get(i + 1) == Some(&b'*') => {
            Some(text[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2))
        }
        q @ (b'"' | b'\'') if super::opens_literal(b, i) => {
            Some((super::literal_end(b, i, q) + 1).min(b.len()))
        }
        _ => None,
    }
}

/// Whether `head`, the text before a `{` back to the last `;`, `{` or `}`, is a function's
/// head: it ends with `)`, or `)` then qualifiers or a trailing return type, and is no
/// namespace, class, enum or linkage block.
fn opens_function_body(head: &str) -> bool {
    let head = head.trim();
    let first = head
        .split(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .find(|w| !w.is_empty())
        .unwrap_or("");
    if matches!(
        first,
        "namespace" | "struct" | "class" | "union" | "enum" | "extern" | "typedef"
    ) || head.ends_with('=')
    {
        return false;
    }
    let Some(close) = head.rfind(')') else {
        return false;
    };
    let tail = &head[close + 1..];
    let tail = tail.split_once("->").map_or(tail, |(before, _)| before);
    tail.split_whitespace().all(|w| {
        matches!(
            w,
            "const" | "noexcept" | "override" | "final" | "mutable" | "volatile" | "&" | "&&"
        )
    })
}

/// The byte ranges of every `compound_statement` of `tree`, in one walk.
pub(super) fn compound_statements(tree: &Tree) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut cursor = tree.walk();
    'walk: loop {
        let node = cursor.node();
        if node.kind() == "compound_statement" {
            out.push(node.byte_range());
        }
        if cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'walk;
            }
        }
    }
    out
}

/// Whether `text` names nothing of device code, launches or macros: no CUDA execution or memory
/// space (nor a macro that stands for one: the file's, or any word that says `device`, `global`
/// or `kernel`), no built-in index, no barrier or block group, no `<<<`, no `#define`/`#undef`.
fn host_text(text: &str, space_macros: &super::SpaceMacros) -> bool {
    const DEVICE: &[&str] = &[
        "__global__",
        "__device__",
        "__host__",
        "__shared__",
        "__constant__",
        "__managed__",
        "blockIdx",
        "gridDim",
        "threadIdx",
        "blockDim",
        "__syncthreads",
        "sync",
        "this_thread_block",
        "define",
        "undef",
    ];
    if text.contains("<<<") {
        return false;
    }
    let mut words = text.split(|c: char| !(c == '_' || c.is_ascii_alphanumeric()));
    !words.any(|w| {
        let lower = w.to_ascii_lowercase();
        DEVICE.contains(&w)
            || space_macros.contains_key(w)
            || ["device", "global", "kernel"]
                .iter()
                .any(|s| lower.contains(s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A digit separator opens no character literal: read as one, `1'000` hid the rest of its
    /// line (a `{` there) from the brace count.
    #[test]
    fn digit_separators_open_no_literal() {
        assert_eq!(past_comment_or_literal("n = 1'000;", 5), None);
        assert_eq!(past_comment_or_literal("c = 'x';", 4), Some(7));
        assert_eq!(brace_balance("if (n > 1'000) {"), 1);
        assert_eq!(brace_balance("if (c == '{') {"), 1);
    }

    #[test]
    fn statement_heads_are_told_from_whole_statements() {
        for head in [
            "\n  if constexpr (W <= 256)\n",
            "  for (int i = 0; i < f(n); i++) // each row\n",
            "while (x)",
            "switch (kind)",
            "} else",
            "do",
        ] {
            assert!(ends_in_statement_head(head), "{head}");
        }
        for whole in [
            "  return f(x);\n",
            "  g(x)\n",
            "  if (x) y();\n",
            "  STATEMENT_MACRO(a, b)\n",
            "  pseudo_else",
            "  if con“stexpr",
            "  x = “y” (z)",
        ] {
            assert!(!ends_in_statement_head(whole), "{whole}");
        }
    }

    /// A statement's head alone in a group without `#else`, its block after the `#endif`
    /// (ggml's `#ifndef GGML_USE_HIP` `if constexpr (DKQ <= 256)` `#endif` `{...}`): among the
    /// groups that can have caused an error (the first pass), so that a file-wide error does
    /// not reduce every group of the file, whole statements and all, to its first branch.
    #[test]
    fn a_statement_head_alone_in_a_group_is_among_the_causes_of_an_error() {
        let src = "__device__ int lanes(int w) {\n#ifdef WIDE\n  return w / 2;\n#else\n  return w / 4;\n#endif\n}\n\
                   template <int W>\nvoid run(int* out) {\n#ifndef PORTABLE\n  if constexpr (W <= 256)\n#endif\n  {\n    out[0] = W;\n  }\n}\n";
        let mut parser = tree_sitter::Parser::new();
        parser
            .set_language(&crate::lang::language())
            .expect("grammar");
        let tree = parser.parse(src, None).expect("tree");
        assert!(
            tree.root_node().has_error(),
            "the grammar reads no head alone"
        );
        let space = crate::parse::SpaceMacros::default();
        let groups = FileGroups::new(src, &space);
        let blocks = compound_statements(&tree);
        let Reduced {
            view: bytes,
            hidden,
            groups: spans,
        } = groups
            .kept_branches(src.as_bytes(), &tree, &blocks, true, 0)
            .expect("the head's group is reduced in the first pass");
        assert!(hidden.is_empty(), "{hidden:?}");
        assert!(spans.is_empty(), "{spans:?}");
        let view = String::from_utf8(bytes).expect("utf-8");
        assert!(
            view.contains("#else"),
            "the helper's group is left alone:\n{view}"
        );
        assert!(!view.contains("#ifndef"), "{view}");
        assert!(
            !parser
                .parse(&view, None)
                .expect("tree")
                .root_node()
                .has_error(),
            "{view}"
        );
    }

    #[test]
    fn branches_in_effect_only_where_a_macro_is_defined() {
        let src = "#ifdef A\na\n#endif\n#if defined(B)\nb\n#else\nnot_b\n#endif\n\
                   #ifndef C\nnot_c\n#elif X > 1\nc_x\n#else\nc\n#endif\n\
                   #if defined(D) && E\nde\n#endif\n#if !defined( F ) // why\nnot_f\n\
                   #elif defined G\ng\n#endif\n";
        let mut found: Vec<(String, &str)> = defined_only_branches(src)
            .into_iter()
            .map(|(r, name)| (name, src[r].trim()))
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                ("A".to_string(), "a"),
                ("B".to_string(), "b"),
                ("C".to_string(), "c"),
                ("C".to_string(), "c_x"),
                ("F".to_string(), "g"),
                ("G".to_string(), "g"),
            ]
        );
    }

    #[test]
    fn groups_their_directives_and_branches() {
        let src = "a\n#ifdef X\nb\n#else\nc\n#endif\nd\n";
        let g = conditionals(src);
        assert_eq!(g.len(), 1);
        let text = |r: &Range<usize>| &src[r.clone()];
        assert_eq!(text(&g[0].span), "#ifdef X\nb\n#else\nc\n#endif");
        assert_eq!(
            g[0].branches.iter().map(text).collect::<Vec<_>>(),
            ["\nb\n", "\nc\n"]
        );
        assert_eq!(g[0].directives.len(), 3);
    }

    #[test]
    fn nested_groups_and_comments() {
        let src = "#if A\n#if B\nx\n#endif\n#elif C\ny\n#endif\n/*\n#if D\n*/\n";
        let g = conditionals(src);
        assert_eq!(g.len(), 2, "{g:?}");
        assert_eq!(&src[g[0].span.clone()], "#if B\nx\n#endif");
        assert_eq!(g[1].branches.len(), 2);
    }

    #[test]
    fn continued_directive_lines_are_one_directive() {
        let src = "#if defined(A) && \\\n    defined(B)\nx\n#else\ny\n#endif\n";
        let g = conditionals(src);
        assert_eq!(g.len(), 1);
        assert_eq!(&src[g[0].branches[0].clone()], "\nx\n");
    }

    #[test]
    fn a_statement_split_by_a_conditional_is_read_with_its_first_branch() {
        let src = "__global__ void k(float* o) {\n  for (int i = 0; i < 4; ++i)\n#ifdef A\n    o[i] += 1.0f;\n#else\n    o[i] += 2.0f;\n#endif\n}\n";
        let parsed = crate::parse::parse(src);
        assert!(!parsed.tree.root_node().has_error());
        let hidden: Vec<&str> = parsed.hidden.iter().map(|r| &src[r.clone()]).collect();
        assert_eq!(hidden, ["\n    o[i] += 2.0f;\n"]);
    }

    /// HeCBench's su3 verifies with `CMUL(a, b, c)` (a macro call without `;`) in one branch
    /// and an expression statement in the other: the second branch is read.
    #[test]
    fn a_first_branch_that_does_not_read_gives_way_to_the_second() {
        let src = "void check(float* a, float* b, float& c) {\n  for (int m = 0; m < 3; m++) {\n#ifdef OWN_COMPLEX\n    CMULSUM(a[m], b[m], c)\n#else\n    c += a[m] * b[m];\n#endif\n  }\n}\n";
        let parsed = crate::parse::parse(src);
        assert!(!parsed.tree.root_node().has_error());
        let hidden: Vec<&str> = parsed.hidden.iter().map(|r| &src[r.clone()]).collect();
        assert_eq!(hidden, ["\n    CMULSUM(a[m], b[m], c)\n"]);
    }

    /// Chai's partitioner: a dynamic branch chosen by `#ifdef` ends in `else`, and the static
    /// body follows the `#endif`; a function's `__device__` chosen by `#ifdef` before its head.
    /// Both read with the group's text, nothing hidden.
    #[test]
    fn a_group_without_else_is_read_with_its_text() {
        let src = "#ifdef GPU
__device__
#endif
inline int first(int* w) {
#ifdef DYN
    if (w[0] > 0) {
        __syncthreads();
        return w[1];
    } else
#endif
    {
        return blockIdx.x;
    }
}
";
        let parsed = crate::parse::parse(src);
        assert!(
            !parsed.tree.root_node().has_error(),
            "{}",
            parsed.tree.root_node().to_sexp()
        );
        assert!(parsed.hidden.is_empty(), "{:?}", parsed.hidden);
        let sexp = parsed.tree.root_node().to_sexp();
        assert!(sexp.contains("if_statement"), "{sexp}");
    }

    #[test]
    fn conditionals_outside_blocks_hide_host_code_only() {
        // A header's CPU and GPU versions of a function, the CPU one broken for the grammar:
        // hiding the GPU one would hide a reader of blockIdx from every analysis, so the GPU
        // one is read and the CPU one hidden. A host function's two heads may be read with the
        // first.
        let src = "#ifndef GPU_SIDE\nint first(int a,\n#else\n__device__ int first(int a) { return blockIdx.x + a; }\n#endif\n";
        let parsed = crate::parse::parse(src);
        let hidden: Vec<&str> = parsed.hidden.iter().map(|r| &src[r.clone()]).collect();
        assert_eq!(hidden, ["\nint first(int a,\n"]);
        let src =
            "#ifndef GPU_SIDE\nint first(int a,\n#else\n__device__ int first(int a,\n#endif\n";
        let parsed = crate::parse::parse(src);
        assert!(
            parsed.hidden.is_empty(),
            "no device text is hidden: {:?}",
            parsed.hidden
        );
        let src = "#ifdef VEC\ndouble run(std::vector<int>& a,\n#else\ndouble run(int* a,\n#endif\n    int n) { return a[0] * n; }\n";
        let parsed = crate::parse::parse(src);
        assert_eq!(parsed.hidden.len(), 1, "{:?}", parsed.hidden);
    }

    /// ggml's `mul_mat_f`: every branch of a nested conditional opens a brace (`if constexpr
    /// (...) {...} else {` and typedefs) that one `}` after the `#endif` closes. The grammar
    /// reads no function in the file at all, so no block of its tree holds the group; the
    /// text's braces place it in the kernel's body, and the file reads with the first branch.
    /// A group of whole statements in a helper (`return 2;` `#else` `return 4;`) stays read by
    /// its text, not hidden.
    #[test]
    fn branches_that_each_open_the_body_closed_after_the_group_are_read_with_the_first() {
        let src = "__device__ constexpr int pad();
template <typename T, int rows>
__global__ void mm(const T* x, float* y, int n) {
#if defined(MMA)
#if defined(WMMA)
    if constexpr (rows != 16) {NO_DEVICE_CODE;} else {
    typedef int tile_a;
#else
    if constexpr (rows != 32) {NO_DEVICE_CODE;} else {
    typedef long tile_a;
#endif
    tile_a t = 0;
    if (threadIdx.x >= n) {
        return;
    }
    y[blockIdx.x * 32 + threadIdx.x] = x[threadIdx.x] + t + pad();
    }
#else
    NO_DEVICE_CODE;
#endif
}
__device__ constexpr int pad() {
#if defined(WIDE)
    return 2;
#else
    return 4;
#endif
}
__global__ void after(float* y) { y[blockIdx.x] = 1.0f; }
";
        let parsed = crate::parse::parse(src);
        let root = parsed.tree.root_node();
        assert!(!root.has_error(), "{}", root.to_sexp());
        let hidden: Vec<&str> = parsed
            .hidden
            .iter()
            .map(|r| src[r.clone()].trim())
            .collect();
        assert_eq!(
            hidden,
            [
                "if constexpr (rows != 32) {NO_DEVICE_CODE;} else {\n    typedef long tile_a;",
                "NO_DEVICE_CODE;"
            ]
        );
    }

    #[test]
    fn the_text_places_groups_in_function_bodies_not_in_namespaces_or_classes() {
        let src = "namespace a {
#if A
int x;
#endif
struct S {
#if B
  int y;
#endif
  int f() const {
#if C
    return 1;
#endif
  }
};
}
extern \"C\" {
#if D
#endif
}
auto g(int v) -> int {
  const char* s = \"{\"; // {
#if E
  return v;
#endif
}
int table[] = {
#if F
  1,
#endif
};
";
        let groups = conditionals(src);
        let inside = in_function_text(src, &groups);
        let by_name: Vec<(&str, bool)> = groups
            .iter()
            .zip(inside)
            .map(|(g, i)| (&src[g.span.start + 4..g.span.start + 5], i))
            .collect();
        let mut by_name = by_name;
        by_name.sort();
        assert_eq!(
            by_name,
            [
                ("A", false),
                ("B", false),
                ("C", true),
                ("D", false),
                ("E", true),
                ("F", false)
            ]
        );
    }
}
