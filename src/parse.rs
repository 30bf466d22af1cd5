//! Parsing: source text to a tree-sitter tree. Nothing else happens here.

use crate::lang;
use tree_sitter::{Node, Parser, Tree};

/// Execution-space macros (`execution_space_macros`) and the words they stand for.
pub type SpaceMacros = std::collections::BTreeMap<String, Vec<String>>;

mod branches;
pub(crate) use branches::defined_only_branches;
mod statement_args;

pub struct Parsed {
    pub tree: Tree,
    /// The file's execution-space macros, read once for the masked view and the scan.
    pub space_macros: SpaceMacros,
    /// Macros that stand for `__grid_constant__` (`grid_constant_macros`), blanked in the
    /// masked view; the scan reads a parameter with one as `__grid_constant__`.
    pub grid_constant_macros: Vec<String>,
    /// Macros that stand for a kernel attribute (`attribute_macros`: `#define
    /// LAUNCH_BOUNDS(x) __launch_bounds__(x)`), blanked in the masked view; the scan reads a use
    /// in a kernel's head as the attribute.
    pub attribute_macros: Vec<String>,
    /// Branches of preprocessor conditionals that the grammar did not read: a statement whose
    /// head or body the conditional chooses was read with its first branch alone (`branches`).
    pub hidden: Vec<std::ops::Range<usize>>,
    /// The conditional groups those branches belong to, each from its `#if` line's start to
    /// its `#endif` line's end (sorted, no repeats).
    pub hidden_groups: Vec<std::ops::Range<usize>>,
    /// Uses of macros given statements as arguments (`SWITCH(t, T, stmts;)`), read as blocks
    /// of those statements (`statement_args`); the analysis refuses a kernel holding one.
    pub statement_macros: Vec<std::ops::Range<usize>>,
}

/// Parses `src` as the grammar sees its masked view (`masked`): same length, so every byte
/// range of the tree is a range of `src`, and the tree is used with `src`'s text.
pub fn parse(src: &str) -> Parsed {
    parse_with(src, &[])
}

/// `src` as the analysis reads it where its lines end in `\r\n` (files written on Windows; a
/// public inference library has 35 of them): each `\r` before a `\n` becomes a blank, and a
/// line continuation `\\\r\n` becomes ` \\\n`, so that every rule that reads lines, macro
/// bodies and their continuations (written for `\n`) reads such a file as it reads any other.
/// Same length, so every offset into it is an offset into `src`, and edits apply to `src` as
/// written (generated text then takes the file's line ends, `edit::line_end`). Borrowed where
/// `src` has no `\r`.
pub fn without_carriage_returns(src: &str) -> std::borrow::Cow<'_, str> {
    if !src.contains('\r') {
        return std::borrow::Cow::Borrowed(src);
    }
    let mut b = src.as_bytes().to_vec();
    for i in 0..b.len().saturating_sub(1) {
        if b[i] == b'\r' && b[i + 1] == b'\n' {
            if i > 0 && b[i - 1] == b'\\' {
                b[i - 1] = b' ';
                b[i] = b'\\';
            } else {
                b[i] = b' ';
            }
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes: still UTF-8.
    std::borrow::Cow::Owned(String::from_utf8(b).unwrap_or_else(|_| src.to_string()))
}

/// `parse`, with the macros of the files `src` includes (`Options::known_macros`: name and
/// replacement text) known to the masked view too: a loop-head macro of a header
/// (`CUDA_1D_KERNEL_LOOP(i, n) { ... }`) reads as its own would. Lines ending in `\r\n` read
/// as if they ended in `\n` (`without_carriage_returns`).
pub fn parse_with(src: &str, included_macros: &[(String, String)]) -> Parsed {
    let src = &*without_carriage_returns(src);
    let mut parser = Parser::new();
    parser
        .set_language(&lang::language())
        .expect("tree-sitter-cuda is built against a compatible tree-sitter ABI");
    let (mut view, macros) = masked_view(src, included_macros);
    // Without a timeout or cancellation flag set, parse only returns None on those conditions.
    let mut tree = parser
        .parse(view.as_deref().unwrap_or(src), None)
        .expect("parse without timeout");
    // Statements passed to a macro (`SWITCH(t, T, stmts;)`): read as blocks where that reads
    // better (statement_args.rs). First: a conditional's branch that holds such a use reads
    // then, and is not hidden for it below.
    let mut statement_macros = Vec::new();
    if tree.root_node().has_error() && src.contains(';') {
        let base = view.as_deref().unwrap_or(src).as_bytes();
        let errors = error_ranges(tree.root_node()).len();
        if let Some((bytes, uses)) = statement_args::blocks(base, &mut parser) {
            if let Ok(text) = String::from_utf8(bytes) {
                let reduced = parser.parse(&text, None).expect("parse without timeout");
                if error_ranges(reduced.root_node()).len() < errors {
                    tree = reduced;
                    view = Some(text);
                    statement_macros = uses;
                }
            }
        }
    }
    let mut hidden = Vec::new();
    let mut hidden_groups = Vec::new();
    if tree.root_node().has_error() && src.contains("#if") {
        let groups = branches::FileGroups::new(src, &macros.space);
        // Nested conditionals may each split a statement: a few rounds.
        for _ in 0..3 {
            let base = view.as_deref().unwrap_or(src).as_bytes();
            let errors = error_ranges(tree.root_node()).len();
            let blocks = branches::compound_statements(&tree);
            // The groups that open or close braces alone first; then every group near an
            // error. The first branch first; another only where the first reads no better.
            let tries = [true, false]
                .into_iter()
                .flat_map(|u| (0..branches::MOST_BRANCHES_TRIED).map(move |k| (u, k)));
            let better = tries.into_iter().find_map(|(unbalanced_only, keep)| {
                let branches::Reduced {
                    view: bytes,
                    hidden: ranges,
                    groups: spans,
                } = groups.kept_branches(base, &tree, &blocks, unbalanced_only, keep)?;
                let text = String::from_utf8(bytes).ok()?;
                let reduced = parser.parse(&text, None).expect("parse without timeout");
                (error_ranges(reduced.root_node()).len() < errors)
                    .then_some((reduced, text, ranges, spans))
            });
            let Some((reduced, text, ranges, spans)) = better else {
                break;
            };
            tree = reduced;
            view = Some(text);
            hidden.extend(ranges);
            hidden_groups.extend(spans);
        }
    }
    hidden.sort_by_key(|r| r.start);
    hidden.dedup();
    hidden_groups.sort_by_key(|r| (r.start, r.end));
    hidden_groups.dedup();
    Parsed {
        tree,
        space_macros: macros.space,
        grid_constant_macros: macros.grid_constant,
        attribute_macros: macros.attribute,
        hidden,
        hidden_groups,
        statement_macros,
    }
}

/// Words that CUDA headers define as calling conventions (empty on Linux) and that the grammar
/// cannot place: `void CUDART_CB done(...)`, and the CUDA libraries' own (`static void CUPTIAPI
/// bufferRequested(...)`, as a communication library's benchmark registers its profiler
/// callbacks), and the graphics interfaces' (`static VKAPI_ATTR VkBool32 VKAPI_CALL
/// debugCallback(...)` in the Vulkan interop samples); the headers' marks of what the compiler provides
/// (`extern __device__ __device_builtin__ unsigned __fns(...)`, as code that declares an
/// intrinsic itself writes; `__cudart_builtin__`); and cupreempt's own attribute macro for the
/// weak wrapper declarations it writes (`CUPREEMPT_WEAK`, src/vocab.rs), so that a transformed
/// file parses as well as its input (and a re-run reads it).
const CALLING_CONVENTIONS: &[&str] = &[
    "CUDART_CB",
    "CUDARTAPI",
    "CUDAAPI",
    "CUDA_CB",
    "CUPTIAPI",
    "CUBLASAPI",
    "CUBLASWINAPI",
    "CUFFTAPI",
    "CURANDAPI",
    "CUSPARSEAPI",
    "CUSOLVERAPI",
    "CUDNNWINAPI",
    "VKAPI_ATTR",
    "VKAPI_CALL",
    "VKAPI_PTR",
    "APIENTRY",
    "GLAPIENTRY",
    "__stdcall",
    "__cdecl",
    "__device_builtin__",
    "__cudart_builtin__",
    crate::vocab::WEAK,
];

/// `src` with the constructs the grammar does not know masked, or None when it has none:
/// calling-convention macros and `__align__(N)` blanked (they only change how the compiler lays
/// out or calls what they qualify, never what a kernel computes), the stars and `const` of an
/// array `new` of pointers blanked, and a keyword type in `typeid(...)` turned into an
/// identifier; and preprocessor conditionals inside parentheses (`conditionals_in_parens`)
/// blanked, so that a parameter or argument list reads as every conditional part included; and
/// a qualifier macro between a pointer's `*` and the declared name (`restrict_macros`) blanked.
/// Same length, newlines kept, so offsets into it are offsets into `src`; only the grammar
/// reads it.
pub fn masked(src: &str) -> Option<String> {
    masked_with(src, &[])
}

/// `masked`, with the loop-head macros of `included_macros` (see `parse_with`) too.
pub fn masked_with(src: &str, included_macros: &[(String, String)]) -> Option<String> {
    masked_view(src, included_macros).0
}

/// The macros whose uses the masked view blanked because they stand for a word the analysis
/// must still see (`Parsed::space_macros`, `Parsed::grid_constant_macros`,
/// `Parsed::attribute_macros`).
struct ViewMacros {
    space: SpaceMacros,
    grid_constant: Vec<String>,
    attribute: Vec<String>,
}

/// `masked_with`, and the macros it blanked uses of that stand for words the analysis reads.
fn masked_view(src: &str, included_macros: &[(String, String)]) -> (Option<String>, ViewMacros) {
    let (conditionals, alternative_commas) = conditionals_in_parens(src);
    let assignment_commas = commas_after_assignments(src);
    // The file's `#define`s, read once for the rules that need them.
    let defs = defines(src);
    let space_table = execution_space_macros(&defs, included_macros);
    let (mut separators, undefs) = statement_macro_separators(src, &defs, included_macros);
    separators.extend(loop_macro_separators(src, &defs, included_macros));
    let mut qualifiers = restrict_macros(src);
    for (at, rest) in terminating_macro_uses(src, &defs, included_macros) {
        separators.push(at);
        qualifiers.push(rest);
    }
    qualifiers.extend(undefs);
    qualifiers.extend(typename_casts(src));
    qualifiers.extend(unnamed_enum_bases(src));
    let function_defaults = function_type_defaults(src);
    let grid_constants = grid_constant_macros(&defs, included_macros);
    qualifiers.extend(macro_uses(src, &grid_constants));
    qualifiers.extend(macro_uses(src, &constexpr_macros(&defs, included_macros)));
    qualifiers.extend(empty_macro_lines(
        src,
        &empty_macros(&defs, included_macros),
    ));
    qualifiers.extend(empty_call_macro_heads(
        src,
        &macros_defined_as(&defs, included_macros, |body, _| Some(body.is_empty())),
    ));
    qualifiers.extend(declarator_attributes(src));
    qualifiers.extend(macro_headed_definitions(src, &defs, included_macros));
    qualifiers.extend(identity_macro_uses(src, &defs));
    qualifiers.extend(macro_uses(src, &visibility_macros(&defs, included_macros)));
    qualifiers.extend(class_instantiations(src));
    qualifiers.extend(instantiation_attribute_words(src));
    qualifiers.extend(operator_instantiations(src));
    qualifiers.extend(empty_last_arguments(src));
    let attributes = attribute_macros(&defs, included_macros);
    qualifiers.extend(macro_uses_with_arguments(src, &attributes));
    qualifiers.extend(macro_uses_with_arguments(
        src,
        &layout_macros(&defs, included_macros),
    ));
    let space_macros = execution_space_macro_uses(src, &space_table);
    let mut type_arguments = keyword_type_arguments(src);
    type_arguments.extend(keyword_functional_casts(src));
    type_arguments.extend(type_macro_uses(src, &defs));
    // A blanked function type's keywords (`void(int, int)`) stay blank.
    type_arguments.retain(|r| {
        !function_defaults
            .iter()
            .any(|d| d.start < r.end && r.start < d.end)
    });
    qualifiers.extend(function_defaults);
    let instantiations = instantiation_macro_uses(src, &defs, included_macros);
    // A use that becomes an empty declaration needs no `;` after it.
    separators.retain(|&at| {
        !instantiations
            .iter()
            .any(|r| r.end <= at && src[r.end..at].trim().is_empty())
    });
    qualifiers.extend(assertion_macro_uses(src, &defs, included_macros));
    let string_macros = string_macro_uses(src);
    let config_braces = braced_launch_configs(src);
    let brace_defaults = empty_brace_defaults(src);
    let global_words = global_space_words(&space_table);
    let PointerDeclarators {
        defaults: pointer_defaults,
        packs: pointer_packs,
    } = pointer_declarators(src, &global_words);
    let define_comments = define_comments(src, &defs);
    let mut head_pragmas = pragmas_after_heads(src);
    head_pragmas.extend(pragma_operators(src, &defs, included_macros));
    // Extended lambdas, `[=] __device__ (int i) { ... }` (nvcc's `--extended-lambda`): the
    // grammar reads no execution space between the captures and the parameters. Which space a
    // lambda runs in does not change what it reads or calls.
    static EXTENDED_LAMBDA: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let extended_lambda = EXTENDED_LAMBDA.get_or_init(|| {
        regex::Regex::new(r"\]((?:\s*\b(?:__host__|__device__)\b)+)\s*\(").expect("valid regex")
    });
    let extended_lambdas = src.contains("__device__") && extended_lambda.is_match(src);
    if !src.contains("__align__")
        && !src.contains("__builtin_align__")
        && !src.contains("alignas")
        && !src.contains("__maxnreg__")
        && !src.contains("__restrict")
        && !src.contains("new ")
        && !src.contains("typeid")
        && !src.contains("__const__")
        && !extended_lambdas
        && !CALLING_CONVENTIONS.iter().any(|w| src.contains(w))
        && conditionals.is_empty()
        && assignment_commas.is_empty()
        && separators.is_empty()
        && qualifiers.is_empty()
        && space_macros.is_empty()
        && type_arguments.is_empty()
        && instantiations.is_empty()
        && string_macros.is_empty()
        && config_braces.is_empty()
        && brace_defaults.is_empty()
        && pointer_defaults.is_empty()
        && pointer_packs.is_empty()
        && head_pragmas.is_empty()
        && define_comments.is_empty()
        && blank_define_ends(src.as_bytes()).is_empty()
    {
        let macros = ViewMacros {
            space: space_table,
            grid_constant: grid_constants,
            attribute: attributes,
        };
        return (None, macros);
    }
    let mut bytes = src.as_bytes().to_vec();
    for at in separators {
        bytes[at] = b';';
    }
    for r in qualifiers
        .into_iter()
        .chain(space_macros)
        .chain(conditionals)
        .chain(head_pragmas)
    {
        for b in &mut bytes[r] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    }
    for at in alternative_commas {
        bytes[at] = b',';
    }
    for at in assignment_commas {
        bytes[at] = b'+';
    }
    for at in pointer_defaults {
        bytes[at] = b'_';
    }
    for at in pointer_packs {
        bytes[at] = b'&';
    }
    // A comment inside a definition: blank, and a line it spans continued by a `\`, so that
    // the directive stays one (the preprocessor reads the comment as one space).
    for r in define_comments {
        let start = r.start;
        for i in r {
            if bytes[i] == b'\n' {
                if i > start && bytes[i - 1] != b'\n' {
                    bytes[i - 1] = b'\\';
                }
            } else {
                bytes[i] = b' ';
            }
        }
    }
    let word_at = |at: usize, w: &str| {
        let before = at.checked_sub(1).map(|i| src.as_bytes()[i]);
        let after = src.as_bytes().get(at + w.len()).copied();
        let ident = |b: Option<u8>| b.is_some_and(|b| b == b'_' || b.is_ascii_alphanumeric());
        !ident(before) && !ident(after)
    };
    let blank = |range: std::ops::Range<usize>, bytes: &mut Vec<u8>| {
        for b in &mut bytes[range] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    // GCC's spelling of `__restrict__` (`float* const __restrict p`), which the grammar does
    // not know: a qualifier, like the calling conventions only the compiler reads it.
    for w in CALLING_CONVENTIONS.iter().chain(&["__restrict"]) {
        for (at, _) in src.match_indices(w).filter(|(at, _)| word_at(*at, w)) {
            blank(at..at + w.len(), &mut bytes);
        }
    }
    for r in type_arguments {
        for b in &mut bytes[r] {
            *b = b'x';
        }
    }
    // `__align__(N)` (and its `__builtin_align__(N)` spelling, which the CUDA headers define
    // it as), `alignas(T)` (which the grammar reads before a declaration, not after the
    // declarator's name: `char buffer alignas(int)[4];`, OpenCV's connected components) and
    // `__maxnreg__(N)` (a kernel's register cap, which the grammar does not know; the scan
    // finds it in the kernel's head, `analysis::scan`): the whole call.
    for word in ["__align__", "__builtin_align__", "alignas", "__maxnreg__"] {
        for (at, _) in src.match_indices(word).filter(|(at, _)| word_at(*at, word)) {
            let rest = &src.as_bytes()[at + word.len()..];
            let Some(open) = rest.iter().position(|b| !b.is_ascii_whitespace()) else {
                continue;
            };
            if rest[open] != b'(' {
                continue;
            }
            if let Some(close) = closing_paren(rest, open) {
                let end = at + word.len() + close + 1;
                blank(at..end, &mut bytes);
            }
        }
    }
    // `new const float *[n]`: the grammar reads no pointer (or const) type in an array new;
    // without them it reads `new float [n]`, an expression of the same shape.
    static NEW_ARRAY: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let new_array = NEW_ARRAY.get_or_init(|| {
        regex::Regex::new(
            r"\bnew\s+(const\s+)?[A-Za-z_][A-Za-z0-9_:]*(?:\s*<[^<>;()]*>)?((?:\s*\*)+)\s*\[",
        )
        .expect("valid regex")
    });
    for c in new_array.captures_iter(src) {
        for part in [c.get(1), c.get(2)].into_iter().flatten() {
            blank(part.range(), &mut bytes);
        }
    }
    // GCC's `__const__` (`static __device__ __const__ uint8_t mask = 15;` in a public
    // optimizer benchmark): the grammar knows `const` only.
    for (at, _) in src
        .match_indices("__const__")
        .filter(|(at, _)| word_at(*at, "__const__"))
    {
        bytes[at..at + "__const__".len()].copy_from_slice(b"const    ");
    }
    // `typeid(double)`: the grammar reads `typeid` of an expression only; a keyword type becomes
    // an identifier of the same length.
    static TYPEID: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let typeid = TYPEID.get_or_init(|| {
        regex::Regex::new(
            r"\btypeid\s*\(\s*(float|double|int|char|bool|short|long|unsigned|signed|void)\s*\)",
        )
        .expect("valid regex")
    });
    for c in typeid.captures_iter(src) {
        if let Some(t) = c.get(1) {
            for b in &mut bytes[t.range()] {
                *b = b'x';
            }
        }
    }
    if extended_lambdas {
        for c in extended_lambda.captures_iter(src) {
            if let Some(spaces) = c.get(1) {
                blank(spaces.range(), &mut bytes);
            }
        }
    }
    for (open, close) in config_braces {
        bytes[open] = b'(';
        bytes[close] = b')';
    }
    for (open, close) in brace_defaults {
        bytes[open..=close].fill(b'0');
    }
    for r in string_macros {
        bytes[r.start] = b'"';
        bytes[r.start + 1..r.end - 1].fill(b' ');
        bytes[r.end - 1] = b'"';
    }
    // Only ASCII bytes were replaced by ASCII bytes: still UTF-8.
    // Last: over whatever the other rules made of the use's arguments.
    for r in instantiations {
        let at = r.start;
        for b in &mut bytes[r] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        bytes[at] = b';';
    }
    // Last: over what the other rules blanked in `#define` lines.
    blank_define_bodies(&mut bytes);
    let macros = ViewMacros {
        space: space_table,
        grid_constant: grid_constants,
        attribute: attributes,
    };
    (String::from_utf8(bytes).ok(), macros)
}

/// `#define NAME` (or `NAME(params)`) followed by blanks only, up to its line's end: the
/// grammar reads the next line as the macro's body then (a kernel after `#define EXPORTED `, or
/// after `#define ALIGNED(x) __align__(x)` once the view blanks `__align__(x)`, vanished from
/// the tree without a syntax error). Its last blank becomes `0`, a body only the grammar reads:
/// the analysis reads macro bodies from the file's own text. Returns how many it changed.
fn blank_define_bodies(bytes: &mut [u8]) {
    for at in blank_define_ends(bytes) {
        bytes[at] = b'0';
    }
}

/// The last blank of each `#define` line whose body is blank (`blank_define_bodies`).
fn blank_define_ends(bytes: &[u8]) -> Vec<usize> {
    static DEFINE: std::sync::OnceLock<regex::bytes::Regex> = std::sync::OnceLock::new();
    let re = DEFINE.get_or_init(|| {
        regex::bytes::Regex::new(
            r"(?m)^[ \t]*#[ \t]*define[ \t]+[A-Za-z_][A-Za-z0-9_]*(?:\([^)\n]*\))?([ \t]+)\r?$",
        )
        .expect("valid regex")
    });
    re.captures_iter(bytes)
        .filter_map(|c| c.get(1).map(|m| m.end() - 1))
        .collect()
}

/// The execution and memory spaces an execution-space macro may stand for (memory spaces of
/// file-scope variables, `__managed__` and `__constant__`, too; never `__shared__`, which the
/// analysis must see). One of them makes a macro a space macro.
const SPACES: &[&str] = &[
    "__global__",
    "__device__",
    "__host__",
    "__managed__",
    "__constant__",
];

/// Inline specifiers: how the compiler builds a call, nothing the analysis reads.
const INLINE_SPECIFIERS: &[&str] = &["__forceinline__", "__noinline__", "inline", "__inline__"];

/// The other words a space macro may stand for beside its spaces: inline specifiers, `static`
/// and `constexpr` (`#define Pow2_FUNC_QUALIFIER static constexpr __host__ __device__
/// __forceinline__`).
fn is_space_word(word: &str) -> bool {
    SPACES.contains(&word)
        || INLINE_SPECIFIERS.contains(&word)
        || matches!(word, "static" | "constexpr")
}

/// Object-like macros that stand for an execution space (`#define GLOBAL __global__`,
/// `#define HOST_DEVICE __host__ __device__`, `#define DEV static __device__ inline`): every
/// definition with a body is made of `SPACES`, the words `is_space_word` adds and other such macros only (`#define
/// HOST_DEV_INLINE HOST_DEVICE __forceinline__`, as a gradient-boosting library spells its
/// inline helpers), with `__global__`, `__device__` or `__host__` among the words they stand
/// for; a definition without a body is the one for compilers without CUDA (`#ifdef __CUDACC__
/// ... #else #define GLOBAL #endif`) and does not count; `#define MANAGED __managed__`
/// (`MANAGED __device__ int n;`) is one too. Name and the words of its definitions (another
/// such macro's words in its place), from `included` (the macros of the files a file
/// includes) and `defs`.
pub(crate) fn execution_space_macros(
    defs: &[Define],
    included: &[(String, String)],
) -> SpaceMacros {
    // An included macro's parameters are not kept (`program::macro_definitions`): it counts as
    // object-like, and a use of a function-like one is followed by `(`, which no rule blanks.
    let bodies = included
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_str(), false))
        .chain(defs.iter().map(|d| (d.name, d.body, d.function_like)));
    // Each name's definitions with a body, as words. Attributes beside the space (`inline
    // __attribute__((always_inline)) __device__`, as FlashInfer spells its helpers' macro) are
    // blanked with the use; they decide nothing the analysis reads.
    let mut definitions: std::collections::BTreeMap<&str, Vec<Vec<String>>> = Default::default();
    for (name, body, function_like) in bodies {
        let words: Vec<String> = without_attributes(body)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        if !function_like && !words.is_empty() {
            definitions.entry(name).or_default().push(words);
        }
    }
    // Names whose every definition reads as space words once the macros found so far are
    // expanded, until no more are found (each round finds one more level of nesting).
    // Macros of qualifiers alone (`#define FORCEINLINE __forceinline__`) are no space macros,
    // but a space macro may be made of one (RAFT's `RAFT_DEVICE_INLINE_FUNCTION`, `_RAFT_DEVICE
    // _RAFT_FORCEINLINE`): they expand inside others.
    let mut out = SpaceMacros::new();
    let mut qualifier_macros = SpaceMacros::new();
    loop {
        let mut found = false;
        for (&name, bodies) in &definitions {
            if out.contains_key(name) || qualifier_macros.contains_key(name) {
                continue;
            }
            let mut words: Vec<String> = Vec::new();
            let mut all_space = true;
            for w in bodies.iter().flatten() {
                let inner = out.get(w.as_str()).or(qualifier_macros.get(w.as_str()));
                let expanded: &[String] = match inner {
                    Some(inner) => inner,
                    None if is_space_word(w) => std::slice::from_ref(w),
                    None => {
                        all_space = false;
                        break;
                    }
                };
                for x in expanded {
                    if !words.contains(x) {
                        words.push(x.clone());
                    }
                }
            }
            let a_space = words.iter().any(|w| SPACES.contains(&w.as_str()));
            if all_space && a_space {
                out.insert(name.to_string(), words);
                found = true;
            } else if all_space {
                qualifier_macros.insert(name.to_string(), words);
                found = true;
            }
        }
        if !found {
            return out;
        }
    }
}

/// Uses of execution-space macros (`execution_space_macros`) in front of a declaration: the
/// grammar reads the unexpanded word as a type, and `DEV static int f()` or `GLOBAL static
/// void k()` as a syntax error (a public RNA-folding benchmark's kernels and their helpers were
/// left as they are, CP001 and CP008). Blanked in the masked view, a definition reads as the
/// compiler's does without the space; the scan takes the space from the word before the
/// definition (`analysis::scan`). A use counts where a word (a type, a specifier, another
/// such macro) follows it, and between an extended lambda's captures and its parameters
/// (`[] GPU_LAMBDA (int x)`).
/// `text` without its GCC attributes (`__attribute__((...))`) and standard ones (`[[...]]`),
/// each with its balanced brackets; an unbalanced one stays.
fn without_attributes(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let gcc = text[i..].starts_with("__attribute__")
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'));
        if gcc {
            let after = i + "__attribute__".len();
            let open = after
                + b[after..]
                    .iter()
                    .take_while(|c| c.is_ascii_whitespace())
                    .count();
            if b.get(open) == Some(&b'(') {
                if let Some(close) = closing_paren(b, open) {
                    out.push(' ');
                    i = close + 1;
                    continue;
                }
            }
        }
        if text[i..].starts_with("[[") {
            if let Some(close) = text[i..].find("]]") {
                out.push(' ');
                i += close + 2;
                continue;
            }
        }
        let c = text[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

fn execution_space_macro_uses(src: &str, macros: &SpaceMacros) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    for name in macros.keys() {
        for at in uses(src, name) {
            let end = at + name.len();
            let next = next_code(&src[end..]);
            // An extended lambda's space, `[] GPU_LAMBDA (int x) { ... }`, as `__device__` there.
            let lambda = src[..at].trim_end().ends_with(']') && next == Some('(');
            if lambda || next.is_some_and(|c| c == '_' || c.is_ascii_alphabetic()) {
                out.push(at..end);
            }
        }
    }
    out
}

/// The first character of code in `text`: blanks, comments and preprocessor lines skipped
/// (`CUTLASS_GLOBAL` `#ifdef __CUDACC__` `// why` `__launch_bounds__(...)`).
fn next_code(text: &str) -> Option<char> {
    let mut rest = text;
    let mut line_start = false;
    loop {
        let trimmed = rest.trim_start_matches([' ', '\t', '\r']);
        if let Some(after) = trimmed.strip_prefix('\n') {
            rest = after;
            line_start = true;
        } else if let Some(after) = trimmed.strip_prefix("//") {
            rest = after.find('\n').map_or("", |i| &after[i..]);
        } else if let Some(after) = trimmed.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else if line_start && trimmed.starts_with('#') {
            // The directive, with its backslash continuations.
            let mut end = 0;
            let b = trimmed.as_bytes();
            while end < b.len() && !(b[end] == b'\n' && (end == 0 || b[end - 1] != b'\\')) {
                end += 1;
            }
            rest = &trimmed[end..];
        } else {
            return trimmed.chars().next();
        }
    }
}

/// Macros that stand for `__grid_constant__` (`#define CUTLASS_GRID_CONSTANT __grid_constant__`,
/// with an empty definition for older GPUs): object-like, every definition with a body is that
/// word alone, in the file or a header it includes. The grammar reads such a word in a
/// parameter (`CUTLASS_GRID_CONSTANT typename Op::Params const params`, `Args NCCL_GRID_CONSTANT
/// const args`) as a type, and the kernel was a syntax error (CP001: the one kernel through which
/// a public GEMM library launches all its kernels, and a collective-communication library's).
pub(crate) fn grid_constant_macros(defs: &[Define], included: &[(String, String)]) -> Vec<String> {
    macros_defined_as(defs, included, |body, function_like| match body {
        "" if !function_like => None,
        b => Some(b == lang::GRID_CONSTANT && !function_like),
    })
}

/// Macros that stand for nothing: object-like, every definition (in the file or a header it
/// includes) empty (`#define CUB_NS_PREFIX`, where a namespace around a vendored library
/// would go). Only names without lower-case letters that do not begin with `__`: `#define
/// __device__` for a host compiler, `#define inline` or `#define register` for old dialects
/// name words that the analysis reads or that mean something where the program is built.
/// A definition whose replacement begins with `#` (`#define OUTER_UNROLL #pragma unroll 9`
/// beside an empty one under `#else`, as a proxy application spells an optional pragma) does
/// not count: in an object-like macro `#` is a stray token, and no build that uses it compiles.
fn empty_macros(defs: &[Define], included: &[(String, String)]) -> Vec<String> {
    let mut names = macros_defined_as(defs, included, |body, function_like| {
        if body.starts_with('#') && !function_like {
            return None;
        }
        Some(body.is_empty() && !function_like)
    });
    names.retain(|n| !n.starts_with("__") && !n.chars().any(|c| c.is_ascii_lowercase()));
    names
}

/// Object-like macros that stand only for attributes: every definition is made of
/// `__attribute__((...))`, `__declspec(...)` and such macros, or is empty, and one is not
/// (`#define C10_CUDA_API C10_CUDA_EXPORT`, `#define C10_CUDA_EXPORT
/// __attribute__((__visibility__("default")))`, `__declspec(dllexport)` under `_WIN32`).
/// A library's export macro stands before a declaration's type or after `class`, where the
/// grammar reads no macro: `class C10_CUDA_API CUDAError : ...` and `C10_CUDA_API void f(...)`
/// in PyTorch's `c10/cuda/CUDAException.h` were three syntax warnings (CP100) in every unit
/// of a PyTorch extension. An attribute changes linkage, alignment or diagnostics, nothing the
/// analysis reads, so the masked view blanks the uses. Only names without lower-case letters
/// that do not begin with `__`, as for empty macros.
fn visibility_macros(defs: &[Define], included: &[(String, String)]) -> Vec<String> {
    if defs.is_empty() && included.is_empty() {
        return Vec::new();
    }
    let mut bodies: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    let mut function_like = std::collections::BTreeSet::new();
    for (name, body, f) in included
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_str(), false))
        .chain(defs.iter().map(|d| (d.name, d.body, d.function_like)))
    {
        if f {
            function_like.insert(name);
        }
        bodies.entry(name).or_default().push(replacement_text(body));
    }
    let named = |n: &str| !n.starts_with("__") && !n.chars().any(|c| c.is_ascii_lowercase());
    let candidates: Vec<(&str, Vec<String>)> = bodies
        .into_iter()
        .filter(|(n, b)| named(n) && !function_like.contains(n) && b.iter().any(|b| !b.is_empty()))
        .collect();
    // Names join as what they name joins, so aliases of each other (`#define FILE SYSACE_FILE`
    // beside its reverse, an embedded platform's stdio wrapper) never do; nor a name empty in
    // every definition shown, which a build may define as it likes (`-DCALLABLE=__device__`),
    // so that blanking it could hide an execution space.
    let mut names: Vec<String> = macros_closed_under(&candidates, |bodies, names| {
        bodies.iter().all(|b| attributes_only(b, names))
    })
    .into_iter()
    .map(str::to_string)
    .collect();
    names.sort_unstable();
    names
}

/// Whether `body` is a sequence of `__attribute__((...))`, `__declspec(...)`, inline
/// specifiers (`__forceinline__`, `inline`: RAFT's `_RAFT_FORCEINLINE`, one or the other per
/// configuration, written after its execution-space macro, `_RAFT_DEVICE _RAFT_FORCEINLINE
/// void f()`) and names of `set`, or nothing. An inline specifier changes how the compiler
/// builds a call, nothing the analysis reads.
fn attributes_only(body: &str, set: &[&str]) -> bool {
    let b = body.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if !(b[i].is_ascii_alphabetic() || b[i] == b'_') {
            return false;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let word = &body[start..i];
        if word == "__attribute__" || word == "__declspec" {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            match closing_paren(b, i) {
                Some(end) if b.get(i) == Some(&b'(') => i = end + 1,
                _ => return false,
            }
        } else if !set.contains(&word) && !INLINE_SPECIFIERS.contains(&word) {
            return false;
        }
    }
    true
}

/// Uses with arguments of macros every definition of which is empty, standing in a function's
/// head between its specifiers or type and its name (`__global__ void` `LAUNCH_BOUNDS(T, B)`
/// `gr_base(...)`, where a benchmark's header defines the macro empty and keeps the
/// `__launch_bounds__` definition commented out): the grammar reads no macro there, and the
/// kernel vanished from the report (27 kernels of one program). What the preprocessor removes,
/// the masked view blanks; only in a head (a word, `>`, `*` or `&` before the use, a name and
/// its `(` after it), where an empty expansion is the only one that compiles.
fn empty_call_macro_heads(src: &str, empty: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    for name in empty {
        for (at, end) in uses_with_ends(src, name) {
            if end == at + name.len() {
                continue; // no arguments
            }
            let before = src[..at].trim_end();
            let head_before = before.bytes().last().is_some_and(|c| {
                c.is_ascii_alphanumeric() || matches!(c, b'_' | b'>' | b'*' | b'&')
            }) && !before.ends_with("return");
            let after = src[end..].trim_start();
            let name_after = crate::lang::leading_identifier(after)
                .is_some_and(|name| after[name.len()..].trim_start().starts_with('('));
            if head_before && name_after {
                out.push(at..end);
            }
        }
    }
    out
}

/// Uses of `empty` macros (`empty_macros`) alone on their line where a namespace opens or
/// closes: before `namespace`, or after a `}` with only a directive line, another such use or the
/// file's end after them (`CUB_NS_PREFIX` then `namespace cub {`; `}` then `CUB_NS_POSTFIX`, in
/// every header of a vendored CUB, each a syntax error to the grammar); or where a loop's pragma
/// goes, before `for`, `while` or `do` (`OUTER_UNROLL` defined as nothing, or as a pragma the
/// build cannot use: 19 kernels of one proxy application). The preprocessor removes them, and
/// so does the masked view. Nowhere else: a macro empty in every definition seen may still be
/// defined on the command line or by an includer (`#ifndef CALLABLE` `#define CALLABLE`
/// `#endif`, `CALLABLE int idx()`), and read as nothing it would hide an execution space.
fn empty_macro_lines(src: &str, empty: &[String]) -> Vec<std::ops::Range<usize>> {
    let code_after = |at: usize| {
        let mut rest = &src[at..];
        loop {
            rest = rest.trim_start();
            match rest.strip_prefix("//") {
                Some(r) => rest = r.split_once('\n').map_or("", |(_, r)| r),
                None => return rest,
            }
        }
    };
    let alone = |at: usize, end: usize| {
        let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[end..].find('\n').map_or(src.len(), |i| end + i);
        let after = src[end..line_end].trim();
        src[line_start..at].trim().is_empty() && (after.is_empty() || after.starts_with("//"))
    };
    let mut out = Vec::new();
    for name in empty {
        for at in uses(src, name) {
            let end = at + name.len();
            if !alone(at, end) {
                continue;
            }
            let next = code_after(end);
            let next_word: String = next
                .chars()
                .take_while(|&c| c == '_' || c.is_ascii_alphanumeric())
                .collect();
            let opens = next_word == "namespace";
            let loop_pragma = matches!(next_word.as_str(), "for" | "while" | "do");
            // The code before it, read over the lines just above (comments between).
            let from = (at.saturating_sub(2048)..at)
                .find(|&i| src.is_char_boundary(i))
                .unwrap_or(at);
            let closes = lang::without_comments(&src[from..at])
                .trim_end()
                .ends_with('}')
                && (next.is_empty() || next.starts_with('#') || empty.contains(&next_word));
            if opens || closes || loop_pragma {
                out.push(at..end);
            }
        }
    }
    out
}

/// Macros that stand for `constexpr` (`#define NCCL_IF_CONSTEXPR constexpr`, empty for C++11):
/// object-like, every definition with a body is that word alone. The grammar reads `if
/// NCCL_IF_CONSTEXPR (x)` as an error (a collective-communication library's kernels); the
/// masked view blanks the uses, and the grammar reads a plain `if` (whose condition the analysis
/// reads the same: a compile-time constant is uniform).
fn constexpr_macros(defs: &[Define], included: &[(String, String)]) -> Vec<String> {
    macros_defined_as(defs, included, |body, function_like| match body {
        "" if !function_like => None,
        b => Some(b == "constexpr" && !function_like),
    })
}

/// Macros that stand for a kernel attribute: every definition with a body, in the file or a
/// header it includes, is one call of `__launch_bounds__` or `__maxnreg__` (`#define
/// LAUNCH_BOUNDS(x) __launch_bounds__((x))`, with an empty definition for old toolkits; `#define
/// MGPU_LAUNCH_BOUNDS(box) __launch_bounds__(box::nt, box::occ)`). The grammar reads no macro in
/// a function's head (`__global__ LAUNCH_BOUNDS(256) void k(...)`): the definition was a syntax
/// error, and the kernel vanished from the report (a public parallel-primitives library's radix
/// sort, 9 of 10 kernels). Blanked in the masked view, the head reads as without the attribute;
/// the scan keeps the use as the kernel's attribute (`scan::attributes_within`), which the
/// wrappers copy with the head.
pub(crate) fn attribute_macros(defs: &[Define], included: &[(String, String)]) -> Vec<String> {
    call_macros(defs, included, crate::lang::KERNEL_ATTRIBUTE_CALLS)
}

/// Macros that stand for an alignment or another attribute of what they qualify: every
/// definition with a body, in the file or a header it includes, is one call of `__align__`,
/// `__attribute__`, `__declspec` or `alignas` (`#define _ALIGN(x) __align__(x)`, with
/// `__attribute__((aligned(x)))` and `__declspec(align(x))` for host compilers, as public
/// hashing miners define it). The grammar reads no macro in a declaration
/// (`uint32_t _ALIGN(16) h[8];`): the kernel was a syntax error (CP001), and its uses at file
/// scope a hundred and seventy (CP100) in one such miner. They only change how the compiler
/// lays out what they qualify, never what a kernel computes: blanked in the masked view, like
/// `__align__(N)` itself.
pub(crate) fn layout_macros(defs: &[Define], included: &[(String, String)]) -> Vec<String> {
    call_macros(
        defs,
        included,
        &[
            "__align__",
            "__builtin_align__",
            "__attribute__",
            "__declspec",
            "alignas",
        ],
    )
}

/// Macros every definition with a body of which, in `defs` or `included`, is one call of one of
/// `words`; empty definitions allowed.
fn call_macros(defs: &[Define], included: &[(String, String)], words: &[&str]) -> Vec<String> {
    macros_defined_as(defs, included, |body, _| {
        if body.is_empty() {
            return None;
        }
        Some(words.iter().any(|w| {
            body.strip_prefix(w).is_some_and(|rest| {
                let open = rest.len() - rest.trim_start().len();
                rest[open..].starts_with('(')
                    && closing_paren(rest.as_bytes(), open) == Some(rest.len() - 1)
            })
        }))
    })
}

/// The macros of `defs` and `included` every definition of which `is` accepts: `is` gets the
/// body (continuation lines joined, trimmed) and whether the definition takes arguments
/// (`included` keeps no such mark: false), and says `Some(true)` for a definition of the kind,
/// `Some(false)` for one that is not (the name is then out, whatever its other definitions
/// say), `None` for one that does not count (an empty alternative for another toolkit).
fn macros_defined_as(
    defs: &[Define],
    included: &[(String, String)],
    is: impl Fn(&str, bool) -> Option<bool>,
) -> Vec<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut not = std::collections::BTreeSet::new();
    let bodies = included
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_str(), false))
        .chain(defs.iter().map(|d| (d.name, d.body, d.function_like)));
    for (name, body, function_like) in bodies {
        match is(&replacement_text(body), function_like) {
            Some(true) => {
                names.insert(name.to_string());
            }
            Some(false) => {
                not.insert(name.to_string());
            }
            None => {}
        }
    }
    names.retain(|n| !not.contains(n));
    names.into_iter().collect()
}

/// The names of `bodies` (name, replacement) whose replacement `is` accepts, given the names
/// accepted so far, repeated until no more are: a macro that stands for such macros is one too
/// (statement macros, declaration macros, pragma macros).
fn macros_closed_under<'a, B>(
    bodies: &[(&'a str, B)],
    is: impl Fn(&B, &[&'a str]) -> bool,
) -> Vec<&'a str> {
    let mut names: Vec<&'a str> = Vec::new();
    loop {
        let before = names.len();
        for (name, body) in bodies {
            if !names.contains(name) && is(body, &names) {
                names.push(name);
            }
        }
        if names.len() == before {
            return names;
        }
    }
}

/// `__attribute__((...))` where the grammar reads none: in an alias declaration (`using f2 =
/// float __attribute__((aligned(8)));`, in a public hashing miner's kernels; the grammar reads
/// an attribute after a `typedef`'s declarator but not after an alias's type), and after an
/// array declarator (`unsigned short image[Y * X] __attribute__((aligned(1024)));`, a
/// benchmark's image buffers, each a syntax error, CP100; `__shared__ float t[256]
/// __attribute__((aligned(16)));` in a kernel would have been CP001). An alignment or another
/// attribute changes how the compiler lays out what it qualifies, never what a kernel
/// computes: blanked in the masked view, kept in the output.
fn declarator_attributes(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains("__attribute__") {
        return Vec::new();
    }
    static ATTRIBUTE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = ATTRIBUTE.get_or_init(|| {
        regex::Regex::new(
            r"\busing\s+[A-Za-z_]\w*\s*=[^;{}=]*?\b(__attribute__)\s*\(|\]\s*(__attribute__)\s*\(",
        )
        .expect("valid regex")
    });
    let b = src.as_bytes();
    re.captures_iter(src)
        .filter_map(|c| {
            let word = c.get(1).or_else(|| c.get(2))?;
            let open = c.get(0)?.end() - 1;
            Some(word.start()..closing_paren(b, open)? + 1)
        })
        .collect()
}

/// Explicit instantiations of class templates (`template class ctx<4>;`, `extern template
/// struct Foo<float>;`): the grammar reads them as syntax errors (CP100 at file scope). They
/// only ask the compiler to instantiate what the file defines; the analysis reads the
/// definitions. Blanked in the masked view.
fn class_instantiations(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains("template") {
        return Vec::new();
    }
    static INSTANTIATION: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = INSTANTIATION.get_or_init(|| {
        regex::Regex::new(
            r"(?m)(?:^|[;{}])[ \t]*((?:extern\s+)?template\s+(?:class|struct)\s+[A-Za-z_:][^;{}()=]*;)",
        )
        .expect("valid regex")
    });
    re.captures_iter(src)
        .filter_map(|c| c.get(1).map(|m| m.range()))
        .collect()
}

/// An upper-case word between `template` and the return type of an explicit instantiation
/// (`template CV_EXPORTS void aggregate<64u>(...);`, OpenCV's stereo matching): an export
/// macro from a header the analysis may not read. The grammar reads a type there, then a
/// second one, and the whole instantiation was a syntax error (CP100, 48 of them in one file).
/// Blanked in the masked view where a return type and the function's name still follow, so a
/// return type spelled in capitals (`template REAL f<float>(...)`) is left alone.
fn instantiation_attribute_words(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains("template") {
        return Vec::new();
    }
    static WORD: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = WORD.get_or_init(|| {
        regex::Regex::new(
            r"(?m)(?:^|[;{}])[ \t]*template[ \t]+([A-Z][A-Z0-9_]*)[ \t]+(?:[A-Za-z_][A-Za-z0-9_:]*[ \t*&]+)+[A-Za-z_][A-Za-z0-9_:]*[ \t]*[<(]",
        )
        .expect("valid regex")
    });
    re.captures_iter(src)
        .filter_map(|c| c.get(1).map(|m| m.range()))
        .collect()
}

/// Explicit instantiations of a member operator template, one line each (`template void
/// PathAggregation::operator()<64>(const GpuMat& left, ...);`, OpenCV's stereo matching): the
/// grammar reads no template arguments after `operator()`, and each line was a syntax error
/// (CP100). They name no kernel (a line with `__global__` is left alone) and only ask the
/// compiler for an instance of what the file defines. Blanked in the masked view.
fn operator_instantiations(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains("operator") {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut at = 0;
    for line in src.split_inclusive('\n') {
        let code = line.trim();
        let start = at + (line.len() - line.trim_start().len());
        at += line.len();
        let Some(rest) = code.strip_prefix("template") else {
            continue;
        };
        if rest.trim_start().starts_with('<')
            || !rest.starts_with([' ', '\t'])
            || !code.ends_with(';')
            || code.contains('{')
            || code.contains("__global__")
            || !lang::has_word(code, "operator")
        {
            continue;
        }
        out.push(start..start + code.len());
    }
    out
}

/// Uses of a statement macro whose replacement begins with its first parameter and a `;`
/// (`#define CHECK_CUDA(A, debug) A; if (debug) { ... }`), given that argument empty: the use
/// ends the statement written before it without a `;`, as a widely forked rasterizer checks
/// its launches (`kernel<<<g, b>>>(args)` on one line, `CHECK_CUDA(, debug)` on the next).
/// The grammar read the launch and the use as one broken statement (CP100), and the launch
/// stayed plain. In the masked view the use's first byte becomes that `;` (the returned
/// offset) and the rest of the use is blanked (the range): what the use adds after the `;`
/// is host code that checks an error.
fn terminating_macro_uses(
    src: &str,
    defs: &[Define],
    included_macros: &[(String, String)],
) -> Vec<(usize, std::ops::Range<usize>)> {
    if !src.contains("(,") && !src.contains("( ,") {
        return Vec::new();
    }
    // A replacement that begins with a word and `;`: the first parameter, for a file's own
    // definition (whose list says so); an included one's list is not at hand, and a bare word
    // followed by `;` is a statement only as a parameter.
    // The rest of the replacement is left out of the analysis's view, so it must be host code
    // that checks an error: nothing that synchronizes or reads the block index.
    const DEVICE_WORDS: &[&str] = &[
        "__sync",
        "sync(",
        "barrier",
        "blockIdx",
        "gridDim",
        "__shfl",
        "asm",
        "this_grid",
    ];
    let starts_with_statement = |body: &str, first: Option<&str>| {
        let body = replacement_text(body);
        if DEVICE_WORDS.iter().any(|w| body.contains(w)) {
            return None;
        }
        let word = lang::leading_identifier(&body)?;
        let rest = body[word.len()..].trim_start();
        (rest.starts_with(';') && first.is_none_or(|f| f == word)).then_some(())
    };
    let mut names: Vec<String> = defs
        .iter()
        .filter(|d| d.function_like)
        .filter_map(|d| {
            let params = macro_parameter_list(d.params?);
            starts_with_statement(d.body, Some(params.first()?.as_str()))?;
            Some(d.name.to_string())
        })
        .chain(
            included_macros
                .iter()
                .filter(|(_, body)| starts_with_statement(body, None).is_some())
                .map(|(n, _)| n.clone()),
        )
        .collect();
    names.sort();
    names.dedup();
    let b = src.as_bytes();
    macro_uses(src, &names)
        .into_iter()
        .filter_map(|r| {
            let open = r.end + (src[r.end..].len() - src[r.end..].trim_start().len());
            if b.get(open) != Some(&b'(') || !src[open + 1..].trim_start().starts_with(',') {
                return None;
            }
            let close = closing_paren(b, open)?;
            // The other arguments are names and literals (`debug`), no calls: a statement
            // passed there would leave the view with the use.
            (!src[open + 1..close].contains('(')).then_some((r.start, r.start + 1..close + 1))
        })
        .collect()
}

/// The comma before an empty last argument of a call (`ncvAssertPrintReturn(ok, "msg", );`,
/// OpenCV's legacy module): only a macro takes one, and the grammar reads none, so each use was
/// a syntax error (CP100). The comma is blanked in the masked view, a call of one argument
/// fewer.
fn empty_last_arguments(src: &str) -> Vec<std::ops::Range<usize>> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    for (at, _) in src.match_indices(',') {
        let next = b[at + 1..].iter().find(|x| !matches!(x, b' ' | b'\t'));
        if next == Some(&b')') && inside_call(b, at) {
            out.push(at..at + 1);
        }
    }
    out
}

/// `macro_uses`, each with its arguments where `(` follows the name on its line.
fn macro_uses_with_arguments(src: &str, names: &[String]) -> Vec<std::ops::Range<usize>> {
    let b = src.as_bytes();
    macro_uses(src, names)
        .into_iter()
        .filter_map(|r| Some(r.start..use_end(b, r.start, &src[r])?))
        .collect()
}

/// Where the words `names` stand in `src` outside preprocessor lines.
fn macro_uses(src: &str, names: &[String]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    for name in names {
        for at in lang::word_indices(src, name) {
            let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
            if !src[line_start..at].trim_start().starts_with('#') {
                out.push(at..at + name.len());
            }
        }
    }
    out
}

/// Macros that a header defines as a pointer qualifier (`__restrict__`), written between a
/// pointer's `*` and the declared name: `const float * GGML_CUDA_RESTRICT x = p;`, in
/// parameter lists too. The grammar reads no macro there (it is not expanded), and the kernel
/// was a syntax error (CP001: 16 kernels of a public inference library). `* WORD name` followed
/// by `=`, `,`, `;`, `)` or `[` is no expression, so an upper-case WORD there can only be such
/// a macro; a qualifier changes what the compiler may assume, never what the analysis reads.
fn restrict_macros(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains('*') {
        return Vec::new();
    }
    static QUALIFIER: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = QUALIFIER.get_or_init(|| {
        regex::Regex::new(r"\*\s*(_*[A-Z][A-Z0-9_]*)\s+[A-Za-z_][A-Za-z0-9_]*\s*[=,;)\[]")
            .expect("valid regex")
    });
    re.captures_iter(src)
        .filter_map(|c| c.get(1))
        .filter(|m| {
            // A word of its own (not the end of `x*ABC` glued to something before the star).
            !src[m.end()..].starts_with(|ch: char| ch == '_' || ch.is_ascii_alphanumeric())
        })
        .map(|m| m.range())
        .collect()
}

/// A qualified name after `typename` (`T::U`, `::n::B<T, C<T>>::D`, `T::template V<N>`), as
/// `typename_casts` and `typename_statement_casts` read it.
const DEPENDENT_NAME: &str = r"(?:::\s*)?[A-Za-z_]\w*(?:\s*<[^;{}()<>]*(?:<[^;{}()<>]*>[^;{}()<>]*)*>)?(?:\s*::\s*(?:template\s+)?[A-Za-z_]\w*(?:\s*<[^;{}()<>]*(?:<[^;{}()<>]*>[^;{}()<>]*)*>)?)+";

/// The underlying type of an unnamed enumeration (`typedef enum : int { ADAM_MODE_0 = 0 }
/// adamMode_t;`, as a training library's optimizer kernels declare their modes; `enum :
/// unsigned { ... };`): the grammar reads a base only after an enumeration's name, and the
/// declaration was a syntax error (CP100), its enumerators unknown to the kernels that use
/// them. The `: TYPE` is blanked in the masked view; the type changes no value the analysis
/// reads.
fn unnamed_enum_bases(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains("enum") {
        return Vec::new();
    }
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r"\benum[ \t]*(:[ \t]*[A-Za-z_][A-Za-z_0-9: \t]*?)[ \t\n]*\{")
            .expect("valid regex")
    });
    re.captures_iter(src)
        .filter_map(|c| c.get(1))
        .map(|m| m.range())
        .collect()
}

/// The commas of parenthesized comma expressions whose first operand is an assignment: `x =
/// c ? (j = 1, r) : (j = 0, -r);` (a tree-building kernel of a t-SNE library), `f(op, (off ^=
/// size, load(off))...)` (a linear-algebra library's pack expansion). The grammar reads no
/// assignment before a comma in parentheses, and the kernel was a syntax error (CP001). With
/// `+` for each comma the masked view reads one assignment whose value names every operand
/// (`(j = 1 + r)`): the same writes and reads for the analysis, and a value that varies
/// wherever the true one may. Only a `(` that opens an expression (after an operator, `(`,
/// `[`, `,` or `return`), not a call's or a declarator's parameter list, whose commas pass
/// separate arguments; not after `<` or `>` either, which may close a template's arguments
/// (`f<int>(x = 3, y)` passes two).
fn commas_after_assignments(src: &str) -> Vec<usize> {
    static OPEN: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let open = OPEN.get_or_init(|| {
        regex::Regex::new(r"(?:[=?:,(\[!&|^+\-*/%~]|\breturn)\s*\(").expect("valid regex")
    });
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut pairs: Option<std::collections::HashMap<usize, usize>> = None;
    for m in open.find_iter(src) {
        let at = m.end() - 1;
        // Each bracket's partner, found once: a region's nested brackets are stepped over,
        // so that every byte is read at the one level where it stands.
        let pairs = pairs.get_or_insert_with(|| bracket_pairs(src));
        let Some(&close) = pairs.get(&at) else {
            continue;
        };
        let mut assigned = false;
        let mut commas = Vec::new();
        let mut i = at + 1;
        while i < close {
            match b[i] {
                b'(' | b'[' | b'{' => match pairs.get(&i) {
                    Some(&end) => i = end,
                    None => break,
                },
                _ if opens_literal(b, i) => i = literal_end(b, i, b[i]),
                b'/' => {
                    if let Some(end) = branches::past_comment_or_literal(src, i) {
                        i = end - 1; // the comment's end, or the newline that ends it
                    }
                }
                b',' => {
                    if !assigned {
                        break;
                    }
                    commas.push(i);
                }
                b'=' if commas.is_empty() && is_assignment(b, i) => assigned = true,
                _ => {}
            }
            i += 1;
        }
        if assigned {
            out.extend(commas);
        }
    }
    out
}

/// The closing partner of each `(`, `[` and `{` of `src` outside comments and string and
/// character literals, by the opener's index (a `(` in a comment has none) (a closer of another kind closes the innermost opener all the same).
fn bracket_pairs(src: &str) -> std::collections::HashMap<usize, usize> {
    let b = src.as_bytes();
    let mut pairs = std::collections::HashMap::new();
    let mut open = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => open.push(i),
            b')' | b']' | b'}' => {
                if let Some(o) = open.pop() {
                    pairs.insert(o, i);
                }
            }
            _ if opens_literal(b, i) => i = literal_end(b, i, b[i]),
            b'/' => {
                if let Some(end) = branches::past_comment_or_literal(src, i) {
                    i = end - 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    pairs
}

/// Whether byte `i` opens a string or character literal: a `"`, or a `'` that does not follow a
/// letter, digit or `_` (there it is a digit separator, `1'000`, or a prefix's, `u8'a'`, rare
/// enough to read as one).
pub(crate) fn opens_literal(b: &[u8], i: usize) -> bool {
    match b[i] {
        b'"' => true,
        b'\'' => i == 0 || !(b[i - 1] == b'_' || b[i - 1].is_ascii_alphanumeric()),
        _ => false,
    }
}

/// The index of the quote that ends the literal opened at `at` (or of the line's end).
pub(crate) fn literal_end(b: &[u8], at: usize, quote: u8) -> usize {
    let mut i = at + 1;
    while i < b.len() && b[i] != quote && b[i] != b'\n' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    i.min(b.len())
}

/// Whether the `=` at `i` assigns (`=`, `+=`, `<<=`, ...) rather than compares (`==`, `!=`,
/// `<=`, `>=`).
fn is_assignment(b: &[u8], i: usize) -> bool {
    let next = b.get(i + 1).copied();
    let prev = i.checked_sub(1).map(|p| b[p]);
    let prev2 = i.checked_sub(2).map(|p| b[p]);
    if next == Some(b'=') || prev == Some(b'=') || prev == Some(b'!') {
        return false;
    }
    match prev {
        Some(c @ (b'<' | b'>')) => prev2 == Some(c),
        _ => true,
    }
}

/// `typename` in front of a functional cast of a dependent type, in an argument, an
/// initializer or a return value (`make_tile(typename TiledMMA::AtomThrID{})`, `return
/// typename Op::Shape();`, as a public GEMM library's kernels write them): the grammar reads
/// no `typename` in an expression, and the kernel was a syntax error (CP001). Blanked in the
/// masked view, `TiledMMA::AtomThrID{}` reads as the same cast. Only after `(`, `,`, `=` or
/// `return` and before a qualified name followed by `{` or `(`: a parameter's or a template
/// parameter's `typename T::U x` is followed by its name.
fn typename_casts(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains("typename") {
        return Vec::new();
    }
    static CAST: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = CAST.get_or_init(|| {
        regex::Regex::new(&format!(
            r"(?:[(,=]|\breturn)\s*(typename)\s+{DEPENDENT_NAME}\s*[{{(]"
        ))
        .expect("valid regex")
    });
    let mut casts: Vec<std::ops::Range<usize>> = re
        .captures_iter(src)
        .filter_map(|c| c.get(1))
        .map(|m| m.range())
        .collect();
    casts.extend(typename_statement_casts(src));
    casts.sort_by_key(|r| r.start);
    casts
}

/// The same at the start of a statement, where the cast's value is used at once
/// (`typename Ktraits::BlockScanT(smem_scan).InclusiveScan(...);`, as kernels built on CUB's
/// block primitives write them): only where the cast's `)` is followed by `.` or `->`, since
/// `typename T::U(x);` there declares `x`.
fn typename_statement_casts(src: &str) -> Vec<std::ops::Range<usize>> {
    static STATEMENT: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = STATEMENT.get_or_init(|| {
        regex::Regex::new(&format!(
            r"(?:[;{{}}]|^)\s*(typename)\s+{DEPENDENT_NAME}\s*(\()"
        ))
        .expect("valid regex")
    });
    let b = src.as_bytes();
    re.captures_iter(src)
        .filter_map(|c| {
            let open = c.get(2)?.start();
            let close = closing_paren(b, open)?;
            let rest = src[close + 1..].trim_start();
            (rest.starts_with('.') || rest.starts_with("->"))
                .then(|| c.get(1).map(|m| m.range()))?
        })
        .collect()
}

/// A keyword type passed as a macro's argument (`CMP_SWP(K, a, b, int, c, d);`, where the
/// macro declares a variable of that type): the grammar reads a call's arguments as
/// expressions, and a keyword type is none (CP001: 12 kernels of a segmented sort). The
/// grammar counts the fixed-width and size types of the C headers (`uint8_t`, `size_t`) as
/// keyword types too (`RUN_APPEND(uint8_t, 4);`, a similarity-search library's launches). So
/// are `new` and `delete` alone, which no expression is: a prefix that a macro pastes names
/// from (`GGML_TENSOR_LOCALS(int64_t, new, w, ne)` declares `new0`...`new3`). In the
/// masked view such a word becomes an identifier of the same length (`xxx`). Only a word that
/// stands alone between `(` or `,` and `,` or `)`, after a call's `(` (an identifier before it
/// that is no keyword: `sizeof(int)`, `return (int)x` and casts are left alone).
fn keyword_type_arguments(src: &str) -> Vec<std::ops::Range<usize>> {
    static ARG: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = ARG.get_or_init(|| {
        regex::Regex::new(
            r"([(,])[ \t]*(int|float|double|char|bool|short|long|unsigned|signed|void|size_t|ssize_t|ptrdiff_t|u?intptr_t|u?int(?:8|16|32|64)_t|char(?:8|16|32|64)_t|nullptr_t|max_align_t|new|delete)[ \t]*[,)]",
        )
        .expect("valid regex")
    });
    const NOT_CALLS: &[&str] = &[
        "sizeof",
        "alignof",
        "__alignof__",
        "_Alignof",
        "decltype",
        "typeid",
        "noexcept",
        "return",
        "case",
        "throw",
        "new",
        "delete",
        "else",
        "do",
    ];
    let b = src.as_bytes();
    let ident = |x: u8| x == b'_' || x.is_ascii_alphanumeric();
    let mut out = Vec::new();
    let mut from = 0;
    // Overlapping matches (`f(int,int)`): search again from each match's word end.
    while let Some(c) = re.captures_at(src, from) {
        let (Some(sep), Some(word)) = (c.get(1), c.get(2)) else {
            break;
        };
        from = word.end();
        if sep.as_str() == "(" {
            // The identifier before `(`: a call's name, not a keyword.
            let before = src[..sep.start()].trim_end();
            let name_start = before.bytes().rposition(|x| !ident(x)).map_or(0, |i| i + 1);
            let name = &before[name_start..];
            if name.is_empty() || name.as_bytes()[0].is_ascii_digit() || NOT_CALLS.contains(&name) {
                continue;
            }
        } else if !inside_call(b, sep.start()) {
            continue;
        }
        out.push(word.range());
    }
    out
}

/// Uses of a function-like macro whose replacement text is a dependent type (`#define
/// MAKE_VEC(T, cn) typename MakeVec<T, cn>::type`, OpenCV's arithmetic kernels) where a
/// declaration's type stands: followed by a declarator's name, `*` or `&` (`MAKE_VEC(T, 2)
/// val;`). The grammar reads a call there, and each such declaration was a syntax error
/// (CP100, CP001 in a kernel). In the masked view the use becomes an identifier of the same
/// length, a type's name. Uses over several lines are left alone (the view keeps every
/// newline where it is). Only the file's own macros: an included one's parameters are not kept
/// (`program::macro_definitions`), so it is not known to be function-like.
fn type_macro_uses(src: &str, defs: &[Define]) -> Vec<std::ops::Range<usize>> {
    if !src.contains("typename") {
        return Vec::new();
    }
    let names = macros_defined_as(defs, &[], |body, function_like| {
        (function_like && body.trim_start().starts_with("typename ")).then_some(true)
    });
    let mut out = Vec::new();
    for name in &names {
        for (at, end) in uses_with_ends(src, name) {
            if end == at + name.len() || src[at..end].contains('\n') {
                continue; // no arguments: not this macro's use
            }
            let next = src[end..].trim_start_matches([' ', '\t']);
            if next
                .starts_with(|c: char| c == '_' || c == '*' || c == '&' || c.is_ascii_alphabetic())
            {
                out.push(at..end);
            }
        }
    }
    out
}

/// Functional casts to a keyword type the grammar reads only as a declaration's specifier
/// (`unsigned(e) < unsigned(n)`, `long(x)`, in a collective-communication library's kernels;
/// `int(x)` and `float(x)` it reads): in an expression (after an operator, `(`, `,`, `[` or
/// `return`) such a word followed by `(` becomes an identifier of the same length in the
/// masked view, a call of the same shape. After a word (`unsigned long(x)`) or at a
/// statement's start (`unsigned (*fp)(int);` declares) it is left alone.
fn keyword_functional_casts(src: &str) -> Vec<std::ops::Range<usize>> {
    static CAST: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = CAST.get_or_init(|| {
        regex::Regex::new(r"\b(unsigned|signed|long|short)[ \t]*\(").expect("valid regex")
    });
    let mut out = Vec::new();
    for c in re.captures_iter(src) {
        let Some(word) = c.get(1) else {
            continue;
        };
        let before = src[..word.start()].trim_end();
        // `a < unsigned(n)`, not `function<long(int)>`: a `<` right after a name opens
        // template arguments, where `long(int)` is a function type.
        let template_open = before
            .strip_suffix('<')
            .is_some_and(|b| b.ends_with(|ch: char| ch == '_' || ch.is_ascii_alphanumeric()));
        let operator =
            before.ends_with(|ch: char| "(,=+-*/%<>!?:&|^[~".contains(ch)) && !template_open;
        if operator || last_word(before) == "return" {
            out.push(word.range());
        }
    }
    out
}

/// Whether the `,` at `at` separates a call's arguments: the innermost open `(` before it
/// follows an identifier (not a keyword such as `sizeof`, not a declaration's type list).
fn inside_call(b: &[u8], at: usize) -> bool {
    let mut depth = 0usize;
    for i in (0..at).rev() {
        match b[i] {
            b')' | b']' | b'}' => depth += 1,
            b'(' | b'[' | b'{' if depth > 0 => depth -= 1,
            b'(' => {
                let before = String::from_utf8_lossy(&b[..i]);
                let before = before.trim_end();
                return before
                    .bytes()
                    .last()
                    .is_some_and(|x| x == b'_' || x.is_ascii_alphanumeric());
            }
            b'[' | b'{' | b';' => return false,
            _ => {}
        }
    }
    false
}

/// Uses of a macro of one parameter that the file defines only as that parameter or as
/// nothing (`#define ROCM_ONLY(x) x` for one platform, `#define ROCM_ONLY(x)` for the other, as
/// a convolution library writes `cudaFuncSetAttribute(ROCM_ONLY((void *)) kernel, ...)`): the
/// grammar reads no macro call there, and the statement was a syntax warning. In the masked
/// view the name, its `(` and its `)` are blanked, and the argument reads as the identity's
/// expansion. The ranges to blank.
fn identity_macro_uses(src: &str, defs: &[Define]) -> Vec<std::ops::Range<usize>> {
    // Per name: every definition is the parameter or nothing, and one is the parameter.
    let mut names: std::collections::BTreeMap<&str, (bool, bool)> = Default::default();
    for d in defs {
        let params = d.params.map(macro_parameter_list).unwrap_or_default();
        let body = replacement_text(d.body);
        let identity = params.len() == 1 && body == params[0];
        let fits = identity || (params.len() == 1 && body.is_empty());
        let (all_fit, some_identity) = names.entry(d.name).or_insert((true, false));
        *all_fit &= fits;
        *some_identity |= identity;
    }
    let mut out = Vec::new();
    for (name, _) in names.into_iter().filter(|&(_, (all, one))| all && one) {
        for (at, end) in uses_with_ends(src, name) {
            // Past its arguments where it has them (`use_end`): `(` to the `)` before `end`.
            if let Some(open) = src[at + name.len()..end].find('(') {
                out.push(at..at + name.len() + open + 1);
                out.push(end - 1..end);
            }
        }
    }
    out
}

/// One `#define` of a text: its name, whether it takes parameters, and its replacement text
/// (from right after the name or the parameter list, line continuations kept).
pub(crate) struct Define<'a> {
    pub name: &'a str,
    pub function_like: bool,
    /// A function-like macro's parameter list, parentheses included.
    pub params: Option<&'a str>,
    pub body: &'a str,
}

/// A function-like macro's parameters from its list as written (`(a, b, ...)`, parentheses
/// optional); `...` is `__VA_ARGS__`.
pub(crate) fn macro_parameter_list(list: &str) -> Vec<String> {
    list.trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(|p| match p.trim() {
            "..." => "__VA_ARGS__".to_string(),
            p => p.to_string(),
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// What the preprocessor replaces a use with, from a definition's body as written: no line
/// continuation, no comment (`#define UNROLL //#pragma unroll 9` is empty), trimmed.
pub(crate) fn replacement_text(body: &str) -> String {
    // Most bodies have neither (every transform reads the thousands of macros a large library's
    // headers define, PyTorch's: this was a quarter of `check`'s time on such units).
    if !body.contains('/') && !body.contains('\\') {
        return body.trim().to_string();
    }
    lang::without_comments(&body.replace("\\\n", " "))
        .trim()
        .to_string()
}

/// The block comments inside `#define` bodies (`sizeof_log = sizeof(log); /* reset */ \`),
/// and comment openers inside their string literals (`"http://"`). The grammar ends a
/// definition's text at either, so the rest of a body continued past one read as code (a
/// statement macro's `throw ... "' failed";` became a syntax error that reached past the
/// definition).
fn define_comments(src: &str, defs: &[Define]) -> Vec<std::ops::Range<usize>> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    for d in defs {
        if !d.body.contains("/*") {
            continue;
        }
        let start = d.body.as_ptr() as usize - src.as_ptr() as usize;
        let end = start + d.body.len();
        let mut i = start;
        while i < end {
            match b[i] {
                q @ (b'"' | b'\'') => {
                    i += 1;
                    while i < end && b[i] != q && b[i] != b'\n' {
                        // The grammar's definition text ends at a comment opener even inside
                        // a literal (`"see http://..."`): the opener is blanked too.
                        if b[i] == b'/' && matches!(b.get(i + 1), Some(b'*' | b'/')) {
                            out.push(i..i + 2);
                            i += 2;
                            continue;
                        }
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                b'/' if b.get(i + 1) == Some(&b'/') => break,
                b'/' if b.get(i + 1) == Some(&b'*') => {
                    let close = src[i + 2..].find("*/").map_or(b.len(), |c| i + 2 + c + 2);
                    out.push(i..close);
                    i = close;
                }
                _ => i += 1,
            }
        }
    }
    out
}

/// The `#define`s of `text`, in order (the masked view's macro rules; the macros of included
/// files, `program::macro_definitions`).
pub(crate) fn defines(text: &str) -> Vec<Define<'_>> {
    if !text.contains("define") {
        return Vec::new();
    }
    static DEFINE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = DEFINE.get_or_init(|| {
        regex::Regex::new(
            r"(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)(\([^)\n]*\))?((?:[^\n]*\\\n)*[^\n]*)",
        )
        .expect("valid regex")
    });
    re.captures_iter(text)
        .filter_map(|c| {
            // A last line ending in `\` continues into a blank line (`}  \` closing a
            // statement macro, then an empty line): the body ends before that `\`.
            let mut body = c.get(3)?.as_str();
            while let Some(before) = body.trim_end().strip_suffix('\\') {
                body = before;
            }
            Some(Define {
                name: c.get(1)?.as_str(),
                function_like: c.get(2).is_some(),
                params: c.get(2).map(|p| p.as_str()),
                body,
            })
        })
        .collect()
}

/// Where the use of macro `name` at `at` ends: past its arguments where `(` follows the name
/// on its line, else right after the name; none where the `(` is never closed.
fn use_end(b: &[u8], at: usize, name: &str) -> Option<usize> {
    let end = at + name.len();
    let spaces = b[end..]
        .iter()
        .take_while(|x| *x == &b' ' || *x == &b'\t')
        .count();
    if b.get(end + spaces) == Some(&b'(') {
        closing_paren(b, end + spaces).map(|close| close + 1)
    } else {
        Some(end)
    }
}

/// Each use of macro `name` outside directive lines (`uses`) with where it ends (`use_end`):
/// past its arguments where it has them. Uses whose `(` is never closed are left out.
fn uses_with_ends<'a>(src: &'a str, name: &'a str) -> impl Iterator<Item = (usize, usize)> + 'a {
    uses(src, name).filter_map(move |at| use_end(src.as_bytes(), at, name).map(|end| (at, end)))
}

/// The index of the `)` that closes the `(` at `open`, string and character literals skipped
/// (a test's name or a format may hold a parenthesis; a literal left open ends at its line). A
/// `'` after a letter or digit is a digit separator (`1'000`), not a literal's start.
pub(crate) fn closing_paren(b: &[u8], open: usize) -> Option<usize> {
    // Not at a `(`: nothing to close, the place itself (as callers have always read it).
    if b.get(open) != Some(&b'(') {
        return (open < b.len()).then_some(open);
    }
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i);
                }
            }
            _ if opens_literal(b, i) => i = literal_end(b, i, b[i]),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Where `name` is used as a word of its own, outside directive lines.
fn uses<'a>(src: &'a str, name: &'a str) -> impl Iterator<Item = usize> + 'a {
    crate::lang::word_indices(src, name).filter(move |&at| {
        let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
        !src[line_start..at].trim_start().starts_with('#')
    })
}

/// Statement macros written one after another with no `;` between them (`OP OP`, as unrolled
/// loops of benchmarks do), which the grammar reads as a declaration missing its `;`: for each
/// use of an object-like macro of this file whose body ends a statement (`;` or `}`), followed
/// by something that is no `;`, the first blank after it (on its line, or the indentation of
/// the next), else the line break after it, becomes a `;` in the masked view. Uses inside
/// directive lines are left alone.
fn statement_macro_separators(
    src: &str,
    defs: &[Define],
    included_macros: &[(String, String)],
) -> (Vec<usize>, Vec<std::ops::Range<usize>>) {
    if !src.contains("#define") && included_macros.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // Macros (the file's, then those of the files it includes) and their bodies; a statement
    // macro's body ends with `;`, `}`, `else` (one link of an `if` chain that its uses build,
    // `CASE(a) CASE(b) ABORT();`, as a public inference library dispatches its kernels) or
    // another statement macro, called or not (worked out to a fixpoint). A file's definition counts with a blank after its name or parameters.
    let defs: Vec<(&str, &str)> = defs
        .iter()
        .filter_map(|d| Some((d.name, d.body.strip_prefix([' ', '\t'])?.trim_end())))
        .chain(
            included_macros
                .iter()
                .map(|(n, b)| (n.as_str(), b.trim_end())),
        )
        .collect();
    let names = macros_closed_under(&defs, |body, names| {
        // A trailing `(...)`: the macro it calls.
        let callee = body
            .strip_suffix(')')
            .and_then(|b| b.rfind('(').map(|i| b[..i].trim_end()))
            .unwrap_or(body);
        let last = last_word(callee);
        body.ends_with(';') || body.ends_with('}') || last == "else" || names.contains(&last)
    });
    if names.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let b = src.as_bytes();
    let ident = |x: u8| x == b'_' || x.is_ascii_alphanumeric();
    let (mut out, mut blanked) = (Vec::new(), Vec::new());
    for name in names {
        for (at, end) in uses_with_ends(src, name) {
            // The gap up to the next token (blanks and comments: `CHECK // why` on its line, or
            // a comment line after it), that token, and the gap's first blank outside comments.
            let (mut next_at, blank) = past_blanks_and_comments(b, end);
            // `#undef` lines after the use (the last of a list, `REG_KB(float)` then `#undef
            // REG_KB`, as a framework's kernel registrations end) are blanked in the masked view
            // and the use reads on to what follows them: the grammar read the use and the
            // directive as one broken declaration. Only `#undef`: the analysis reads no such
            // line from the tree (defines, conditionals and pragmas it does).
            let mut undefs = Vec::new();
            while let Some(line_end) = undef_line_end(b, next_at) {
                undefs.push(next_at..line_end);
                next_at = past_blanks_and_comments(b, line_end).0;
            }
            let next = b.get(next_at).copied();
            // The file's end counts too: a file made of includes and one definition macro
            // (`GN_FWD_BWD_ONE_PASS_DEFINITION(10, 640)`, as a normalization library stamps its
            // kernels' entry points in 44 files) was a syntax warning at its last line.
            // A directive line after it (`#ifdef`, `#endif`, `#define` of the next list: a
            // library of GPU primitives defines its shuffle helpers so, one list per
            // configuration) ends the declaration too, where a blank on the use's line or an
            // empty line before the directive can take the `;`.
            let directive = next == Some(b'#') && statement_args::line_start(b, next_at);
            let follows = directive || next.is_none_or(|x| ident(x) || x == b'}');
            // `... } else`, `} while (...)` of a macro that closes a block: no `;` between.
            let word: String = b[next_at..]
                .iter()
                .take_while(|&&x| ident(x))
                .map(|&x| x as char)
                .collect();
            if !follows || matches!(word.as_str(), "else" | "while" | "catch") {
                continue;
            }
            // No blank on the way to a closing brace (`PRINT_ENCODER(m_.useFP16)` then `}` at
            // the start of the next line, as an inference library's plugin writes it) or to
            // the file's end: the line break after the use ends it. Lines are counted in the
            // file as written, not in the masked view (`lang::LineStarts`), so no later line's
            // number moves; but a break that ends a line comment the use stands in
            // (`//CUDA_ERRCK`) would carry the comment on. Before a name at the start of the
            // next line too: at file scope, where a list of uses has no indentation
            // (`REG_KB(int32_t, float)` lines registering a framework's kernels), the grammar
            // read the uses and the kernel after them as one declaration, and lost the kernel;
            // a use that becomes an empty declaration needs none (`masked`).
            let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
            let commented = src[line_start..at].contains("//");
            let line_break = || {
                (!commented && (directive || next.is_none_or(|x| x == b'}' || ident(x))))
                    .then(|| b[end..next_at].iter().position(|&x| x == b'\n'))
                    .flatten()
                    .map(|i| end + i)
                    .filter(|&at| !in_comment(b, end, at))
                    // A directive must still start its line: only a break with another after it.
                    .filter(|&at| !directive || b[at + 1..next_at].contains(&b'\n'))
            };
            if let Some(at) = blank.or_else(line_break) {
                out.push(at);
                blanked.extend(undefs);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    (out, blanked)
}

/// Where the `#undef` directive that starts at `at` (first on its line) ends: past its
/// continued lines (`branches::directive_end`), at a line break or the file's end. None for
/// anything else.
fn undef_line_end(b: &[u8], at: usize) -> Option<usize> {
    let directive = b.get(at) == Some(&b'#')
        && statement_args::line_start(b, at)
        && b[at + 1..]
            .iter()
            .position(|&x| x != b' ' && x != b'\t')
            .is_some_and(|i| {
                let word = &b[at + 1 + i..];
                word.starts_with(b"undef") && word.get(5).is_none_or(|x| x.is_ascii_whitespace())
            });
    if !directive {
        return None;
    }
    let line_end = b[at..]
        .iter()
        .position(|&x| x == b'\n')
        .map_or(b.len(), |i| at + i);
    Some(branches::directive_end(b, line_end))
}

/// Whether byte `at` of `b` lies in a comment that starts at or after `from` (the gap after a
/// macro's use, which `past_blanks_and_comments` walked).
fn in_comment(b: &[u8], from: usize, at: usize) -> bool {
    let mut i = from;
    while i < at {
        match (b[i], b.get(i + 1)) {
            (b'/', Some(b'/')) => match b[i..].iter().position(|&x| x == b'\n') {
                Some(n) if i + n < at => i += n,
                _ => return true,
            },
            (b'/', Some(b'*')) => match b[i + 2..].windows(2).position(|w| w == b"*/") {
                Some(n) if i + 2 + n + 2 <= at => i += 2 + n + 2,
                _ => return true,
            },
            _ => i += 1,
        }
    }
    false
}

/// From `at`: the index of the next byte that is neither blank nor in a comment, and the first
/// space or tab on the way that is not in a comment.
fn past_blanks_and_comments(b: &[u8], mut at: usize) -> (usize, Option<usize>) {
    let mut blank = None;
    loop {
        match (b.get(at), b.get(at + 1)) {
            (Some(b' ' | b'\t'), _) => {
                blank.get_or_insert(at);
                at += 1;
            }
            (Some(x), _) if x.is_ascii_whitespace() => at += 1,
            (Some(b'/'), Some(b'/')) => {
                while b.get(at).is_some_and(|&x| x != b'\n') {
                    at += 1;
                }
            }
            (Some(b'/'), Some(b'*')) => match b[at + 2..].windows(2).position(|w| w == b"*/") {
                Some(i) => at += 2 + i + 2,
                None => return (b.len(), blank),
            },
            _ => return (at, blank),
        }
    }
}

/// Braced lists in a launch's configuration (`k<<<blocks, {32, 8, 1}, 0, stream>>>(...)`, a
/// `dim3` written as its initializer list, as a training library's extension launches its
/// 2-D kernels): the grammar reads expressions only there, and each such launch was a syntax
/// error (CP100). The masked view reads each brace as a parenthesis (a comma expression of the
/// same text); the rewritten launch copies the list as written, into a `dim3` parameter. The
/// positions of each outermost pair inside `<<<` ... `>>>`.
fn braced_launch_configs(src: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let b = src.as_bytes();
    let mut from = 0;
    while let Some(i) = src[from..].find("<<<") {
        let open = from + i + 3;
        let Some(len) = src[open..].find(">>>") else {
            break;
        };
        let close = open + len;
        from = close + 3;
        let config = &b[open..close];
        if !config.contains(&b'{') || config.contains(&b';') {
            continue;
        }
        let mut depth = 0usize;
        let mut start = 0;
        for (k, &c) in config.iter().enumerate() {
            match c {
                b'{' => {
                    if depth == 0 {
                        start = open + k;
                    }
                    depth += 1;
                }
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        out.push((start, open + k));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Two pointer declarators the grammar cannot read, found in one pass over the stars of `src`
/// (neither in a kernel's head, `in_kernel_head`: a kernel's parameters are forwarded by name,
/// and the rewrite names an unnamed one itself):
///
/// * Unnamed pointer parameters with a default (`typename std::enable_if<c>::type* = nullptr`,
///   as a library's device helpers select an overload): the grammar reads a default only after
///   a named declarator or a reference, and each such parameter was a syntax warning (CP100).
///   The masked view names it `_` in the blank between its `*` and its `=` (`type*_= nullptr`),
///   so that it reads as what it is, a pointer with a default. `*` then blanks then `=` never
///   occurs in an expression (`*=` is one token). `defaults`: the positions of those blanks.
/// * Packs of pointer parameters (`const Vector<T>*... vectors`, `Ts*...` unnamed, as a
///   gradient-boosting library's helpers unpack their arguments): the grammar reads a pack
///   after `&` or `&&` only, and each such parameter list was a syntax warning (CP100). The
///   masked view reads the `*` as `&`, a pack of references: the analysis takes a pack for what
///   it is whatever its declarator, and the output copies the parameter as written. A fold over
///   `*` (`(xs * ...)`) reads as one over `&`, which is no different to the grammar. `packs`:
///   the positions of those stars.
struct PointerDeclarators {
    defaults: Vec<usize>,
    packs: Vec<usize>,
}

fn pointer_declarators(src: &str, global_words: &[&str]) -> PointerDeclarators {
    let mut out = PointerDeclarators {
        defaults: Vec::new(),
        packs: Vec::new(),
    };
    let may_default = src.contains("* ") || src.contains("*\t");
    let may_pack = src.contains("...");
    if !may_default && !may_pack {
        return out;
    }
    let b = src.as_bytes();
    for (star, _) in src.match_indices('*') {
        let blank = star + 1;
        let mut next = blank;
        while b.get(next).is_some_and(|&x| x == b' ' || x == b'\t') {
            next += 1;
        }
        if may_pack && b[next..].starts_with(b"...") {
            let end = b[next..]
                .iter()
                .position(|&x| matches!(x, b')' | b','))
                .map_or(b.len(), |i| next + i);
            if !in_kernel_head(src, star, end, global_words) {
                out.packs.push(star);
            }
            continue;
        }
        // `*`, blanks, a lone `=` (not `==`), after a type's last word, `>` or another `*`.
        let typed = star > 0
            && (b[star - 1] == b'_'
                || b"*> \t".contains(&b[star - 1])
                || b[star - 1].is_ascii_alphanumeric());
        let lone_eq = b.get(next) == Some(&b'=') && b.get(next + 1) != Some(&b'=');
        if next > blank && lone_eq && typed && !in_kernel_head(src, star, next, global_words) {
            out.defaults.push(blank);
        }
    }
    out
}

/// `__global__` and the macros that stand for it (`execution_space_macros`).
fn global_space_words(spaces: &SpaceMacros) -> Vec<&str> {
    std::iter::once("__global__")
        .chain(
            spaces
                .iter()
                .filter(|(_, words)| words.iter().any(|w| w == "__global__"))
                .map(|(name, _)| name.as_str()),
        )
        .collect()
}

/// Whether bytes `from..to` of `src` lie in a kernel's head: `global_words` between the
/// statement before them and the body (or `;`) after them, outside directive lines (a
/// `#define` of the space macro). A kernel's parameters and template parameters are forwarded
/// by name, and the rewrite names an unnamed one itself, so the masked view leaves its head as
/// written.
fn in_kernel_head(src: &str, from: usize, to: usize, global_words: &[&str]) -> bool {
    let b = src.as_bytes();
    let start = b[..from]
        .iter()
        .rposition(|&x| matches!(x, b';' | b'{' | b'}'))
        .map_or(0, |i| i + 1);
    let end = b[to..]
        .iter()
        .position(|&x| matches!(x, b';' | b'{'))
        .map_or(b.len(), |i| to + i);
    src[start..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .any(|l| {
            global_words
                .iter()
                .any(|w| crate::lang::word_indices(l, w).next().is_some())
        })
}

/// A function type as a template type parameter's default (`typename Lambda = auto(T, T,
/// T)->void`, a linear-algebra library's row-operation kernel; `typename F = void(int)`): the
/// grammar reads no abstract function type there, and the kernel was a syntax error (CP001).
/// The masked view blanks the parameter list and the trailing return type, so the default
/// reads as its first word (`auto`, `void`); the output keeps them as written. Only after
/// `typename NAME =` or `class NAME =` at the top level of a `template <...>` list, and not
/// after `decltype`, `sizeof` or the like. The ranges blanked.
fn function_type_defaults(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains("template") || !src.contains('(') {
        return Vec::new();
    }
    let b = src.as_bytes();
    let word = |x: u8| x == b'_' || x.is_ascii_alphanumeric();
    let skip_blanks = |mut i: usize| {
        while b.get(i).is_some_and(|x| x.is_ascii_whitespace()) {
            i += 1;
        }
        i
    };
    let mut out = Vec::new();
    for (t, _) in src.match_indices("template") {
        if t > 0 && word(b[t - 1]) || b.get(t + 8).is_some_and(|&x| word(x)) {
            continue;
        }
        let open = skip_blanks(t + 8);
        if b.get(open) != Some(&b'<') {
            continue;
        }
        // The list's parameters, split at its top-level commas; each `typename N = ...` one.
        let (mut depth, mut i, mut start) = (0i32, open + 1, open + 1);
        while i < b.len() {
            match b[i] {
                b'<' | b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                b'>' if b[i - 1] == b'-' => {} // a trailing return type's `->`
                b'>' if depth > 0 => depth -= 1,
                b';' => break,
                b'>' | b',' if depth == 0 => {
                    if let Some(r) = function_type_default(src, start..i) {
                        out.push(r);
                    }
                    if b[i] == b'>' {
                        break;
                    }
                    start = i + 1;
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

/// In one template parameter's text (`param`), the parameter list and trailing return type of
/// a function type that is its default, if it is a type parameter's (`function_type_defaults`).
fn function_type_default(
    src: &str,
    param: std::ops::Range<usize>,
) -> Option<std::ops::Range<usize>> {
    let text = &src[param.clone()];
    let eq = text.find('=')?;
    let head: Vec<&str> = text[..eq].split_whitespace().collect();
    if !matches!(head.as_slice(), ["typename" | "class", _]) {
        return None;
    }
    let value = &text[eq + 1..];
    let lead = value.len() - value.trim_start().len();
    let value = value.trim_start();
    let first_end = value
        .find(|c: char| !(c == '_' || c == ':' || c.is_ascii_alphanumeric()))
        .unwrap_or(value.len());
    let first = &value[..first_end];
    if first.is_empty()
        || matches!(
            first,
            "decltype" | "sizeof" | "alignof" | "typeof" | "__typeof__" | "__decltype"
        )
    {
        return None;
    }
    let rest = &value[first_end..];
    let paren = rest.len() - rest.trim_start().len();
    if !rest[paren..].starts_with('(') {
        return None;
    }
    // The blanked part runs from the `(` to the parameter's end (its trailing blanks kept).
    let start = param.start + eq + 1 + lead + first_end + paren;
    let end = param.start + text.trim_end().len();
    (start < end).then_some(start..end)
}

/// Empty braces after `=` that a `,` or `)` follows: a parameter's default value written as a
/// value-initialized object (`__global__ void k(float* x, Params p = {})`, `Span<float> w =
/// {}` in a host function's list). The grammar reads only expressions there: such a kernel
/// was a syntax error (CP001), such a function a syntax warning (CP100). The masked view reads
/// the braces as one literal of their length (`00`), so that the default's node covers them
/// both (a parameter copied with its default copies both braces); the output keeps them as
/// written. Only empty braces, on one line: a list with values in it could hold a read the
/// analysis must see. The positions of `{` and `}`.
fn empty_brace_defaults(src: &str) -> Vec<(usize, usize)> {
    if !src.contains('{') {
        return Vec::new();
    }
    // In a comment or a literal the change is harmless: it stays a comment or a literal.
    let c = src.as_bytes();
    let mut out = Vec::new();
    for (at, _) in src.match_indices('=') {
        // Not `==`, `<=`, `+=` and the like.
        if at > 0 && b"=<>!+-*/%&|^".contains(&c[at - 1]) || c.get(at + 1) == Some(&b'=') {
            continue;
        }
        let mut i = at + 1;
        while c.get(i).is_some_and(|x| x.is_ascii_whitespace()) {
            i += 1;
        }
        if c.get(i) != Some(&b'{') {
            continue;
        }
        let open = i;
        i += 1;
        while c.get(i).is_some_and(|&x| x == b' ' || x == b'\t') {
            i += 1;
        }
        if c.get(i) != Some(&b'}') {
            continue;
        }
        let close = i;
        i += 1;
        while c.get(i).is_some_and(|x| x.is_ascii_whitespace()) {
            i += 1;
        }
        if matches!(c.get(i), Some(b',' | b')')) {
            out.push((open, close));
        }
    }
    out
}

/// Uses of a macro that stands for a compile-time assertion or a type alias: every definition
/// with a body, in the file or a header it includes, begins with `typedef` or `static_assert`
/// (`#define CUB_STATIC_ASSERT(cond, msg) typedef int CUB_CAT(...)[(cond) ? 1 : -1]`, in every
/// vendored copy of an older CUB; `static_assert(cond, msg)` in newer ones). In a class body
/// the grammar reads `CUB_STATIC_ASSERT((N % 32 == 0), "...");` as a member function declared
/// with expressions for parameters: a syntax error that took the rest of the class with it
/// (eight regions in each of CUB's block load and store headers, vendored by an inference
/// library, a miner and a collective library). A use followed by its `;` is blanked, the `;`
/// kept: an empty declaration, or an empty statement in a body. What such a macro declares is
/// a name for a type or nothing, which no kernel's analysis reads.
fn assertion_macro_uses(
    src: &str,
    defs: &[Define],
    included_macros: &[(String, String)],
) -> Vec<std::ops::Range<usize>> {
    let names = macros_defined_as(defs, included_macros, |body, _| {
        if body.is_empty() {
            return None;
        }
        let word: String = body
            .chars()
            .take_while(|&c| c == '_' || c.is_ascii_alphanumeric())
            .collect();
        Some(word == "typedef" || word == "static_assert")
    });
    let b = src.as_bytes();
    let mut out = Vec::new();
    for name in &names {
        for (at, end) in uses_with_ends(src, name) {
            if end > at + name.len()
                && b[end..].iter().find(|x| !x.is_ascii_whitespace()) == Some(&b';')
            {
                out.push(at..end);
            }
        }
    }
    out
}

/// Whether a macro's replacement text is one host function's definition (`#define
/// implementNppDecimate(bit, typ) NCVStatus nppiStDecimate_##bit##typ##_C1R(...) { ... }`,
/// OpenCV's legacy module, whose uses stand on lines of their own at file scope): a return
/// type, a name, parameters, then a body to the end. Nothing of the device (`__global__`,
/// `__device__`, a launch), so that the analysis loses nothing by not reading it.
fn host_function(body: &str) -> bool {
    static HEAD: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let head = HEAD.get_or_init(|| {
        regex::Regex::new(
            r"^(?:(?:static|inline|extern|__host__|__forceinline__)\s+)*[A-Za-z_][A-Za-z0-9_:#]*(?:\s*<[^;{}()]*>)?[\s*&]+[A-Za-z_][A-Za-z0-9_:#]*\s*\([^;{}]*\)\s*(?:const\s*)?\{",
        )
        .expect("valid regex")
    });
    let body = body.trim();
    body.ends_with('}')
        && !body.contains("<<<")
        && !body.contains("__global__")
        && !body.contains("__device__")
        && head.is_match(body)
}

/// Uses of a macro whose replacement can only stand where declarations do, never among a
/// body's statements: it begins with `template` (`#define INSTANTIATE(T) template void
/// launch<T>(T*, int);`, as libraries instantiate their launchers per type), `extern template`,
/// `extern "C"` or `namespace`, or is a host function's definition (`host_function`), or is a
/// type alias (`typedef`, `using`: `INHERIT_LAUNCH_PARAMS(30, 21)` on lines of their own in a
/// class, as a public library of GPU primitives declares its tuning per architecture; arguments
/// that are numbers read as no declaration even with a `;`), or with
/// such a macro, `extern` or not (`#define DECL_ALL(n)
/// extern DECL(n, 8); extern DECL(n, 16);`, a public inference library's attention kernels),
/// worked out to a fixpoint. Written at file scope without a `;` after them, the grammar reads
/// the uses and what follows as one declaration: a kernel defined there was missing from the
/// report (a public training library), and each line of a list of such uses was a syntax error
/// (CP100). So in the masked view each use not followed by `;` becomes an empty declaration
/// (`;` and blanks, newlines kept), and so does `extern` before a use (`extern DECL(64, 64);`,
/// an explicit instantiation declaration spelled through a macro), leaving its `;`; the
/// analysis has nothing to read in either.
fn instantiation_macro_uses(
    src: &str,
    defs: &[Define],
    included_macros: &[(String, String)],
) -> Vec<std::ops::Range<usize>> {
    if !src.contains("#define") && included_macros.is_empty() {
        return Vec::new();
    }
    let bodies: Vec<(&str, String)> = defs
        .iter()
        .map(|d| (d.name, d.body))
        .chain(
            included_macros
                .iter()
                .map(|(n, b)| (n.as_str(), b.as_str())),
        )
        .map(|(n, b)| (n, b.replace("\\\n", " ")))
        .collect();
    let first_word = |text: &str| -> (String, usize) {
        let text = text.trim_start();
        let word: String = text
            .chars()
            .take_while(|&c| c == '_' || c.is_ascii_alphanumeric())
            .collect();
        let rest = text.len() - text[word.len()..].trim_start().len();
        (word, rest)
    };
    let names = macros_closed_under(&bodies, |body, names| {
        let body = body.trim_start();
        let (mut word, rest) = first_word(body);
        let mut after = &body[rest..];
        if word == "extern" {
            if after.starts_with("\"C") {
                return true;
            }
            (word, _) = first_word(after);
            after = &after[word.len()..];
        }
        let macro_use = names.contains(&word.as_str())
            && (after.is_empty() || after.trim_start().starts_with('('));
        matches!(
            word.as_str(),
            "template" | "namespace" | "typedef" | "using"
        ) || macro_use
            || host_function(body)
    });
    let b = src.as_bytes();
    let mut out = Vec::new();
    for name in names {
        for (at, end) in uses_with_ends(src, name) {
            let before = src[..at].trim_end();
            let extern_at = before
                .strip_suffix("extern")
                .filter(|rest| !rest.ends_with(|c: char| c == '_' || c.is_ascii_alphanumeric()))
                .map(str::len);
            let next = b[end..].iter().find(|x| !x.is_ascii_whitespace());
            match extern_at {
                Some(start) => out.push(start..end),
                None if next != Some(&b';') => out.push(at..end),
                None => {}
            }
        }
    }
    out
}

/// The arguments of a macro that heads a function's body at file scope, where no definition
/// the check reads gives the macro (`TEST_CASE("fills", "[fill]") { ... }`,
/// `TEMPLATE_TEST_CASE_SIG("typed", "", ((typename K, int N), K, N), (int32_t, 1)) { ... }`:
/// Catch2's test cases, which a public library of GPU hash tables writes in every test file).
/// The grammar reads the arguments as the parameters of a function `NAME`, and a string or a
/// parenthesized list there was a syntax error (CP100, 552 in that library). Blanked, the use
/// reads as `NAME() { ... }`, a function whose body, its launches included, is read as before.
/// Only a name spelled as macros are (capitals, digits, `_`), first on its line at its start,
/// at file scope (no brace open: not a section inside a test's body), after a declaration's end
/// (`;`, `}`, or the file's start; blanks, comments and directive lines between), with a string
/// or a parenthesis among its arguments, and `{` after them.
fn macro_headed_definitions(
    src: &str,
    defs: &[Define],
    included_macros: &[(String, String)],
) -> Vec<std::ops::Range<usize>> {
    if !src.contains('"') && !src.contains("((") {
        return Vec::new();
    }
    let b = src.as_bytes();
    let macro_like = |name: &str| {
        name.bytes().any(|c| c.is_ascii_uppercase())
            && name
                .bytes()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
    };
    let known = |name: &str| {
        defs.iter().any(|d| d.name == name) || included_macros.iter().any(|(n, _)| n == name)
    };
    let mut out = Vec::new();
    let mut scopes: Option<Vec<LineScope>> = None;
    let mut line_start = 0;
    while line_start < b.len() {
        let line_end = b[line_start..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(b.len(), |p| line_start + p);
        let name_len = b[line_start..line_end]
            .iter()
            .take_while(|&&c| c == b'_' || c.is_ascii_alphanumeric())
            .count();
        let name = &src[line_start..line_start + name_len];
        let open = line_start + name_len;
        if name_len > 0 && macro_like(name) && !known(name) && b.get(open) == Some(&b'(') {
            let close = closing_paren(b, open);
            let headed = close.filter(|&close| {
                let (next, _) = past_blanks_and_comments(b, close + 1);
                b.get(next) == Some(&b'{') && src[open + 1..close].contains(['"', '('])
            });
            // At file scope, after a declaration's end (or the file's start).
            let mut at_file_scope = || {
                let scopes = scopes.get_or_insert_with(|| line_scopes(b));
                scopes
                    .binary_search_by_key(&line_start, |l| l.start)
                    .is_ok_and(|i| {
                        let l = scopes[i];
                        l.depth == 0 && matches!(l.last, 0 | b';' | b'}')
                    })
            };
            if let Some(close) = headed.filter(|_| at_file_scope()) {
                out.push(open + 1..close);
            }
        }
        line_start = line_end + 1;
    }
    out
}

/// Where each line of a file starts, and what the code before it says of that place: the depth
/// of the braces open there and the last character of code before it (0: none), comments,
/// blanks and directive lines skipped, string and character literals read as such (a format
/// string's `{}`, a `#define` of a brace). One pass over the file.
#[derive(Clone, Copy)]
struct LineScope {
    start: usize,
    depth: usize,
    last: u8,
}

fn line_scopes(b: &[u8]) -> Vec<LineScope> {
    let mut out = vec![LineScope {
        start: 0,
        depth: 0,
        last: 0,
    }];
    let (mut depth, mut last) = (0usize, 0u8);
    let mut i = 0;
    let mut directive = false;
    let mut at_line_start = true;
    while i < b.len() {
        let c = b[i];
        if at_line_start && !c.is_ascii_whitespace() {
            directive = c == b'#';
            at_line_start = false;
        }
        match c {
            b'\n' => {
                // A directive goes on past a line that ends with a backslash.
                directive &= i > 0 && b[i - 1] == b'\\';
                at_line_start = !directive;
                out.push(LineScope {
                    start: i + 1,
                    depth,
                    last,
                });
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i + 1 < b.len() && b[i + 1] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    if b[i] == b'\n' {
                        out.push(LineScope {
                            start: i + 1,
                            depth,
                            last,
                        });
                    }
                    i += 1;
                }
                i += 1;
            }
            _ if directive || c.is_ascii_whitespace() => {}
            b'"' | b'\''
                if !(c == b'\''
                    && i > 0
                    && (b[i - 1] == b'_' || b[i - 1].is_ascii_alphanumeric())) =>
            {
                i += 1;
                while i < b.len() && b[i] != c && b[i] != b'\n' {
                    i += if b[i] == b'\\' && b.get(i + 1) != Some(&b'\n') {
                        2
                    } else {
                        1
                    };
                }
                last = c;
                if b.get(i) == Some(&b'\n') {
                    continue; // an unclosed literal ends with its line
                }
            }
            _ => {
                match c {
                    b'{' => depth += 1,
                    b'}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
                last = c;
            }
        }
        i += 1;
    }
    out
}

/// The identifier that `text` ends with (blanks after it aside); empty where it ends otherwise.
pub(crate) fn last_word(text: &str) -> &str {
    let text = text.trim_end();
    let start = text
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c == '_' || c.is_ascii_alphanumeric()))
        .map_or(0, |(i, c)| i + c.len_utf8());
    &text[start..]
}

/// Macros that stand for a string literal, written after one (`"found %d " GGML_CUDA_NAME "
/// devices"`, `"n=%" PRId64 "\n"`, `"%" PRIu64`): the grammar reads an identifier among
/// concatenated literals only first or third and later, and the statement was a syntax error
/// (CP100, or CP001 in a kernel that prints). Where an identifier follows a string literal
/// with blanks between (without them it is a literal's suffix, unless another literal follows
/// at once: `"node ("fNID"): "`), it can only be such a macro (`extern "C" int f()` and
/// `operator "" _km` aside); the masked view turns it into a
/// literal of the same length (`"    "`, at least two characters), its arguments with it where
/// it is called on one line; it may stand on the next line. What a literal holds, no analysis
/// reads. Comments, character literals and directive lines are skipped.
fn string_macro_uses(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains('"') {
        return Vec::new();
    }
    let b = src.as_bytes();
    let ident = |x: u8| x == b'_' || x.is_ascii_alphanumeric();
    let mut out = Vec::new();
    let mut line_start = true;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line_start = true;
                i += 1;
                continue;
            }
            b'#' if line_start => {
                // The directive and its continuation lines.
                while i < b.len() && !(b[i] == b'\n' && b[i - 1] != b'\\') {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = b[i + 2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(b.len(), |p| i + 2 + p + 2);
                line_start = false;
                continue;
            }
            b'\'' if i > 0 && ident(b[i - 1]) => {}
            q @ (b'"' | b'\'') => {
                let open = i;
                // A raw literal (`R"(...)"`, `R"x(...)x"`) ends at its `)`, delimiter and `"`.
                let raw_end = (q == b'"' && i > 0 && b[i - 1] == b'R')
                    .then(|| {
                        let delim_end = i + 1 + b[i + 1..].iter().position(|&x| x == b'(')?;
                        let close = [b")", &b[i + 1..delim_end], b"\""].concat();
                        let from = delim_end + 1;
                        let p = b[from..].windows(close.len()).position(|w| w == close)?;
                        Some(from + p + close.len())
                    })
                    .flatten();
                if let Some(end) = raw_end {
                    i = end;
                } else {
                    i += 1;
                    while i < b.len() && b[i] != q && b[i] != b'\n' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                if q == b'\'' {
                    line_start = false;
                    continue;
                }
                // What the literal follows: `extern "C"` and `operator ""` take no macro after.
                if matches!(last_word(&src[..open]), "extern" | "operator") {
                    line_start = false;
                    continue;
                }
                let at = i + b[i.min(b.len())..]
                    .iter()
                    .take_while(|&&x| x.is_ascii_whitespace())
                    .count();
                let end = at
                    + b[at.min(b.len())..]
                        .iter()
                        .take_while(|&&x| ident(x))
                        .count();
                // Without blanks, only between two literals (`"node ("fNID"): "`, as a
                // sequence aligner's debug prints write it, which compilers read as a macro
                // for compatibility), and never an encoding prefix of the next one.
                let between_literals = b.get(end) == Some(&b'"')
                    && !matches!(
                        &src[at..end],
                        "L" | "u" | "U" | "u8" | "R" | "LR" | "uR" | "UR" | "u8R"
                    );
                if (at > i || between_literals) && end - at >= 2 && !b[at].is_ascii_digit() {
                    // With its arguments where they follow on its line: `"B0: bra B1;\n"`
                    // then `repeat31("add.u32 %0, %1, 1;\n")` on the next line, a macro that
                    // repeats its string (a power-measurement suite's inline PTX).
                    let call_end = (b.get(end) == Some(&b'('))
                        .then(|| closing_paren(b, end))
                        .flatten()
                        .filter(|&close| !src[end..close].contains('\n'))
                        .map_or(end, |close| close + 1);
                    out.push(at..call_end);
                }
                line_start = false;
                continue;
            }
            x if !x.is_ascii_whitespace() => line_start = false,
            _ => {}
        }
        i += 1;
    }
    out
}

/// `#pragma` lines between a statement's head and its unbraced body (`for (...)` then
/// `#pragma unroll` then the inner loop, as matrix kernels write it): the grammar takes a
/// directive only where a statement may stand in a block, and the kernel was a syntax error
/// (CP001). A pragma only tells the compiler how to build what follows, so the masked view
/// blanks such a line: one whose previous line of code ends with `)` (a `for`, `while` or `if`
/// head, which the pragma follows), or with `else` or `do` (`} else` then `#pragma unroll` then
/// a loop, in public hashing miners' kernels), and does not continue a directive.
fn pragmas_after_heads(src: &str) -> Vec<std::ops::Range<usize>> {
    if !src.contains("#pragma") {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut previous: Option<&str> = None;
    let mut at = 0;
    for line in src.split_inclusive('\n') {
        let code = line.split("//").next().unwrap_or("").trim();
        if code.starts_with("#pragma") {
            let ends_with_word = |p: &str, w: &str| {
                p.strip_suffix(w)
                    .is_some_and(|b| !b.ends_with(|c: char| c == '_' || c.is_ascii_alphanumeric()))
            };
            let after_head = previous.is_some_and(|p| {
                (p.ends_with(')') || ends_with_word(p, "else") || ends_with_word(p, "do"))
                    && !p.starts_with('#')
                    && !p.ends_with('\\')
            });
            if after_head {
                out.push(at..at + line.trim_end_matches(['\n', '\r']).len());
            }
        } else if !code.is_empty() {
            previous = Some(code);
        }
        at += line.len();
    }
    out
}

/// The pragma operator (`_Pragma("unroll")`, MSVC's `__pragma(...)`) and uses of macros whose
/// replacement is nothing else (`#define LIB_UNROLL _Pragma("unroll")`, written alone on the
/// line before a loop, as libraries spell portable pragmas): the grammar reads a call, or a
/// name, juxtaposed with the statement after it, a syntax error (CP001: ten kernels of one
/// public neural-network library). Like `#pragma` lines (`pragmas_after_heads`) they only tell
/// the compiler how to build what follows; the masked view blanks them. Uses inside directive
/// lines are left alone.
fn pragma_operators(
    src: &str,
    defs: &[Define],
    included_macros: &[(String, String)],
) -> Vec<std::ops::Range<usize>> {
    const OPERATORS: [&str; 2] = ["_Pragma", "__pragma"];
    let mentions = |t: &str| OPERATORS.iter().any(|w| t.contains(w));
    if !mentions(src) && !included_macros.iter().any(|(_, body)| mentions(body)) {
        return Vec::new();
    }
    let b = src.as_bytes();
    // Where the operator's use at `at` ends, past its parentheses.
    let operator_end = |b: &[u8], at: usize, w: &str| -> Option<usize> {
        let open = at
            + w.len()
            + b[at + w.len()..]
                .iter()
                .take_while(|x| x.is_ascii_whitespace())
                .count();
        (b.get(open) == Some(&b'('))
            .then(|| closing_paren(b, open))
            .flatten()
    };
    // A replacement that is one or more uses of the operators or of `names` (macros found to
    // be pragmas already) and blanks, nothing else.
    let only_pragmas = |body: &str, names: &[&str]| {
        let t = body.replace("\\\n", " ");
        let tb = t.as_bytes();
        let mut at = 0;
        let mut seen = false;
        loop {
            at += tb[at..]
                .iter()
                .take_while(|x| x.is_ascii_whitespace())
                .count();
            if at == tb.len() {
                return seen;
            }
            let word: String = t[at..]
                .chars()
                .take_while(|&c| c == '_' || c.is_ascii_alphanumeric())
                .collect();
            if OPERATORS.contains(&word.as_str()) {
                match operator_end(tb, at, &word) {
                    Some(close) => at = close + 1,
                    None => return false,
                }
            } else if names.contains(&word.as_str()) {
                match use_end(tb, at, &word) {
                    Some(end) => at = end,
                    None => return false,
                }
            } else {
                return false;
            }
            seen = true;
        }
    };
    // Worked out to a fixpoint: `#define DO_PRAGMA(x) _Pragma(#x)` then `#define
    // UNROLL(n) DO_PRAGMA(unroll n)`, as a collective-communication library spells its
    // unrolls.
    let bodies: Vec<(&str, &str)> = defs
        .iter()
        .map(|d| (d.name, d.body))
        .chain(
            included_macros
                .iter()
                .map(|(n, b)| (n.as_str(), b.as_str())),
        )
        .collect();
    let names = macros_closed_under(&bodies, |body, names| only_pragmas(body, names));
    let mut out = Vec::new();
    for w in OPERATORS {
        for at in uses(src, w) {
            if let Some(close) = operator_end(b, at, w) {
                out.push(at..close + 1);
            }
        }
    }
    for name in names {
        out.extend(uses(src, name).filter_map(|at| Some(at..use_end(b, at, name)?)));
    }
    out
}

/// Uses of a loop-head macro of this file (`lang::is_loop_head`: `KERNEL_LOOP(i, n) { ... }`):
/// the grammar reads the use as a call and then meets a block, a syntax error (CP001: 6
/// kernels of one benchmark; the spelling of grid-stride loops in many libraries). The first
/// blank between the call's `)` and the `{` becomes a `;` in the masked view, so the grammar
/// reads a call statement (the macro, whose facts the analysis reads: it writes the loop's
/// `blockIdx`/`gridDim`) followed by a block; the analysis treats that pair as a loop
/// (`analysis/body.rs`). Uses inside directive lines and uses with no blank before the `{`
/// are left alone.
fn loop_macro_separators(
    src: &str,
    defs: &[Define],
    included_macros: &[(String, String)],
) -> Vec<usize> {
    let included = included_macros
        .iter()
        .filter(|(_, body)| crate::lang::is_loop_head(body))
        .map(|(name, _)| name.as_str());
    let defined: Vec<(&str, &str)> = defs
        .iter()
        .filter(|d| d.function_like)
        .map(|d| (d.name, d.body))
        .collect();
    let mut names: Vec<(&str, bool)> = defined
        .iter()
        .filter(|(_, body)| crate::lang::is_loop_head(body))
        .map(|(name, _)| (*name, false))
        .chain(included.map(|n| (n, false)))
        .collect();
    // Upper-case names no `#define` here or in an included file explains (a header the
    // analysis cannot read), used at the start of a line as `NAME(args) {`: in a body, a call
    // followed by a block is no C++, so such a use is a statement-head macro. Taken only where
    // an argument is an expression or a literal (`B * N`, a test framework's `SECTION("x")`):
    // with plain names the grammar reads the use as an old-style function definition and has
    // no error to mend.
    static HEAD: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let head = HEAD.get_or_init(|| {
        regex::Regex::new(r"(?m)^[ \t]*([A-Z][A-Z0-9_]*[A-Z0-9])[ \t]*\(").expect("valid regex")
    });
    let known = |n: &str| {
        defined.iter().any(|(d, _)| *d == n) || included_macros.iter().any(|(d, _)| d == n)
    };
    for c in head.captures_iter(src) {
        if let Some(m) = c.get(1) {
            if !known(m.as_str()) && !names.iter().any(|(n, _)| *n == m.as_str()) {
                names.push((m.as_str(), true));
            }
        }
    }
    let b = src.as_bytes();
    let mut out = Vec::new();
    for (name, unknown) in names {
        for at in uses(src, name) {
            let end = at + name.len();
            let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
            let open = end
                + b[end..]
                    .iter()
                    .take_while(|x| x.is_ascii_whitespace())
                    .count();
            if b.get(open) != Some(&b'(') {
                continue;
            }
            let Some(close) = closing_paren(b, open) else {
                continue;
            };
            let after = close + 1;
            if unknown
                && (!src[line_start..at].trim().is_empty() || !has_expression(&src[open..after]))
            {
                continue;
            }
            let gap = b[after..]
                .iter()
                .take_while(|x| x.is_ascii_whitespace())
                .count();
            if b.get(after + gap) != Some(&b'{') {
                continue;
            }
            if let Some(blank) = b[after..after + gap]
                .iter()
                .position(|&x| x == b' ' || x == b'\t')
            {
                out.push(after + blank);
            }
        }
    }
    out
}

/// Whether a parenthesized argument list holds more than names: an operator, or a literal (a
/// string, a character or a number: `SECTION("fills") {`, a test framework's block). A list of
/// plain names the grammar reads as an old-style function definition's parameters.
fn has_expression(args: &str) -> bool {
    let b = args.as_bytes();
    args.contains(['*', '+', '-', '/', '%', '<', '>', '[', '.', '"', '\''])
        || (0..b.len()).any(|i| {
            b[i].is_ascii_digit()
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        })
}

/// Lines of `#if`, `#ifdef`, `#ifndef` and `#endif` that the grammar cannot place, where the
/// group has no `#else` or `#elif` (then the text with the group included is one of the
/// program's own configurations; with them both branches would be read at once):
/// * inside parentheses (a parameter or argument list that the preprocessor chooses from),
///   where every such group inside one pair of parentheses has none (with them both branches
///   would be read at once, which is left to the grammar), except in a definition's parameter
///   list and a launch's arguments (below);
/// * around text whose braces do not balance, which closes a block it did not open
///   (`#if K >= 2048` `} else if (k <= 2048) {` `#endif` inside an `if` chain, as selection
///   kernels' dispatchers are written; `extern "C" {` under `#ifdef __cplusplus`);
/// * inside an expression: the code before the `#if` ends with an operator (`s = "GPU " +`
///   `#ifdef WITH_X` `"X " +` `#endif` `"";`);
/// * inside a declaration's head: the code before the `#if` ends with a word, and the group
///   holds no `;`, `{` or `}` (a specifier or an attribute: `CUTLASS_GLOBAL` `#ifdef
///   __CUDACC__` `__launch_bounds__(...)` `#endif` `void device_kernel(...)`, a public GEMM
///   library's one kernel template);
/// * inside an `if` chain: the group's code begins with `else` (`}` `#if CUDA_VERSION >=
///   12080` `else if constexpr (...) { ... }` `#endif` `else if ...`, as an attention
///   library's kernels choose a quantization).
///
/// Comments, string and character literals are skipped; a directive line is not code.
///
/// In a function definition's parameter list, groups with `#else`/`#elif` are blanked too, so
/// that every branch is read, one after the other; where a branch does not end with a comma
/// (the list's last parameter chosen among several), its `#else`/`#elif` line becomes one
/// (the second list: the byte that becomes `,`).
fn conditionals_in_parens(src: &str) -> (Vec<std::ops::Range<usize>>, Vec<usize>) {
    if !src.contains("#if") {
        return (Vec::new(), Vec::new());
    }
    let mut commas = Vec::new();
    let b = src.as_bytes();
    let mut out = Vec::new();
    // Per open parenthesis: its `#if`/`#endif` lines, its `#else`/`#elif` lines, and what it
    // opens.
    // An `#else`/`#elif` line: its range, and whether it stands between two parameters with
    // no comma (the byte to make one).
    type Other = (std::ops::Range<usize>, Option<usize>);
    // What a parenthesis opens: a launch's arguments (`>>>(`), a list after a name (a call's
    // arguments or a declaration's parameters), or something else.
    enum List {
        Launch,
        Named,
        Other,
    }
    let mut open: Vec<(Vec<std::ops::Range<usize>>, Vec<Other>, List)> = Vec::new();
    // An open `#if` group.
    struct Group {
        line: std::ops::Range<usize>,
        /// The brace depth where it opened, and the lowest depth inside it.
        start: i64,
        lowest: i64,
        /// It has an `#else` or `#elif`.
        other: bool,
        /// It opened inside an expression, or after a word.
        mid_expression: bool,
        after_word: bool,
        /// It holds a `;`, `{` or `}`.
        punct: bool,
        /// Whether its code begins with `else` (none: no code yet).
        opens_with_else: Option<bool>,
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut depth = 0i64;
    // The last byte of code (not blank, not in a comment or directive) before `i`.
    let mut last_code = b';';
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        if line_start {
            let ws = b[i..]
                .iter()
                .take_while(|&&x| x == b' ' || x == b'\t')
                .count();
            if b.get(i + ws) == Some(&b'#') {
                let mut end = i;
                // The directive, with its backslash continuations.
                while end < b.len() {
                    if b[end] == b'\n' {
                        if end > 0 && b[end - 1] == b'\\' {
                            end += 1;
                            continue;
                        }
                        break;
                    }
                    end += 1;
                }
                let word: String = src[i + ws + 1..end]
                    .trim_start()
                    .chars()
                    .take_while(|ch| ch.is_ascii_alphabetic())
                    .collect();
                if let Some((lines, others, _)) = open.last_mut() {
                    match word.as_str() {
                        "if" | "ifdef" | "ifndef" | "endif" => lines.push(i..end),
                        "else" | "elif" | "elifdef" | "elifndef" => {
                            let next = next_code(&src[end..]);
                            let bare = !matches!(last_code, b',' | b'(')
                                && !matches!(next, Some(',' | ')') | None);
                            others.push((i..end, bare.then_some(i + ws)));
                        }
                        _ => {}
                    }
                }
                match word.as_str() {
                    "if" | "ifdef" | "ifndef" => {
                        let mid_expression = b"+-*/%&|^=<>?,!~".contains(&last_code);
                        let after_word = last_code == b'_' || last_code.is_ascii_alphanumeric();
                        groups.push(Group {
                            line: i..end,
                            start: depth,
                            lowest: depth,
                            other: false,
                            mid_expression,
                            after_word,
                            punct: false,
                            opens_with_else: None,
                        });
                    }
                    "else" | "elif" | "elifdef" | "elifndef" => {
                        if let Some(g) = groups.last_mut() {
                            g.other = true;
                        }
                    }
                    "endif" => {
                        if let Some(Group {
                            line,
                            start,
                            lowest,
                            other,
                            mid_expression,
                            after_word,
                            punct,
                            opens_with_else,
                        }) = groups.pop()
                        {
                            let mid_head = (after_word && !punct) || opens_with_else == Some(true);
                            let splits =
                                lowest < start || depth != start || mid_expression || mid_head;
                            // `#if 0` holds text that is never compiled, maybe no code at all.
                            let never = src[line.clone()].trim_start()[1..].trim_start()[2..]
                                .trim()
                                .starts_with('0');
                            if splits
                                && !other
                                && !never
                                && (open.is_empty() || mid_expression || mid_head)
                            {
                                out.push(line);
                                out.push(i..end);
                            }
                        }
                    }
                    _ => {}
                }
                i = end;
                continue;
            }
            line_start = false;
        }
        match c {
            b'\n' => line_start = true,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
                continue;
            }
            b'"' | b'\'' => {
                i += 1;
                while i < b.len() && b[i] != c && b[i] != b'\n' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'{' => {
                depth += 1;
                for g in &mut groups {
                    g.punct = true;
                }
            }
            b'}' => {
                depth -= 1;
                for g in &mut groups {
                    g.lowest = g.lowest.min(depth);
                    g.punct = true;
                }
            }
            b';' => {
                for g in &mut groups {
                    g.punct = true;
                }
            }
            b'(' => {
                let before = &src[..i];
                let list = if before.trim_end().ends_with(">>>") {
                    List::Launch
                } else if after_function_name(before) {
                    List::Named
                } else {
                    List::Other
                };
                open.push((Vec::new(), Vec::new(), list));
            }
            b')' => {
                if let Some((mut lines, others, list)) = open.pop() {
                    // Every group opened in these parentheses closes in them.
                    let opens = lines
                        .iter()
                        .filter(|r| {
                            !src[(*r).clone()].trim_start()[1..]
                                .trim_start()
                                .starts_with("endif")
                        })
                        .count();
                    // With `#else`/`#elif` both branches are read, one after the other: only
                    // in a function definition's parameter list (a name before it, `{` after
                    // it), whose every generated copy repeats the directive lines
                    // (`Param::before`), so that each configuration gets its own branch, and in
                    // a launch's arguments (`>>>(`), which the rewrite copies as written.
                    let definition = match list {
                        List::Launch => true,
                        List::Named => next_code(&src[i + 1..]) == Some('{'),
                        List::Other => false,
                    };
                    if (others.is_empty() || definition)
                        && !lines.is_empty()
                        && opens * 2 == lines.len()
                    {
                        for (line, comma) in others {
                            lines.push(line);
                            commas.extend(comma);
                        }
                        out.extend(lines);
                    }
                }
            }
            _ => {}
        }
        if !c.is_ascii_whitespace() {
            last_code = c;
            for g in groups.iter_mut().filter(|g| g.opens_with_else.is_none()) {
                let rest = &b[i..];
                g.opens_with_else = Some(
                    rest.starts_with(b"else")
                        && !rest
                            .get(4)
                            .is_some_and(|&x| x == b'_' || x.is_ascii_alphanumeric()),
                );
            }
        }
        i += 1;
    }
    // A group inside both parentheses and an expression is found by both rules.
    out.sort_by_key(|r| (r.start, r.end));
    out.dedup();
    (out, commas)
}

/// Whether `before` ends with a function's name (blanks after it), as before a parameter list:
/// a word, not a keyword that takes parentheses (`if`, `while`, `sizeof`, ...).
fn after_function_name(before: &str) -> bool {
    let code = before.trim_end();
    // Past the last character that is not part of a word (which may take several bytes).
    let word_start = code
        .char_indices()
        .rev()
        .find(|&(_, ch)| !(ch == '_' || ch.is_ascii_alphanumeric()))
        .map_or(0, |(at, ch)| at + ch.len_utf8());
    let word = &code[word_start..];
    !word.is_empty()
        && !word.starts_with(|ch: char| ch.is_ascii_digit())
        && !matches!(
            word,
            "if" | "while"
                | "for"
                | "switch"
                | "return"
                | "sizeof"
                | "alignof"
                | "decltype"
                | "constexpr"
                | "requires"
                | "catch"
                | "defined"
                | "noexcept"
                | "static_assert"
                | "__launch_bounds__"
                | "__attribute__"
                | "__declspec"
                | "alignas"
                | "typeid"
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_text_joins_lines_drops_comments_and_trims() {
        for (body, want) in [
            (" __device__  ", "__device__"),
            ("//#pragma unroll 9", ""),
            ("a \\\n b", "a   b"),
            ("x /* y */ z", "x   z"),
            ("\"a/b\"", "\"a/b\""),
            (
                "__attribute__((visibility(\"default\")))",
                "__attribute__((visibility(\"default\")))",
            ),
        ] {
            assert_eq!(replacement_text(body), want, "{body:?}");
        }
    }

    /// An unnamed enumeration's base is blanked for the grammar; a named one's is read.
    #[test]
    fn unnamed_enum_bases_read_as_plain_enumerations() {
        let src = "typedef enum : int {\n  M0 = 0,\n} mode;\nenum : unsigned { X1 = 1 };\nenum F : int { B };\n";
        let found: Vec<&str> = unnamed_enum_bases(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(found, [": int", ": unsigned"]);
        assert!(error_count_of(src) > 0, "an error as written");
        assert_eq!(error_count(src), 0, "{:?}", masked(src));
    }

    /// Parentheses inside string and character literals do not count; a digit separator
    /// starts no literal; an unclosed literal ends at its line.
    #[test]
    fn closing_paren_skips_literals() {
        let text = "f(\"[0, 300)\", ')', 1'000, g(x)) + y";
        assert_eq!(
            closing_paren(text.as_bytes(), 1),
            Some(text.find(") +").unwrap())
        );
        let open = "f(\"a)\n, b) c";
        assert_eq!(
            closing_paren(open.as_bytes(), 1),
            Some(open.find(") c").unwrap())
        );
        assert_eq!(closing_paren(b"x(", 0), Some(0));
        assert_eq!(closing_paren(b"(a", 0), None);
    }

    /// A check macro given an empty first argument ends the launch before it, whether the
    /// file or an included one defines it; a use with a statement, or a macro whose
    /// replacement does not begin with its parameter and `;`, is left alone.
    #[test]
    fn a_check_macro_with_an_empty_statement_ends_the_launch_before_it() {
        let launch =
            "void f(bool d) {\n  k<<<1, 32>>>(p)\n  CHECK(, d)\n  CHECK(g(), d);\n  LOG(, d)\n  CHECK(, f(d))\n  SYNCED(, d)\n}\n";
        let own = format!(
            "#define CHECK(A, debug) A; if (debug) check();\n#define LOG(A, debug) log(A)\n{launch}"
        );
        let found = terminating_macro_uses(&own, &defines(&own), &[]);
        let at = own.find("CHECK(, d)").unwrap();
        assert_eq!(found, [(at, at + 1..at + "CHECK(, d)".len())]);
        let included = [
            ("CHECK".to_string(), "A; if (debug) check();".to_string()),
            ("LOG".to_string(), "log(A)".to_string()),
            ("SYNCED".to_string(), "A; __syncthreads()".to_string()),
        ];
        let found = terminating_macro_uses(launch, &[], &included);
        let at = launch.find("CHECK(, d)").unwrap();
        assert_eq!(found, [(at, at + 1..at + "CHECK(, d)".len())]);
        // Parsed: the launch is read as a statement of its own.
        let view = masked_with(launch, &included).expect("masked");
        assert!(view.contains("k<<<1, 32>>>(p)\n  ;         \n"), "{view}");
        let checked = launch
            .replace("  LOG(, d)\n", "")
            .replace("  CHECK(, f(d))\n", "")
            .replace("  SYNCED(, d)\n", "");
        let tree = parse_with(&checked, &included).tree;
        assert_eq!(error_ranges(tree.root_node()).len(), 0);
        let tree = parse_with(&checked, &included[1..]).tree;
        assert!(!error_ranges(tree.root_node()).is_empty());
    }

    #[test]
    fn function_type_defaults_read_as_their_first_word() {
        let src = "template <typename T, int N = f(2), typename L = auto(T, T)->void, class F = void(int, int), typename D = decltype(g(1))>\n\
                   __global__ void k(T* p, L op);\n";
        let found: Vec<&str> = function_type_defaults(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(found, ["(T, T)->void", "(int, int)"]);
        let view = masked(src).expect("masked");
        assert!(
            view.starts_with("template <typename T, int N = f(2), typename L = auto            , class F = void          , typename D"),
            "{view}"
        );
    }

    #[test]
    fn empty_brace_defaults_read_as_one_literal() {
        let src =
            "void f(P p = {}, Q q = { }, int n = {1}, bool b = x == {}) {\n  int a = {};\n}\n\
                   void g(P p = {\n}) {}\n";
        let found: Vec<&str> = empty_brace_defaults(src)
            .into_iter()
            .map(|(open, close)| &src[open..=close])
            .collect();
        assert_eq!(found, ["{}", "{ }"]);
        let view = masked(src).expect("masked");
        assert!(
            view.starts_with("void f(P p = 00, Q q = 000, int n = {1}"),
            "{view}"
        );
        // Read so, a list of such defaults parses (as written it is an error).
        let defaults = "void f(P p = {}, Q q = { }) {\n  int a = {};\n}\n";
        assert_eq!(error_count(defaults), 0);
        let mut raw = Parser::new();
        raw.set_language(&lang::language()).expect("grammar");
        let unmasked = raw.parse(defaults, None).expect("parse");
        assert!(unmasked.root_node().has_error(), "the grammar alone fails");
    }

    #[test]
    fn carriage_returns_before_line_ends_become_blanks_and_continuations_stay_continuations() {
        let src = "#define A(x) \\\r\n  x;\r\nint a;\r\n\rint b;";
        let view = without_carriage_returns(src);
        assert_eq!(view, "#define A(x)  \\\n  x; \nint a; \n\rint b;");
        assert_eq!(view.len(), src.len());
        assert!(matches!(
            without_carriage_returns("int a;\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(defines(&view)[0].body.trim(), "\\\n  x;");
    }

    #[test]
    fn execution_space_macros_are_read_from_every_definition_with_a_body() {
        let src = "#ifdef __CUDACC__\n#define GLOBAL __global__\n#define HD __host__ __device__\n\
                   #define DI static __device__ inline\n#define ALIGN __align__(8)\n#define BOTH __device__\n\
                   #else\n#define GLOBAL\n#define HD\n#define DI\n#define BOTH int\n#endif\n\
                   #define F(x) __device__\n#define INL inline\n#define MANAGED __managed__\n\
                   #define SHARED __shared__\n\
                   #define OUTER INNER_INL static\n#define INNER_INL HD __forceinline__\n\
                   #define TYPED HD float\n#define INL_ONLY INL inline\n\
                   #define CONST_FN static constexpr __host__ __device__ __forceinline__\n\
                   #define DEV_INL _DEV _FORCE\n#define _DEV __device__\n\
                   #ifdef __CUDACC__\n#define _FORCE __forceinline__\n#else\n#define _FORCE inline\n#endif\n";
        let included = vec![("KERNEL_SPACE".to_string(), " __global__".to_string())];
        let m = execution_space_macros(&defines(src), &included);
        let names: Vec<&str> = m.keys().map(String::as_str).collect();
        // BOTH is also defined as a type; ALIGN and INL name no space; F takes arguments.
        // SHARED stays: the analysis must see `__shared__`. Macros of such macros count, in
        // any order of definition, and so do macros of qualifiers alone inside them (DEV_INL's
        // _FORCE); TYPED holds a type, INL_ONLY no space.
        assert_eq!(
            names,
            [
                "CONST_FN",
                "DEV_INL",
                "DI",
                "GLOBAL",
                "HD",
                "INNER_INL",
                "KERNEL_SPACE",
                "MANAGED",
                "OUTER",
                "_DEV"
            ]
        );
        assert_eq!(m["DEV_INL"], ["__device__", "__forceinline__", "inline"]);
        assert_eq!(m["HD"], ["__host__", "__device__"]);
        assert_eq!(m["DI"], ["static", "__device__", "inline"]);
        assert_eq!(
            m["OUTER"],
            ["__host__", "__device__", "__forceinline__", "static"]
        );
    }

    #[test]
    fn commas_after_assignments_in_parentheses_read_as_plus() {
        let src = "x = c ? (j = 1, r) : (j = 0, -r);\n\
                   f(j = 1, r); g((o ^= 2, h(v))...); y = (a == 1, b) + (a <= 1, b) + (r, j = 1);\n\
                   z = (s <<= 1, t); w = (q = f(a, b), u, v);\n\
                   int k(int a = 1, int b); return (j = 2, r); f<int>(x = 3, y);\n\
                   // y = c / (scale(a, t ? 0 : 1) * scale(b\n// y += bias\nint u = g(p, q); /* (w = 1, v) */\n";
        let marked: String = src
            .char_indices()
            .map(|(i, c)| {
                if commas_after_assignments(src).contains(&i) {
                    '+'
                } else {
                    c
                }
            })
            .collect();
        assert_eq!(
            marked,
            "x = c ? (j = 1+ r) : (j = 0+ -r);\n\
             f(j = 1, r); g((o ^= 2+ h(v))...); y = (a == 1, b) + (a <= 1, b) + (r, j = 1);\n\
             z = (s <<= 1+ t); w = (q = f(a, b)+ u+ v);\n\
             int k(int a = 1, int b); return (j = 2+ r); f<int>(x = 3, y);\n\
             // y = c / (scale(a, t ? 0 : 1) * scale(b\n// y += bias\nint u = g(p, q); /* (w = 1, v) */\n"
        );
        mended("__global__ void k(int* o, int c) { int j, r = 2; o[0] = c ? (j = 1, r) : (j = 0, -r); }\n");
    }

    #[test]
    fn empty_call_macros_are_blanked_in_function_heads_only() {
        let src = "#define BOUNDS(t, b)\ntemplate <class T>\n__global__ void\nBOUNDS (256, 2)\nk(T* p) { p[0] = BOUNDS(1, 2) 3; }\n__device__ T* BOUNDS(1,1) f(int x);\nint g() { return BOUNDS(1, 1) h(2); }\n";
        let blanked: Vec<&str> = empty_call_macro_heads(src, &["BOUNDS".to_string()])
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(
            blanked,
            ["BOUNDS (256, 2)", "BOUNDS(1,1)"],
            "not after `=` or `return`"
        );
        let head =
            "#define BOUNDS(t, b)\n__global__ void\nBOUNDS (256, 2)\nk(float* p) { p[0] = 1; }\n";
        mended(head);
    }

    #[test]
    fn execution_space_macros_may_carry_attributes() {
        let src = "#define FI_INLINE inline __attribute__((always_inline)) __device__
                   #define NODISCARD_HD [[nodiscard]] __host__ __device__
                   #define ATTR_ONLY __attribute__((always_inline))
";
        let m = execution_space_macros(&defines(src), &[]);
        let names: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["FI_INLINE", "NODISCARD_HD"],
            "a space among the words"
        );
        assert_eq!(m["FI_INLINE"], ["inline", "__device__"]);
        assert_eq!(
            without_attributes("a __attribute__ ((x, y(2))) b [[z]] c my__attribute__((k))"),
            "a   b   c my__attribute__((k))"
        );
        let use_ = "#define FI_INLINE inline __attribute__((always_inline)) __device__
FI_INLINE int row() { return blockIdx.x; }
";
        assert_eq!(
            error_count(use_),
            0,
            "the use is blanked in the masked view"
        );
        assert!(error_count_of(use_) > 0, "and an error as written");
    }

    /// An inline specifier's macro, defined per configuration (`__forceinline__` or `inline`),
    /// after an execution-space macro: blanked, so that the definition reads.
    #[test]
    fn inline_specifier_macros_read_as_attributes() {
        let included = [
            ("_LIB_DEVICE".to_string(), "__device__".to_string()),
            ("_LIB_DEVICE".to_string(), "".to_string()),
            (
                "_LIB_FORCEINLINE".to_string(),
                "__forceinline__".to_string(),
            ),
            ("_LIB_FORCEINLINE".to_string(), "inline".to_string()),
            ("_LIB_STATIC".to_string(), "static".to_string()),
        ];
        assert_eq!(visibility_macros(&[], &included), ["_LIB_FORCEINLINE"]);
        let src =
            "template <class T>\n_LIB_DEVICE _LIB_FORCEINLINE void merge(T* k) { k[0] = 1; }\n";
        assert_eq!(
            error_count_of(&masked_with(src, &included).expect("masked")),
            0
        );
        assert!(error_count_of(&masked_with(src, &included[..2]).expect("masked")) > 0);
    }

    #[test]
    fn export_macros_are_attributes_through_chains_but_aliases_of_each_other_are_not() {
        let src = "#ifdef _WIN32\n#define EXP __declspec(dllexport)\n#else\n\
                   #define EXP __attribute__((visibility(\"default\")))\n#endif\n\
                   #define IMP EXP\n#define API IMP\n#define QUIET\n#define LOUD QUIET EXP\n\
                   #define FILE SYS_FILE\n#define SYS_FILE FILE\n#define ALIGNED __align__(16)\n\
                   #define VALUE 1\n#define MAYBE\n#define F(x) __attribute__((x))\n\
                   #define lower __attribute__((cold))\n";
        // MAYBE is empty here and 4 elsewhere; VALUE and ALIGNED say something else; FILE and
        // SYS_FILE name each other and no attribute; LOUD names QUIET, which a build may
        // define; F takes arguments; `lower` has lower case.
        let included = vec![("MAYBE".to_string(), "4".to_string())];
        assert_eq!(
            visibility_macros(&defines(src), &included),
            ["API", "EXP", "IMP"]
        );
        // A use before a declaration's type and after `class` no longer hides the code.
        let use_ = format!("{src}class API Box {{ int x; }};\nAPI int f(int x);\n");
        let masked = masked_with(&use_, &[]).expect("a masked view");
        assert_eq!(error_count_of(&masked), 0, "{masked}");
        assert!(error_count_of(&use_) > 0, "and errors as written");
    }

    #[test]
    fn attribute_macros_are_read_from_their_definitions_and_blanked_with_their_arguments() {
        let src = "#if V >= 3\n#define LB(x) __launch_bounds__((x))\n#define MIX(x) __launch_bounds__(x)\n\
                   #else\n#define LB(x)\n#define MIX(x) __align__(x)\n#endif\n\
                   #define TWO __launch_bounds__(256) __noinline__\n#define FIXED \\\n  __launch_bounds__(128, 2)\n\
                   __global__ void LB(256) k(int* p) { }\n__global__ FIXED void q(int* p) { }\nint LBx = 0;\n";
        let included = vec![("CAP".to_string(), " __maxnreg__(64) ".to_string())];
        // MIX is also an alignment; TWO is more than the call.
        assert_eq!(
            attribute_macros(&defines(src), &included),
            ["CAP", "FIXED", "LB"]
        );
        assert_eq!(error_count(src), 0);
        let m = masked(src).expect("masked");
        assert!(m.contains("__global__ void         k(int* p)"), "{m}");
        assert!(m.contains("__global__       void q"), "{m}");
        assert!(
            m.contains("#define LB(x) __launch_bounds__((x))") && m.contains("int LBx"),
            "{m}"
        );
    }

    #[test]
    fn layout_macros_are_read_from_their_definitions_and_blanked_with_their_arguments() {
        let src = "#ifdef _MSC_VER\n#define AL(x) __declspec(align(x))\n#else\n#define AL(x) __attribute__ ((aligned(x)))\n#endif\n\
                   #define MIXED(x) __align__(x) const\n\
                   __global__ void k(unsigned* p) { unsigned AL(16) h[8]; h[0] = 1; p[0] = h[0]; }\nint ALx = 0;\n";
        let included = vec![("_ALIGN".to_string(), "__align__(x)".to_string())];
        // MIXED is more than the call.
        assert_eq!(layout_macros(&defines(src), &included), ["AL", "_ALIGN"]);
        assert_eq!(error_count(src), 0);
        let m = masked(src).expect("masked");
        assert!(m.contains("unsigned        h[8]"), "{m}");
        assert!(m.contains("int ALx"), "{m}");
    }

    #[test]
    fn grid_constant_macros_are_read_from_their_definitions_and_blanked() {
        let src = "#if __CUDA_ARCH__ >= 700\n#define GC __grid_constant__\n#define TWO __grid_constant__\n\
                   #else\n#define GC\n#define TWO const\n#endif\n#define F(x) __grid_constant__\n\
                   __global__ void k(Args GC const a, GC typename Op::P const p) { }\nint GCx = 0;\n";
        let included = vec![("HDR_GC".to_string(), " __grid_constant__ ".to_string())];
        // TWO is also `const`; F takes arguments.
        assert_eq!(
            grid_constant_macros(&defines(src), &included),
            ["GC", "HDR_GC"]
        );
        assert_eq!(error_count(src), 0);
        let m = masked(src).expect("masked");
        assert!(m.contains("(Args    const a,    typename"), "{m}");
        assert!(
            m.contains("#define GC __grid_constant__") && m.contains("int GCx"),
            "{m}"
        );
    }

    #[test]
    fn a_group_that_continues_an_if_chain_is_read_as_included() {
        let src = "void f(int m) {\n  if (m == 0) {\n    g(0);\n  }\n#if A\n  else if (m == 1) {\n    g(1);\n  }\n#endif\n  else {\n    g(2);\n  }\n\
                   #if B\n  elsewhere(m);\n#endif\n#if C\n  else g(3);\n#else\n  else g(4);\n#endif\n}\n";
        let m = masked(src).expect("masked");
        assert!(
            !m.contains("#if A") && !m.contains("#endif\n  else {"),
            "{m}"
        );
        // A word that only begins with `else`, and a group with an `#else`, stay.
        assert!(
            m.contains("#if B") && m.contains("#if C") && m.contains("#else"),
            "{m}"
        );
    }

    #[test]
    fn typename_is_blanked_only_in_front_of_a_functional_cast() {
        let src = "template <typename T, typename T::U V>\n__device__ void f(typename T::U x, typename T::U (*fp)(int));\n\
                   template <class T> __device__ int g() { auto a = h(typename T::A{}, typename ::n::B<T, C<T>>::D()); return typename T::E(1); }\n";
        let casts: Vec<&str> = typename_casts(src).into_iter().map(|r| &src[r]).collect();
        // The parameters' `typename T::U x` and the template parameters are no casts; the
        // function pointer parameter is read either way.
        assert_eq!(casts.len(), 4, "{casts:?}");
        let m = masked(src).expect("masked");
        assert!(
            m.contains(
                "h(         T::A{},          ::n::B<T, C<T>>::D()); return          T::E(1);"
            ),
            "{m}"
        );
        assert!(m.contains("f(typename T::U x"), "{m}");
        assert_eq!(error_count(src), 0);
    }

    #[test]
    fn typename_is_blanked_in_front_of_a_cast_that_starts_a_statement_and_is_used() {
        let src = "template <class K> __global__ void k(float* out) {\n  __shared__ typename K::Temp t;\n  float x = out[0];\n  typename K::Scan(t).Inclusive(x, x);\n  typename K::Other(t)->run(x);\n  typename K::Value(y);\n  out[0] = x;\n}\n";
        let casts: Vec<usize> = typename_casts(src).into_iter().map(|r| r.start).collect();
        let at = |s: &str| src.find(s).expect("in the source");
        // The declaration `typename K::Value(y);` declares `y`: not a cast.
        assert_eq!(casts, vec![at("typename K::Scan"), at("typename K::Other")]);
        assert_eq!(error_count(src), 0);
    }

    #[test]
    fn gccs_const_reads_as_const() {
        let src = "static __device__ __const__ unsigned char mask = 15;\nint my__const__x;\n";
        assert_eq!(error_count(src), 0);
        let m = masked(src).expect("masked");
        assert!(m.contains("__device__ const     unsigned") && m.contains("my__const__x"));
    }

    #[test]
    fn execution_space_macros_in_front_of_a_definition_are_blanked() {
        let src = "#define GLOBAL __global__\n#define DEV __device__\nDEV static int f() { return 1; }\n\
                   GLOBAL static void k(int *p) { p[0] = f(); }\nint DEV_count = 0; int x = (DEV);\n";
        let masked = masked(src).expect("masked");
        assert_eq!(masked.len(), src.len());
        assert!(masked.contains("    static int f()"), "{masked}");
        assert!(masked.contains("       static void k(int"), "{masked}");
        // Definitions, other words and a use not followed by a word stay.
        assert!(masked.contains("#define GLOBAL __global__"));
        assert!(
            masked.contains("int DEV_count") && masked.contains("(DEV)"),
            "{masked}"
        );
        assert_eq!(error_count(src), 0);
        // Between an extended lambda's captures and its parameters too.
        let lambda = "#define GPU_LAMBDA __host__ __device__\n\
                      void f() { auto g = [] GPU_LAMBDA (int x) { return x; }; g(1); }\n";
        assert_eq!(error_count(lambda), 0, "{:?}", super::masked(lambda));
    }

    fn blanked(src: &str) -> Vec<&str> {
        conditionals_in_parens(src)
            .0
            .into_iter()
            .map(|r| src[r].trim())
            .collect()
    }

    #[test]
    fn conditionals_inside_parentheses_are_blanked_only_without_else() {
        let src = "#if A\nint g;\n#endif\nvoid f(int a,\n#ifndef B\n int b,\n#endif\n int c);\n";
        assert_eq!(blanked(src), ["#ifndef B", "#endif"]);
        let with_else = "void f(int a,\n#if B\n int b\n#else\n float b\n#endif\n);\n";
        assert!(blanked(with_else).is_empty());
        // Parentheses in comments, strings and directives do not count.
        let noisy = "void f(int a /* ) */, const char* s = \")\",\n#if defined(X) && (Y)\n int x\n#endif\n);\n";
        assert_eq!(blanked(noisy), ["#if defined(X) && (Y)", "#endif"]);
        // A group that does not close inside the parentheses stays.
        let open = "void f(int a\n#if X\n, int b);\n#endif\n";
        assert!(blanked(open).is_empty());
        assert!(!parse(src).tree.root_node().has_error());
    }

    #[test]
    fn explicit_instantiations_and_function_macros_of_host_code_parse() {
        let fails_alone = |src: &str| {
            let mut raw = Parser::new();
            raw.set_language(&lang::language()).expect("grammar");
            let unmasked = raw.parse(src, None).expect("parse");
            assert!(
                unmasked.root_node().has_error(),
                "the grammar alone fails: {src}"
            );
            assert!(!parse(src).tree.root_node().has_error(), "{src}");
        };
        // An export macro the file does not define, between `template` and the return type.
        fails_alone("template <int N> void agg(const int& x) { }\ntemplate CV_EXPORTS void agg<64>(const int& x);\n");
        // A member operator template's instantiation.
        fails_alone("struct P { template <int N> void operator()(int a); };\ntemplate void P::operator()<64>(int a);\n");
        // A macro that defines a host function, used on its own line.
        fails_alone("#define IMPL(bit) int decimate_##bit(int* p, int n) { \\\n  return n * bit; }\nIMPL(32)\nIMPL(64)\nint after(int x) { return x; }\n");
        // A macro's empty last argument.
        fails_alone("void f(bool ok) {\n  CHECK_OR_RETURN(ok, \"bad\", );\n  g(1, 2);\n}\n");
        // A dependent type through a macro.
        fails_alone("template <typename T, int N> struct V { typedef T type; };\n#define VEC(T, n) typename V<T, n>::type\ntemplate <typename T> void f() { VEC(T, 2) v; v = 0; }\n");
        // A return type in capitals stays one.
        let real = "typedef float REAL;\ntemplate <typename T> REAL g(T x) { return x; }\ntemplate REAL g<float>(float x);\n";
        assert!(!parse(real).tree.root_node().has_error());
        assert!(instantiation_attribute_words(real).is_empty());
    }

    #[test]
    fn alternatives_are_read_one_after_the_other_in_definitions_and_launches() {
        // A definition's parameter list: every directive line blanked, and a comma made where
        // a branch has none at its end (the last parameter chosen among several).
        let def = "__global__ void k(int a,\n#if P\n int* q,\n#else\n char* q,\n#endif\n\
                   #ifdef W\n long n\n#elif O\n int n, int o\n#else\n int n\n#endif\n) { }\n";
        assert_eq!(
            blanked(def),
            ["#if P", "#else", "#endif", "#ifdef W", "#elif O", "#else", "#endif"]
        );
        let (_, commas) = conditionals_in_parens(def);
        let at: Vec<&str> = commas.iter().map(|&i| &def[i..i + 5]).collect();
        assert_eq!(at, ["#elif", "#else"], "the comma-less branches only");
        let m = masked(def).expect("masked");
        assert!(
            m.contains(" long n\n,      \n int n, int o\n,    \n int n"),
            "{m}"
        );
        assert!(!parse(def).tree.root_node().has_error());
        // A launch's arguments, which are copied as written.
        // A name after a character of several bytes (a comment's) is still a name.
        assert!(after_function_name("/* é */ é_k") && after_function_name("// é\nk"));
        assert!(!after_function_name("x é") && !after_function_name("é"));
        assert!(!after_function_name("if ") && !after_function_name("= 2"));
        assert!(!after_function_name("if constexpr "));
        let launch =
            "void h() { k<<<1, 1>>>(a,\n#if P\n (int*)\n#else\n (char*)\n#endif\n q, n); }\n";
        assert_eq!(blanked(launch), ["#if P", "#else", "#endif"]);
        assert!(!parse(launch).tree.root_node().has_error());
        // A declaration (no body), a call's arguments and a condition: left to the grammar, so
        // that no configuration's code is read as another's.
        for src in [
            "void k(int a,\n#if P\n int* q\n#else\n char* q\n#endif\n);\n",
            "void h() { f(a,\n#if P\n b\n#else\n c\n#endif\n); }\n",
            "void h() { if (a\n#if P\n && b\n#else\n && c\n#endif\n) { } }\n",
        ] {
            assert!(blanked(src).is_empty(), "{src}");
            assert!(conditionals_in_parens(src).1.is_empty(), "{src}");
        }
    }

    /// Statement macros one after another (`OP OP`, also through a macro of macros, and before
    /// the closing brace) get a `;` between them in the masked view, and the body parses.
    #[test]
    fn pragma_operators_and_their_macros_are_blanked() {
        let src = "#define UNROLL _Pragma(\"unroll\")\n#define BOTH UNROLL_X _Pragma(\"x\")\n\
                   __global__ void k(float* d) {\n  float s = 0;\n  UNROLL\n  for (int i = 0; i < 4; ++i) s += d[i];\n\
                   _Pragma(\"unroll 2\")\n  for (int i = 0; i < 4; ++i) s += d[i];\n  HDR_UNROLL\n  while (s > 1) s /= 2;\n  d[0] = s;\n}\n";
        assert!(
            parse(src).tree.root_node().has_error(),
            "the grammar alone fails"
        );
        let header = [(
            "HDR_UNROLL".to_string(),
            " _Pragma(\"unroll\") ".to_string(),
        )];
        let view = masked_with(src, &header).expect("something to mask");
        assert_eq!(view.len(), src.len());
        assert!(
            !view.contains("  UNROLL\n") && !view.contains("_Pragma(\"unroll 2\")"),
            "{view}"
        );
        assert!(!view.contains("HDR_UNROLL"), "{view}");
        assert!(
            view.contains("#define UNROLL _Pragma(\"unroll\")"),
            "directives untouched: {view}"
        );
        assert!(!parse_with(src, &header).tree.root_node().has_error());
        // Only a header's macro, function-like too (its use's arguments go with it).
        let only_header = "__global__ void k(float* d) {\n  float s = 0;\n  HDR_UNROLL\n  for (int i = 0; i < 4; ++i) s += d[i];\n  PRAGMA(unroll)\n  for (int i = 0; i < 4; ++i) s += d[i];\n  d[0] = s;\n}\n";
        let header = [
            (
                "HDR_UNROLL".to_string(),
                " _Pragma(\"unroll\") ".to_string(),
            ),
            ("PRAGMA".to_string(), " _Pragma(#x)".to_string()),
        ];
        let view = masked_with(only_header, &header).expect("something to mask");
        assert!(
            !view.contains("HDR_UNROLL") && !view.contains("(unroll)"),
            "{view}"
        );
        assert!(!parse_with(only_header, &header)
            .tree
            .root_node()
            .has_error());
        // A macro with more than pragmas in it is not blanked.
        let both = "#define BOTH f(); _Pragma(\"x\")\nvoid g() { BOTH }\n";
        assert!(masked(both).is_none_or(|v| v.contains("{ BOTH }")));
        let other = "#define STEP s += 1\nvoid f() { int s = 0; STEP; }\n";
        assert!(masked(other).is_none());
    }

    #[test]
    fn extended_lambdas_lose_their_execution_space_in_the_masked_view() {
        let src = "__global__ void k(float* d) {\n  auto f = [=] __host__ __device__ (int i) { return d[i]; };\n  auto g = [] __device__(int i) -> int { return i; };\n  d[0] = f(g(0));\n}\n";
        assert!(parse_with(src, &[]).tree.root_node().has_error() || masked(src).is_some());
        let view = masked(src).expect("something to mask");
        assert!(view.contains("[=]                     (int i)"), "{view}");
        assert!(view.contains("[]           (int i)"), "{view}");
        assert!(!parse(src).tree.root_node().has_error());
        // A subscript followed by a declaration is not a lambda.
        assert!(
            masked("__device__ int a[2];\n__device__ float g(float x) { return a[0] * x; }\n")
                .is_none()
        );
    }

    #[test]
    fn conditional_groups_that_split_a_block_are_read_as_included() {
        let src = "__global__ void k(float* o, int i) {\n#ifdef FAST\n  if (i) {\n    o[i] = 1;\n  } else {\n#endif\n    o[i] = 2;\n#ifdef FAST\n  }\n#endif\n}\n\
                   void d(int k) {\n  if (k < 1) {\n    k = 1;\n#if MAX_K >= 2048\n  } else if (k < 2048) {\n    k = 2;\n#endif\n  }\n}\n";
        assert!(parse_with(src, &[]).tree.root_node().has_error() || masked(src).is_some());
        let view = masked(src).expect("something to mask");
        assert_eq!(view.len(), src.len());
        assert!(
            !view.contains("#ifdef FAST") && !view.contains("#if MAX_K"),
            "{view}"
        );
        assert!(!view.contains("#endif"), "{view}");
        assert!(!parse(src).tree.root_node().has_error());
        // Balanced groups, groups with `#else`, and `#if 0` stay for the grammar.
        let kept = "void f(int a) {\n#ifdef A\n  a = 1;\n#endif\n#ifdef B\n  if (a) {\n#else\n  if (!a) {\n#endif\n    a = 2;\n  }\n#if 0\n  }\n#endif\n}\n";
        assert!(masked(kept).is_none_or(|v| v.matches('#').count() == kept.matches('#').count()));
        // A group inside an expression (the code before it ends with an operator) is read as
        // included too: the grammar cannot read a directive between two operands.
        let mid = "#include <string>\nstd::string name() {\n  std::string s = \"GPU \" +\n#ifdef WITH_X\n    std::string(\"X \") +\n#endif\n    \"\";\n  return s;\n}\n__global__ void k(int* o) { o[threadIdx.x] = 1; }\n";
        let mut raw = Parser::new();
        raw.set_language(&lang::language()).expect("grammar");
        let unmasked = raw.parse(mid, None).expect("parse");
        assert!(unmasked.root_node().has_error(), "the grammar alone fails");
        let view = masked(mid).expect("something to mask");
        assert!(
            !view.contains("#ifdef WITH_X") && !view.contains("#endif"),
            "{view}"
        );
        assert!(!parse(mid).tree.root_node().has_error());
        // After a statement the group is left to the grammar.
        let statement = "void f(int a) {\n  a = 1;\n#ifdef A\n  a = 2;\n#endif\n}\n";
        assert!(masked(statement).is_none());
    }

    /// `src`, masked and parsed, holds no syntax error (the tree in the message where it does).
    fn assert_reads_without_error(src: &str) {
        let parsed = parse(src);
        let root = parsed.tree.root_node();
        assert!(!root.has_error(), "{}", root.to_sexp());
    }

    #[test]
    fn type_alias_macros_without_semicolons_read_as_empty_declarations() {
        // In a class, as a public library of GPU primitives declares its tuning per
        // architecture: numbers as arguments read as no declaration, with a `;` or without.
        let src = "template <typename base_t>\nstruct box_t : base_t {\n\
                   #define INHERIT(new_ver, old_ver) \\\n  typedef typename pick_t< \\\n    \
                   typename base_t::sm_##new_ver, sm_##old_ver>::type_t sm_##new_ver;\n\n  \
                   INHERIT(21, 20)\n  INHERIT(30, 21)\n#undef INHERIT\n};\n\
                   #define ALIAS(n) using word_##n = int;\nALIAS(8)\nALIAS(16)\n\
                   __global__ void k(int* a) { a[threadIdx.x] = 1; }\n";
        assert_reads_without_error(src);
    }

    #[test]
    fn test_case_macros_head_functions_at_file_scope() {
        // Catch2's test cases, a name with a parenthesis in its string, a comment after the
        // declaration before them, and the typed form with its parenthesized lists.
        let src = "__global__ void k(int* a) { a[threadIdx.x] = 1; }\n\
                   int x;  // the data\n\
                   TEST_CASE(\"fills (once)\", \"[fill]\")\n{\n  k<<<1, 32>>>(nullptr);\n}\n\
                   #ifdef WIDE\n#endif\n\
                   TEMPLATE_TEST_CASE_SIG(\"typed\", \"\", ((typename K, int N), K, N), \
                   (int, 1), (long, 2))\n{\n  k<<<1, N>>>(nullptr);\n}\n";
        assert_reads_without_error(src);
        let t = crate::transform(src, "a.cu", &crate::Options::default());
        assert_eq!(
            t.output.matches("cupreempt::launch").count(),
            2,
            "{}",
            t.output
        );
        // Inside a body (a section of a test case) the macro is left to the grammar.
        let section = "void f() {\n  g();\nSECTION(\"a\")\n{\n}\n}\n";
        assert!(masked(section).is_none_or(|m| m.contains("SECTION(\"a\")")));
    }

    #[test]
    fn a_definition_macro_list_ends_before_a_directive() {
        // The list's last use, then `#undef` and the next configuration's definitions.
        let src = "#define OP(dir, c_type) \\\n__device__ inline c_type shfl_##dir##_op(c_type x) \
                   { \\\n  return x; \\\n}\nOP(up, int)\nOP(down, int)\n\n#undef OP\n\n\
                   #ifdef USE_SYNC\n#define TWO 2\n#endif\n\
                   __global__ void k(int* a) { a[threadIdx.x] = shfl_up_op(1); }\n";
        assert_reads_without_error(src);
    }

    #[test]
    fn juxtaposed_statement_macros_are_separated() {
        let src = "#define OP s = s * 2.0f;\n#define OP4 OP OP OP OP\n\
                   __global__ void k(float* d) {\n  float s = d[0];\n  OP4 OP4\n  OP4\n  d[0] = s;\n}\n";
        let view = masked(src).expect("something to mask");
        assert_eq!(view.len(), src.len());
        assert!(view.contains("  OP4;OP4\n; OP4\n"), "{view}");
        assert!(
            view.contains("#define OP4 OP OP OP OP"),
            "directive lines untouched: {view}"
        );
        assert!(!parse(src).tree.root_node().has_error());
        // A macro that closes a block keeps its `else`.
        let closes = "#define END }\nvoid f(int a) { if (a) { a = 1; END else { a = 2; } }\n";
        assert!(masked(closes).is_none_or(|v| !v.contains("END;else")));
        // No statement macro: nothing to mask.
        assert!(masked("#define N 4\nint a = N;\n").is_none());
        // Function-like statement macros, also one that ends by calling another, and one an
        // included header defines.
        let calls = "#define STEP(i) s += d[i];\n#define TWO(i) STEP(i) STEP(i + 1)\n\
                     __global__ void k(float* d) {\n  float s = 0;\n  TWO(0)\n  STEP(2)\n  HDR(3)\n  d[0] = s;\n}\n";
        let header = [("HDR".to_string(), "s -= d[i];".to_string())];
        let view = masked_with(calls, &header).expect("something to mask");
        assert!(
            view.contains("  TWO(0)\n; STEP(2)\n; HDR(3)\n; d[0]"),
            "{view}"
        );
        assert!(!parse_with(calls, &header).tree.root_node().has_error());
        // A comment after the macro, on its line or the next (`CHECK // why`): the `;` goes in
        // the first blank outside it, and the launch after it parses.
        let commented = "#define CHECK { sync(); }
void h(int* d) {
  a<<<4, 32>>>(d);
  CHECK // why
  b<<<4, 32>>>(d);
  CHECK
  /* note */
  b<<<4, 32>>>(d);
  CHECK/* x */ b<<<4, 32>>>(d);
}
";
        let view = masked(commented).expect("something to mask");
        assert_eq!(view.len(), commented.len());
        assert!(view.contains("  CHECK;// why\n"), "{view}");
        assert!(view.contains("  CHECK\n; /* note */"), "{view}");
        assert!(view.contains("  CHECK/* x */;b<<<"), "{view}");
        assert!(!parse(commented).tree.root_node().has_error());
    }

    /// A keyword type as a call's argument becomes an identifier; casts, `sizeof` and function
    /// types keep parsing; GCC's `__restrict` is blanked.
    #[test]
    fn keyword_types_as_arguments_and_gcc_restrict() {
        let src = "#define SWP(t1,a,b,t2,c,d) if(a>b){t1 x=a;a=b;b=x;t2 y=c;c=d;d=y;}\n\
                   __global__ void k(int* v, const float* const __restrict p) {\n\
                   int a = v[0], b = v[1];\n  SWP(int, a, b,unsigned,a,b);\n  SWP(uint8_t, a, b, size_t, a, b);\n\
                   v[0] = f(a, (int)b) + sizeof(int) + g(float);\n  return (int) a;\n}\n\
                   std::function<void(int, float)> h;\n";
        let view = masked(src).expect("something to mask");
        assert_eq!(view.len(), src.len());
        assert!(view.contains("SWP(xxx, a, b,xxxxxxxx,a,b);"), "{view}");
        assert!(view.contains("SWP(xxxxxxx, a, b, xxxxxx, a, b);"), "{view}");
        assert!(
            view.contains("f(a, (int)b) + sizeof(int) + g(xxxxx)"),
            "{view}"
        );
        assert!(view.contains("return (int) a;"), "{view}");
        assert!(view.contains("const float* const            p"), "{view}");
        assert!(view.contains("#define SWP(t1,a,b,t2,c,d)"), "{view}");
        let tree = parse(src).tree;
        assert!(
            !tree.root_node().has_error(),
            "{}",
            tree.root_node().to_sexp()
        );
    }

    #[test]
    fn the_masked_view_blanks_what_the_grammar_cannot_place() {
        let src = "typedef struct __align__(16) { float x; } v4;\nvoid CUDART_CB done(void* d) { }\nint MY_CUDART_CB_X;\n";
        let view = masked(src).expect("something to mask");
        assert_eq!(view.len(), src.len());
        let want = format!(
            "typedef struct {} {{ float x; }} v4;\nvoid {} done(void* d) {{ }}\nint MY_CUDART_CB_X;\n",
            " ".repeat("__align__(16)".len()),
            " ".repeat("CUDART_CB".len())
        );
        assert_eq!(view, want);
        let cupti = "static void CUPTIAPI requested(unsigned char** b) { *b = 0; }\n";
        assert!(error_count_of(cupti) > 0, "an error as written");
        assert_eq!(error_count(cupti), 0, "{:?}", masked(cupti));
        assert!(masked("__global__ void k() {}").is_none());
        let host = "void f(int n) { const float **p = new const float *[n]; int** q = new int*[n];\n  if (typeid(T) == typeid(double)) { } }\n";
        let view = masked(host).expect("something to mask");
        assert_eq!(view.len(), host.len());
        assert!(
            view.contains("new       float  [n]") && view.contains("new int [n]"),
            "{view}"
        );
        assert!(view.contains("typeid(xxxxxx)"), "{view}");
        assert!(!parse(host).tree.root_node().has_error());
        // The tree of the view has no error, and its ranges index the original.
        let tree = parse(src).tree;
        assert!(
            !tree.root_node().has_error(),
            "{}",
            tree.root_node().to_sexp()
        );
    }

    /// A statement macro's use with no `;` and no blank before the closing brace on the next
    /// line: the line break becomes its `;`, and the kernels after it keep their lines.
    #[test]
    fn a_statement_macro_before_a_closing_brace_gets_the_line_break() {
        let src = "#define LOG(x) printf(\"%d\", x);\nvoid f(int a) {\n  LOG(a)\n}\n\
                   __global__ void k(float* p) { p[blockIdx.x] = 1.0f; }\n";
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        let m = masked(src).expect("masked");
        assert_eq!(m.len(), src.len());
        assert!(m.contains("  LOG(a);}"), "{m}");
        assert_eq!(error_count(src), 0, "the grammar reads the masked view");
        let t = crate::transform(src, "a.cu", &crate::Options::default());
        assert_eq!(t.kernels.len(), 1);
        assert_eq!(
            t.kernels[0].line, 5,
            "the line as written, not the masked view's"
        );
    }

    #[test]
    fn identity_or_empty_macros_read_as_their_argument() {
        let src = "#ifdef USE_ROCM\n#define ROCM_ONLY(x) x\n#else\n#define ROCM_ONLY(x)\n#endif\n\
                   #define TWICE(x) x x\n\
                   void f(void* k) {\n  g(ROCM_ONLY((void *)) k, 3);\n  TWICE(h());\n}\n";
        let m = masked(src).expect("masked");
        assert_eq!(m.len(), src.len());
        assert!(m.contains("g(          (void *)  k, 3);"), "{m:?}");
        assert!(
            m.contains("TWICE(h());"),
            "another body is left alone: {m:?}"
        );
        assert_eq!(error_count_of(&m), 0, "{m}");
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
    }

    #[test]
    fn statement_macro_lists_at_file_scope_end_at_their_line_breaks() {
        let src = "#define REG(t, u) \\\n  REGISTER_BUILDER(Name(\"x\").Device(GPU), Op<t, u>);\n\
                   REG(int, float)\nREG(int, double)\n\
                   __global__ void k(float* p) { p[blockIdx.x] = 1.0f; }\n";
        let m = masked(src).expect("masked");
        assert_eq!(m.len(), src.len());
        assert!(m.contains(");REG(") && m.contains(");__global__"), "{m:?}");
        assert_eq!(error_count_of(&m), 0, "{m}");
        let t = crate::transform(src, "a.cu", &crate::Options::default());
        assert_eq!(t.kernels.len(), 1, "the kernel after the uses is read");
        assert_eq!(t.kernels[0].line, 5, "the line as written");
    }

    #[test]
    fn a_statement_macro_list_ends_before_its_undef() {
        // At file scope, the last use right before `#undef` (a framework's kernel
        // registrations), and in a body, the last use before a blank line, two `#undef`s and
        // the closing brace (a host function's launch list).
        let src = "#define REG(t) \\\n  REGISTER_BUILDER(Name(\"x\").Device(GPU), Op<t>);\n\
                   REG(int)\nREG(float)\n#undef REG\n\
                   __global__ void k(float* p) { p[blockIdx.x] = 1.0f; }\n\
                   void launch(float* p, int m) {\n\
                   #define CALL(M) \\\n    if (m == M) { k<<<M, 32>>>(p); }\n\
                   #define ARGS p\n\
                   \x20   CALL(1)\n    CALL(2)\n\n#undef CALL\n  #  undef ARGS\n}\n";
        let m = masked(src).expect("masked");
        assert_eq!(m.len(), src.len());
        assert!(m.contains("(xxxxx);          \n__global__"), "{m:?}");
        assert!(
            m.contains("CALL(2);\n           \n               \n}"),
            "{m:?}"
        );
        assert_eq!(error_count_of(&m), 0, "{m}");
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        let t = crate::transform(src, "a.cu", &crate::Options::default());
        assert_eq!(t.kernels.len(), 1, "the kernel after the list is read");
        assert_eq!(t.kernels[0].line, 6, "the line as written");
        // Another directive ends nothing: `#endif` stays where the grammar reads it.
        let other = "#define REG(t) \\\n  REGISTER_BUILDER(Op<t>);\n#if 1\nREG(int)\n#endif\n";
        assert!(masked(other).is_none_or(|m| m.contains("\n#endif\n")));
    }

    #[test]
    fn unnamed_pointer_parameters_with_defaults_read_as_named_outside_kernels() {
        let src = "#define KERNEL __global__\n\
                   template <bool can, typename std::enable_if<can>::type* = nullptr>\n\
                   __device__ int pick(int** = nullptr, typename A<can>::type* = nullptr) { return 1; }\n\
                   struct R { template <bool c> __device__ int f(int* p, typename E<c>::type *  = 0) const { return *p; } };\n\
                   __global__ void k(float* p, int* = nullptr) { p[blockIdx.x] = 1.0f; }\n\
                   template <typename T, typename std::enable_if<sizeof(T) == 4>::type* = nullptr>\n\
                   KERNEL void t(T* p) { p[blockIdx.x] = T(); }\n\
                   void h(int n) { int a = n; a *= 2; }\n";
        let m = masked(src).expect("masked");
        assert_eq!(m.len(), src.len());
        assert!(m.contains("<can>::type*_= nullptr>"), "{m}");
        assert!(
            m.contains("int**_= nullptr, typename A<can>::type*_= nullptr)"),
            "{m}"
        );
        assert!(m.contains("type *_ = 0"), "{m}");
        // The kernels' heads stay as written; the grammar reads the helpers.
        assert!(m.contains("int* = nullptr) {") && m.contains("sizeof(T) == 4>::type* = nullptr>"));
        assert!(m.contains("a *= 2;"));
        let helpers = &m[..m.find("__global__ void k").expect("kernel")];
        assert_eq!(error_count_of(helpers), 0, "{helpers}");
        let written = &src[..src.find("__global__ void k").expect("kernel")];
        assert!(
            error_count_of(written) > 0,
            "the text as written is an error to the grammar"
        );
    }

    #[test]
    fn pointer_packs_read_as_reference_packs_outside_kernels() {
        let src = "struct S {\n\
                   template <typename H, typename... R>\n\
                   void sync(const V<H>* v, const V<R>*... vs) const { sync(vs...); }\n\
                   template <typename... H> void unused(int f, H *...) const {}\n\
                   };\n\
                   template <typename... T> __global__ void k(T*... ps) {}\n";
        let m = masked(src).expect("masked");
        assert_eq!(m.len(), src.len());
        assert!(
            m.contains("const V<R>&... vs") && m.contains("H &...)"),
            "{m}"
        );
        assert!(
            m.contains("k(T*... ps)"),
            "a kernel's head stays as written: {m}"
        );
        let helpers = &m[..m
            .find("template <typename... T> __global__")
            .expect("kernel")];
        assert_eq!(error_count_of(helpers), 0, "{helpers}");
        let written = &src[..src
            .find("template <typename... T> __global__")
            .expect("kernel")];
        assert!(
            error_count_of(written) > 0,
            "the text as written is an error to the grammar"
        );
    }

    #[test]
    fn instantiation_macros_at_file_scope_become_empty_declarations() {
        let src = "#define INST(T) \\\n  template void launch<T>(T*, int);\n\
                   template <class T> void launch(T* p, int n) {}\n\
                   INST(float)\nINST(double)\n\
                   __global__ void add_one(float* p, int n) { p[n] += 1.0f; }\n\
                   INST(int);\n";
        let m = masked(src).expect("masked");
        assert_eq!(m.len(), src.len());
        assert!(m.contains(";          \n;           \n"), "{m}");
        assert!(
            m.contains("\nINST("),
            "followed by its `;`: left alone\n{m}"
        );
        assert_eq!(error_count_of(&m), 0, "{m}");
        assert!(error_count(src) == 0, "the grammar reads the masked view");
    }

    #[test]
    fn declaration_macro_lists_and_extern_uses_become_empty_declarations() {
        let src = "#define DECL(a, b) \\\n  template void f<a, b>(int x) \\\n\n\
                   #define DECL_ALL(a) \\\n  extern DECL(a, 1); \\\n  extern DECL(a, 2); \\\n\n\
                   #define ENTRY(fn) extern \"C\" { int entry(void) { return fn(); } }\n\
                   template <int a, int b> void f(int x) {}\n\
                   DECL_ALL(64)\nDECL_ALL(80)\nextern DECL(3, 4);\n\
                   __global__ void k(float* p) { p[0] = 1.0f; }\n\
                   ENTRY(g)\n";
        let m = masked(src).expect("masked");
        assert_eq!(m.len(), src.len());
        let empty = |n: usize| format!(";{}", " ".repeat(n - 1));
        let uses = format!("\n{}\n{}\n{};\n", empty(12), empty(12), empty(17));
        assert!(m.contains(&uses), "{m}");
        // The last use, at the file's end, is an empty declaration too; its line break stays
        // (no `;` of `statement_macro_separators` after a use that became one).
        assert!(m.ends_with("}\n;       \n"), "{m:?}");
        assert_eq!(error_count_of(&m), 0, "{m}");
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        // A statement macro that begins with neither stays a statement.
        let body =
            "#define STORE(p) extern_store(p);\n__global__ void k(float* p) {\n  STORE(p)\n}\n";
        assert!(instantiation_macro_uses(body, &defines(body), &[]).is_empty());
    }

    #[test]
    fn a_definition_continued_into_a_blank_line_ends_before_its_backslash() {
        let src = "#define CASE(a, r) \\\n  if (n == (a)) { return (r); } \\\n\n\
                   __device__ int pick(int n) {\n  CASE(1, 2)\n  CASE(3, 4)\n  return 0;\n}\n";
        let defs = defines(src);
        assert!(defs[0].body.trim_end().ends_with('}'), "{:?}", defs[0].body);
        assert_eq!(error_count(src), 0, "the uses read as statements");
    }

    #[test]
    fn string_macros_after_a_literal_read_as_literals() {
        let src =
            "void f(long v) {\n  printf(\"v=%\" PRId64 \"\\n\", v);\n  printf(\"%\" PRIu64, v);\n\
                   puts(\"on \" NAME \": ok\");\n}\n";
        let found: Vec<&str> = string_macro_uses(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(found, ["PRId64", "PRIu64", "NAME"]);
        let m = masked(src).expect("masked");
        assert!(m.contains("\"v=%\" \"    \" \"\\n\""), "{m}");
        // On the next line, with its arguments: a macro that repeats a string of inline PTX.
        let asm = "#define REP2(S) S S\n__global__ void k(unsigned* o) {\n  unsigned v = 1;\n  asm volatile(\"B0: bra.uni B1;\\n\\t\"\n    REP2(\"add.u32 %0, %0, 1;\\n\\t\")\n    \"B1:\" : \"+r\"(v));\n  o[0] = v;\n}\n";
        let found: Vec<&str> = string_macro_uses(asm)
            .into_iter()
            .map(|r| &asm[r])
            .collect();
        assert_eq!(found, ["REP2(\"add.u32 %0, %0, 1;\\n\\t\")"]);
        assert!(error_count_of(asm) > 0, "an error as written");
        assert_eq!(error_count(asm), 0, "{:?}", masked(asm));
        assert_eq!(error_count_of(&m), 0, "{m}");
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        // Not after a linkage's or a literal operator's string, a suffix, a character literal,
        // in comments, directives or a raw literal's text, nor a one-letter name.
        let not = "extern \"C\" int g();\nint operator \"\" _km(const char*);\n\
                   auto s = \"abc\"sv; char c = 'x' ; // \"a\" B\n/* \"a\" B */\n\
                   #include \"x.h\" NAME\nconst char* r = R\"x(say \"hi\" there)x\";\n\
                   const char* one = \"a\" X;\nconst wchar_t* w = \"a\"L\"b\"; auto t = \"a\"sv\n;\n";
        assert!(string_macro_uses(not).is_empty());
        // Between two literals without blanks: a sequence aligner's debug prints.
        let tight = "__global__ void k(int* n) {\n  printf(\"node (\"fNID\"): %d\\n\", n[0]);\n}\n";
        let found: Vec<&str> = string_macro_uses(tight)
            .into_iter()
            .map(|r| &tight[r])
            .collect();
        assert_eq!(found, ["fNID"]);
        assert!(error_count_of(tight) > 0, "an error as written");
        assert_eq!(error_count(tight), 0, "{:?}", masked(tight));
    }

    #[test]
    fn new_alone_as_a_macro_argument_reads_as_a_name() {
        let src = "#define LOCALS(type, p, t, a) const type p##0 = (t)->a[0];\n\
                   void f(T* w) {\n  LOCALS(int64_t, new, w, ne)\n  LOCALS(int64_t, old, w, ne)\n  g(new T(1), new T[2]);\n}\n";
        let found: Vec<&str> = keyword_type_arguments(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(found, ["int64_t", "new", "int64_t"]);
        let m = masked(src).expect("masked");
        assert!(m.contains("g(new T(1), new T[2]);"), "{m}");
        assert_eq!(error_count_of(&m), 0, "{m}");
    }

    #[test]
    fn macros_that_end_in_else_chain_their_uses_as_statements() {
        let src = "#define CASE(t, k) \\\n  if (kind == (t)) { k<<<1, 32>>>(p); } else\n\
                   void run(int kind, float* p) {\n  CASE(1, add)\n  CASE(2, mul)\n  abort();\n}\n";
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        assert_eq!(error_count(src), 0, "{:?}", masked(src));
    }

    #[test]
    fn words_and_literals_after_multibyte_text() {
        assert_eq!(last_word("x = “quoted” extern "), "extern");
        assert_eq!(last_word("naïve"), "ve");
        assert_eq!(last_word("“"), "");
        let src = "// “x”\nputs(“\"a\" NAME);\nconst char* s = \"é\" PRIu64;\n";
        let found: Vec<&str> = string_macro_uses(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(found, ["NAME", "PRIu64"]);
    }

    #[test]
    fn constexpr_macros_and_chained_pragma_macros_are_blanked() {
        let src = "#if __cplusplus >= 201703L\n#define IF_CONSTEXPR constexpr\n#else\n#define IF_CONSTEXPR\n#endif\n\
                   #define DO_PRAGMA(x) _Pragma(#x)\n#define UNROLL(n) DO_PRAGMA(unroll n)\n\
                   template <bool tma> __device__ void f(float* p) {\n  if IF_CONSTEXPR (tma) {\n    UNROLL(4)\n    for (int i = 0; i < 4; i++) p[i] = 0;\n  }\n}\n";
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        assert_eq!(error_count(src), 0, "{:?}", masked(src));
        let defs = defines(src);
        assert_eq!(constexpr_macros(&defs, &[]), ["IF_CONSTEXPR"]);
    }

    #[test]
    fn functional_casts_to_keyword_types_read_as_calls() {
        let src = "__device__ int f(int e, int n) {\n  if (unsigned(e) < unsigned(n)) e++;\n\
                   long b = long(e) * short(n);\n  unsigned (*fp)(int) = 0;\n  return signed(e) + (int)b;\n}\n\
                   using cb = std::function<long(int)>;\n";
        let found: Vec<&str> = keyword_functional_casts(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(found, ["unsigned", "unsigned", "long", "short", "signed"]);
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        assert_eq!(error_count(src), 0, "{:?}", masked(src));
    }

    #[test]
    fn macros_that_stand_for_nothing_are_blanked() {
        let src = "#define NS_PREFIX\n#define NS_POSTFIX\n#define __device__\n#define inline\n\
                   #define MAYBE\n#if X\n#define MAYBE __host__\n#endif\n#define CALLABLE\n\
                   NS_PREFIX\nnamespace lib {\nint f(int a) { return a; }\n}\nNS_POSTFIX\n";
        let empty = empty_macros(&defines(src), &[]);
        assert_eq!(empty, ["CALLABLE", "NS_POSTFIX", "NS_PREFIX"]);
        let blanked = |text: &str| -> Vec<String> {
            empty_macro_lines(text, &empty)
                .into_iter()
                .map(|r| text[r].to_string())
                .collect()
        };
        assert_eq!(blanked(src), ["NS_POSTFIX", "NS_PREFIX"]);
        // An empty macro in front of a function stays: it may stand for an execution space
        // where the program is built.
        let head = "}\nCALLABLE\nint idx() { return 1; }\nCALLABLE int g();\n";
        assert!(blanked(head).is_empty(), "{:?}", blanked(head));
        // Before a loop, where a pragma would go; a definition that begins with `#` cannot be
        // used, and a comment is no replacement.
        let unroll = "#ifdef U\n#define UNROLL #pragma unroll 4\n#else\n#define UNROLL // #pragma unroll 4\n#endif\n\
                      __global__ void k(int* a) {\n  UNROLL\n  for (int i = 0; i < 4; ++i) a[i] = i;\n  UNROLL\n  while (a[0]) --a[0];\n  UNROLL a[1] = 2;\n}\n";
        let empty_here = empty_macros(&defines(unroll), &[]);
        assert_eq!(empty_here, ["UNROLL"]);
        let loops: Vec<String> = empty_macro_lines(unroll, &empty_here)
            .into_iter()
            .map(|r| unroll[r].to_string())
            .collect();
        assert_eq!(
            loops,
            ["UNROLL", "UNROLL"],
            "not the one before a statement"
        );
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        assert_eq!(error_count(src), 0, "{:?}", masked(src));
    }

    #[test]
    fn builtin_marks_are_blanked() {
        let src = "extern __device__ __device_builtin__ unsigned int __fns(unsigned int x);\n\
                   extern \"C\" __device__ __cudart_builtin__ void __trap_now(void);\n";
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        assert_eq!(error_count(src), 0, "{:?}", masked(src));
    }

    #[test]
    fn builtin_align_is_blanked_like_align() {
        let src = "struct __builtin_align__(32) float8 { float x; };\n";
        let m = masked(src).expect("masked");
        assert!(m.starts_with("struct                       float8"), "{m}");
        assert_eq!(error_count_of(&m), 0, "{m}");
    }

    #[test]
    fn braced_lists_in_launch_configurations_read_as_parentheses() {
        let src = "void go(float* p, cudaStream_t s) {\n  k<<<64, {32, 8, 1}, 0, s>>>(p);\n  k<<<{4, 4}, dim3{16, 16}>>>(p);\n}\n";
        mended(src);
        let m = masked(src).expect("masked");
        assert!(m.contains("k<<<64, (32, 8, 1), 0, s>>>(p);"), "{m}");
        assert!(m.contains("k<<<(4, 4), dim3(16, 16)>>>(p);"), "{m}");
    }

    #[test]
    fn assertion_macro_uses_in_a_class_are_blanked_with_their_semicolon_kept() {
        let src = "#define SA(c, m) typedef int sa_##m[(c) ? 1 : -1]\n#define SB(c, m) static_assert(c, m)\n\
                   template <int N> struct S {\n  SA((N % 32 == 0), n32);\n  SB((N > 0), \"positive\");\n  int x;\n};\n";
        mended(src);
        let m = masked(src).expect("masked");
        assert!(m.contains("                      ;\n"), "{m}");
        // Not a use with arguments followed by `;`: left alone.
        assert!(assertion_macro_uses(
            "#define SA(c) typedef int x\nint SA;\n",
            &defines("#define SA(c) typedef int x\n"),
            &[]
        )
        .is_empty());
    }

    /// The text as written is an error to the grammar, and the masked view mends it.
    fn mended(src: &str) {
        assert!(
            error_count_of(src) > 0,
            "the text as written is an error to the grammar"
        );
        assert_eq!(
            error_count(src),
            0,
            "the grammar reads the masked view: {:?}",
            masked(src)
        );
    }

    fn error_count_of(text: &str) -> usize {
        let mut p = tree_sitter::Parser::new();
        p.set_language(&crate::lang::language()).expect("grammar");
        let t = p.parse(text, None).expect("tree");
        error_ranges(t.root_node()).len()
    }

    #[test]
    fn comments_inside_definitions_are_blanked_and_their_lines_continued() {
        let src = "#define CHECK(x) \\\n  do { \\\n    n = 0; /* reset */ \\\n    throw f(\"call '\" #x \"' failed /* no */\"); \\\n  } while (0)\n#define TWO a /* one\n  two */ b\nint v(int a);\n";
        mended(src);
        let comments: Vec<&str> = define_comments(src, &defines(src))
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(
            comments,
            ["/* reset */", "/*", "/* one\n  two */"],
            "a string's openers alone"
        );
        let view = masked(src).expect("a masked view");
        assert!(view.contains("n = 0;             \\"), "{view}");
        assert!(view.contains("#define TWO a      \\\n         b"), "{view}");
    }

    #[test]
    fn unknown_block_macros_with_literal_arguments_read_as_statement_heads() {
        let src = "void host(int* p) {\n  SECTION(\"fills\") { p[0] = 1; }\n  REPEAT(3) {\n    p[1] = 2;\n  }\n  LOOP(i, n) { p[i] = 0; }\n}\n";
        mended(src);
        assert!(has_expression("(\"a\")") && has_expression("('c')") && has_expression("(3)"));
        assert!(!has_expression("(i, n)") && !has_expression("(x1, y_2)"));
    }

    #[test]
    fn pragmas_between_a_head_and_its_body_are_blanked() {
        let src = "__global__ void k(float* o, int n) {\n  for (int i = 0; i < n; i++)\n#pragma unroll\n    for (int j = 0; j < 4; j++)\n      o[i * 4 + j] = 0;\n#pragma unroll\n  for (int j = 0; j < 4; j++) o[j] += 1;\n}\n";
        let blanked: Vec<&str> = pragmas_after_heads(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(blanked, ["#pragma unroll"], "only the one after a head");
        mended(src);
    }

    #[test]
    fn pragmas_after_else_and_do_are_blanked() {
        let src = "__global__ void k(float* o, int n) {
  if (n > 4) {
    o[0] = 0;
  } else
#pragma unroll
    for (int j = 0; j < 4; j++) o[j] += 1;
  do
#pragma unroll 2
    for (int j = 0; j < 2; j++) o[j] -= 1;
  while (--n > 0);
  float pseudo_else = 0;
#pragma unroll
  for (int j = 0; j < 4; j++) o[j] += pseudo_else;
}
";
        let blanked: Vec<&str> = pragmas_after_heads(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(blanked, ["#pragma unroll", "#pragma unroll 2"]);
        mended(src);
    }
    #[test]
    fn attributes_after_array_declarators_are_blanked() {
        let src = "unsigned short image[64 * 64] __attribute__((aligned(1024)));\n\
                   __global__ void k(float* a) { __shared__ float t[256] __attribute__((aligned(16))); t[threadIdx.x] = a[0]; a[1] = t[0]; }\n";
        let blanked: Vec<&str> = declarator_attributes(src)
            .into_iter()
            .map(|r| &src[r])
            .collect();
        assert_eq!(
            blanked,
            [
                "__attribute__((aligned(1024)))",
                "__attribute__((aligned(16)))"
            ]
        );
        mended(src);
    }

    #[test]
    fn alias_attributes_and_class_instantiations_are_blanked() {
        let src = "using f2 = float __attribute__((aligned(8)));\ntypedef float f4 __attribute__((aligned(16)));\n\
                   template <int N> struct ctx { int v[N]; };\ntemplate class ctx<4>;\nextern template struct ctx<8>;\n\
                   template void run<int>(int);\n__global__ void k(float* a) { using h2 = float __attribute__((aligned(8))); h2 x = a[0]; a[1] = x; }\n";
        let blanked: Vec<&str> = declarator_attributes(src)
            .into_iter()
            .chain(class_instantiations(src))
            .map(|r| &src[r])
            .collect();
        assert_eq!(
            blanked,
            [
                "__attribute__((aligned(8)))",
                "__attribute__((aligned(8)))",
                "template class ctx<4>;",
                "extern template struct ctx<8>;"
            ]
        );
        mended(src);
    }

    /// A device helper whose head the preprocessor chooses, each branch a head with the body's
    /// brace: read with its first head, the other blanked, and the rest of the file parses (its
    /// launches with it). A kernel's head chosen so is not reduced (its body is copied into its
    /// wrappers), nor is a branch that holds code after its brace.
    #[test]
    fn a_device_head_chosen_by_a_conditional_is_read_with_its_first_branch() {
        let helper = "#ifdef WIDE\n__device__ void fill(int* a, int i, int v) {\n#else\n\
                      __device__ void fill(int* a, int i) {\n#endif\n  a[i] = 1;\n}\n\
                      __global__ void mark(int* a) { fill(a, threadIdx.x); }\n\
                      void run(int* a) { mark<<<64, 128>>>(a); }\n";
        let parsed = parse(helper);
        assert!(!parsed.tree.root_node().has_error());
        // The other head is blanked, not hidden text: the body after it is read.
        assert!(parsed.hidden.is_empty(), "{:?}", parsed.hidden);
        let root = parsed.tree.root_node();
        let helper_def = (0..root.named_child_count())
            .filter_map(|i| root.named_child(i))
            .find(|n| n.kind() == "function_definition")
            .expect("the helper's definition");
        let declarator = helper_def
            .child_by_field_name("declarator")
            .expect("its declarator");
        assert_eq!(
            &helper[declarator.byte_range()],
            "fill(int* a, int i, int v)"
        );
        let kernel = helper.replace("__device__ void fill", "__global__ void fill");
        assert!(parse(&kernel).tree.root_node().has_error());
        let code_after = helper.replace("int i) {\n#endif", "int i) {\n  int v = 1;\n#endif");
        assert!(parse(&code_after).tree.root_node().has_error());
        assert!(branches::is_device_head_with_brace(
            "__device__ __noinline__ int f(int a) const // one\n{"
        ));
        assert!(!branches::is_device_head_with_brace(
            "__device__ int f(int a);"
        ));
        assert!(!branches::is_device_head_with_brace(
            "struct __device__ s {"
        ));
    }
}
