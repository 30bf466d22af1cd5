//! Facts about CUDA and about the tree-sitter-cuda grammar, kept apart from the analysis that
//! uses them. Node kinds are resolved to numeric ids once; a test checks that none is unknown,
//! so a grammar upgrade that renames a kind fails loudly instead of silently matching nothing.

use std::sync::OnceLock;
use tree_sitter::{Language, Node};

pub fn language() -> Language {
    tree_sitter_cuda::LANGUAGE.into()
}

macro_rules! kinds {
    ($($field:ident = $name:literal),* $(,)?) => {
        /// Numeric ids of the named node kinds the analysis looks at.
        #[derive(Debug)]
        pub struct Kinds { $(pub $field: u16,)* }

        impl Kinds {
            fn resolve(lang: &Language) -> Result<Kinds, &'static str> {
                Ok(Kinds { $($field: {
                    let id = lang.id_for_node_kind($name, true);
                    if id == 0 { return Err($name); }
                    id
                },)* })
            }
        }
    };
}

kinds! {
    function_definition = "function_definition",
    declaration = "declaration",
    template_declaration = "template_declaration",
    linkage_specification = "linkage_specification",
    declaration_list = "declaration_list",
    namespace_definition = "namespace_definition",
    function_declarator = "function_declarator",
    variadic_parameter_declaration = "variadic_parameter_declaration",
    optional_parameter_declaration = "optional_parameter_declaration",
    type_parameter_declaration = "type_parameter_declaration",
    optional_type_parameter_declaration = "optional_type_parameter_declaration",
    variadic_type_parameter_declaration = "variadic_type_parameter_declaration",
    template_template_parameter_declaration = "template_template_parameter_declaration",
    template_function = "template_function",
    template_type = "template_type",
    template_method = "template_method",
    qualified_identifier = "qualified_identifier",
    identifier = "identifier",
    field_identifier = "field_identifier",
    type_identifier = "type_identifier",
    compound_statement = "compound_statement",
    return_statement = "return_statement",
    if_statement = "if_statement",
    for_statement = "for_statement",
    for_range_loop = "for_range_loop",
    while_statement = "while_statement",
    do_statement = "do_statement",
    goto_statement = "goto_statement",
    expression_statement = "expression_statement",
    labeled_statement = "labeled_statement",
    switch_statement = "switch_statement",
    conditional_expression = "conditional_expression",
    condition_clause = "condition_clause",
    call_expression = "call_expression",
    argument_list = "argument_list",
    initializer_list = "initializer_list",
    field_expression = "field_expression",
    kernel_call_syntax = "kernel_call_syntax",
    launch_bounds = "launch_bounds",
    lambda_expression = "lambda_expression",
    init_declarator = "init_declarator",
    assignment_expression = "assignment_expression",
    update_expression = "update_expression",
    subscript_expression = "subscript_expression",
    pointer_expression = "pointer_expression",
    gnu_asm_expression = "gnu_asm_expression",
    gnu_asm_output_operand = "gnu_asm_output_operand",
    structured_binding_declarator = "structured_binding_declarator",
    preproc_call = "preproc_call",
    preproc_def = "preproc_def",
    preproc_function_def = "preproc_function_def",
    preproc_arg = "preproc_arg",
    comment = "comment",
    type_qualifier = "type_qualifier",
    attribute_specifier = "attribute_specifier",
    reference_declarator = "reference_declarator",
    field_declaration_list = "field_declaration_list",
    namespace_identifier = "namespace_identifier",
    array_declarator = "array_declarator",
    alias_declaration = "alias_declaration",
    type_definition = "type_definition",
    class_specifier = "class_specifier",
    struct_specifier = "struct_specifier",
}

/// The resolved kinds. Panics only if the compiled-in grammar lacks a kind, which the unit test
/// below catches before any release.
pub fn kinds() -> &'static Kinds {
    static KINDS: OnceLock<Kinds> = OnceLock::new();
    KINDS.get_or_init(|| {
        Kinds::resolve(&language())
            .unwrap_or_else(|k| panic!("tree-sitter-cuda has no node kind `{k}`"))
    })
}

macro_rules! fields {
    ($($field:ident = $name:literal),* $(,)?) => {
        /// Numeric ids of the grammar's field names (looked up once: by name it is a linear
        /// string search on every call).
        #[derive(Debug)]
        pub struct Fields { $(pub $field: u16,)* }

        impl Fields {
            fn resolve(lang: &Language) -> Result<Fields, &'static str> {
                Ok(Fields { $($field: lang.field_id_for_name($name).ok_or($name)?.get(),)* })
            }
        }
    };
}

fields! {
    alternative = "alternative",
    argument = "argument",
    arguments = "arguments",
    body = "body",
    captures = "captures",
    condition = "condition",
    consequence = "consequence",
    declarator = "declarator",
    default_value = "default_value",
    directive = "directive",
    field = "field",
    function = "function",
    initializer = "initializer",
    left = "left",
    name = "name",
    operator = "operator",
    parameters = "parameters",
    right = "right",
    scope = "scope",
    size = "size",
    r#type = "type",
    update = "update",
    value = "value",
}

pub fn fields() -> &'static Fields {
    static FIELDS: OnceLock<Fields> = OnceLock::new();
    FIELDS.get_or_init(|| {
        Fields::resolve(&language())
            .unwrap_or_else(|f| panic!("tree-sitter-cuda has no field `{f}`"))
    })
}

/// Cooperative groups' queries of a thread block or of the grid that read the block index
/// (`tb.group_index()`, `cg::this_grid().block_rank()`).
pub const BLOCK_INDEX_QUERIES: &[&str] = &["group_index", "block_index", "block_rank"];
/// Cooperative groups' queries of the grid's shape in blocks (`cg::this_grid().num_blocks()`).
pub const GRID_SHAPE_QUERIES: &[&str] = &["num_blocks", "dim_blocks"];

/// Built-in variables whose value differs between an original block and a persistent block.
pub const VIRTUAL_BUILTINS: [(&str, &str); 2] = [("blockIdx", "uint3"), ("gridDim", "dim3")];

/// Whether a function-like macro's replacement text is the head of a loop that waits for its
/// statement (`#define KERNEL_LOOP(i, n) for (int i = ...; i < (n); i += ...)`, used as
/// `KERNEL_LOOP(i, n) { ... }`, as grid-stride loops are often spelled). Line continuations
/// count as blanks.
pub fn is_loop_head(replacement: &str) -> bool {
    let t = replacement.replace("\\\n", " ");
    let t = t.trim();
    let head = ["for", "while"].iter().any(|kw| {
        t.strip_prefix(kw)
            .is_some_and(|rest| rest.trim_start().starts_with('('))
    });
    head && t.ends_with(')')
}

/// Built-ins whose value differs between threads of one block.
pub const THREAD_VARYING: &[&str] = &["threadIdx", "__lane_id", "laneId"];

/// Built-ins with one value in every thread of a block.
pub const UNIFORM_BUILTINS: &[&str] = &["blockIdx", "blockDim", "gridDim", "warpSize"];

/// Names that standard and CUDA headers define as constants: the analysis knows their values
/// are the same everywhere without seeing the header.
pub const STANDARD_CONSTANTS: &[&str] = &[
    "NULL",
    "CHAR_BIT",
    "SHRT_MAX",
    "SHRT_MIN",
    "INT_MAX",
    "INT_MIN",
    "UINT_MAX",
    "LONG_MAX",
    "LONG_MIN",
    "ULONG_MAX",
    "LLONG_MAX",
    "LLONG_MIN",
    "ULLONG_MAX",
    "FLT_MAX",
    "FLT_MIN",
    "FLT_EPSILON",
    "DBL_MAX",
    "DBL_MIN",
    "DBL_EPSILON",
    "INFINITY",
    "NAN",
    "M_PI",
    "CUDART_INF_F",
    "CUDART_PI_F",
];

/// Whether a word of a macro's replacement text names no value: a type, a qualifier, a cast, a
/// literal (`VALUELESS_WORDS`, `SCALAR_TYPEDEFS`). `sizeof`/`alignof` are handled apart (what
/// they measure is not read).
pub fn valueless_word(w: &str) -> bool {
    VALUELESS_WORDS.contains(&w) || SCALAR_KEYWORDS.contains(&w) || SCALAR_TYPEDEFS.contains(&w)
}

/// Words that name no value, besides the built-in scalar types and the standard headers'
/// scalar aliases (`valueless_word`).
const VALUELESS_WORDS: &[&str] = &["void", "const", "static_cast", "true", "false", "nullptr"];

/// The attributes of a kernel's head that take arguments and shape its launch: what a head
/// group may choose (`analysis::hidden`), what a macro may stand for (`parse::attribute_macros`),
/// what the scan passes over between a head's words (`analysis::scan`).
pub const KERNEL_ATTRIBUTE_CALLS: &[&str] = &["__launch_bounds__", "__maxnreg__"];

/// Operators whose operand is not evaluated: the result is a constant of the program.
pub const UNEVALUATED_OPERATORS: &[&str] = &["sizeof", "alignof", "__alignof__", "_Alignof"];

/// Block-wide barriers, by the function that performs them, and what kind of barrier each is
/// (a plain barrier, or a block reduction that needs returned threads' neutral vote).
pub const BARRIER_FUNCTIONS: &[(&str, &str)] = &[
    ("__syncthreads", "sync"),
    ("__syncthreads_count", "sync_count"),
    ("__syncthreads_and", "sync_and"),
    ("__syncthreads_or", "sync_or"),
];

/// Intrinsics that synchronize the lanes of a warp named by their mask (the first argument;
/// `__syncwarp`'s is optional and names all 32): each such lane must reach one, and a lane that
/// has exited counts as reached. The original kernel may rely on that (a lane returns, the
/// others shuffle); a persistent block's lane does not exit.
pub const WARP_SYNC_FUNCTIONS: &[&str] = &[
    "__shfl_sync",
    "__shfl_up_sync",
    "__shfl_down_sync",
    "__shfl_xor_sync",
    "__ballot_sync",
    "__any_sync",
    "__all_sync",
    "__uni_sync",
    "__match_any_sync",
    "__match_all_sync",
    "__reduce_add_sync",
    "__reduce_min_sync",
    "__reduce_max_sync",
    "__reduce_and_sync",
    "__reduce_or_sync",
    "__reduce_xor_sync",
    "__syncwarp",
];

/// Members of a cooperative-groups tile (`thread_block_tile`, from `tiled_partition`) that
/// synchronize its lanes, all of them: the tile's mask is fixed.
pub const TILE_SYNC_METHODS: &[&str] = &[
    "shfl",
    "shfl_down",
    "shfl_up",
    "shfl_xor",
    "ballot",
    "any",
    "all",
    "match_any",
    "match_all",
    "sync",
];

/// Cooperative-groups collectives over a group given first (`cg::reduce(tile, v, op)`).
pub const GROUP_COLLECTIVES: &[&str] = &["reduce", "inclusive_scan", "exclusive_scan"];

/// Whether a warp-synchronous intrinsic's mask argument names a fixed set of lanes: a
/// literal (`0xffffffff`, `~0u`, `-1`) or a macro's name (`FULL_MASK`), or no mask
/// (`__syncwarp()`). A mask computed at run time (`__activemask()`, a ballot's result in a
/// variable) names the lanes that are there.
pub fn fixed_warp_mask(mask: Option<Node>, src: &str) -> bool {
    let Some(mask) = mask else {
        return true;
    };
    let mut fixed = true;
    visit(mask, |d| {
        match d.kind() {
            "call_expression" => fixed = false,
            "identifier" => {
                let name = text(d, src);
                fixed &= name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            }
            _ => {}
        }
        fixed
    });
    fixed
}

/// Identifiers whose presence means grid-wide synchronization (refused).
pub const GRID_SYNC: &[&str] = &[
    "this_grid",
    "grid_group",
    "this_multi_grid",
    "multi_grid_group",
];

/// Identifiers of thread-block clusters (refused: clusters pin blocks to hardware placement).
pub const CLUSTER: &[&str] = &[
    "this_cluster",
    "cluster_group",
    "cluster_dims",
    "__cluster_dims__",
];

/// Device-side launch APIs (dynamic parallelism, refused).
pub const DEVICE_LAUNCH: &[&str] = &[
    "cudaLaunchDevice",
    "cudaGetParameterBuffer",
    "cudaGetParameterBufferV2",
    "cudaLaunchKernel",
    "cudaDeviceSynchronize",
];

/// Inline PTX that reads the hardware block's index or its cluster's, waits for its cluster,
/// or ends the thread (refused: the task loop runs many blocks' tasks in one hardware block,
/// which is a cluster of its own, and a thread that ends leaves it).
pub const ASM_HAZARDS: &[&str] = &[
    "%ctaid",
    "%nctaid",
    "%cluster",
    "%nclusterid",
    "%is_explicit_cluster",
    "barrier.cluster",
    "exit",
    "ret;",
];

/// Whether inline PTX `text` holds a block barrier (`bar.sync`, `bar.arrive`, `bar.red`,
/// `barrier.sync.aligned`, `bar.cta.sync`, ...): a barrier like `__syncthreads()` that the
/// predicated form cannot rewrite, so it stands for one only where no thread returns before it.
/// `mbarrier.*` (an object in shared memory that counts arrivals), `membar.*` (a fence) and
/// `bar.warp.sync` (a warp's) are none.
pub fn asm_block_barrier(text: &str) -> bool {
    static BARRIER: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    BARRIER
        .get_or_init(|| {
            regex::Regex::new(r"(?:^|[^A-Za-z0-9_.%$])(?:bar|barrier)\.([a-z]+)")
                .expect("valid regex")
        })
        .captures_iter(text)
        .any(|c| &c[1] != "warp")
}

/// Pure functions whose result is uniform when their arguments are.
pub const UNIFORM_FUNCTIONS: &[&str] = &["min", "max", "dim3", "make_uint3", "make_int3", "abs"];

/// Functions that take every argument by value: passing a variable to them cannot change it.
/// Any other call may bind an argument to a non-const reference and write it.
pub const BY_VALUE_FUNCTIONS: &[&str] = &[
    "__syncthreads_count",
    "__syncthreads_and",
    "__syncthreads_or",
    "__shfl_sync",
    "__shfl_up_sync",
    "__shfl_down_sync",
    "__shfl_xor_sync",
    "__ballot_sync",
    "__any_sync",
    "__all_sync",
    "__popc",
    "__clz",
    "__ffs",
    "__ldg",
    "printf",
];

/// Whether `name` takes every argument by value (`BY_VALUE_FUNCTIONS`), or is one of CUDA's
/// atomic functions (`atomicAdd`, `atomicCAS_block`, `atomicMax_system`...): they take the
/// address and the operands by value and write what the address points at, never the
/// caller's variables. Passing `params.count` to `atomicMax` left `params`, and every load
/// through its other fields, counted as written (FasterTransformer's top-p sampling).
pub fn is_by_value_function(name: &str) -> bool {
    const ATOMICS: &[&str] = &[
        "atomicAdd",
        "atomicSub",
        "atomicExch",
        "atomicMin",
        "atomicMax",
        "atomicInc",
        "atomicDec",
        "atomicCAS",
        "atomicAnd",
        "atomicOr",
        "atomicXor",
    ];
    let base = name
        .strip_suffix("_block")
        .or_else(|| name.strip_suffix("_system"))
        .unwrap_or(name);
    BY_VALUE_FUNCTIONS.contains(&name) || ATOMICS.contains(&base)
}

/// Functions without side effects that read no memory (for what returned threads may evaluate;
/// `is_pure_function`).
const PURE_FUNCTIONS: &[&str] = &[
    "abs",
    "ceilf",
    "dim3",
    "fabsf",
    "floorf",
    "fmaxf",
    "fminf",
    "make_float2",
    "make_float3",
    "make_float4",
    "make_int2",
    "make_int3",
    "make_int4",
    "make_uint2",
    "make_uint3",
    "max",
    "min",
    "rsqrtf",
    "sqrtf",
    // Math and conversion intrinsics: arithmetic on their arguments alone.
    "__bfloat162float",
    "__brev",
    "__byte_perm",
    "__clz",
    "__expf",
    "__fdividef",
    "__float22half2_rn",
    "__float2bfloat16",
    "__float2half",
    "__float2half_rn",
    "__float_as_int",
    "__float_as_uint",
    "__floats2half2_rn",
    "__fmaf_rn",
    "__ffs",
    "__funnelshift_l",
    "__funnelshift_r",
    "__half22float2",
    "__half2float",
    "__halves2half2",
    "__high2float",
    "__high2half",
    "__int_as_float",
    "__logf",
    "__low2float",
    "__low2half",
    "__mul24",
    "__popc",
    "__popcll",
    "__saturatef",
    "__uint_as_float",
    "__umul24",
    "__umulhi",
    "expf",
    "exp2f",
    "fmaf",
    "log2f",
    "logf",
    "powf",
    "tanhf",
    // Their double-precision forms, and the other vector constructors.
    "ceil",
    "exp",
    "exp2",
    "fabs",
    "floor",
    "fma",
    "fmax",
    "fmin",
    "log",
    "log2",
    "pow",
    "rsqrt",
    "sqrt",
    "tanh",
    "make_double2",
    "make_double3",
    "make_double4",
    "make_uint4",
    "make_char4",
    "make_uchar4",
    "make_short2",
    "make_ushort2",
    "make_longlong2",
    // cuComplex.h: complex values built and combined from their arguments alone.
    "make_cuComplex",
    "make_cuDoubleComplex",
    "make_cuFloatComplex",
    "cuCadd",
    "cuCaddf",
    "cuCsub",
    "cuCsubf",
    "cuCmul",
    "cuCmulf",
    "cuCdiv",
    "cuCdivf",
    "cuConj",
    "cuConjf",
    "cuCreal",
    "cuCrealf",
    "cuCimag",
    "cuCimagf",
    "cuCabs",
    "cuCabsf",
];

/// Whether `name` is one of CUDA's built-in vector types (`float4`, `uint3`, `dim3`, ...),
/// whose constructors take their components by value.
pub fn is_vector_type(name: &str) -> bool {
    const SCALARS: &[&str] = &[
        "char",
        "uchar",
        "short",
        "ushort",
        "int",
        "uint",
        "long",
        "ulong",
        "longlong",
        "ulonglong",
        "float",
        "double",
    ];
    name == "dim3"
        || name
            .strip_suffix(['1', '2', '3', '4'])
            .is_some_and(|s| SCALARS.contains(&s))
}

/// Visits `root` and its descendants in pre-order with one cursor (no allocation per node).
/// `f` returns whether to descend into the node it was given.
pub fn visit<'t>(root: Node<'t>, mut f: impl FnMut(Node<'t>) -> bool) {
    let mut c = root.walk();
    loop {
        if f(c.node()) && c.goto_first_child() {
            continue;
        }
        // A cursor made from `root` cannot leave it: goto_parent fails back at `root`.
        while !c.goto_next_sibling() {
            if !c.goto_parent() {
                return;
            }
        }
    }
}

/// Whether the children of a node of this kind stand at its scope, outside any function body:
/// the file, namespaces, linkage blocks, templates, `#if` branches; with `types`, also the
/// insides of type definitions (enums, classes and their members).
pub fn scope_container(kind: &str, types: bool) -> bool {
    matches!(
        kind,
        "translation_unit"
            | "namespace_definition"
            | "declaration_list"
            | "linkage_specification"
            | "template_declaration"
            | "preproc_if"
            | "preproc_ifdef"
            | "preproc_else"
            | "preproc_elif"
            | "preproc_elifdef"
    ) || types
        && matches!(
            kind,
            "type_definition"
                | "enum_specifier"
                | "enumerator_list"
                | "struct_specifier"
                | "class_specifier"
                | "union_specifier"
                | "field_declaration_list"
                | "field_declaration"
        )
}

/// The declarators of a declaration (`int a = 1, *b;` → `a = 1`, `*b`).
pub fn declarators(decl: Node) -> Vec<Node> {
    let id = std::num::NonZeroU16::new(fields().declarator).expect("field ids are non-zero");
    let mut c = decl.walk();
    decl.children_by_field_id(id, &mut c).collect()
}

/// Named children of a parenthesized, comma-separated list that are not comments. Without
/// comments `(a, b)` has 2·named + 1 children, so only an unusual shape needs a walk (`(/**/)`
/// has that shape too, hence the one-child case).
pub fn count_named(list: Node) -> usize {
    let named = list.named_child_count();
    if named == 1 {
        return usize::from(
            list.named_child(0)
                .is_some_and(|x| x.kind_id() != kinds().comment),
        );
    }
    if named == 0 || list.child_count() == 2 * named + 1 {
        return named;
    }
    let mut c = list.walk();
    list.named_children(&mut c)
        .filter(|x| x.kind_id() != kinds().comment)
        .count()
}

/// Whether `n` lies inside a lambda, looking up to (not including) `stop`.
pub fn inside_lambda(n: Node, stop: Node) -> bool {
    inside_kind(n, stop, &[kinds().lambda_expression])
}

/// Whether `n` lies inside a function nested in `stop`: a lambda, or a function defined there
/// (a local class's member function).
pub fn inside_nested_function(n: Node, stop: Node) -> bool {
    let k = kinds();
    inside_kind(n, stop, &[k.lambda_expression, k.function_definition])
}

/// Whether an ancestor of `n` below `stop` has one of the node kinds `of`.
fn inside_kind(n: Node, stop: Node, of: &[u16]) -> bool {
    let mut a = n.parent();
    while let Some(p) = a {
        if p.id() == stop.id() {
            return false;
        }
        if of.contains(&p.kind_id()) {
            return true;
        }
        a = p.parent();
    }
    false
}

/// Whether a declaration is `constexpr` (its values are constant expressions, the same in every
/// thread whatever they call).
pub fn is_constexpr_declaration(d: Node, src: &str) -> bool {
    let mut c = d.walk();
    let found = d.children(&mut c).any(|w| text(w, src) == "constexpr");
    found
}

/// Whether an `if_statement` is an `if constexpr`: its condition is a constant expression, the
/// same in every thread whatever it calls.
pub fn is_if_constexpr(n: Node) -> bool {
    let mut c = n.walk();
    let found = n
        .children(&mut c)
        .any(|x| !x.is_named() && x.kind() == "constexpr");
    found
}

/// The value of an integer literal as written (`32`, `32u`, `64UL`, `0x20`, `0b100000`, `040`,
/// `1'024`), None for anything else (a name, a signed or floating literal, an expression).
pub fn integer_literal(text: &str) -> Option<u64> {
    let digits: String = text.trim().chars().filter(|&c| c != '\'').collect();
    let digits = digits.trim_end_matches(['u', 'U', 'l', 'L']);
    let (body, radix) = if let Some(h) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (h, 16)
    } else if let Some(b) = digits
        .strip_prefix("0b")
        .or_else(|| digits.strip_prefix("0B"))
    {
        (b, 2)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (&digits[1..], 8)
    } else {
        (digits, 10)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(body, radix).ok()
}

/// The first function declarator inside `n`'s declarator (through pointers, references and
/// qualified names): where a function's name and parameter list are (`float* f(int x)`'s
/// declarator is a pointer declarator around it).
pub fn function_declarator(n: Node) -> Option<Node> {
    let k = kinds();
    let mut found = None;
    visit(n.child_by_field_id(fields().declarator)?, |x| {
        if found.is_none() && x.kind_id() == k.function_declarator {
            found = Some(x);
        }
        found.is_none()
    });
    found
}

/// The expression inside any number of parentheses.
pub fn strip_parens(mut n: Node) -> Node {
    while n.kind() == "parenthesized_expression" && n.named_child_count() == 1 {
        match n.named_child(0) {
            Some(x) => n = x,
            None => break,
        }
    }
    n
}

/// Where each line of a text starts, to give a byte's 1-based line in the file as written. Not
/// the tree's rows: the masked view the grammar reads may turn a line break into a `;` (a
/// statement macro's use followed by a closing brace, `parse::statement_macro_separators`),
/// which would move every later row.
pub struct LineStarts(Vec<usize>);

impl LineStarts {
    pub fn new(src: &str) -> LineStarts {
        let breaks = src.bytes().enumerate().filter(|&(_, b)| b == b'\n');
        LineStarts(
            std::iter::once(0)
                .chain(breaks.map(|(i, _)| i + 1))
                .collect(),
        )
    }

    /// The line of byte `at`.
    pub fn line(&self, at: usize) -> usize {
        self.0.partition_point(|&start| start <= at)
    }
}

pub fn text<'a>(node: Node, src: &'a str) -> &'a str {
    &src[node.byte_range()]
}

/// `static_cast<T>`, `const_cast<T>`, `reinterpret_cast<T>` as a call's callee (the grammar
/// reads `static_cast<int>(x)` as a call of a template function): a conversion of its argument,
/// which reads nothing else.
pub fn is_named_cast(callee: Node, src: &str) -> bool {
    callee.kind() == "template_function"
        && callee.child_by_field_id(fields().name).is_some_and(|n| {
            matches!(
                text(n, src),
                "static_cast" | "const_cast" | "reinterpret_cast"
            )
        })
}

/// Whether a call of `name` has no side effect and reads no memory: `PURE_FUNCTIONS`, and the
/// functional casts to the standard integer types (`int64_t(blockIdx.x)`, `SCALAR_TYPEDEFS`),
/// which read as calls; `this_thread_block()` of cooperative groups (`cg::`,
/// `cooperative_groups::` or unqualified), a handle to the block.
pub fn is_pure_function(name: &str) -> bool {
    let group = ["cg::", "cooperative_groups::", "::cooperative_groups::"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    group == "this_thread_block"
        || PURE_FUNCTIONS.contains(&name)
        || SCALAR_TYPEDEFS.contains(&name)
        || SCALAR_KEYWORDS.contains(&name)
}

/// Built-in scalar types, whose functional casts (`unsigned(a + b)`, `int(n)`, `float(x)`) the
/// grammar reads as calls: a conversion reads nothing but its operand and writes nothing.
const SCALAR_KEYWORDS: &[&str] = &[
    "bool", "char", "short", "int", "long", "unsigned", "signed", "float", "double",
];

/// The standard headers' aliases of scalar types (`<stdint.h>`, `<stddef.h>`): not classes.
pub const SCALAR_TYPEDEFS: &[&str] = &[
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "size_t",
    "ptrdiff_t",
    "intptr_t",
    "uintptr_t",
    "ssize_t",
];

/// The class a declared type names, without its template arguments or qualifiers: `Foo` for
/// `Foo`, `Foo<64, 8>` and `ns::Foo<T>`. None for other types (built-in, `auto`, a
/// dependent name).
pub fn class_name_of_type<'a>(ty: Node, src: &'a str) -> Option<&'a str> {
    let k = kinds();
    let mut n = ty;
    loop {
        if n.kind_id() == k.type_identifier {
            return Some(text(n, src));
        }
        if n.kind_id() == k.template_type || n.kind_id() == k.qualified_identifier {
            n = n.child_by_field_id(fields().name)?;
            continue;
        }
        return None;
    }
}

/// The first descendant identifier of a declarator: the declared name.
pub fn declarator_name(node: Node) -> Option<Node> {
    let k = kinds();
    let mut n = node;
    loop {
        if n.kind_id() == k.identifier
            || n.kind_id() == k.field_identifier
            || n.kind_id() == k.type_identifier
            || n.kind() == "operator_name"
            || n.kind() == "destructor_name"
        {
            return Some(n);
        }
        if n.kind_id() == k.qualified_identifier {
            n = n.child_by_field_id(crate::lang::fields().name)?;
            continue;
        }
        n = match n.child_by_field_id(crate::lang::fields().declarator) {
            Some(d) => d,
            None => {
                let mut c = n.walk();
                let next = n.named_children(&mut c).find(|ch| {
                    ch.kind_id() != k.type_qualifier && ch.kind_id() != k.attribute_specifier
                });
                next?
            }
        };
    }
}

/// Splits a list at its top-level commas (not those inside `<>`, `()`, `[]` or `{}`; the `>` of
/// `->` closes nothing): template arguments, a launch configuration, the arguments a macro
/// stands for. Items are trimmed; an empty tail is dropped.
pub fn split_top_level(s: &str) -> Vec<String> {
    let (mut out, mut depth, mut cur) = (Vec::new(), 0i32, String::new());
    for c in s.chars() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' if cur.ends_with('-') => {}
            '>' | ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The CUDA qualifier of kernel parameters kept in parameter space (`__grid_constant__`).
pub const GRID_CONSTANT: &str = "__grid_constant__";

/// Whether `c` may stand in an identifier (ASCII: letters, digits, `_`).
pub fn is_identifier_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier that `text` starts with, if any: its leading identifier characters, unless
/// there are none or they start with a digit (a number).
pub fn leading_identifier(text: &str) -> Option<&str> {
    let end = text
        .find(|c: char| !is_identifier_char(c))
        .unwrap_or(text.len());
    let word = &text[..end];
    (!word.is_empty() && !word.starts_with(|c: char| c.is_ascii_digit())).then_some(word)
}

/// The identifier-like words of `text` in order (also numbers and the words inside string
/// literals: a cheap split on every character that no identifier holds).
pub fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_identifier_char(c))
        .filter(|w| !w.is_empty())
}

/// Where `word` stands as a word of its own in `text` (byte offsets): not inside a longer
/// identifier.
pub fn word_indices<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    text.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        !text[..i].ends_with(is_identifier_char)
            && !text[i + word.len()..].starts_with(is_identifier_char)
    })
}

/// Each line of `code` (comments blanked: `without_comments`) with whether it belongs to a
/// preprocessor directive, which goes on past a line that ends with a backslash.
pub fn lines_in_directives(code: &str) -> impl Iterator<Item = (&str, bool)> {
    directive_lines(code).map(|(line, part)| (line, part != DirectiveLine::Outside))
}

/// Where a line stands towards the preprocessor's directives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DirectiveLine {
    Outside,
    /// A directive's first line (`#if ...`).
    First,
    /// A line that the one before continued with a backslash (a `#x` there stringizes).
    Continued,
}

/// Each line of `code` (comments blanked) and its place in a directive: the state machine that
/// `lines_in_directives` and `unbalanced_conditional` share.
fn directive_lines(code: &str) -> impl Iterator<Item = (&str, DirectiveLine)> {
    let mut continues = false;
    code.lines().map(move |line| {
        let part = if continues {
            DirectiveLine::Continued
        } else if line.trim_start().starts_with('#') {
            DirectiveLine::First
        } else {
            DirectiveLine::Outside
        };
        continues = part != DirectiveLine::Outside && line.trim_end().ends_with('\\');
        (line, part)
    })
}

/// The first conditional directive of `text` that its own lines leave unmatched, as the byte
/// offset of its line's first character that is not a space: an `#else`, `#elif` or `#endif`
/// whose `#if` comes before `text`, or an `#if`, `#ifdef` or `#ifndef` whose `#endif` comes
/// after it. None where every conditional that `text` opens it also closes. Text that the
/// rewrite copies must be balanced: a copy of half a conditional pairs with the other half's
/// original, or with nothing.
pub fn unbalanced_conditional(text: &str) -> Option<usize> {
    // Comments blanked (a directive may follow one), which keeps every line break: line `i` of
    // `code` is line `i` of `text`.
    let code = without_comments(text);
    let starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_at = |i: usize| {
        let start = starts.get(i).copied().unwrap_or(text.len());
        let line = &text[start..];
        start + (line.len() - line.trim_start_matches([' ', '\t']).len())
    };
    let mut open: Vec<usize> = Vec::new();
    let firsts = directive_lines(&code)
        .enumerate()
        .filter(|(_, (_, part))| *part == DirectiveLine::First);
    for (i, (line, _)) in firsts {
        let word: String = line.trim_start()[1..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        match word.as_str() {
            "if" | "ifdef" | "ifndef" => open.push(i),
            "else" | "elif" | "elifdef" | "elifndef" if open.is_empty() => return Some(line_at(i)),
            "endif" if open.pop().is_none() => return Some(line_at(i)),
            _ => {}
        }
    }
    open.first().map(|&i| line_at(i))
}

/// `src` with its comments blanked (a comment becomes one space; a block comment keeps its
/// newlines), string and character literals read as such so that a `//` or `/*` inside one
/// starts no comment. A `'` after a letter or digit is a digit separator (`1'000`) or a
/// prefix's (`u8'a'` is rare enough to read as one), not a literal's start. For scans of a
/// text's words that comments must not feed.
pub fn without_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        let separator = c == '\'' && out.ends_with(|p: char| p.is_ascii_alphanumeric());
        match c {
            _ if separator => out.push(c),
            '/' if chars.peek() == Some(&'/') => {
                while let Some(&n) = chars.peek() {
                    if n == '\n' {
                        break;
                    }
                    chars.next();
                }
                out.push(' ');
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                    }
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
                out.push(' ');
            }
            '"' | '\'' => {
                out.push(c);
                while let Some(n) = chars.next() {
                    out.push(n);
                    if n == '\\' {
                        if let Some(e) = chars.next() {
                            out.push(e);
                        }
                    } else if n == c || n == '\n' {
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Whether `word` stands as a word (not inside an identifier) anywhere in `text`.
pub fn has_word(text: &str, word: &str) -> bool {
    word_indices(text, word).next().is_some()
}

/// Where `__grid_constant__`, or one of `macros` that stand for it, first stands as a word in
/// `text`: byte offset and length.
pub fn grid_constant_at(text: &str, macros: &[String]) -> Option<(usize, usize)> {
    std::iter::once(GRID_CONSTANT)
        .chain(macros.iter().map(String::as_str))
        .filter_map(|w| word_indices(text, w).next().map(|at| (at, w.len())))
        .min()
}

/// `text` with `__grid_constant__` or one of `macros` (and the blanks after it) taken out.
pub fn without_grid_constant(text: &str, macros: &[String]) -> String {
    match grid_constant_at(text, macros) {
        Some((i, len)) => {
            let rest = &text[i + len..];
            format!("{}{}", &text[..i], rest.trim_start())
        }
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_text_must_close_the_conditionals_it_opens() {
        fn at(t: &str) -> Option<&str> {
            let i = unbalanced_conditional(t)?;
            Some(&t[i..t[i..].find('\n').map_or(t.len(), |e| i + e)])
        }
        // Balanced, nested, with a comment before a directive and one that hides a directive.
        assert_eq!(
            at("int f() {\n#ifdef A\n  a();\n#elif B\n#if C\n#endif\n#else\n#endif\n}"),
            None
        );
        assert_eq!(at("/* c */ #if A\nx\n#endif\n// #endif\n/* #else */"), None);
        // A continuation line that starts with `#` stringizes: no directive.
        assert_eq!(at("#define S(x) \\\n  #x\n#if A\n#endif\n"), None);
        // A function head chosen by `#ifdef FOO` ... `#else`: the copy from the `#else` branch on.
        assert_eq!(
            at("void load(int *a) {\n  #endif\n  __syncthreads();\n}"),
            Some("#endif")
        );
        assert_eq!(at("x\n#else\ny\n#endif"), Some("#else"));
        assert_eq!(at("x\n#ifdef A\ny\n#if B\n#endif\n"), Some("#ifdef A"));
    }

    #[test]
    fn a_text_leads_with_an_identifier_not_a_number() {
        let leading: Vec<Option<&str>> = ["foo(x)", "_a1 (", "a::b", "9lives", "", "(x)", " x"]
            .into_iter()
            .map(leading_identifier)
            .collect();
        assert_eq!(
            leading,
            [Some("foo"), Some("_a1"), Some("a"), None, None, None, None]
        );
    }

    #[test]
    fn lists_split_at_their_top_level_commas() {
        assert_eq!(
            split_top_level("a, f(b, c), T<d, e>{g, h}, p->n, q[1, 2], "),
            ["a", "f(b, c)", "T<d, e>{g, h}", "p->n", "q[1, 2]"]
        );
    }

    #[test]
    fn integer_literals_in_every_spelling() {
        let values: Vec<Option<u64>> = [
            "32", "32u", "64UL", "7ull", "0x20", "0X1fU", "0b100000", "040", "0", "1'024", " 8 ",
            "x", "32.0", "-32", "0x", "08", "1e3", "32 + 1", "",
        ]
        .into_iter()
        .map(integer_literal)
        .collect();
        assert_eq!(
            values,
            [
                Some(32),
                Some(32),
                Some(64),
                Some(7),
                Some(32),
                Some(31),
                Some(32),
                Some(32),
                Some(0),
                Some(1024),
                Some(8),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None
            ]
        );
    }

    #[test]
    fn line_starts_count_lines_in_the_text() {
        let lines = LineStarts::new("a\nbc\n\nd");
        let at = |b: usize| lines.line(b);
        assert_eq!(
            [at(0), at(1), at(2), at(4), at(5), at(6), at(7)],
            [1, 1, 2, 2, 3, 4, 4]
        );
    }

    #[test]
    fn block_barriers_in_ptx_are_told_from_fences_and_object_barriers() {
        for barrier in [
            r#"asm volatile("bar.sync 0;");"#,
            r#"asm volatile("bar.sync 1, 64;" ::: "memory");"#,
            r#"asm volatile("barrier.sync.aligned %0, %1;" :: "r"(id), "r"(n));"#,
            r#"asm("@p bar.arrive 2, 128;");"#,
            r#"asm("{
	bar.cta.red.popc.u32 %0, 0, %1;
}" : "=r"(c) : "r"(p));"#,
        ] {
            assert!(asm_block_barrier(barrier), "{barrier}");
        }
        for other in [
            r#"asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(a), "r"(n));"#,
            r#"asm volatile("mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;");"#,
            r#"asm volatile("membar.sys;");"#,
            r#"asm volatile("bar.warp.sync %0;" :: "r"(mask));"#,
            r#"asm volatile("fence.proxy.async.shared::cta;");"#,
            r#"asm("mov.u32 %0, %%foobar.x;" : "=r"(v));"#,
        ] {
            assert!(!asm_block_barrier(other), "{other}");
        }
        // A cluster's barrier and registers are hazards (CP006), not barriers of the block.
        for cluster in [
            r#"asm volatile("barrier.cluster.arrive.aligned;");"#,
            r#"asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));"#,
        ] {
            assert!(ASM_HAZARDS.iter().any(|h| cluster.contains(h)), "{cluster}");
        }
    }

    #[test]
    fn comments_are_blanked_and_literals_and_digit_separators_kept() {
        assert_eq!(without_comments("a // b\nc"), "a  \nc");
        assert_eq!(without_comments("a /* b\n c */ d"), "a \n  d");
        assert_eq!(without_comments("s = \"// no\"; t"), "s = \"// no\"; t");
        assert_eq!(without_comments("c = '/'; // x"), "c = '/';  ");
        // A digit separator opens no literal that would hide the comment after it.
        assert_eq!(
            without_comments("n = 1'000; // __global__\n"),
            "n = 1'000;  \n"
        );
    }

    #[test]
    fn every_node_kind_is_known_to_the_grammar() {
        Kinds::resolve(&language()).expect("unknown node kind");
        Fields::resolve(&language()).expect("unknown field name");
    }

    #[test]
    fn visit_sees_every_node_once_in_order() {
        let src = "int f() { return 1 + 2; }";
        let tree = crate::parse::parse(src).tree;
        let mut seen = Vec::new();
        visit(tree.root_node(), |n| {
            seen.push(n.kind());
            true
        });
        let mut expected = Vec::new();
        let mut stack = vec![tree.root_node()];
        while let Some(n) = stack.pop() {
            expected.push(n.kind());
            let mut c = n.walk();
            let children: Vec<_> = n.children(&mut c).collect();
            stack.extend(children.into_iter().rev());
        }
        assert_eq!(seen, expected);
        let mut top = 0;
        visit(tree.root_node(), |_| {
            top += 1;
            false
        });
        assert_eq!(top, 1);
    }

    #[test]
    fn argument_counts_ignore_comments() {
        let src = "void f() { g(); g(1); g(1, h(2, 3)); g(/* none */); g(1 /* one */, 2); }";
        let tree = crate::parse::parse(src).tree;
        let mut counts = Vec::new();
        visit(tree.root_node(), |n| {
            if n.kind() == "argument_list"
                && n.parent()
                    .is_some_and(|p| text(p.child(0).unwrap(), src) == "g")
            {
                counts.push(count_named(n));
            }
            true
        });
        assert_eq!(counts, vec![0, 1, 2, 0, 2]);
    }

    #[test]
    fn anonymous_cuda_keywords_exist() {
        let lang = language();
        for kw in [
            "__global__",
            "__device__",
            "__host__",
            "__shared__",
            "__launch_bounds__",
        ] {
            assert_ne!(lang.id_for_node_kind(kw, false), 0, "{kw}");
        }
    }

    #[test]
    fn grid_constant_is_found_as_a_word_and_taken_out() {
        assert_eq!(
            grid_constant_at("const __grid_constant__ T p", &[]),
            Some((6, 17))
        );
        assert_eq!(grid_constant_at("my__grid_constant__ p", &[]), None);
        assert_eq!(grid_constant_at("__grid_constant__x p", &[]), None);
        let m = ["GC".to_string()];
        assert_eq!(grid_constant_at("Args GC const a", &m), Some((5, 2)));
        assert_eq!(grid_constant_at("GCx a", &m), None);
        assert_eq!(
            without_grid_constant("GC typename Op::P const p", &m),
            "typename Op::P const p"
        );
        assert_eq!(
            without_grid_constant("__grid_constant__ const CUtensorMap map", &[]),
            "const CUtensorMap map"
        );
        assert_eq!(
            without_grid_constant("const __grid_constant__  int n", &[]),
            "const int n"
        );
        assert_eq!(without_grid_constant("const int n", &[]), "const int n");
    }
}
