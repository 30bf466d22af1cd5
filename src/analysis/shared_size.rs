//! How much static shared memory a kernel declares, where the text says: the persistent
//! wrapper adds the task loop's own (`vocab::TASK_LOOP_SHARED_BYTES`), and a kernel whose
//! arrays already fill the 48 KB that a block may declare statically would leave a wrapper
//! that ptxas rejects ("uses too much shared data"), and the whole file with it (a
//! graph-analytics suite's BFS declares `__shared__ int changed[12 * 1024]`, 49,152 bytes;
//! mmcv's CARAFE and DeepSpeed's transposes are others). Such a kernel's task loop keeps its
//! state in dynamic shared memory instead, which its launches add (`KernelPlan::
//! loop_state_dynamic`; task_loop.cuh, `InDynamicShared`).
//!
//! The bytes counted are those the text settles. An array whose size it does not settle (a
//! name defined elsewhere) counts nothing; one whose element type it does not size (a
//! template parameter, a struct) may take one of the usual sizes per element: where some
//! size (`ELEMENT_BYTES`) would let the original compile and not the static form, the kernel
//! gets the dynamic form too (it compiles whatever the type). Only where the certain bytes
//! alone pass the limit, or leave no room and the dynamic form cannot be had, is the kernel
//! left as written.

use super::callgraph::CallGraph;
use super::{HelperPlan, KernelPlan};
use crate::diagnostics::{Code, Diagnostic};
use crate::lang::{kinds, text};
use std::collections::BTreeMap;
use tree_sitter::Node;

use crate::vocab::STATIC_SHARED_LIMIT;

/// A file's facts for the sizes: the names sizes may use, and its file-scope static shared
/// arrays (name and bytes), found once for all its kernels.
pub struct FileShared<'s> {
    names: SizeNames,
    arrays: Vec<(&'s str, Bytes)>,
    /// What only the per-instance form asks of the file, found at its first ask.
    instance_facts: std::cell::OnceCell<InstanceFacts>,
}

/// A file's facts for `per_instance_bytes`: its code without comments (where explicit
/// instantiations are looked for) and the macros it defines twice or undefines.
struct InstanceFacts {
    code: String,
    changing_macros: std::collections::BTreeSet<String>,
}

impl InstanceFacts {
    /// The macros of `src` that it defines more than once (one value under `#ifdef
    /// __CUDA_ARCH__`, another without: the host's and the device's compilations must choose
    /// the same form) or undefines (the launch types after the kernel would not see them).
    fn new(src: &str) -> InstanceFacts {
        let mut changing = std::collections::BTreeSet::new();
        let mut seen = std::collections::BTreeSet::new();
        for d in crate::parse::defines(src) {
            if !seen.insert(d.name) {
                changing.insert(d.name.to_string());
            }
        }
        changing.extend(src.lines().filter_map(|l| {
            let l = l.trim_start().strip_prefix('#')?.trim_start();
            Some(
                l.strip_prefix("undef")?
                    .split_whitespace()
                    .next()?
                    .to_string(),
            )
        }));
        InstanceFacts {
            code: crate::lang::without_comments(src),
            changing_macros: changing,
        }
    }
}

impl<'s> FileShared<'s> {
    pub fn new(root: Node, src: &'s str, included_macros: &[(String, String)]) -> FileShared<'s> {
        let names = SizeNames::new(src, included_macros);
        let mut arrays = Vec::new();
        if src.contains("__shared__") {
            // Declarations at the file's scope: namespaces, linkage blocks, templates, `#if`
            // branches (`lang::scope_container`).
            let mut stack = vec![root];
            while let Some(n) = stack.pop() {
                if n.kind_id() == kinds().declaration {
                    let bytes = declared_bytes(n, src, &names);
                    let name = crate::lang::declarators(n)
                        .first()
                        .and_then(|d| crate::lang::declarator_name(*d))
                        .map(|d| text(d, src));
                    let some = bytes.certain > 0 || bytes.unsized_elements > 0 || bytes.unsettled;
                    if let (true, Some(name)) = (some, name) {
                        arrays.push((name, bytes));
                    }
                } else if crate::lang::scope_container(n.kind(), false) {
                    let mut c = n.walk();
                    stack.extend(n.children(&mut c));
                }
            }
        }
        FileShared {
            names,
            arrays,
            instance_facts: std::cell::OnceCell::new(),
        }
    }

    /// The bytes of the file-scope arrays that `bodies` name (each kernel that names one has
    /// its own).
    fn arrays_named<'a>(
        &'a self,
        bodies: &'a [Node],
        src: &'a str,
    ) -> impl Iterator<Item = Bytes> + 'a {
        self.arrays
            .iter()
            .filter(move |(name, _)| {
                bodies
                    .iter()
                    .any(|b| crate::lang::has_word(text(*b, src), name))
            })
            .map(|(_, bytes)| *bytes)
    }
}

/// Object-like macros and constants that sizes may name: `#define N 1024`, `const int N = 1024;`,
/// `constexpr unsigned N = ...;` (the file's, and the included files' macros).
struct SizeNames {
    values: BTreeMap<String, String>,
}

impl SizeNames {
    fn new(src: &str, included_macros: &[(String, String)]) -> SizeNames {
        let mut values: BTreeMap<String, String> = included_macros
            .iter()
            .map(|(n, b)| (n.clone(), b.clone()))
            .collect();
        for d in crate::parse::defines(src)
            .into_iter()
            .filter(|d| !d.function_like)
        {
            values.insert(d.name.to_string(), crate::parse::replacement_text(d.body));
        }
        static CONSTANT: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        let constant = CONSTANT.get_or_init(|| {
            regex::Regex::new(
                r"\b(?:const|constexpr)\s+(?:static\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|short|size_t|unsigned|uint32_t|int32_t|uint64_t|int64_t)\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);",
            )
            .expect("valid regex")
        });
        for c in constant.captures_iter(src) {
            values
                .entry(c[1].to_string())
                .or_insert_with(|| c[2].trim().to_string());
        }
        SizeNames { values }
    }

    /// The value of an integer constant expression, where its every name is known here.
    fn value(&self, expr: &str) -> Option<u64> {
        let tokens = tokens(&crate::lang::without_comments(expr))?;
        let mut p = Eval {
            names: self,
            tokens,
            at: 0,
            depth: 0,
        };
        let v = p.expr(0)?;
        (p.at == p.tokens.len()).then_some(v)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number(u64),
    Name(String),
    Op(&'static str),
}

fn tokens(s: &str) -> Option<Vec<Token>> {
    const OPS: [&str; 11] = ["<<", ">>", "+", "-", "*", "/", "%", "(", ")", "&", "|"];
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'\'') {
                i += 1;
            }
            out.push(Token::Number(crate::lang::integer_literal(&s[start..i])?));
        } else if c == b'_' || c.is_ascii_alphabetic() {
            let start = i;
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            out.push(Token::Name(s[start..i].to_string()));
        } else {
            let op = OPS.iter().find(|op| s[i..].starts_with(**op))?;
            out.push(Token::Op(op));
            i += op.len();
        }
    }
    Some(out)
}

/// Precedence climbing over `tokens`; names expand to their values (macros and constants),
/// `sizeof(T)` to `element_bytes`. None for anything else, a division by zero, an overflow.
struct Eval<'n> {
    names: &'n SizeNames,
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Eval<'_> {
    fn expr(&mut self, min: u8) -> Option<u64> {
        let mut left = self.unary()?;
        loop {
            let Some(Token::Op(op)) = self.tokens.get(self.at) else {
                return Some(left);
            };
            let prec = match *op {
                "*" | "/" | "%" => 4,
                "+" | "-" => 3,
                "<<" | ">>" => 2,
                "&" | "|" => 1,
                _ => return Some(left),
            };
            if prec < min {
                return Some(left);
            }
            let op = *op;
            self.at += 1;
            let right = self.expr(prec + 1)?;
            left = match op {
                "*" => left.checked_mul(right)?,
                "/" => left.checked_div(right)?,
                "%" => left.checked_rem(right)?,
                "+" => left.checked_add(right)?,
                "-" => left.checked_sub(right)?,
                "<<" => left.checked_shl(u32::try_from(right).ok()?)?,
                ">>" => left.checked_shr(u32::try_from(right).ok()?)?,
                "&" => left & right,
                _ => left | right,
            };
        }
    }

    fn unary(&mut self) -> Option<u64> {
        let t = self.tokens.get(self.at)?.clone();
        self.at += 1;
        match t {
            Token::Number(v) => Some(v),
            Token::Op("(") => {
                let v = self.expr(0)?;
                (self.tokens.get(self.at) == Some(&Token::Op(")"))).then(|| self.at += 1)?;
                Some(v)
            }
            Token::Op("+") => self.unary(),
            Token::Name(n) if n == "sizeof" => {
                (self.tokens.get(self.at) == Some(&Token::Op("("))).then(|| self.at += 1)?;
                let close = self.tokens[self.at..]
                    .iter()
                    .position(|t| t == &Token::Op(")"))?;
                let words: Vec<&str> = self.tokens[self.at..self.at + close]
                    .iter()
                    .map(|t| match t {
                        Token::Name(n) => Some(n.as_str()),
                        _ => None,
                    })
                    .collect::<Option<_>>()?;
                self.at += close + 1;
                element_bytes(&words.join(" "))
            }
            Token::Name(n) => {
                // Macros that name macros: a few levels, never a cycle.
                if self.depth > 8 {
                    return None;
                }
                let body = self.names.values.get(&n)?;
                let mut inner = Eval {
                    names: self.names,
                    tokens: tokens(body)?,
                    at: 0,
                    depth: self.depth + 1,
                };
                let v = inner.expr(0)?;
                (inner.at == inner.tokens.len()).then_some(v)
            }
            Token::Op(_) => None,
        }
    }
}

/// The size of a built-in element type (CUDA's vector types included), as the device lays it
/// out (64-bit `long`); None for any other type.
fn element_bytes(ty: &str) -> Option<u64> {
    let words: Vec<&str> = ty
        .split_whitespace()
        .filter(|w| {
            !matches!(
                *w,
                "const" | "volatile" | "signed" | "static" | "__shared__"
            )
        })
        .collect();
    let ty = match words.as_slice() {
        ["unsigned"] => "int",
        ["unsigned", rest @ ..] | rest => &rest.join(" "),
    };
    Some(match ty {
        "char" | "bool" | "int8_t" | "uint8_t" | "char1" | "uchar1" => 1,
        "short" | "short int" | "int16_t" | "uint16_t" | "half" | "__half" | "__nv_bfloat16"
        | "char2" | "uchar2" => 2,
        "int" | "float" | "int32_t" | "uint32_t" | "uint" | "half2" | "__half2"
        | "__nv_bfloat162" | "char4" | "uchar4" | "short2" | "ushort2" | "int1" | "uint1"
        | "float1" => 4,
        "long" | "long int" | "long long" | "long long int" | "double" | "size_t" | "int64_t"
        | "uint64_t" | "float2" | "int2" | "uint2" | "short4" | "ushort4" | "long1" | "ulong1"
        | "double1" | "longlong1" | "ulonglong1" => 8,
        "float3" | "int3" | "uint3" => 12,
        "float4" | "int4" | "uint4" | "double2" | "long2" | "ulong2" | "longlong2"
        | "ulonglong2" => 16,
        _ => return None,
    })
}

/// The sizes an element of a type this text does not size (a template parameter, a struct)
/// is taken to have (`Bytes::fills_the_limit`): the scalars, CUDA's vector types of three and
/// four (`float3`, `double3`, `double4`), complex doubles. Every size would make nearly any
/// such array "fill" the limit for some struct, and the dynamic form is not launched through
/// a kernel's address (`launch_any` runs those as written).
const ELEMENT_BYTES: &[u64] = &[1, 2, 4, 8, 12, 16, 24, 32];

/// The bytes of static `__shared__` variables: those the text settles, and the elements of
/// arrays whose type it does not size (each `E` bytes, for some `E` it cannot know).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Bytes {
    certain: u64,
    unsized_elements: u64,
    /// Some array's count is not settled by the text (it counts nothing above).
    unsettled: bool,
}

impl Bytes {
    fn add(self, other: Bytes) -> Bytes {
        Bytes {
            certain: self.certain.saturating_add(other.certain),
            unsized_elements: self.unsized_elements.saturating_add(other.unsized_elements),
            unsettled: self.unsettled || other.unsettled,
        }
    }

    /// Whether some size of the unsized elements (one of `ELEMENT_BYTES`, the same for all)
    /// puts the total in the window where the original compiles (at most `limit`) and the
    /// static form, `reserve` more, does not: a template's `__shared__ scalar_t buf[6144]` for
    /// 8-byte elements, `T tile[1536]` for 32-byte ones. A size past the window is one the
    /// original does not compile with either.
    fn fills_the_limit(self, reserve: u64, limit: u64) -> bool {
        self.unsized_elements > 0
            && ELEMENT_BYTES.iter().any(|&e| {
                let total = self
                    .certain
                    .saturating_add(self.unsized_elements.saturating_mul(e));
                total <= limit && total.saturating_add(reserve) > limit
            })
    }
}

/// The bytes of the static `__shared__` variables a declaration defines (none where it is not
/// one: `extern`, or no `__shared__`; none possible where a count is not settled either).
fn declared_bytes(decl: Node, src: &str, names: &SizeNames) -> Bytes {
    let mut shared = false;
    let mut c = decl.walk();
    for child in decl.children(&mut c) {
        match child.kind() {
            "type_qualifier" | "attribute_specifier" if text(child, src) == "__shared__" => {
                shared = true
            }
            "storage_class_specifier" if text(child, src) == "extern" => return Bytes::default(),
            _ => {}
        }
    }
    if !shared {
        return Bytes::default();
    }
    let element = decl
        .child_by_field_name("type")
        .and_then(|t| element_bytes(text(t, src)));
    let mut unsettled = false;
    let count = crate::lang::declarators(decl)
        .into_iter()
        .map(|d| {
            let mut d = d;
            if d.kind() == "init_declarator" {
                match d.child_by_field_name("declarator") {
                    Some(inner) => d = inner,
                    None => return 0,
                }
            }
            let mut count = 1u64;
            while d.kind() == "array_declarator" {
                let Some(n) = d
                    .child_by_field_name("size")
                    .and_then(|s| names.value(text(s, src)))
                else {
                    unsettled = true;
                    return 0; // unknown, or `[]`
                };
                count = count.saturating_mul(n);
                match d.child_by_field_name("declarator") {
                    Some(inner) => d = inner,
                    None => break,
                }
            }
            if d.kind() == "pointer_declarator" {
                return 0; // a pointer in shared memory: the size is not the array's
            }
            count
        })
        .fold(0u64, u64::saturating_add);
    match element {
        Some(e) => Bytes {
            certain: count.saturating_mul(e),
            unsized_elements: 0,
            unsettled,
        },
        None => Bytes {
            certain: 0,
            unsized_elements: count,
            unsettled,
        },
    }
}

/// Where a kernel's task loop keeps its block's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoopState {
    /// In a static `__shared__` variable of the wrapper.
    Static,
    /// In the last bytes of the launch's dynamic shared memory (`KernelPlan::loop_state_dynamic`).
    Dynamic,
    /// Chosen by each instance of a kernel template whose counts the text does not settle: the
    /// C++ constant expression of its static shared bytes (`per_instance_bytes`).
    PerInstance(String),
}

/// Where the kernel's task loop keeps its state: `Static` in static shared memory, `Dynamic`
/// in dynamic shared memory, where the static shared memory the kernel certainly
/// declares (its body, the helpers it reaches, file-scope arrays they name) leaves less than
/// the loop's own under the limit. Left as written where even that form would not do: the
/// kernel alone passes the limit (then the count is wrong, or the original does not compile
/// either), or other declarations of its wrappers would name them as the static form does (an
/// earlier declaration, an explicit specialization).
pub fn loop_state(
    plan: &KernelPlan,
    helpers: &[HelperPlan],
    graph: &CallGraph,
    src: &str,
    file: &FileShared,
) -> Result<LoopState, Diagnostic> {
    if !src.contains("__shared__") {
        return Ok(LoopState::Static);
    }
    let mut bodies = vec![plan.site.body];
    bodies.extend(
        graph
            .reachable(&plan.facts, helpers)
            .into_iter()
            .map(|h| helpers[h].site.body),
    );
    let in_bodies = bodies
        .iter()
        .flat_map(|b| super::flow::descendants(*b))
        .filter(|n| n.kind_id() == kinds().declaration)
        .map(|d| declared_bytes(d, src, &file.names))
        .fold(Bytes::default(), Bytes::add);
    // File-scope arrays: each kernel that names one has its own.
    let all = file.arrays_named(&bodies, src).fold(in_bodies, Bytes::add);
    let reserve = crate::vocab::TASK_LOOP_SHARED_BYTES;
    let bytes = all.certain;
    let other_declarations = !plan.prior_declarations.is_empty() || plan.site.specialization;
    if bytes + reserve <= STATIC_SHARED_LIMIT {
        if all.unsettled {
            // A template's counts: each instance settles them (`per_instance_bytes`).
            if let Some(bytes) = per_instance_bytes(plan, &bodies, src, file) {
                return Ok(LoopState::PerInstance(bytes));
            }
        }
        // Arrays of a type the text does not size may come to the limit (a template's
        // `__shared__ scalar_t buf[6144]`, sized for 8-byte elements): the dynamic form then,
        // which compiles whatever the type, where nothing else names the usual wrappers.
        let dynamic = all.fills_the_limit(reserve, STATIC_SHARED_LIMIT) && !other_declarations;
        return Ok(if dynamic {
            LoopState::Dynamic
        } else {
            LoopState::Static
        });
    }
    let name = &plan.site.name;
    let room = format!(
        "kernel `{name}` declares {bytes} bytes of static shared memory, which leaves no room for the persistent loop's own under the {STATIC_SHARED_LIMIT} a block may declare statically; the loop would keep its state in dynamic shared memory, in wrappers named apart"
    );
    let message = if bytes > STATIC_SHARED_LIMIT {
        format!("kernel `{name}` declares {bytes} bytes of static shared memory, more than the {STATIC_SHARED_LIMIT} a block may declare statically")
    } else if !plan.prior_declarations.is_empty() {
        format!("{room}, but the kernel's earlier declaration declares the usual ones")
    } else if plan.site.specialization {
        format!("{room}, but an explicit specialization's wrappers are named after its template's")
    } else {
        return Ok(LoopState::Dynamic);
    };
    Err(Diagnostic::new(Code::Unsupported, message)
    .label(plan.site.name_node.byte_range(), "left as written")
    .help("declare the largest array `extern __shared__` and pass its size at launch (dynamic shared memory has no such limit once raised with cudaFuncSetAttribute)"))
}

/// The C++ constant expression of a kernel template's static shared bytes, for its instances to
/// choose where the task loop keeps its state (`LoopState::PerInstance`): faiss's selections
/// declare `__shared__ K smemK[kNumWarps * NumWarpQ]`, 48 KB for a 2,048-entry queue and a
/// few KB for the others, and one static form for all would fail ptxas for that instance and
/// with it the file. Each array is `sizeof(TYPE) * (COUNT)`, plus 16 bytes for its alignment,
/// under the `if constexpr` conditions around it (an array a discarded branch declares takes
/// no memory, and its count may not even be valid there); names the body declares as
/// constants are replaced by their values, so that the expression holds at namespace scope
/// after the kernel, where its launch types are. None where that cannot be had: not a
/// template of its own (a specialization, a declared one, a pack), a helper's or a file-scope
/// array that the text does not settle, a count or type naming a local that is no constant or
/// a parameter, an explicit instantiation (other units would name the static form).
fn per_instance_bytes(
    plan: &KernelPlan,
    bodies: &[Node],
    src: &str,
    file: &FileShared,
) -> Option<String> {
    let k = &plan.site;
    let facts = file.instance_facts.get_or_init(|| InstanceFacts::new(src));
    if !k.is_template()
        || k.specialization
        || k.qualified.is_some()
        || !plan.prior_declarations.is_empty()
        || plan.family_declaration.is_some()
        || k.template_params.iter().any(|p| p.pack)
        || explicitly_instantiated(&k.name, &facts.code)
    {
        return None;
    }
    // Helpers (`bodies` after the kernel's) and file-scope arrays: settled bytes only (their
    // names are not the kernel's).
    let mut terms: Vec<String> = Vec::new();
    let mut settled = 0u64;
    let helper_arrays = bodies[1..]
        .iter()
        .flat_map(|b| super::flow::descendants(*b))
        .filter(|d| d.kind_id() == kinds().declaration)
        .map(|d| declared_bytes(d, src, &file.names));
    for b in helper_arrays.chain(file.arrays_named(bodies, src)) {
        if b.unsettled || b.unsized_elements > 0 {
            return None;
        }
        settled = settled.saturating_add(b.certain);
    }
    // `using namespace nvcuda;` in the body: its names would not hold outside.
    let body_nodes = super::flow::descendants(k.body);
    if body_nodes.iter().any(|n| n.kind() == "using_declaration") {
        return None;
    }
    let scope = LocalNames::new(plan, src);
    for d in body_nodes {
        if d.kind_id() != kinds().declaration {
            continue;
        }
        let b = declared_bytes(d, src, &file.names);
        if !b.unsettled && b.unsized_elements == 0 {
            settled = settled.saturating_add(b.certain);
            continue;
        }
        let term = declaration_term(d, src, &scope)?;
        let mut guarded = term.clone();
        let mut n = d;
        while let Some(p) = n.parent() {
            if p.id() == k.body.id() {
                break;
            }
            if let Some(condition) = constexpr_branch(p, n, src, &scope).ok()? {
                guarded = format!("({condition} ? {guarded} : 0)");
            }
            n = p;
        }
        // Under a condition the term is not evaluated where it fails, but it is still formed:
        // a type or count that only the branch's instances have (`typename T::Tile`) would
        // be an error in the others. Plain arithmetic of names only, there.
        if guarded != term && !plain_arithmetic(&term) {
            return None;
        }
        terms.push(guarded);
    }
    if terms.is_empty() {
        return None;
    }
    terms.insert(0, settled.to_string());
    let bytes = format!("({})", terms.join(" + "));
    let changing = bytes
        .split(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .any(|w| facts.changing_macros.contains(w));
    (!changing).then_some(bytes)
}

/// Whether `term` (`declaration_term`'s) is `sizeof(NAME)` and arithmetic of names and
/// numbers, with no member of a type (`::`), template arguments or other `sizeof`: what every
/// instance can form.
fn plain_arithmetic(term: &str) -> bool {
    let rest = term.replacen("sizeof(", "", 1);
    rest.matches("sizeof").count() == 0
        && rest.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '_' | ' ' | '+' | '-' | '*' | '/' | '%' | '(' | ')')
        })
}

/// Whether `code` (a file without its comments: a comment's "template argument ... `k`" is
/// none) instantiates kernel template `name` explicitly (`template __global__ void
/// k<float>(...);`, in code or in a macro's replacement).
fn explicitly_instantiated(name: &str, code: &str) -> bool {
    crate::lang::word_indices(code, "template").any(|at| {
        let rest = &code[at + "template".len()..];
        let rest = rest.trim_start();
        rest.starts_with(|c: char| c == '_' || c.is_ascii_alphabetic())
            && rest
                .split(['<', ';', '{', '('])
                .next()
                .is_some_and(|head| crate::lang::has_word(head, name))
    })
}

/// Where `child` is a branch of an `if constexpr` statement `parent`: `Ok(Some(condition))`
/// under which that branch is instantiated, resolved for namespace scope (negated for the
/// `else`); `Ok(None)` where `parent` is no such statement; `Err` where its condition does not
/// resolve.
fn constexpr_branch(
    parent: Node,
    child: Node,
    src: &str,
    scope: &LocalNames,
) -> Result<Option<String>, ()> {
    if parent.kind() != "if_statement" || !crate::lang::is_if_constexpr(parent) {
        return Ok(None);
    }
    let branch = |field: &str| {
        parent
            .child_by_field_name(field)
            .is_some_and(|b| b.id() == child.id())
    };
    let negated = if branch("consequence") {
        false
    } else if branch("alternative") {
        true
    } else {
        return Err(());
    };
    let clause = parent.child_by_field_name("condition").ok_or(())?;
    if clause.child_by_field_name("initializer").is_some() {
        return Err(());
    }
    let value = clause
        .child_by_field_name("value")
        .filter(|v| v.kind() != "declaration")
        .ok_or(())?;
    let condition = scope.resolve(text(value, src), 0).ok_or(())?;
    Ok(Some(if negated {
        format!("!({condition})")
    } else {
        format!("({condition})")
    }))
}

/// `sizeof(TYPE) * (N) * (M) + 16` for each declarator of a static `__shared__` declaration
/// (a pointer or scalar: `sizeof(TYPE*)`, `sizeof(TYPE)`), its names resolved for namespace
/// scope; `0` for a declaration that is no static shared one.
fn declaration_term(decl: Node, src: &str, scope: &LocalNames) -> Option<String> {
    let ty = scope.resolve(text(decl.child_by_field_name("type")?, src), 0)?;
    let mut out = Vec::new();
    for d in crate::lang::declarators(decl) {
        let mut d = d;
        if d.kind() == "init_declarator" {
            d = d.child_by_field_name("declarator")?;
        }
        let mut factors = Vec::new();
        while d.kind() == "array_declarator" {
            let size = d.child_by_field_name("size")?;
            factors.push(format!(
                "(unsigned long long)({})",
                scope.resolve(text(size, src), 0)?
            ));
            match d.child_by_field_name("declarator") {
                Some(inner) => d = inner,
                None => break,
            }
        }
        let element = match d.kind() {
            "identifier" => format!("sizeof({ty})"),
            "pointer_declarator" => "sizeof(void*)".to_string(),
            _ => return None,
        };
        factors.insert(0, element);
        out.push(format!("{} + 16", factors.join(" * ")));
    }
    (!out.is_empty()).then(|| format!("({})", out.join(" + ")))
}

/// The names a kernel's body and parameters declare, and which of them are constants with a
/// value (`constexpr int kNumWarps = ThreadsPerBlock / kWarpSize;`).
struct LocalNames {
    template_params: Vec<String>,
    declared: std::collections::BTreeSet<String>,
    constants: BTreeMap<String, String>,
}

impl LocalNames {
    fn new(plan: &KernelPlan, src: &str) -> LocalNames {
        let k = &plan.site;
        let template_params = k
            .template_params
            .iter()
            .map(|p| p.unnamed.as_ref().map_or(p.arg.clone(), |(_, n)| n.clone()))
            .collect();
        let mut declared: std::collections::BTreeSet<String> =
            k.param_list.iter().map(|p| p.name.clone()).collect();
        let mut constants = BTreeMap::new();
        let mut twice = std::collections::BTreeSet::new();
        let kd = kinds();
        for n in super::flow::descendants(k.body) {
            let id = n.kind_id();
            if id == kd.declaration {
                let constant = {
                    let mut c = n.walk();
                    let found = n.children(&mut c).any(|x| {
                        matches!(x.kind(), "type_qualifier")
                            && matches!(text(x, src), "const" | "constexpr")
                    });
                    found
                };
                for d in crate::lang::declarators(n) {
                    let Some(name) =
                        crate::lang::declarator_name(d).map(|x| text(x, src).to_string())
                    else {
                        continue;
                    };
                    if !declared.insert(name.clone()) {
                        twice.insert(name.clone());
                    }
                    let value = (d.kind() == "init_declarator")
                        .then(|| d.child_by_field_name("value"))
                        .flatten()
                        .filter(|v| v.kind() != "initializer_list" && v.kind() != "argument_list");
                    if let (true, Some(v), "identifier") = (
                        constant,
                        value,
                        d.child_by_field_name("declarator").map_or("", |x| x.kind()),
                    ) {
                        constants.insert(name, text(v, src).to_string());
                    }
                }
            } else if id == kd.alias_declaration || id == kd.type_definition {
                let name = n
                    .child_by_field_name("name")
                    .or_else(|| crate::lang::declarators(n).first().copied())
                    .map(|x| text(x, src).to_string());
                if let Some(name) = name {
                    declared.insert(name);
                }
            } else if matches!(
                n.kind(),
                "struct_specifier" | "class_specifier" | "enum_specifier" | "union_specifier"
            ) {
                if let Some(name) = n.child_by_field_name("name") {
                    declared.insert(text(name, src).to_string());
                }
            }
        }
        for t in twice {
            constants.remove(&t);
        }
        LocalNames {
            template_params,
            declared,
            constants,
        }
    }

    /// `text` with each local constant it names replaced by its value, parenthesized; None
    /// where it names any other local or parameter (those do not hold outside the body).
    fn resolve(&self, text: &str, depth: usize) -> Option<String> {
        if depth > 8 {
            return None;
        }
        let text = crate::lang::without_comments(text);
        let b = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c == b'"' || c == b'\'' {
                return None; // no literals of text in a size
            }
            if c.is_ascii_digit() {
                // A number with its suffix (`32u`, `1e3f`): not a name.
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'\'')
                {
                    i += 1;
                }
                out.push_str(&text[start..i]);
                continue;
            }
            if !(c == b'_' || c.is_ascii_alphabetic()) {
                out.push(c as char);
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            let word = &text[start..i];
            // A call (`calc_rows(ncols, device_table())`): its value may differ between the
            // host's and the device's compilations (`__CUDA_ARCH__`), and the two must choose
            // the same form. `sizeof`, `alignof` and functional casts to built-in types are
            // kept.
            let called = text[i..].trim_start().starts_with('(');
            if called && element_bytes(word).is_none() && !matches!(word, "sizeof" | "alignof") {
                return None;
            }
            let before = text[..start].trim_end();
            let member = before.ends_with("::") || before.ends_with('.') || before.ends_with("->");
            if member
                || self.template_params.iter().any(|t| t == word)
                || !self.declared.contains(word)
            {
                out.push_str(word);
            } else {
                let value = self.constants.get(word)?;
                out.push('(');
                out.push_str(&self.resolve(value, depth + 1)?);
                out.push(')');
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_from_macros_constants_and_sizeof() {
        let src = "#define BLK 1024\n#define WORK 12 // per thread\n#define ALL (WORK * BLK)\n\
                   const int kTile = 32;\nconstexpr unsigned kPad = kTile + 1;\n";
        let names = SizeNames::new(src, &[("HDR".to_string(), "0x10".to_string())]);
        assert_eq!(names.value("ALL"), Some(12 * 1024));
        assert_eq!(names.value("kTile * kPad"), Some(32 * 33));
        assert_eq!(names.value("HDR << 2"), Some(64));
        assert_eq!(names.value("sizeof(float4) * 4"), Some(64));
        assert_eq!(names.value("BLK / 2 + 1 - 1"), Some(512));
        assert_eq!(names.value("UNKNOWN * 2"), None);
        assert_eq!(names.value("BLK / 0"), None);
        assert_eq!(names.value("(BLK"), None);
    }

    /// The per-instance bytes of each kernel of `src`, by name.
    fn per_instance(src: &str) -> Vec<(String, Option<String>)> {
        let parsed = crate::parse::parse(src);
        let a = crate::analysis::analyze(&parsed, src, &crate::Options::default());
        a.kernels
            .iter()
            .map(|k| (k.site.name.clone(), k.loop_state_per_instance.clone()))
            .collect()
    }

    #[test]
    fn template_counts_are_left_to_each_instance() {
        let src = "constexpr int kLanes = 32;\n\
            template <typename K, int Q, int T> __global__ void k(K* o) {\n\
              constexpr int kWarps = T / kLanes; const int kAll = kWarps * Q;\n\
              __shared__ int fixed[64];\n\
              if constexpr (Q > 1) { __shared__ K keys[kAll]; o[0] = keys[0]; } else { __shared__ float one[Q][2]; o[0] = one[0][0]; }\n\
            }\n";
        let got = per_instance(src);
        assert_eq!(
            got[0].1.as_deref(),
            Some(
                "(256 + ((Q > 1) ? (sizeof(K) * (unsigned long long)(((T / kLanes) * Q)) + 16) : 0) \
                 + (!(Q > 1) ? (sizeof(float) * (unsigned long long)(2) * (unsigned long long)(Q) + 16) : 0))"
            )
        );
        // Settled counts keep the static form; a count of the body that is no constant, a
        // helper's array, `using namespace`, an explicit instantiation: no per-instance form.
        for (src, why) in [
            ("template <int N> __global__ void k(float* o) { __shared__ float t[64]; o[0] = t[N]; }", "settled"),
            ("template <int N> __global__ void k(float* o) { int m = N; __shared__ float t[m]; o[0] = t[0]; }", "no constant"),
            ("template <int N> __device__ void h(float* o) { __shared__ float t[N]; o[0] = t[0]; }\n\
              template <int N> __global__ void k(float* o) { h<N>(o); __shared__ float u[N]; o[1] = u[0]; }", "helper"),
            ("__shared__ float pool[POOL_WORDS];\n\
              template <int N> __global__ void k(float* o) { __shared__ float t[N]; o[0] = t[0] + pool[0]; }", "file array"),
            ("template <int N> __global__ void k(float* o) { using namespace std; __shared__ float t[N]; o[0] = t[0]; }", "using"),
            ("template <int N> __global__ void k(float* o) { __shared__ float t[N]; o[0] = t[0]; }\n\
              template __global__ void k<4>(float* o);", "instantiated"),
            ("template <int... N> __global__ void k(float* o) { __shared__ float t[sizeof...(N)]; o[0] = t[0]; }", "pack"),
            ("template <int N> __global__ void k(float* o) { constexpr int w = warp_size(); __shared__ float t[N * w]; o[0] = t[0]; }", "call"),
            ("template <class T> __global__ void k(float* o) { if constexpr (T::tiled) { __shared__ typename T::Tile t[T::n]; o[0] = t[0].x; } }", "a branch's own type"),
        ] {
            assert_eq!(per_instance(src)[0].1, None, "{why}");
        }
        // A macro with two definitions (host and device) or undefined after the kernel.
        for src in [
            "#ifdef __CUDA_ARCH__\n#define W 64\n#else\n#define W 32\n#endif\n\
             template <int N> __global__ void k(float* o) { __shared__ float t[N * W]; o[0] = t[0]; }",
            "#define W 64\ntemplate <int N> __global__ void k(float* o) { __shared__ float t[N * W]; o[0] = t[0]; }\n#undef W\n",
        ] {
            assert_eq!(per_instance(src)[0].1, None, "{src}");
        }
        assert!(per_instance("#define W 64\ntemplate <int N> __global__ void k(float* o) { __shared__ float t[N * W]; o[0] = t[0]; }")[0].1.is_some());
        // A comment that reads like an explicit instantiation is none.
        assert!(per_instance(
            "// a template argument of `k` (its count)\n\
            template <int N> __global__ void k(float* o) { __shared__ float t[N]; o[0] = t[0]; }"
        )[0]
        .1
        .is_some());
        // A kernel that is no template keeps what the text settles.
        assert_eq!(
            per_instance(
                "__global__ void k(float* o) { __shared__ float t[UNKNOWN]; o[0] = t[0]; }"
            )[0]
            .1,
            None
        );
    }

    #[test]
    fn element_types() {
        assert_eq!(element_bytes("unsigned int"), Some(4));
        assert_eq!(element_bytes("volatile unsigned"), Some(4));
        assert_eq!(element_bytes("unsigned long long"), Some(8));
        assert_eq!(element_bytes("double2"), Some(16));
        assert_eq!(element_bytes("T"), None);
    }
}
