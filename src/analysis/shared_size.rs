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

/// What a block may declare statically (every architecture: 48 KB; more only as dynamic shared
/// memory, after `cudaFuncSetAttribute`).
const STATIC_SHARED_LIMIT: u64 = 48 * 1024;

/// A file's facts for the sizes: the names sizes may use, and its file-scope static shared
/// arrays (name and bytes), found once for all its kernels.
pub struct FileShared<'s> {
    names: SizeNames,
    arrays: Vec<(&'s str, Bytes)>,
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
                    let some = bytes.certain > 0 || bytes.unsized_elements > 0;
                    if let (true, Some(name)) = (some, name) {
                        arrays.push((name, bytes));
                    }
                } else if crate::lang::scope_container(n.kind(), false) {
                    let mut c = n.walk();
                    stack.extend(n.children(&mut c));
                }
            }
        }
        FileShared { names, arrays }
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
}

impl Bytes {
    fn add(self, other: Bytes) -> Bytes {
        Bytes {
            certain: self.certain.saturating_add(other.certain),
            unsized_elements: self.unsized_elements.saturating_add(other.unsized_elements),
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
        },
        None => Bytes {
            certain: 0,
            unsized_elements: count,
        },
    }
}

/// Where the kernel's task loop keeps its state: `Ok(false)` in static shared memory,
/// `Ok(true)` in dynamic shared memory, where the static shared memory the kernel certainly
/// declares (its body, the helpers it reaches, file-scope arrays they name) leaves less than
/// the loop's own under the limit. Left as written where even that form would not do: the
/// kernel alone passes the limit (then the count is wrong, or the original does not compile
/// either), or other declarations of its wrappers would name them as the static form does (an
/// earlier declaration, an explicit specialization).
pub fn loop_state_dynamic(
    plan: &KernelPlan,
    helpers: &[HelperPlan],
    graph: &CallGraph,
    src: &str,
    file: &FileShared,
) -> Result<bool, Diagnostic> {
    if !src.contains("__shared__") {
        return Ok(false);
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
    let all = file
        .arrays
        .iter()
        .filter(|(name, _)| {
            bodies
                .iter()
                .any(|b| crate::lang::has_word(text(*b, src), name))
        })
        .map(|(_, bytes)| *bytes)
        .fold(in_bodies, Bytes::add);
    let reserve = crate::vocab::TASK_LOOP_SHARED_BYTES;
    let bytes = all.certain;
    let other_declarations = !plan.prior_declarations.is_empty() || plan.site.specialization;
    if bytes + reserve <= STATIC_SHARED_LIMIT {
        // Arrays of a type the text does not size may come to the limit (a template's
        // `__shared__ scalar_t buf[6144]`, sized for 8-byte elements): the dynamic form then,
        // which compiles whatever the type, where nothing else names the usual wrappers.
        return Ok(all.fills_the_limit(reserve, STATIC_SHARED_LIMIT) && !other_declarations);
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
        return Ok(true);
    };
    Err(Diagnostic::new(Code::Unsupported, message)
    .label(plan.site.name_node.byte_range(), "left as written")
    .help("declare the largest array `extern __shared__` and pass its size at launch (dynamic shared memory has no such limit once raised with cudaFuncSetAttribute)"))
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

    #[test]
    fn element_types() {
        assert_eq!(element_bytes("unsigned int"), Some(4));
        assert_eq!(element_bytes("volatile unsigned"), Some(4));
        assert_eq!(element_bytes("unsigned long long"), Some(8));
        assert_eq!(element_bytes("double2"), Some(16));
        assert_eq!(element_bytes("T"), None);
    }
}
