//! The walk over a translation unit that finds its pieces: kernels, device helpers, their
//! declarations, launch sites and macros (and, before each function, its pragmas).

use super::macros::{self, MacroFacts};
use super::pragmas;
use super::sites::{
    FunctionSite, GridConstant, LaunchSite, Linkage, Param, Qualified, TemplateParam,
};
use crate::diagnostics::{Code, Diagnostic};
use crate::lang::{self, kinds, text};
use crate::parse;
use crate::vocab;
use std::collections::BTreeMap;
use std::ops::Range;
use tree_sitter::Node;

pub struct Found<'t> {
    pub kernels: Vec<FunctionSite<'t>>,
    /// Kernel definitions that a syntax error hides from the parse (`lost_definitions`), then
    /// those that a macro's body holds (`macro_kernels`).
    pub lost_kernels: Vec<LostDefinition>,
    /// Device functions that a syntax error hides from the parse (`lost_definitions` with
    /// `__device__`): what they read or call is unknown.
    pub unread_helpers: Vec<LostDefinition>,
    pub helpers: Vec<FunctionSite<'t>>,
    pub declarations: Vec<FunctionSite<'t>>,
    pub launches: Vec<LaunchSite<'t>>,
    /// Macro bodies with a launch in them (`<<<`), which the tree does not read as code.
    pub macro_launches: Vec<MacroLaunches>,
    pub macros: BTreeMap<String, MacroFacts>,
    pub diagnostics: Vec<Diagnostic>,
    pub include_at: usize,
}

/// A `#define` whose body holds a launch: its name and the body's bytes.
#[derive(Clone, Debug)]
pub struct MacroLaunches {
    pub name: String,
    /// A function-like macro's parameters (`...` for a variadic one).
    pub params: Vec<String>,
    pub body: Range<usize>,
}

/// Error ranges as labels can show them: within the text and on character boundaries (a
/// MISSING node, widened to one byte, may sit at the very end or before a multi-byte
/// character). An empty text keeps its empty range.
fn labelable(ranges: Vec<std::ops::Range<usize>>, src: &str) -> Vec<std::ops::Range<usize>> {
    let floor = |mut i: usize| {
        i = i.min(src.len());
        while !src.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let ceil = |mut i: usize| {
        i = i.min(src.len());
        while !src.is_char_boundary(i) {
            i += 1;
        }
        i
    };
    ranges
        .into_iter()
        .map(|r| {
            let start = floor(r.start);
            let end = ceil(r.end.max(start));
            // Past the end: label the last character instead.
            if start == end && start == src.len() && start > 0 {
                floor(start - 1)..end
            } else {
                start..end
            }
        })
        .collect()
}

/// The kernels, helpers, launches and macros of `src` as its parse read them, with the
/// macros the masked view read (`parse::Parsed`: execution spaces, `__grid_constant__`, kernel
/// attributes) and those of the files it includes (`included_macros`, name and replacement:
/// a type macro that holds `__global__`, `RAFT_KERNEL k(...)`).
pub fn scan<'t>(
    parsed: &'t parse::Parsed,
    src: &'t str,
    included_macros: &[(String, String)],
) -> Found<'t> {
    let root = parsed.tree.root_node();
    let errors = labelable(parse::error_ranges(root), src);
    let mut s = Scanner {
        src,
        errors: &errors,
        included_macros,
        space_macros: &parsed.space_macros,
        grid_constant_macros: &parsed.grid_constant_macros,
        attribute_words: std::iter::once("__maxnreg__")
            .chain(parsed.attribute_macros.iter().map(String::as_str))
            .collect(),
        ancestors: Vec::new(),
        found: Found {
            kernels: Vec::new(),
            lost_kernels: Vec::new(),
            unread_helpers: Vec::new(),
            helpers: Vec::new(),
            declarations: Vec::new(),
            launches: Vec::new(),
            macro_launches: Vec::new(),
            macros: BTreeMap::new(),
            diagnostics: Vec::new(),
            include_at: 0,
        },
    };
    s.found.include_at = include_position(root, src);
    s.walk(&mut root.walk(), &mut Vec::new());
    s.found.macros = macros::close(s.found.macros);
    if root.has_error() {
        s.found.lost_kernels = lost_definitions(root, src, &s.found, "__global__");
        s.found.unread_helpers = lost_definitions(root, src, &s.found, "__device__");
    }
    // With or without a syntax error: a macro the run cannot see may spell a space the grammar
    // reads as a return type (`LIB_DEVICE_INT f(...)`), a host function to the scan.
    for u in unmarked_block_index_readers(root, src, &s.found) {
        if !s.found.unread_helpers.iter().any(|l| l.name == u.name) {
            s.found.unread_helpers.push(u);
        }
    }
    let in_macros = macro_kernels(root, src, &parsed.space_macros);
    s.found.lost_kernels.extend(in_macros);
    for r in &errors {
        // An error that begins inside a kernel is that kernel's (CP001); one that begins
        // before a kernel and takes it in (`#ifdef` initializers that each open a brace) is the
        // file's, and the launches it holds get CP101 for it: reported, so that they point at
        // something.
        let inside_kernel = s.found.kernels.iter().any(|k| {
            let kernel = k.outer.start_byte()..k.func.end_byte();
            overlaps(&kernel, r) && r.start >= kernel.start
        });
        if !inside_kernel {
            s.found.diagnostics.push(
                Diagnostic::new(
                    Code::ParseError,
                    "syntax error: this region is left as it is",
                )
                .label(r.clone(), "not understood here"),
            );
        }
    }
    s.found
}

/// A parameter passed by value under a named type (`AllocatorT a`, `Params p`, `ns::Pool<T>
/// pool`, `const Tensor<T> t`): the declarator is the name alone, and no qualifier but one
/// `const` (no `volatile`) nor an attribute stands beside the type. Such a type may have a
/// destructor, which the shared body must not run, or copy only from a non-const reference
/// (`Param::value_type`, `ValueType`).
fn by_value_named_type(p: Node, decl: Option<Node>, src: &str) -> Option<super::sites::ValueType> {
    let k = kinds();
    let ty = p.child_by_field_id(crate::lang::fields().r#type)?;
    let named_type = ty.kind_id() == k.type_identifier
        || ty.kind_id() == k.template_type
        || ty.kind_id() == k.qualified_identifier;
    let plain = decl.is_some_and(|d| d.kind_id() == k.identifier);
    let mut c = p.walk();
    let qualifiers: Vec<Node> = p
        .children(&mut c)
        .filter(|ch| ch.kind_id() == k.type_qualifier || ch.kind_id() == k.attribute_specifier)
        .collect();
    let constant = (qualifiers.len() == 1 && text(qualifiers[0], src) == "const")
        .then(|| qualifiers[0].byte_range());
    (named_type && plain && (qualifiers.is_empty() || constant.is_some())).then(|| {
        super::sites::ValueType {
            range: ty.byte_range(),
            text: text(ty, src).to_string(),
            constant,
        }
    })
}

/// A definition that the parse does not hold as one: its `__global__` (a kernel) or
/// `__device__` (a device function) lies in a region a syntax error took (preprocessor
/// branches that each open a brace, for one), so no function node covers it. A kernel is left
/// as it is and reported refused (CP001), so that it is not silently missing from the report; a
/// device function counts as unknown (`Found::unread_helpers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostDefinition {
    pub name: String,
    /// The name's bytes.
    pub at: Range<usize>,
    /// The macro whose body holds the definition (`macro_kernels`), or none: a syntax error
    /// hides it.
    pub in_macro: Option<String>,
}

/// Every `keyword` (`__global__`, `__device__`) of the text that no kernel, helper or
/// declaration of `found` covers, outside comments, literals and macro definitions, and that
/// begins a definition as text reads it (`lost_definition`).
fn lost_definitions(root: Node, src: &str, found: &Found, keyword: &str) -> Vec<LostDefinition> {
    let keyword_len = keyword.len();
    // Declarations are not enough: `__global__ void k(int* p) OPEN`, OPEN a macro for `{`,
    // reads as one (a prototype ends with `;`, which `lost_definition` never takes). Nor a
    // function's body: a definition whose braces do not pair when every preprocessor branch is
    // read swallows the definitions after it, and a function holds no other definition.
    let covered: Vec<Range<usize>> = found
        .kernels
        .iter()
        .chain(&found.helpers)
        .map(|f| {
            // A device function inside a body is a local class's member, which the parse read.
            let end = if keyword == "__global__" {
                f.body.start_byte()
            } else {
                f.outer.end_byte()
            };
            f.outer.start_byte()..end
        })
        .collect();
    let mut lost = Vec::new();
    for i in lang::word_indices(src, keyword) {
        let end = i + keyword_len;
        if covered.iter().any(|r| r.contains(&i)) {
            continue;
        }
        if not_code(root, i, end) {
            continue;
        }
        if let Some(k) = lost_definition(src, end, &found.macros) {
            lost.push(k);
        }
    }
    lost
}

/// The index of the `(` that matches the `)` just before `end` (`bytes[end - 1]`).
fn opening_paren(bytes: &[u8], end: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut k = end;
    loop {
        k = k.checked_sub(1)?;
        match bytes[k] {
            b')' => depth += 1,
            b'(' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
}

/// Whether bytes `at..end` lie in a comment, a literal or a macro's definition (or in no node
/// at all): no code of the function around them.
fn not_code(root: Node, at: usize, end: usize) -> bool {
    let Some(token) = root.descendant_for_byte_range(at, end) else {
        return true;
    };
    std::iter::successors(Some(token), |n| n.parent()).any(|n| {
        matches!(
            n.kind(),
            "comment" | "string_literal" | "raw_string_literal" | "char_literal"
        ) || n.kind_id() == kinds().preproc_def
            || n.kind_id() == kinds().preproc_function_def
    })
}

/// Definitions that read blockIdx or gridDim but that no kernel or helper of `found` covers: a
/// device function whose execution space the text spells with a macro the run cannot see
/// (`LIB_DEVICE int row(int w) { return blockIdx.x * w; }`, the macro in a header not given
/// with `-I`), which the grammar then reads as a syntax error or a host function. Only a
/// device function reads the block index, so each counts as a device function hidden from
/// the analysis (`Found::unread_helpers`), and a kernel calling it is refused rather than
/// transformed with a call that reads the hardware's index. The name is the word before the
/// parameter list in front of the innermost enclosing `{` that follows one (`if (...) {` and
/// the like skipped).
fn unmarked_block_index_readers(root: Node, src: &str, found: &Found) -> Vec<LostDefinition> {
    let covered: Vec<Range<usize>> = found
        .kernels
        .iter()
        .chain(&found.helpers)
        .map(|f| f.outer.byte_range())
        .collect();
    let bytes = src.as_bytes();
    let mut out: Vec<LostDefinition> = Vec::new();
    let reads = lang::word_indices(src, "blockIdx").chain(lang::word_indices(src, "gridDim"));
    for i in reads {
        if covered.iter().any(|r| r.contains(&i)) {
            continue;
        }
        if not_code(root, i, i + 1) {
            continue;
        }
        if let Some(d) = enclosing_definition(bytes, i) {
            if !out.iter().any(|o| o.name == d.name) {
                out.push(d);
            }
        }
    }
    out
}

/// The function whose body holds byte `at`, as text reads it: the innermost unmatched `{`
/// before `at` preceded by a parameter list (qualifiers such as `const` between) and a name
/// that is no statement keyword; an enclosing block of a statement goes on outward.
fn enclosing_definition(bytes: &[u8], at: usize) -> Option<LostDefinition> {
    let word = |b: u8| b == b'_' || b.is_ascii_alphanumeric();
    let mut i = at;
    loop {
        // The innermost unmatched `{` before i.
        let mut depth = 0usize;
        let open = loop {
            i = i.checked_sub(1)?;
            match bytes[i] {
                b'}' => depth += 1,
                b'{' if depth == 0 => break i,
                b'{' => depth -= 1,
                _ => {}
            }
        };
        // Back over blanks, qualifier words and whole directive lines (`noexcept` under an
        // `#ifdef`) to a `)`.
        let mut j = open;
        loop {
            while j > 0 && bytes[j - 1].is_ascii_whitespace() {
                j -= 1;
            }
            let line = bytes[..j]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |n| n + 1);
            if bytes[line..j].trim_ascii_start().starts_with(b"#") {
                j = line;
                continue;
            }
            let end = j;
            while j > 0 && word(bytes[j - 1]) {
                j -= 1;
            }
            if j == end {
                break;
            }
            if !matches!(
                std::str::from_utf8(&bytes[j..end]).unwrap_or(""),
                "const" | "noexcept" | "override" | "final" | "volatile"
            ) {
                j = end;
                break;
            }
        }
        if j == 0 || bytes[j - 1] != b')' {
            continue;
        }
        // The matching `(`, then the name before it.
        let paren = opening_paren(bytes, j)?;
        let mut end = paren;
        while end > 0 && bytes[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        let mut start = end;
        while start > 0 && word(bytes[start - 1]) {
            start -= 1;
        }
        let name = std::str::from_utf8(&bytes[start..end]).unwrap_or("");
        let statement = matches!(
            name,
            "if" | "for" | "while" | "switch" | "catch" | "return" | "sizeof" | ""
        );
        if statement || name.as_bytes()[0].is_ascii_digit() {
            continue;
        }
        return Some(LostDefinition {
            name: name.to_string(),
            at: start..end,
            in_macro: None,
        });
    }
}

/// After an opening parenthesis at `i`: the index past its closing one, or none where a brace
/// or `;` comes first.
fn past_parens(bytes: &[u8], i: usize) -> Option<usize> {
    past_closing(bytes, i, b'(', b')')
}

/// After a `<` at `i`: the index past its matching `>`, or none where a brace or `;` comes
/// first (a comparison, not template arguments).
fn past_angles(bytes: &[u8], i: usize) -> Option<usize> {
    past_closing(bytes, i, b'<', b'>')
}

/// After `open` at `i`: the index past the `close` that matches it, or none where a brace or
/// `;` comes first.
fn past_closing(bytes: &[u8], mut i: usize, open: u8, close: u8) -> Option<usize> {
    let mut depth = 0usize;
    while i < bytes.len() {
        match bytes[i] {
            b if b == open => depth += 1,
            b if b == close => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b'{' | b'}' | b';' => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

/// Reads `src` after a `__global__` ending at `from` as a definition's head: words (the return
/// type, qualifiers, `__launch_bounds__(...)`, the name), a parameter list, then `{` or a
/// macro of the file whose replacement opens with one. The kernel's name is the last word
/// before the parameter list.
fn lost_definition(
    src: &str,
    from: usize,
    macros: &BTreeMap<String, MacroFacts>,
) -> Option<LostDefinition> {
    let bytes = src.as_bytes();
    let word = |b: u8| b == b'_' || b.is_ascii_alphanumeric();
    let (at, mut i) = kernel_head(src, from, src.len(), false)?;
    // Blanks, whole preprocessor lines (`#endif` after a head chosen by `#ifdef`) and what may
    // stand between the parameters and the body (`const`, `noexcept(...)`, also under an
    // `#ifdef` of its own).
    loop {
        while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        if bytes.get(i) == Some(&b'#') {
            while let Some(&b) = bytes.get(i) {
                i += 1;
                if b == b'\\' && bytes.get(i) == Some(&b'\n') {
                    i += 1;
                } else if b == b'\n' {
                    break;
                }
            }
            continue;
        }
        let end = (i..bytes.len())
            .find(|&j| !word(bytes[j]))
            .unwrap_or(bytes.len());
        if !matches!(
            &src[i..end],
            "const" | "noexcept" | "throw" | "override" | "final" | "volatile"
        ) {
            break;
        }
        i = end;
        while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        if bytes.get(i) == Some(&b'(') {
            i = past_parens(bytes, i)?;
        }
    }
    let opens = bytes.get(i) == Some(&b'{') || {
        let end = (i..bytes.len())
            .find(|&j| !word(bytes[j]))
            .unwrap_or(bytes.len());
        macros
            .get(&src[i..end])
            .is_some_and(|m| m.text.trim_start().starts_with('{'))
    };
    opens.then(|| LostDefinition {
        name: src[at.clone()].to_string(),
        at,
        in_macro: None,
    })
}

/// Reads `src[..end]` after a `__global__` ending at `from` as a kernel's head up to its
/// parameter list: words (the return type, qualifiers, `__launch_bounds__(...)`, the name),
/// then the list. Returns the name (the last word before the list) and the index past the
/// list's `)`. In a macro's body (`in_macro`) a name may hold token pastes (`name##_kernel`)
/// and line continuations read as blanks; elsewhere a `#` ends the head.
fn kernel_head(
    src: &str,
    from: usize,
    end: usize,
    in_macro: bool,
) -> Option<(Range<usize>, usize)> {
    let bytes = &src.as_bytes()[..end];
    let word = |b: u8| b == b'_' || b.is_ascii_alphanumeric();
    let paste =
        |i: usize| in_macro && bytes.get(i) == Some(&b'#') && bytes.get(i + 1) == Some(&b'#');
    let blank = |b: u8| b.is_ascii_whitespace() || (in_macro && b == b'\\');
    let mut i = from;
    let mut name: Option<Range<usize>> = None;
    loop {
        let &b = bytes.get(i)?;
        if word(b) || paste(i) {
            let start = i;
            loop {
                if bytes.get(i).is_some_and(|&b| word(b)) {
                    i += 1;
                } else if paste(i) {
                    i += 2;
                } else {
                    break;
                }
            }
            if lang::KERNEL_ATTRIBUTE_CALLS.contains(&&src[start..i]) {
                while bytes.get(i).is_some_and(|&b| blank(b)) {
                    i += 1;
                }
                if bytes.get(i) == Some(&b'(') {
                    i = past_parens(bytes, i)?;
                }
            } else {
                name = Some(start..i);
                // A template's arguments after the name (`k<T>` of a specialization) are not
                // a name of their own.
                let mut j = i;
                while bytes.get(j).is_some_and(|&b| blank(b)) {
                    j += 1;
                }
                if bytes.get(j) == Some(&b'<') {
                    i = past_angles(bytes, j)?;
                }
            }
            continue;
        }
        match b {
            b'(' => break,
            b'{' | b'}' | b';' | b'=' | b'#' => return None,
            _ => i += 1,
        }
    }
    let at = name?;
    Some((at, past_parens(bytes, i)?))
}

/// Kernels that a macro's body defines (`#define UNARY(name, op) __global__ void
/// name##_kernel(...) { ... }`, or only the head: `#define HEAD(name) __global__ void
/// name(float* x)`, its uses followed by the body). The grammar reads a macro's body as text,
/// and each use expands to a kernel the rewrite never sees: the kernels are left as they are
/// and reported (CP007), so that no kernel is silently missing from the report. A `__global__`
/// (or a macro that stands for it, `space_macros`) in a body counts where what follows reads
/// as a head (`macro_kernel_head`): a body that is only an execution space (`#define GLOBAL
/// __global__`) or a declaration (ending with `;`) defines none.
fn macro_kernels(root: Node, src: &str, space_macros: &parse::SpaceMacros) -> Vec<LostDefinition> {
    if !src.contains("define") {
        return Vec::new(); // no macro, nothing to read (most files of a tree)
    }
    let k = kinds();
    let word = |b: u8| b == b'_' || b.is_ascii_alphanumeric();
    let keywords = std::iter::once("__global__").chain(
        space_macros
            .iter()
            .filter(|(_, words)| words.iter().any(|w| w == "__global__"))
            .map(|(name, _)| name.as_str()),
    );
    let mut found: Vec<LostDefinition> = Vec::new();
    for keyword in keywords {
        for i in lang::word_indices(src, keyword) {
            let end = i + keyword.len();
            let Some(token) = root.descendant_for_byte_range(i, end) else {
                continue;
            };
            let Some(def) = std::iter::successors(Some(token), |n| n.parent())
                .find(|n| n.kind_id() == k.preproc_def || n.kind_id() == k.preproc_function_def)
            else {
                continue;
            };
            let fields = lang::fields();
            let (Some(name), Some(value)) = (
                def.child_by_field_id(fields.name),
                def.child_by_field_id(fields.value),
            ) else {
                continue;
            };
            if !value.byte_range().contains(&i) {
                continue;
            }
            // `template __global__ void k<T>(T*)`: an explicit instantiation, whose uses
            // instantiate a kernel defined elsewhere (`template <...>` or `template <>` before
            // `__global__` is a definition: the word before it is `>`).
            let before = src[value.start_byte()..i]
                .trim_end_matches(|c: char| c.is_ascii_whitespace() || c == '\\');
            if before.ends_with("template")
                && !before[..before.len() - "template".len()]
                    .bytes()
                    .last()
                    .is_some_and(word)
            {
                continue;
            }
            if let Some(at) = macro_kernel_head(src, end, value.end_byte()) {
                if !found.iter().any(|f| f.at == at) {
                    found.push(LostDefinition {
                        name: src[at.clone()].to_string(),
                        at,
                        in_macro: Some(text(name, src).to_string()),
                    });
                }
            }
        }
    }
    found.sort_by_key(|f| f.at.start);
    found
}

/// Reads a macro body's text after its `__global__` (ending at `from`, the body ending at
/// `end`) as a kernel's head (`kernel_head`), then `{` or the body's end (a head whose uses
/// give the body). The kernel's name is as written, pastes included.
fn macro_kernel_head(src: &str, from: usize, end: usize) -> Option<Range<usize>> {
    let bytes = &src.as_bytes()[..end];
    let (at, mut i) = kernel_head(src, from, end, true)?;
    while bytes
        .get(i)
        .is_some_and(|&b| b.is_ascii_whitespace() || b == b'\\')
    {
        i += 1;
    }
    (i == bytes.len() || bytes[i] == b'{').then_some(at)
}

/// The launch `call` (a call with `<<<...>>>`) as the rewrite needs it; `errors`: the parse's
/// error ranges (a launch inside one is left as it is).
pub(crate) fn launch_site<'t>(
    call: Node<'t>,
    src: &str,
    errors: &[Range<usize>],
    in_device: bool,
) -> Option<LaunchSite<'t>> {
    let k = kinds();
    let callee = call.child_by_field_id(crate::lang::fields().function)?;
    let args = call.child_by_field_id(crate::lang::fields().arguments)?;
    let mut c = call.walk();
    let syntax = call
        .named_children(&mut c)
        .find(|n| n.kind_id() == k.kernel_call_syntax)?;
    let mut cc = syntax.walk();
    let config: Vec<Node> = syntax
        .named_children(&mut cc)
        .filter(|n| n.kind_id() != k.comment)
        .collect();
    // `kernel<<<...>>>` through a local variable that holds a kernel's address launches the
    // name it was initialized with (kernel_pointer.rs).
    let resolved = (callee.kind_id() == k.identifier)
        .then(|| super::kernel_pointer::resolve(call, callee, src))
        .flatten();
    let through_variable = resolved.map(|_| text(callee, src).to_string());
    let pointer_object = resolved.is_none()
        && callee.kind_id() == k.identifier
        && super::kernel_pointer::is_object(call, callee, src);
    let callee = resolved.unwrap_or(callee);
    // Peel `ns::` qualifiers and template arguments down to the name.
    let mut name_node = callee;
    let mut template_args = None;
    loop {
        if name_node.kind_id() == k.qualified_identifier {
            name_node = name_node.child_by_field_id(crate::lang::fields().name)?;
        } else if name_node.kind_id() == k.template_function {
            template_args = name_node.child_by_field_id(crate::lang::fields().arguments);
            name_node = name_node.child_by_field_id(crate::lang::fields().name)?;
        } else {
            break;
        }
    }
    if name_node.kind_id() != k.identifier {
        return None;
    }
    let arg_count = lang::count_named(args);
    let in_error = errors.iter().any(|r| overlaps(&call.byte_range(), r));
    Some(LaunchSite {
        call,
        name: text(name_node, src).to_string(),
        qualifier: src[callee.start_byte()..name_node.start_byte()].to_string(),
        template_args,
        config,
        args,
        arg_count,
        in_device_code: in_device,
        in_error,
        through_variable,
        pointer_object,
    })
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Where a kernel's CP001 points: the first error that starts inside its definition `def`,
/// else the part inside it of one that starts earlier, else the whole definition.
fn error_label(def: &Range<usize>, errors: &[Range<usize>]) -> Range<usize> {
    errors
        .iter()
        .find(|r| def.contains(&r.start))
        .cloned()
        .or_else(|| {
            errors
                .iter()
                .find(|r| overlaps(def, r))
                .map(|r| r.start.max(def.start)..r.end.min(def.end))
        })
        .unwrap_or(def.clone())
}

/// After the comments that open the file (licence headers stay first).
fn include_position(root: Node, src: &str) -> usize {
    // After a byte order mark: one is skipped only at the very start of a file.
    let mut at = if src.starts_with('\u{feff}') { 3 } else { 0 };
    let mut c = root.walk();
    for child in root.children(&mut c) {
        if child.kind_id() != kinds().comment {
            break;
        }
        at = src[child.end_byte()..]
            .find('\n')
            .map_or(src.len(), |i| child.end_byte() + i + 1);
    }
    at
}

struct Scanner<'t, 'e> {
    src: &'t str,
    errors: &'e [Range<usize>],
    /// The included files' macros (`Options::known_macros`), name and replacement.
    included_macros: &'e [(String, String)],
    /// Execution-space macros (`parse::execution_space_macros`) and the words they stand for.
    space_macros: &'e parse::SpaceMacros,
    /// Macros that stand for `__grid_constant__` (`parse::grid_constant_macros`).
    grid_constant_macros: &'e [String],
    /// The kernel attributes the masked view blanks in a head: `__maxnreg__`, and the macros
    /// that stand for it or for `__launch_bounds__` (`parse::attribute_macros`).
    attribute_words: Vec<&'e str>,
    found: Found<'t>,
    /// The nodes above the walk's current one, innermost last (`Node::parent` searches from
    /// the root every time; the walk knows them for free).
    ancestors: Vec<Node<'t>>,
}

impl<'t> Scanner<'t, '_> {
    /// Pre-order over the tree with one cursor, tracking the namespace and whether we are in
    /// device code. Iterative (an explicit stack of levels), so that no nesting depth of the
    /// input can exhaust the call stack.
    fn walk(&mut self, c: &mut tree_sitter::TreeCursor<'t>, scope: &mut Vec<String>) {
        // Per open level: whether it pushed a namespace, and the device context to restore.
        let mut levels: Vec<(bool, bool)> = Vec::new();
        let mut in_device = false;
        loop {
            let node = c.node();
            let (pushed, device, descend) = self.visit(node, scope, in_device);
            if descend && c.goto_first_child() {
                self.ancestors.push(node);
                levels.push((pushed, in_device));
                in_device = device;
                continue;
            }
            if pushed {
                scope.pop();
            }
            loop {
                if levels.is_empty() {
                    return;
                }
                if c.goto_next_sibling() {
                    break;
                }
                c.goto_parent();
                self.ancestors.pop();
                if let Some((pushed, outer)) = levels.pop() {
                    in_device = outer;
                    if pushed {
                        scope.pop();
                    }
                }
            }
        }
    }

    /// One node of the walk. Returns whether it pushed a namespace, whether its children are
    /// device code, and whether to walk into them.
    fn visit(
        &mut self,
        node: Node<'t>,
        scope: &mut Vec<String>,
        in_device: bool,
    ) -> (bool, bool, bool) {
        let k = kinds();
        let id = node.kind_id();
        let mut device = in_device;
        let mut pushed = false;
        if id == k.preproc_def || id == k.preproc_function_def {
            self.record_macro(node);
        } else if id == k.namespace_definition {
            let name = node
                .child_by_field_id(crate::lang::fields().name)
                .map(|n| text(n, self.src).to_string());
            scope.push(name.unwrap_or_default());
            pushed = true;
        } else if let Some(space) = cluster_split(node, self.src) {
            // `__global__ void __cluster_dims__(2, 1, 1) k(...) {...}`: the grammar reads the
            // attribute as a declaration of its own and `k` as a function without a type.
            if let Some(mut site) = self.function_site(node, scope, space) {
                if let Some(decl) = node.prev_sibling() {
                    site.outer = decl;
                }
                self.found.kernels.push(site);
            }
            device = true;
        } else if id == k.function_definition || id == k.declaration {
            let space = execution_space(
                node,
                self.src,
                &self.found.macros,
                self.included_macros,
                self.space_macros,
                &self.attribute_words,
            );
            let is_device = space.global || space.device;
            device |= is_device;
            let global = space.global;
            if let Some(site) = self.function_site(node, scope, space) {
                if id == k.function_definition {
                    if global {
                        self.found.kernels.push(site);
                    } else {
                        self.found.helpers.push(site);
                    }
                } else if is_device {
                    self.found.declarations.push(site);
                }
            }
        } else if id == k.kernel_call_syntax {
            if let Some(l) = self
                .ancestors
                .last()
                .copied()
                .and_then(|call| self.launch_site(call, in_device))
            {
                self.found.launches.push(l);
            }
        }
        // Bodies of device functions are analysed on their own (analysis::body); nothing in
        // them is rewritten through the scan, so skip them here.
        let device_body = id == k.function_definition && device && !in_device;
        (pushed, device, !device_body)
    }

    fn function_site(
        &mut self,
        func: Node<'t>,
        scope: &[String],
        space: Space<'t>,
    ) -> Option<FunctionSite<'t>> {
        let k = kinds();
        if !(space.global || space.device) {
            return None;
        }
        let declarator = find_function_declarator(func)?;
        let name_node = declarator
            .child_by_field_id(crate::lang::fields().declarator)
            .and_then(lang::declarator_name)?;
        let params = declarator.child_by_field_id(crate::lang::fields().parameters)?;
        let mut outer = func;
        let mut template = None;
        let mut linkage = None;
        let n = self.ancestors.len();
        if let Some(&p) = self.ancestors.last() {
            if p.kind_id() == k.template_declaration {
                template = Some(p);
                outer = p;
            } else if p.kind_id() == k.linkage_specification {
                linkage = Some(Linkage {
                    node: p,
                    braced: false,
                });
                outer = p;
            } else if p.kind_id() == k.declaration_list {
                if let Some(l) = n
                    .checked_sub(2)
                    .map(|i| self.ancestors[i])
                    .filter(|l| l.kind_id() == k.linkage_specification)
                {
                    linkage = Some(Linkage {
                        node: l,
                        braced: true,
                    });
                }
            }
        }
        let mut problems = Vec::new();
        // `operator ()` and `operator()` alike.
        let name: String = text(name_node, self.src)
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        // In front of the definition but inside its template declaration: a macro the file
        // cannot read between `template <...>` and the head (`C10_LAUNCH_BOUNDS_1(256)
        // __global__ void k(...)` without the header that defines it). The generated kernels
        // copy the template's text, and each copy of the error made the output parse worse
        // than the input (CP013): the whole file was left as written.
        let head_error = (outer.id() != func.id())
            .then(|| outer.start_byte()..func.start_byte())
            .and_then(|head| {
                // One that begins there: a region that begins before the declaration and
                // spans it (a conditional's unread brace far above) is not the head's.
                self.errors
                    .iter()
                    .find(|r| head.contains(&r.start))
                    .cloned()
            });
        if let Some(range) = head_error {
            problems.push(
                Diagnostic::new(
                    Code::ParseErrorInKernel,
                    format!("`{name}` has a syntax error in its head; it is left as it is"),
                )
                .label(range, "not understood here")
                .help("a macro there is read from its definition: give `cupreempt` the folder of the header that defines it (`-I`, as the compiler gets it)"),
            );
        } else if func.has_error() {
            // Inside the kernel: an `#ifdef` that splits a block in an earlier function can
            // make one error region span several definitions, and labelled where it starts,
            // the kernel's report would not carry the code.
            let range = error_label(&func.byte_range(), self.errors);
            problems.push(
                Diagnostic::new(
                    Code::ParseErrorInKernel,
                    format!("`{name}` contains a syntax error; it is left as it is"),
                )
                .label(range, "not understood here"),
            );
        }
        let mut full_scope = scope.to_vec();
        let mut qualified = None;
        if let Some(q) = declarator
            .child_by_field_id(crate::lang::fields().declarator)
            .filter(|d| d.kind_id() == k.qualified_identifier)
        {
            // A kernel defined out of its namespace (`__global__ void ns::k(...)`, declared in
            // `namespace ns` of a header): its generated kernels go in the namespace, reopened
            // around the definition. Helpers are edited in place, where a qualified name would
            // no longer match their declaration.
            match self.qualifier_namespaces(q, scope) {
                Some(namespaces) if space.global => {
                    full_scope.extend(namespaces.iter().cloned());
                    qualified = Some(Qualified {
                        range: q.byte_range(),
                        namespaces,
                    });
                }
                _ => problems.push(
                    Diagnostic::new(
                        Code::Unsupported,
                        format!("`{name}` is defined with a qualified name (out of its namespace)"),
                    )
                    .label(name_node.byte_range(), "qualified definition")
                    .help("only kernels qualified by namespaces (no aliases, no leading `::` inside a namespace) are transformed so"),
                ),
            }
        }
        let head = outer.start_byte()..declarator.end_byte();
        let head = cluster_split_start(func).map_or(head.clone(), |s| s..head.end);
        if let Some(at) = self.src[head.clone()].find("__cluster_dims__") {
            let at = head.start + at;
            problems.push(
                Diagnostic::new(
                    Code::Clusters,
                    "thread-block clusters tie blocks to hardware placement",
                )
                .label(
                    at..at + "__cluster_dims__".len(),
                    "cluster dimensions declared here",
                ),
            );
        }
        let (param_list, params_after) = self.params(params, &mut problems);
        let template_params = match template {
            Some(t) => self.template_params(t),
            None => Vec::new(),
        };
        let body = func
            .child_by_field_id(crate::lang::fields().body)
            .unwrap_or(func);
        let head = space.head.unwrap_or_else(|| func.start_byte());
        let pragmas = pragmas::before(outer, self.src, &mut self.found.diagnostics);
        let member = self
            .ancestors
            .iter()
            .any(|a| a.kind_id() == kinds().field_declaration_list)
            || (!space.global
                && declarator
                    .child_by_field_id(crate::lang::fields().declarator)
                    .is_some_and(|d| d.kind_id() == k.qualified_identifier));
        // The class it is defined in: the nearest class body around it, and that class's name.
        let class = self
            .ancestors
            .iter()
            .rev()
            .find(|a| a.kind_id() == kinds().field_declaration_list)
            .and_then(|list| list.parent())
            .and_then(|c| c.child_by_field_id(crate::lang::fields().name))
            .and_then(|n| crate::lang::class_name_of_type(n, self.src))
            .map(str::to_string);
        let specialized_name = declarator
            .child_by_field_id(crate::lang::fields().declarator)
            .filter(|d| d.kind_id() == k.template_function);
        let specialization = specialized_name.is_some()
            || template.is_some_and(|t| {
                t.child_by_field_id(crate::lang::fields().parameters)
                    .is_some_and(|p| p.named_child_count() == 0)
            });
        let specialized_args = specialized_name
            .and_then(|n| n.child_by_field_id(crate::lang::fields().arguments))
            .map(|a| a.byte_range());
        let mut site = FunctionSite {
            name,
            scope: full_scope,
            qualified,
            member,
            class,
            is_virtual: crate::lang::word_indices(
                &self.src[outer.start_byte()..name_node.start_byte()],
                "virtual",
            )
            .next()
            .is_some(),
            specialization,
            specialized_args,
            outer,
            func,
            template,
            template_params,
            linkage,
            head,
            global_kw: space.global_kw,
            global_replacement: space.global_replacement,
            host: space.host,
            launch_bounds: space.launch_bounds,
            head_attributes: space.head_attributes,
            declarator,
            name_node,
            params,
            param_list,
            params_after,
            body,
            pragmas,
            problems,
            crossing_conditional: None,
        };
        if !space.global {
            site.note_crossing_conditional(self.src);
        }
        Some(site)
    }

    /// The namespaces that qualify a definition's name (`a::b::k` -> `a`, `b`), where each is a
    /// plain namespace name that this file does not define as an alias (an alias cannot be
    /// reopened). A leading `::` is the global namespace: only at file scope.
    fn qualifier_namespaces(&self, q: Node<'t>, scope: &[String]) -> Option<Vec<String>> {
        let k = kinds();
        let mut out = Vec::new();
        let mut n = q;
        while n.kind_id() == k.qualified_identifier {
            match n.child_by_field_id(crate::lang::fields().scope) {
                Some(s) if s.kind_id() == k.namespace_identifier => {
                    let ns = text(s, self.src).to_string();
                    if defines_namespace_alias(self.src, &ns) {
                        return None;
                    }
                    out.push(ns);
                }
                None if n == q && scope.is_empty() => {}
                _ => return None,
            }
            n = n.child_by_field_id(crate::lang::fields().name)?;
        }
        Some(out)
    }

    /// The parameters, and the preprocessor lines after the last one (`FunctionSite`).
    fn params(&self, list: Node<'t>, problems: &mut Vec<Diagnostic>) -> (Vec<Param>, String) {
        let k = kinds();
        let mut out = Vec::new();
        let mut c = list.walk();
        let mut prev_end = list.start_byte() + 1;
        for (i, p) in list.named_children(&mut c).enumerate() {
            if p.kind_id() == k.comment {
                continue;
            }
            let gap = prev_end..p.start_byte();
            let before = directive_lines(&self.src[gap.clone()]);
            prev_end = p.end_byte();
            if out.is_empty() && !before.is_empty() {
                problems.push(
                    Diagnostic::new(
                        Code::Unsupported,
                        "the first parameter is chosen by the preprocessor",
                    )
                    .label(p.byte_range(), "this parameter")
                    .help("put a parameter that every configuration has first"),
                );
            }
            // A macro that stands for `__grid_constant__` in front of the parameter
            // (`CUTLASS_GRID_CONSTANT typename Op::Params const params`): the masked view
            // blanked it, so the node starts after it, and the parameter starts with it.
            let pstart = self
                .grid_constant_macros
                .iter()
                .filter_map(|m| {
                    let at = lang::word_indices(&self.src[gap.clone()], m).last()?;
                    let rest = &self.src[gap.start + at + m.len()..gap.end];
                    rest.trim().is_empty().then_some(gap.start + at)
                })
                .min()
                .unwrap_or(p.start_byte());
            let ptext = self.src[pstart..p.end_byte()].to_string();
            if ptext.trim() == "void" {
                continue;
            }
            let pack = p.kind_id() == k.variadic_parameter_declaration;
            let decl = p.child_by_field_id(crate::lang::fields().declarator);
            let grid_constant = lang::grid_constant_at(&ptext, self.grid_constant_macros).and_then(|(at, len)| {
                let start = pstart + at;
                let after = &self.src[start + len..];
                let blanks = after.len() - after.trim_start().len();
                let qualifier = start..start + len + blanks;
                let spelling = ptext[at..at + len].to_string();
                // `&` goes right before the name: `const T &p`, `const T* const &p`. An array
                // declarator would become an array of references.
                let array = decl.is_some_and(|d| {
                    let mut found = false;
                    lang::visit(d, |n| {
                        found |= n.kind_id() == kinds().array_declarator;
                        !found
                    });
                    found
                });
                match decl.map(|d| (d, lang::declarator_name(d))) {
                    None => Some(GridConstant {
                        qualifier,
                        name_start: None,
                        spelling,
                    }),
                    Some((_, Some(name))) if !array => Some(GridConstant {
                        qualifier,
                        name_start: Some(name.start_byte()),
                        spelling,
                    }),
                    Some((d, _)) => {
                        problems.push(
                            Diagnostic::new(
                                Code::Unsupported,
                                "a `__grid_constant__` parameter with an array declarator",
                            )
                            .label(d.byte_range(), "this declarator")
                            .help("the shared body takes a `__grid_constant__` parameter by reference; declare it as `const T name` or `const T* const name`"),
                        );
                        None
                    }
                }
            });
            let name_node = decl.and_then(lang::declarator_name);
            let name = name_node
                .filter(|&n| !masked_in_name(n, self.src))
                .map(|n| text(n, self.src).to_string());
            let value_type = (!pack && grid_constant.is_none())
                .then(|| by_value_named_type(p, decl, self.src))
                .flatten();
            // Unnamed in the source, named only in the masked view (`type* = nullptr`): the
            // generated name goes where the masked view put one, before the default.
            let named = match (name, name_node) {
                (Some(name), _) => Some((None, name)),
                (None, Some(n)) => Some((Some(n.start_byte() - pstart), vocab::unnamed_param(i))),
                (None, None) => None,
            };
            match named {
                Some((generated_at, name)) => out.push(Param {
                    text: match generated_at {
                        Some(at) => format!("{} {name}{}", &ptext[..at], &ptext[at..]),
                        None => ptext,
                    },
                    name,
                    named: true,
                    pack,
                    before,
                    grid_constant,
                    value_type,
                }),
                None => {
                    let abstract_shape = decl.is_some_and(|d| {
                        let kind = d.kind();
                        kind != "abstract_pointer_declarator"
                            && kind != "abstract_reference_declarator"
                    });
                    if abstract_shape || pack {
                        problems.push(
                            Diagnostic::new(
                                Code::Unsupported,
                                "an unnamed parameter of this shape cannot be forwarded",
                            )
                            .label(p.byte_range(), "give this parameter a name"),
                        );
                    }
                    out.push(Param {
                        text: ptext,
                        name: vocab::unnamed_param(i),
                        named: false,
                        pack,
                        before,
                        grid_constant,
                        value_type: None,
                    });
                }
            }
        }
        let after =
            directive_lines(&self.src[prev_end..list.end_byte().saturating_sub(1).max(prev_end)]);
        (out, after)
    }

    fn template_params(&self, template: Node<'t>) -> Vec<TemplateParam> {
        let k = kinds();
        let Some(list) = template.child_by_field_id(crate::lang::fields().parameters) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut c = list.walk();
        for p in list.named_children(&mut c) {
            if p.kind_id() == k.comment {
                continue;
            }
            // `template <typename, typename> class Name`: the name, and whether it is a pack,
            // are in the declaration after the inner parameter list (whose own `...` says
            // nothing about this parameter).
            let p = template_template_declaration(p).unwrap_or(p);
            let id = p.kind_id();
            let pack = id == k.variadic_type_parameter_declaration
                || id == k.variadic_parameter_declaration
                || text(p, self.src).contains("...");
            let name = if id == k.optional_type_parameter_declaration {
                // `typename T = Default`: the name field (the default may be a plain name too).
                p.child_by_field_id(crate::lang::fields().name)
            } else if id == k.type_parameter_declaration
                || id == k.variadic_type_parameter_declaration
            {
                let mut cc = p.walk();
                p.named_children(&mut cc)
                    .filter(|n| n.kind_id() == k.type_identifier || n.kind_id() == k.identifier)
                    .last()
            } else {
                p.child_by_field_id(crate::lang::fields().declarator)
                    .and_then(lang::declarator_name)
            };
            let (name, unnamed) = match name {
                Some(n) if !masked_in_name(n, self.src) => (text(n, self.src).to_string(), None),
                masked_in => {
                    // Named only in the masked view (`typename E<C>::type* = nullptr`): the
                    // name goes where it put one.
                    let at = masked_in.map_or_else(|| unnamed_name_at(p), |n| n.start_byte());
                    let name = format!("__cp_tparam{}", out.len() + 1);
                    (name.clone(), Some((at, name)))
                }
            };
            out.push(TemplateParam {
                arg: if pack { format!("{name}...") } else { name },
                pack,
                unnamed,
            });
        }
        out
    }

    fn launch_site(&self, call: Node<'t>, in_device: bool) -> Option<LaunchSite<'t>> {
        launch_site(call, self.src, self.errors, in_device)
    }

    fn record_macro(&mut self, node: Node<'t>) {
        let k = kinds();
        let Some(name) = node.child_by_field_id(crate::lang::fields().name) else {
            return;
        };
        let value = node
            .child_by_field_id(crate::lang::fields().value)
            .filter(|v| v.kind_id() == k.preproc_arg);
        let body = value.map(|v| text(v, self.src)).unwrap_or("");
        if let (Some(v), Some(_)) = (value, body.find("<<<")) {
            // Parsed on its own and rewritten where it can be (rewrite/macro_launch.rs).
            let params = node
                .child_by_field_id(crate::lang::fields().parameters)
                .map(|p| {
                    let mut c = p.walk();
                    p.named_children(&mut c)
                        .map(|n| text(n, self.src).to_string())
                        .collect()
                })
                .unwrap_or_default();
            self.found.macro_launches.push(MacroLaunches {
                name: text(name, self.src).to_string(),
                params,
                body: v.byte_range(),
            });
        }
        macros::define_node(&mut self.found.macros, node, self.src);
    }
}

#[derive(Default, Clone)]
struct Space<'t> {
    global: bool,
    device: bool,
    host: bool,
    global_kw: Option<Range<usize>>,
    global_replacement: String,
    launch_bounds: Vec<Node<'t>>,
    head_attributes: Vec<Range<usize>>,
    /// The first execution-space macro (or `__maxnreg__`) in front of the definition, if any.
    head: Option<usize>,
}

/// Where `text` ends with one of `words` (`__maxnreg__` and the attribute macros,
/// `parse::attribute_macros`), called (`__maxnreg__(128)`) or, for an object-like macro, alone:
/// its range.
fn attribute_at_end(text: &str, words: &[&str]) -> Option<Range<usize>> {
    let is_word = |c: char| c == '_' || c.is_ascii_alphanumeric();
    let b = text.as_bytes();
    let word_end = if b.last() == Some(&b')') {
        text[..opening_paren(b, b.len())?].trim_end().len()
    } else {
        text.len()
    };
    let called = word_end < text.len();
    let word = &text[..word_end];
    words
        .iter()
        .filter(|w| called || **w != "__maxnreg__")
        .find(|w| word.ends_with(**w) && !word[..word.len() - w.len()].ends_with(is_word))
        .map(|w| word_end - w.len()..text.len())
}

/// `words` (`attribute_at_end`) between `from` and `to` in `src`: the ranges of their uses,
/// arguments included.
fn attributes_within(src: &str, from: usize, to: usize, words: &[&str]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for w in words {
        for at in lang::word_indices(&src[from..to], w) {
            let start = from + at;
            let rest = &src[start + w.len()..to];
            let called = rest.trim_start().starts_with('(');
            if !called {
                // An object-like macro (`MGPU_LAUNCH_BOUNDS void k`); `__maxnreg__` is called.
                if *w != "__maxnreg__" {
                    out.push(start..start + w.len());
                }
                continue;
            }
            let open = rest.len() - rest.trim_start().len();
            if let Some(close) = parse::closing_paren(rest.as_bytes(), open) {
                out.push(start..start + w.len() + close + 1);
            }
        }
    }
    out.sort_by_key(|r| r.start);
    out
}

/// `text` without its trailing blanks, comments and preprocessor lines: what ends the code
/// before a definition (`CUTLASS_GLOBAL` `#ifdef __CUDACC__` `// why` ... `void k(...)`, the
/// directive lines blanked in the masked view, `parse::masked`).
fn code_before(text: &str) -> &str {
    let mut t = text.trim_end();
    loop {
        let line_start = t.rfind('\n').map_or(0, |i| i + 1);
        let line = t[line_start..].trim_start();
        if line.starts_with('#') || line.starts_with("//") {
            t = t[..line_start].trim_end();
        } else if t.ends_with("*/") {
            match t[..t.len() - 2].rfind("/*") {
                Some(open) => t = t[..open].trim_end(),
                None => return t,
            }
        } else {
            return t;
        }
    }
}

/// An included file's definition of the type macro `name` that holds `__global__` (the one
/// whose other words are keywords, where there are several: `static __global__ void` over
/// `HIDDEN __global__ void`, whose attribute macro the shared body would copy), or its only
/// definition. None where no definition holds `__global__`.
fn included_type_macro(included: &[(String, String)], name: &str) -> Option<String> {
    let keywords = ["__global__", "void", "static", "inline", "__forceinline__"];
    let globals: Vec<String> = included
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, body)| parse::replacement_text(body))
        .filter(|b| b.split_whitespace().any(|w| w == "__global__"))
        .collect();
    globals
        .iter()
        .find(|b| b.split_whitespace().all(|w| keywords.contains(&w)))
        .or(globals.first())
        .cloned()
}

fn execution_space<'t>(
    func: Node<'t>,
    src: &str,
    macros: &BTreeMap<String, MacroFacts>,
    included_macros: &[(String, String)],
    space_macros: &BTreeMap<String, Vec<String>>,
    attribute_words: &[&str],
) -> Space<'t> {
    let k = kinds();
    let mut s = Space::default();
    // `GLOBAL static void k(...)`, `DEV inline int f(...)`: execution-space macros right in
    // front of the definition, which the masked view blanked (`parse::masked`).
    let mut at = func.start_byte();
    loop {
        let before = code_before(&src[..at]);
        // `__maxnreg__(128) __global__ void k(...)`: the cap in front of the definition (or a
        // macro standing for it or for `__launch_bounds__`).
        if let Some(r) = attribute_at_end(before, attribute_words) {
            s.head = Some(r.start);
            at = r.start;
            s.head_attributes.push(r);
            continue;
        }
        // Back over ASCII word bytes only: `start` then always begins a character.
        let b = before.as_bytes();
        let mut start = b.len();
        while start > 0 && (b[start - 1] == b'_' || b[start - 1].is_ascii_alphanumeric()) {
            start -= 1;
        }
        let Some(words) = space_macros.get(&before[start..]) else {
            break;
        };
        for w in words {
            match w.as_str() {
                "__global__" => {
                    s.global = true;
                    s.global_kw = Some(start..before.len());
                    // As for a type macro (below): the macro's text, the space replaced.
                    s.global_replacement = words
                        .join(" ")
                        .replace("__global__", "__device__ __forceinline__");
                }
                "__device__" => s.device = true,
                "__host__" => s.host = true,
                _ => {}
            }
        }
        s.head = Some(start);
        at = start;
    }
    // `#define KERNEL __global__ void` ... `KERNEL k(...)`: the type is the macro, the file's
    // own or an included file's (`RAFT_KERNEL`, defined per configuration in a library's
    // header: `RAFT_HIDDEN __global__ void`, `static __global__ void`, and `static void` for
    // a compiler without CUDA, which never compiles the transformed file).
    if let Some(ty) = func.child_by_field_id(crate::lang::fields().r#type) {
        let name = text(ty, src);
        let definition = macros
            .get(name)
            .map(|m| m.text.clone())
            .or_else(|| included_type_macro(included_macros, name));
        if let Some(m) = definition {
            let words: Vec<&str> = m.split_whitespace().collect();
            if words.contains(&"__global__") {
                s.global = true;
                s.global_kw = Some(ty.byte_range());
                s.global_replacement = m.replace("__global__", "__device__ __forceinline__");
            }
            s.device |= words.contains(&"__device__");
            s.host |= words.contains(&"__host__");
        }
    }
    let mut c = func.walk();
    for ch in func.children(&mut c) {
        match ch.kind() {
            "__global__" => {
                s.global = true;
                s.global_kw = Some(ch.byte_range());
                s.global_replacement = "__device__ __forceinline__".to_string();
            }
            "__device__" => s.device = true,
            "__host__" => s.host = true,
            _ if ch.kind_id() == k.launch_bounds => s.launch_bounds.push(ch),
            _ => {}
        }
    }
    // `__global__ void __maxnreg__(32) k(...)`: the cap inside the head (or a macro standing
    // for it or for `__launch_bounds__`, `__global__ LAUNCH_BOUNDS(256) void k(...)`).
    let declarator = func.child_by_field_id(crate::lang::fields().declarator);
    let end = declarator.map_or(func.start_byte(), |d| d.start_byte());
    s.head_attributes.extend(attributes_within(
        src,
        func.start_byte(),
        end,
        attribute_words,
    ));
    s
}

/// Where the attribute starts when a kernel's `__cluster_dims__(...)` split it off (see
/// `cluster_split`).
fn cluster_split_start(func: Node) -> Option<usize> {
    // The cheap tests first: finding a previous sibling walks the parent's children.
    if func.kind_id() != kinds().function_definition
        || func
            .child_by_field_id(crate::lang::fields().r#type)
            .is_some()
    {
        return None;
    }
    let d = func.prev_sibling()?;
    (d.kind_id() == kinds().declaration && d.has_error()).then(|| d.start_byte())
}

/// A function definition without a type right after `__global__ void __cluster_dims__(...)`,
/// which the grammar reads as a declaration missing its `;`: the kernel, as `__global__`.
fn cluster_split<'t>(func: Node<'t>, src: &str) -> Option<Space<'t>> {
    cluster_split_start(func)?;
    let decl = func.prev_sibling()?;
    let name = lang::declarators(decl)
        .first()
        .and_then(|d| d.child_by_field_id(crate::lang::fields().declarator))
        .map(|n| text(n, src));
    if name != Some("__cluster_dims__") {
        return None;
    }
    let mut c = decl.walk();
    let global_kw = decl.children(&mut c).find(|ch| ch.kind() == "__global__")?;
    Some(Space {
        global: true,
        global_kw: Some(global_kw.byte_range()),
        global_replacement: "__device__ __forceinline__".to_string(),
        ..Space::default()
    })
}

/// The function declarator of a definition or declaration (through pointer, reference and
/// parenthesized declarators: `float& at(...)`, `float (*rows(...))[4]`), none for one with an
/// initializer, which declares a variable (`auto fp = &k;`).
fn find_function_declarator(func: Node) -> Option<Node> {
    let top = func.child_by_field_id(crate::lang::fields().declarator)?;
    if top.kind_id() == kinds().init_declarator {
        return None;
    }
    lang::function_declarator(func)
}

/// Whether `src` defines `name` as a namespace alias (`namespace name = ...;`).
fn defines_namespace_alias(src: &str, name: &str) -> bool {
    lang::word_indices(src, "namespace").any(|i| {
        let rest = src[i + "namespace".len()..].trim_start();
        lang::word_indices(rest, name).next() == Some(0)
            && rest[name.len()..].trim_start().starts_with('=')
    })
}

/// The preprocessor lines of `text` (a stretch of a parameter list between two parameters),
/// one per line, trimmed; empty when there are none.
fn directive_lines(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether name node `n` is no name in the source: the one the masked view gives an unnamed
/// pointer parameter with a default (`parse::pointer_declarators`), a blank there.
fn masked_in_name(n: Node, src: &str) -> bool {
    text(n, src).trim().is_empty()
}

/// Where the name of template parameter `p`, written without one, goes: after the keyword of
/// a type parameter (`typename = void`), after the `...` of a pack, after the type of a
/// non-type parameter (`std::enable_if_t<C, int> = 0`, `int`).
fn unnamed_name_at(p: Node) -> usize {
    let k = kinds();
    let id = p.kind_id();
    if id == k.optional_type_parameter_declaration {
        // Before `=`: the keyword is the first child.
        return p.child(0).map_or(p.end_byte(), |kw| kw.end_byte());
    }
    if id == k.optional_parameter_declaration {
        if let Some(ty) = p.child_by_field_id(crate::lang::fields().r#type) {
            return ty.end_byte();
        }
    }
    p.end_byte()
}

/// The declaration that names a template template parameter (`class Name`, `class... Name`,
/// `class Name = Default` after `template <...>`); None for any other parameter.
fn template_template_declaration(p: Node) -> Option<Node> {
    let k = kinds();
    if p.kind_id() != k.template_template_parameter_declaration {
        return None;
    }
    let mut c = p.walk();
    // Bound before the return: the iterator borrows the cursor.
    let found = p.named_children(&mut c).find(|n| {
        let id = n.kind_id();
        id == k.type_parameter_declaration
            || id == k.variadic_type_parameter_declaration
            || id == k.optional_type_parameter_declaration
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernels_syntax_error_is_labelled_inside_it() {
        let def = 100..200;
        let one = |r: Range<usize>| vec![r];
        assert_eq!(
            error_label(&def, &[10..20, 150..160]),
            150..160,
            "its own error"
        );
        assert_eq!(
            error_label(&def, &one(10..180)),
            100..180,
            "the part inside it"
        );
        assert_eq!(error_label(&def, &one(10..300)), 100..200);
        assert_eq!(
            error_label(&def, &one(10..20)),
            100..200,
            "none overlaps: the definition"
        );
    }

    /// A type macro that holds `__global__`, defined per configuration in an included file:
    /// its definition of keywords alone gives the shared body's head; without the included
    /// macros the kernel is not found.
    #[test]
    fn type_macros_of_included_files_make_kernels() {
        let src = "template <class T>\nLIB_KERNEL scale(T* p) { p[blockIdx.x] = 1; }\n";
        let included = [
            (
                "LIB_KERNEL".to_string(),
                "LIB_HIDDEN __global__ void".to_string(),
            ),
            (
                "LIB_KERNEL".to_string(),
                "static __global__ void".to_string(),
            ),
            ("LIB_KERNEL".to_string(), "static void".to_string()),
        ];
        let parsed = parse::parse(src);
        assert!(scan(&parsed, src, &[]).kernels.is_empty());
        let found = scan(&parsed, src, &included);
        assert_eq!(found.kernels.len(), 1);
        let k = &found.kernels[0];
        assert_eq!(k.global_kw.clone().map(|r| &src[r]), Some("LIB_KERNEL"));
        assert_eq!(
            k.global_replacement,
            "static __device__ __forceinline__ void"
        );
    }

    #[test]
    fn execution_space_macros_are_read_in_front_of_definitions_after_any_text() {
        // A definition right after a non-ASCII character (found by the fuzzer: the look back
        // for a macro word must stop on a character boundary).
        let src =
            "#define GLOBAL __global__\n// café\nGLOBAL static void k(int *p) { p[0] = 1; }\n\
                   // é\n__global__ void k2(int *p) { p[0] = 2; }\n";
        let parsed = parse::parse(src);
        let found = scan(&parsed, src, &[]);
        let names: Vec<&str> = found.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["k", "k2"]);
        let k = &found.kernels[0];
        assert_eq!(&src[k.head..k.head + 6], "GLOBAL");
        assert_eq!(k.global_kw.clone().map(|r| &src[r]), Some("GLOBAL"));
        assert_eq!(found.kernels[1].head, found.kernels[1].func.start_byte());
    }

    #[test]
    fn kernels_a_syntax_error_hides_are_reported_lost() {
        // An unclosed template parameter list swallows the definitions after it.
        let src = "template <class T\n__global__ void lost(int* out) {\n  out[0] = 1;\n}\n";
        let parsed = parse::parse(src);
        let found = scan(&parsed, src, &[]);
        assert!(found.kernels.is_empty());
        let lost: Vec<&str> = found.lost_kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(lost, ["lost"]);
        assert_eq!(&src[found.lost_kernels[0].at.clone()], "lost");
    }

    #[test]
    fn kernels_that_macro_bodies_define_are_reported_lost() {
        let src = "#define GLOBAL __global__\n\
                   #define BOUNDED(n) __global__ __launch_bounds__(n)\n\
                   #define DECLARE(name) __global__ void name(float* x);\n\
                   #define UNARY(name, op) \\\n  __global__ void name##_kernel(int n, float* x) \\\n  { op; }\n\
                   #define HEAD(name) GLOBAL void name(float* x, int n)\n\
                   #define PREFIXED(name) GLOBAL __launch_bounds__(256) void k_##name(int n)\\\n{}\n\
                   #define INSTANTIATE(T) template __global__ void scale<T>(T* x)\n\
                   #define SPECIALIZE(T) template <> __global__ void scale < T >(T* x) { x[0] = 0; }\n\
                   // #define COMMENTED(name) __global__ void name() {}\n\
                   GLOBAL void plain(float* x) { x[0] = 1; }\n";
        let parsed = parse::parse(src);
        let found = scan(&parsed, src, &[]);
        let names: Vec<&str> = found.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["plain"]);
        let lost: Vec<(&str, Option<&str>)> = found
            .lost_kernels
            .iter()
            .map(|k| (&src[k.at.clone()], k.in_macro.as_deref()))
            .collect();
        assert_eq!(
            lost,
            [
                ("name##_kernel", Some("UNARY")),
                ("name", Some("HEAD")),
                ("k_##name", Some("PREFIXED")),
                ("scale", Some("SPECIALIZE")),
            ]
        );
    }

    #[test]
    fn kernels_an_unbalanced_body_swallows_are_reported_lost() {
        // Read with every branch, the first body opens one brace more than it closes and runs
        // to the end of the file, over the next kernel.
        let src = "__global__ void guarded(int* out, int n) {\n#ifdef GUARD\n  if (n > 0) {\n#endif\n  out[0] = n;\n}\n\n__global__ void after(int* out) { out[0] = 1; }\n";
        let parsed = parse::parse(src);
        let found = scan(&parsed, src, &[]);
        let lost: Vec<&str> = found.lost_kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(lost, ["after"]);
    }
}
