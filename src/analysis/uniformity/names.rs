//! The names a file proves uniform: its constants, enumerators, and a kernel's parameters.

use super::*;

#[derive(Default)]
pub(super) struct Declared {
    /// `__constant__` variables, `const`/`constexpr` variables with an initializer, enumerators.
    pub(super) uniform: BTreeSet<String>,
    /// Every other variable: `__device__`, `__managed__`, `__shared__`, non-const, no
    /// initializer.
    pub(super) other: BTreeSet<String>,
}

/// The file's declarations outside function bodies (namespaces, `extern "C"`, templates,
/// `#if` branches, enums and classes included). What it cannot read it leaves out, which makes
/// those names varying.
pub(super) fn file_declared(root: Node, src: &str) -> Declared {
    let k = kinds();
    let f = crate::lang::fields();
    let mut out = Declared::default();
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        if n.kind_id() == k.declaration {
            declare(n, src, true, &mut out);
            // `enum E { A } e;`: the enumerators.
            stack.extend(n.child_by_field_id(f.r#type));
            continue;
        }
        match n.kind() {
            "enumerator" => {
                out.uniform.extend(
                    n.child_by_field_id(f.name)
                        .map(|x| text(x, src).to_string()),
                );
            }
            kind if crate::lang::scope_container(kind, true) => {
                let mut c = n.walk();
                stack.extend(n.children(&mut c));
            }
            _ => {}
        }
    }
    out
}

/// The words of a declaration beside its type, declarators and value: storage classes, memory
/// spaces, qualifiers (`static`, `__shared__`, `const`, `constexpr`, `volatile`).
fn specifier_words<'s>(decl: Node, declarators: &[Node], src: &'s str) -> BTreeSet<&'s str> {
    let f = crate::lang::fields();
    let is = |field, child: Node| {
        decl.child_by_field_id(field)
            .is_some_and(|t| t.id() == child.id())
    };
    let mut c = decl.walk();
    decl.children(&mut c)
        .filter(|child| {
            !declarators.iter().any(|d| d.id() == child.id())
                && !is(f.r#type, *child)
                && !is(f.value, *child)
        })
        .map(|child| text(child, src))
        .collect()
}

/// Records the variables one declaration declares (functions are left out), if it has storage
/// beyond one thread's call: at file scope, or `static`, `extern` or in a CUDA memory space.
/// Returns whether it has.
pub(super) fn declare(decl: Node, src: &str, file_scope: bool, out: &mut Declared) -> bool {
    let k = kinds();
    let f = crate::lang::fields();
    let declarators = lang::declarators(decl);
    let words = specifier_words(decl, &declarators, src);
    let has = |w: &str| words.contains(w);
    let lasting = file_scope
        || [
            "static",
            "extern",
            "__device__",
            "__constant__",
            "__managed__",
            "__shared__",
        ]
        .iter()
        .any(|w| has(w));
    if !lasting {
        return false;
    }
    let shared = has("__shared__") || has("__managed__") || has("volatile");
    let has_value = decl.child_by_field_id(f.value).is_some();
    for d in declarators {
        let (inner, initialized) = if d.kind_id() == k.init_declarator {
            (d.child_by_field_id(f.declarator).unwrap_or(d), true)
        } else {
            (d, has_value)
        };
        if inner.kind_id() == k.function_declarator {
            continue; // a function, not a variable
        }
        // `const int* p` may move; `int* const p` may not.
        let constant = has("constexpr")
            || match pointers_const(inner, src) {
                Some(all_const) => all_const,
                None => has("const"),
            };
        let fixed = initialized && constant && !contains_kind(inner, k.reference_declarator);
        let uniform = !shared && (has("__constant__") || fixed);
        let set = if uniform {
            &mut out.uniform
        } else {
            &mut out.other
        };
        set.extend(declared_names(inner, src));
    }
    true
}

/// The kernel's variables (parameters and the body's locals) that are themselves constant in
/// every declaration of their name (`const int n`, `int* const p`, `const T& r`,
/// `const int a[4]`, `constexpr`), and that the file declares as nothing else: a call cannot
/// write them through an argument, since a reference or pointer to non-`const` cannot bind to
/// them (llm.c, FlashInfer: `const int bid = blockIdx.x;` passed to a function of another
/// header, which made the block's early return look thread-dependent).
pub(super) fn constant_names(
    function: Node,
    all: &[Node],
    src: &str,
    file_other: &BTreeSet<String>,
) -> BTreeSet<String> {
    let k = kinds();
    let f = crate::lang::fields();
    let mut constant = BTreeSet::new();
    let mut not = BTreeSet::new();
    let record = |decl: Node, constant: &mut BTreeSet<String>, not: &mut BTreeSet<String>| {
        let declarators = lang::declarators(decl);
        let words = specifier_words(decl, &declarators, src);
        for d in declarators {
            let inner = if d.kind_id() == k.init_declarator {
                d.child_by_field_id(f.declarator).unwrap_or(d)
            } else {
                d
            };
            if inner.kind_id() == k.function_declarator {
                continue;
            }
            // `volatile` says that something else may change it: never constant here.
            let fixed = !text(decl, src).contains("volatile")
                && (words.contains("constexpr")
                    || match pointers_const(inner, src) {
                        Some(all_const) => all_const,
                        None => words.contains("const"),
                    });
            for name in declared_names(inner, src) {
                if fixed {
                    constant.insert(name);
                } else {
                    not.insert(name);
                }
            }
        }
    };
    for &n in all {
        if n.kind_id() == k.declaration {
            record(n, &mut constant, &mut not);
        } else if n.kind_id() == k.for_range_loop {
            // `for (auto x : xs)`: not followed; such a name never counts as constant.
            if let Some(d) = n.child_by_field_id(f.declarator) {
                not.extend(declared_names(d, src));
            }
        }
    }
    if let Some(list) =
        function_declarator(function).and_then(|d| d.child_by_field_id(f.parameters))
    {
        let mut c = list.walk();
        for p in list.named_children(&mut c) {
            match p.kind() {
                "parameter_declaration" | "optional_parameter_declaration" => {
                    record(p, &mut constant, &mut not)
                }
                // A pack (`Args... args`) and anything else: never constant.
                _ => not.extend(identifiers(p, src)),
            }
        }
    }
    let mut out: BTreeSet<String> = constant
        .into_iter()
        .filter(|n| !not.contains(n) && !file_other.contains(n))
        .collect();
    // A non-type template parameter is no object at all (no reference can bind to it to
    // write it), and no name of the body may hide it.
    if let Some(list) = function
        .parent()
        .filter(|t| t.kind_id() == k.template_declaration)
        .and_then(|t| t.child_by_field_id(f.parameters))
    {
        let mut c = list.walk();
        for p in list.named_children(&mut c) {
            if matches!(
                p.kind(),
                "parameter_declaration" | "optional_parameter_declaration"
            ) {
                if let Some(d) = p.child_by_field_id(f.declarator) {
                    out.extend(declared_names(d, src));
                }
            }
        }
    }
    out
}

/// Whether `n` (a declaration, a parameter, a pointer declarator) has `const` among its own
/// words: beside the type it makes the pointee constant, in a pointer declarator the pointer.
pub(super) fn has_const(n: Node, src: &str) -> bool {
    let mut c = n.walk();
    let found = n
        .children(&mut c)
        .any(|q| q.kind_id() == kinds().type_qualifier && text(q, src) == "const");
    found
}

/// The identifier of a declarator of one pointer level (`*p`; `p[]` too where `arrays`).
pub(super) fn one_pointer_level<'t>(declarator: Node<'t>, arrays: bool) -> Option<Node<'t>> {
    let level = declarator.kind() == "pointer_declarator"
        || arrays && declarator.kind() == "array_declarator";
    declarator
        .child_by_field_id(crate::lang::fields().declarator)
        .filter(|n| level && n.kind_id() == kinds().identifier)
}

/// For a pointer declarator, whether every pointer level is itself `const`, so the variable
/// cannot change (`int* const p`; `const int* p` points at constants but may move). None: no
/// pointer.
pub(super) fn pointers_const(declarator: Node, src: &str) -> Option<bool> {
    let mut levels = 0;
    let mut all_const = true;
    lang::visit(declarator, |x| {
        if x.kind() == "pointer_declarator" {
            levels += 1;
            all_const &= has_const(x, src);
        }
        true
    });
    (levels > 0).then_some(all_const)
}

/// A function's parameters passed by value (a reference may see writes by other threads).
pub(super) fn parameters(function: Node, src: &str) -> Vec<String> {
    let k = kinds();
    parameter_names_where(function, src, |_, d| {
        !contains_kind(d, k.reference_declarator)
    })
}

/// A function's `const` lvalue references to a value (`const int &ntx`, not to a pointer,
/// nothing `volatile`): in a helper's live copy, whose every call passes such a parameter a
/// pure argument (the caller's local or a temporary), the argument's value.
pub(super) fn const_value_reference_parameters(function: Node, src: &str) -> Vec<String> {
    let k = kinds();
    parameter_names_where(function, src, |p, d| {
        let t = text(p, src);
        lang::has_word(t, "const")
            && t.matches('&').count() == 1
            && !t.contains('*')
            && !lang::has_word(t, "volatile")
            && contains_kind(d, k.reference_declarator)
    })
}

/// The names of a function's parameters whose declaration `keep` accepts (given the parameter
/// and its declarator).
fn parameter_names_where(
    function: Node,
    src: &str,
    keep: impl Fn(Node, Node) -> bool,
) -> Vec<String> {
    let f = crate::lang::fields();
    let Some(list) = function_declarator(function).and_then(|d| d.child_by_field_id(f.parameters))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut c = list.walk();
    for p in list.named_children(&mut c) {
        if let Some(d) = p.child_by_field_id(f.declarator).filter(|d| keep(p, *d)) {
            out.extend(declared_names(d, src));
        }
    }
    out
}

/// A kernel's parameters that point at memory it only reads: one pointer level (`const T* p`,
/// `T const* __restrict__ p`, `const T p[]`) whose pointee is `const` and nothing `volatile`.
/// The host passes only device memory to a kernel, never a thread's locals or a block's shared
/// memory, so every thread of a block that loads the same element of it reads the same value
/// (another thread's write in between would be a data race in the original too).
pub(super) fn read_only_parameters(function: Node, src: &str) -> BTreeSet<String> {
    kernel_parameters(function, src)
        .into_iter()
        // The pointee's `const` stands beside the type, outside the declarator.
        .filter_map(|(p, d)| one_pointer_level(d, true).filter(|_| has_const(p, src)))
        .map(|name| text(name, src).to_string())
        .collect()
}

/// A kernel's parameters that declare something and say nothing `volatile`, each with its
/// declarator; none for a function that is no kernel (a helper's pointer may point at anything
/// its caller has).
fn kernel_parameters<'t>(function: Node<'t>, src: &str) -> Vec<(Node<'t>, Node<'t>)> {
    let f = crate::lang::fields();
    let head_end = function
        .child_by_field_id(f.body)
        .map_or(function.end_byte(), |b| b.start_byte());
    if !src[function.start_byte()..head_end].contains("__global__") {
        return Vec::new();
    }
    let Some(list) = function_declarator(function).and_then(|d| d.child_by_field_id(f.parameters))
    else {
        return Vec::new();
    };
    let mut c = list.walk();
    let params = list
        .named_children(&mut c)
        .filter(|p| p.kind() == "parameter_declaration" && !text(*p, src).contains("volatile"))
        .filter_map(|p| Some((p, p.child_by_field_id(f.declarator)?)))
        .collect();
    params
}

/// A kernel's pointer parameters (`T* p`, `T** p`, `T p[]`; nothing `volatile`) whose first
/// level the kernel never writes: every mention of the name in the body loads an element
/// (`p[i]`, `*p`) and uses it as a value, or reads deeper levels through it (`p[i][j] = x`
/// writes the second level, not `p`'s elements), or compares the pointer. No mention passes
/// `p` or `&p[i]` to a call, assigns through `p`, moves `p`, binds a reference to `p[i]`, or
/// sits in the replacement text of a macro the body names (`macros`; a function-like macro's
/// parameter of that name is the macro's own). Such an element is as constant through the
/// kernel as a `const` one (`read_only_parameters`): batched kernels load their sizes and
/// matrix pointers this way (`int* M; int m = M[blockIdx.z];`, `T** C; C[blockIdx.z]`).
pub(super) fn unwritten_parameters(
    function: Node,
    all: &[Node],
    src: &str,
    macros: &BTreeMap<String, MacroFacts>,
) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = kernel_parameters(function, src)
        .into_iter()
        .filter_map(|(_, d)| pointer_name(d))
        .map(|name| text(name, src).to_string())
        .collect();
    if out.is_empty() {
        return out;
    }
    let used = macros_named(all, src, macros);
    out.retain(|name| {
        !named_by_macro(&used, name)
            && all.iter().all(|&n| {
                n.kind_id() != kinds().identifier
                    || text(n, src) != name
                    || n.parent()
                        .is_some_and(|p| p.kind() == "parameter_declaration")
                    || first_level_read(n, src, macros)
            })
    });
    out
}

/// The pointer fields of a kernel's parameters of class type, passed by value, whose first
/// level the kernel never writes, by their mention (`params.begin_offsets`): every mention of
/// such a parameter in the body reads one of its fields with `.` (a mention of the object
/// itself, passed to a call or address-taken, could let anything write through any field),
/// and every mention of the field only reads its first level, as `unwritten_parameters` asks
/// of a pointer parameter. Kernels take their pointers in a parameter struct
/// (FasterTransformer's `params.gmem_begin_offsets[segment]`, a segment's bounds read before
/// a block-uniform return), and a load through such a field at a uniform index is as uniform
/// as one through a pointer parameter.
pub(super) fn unwritten_parameter_fields(
    function: Node,
    all: &[Node],
    src: &str,
    macros: &BTreeMap<String, MacroFacts>,
) -> BTreeSet<String> {
    let f = crate::lang::fields();
    let k = kinds();
    let objects: Vec<String> = kernel_parameters(function, src)
        .into_iter()
        .filter(|(_, d)| d.kind_id() == k.identifier)
        .map(|(_, d)| text(d, src).to_string())
        .collect();
    let mut out = BTreeSet::new();
    if objects.is_empty() {
        return out;
    }
    let used = macros_named(all, src, macros);
    for object in objects {
        if named_by_macro(&used, &object) {
            continue;
        }
        // Each field's mentions read only its first level; the object is only ever so read.
        let mut fields: BTreeMap<String, bool> = BTreeMap::new();
        let mut whole = true;
        for &n in all {
            if n.kind_id() != k.identifier || text(n, src) != object {
                continue;
            }
            let access = n.parent().filter(|p| {
                p.kind_id() == k.field_expression
                    && p.child_by_field_id(f.argument)
                        .is_some_and(|a| a.id() == n.id())
                    && p.child_by_field_id(f.operator)
                        .is_some_and(|o| text(o, src) == ".")
            });
            let Some(access) = access else {
                whole = false;
                break;
            };
            let Some(field) = access.child_by_field_id(f.field) else {
                whole = false;
                break;
            };
            let read = first_level_read(access, src, macros);
            *fields.entry(text(field, src).to_string()).or_insert(true) &= read;
        }
        if whole {
            out.extend(
                fields
                    .into_iter()
                    .filter(|(_, read)| *read)
                    .map(|(field, _)| format!("{object}.{field}")),
            );
        }
    }
    out
}

/// The macros a body names (`all`: its nodes), each with what it reaches (`macros::close`).
fn macros_named<'m>(
    all: &[Node],
    src: &str,
    macros: &'m BTreeMap<String, MacroFacts>,
) -> Vec<&'m MacroFacts> {
    all.iter()
        .filter(|n| n.kind_id() == kinds().identifier)
        .filter_map(|n| macros.get(text(*n, src)))
        .collect()
}

/// Whether one of the macros `used` names `name` in its replacement text (a function-like
/// macro's parameter of that name is the macro's own): what the macro does with it is unseen.
fn named_by_macro(used: &[&MacroFacts], name: &str) -> bool {
    used.iter().any(|m| {
        m.idents.iter().any(|i| i == name)
            && !m
                .params
                .as_ref()
                .is_some_and(|p| p.iter().any(|q| q == name))
    })
}

/// The identifier a pointer parameter's declarator names: under one or more pointer levels,
/// or one array level.
fn pointer_name(declarator: Node) -> Option<Node> {
    let f = crate::lang::fields();
    if declarator.kind() == "array_declarator" {
        return declarator
            .child_by_field_id(f.declarator)
            .filter(|n| n.kind_id() == kinds().identifier);
    }
    let mut d = declarator;
    let mut levels = 0;
    while d.kind() == "pointer_declarator" {
        levels += 1;
        d = d.child_by_field_id(f.declarator)?;
    }
    (levels > 0 && d.kind_id() == kinds().identifier).then_some(d)
}

/// Whether this mention of a pointer (`p`) only reads its first level: `p[i]` or `*p` used as
/// a value (`value_use`), or a comparison of `p`.
fn first_level_read(p: Node, src: &str, macros: &BTreeMap<String, MacroFacts>) -> bool {
    let f = crate::lang::fields();
    let k = kinds();
    let Some(parent) = p.parent() else {
        return false;
    };
    let is_base = |field| {
        parent
            .child_by_field_id(field)
            .is_some_and(|b| b.id() == p.id())
    };
    let operator = parent
        .child_by_field_id(f.operator)
        .map(|o| text(o, src))
        .unwrap_or("");
    if parent.kind_id() == k.subscript_expression && is_base(f.argument)
        || parent.kind_id() == k.pointer_expression && operator == "*"
    {
        return value_use(parent, src, macros);
    }
    parent.kind() == "binary_expression" && matches!(operator, "==" | "!=")
}

/// Whether an element loaded from a pointer's first level (`e`: `p[i]`, `*p`) is only used as a
/// value, or to reach a deeper level: not written, not moved, not bound to a reference or
/// passed where a callee could write it.
fn value_use(e: Node, src: &str, macros: &BTreeMap<String, MacroFacts>) -> bool {
    let f = crate::lang::fields();
    let k = kinds();
    let mut e = e;
    let mut parent = e.parent();
    while let Some(p) = parent.filter(|p| p.kind() == "parenthesized_expression") {
        e = p;
        parent = p.parent();
    }
    let Some(parent) = parent else {
        return false;
    };
    let is = |field| {
        parent
            .child_by_field_id(field)
            .is_some_and(|b| b.id() == e.id())
    };
    let operator = parent
        .child_by_field_id(f.operator)
        .map(|o| text(o, src))
        .unwrap_or("");
    match parent.kind() {
        "assignment_expression" => is(f.right),
        "subscript_expression"
        | "cast_expression"
        | "binary_expression"
        | "condition_clause"
        | "return_statement"
        | "expression_statement"
        | "subscript_argument_list" => true,
        // `e->x`: a deeper level.
        "field_expression" => operator == "->",
        "pointer_expression" => operator == "*",
        "unary_expression" => true, // `!e`, `-e`, `~e`: values
        "conditional_expression" => is(f.condition),
        "init_declarator" => {
            is(f.value)
                && parent
                    .child_by_field_id(f.declarator)
                    .is_some_and(|d| d.kind() != "reference_declarator")
        }
        // An argument of a pure function (`min(p[i], n)`) or of a function-like macro that
        // writes nothing is a value.
        "argument_list" => parent
            .parent()
            .filter(|call| call.kind_id() == k.call_expression)
            .and_then(|call| call.child_by_field_id(f.function))
            .is_some_and(|callee| {
                let name = text(callee, src);
                lang::is_pure_function(name) || macro_writes_nothing(macros, name, 0)
            }),
        _ => false,
    }
}

/// The body's locals that alias a read-only pointer (`read_only`): one pointer level whose
/// pointee is `const` and nothing `volatile` (`const T* q = p;`, `const T* __restrict__ q =
/// p + n;`), initialized from such a pointer (`based_on`), declared once in the body and not
/// named as any parameter (the kernel's, `function`; a lambda's in the body counts as a second
/// declaration). Real kernels copy their parameters into restrict-qualified locals before
/// using them (llama.cpp's flash attention: `const int * GGML_CUDA_RESTRICT KV_max =
/// KV_max_ptr;`). `repointed` then drops those the body points elsewhere.
pub(super) fn read_only_locals(
    all: &[Node],
    src: &str,
    read_only: &BTreeSet<String>,
    function: Node,
) -> BTreeSet<String> {
    let k = kinds();
    let f = crate::lang::fields();
    let mut params = BTreeSet::new();
    if let Some(list) =
        function_declarator(function).and_then(|d| d.child_by_field_id(f.parameters))
    {
        let mut c = list.walk();
        for p in list.named_children(&mut c) {
            if let Some(name) = p
                .child_by_field_id(f.declarator)
                .and_then(lang::declarator_name)
            {
                params.insert(text(name, src).to_string());
            }
        }
    }
    // Every name the body declares, with how often, and the candidates' initial values.
    let mut declared: HashMap<String, usize> = HashMap::new();
    let mut candidates: Vec<(String, Node)> = Vec::new();
    for &n in all {
        if n.kind() == "parameter_declaration" {
            if let Some(name) = n
                .child_by_field_id(f.declarator)
                .and_then(lang::declarator_name)
            {
                *declared.entry(text(name, src).to_string()).or_default() += 1;
            }
            continue;
        }
        if n.kind_id() != k.declaration {
            continue;
        }
        let plain = has_const(n, src) && !text(n, src).contains("volatile");
        let mut c = n.walk();
        for d in n.children_by_field_name("declarator", &mut c) {
            let Some(name) = lang::declarator_name(d) else {
                continue;
            };
            let name = text(name, src).to_string();
            *declared.entry(name.clone()).or_default() += 1;
            if !plain || d.kind() != "init_declarator" {
                continue;
            }
            let one_level = d
                .child_by_field_id(f.declarator)
                .and_then(|p| one_pointer_level(p, false))
                .is_some();
            if let Some(value) = d.child_by_field_id(f.value).filter(|_| one_level) {
                candidates.push((name, value));
            }
        }
    }
    let mut out = BTreeSet::new();
    loop {
        let known: BTreeSet<String> = read_only.union(&out).cloned().collect();
        let before = out.len();
        for (name, value) in &candidates {
            if declared.get(name) == Some(&1)
                && !params.contains(name)
                && !read_only.contains(name)
                && based_on(*value, &known, src)
            {
                out.insert(name.clone());
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

/// Read-only pointers (`read_only`) that the body points elsewhere with a plain assignment
/// whose value is not itself such a pointer (`p = mine;`): from there on a load through
/// them may read a thread's own memory. Moves within the host's buffer (`p += n`, `p++`,
/// `p = q + n` with `q` read-only) keep them.
pub(super) fn repointed(read_only: &BTreeSet<String>, all: &[Node], src: &str) -> BTreeSet<String> {
    let k = kinds();
    let f = crate::lang::fields();
    let mut out = BTreeSet::new();
    for &n in all {
        if n.kind_id() != k.assignment_expression
            || n.child_by_field_id(f.operator).map(|o| text(o, src)) != Some("=")
        {
            continue;
        }
        let Some(target) = n
            .child_by_field_id(f.left)
            .map(lang::strip_parens)
            .filter(|t| t.kind_id() == k.identifier)
        else {
            continue;
        };
        let name = text(target, src);
        if !read_only.contains(name) {
            continue;
        }
        let from_read_only = n
            .child_by_field_id(f.right)
            .is_some_and(|v| based_on(v, read_only, src));
        if !from_read_only {
            out.insert(name.to_string());
        }
    }
    out
}

/// Whether a pointer value is a read-only pointer, maybe offset (`q`, `q + n`, `(q) - 1`).
pub(super) fn based_on(value: Node, read_only: &BTreeSet<String>, src: &str) -> bool {
    let f = crate::lang::fields();
    let v = lang::strip_parens(value);
    if v.kind_id() == kinds().identifier {
        return read_only.contains(text(v, src));
    }
    // A parameter's field (`params.offsets`, `unwritten_parameter_fields`).
    if v.kind_id() == kinds().field_expression {
        let dotted: String = text(v, src).split_whitespace().collect();
        return read_only.contains(&dotted);
    }
    v.kind() == "binary_expression"
        && matches!(
            v.child_by_field_id(f.operator).map(|o| text(o, src)),
            Some("+") | Some("-")
        )
        && v.child_by_field_id(f.left)
            .is_some_and(|l| based_on(l, read_only, src))
}

/// For each function the file defines or declares outside function bodies, by its unqualified
/// name, one entry per overload: for each parameter whether the function may write the caller's
/// variable through it (a reference to non-`const` that a definition's body may write:
/// `reference_only_read`). Arguments past an overload's last parameter (a pack, C's `...`)
/// count as written.
pub(super) fn file_functions(
    root: Node,
    src: &str,
    macros: &BTreeMap<String, MacroFacts>,
) -> HashMap<String, Vec<Vec<bool>>> {
    let k = kinds();
    let f = crate::lang::fields();
    let mut out: HashMap<String, Vec<Vec<bool>>> = HashMap::new();
    for (name, n) in function_sites(root, src) {
        let Some(list) = function_declarator(n).and_then(|fd| fd.child_by_field_id(f.parameters))
        else {
            continue;
        };
        let mut writes = Vec::new();
        let mut c = list.walk();
        for p in list.named_children(&mut c) {
            if p.kind() == "comment" {
                continue;
            }
            let is_const = has_const(p, src);
            let declarator = p.child_by_field_id(f.declarator);
            let by_reference = declarator.is_some_and(|d| contains_kind(d, k.reference_declarator));
            // A pack of references (`Args&... a`) counts as one parameter of its kind.
            let read_only = || {
                let name = declarator.and_then(lang::declarator_name);
                let body = n.child_by_field_id(f.body);
                match (name, body) {
                    (Some(name), Some(body)) => {
                        reference_only_read(body, text(name, src), src, macros)
                    }
                    _ => false,
                }
            };
            writes.push(by_reference && !is_const && !read_only());
        }
        out.entry(name).or_default().push(writes);
    }
    out
}

/// Whether a function body only reads its reference parameter `name`: every mention is a value
/// in an arithmetic or comparison, a unary operator's operand (not `&`, `++`, `--`), a cast's
/// value, an index, a condition's test, the right side of an assignment, or a plain copy's
/// initializer; no local hides it, and no macro the body uses names it and may write (MAGMA's
/// `multiply_partial_block(int &kk, ...)` loops `for (k = 0; k < kk; k++)`). A call argument,
/// a member access, a subscripted base or a returned value counts as a write: each may bind or
/// reach the caller's variable.
fn reference_only_read(
    body: Node,
    name: &str,
    src: &str,
    macros: &BTreeMap<String, MacroFacts>,
) -> bool {
    let k = kinds();
    let mut ok = true;
    lang::visit(body, |n| {
        if !ok {
            return false;
        }
        let id = n.kind_id();
        if id == k.identifier {
            let t = text(n, src);
            if t == name {
                ok = read_context(n, src) || element_macro_argument(n, src, macros);
            } else if let Some(m) = macros.get(t) {
                // Named by a macro: only one that writes nothing, takes no address and uses no
                // other macro (its own name, which does not expand again, aside). A parameter
                // of the macro by that name is the argument's place, not the variable.
                let names_it = lang::has_word(&m.text, name)
                    && !m
                        .params
                        .as_ref()
                        .is_some_and(|ps| ps.iter().any(|p| p == name));
                ok = !names_it
                    || !super::writes(&m.text)
                        && !m.text.contains('&')
                        && m.idents.iter().all(|c| c == t || macros.get(c).is_none());
            }
        } else if id == k.declaration || n.kind() == "parameter_declaration" {
            // A local of the same name hides the parameter: its mentions are not followed.
            ok = !lang::declarators(n)
                .into_iter()
                .filter_map(lang::declarator_name)
                .any(|d| text(d, src) == name);
        } else if id == k.lambda_expression {
            ok = !lang::has_word(text(n, src), name);
            return false;
        }
        ok
    });
    ok
}

/// Whether `n` is an argument of a function-like macro that stands for one array element
/// (`sA(i, j)` through `#define sA(i, j) sA[(j)*slda + (i)]`): an index, read where the
/// element is read or written.
fn element_macro_argument(n: Node, src: &str, macros: &BTreeMap<String, MacroFacts>) -> bool {
    let Some(args) = n.parent().filter(|p| p.kind() == "argument_list") else {
        return false;
    };
    let Some(callee) = args
        .parent()
        .filter(|c| c.kind_id() == kinds().call_expression)
        .and_then(|c| c.child_by_field_id(crate::lang::fields().function))
    else {
        return false;
    };
    super::element_macro(macros, text(callee, src))
}

/// Whether `n`, a mention of a variable, only reads its value where it stands.
fn read_context(n: Node, src: &str) -> bool {
    let f = crate::lang::fields();
    let mut at = n;
    let mut parent = n.parent();
    while let Some(p) = parent.filter(|p| p.kind() == "parenthesized_expression") {
        at = p;
        parent = p.parent();
    }
    let Some(p) = parent else {
        return false;
    };
    let is = |field: u16| {
        p.child_by_field_id(field)
            .is_some_and(|c| c.id() == at.id())
    };
    match p.kind() {
        "binary_expression" => true,
        "unary_expression" => !matches!(
            p.child_by_field_id(f.operator).map(|o| text(o, src)),
            Some("&") | Some("*")
        ),
        "cast_expression" => true,
        "subscript_expression" => !is(f.argument),
        "subscript_argument_list" => true,
        "condition_clause" => true,
        "conditional_expression" => is(f.condition),
        "assignment_expression" => is(f.right),
        "init_declarator" => {
            is(f.value)
                && p.child_by_field_id(f.declarator)
                    .is_some_and(|d| d.kind() == "identifier")
        }
        _ => false,
    }
}

/// Every function the file defines or declares outside function bodies (namespaces, `extern
/// "C"`, templates, `#if` branches), by its unqualified name: the `function_definition` or
/// `declaration` node.
pub(super) fn function_sites<'t>(root: Node<'t>, src: &str) -> Vec<(String, Node<'t>)> {
    let f = crate::lang::fields();
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        let kind = n.kind();
        if kind == "function_definition" || n.kind_id() == kinds().declaration {
            if let Some(name) =
                function_declarator(n).and_then(|fd| fd.child_by_field_id(f.declarator))
            {
                let name = text(name, src);
                out.push((
                    name.rsplit("::").next().unwrap_or(name).trim().to_string(),
                    n,
                ));
            }
            continue;
        }
        if crate::lang::scope_container(kind, false) {
            let mut c = n.walk();
            stack.extend(n.children(&mut c));
        }
    }
    out
}

pub(super) use crate::lang::function_declarator;

/// The type names a file declares anywhere: classes, structs, unions and enums by name,
/// `typedef`s and `using` aliases (in function bodies too: `typedef typename
/// Traits<T>::scalar_t scalar_t;`), and template type parameters (`typename T`). A name in
/// parentheses before an operand is then a cast, not a call (`FileNames::parenthesized_type`).
pub(super) fn file_type_names(root: Node, src: &str) -> BTreeSet<String> {
    let f = crate::lang::fields();
    let mut out = BTreeSet::new();
    crate::lang::visit(root, |n| {
        let named = match n.kind() {
            "class_specifier" | "struct_specifier" | "union_specifier" | "enum_specifier" => {
                n.child_by_field_id(f.name)
            }
            "alias_declaration" => n.child_by_field_id(f.name),
            "type_definition" => {
                let mut c = n.walk();
                let declarators: Vec<Node> = n
                    .children_by_field_name("declarator", &mut c)
                    .filter(|d| d.kind() == "type_identifier")
                    .collect();
                out.extend(declarators.iter().map(|d| text(*d, src).to_string()));
                None
            }
            "type_parameter_declaration"
            | "variadic_type_parameter_declaration"
            | "optional_type_parameter_declaration" => {
                let mut c = n.walk();
                let name = n.children(&mut c).find(|d| d.kind() == "type_identifier");
                name.or_else(|| n.child_by_field_id(f.name))
            }
            _ => None,
        };
        if let Some(name) = named.filter(|d| d.kind() == "type_identifier") {
            out.insert(text(name, src).to_string());
        }
        true
    });
    out
}
