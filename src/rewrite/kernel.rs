//! A kernel K becomes, in place:
//!
//! ```text
//! template <class CupreemptCtx, ...>                      // the original definition, edited:
//! __device__ __forceinline__ void K__cupreempt_body(CupreemptCtx& __cp, params) { body }
//! __global__ void K(params) { ... body with NativeCtx }   // the original symbol
//! __global__ void K__cupreempt(cupreempt_launch, params)  // the persistent wrapper
//! __global__ void __launch_bounds__(1024, CUPREEMPT_R32_MIN_BLOCKS)  // the same, held to 32 registers
//!     K__cupreempt_r32(cupreempt_launch, params)
//! struct K__cupreempt_kernels { original, wrapper, wrapper_r32 };  // what launch sites name
//! ```
//!
//! Why two wrappers: ptxas gives the wrapper a few registers more than the original (the task
//! loop's state, index arithmetic hoisted out of the loop), and above 32 registers a full SM
//! holds fewer threads. Which one keeps the original's occupancy is known only once both are
//! compiled, so launch.cuh picks at the first launch (`pick_wrapper`). `__launch_bounds__(1024,
//! 2)` means 32 registers for any block size (2048 threads per SM), and unlike `__maxnreg__`
//! our grammar knows it. A kernel with its own `__launch_bounds__(T, M)` keeps them in the plain
//! wrapper, and the capped one raises them to `(T, CUPREEMPT_R32_BLOCKS_OF((T), (M)))`
//! (`capped_specifiers`; where `FunctionSite::raisable_bounds` allows).
//!
//! The body stays where it was, so the user's formatting and line numbers inside it survive;
//! only its header changes and generated code follows it.

use super::function_name::FunctionNames;
use super::{context_calls, context_params, prologue};
use crate::analysis::{names_inserted, FunctionSite, KernelPlan, Param, SyncMode, TemplateParam};
use crate::edit::Edit;
use crate::vocab::{
    any_registration_name, body_name, capped_wrapper_name, dynamic_wrapper_name,
    kernels_struct_name, selector_name, wrapper_name, BODY_CONST_PARAM, BODY_PARAM, CTX, CTX_TYPE,
    FUNCTION_PARAM, IN_DYNAMIC_SHARED, LAUNCH_PARAM, LAUNCH_TYPE, MEMBER_LOOP_STATE_DYNAMIC,
    MEMBER_ORIGINAL, MEMBER_WRAPPER, MEMBER_WRAPPER_R32, NATIVE_CTX, R32_BLOCKS_OF, R32_MIN_BLOCKS,
    RUN_TASKS, TASK_CTX, TASK_PARAM, TRIVIAL_PARAMS,
};
use std::collections::BTreeSet;
use tree_sitter::Node;

/// Holds a kernel to 32 registers whatever its block size (65536 registers / 2048 threads),
/// where an SM holds 2048 threads (`R32_MIN_BLOCKS`, task_loop.cuh).
fn cap_32_registers() -> String {
    format!("__launch_bounds__(1024, {R32_MIN_BLOCKS}) ")
}
pub fn kernels_struct(plan: &KernelPlan) -> String {
    kernels_struct_name(&plan.site.name, plan.overloaded.then_some(plan.ordinal))
}

/// Launch sites need the deducing form: templates and overloads.
pub fn needs_selector(plan: &KernelPlan) -> bool {
    plan.site.is_template() || plan.overloaded
}

pub fn rewrite(
    plan: &KernelPlan,
    src: &str,
    ctx_helpers: &BTreeSet<&str>,
    call_defaults: &std::collections::BTreeMap<&str, &[Option<String>]>,
    compact: bool,
    edits: &mut Vec<Edit>,
) {
    let nl = if compact { " " } else { "\n" };
    let k = &plan.site;
    // Where the generated kernels' heads begin: at a conditional group that chooses the
    // attributes from above the head (`hidden::HeadBranches`).
    let head_at = plan.head_branches.as_ref().map_or(k.head, |h| h.from);
    // 0. A kernel defined out of its namespace: the namespace reopened around the body and
    // everything generated after it (first and last of the edits at those offsets).
    if let Some(q) = &k.qualified {
        let open: String = q
            .namespaces
            .iter()
            .map(|n| format!("namespace {n} {{ "))
            .collect();
        if !open.is_empty() {
            edits.push(Edit::insert(
                k.outer.start_byte().min(k.head),
                // On one line (compact) a line comment would swallow what follows it.
                if compact {
                    format!("{open} /* cupreempt: `{}` out of its namespace */ ", k.name)
                } else {
                    format!("{open} // cupreempt: `{}` out of its namespace\n", k.name)
                },
            ));
        }
    }
    // The body becomes a template, which needs C++ linkage: inside an `extern "C" {` block of
    // this file, or of a file that includes this one (which the analysis cannot see), so
    // always for a kernel that is not a template already (a template kernel is C++ wherever
    // it compiles).
    let wrap_cpp = k.template.is_none();

    // 1. The header becomes the shared body's.
    match k.template {
        Some(t) => {
            let list = t
                .child_by_field_id(crate::lang::fields().parameters)
                .expect("template has parameters");
            // An explicit specialization's `template <>`: its body is a template of the
            // context alone.
            let sep = if list.named_child_count() == 0 {
                ""
            } else {
                ", "
            };
            edits.push(Edit::insert(
                list.start_byte() + 1,
                format!("class {CTX_TYPE}{sep}"),
            ));
            // Parameters written without a name get one: the generated kernels pass them on.
            edits.extend(k.template_name_edits());
        }
        None => {
            let mut head = String::new();
            if wrap_cpp {
                head.push_str(if compact {
                    "extern \"C++\" { "
                } else {
                    "extern \"C++\" {  // cupreempt: templates need C++ linkage\n"
                });
            }
            head.push_str(&format!("template <class {CTX_TYPE}>{nl}"));
            if let Some(l) = k.linkage.filter(|l| !l.braced) {
                // `extern "C"` moves to the generated kernels; the body is a C++ template.
                edits.push(Edit::delete(l.node.start_byte()..k.head));
            }
            edits.push(Edit::insert(k.head, head));
        }
    }
    if let Some(g) = &k.global_kw {
        edits.push(Edit::replace(g.clone(), k.global_replacement.clone()));
    }
    // Kernel attributes, which a `__device__` function may not carry.
    for r in k
        .launch_bounds
        .iter()
        .map(|lb| lb.byte_range())
        .chain(k.head_attributes.iter().cloned())
    {
        edits.push(Edit::delete(r.start..attribute_end(src, r.end)));
    }
    // The head's conditional groups: the body keeps the branch the grammar read.
    if let Some(h) = &plan.head_branches {
        head_group_edits(src, h, edits);
    }
    // A specialization's body is a function of its own (`k<float>` becomes `k__cupreempt_body_s1`).
    let written = match &k.specialized_args {
        Some(args) => k.written_name().start..args.end,
        None => k.written_name(),
    };
    edits.push(Edit::replace(written, plan_body_name(plan)));
    // A parameter of a named type passed by value: the body takes it as `body_param_t<T>`, by
    // reference where `T` has a destructor to run, and a `const` one always by reference
    // (task_loop.cuh).
    for v in k.param_list.iter().filter_map(|p| p.value_type.as_ref()) {
        let alias = match &v.constant {
            Some(q) => {
                edits.push(Edit::delete(q.start..attribute_end(src, q.end)));
                BODY_CONST_PARAM
            }
            None => BODY_PARAM,
        };
        edits.push(Edit::replace(
            v.range.clone(),
            format!("{alias}<{}>", v.text),
        ));
    }
    for g in k.param_list.iter().filter_map(|p| p.grid_constant.as_ref()) {
        edits.push(Edit::delete(g.qualifier.clone()));
        if let Some(at) = g.name_start {
            edits.push(Edit::insert(at, "&".to_string()));
        }
    }
    // `__func__`, `__PRETTY_FUNCTION__` and `assert` name the original kernel, not the body.
    let names = FunctionNames::of(k.body, src);
    let named = names.as_ref().is_some_and(FunctionNames::takes_parameter);
    let function_decl = format!("const char* {FUNCTION_PARAM}");
    context_params(k, src, named.then_some(function_decl.as_str()), edits);
    if let Some(n) = &names {
        n.rewrite(&k.name, k.body.start_byte() + 1, edits);
    }

    // 2. Inside the body: the task's blockIdx/gridDim, context-taking helpers, barriers.
    prologue(&plan.facts, k.body, src, true, ctx_helpers, edits);
    context_calls(&plan.facts, ctx_helpers, call_defaults, edits);
    super::block_index_calls(&plan.facts, edits);
    if let Some(p) = &plan.predication {
        super::predicate::rewrite(p, k.body, src, edits);
    }

    // 3. After the body: the original symbol, the wrapper, what launch sites name.
    let mut out = String::from("\n");
    if let Some(n) = &names {
        out.push_str(&n.after_body());
    }
    if wrap_cpp {
        out.push_str("}  // extern \"C++\"\n");
    }
    let mut h = Header::of(k, src);
    if head_at < k.head {
        // The groups that choose the attributes, from their first `#if` line (after a
        // template's head, which then ends there).
        h.specifiers = src[head_at..k.written_name().start].to_string();
        if let Some(t) = k.template {
            h.template = names_inserted(src, t.start_byte()..head_at, &k.template_params);
            h.template_alone = h.template.clone();
        }
    }
    out.push('\n');
    out.push_str(&forwarder(plan, &h, named));
    out.push('\n');
    let definitions = |dynamic: bool| {
        let mut definitions = String::new();
        for (i, cap) in wrapper_kinds(plan).enumerate() {
            if i > 0 {
                definitions.push('\n');
            }
            let w = wrapper(plan, &h, cap, named, dynamic);
            definitions.push_str(&if cap { where_capped(&k.name, &w) } else { w });
        }
        definitions
    };
    // In the unit's own object even where the compiler launcher splits it: a wrapper module's
    // wrappers are found by name, by launches that know nothing of the state's bytes.
    let dynamic_definitions = || {
        only_if(
            &not_in_wrapper_module(&plan.assumed_undefined),
            &definitions(true),
        )
    };
    if plan.loop_state_per_instance.is_some() {
        // Both forms: each instance's launch types name one, and only that one is instantiated.
        out.push_str(&unless_split(
            &plan.assumed_undefined,
            &definitions(false),
            "",
        ));
        out.push('\n');
        out.push_str(&dynamic_definitions());
    } else if plan.loop_state_dynamic {
        out.push_str(&dynamic_definitions());
    } else {
        out.push_str(&unless_split(
            &plan.assumed_undefined,
            &definitions(false),
            "",
        ));
    }
    if let Some(first) = plan
        .prior_declarations
        .first()
        .filter(|_| !k.specialization)
    {
        // Launch sites between the declaration and here need the wrappers and the struct early.
        let decl = Header::of(first, src);
        let mut early = String::from("\n");
        early.push_str(&wrapper_declarations(plan, &decl));
        early.push_str(&launch_types(plan, &decl));
        edits.push(Edit::insert(first.outer.end_byte(), early));
    } else if !k.specialization {
        // A specialization launches through its template's launch types.
        out.push_str(&launch_types(plan, &h));
    }
    if let Some(decl) = &plan.family_declaration {
        // A template only declared here: its wrappers' templates and its launch types are
        // declared after it, for its specializations to specialize and its launches to name.
        edits.push(Edit::insert(
            decl.outer.end_byte(),
            declared_family(plan, decl, src),
        ));
    }
    edits.push(Edit::insert(k.outer.end_byte(), trim_last_newline(out)));
    if k.is_template() && !k.specialization {
        explicit_instantiations(plan, src, edits);
        macro_instantiations(plan, src, edits);
    }
    if let Some(q) = k.qualified.as_ref().filter(|q| !q.namespaces.is_empty()) {
        let close = "}".repeat(q.namespaces.len());
        edits.push(Edit::insert(
            k.outer.end_byte(),
            format!(
                // A block comment: code may follow the kernel on its last line.
                "\n{close}  /* cupreempt: namespace {} */",
                q.namespaces.join("::")
            ),
        ));
    }
}

/// After each explicit instantiation of the kernel template in the file (`template __global__
/// void k<float, 0>(float* a, int n);`, as libraries instantiate the kernels that other files
/// declare and launch): the same instantiations of its wrappers, so that this unit defines
/// them for the other units' launches (their weak declarations, `rewrite::declared`), which
/// would otherwise run the original. Only an instantiation in the kernel's own namespace, and
/// not one inside a macro's body (the grammar does not read it).
fn explicit_instantiations(plan: &KernelPlan, src: &str, edits: &mut Vec<Edit>) {
    let k = &plan.site;
    // Other units never launch wrappers that keep the loop's state in dynamic shared memory
    // (their declarations name the usual wrappers, `vocab::dynamic_wrapper_name`).
    if plan.loop_state_dynamic {
        return;
    }
    let kinds = crate::lang::kinds();
    let fields = crate::lang::fields();
    // Stepping through every declaration beside each kernel template cost 2.3% of a transform
    // of a file without any instantiation (docs/benchmarks.md): first a look at the text.
    if !has_explicit_instantiation_text(src) {
        return;
    }
    let Some(parent) = k.outer.parent() else {
        return;
    };
    let mut cursor = parent.walk();
    for inst in parent.named_children(&mut cursor) {
        if inst.kind() != "template_instantiation" {
            continue;
        }
        let Some(declarator) = inst.child_by_field_id(fields.declarator) else {
            continue;
        };
        if declarator.kind_id() != kinds.function_declarator {
            continue;
        }
        let (Some(callee), Some(params)) = (
            declarator.child_by_field_id(fields.declarator),
            declarator.child_by_field_id(fields.parameters),
        ) else {
            continue;
        };
        let Some(name) = callee.child_by_field_id(fields.name) else {
            continue;
        };
        if callee.kind() != "template_function" || src[name.byte_range()] != k.name {
            continue;
        }
        let open = params.start_byte() + 1;
        let launch = launch_parameter(params.named_child_count() == 0);
        let instance = |wrapper: &str| {
            format!(
                "{}{wrapper}{}{launch}{}\n",
                &src[inst.start_byte()..name.start_byte()],
                &src[name.end_byte()..open],
                &src[open..inst.end_byte()],
            )
        };
        let mut text = instance(&wrapper_name(&k.name));
        if plan.capped_wrapper {
            text.push_str(&where_capped(
                &k.name,
                &instance(&capped_wrapper_name(&k.name)),
            ));
        }
        edits.push(Edit::insert(
            inst.end_byte(),
            format!(
                "\n// cupreempt: the wrappers of this instance, for launches in other units.\n{}",
                trim_last_newline(unless_split(&plan.assumed_undefined, &text, ""))
            ),
        ));
    }
}

/// Whether `src` has the word `template` followed by a name rather than `<` (comments and
/// strings included): every explicit instantiation (`template __global__ void
/// k<float>(float*);`, `extern template ...`) does.
fn has_explicit_instantiation_text(src: &str) -> bool {
    crate::lang::word_indices(src, "template").any(|at| {
        let next = src[at + "template".len()..].trim_start().bytes().next();
        next.is_some_and(|c| c == b'_' || c.is_ascii_alphabetic())
    })
}

/// Explicit instantiations of the kernel template written in a macro's replacement (`#define
/// MAKE_K(T) template __global__ void k<T, 4>(T* a, int n);`, used once per type, as a
/// quantization library instantiates its optimizer kernels): the same instantiations of its
/// wrappers follow each one inside the replacement, so that every use defines them for the
/// launches in other units. A replacement cannot hold the conditionals that keep the wrappers
/// out of a split unit and the capped one out where it is not built (`unless_split`,
/// `where_capped`), so each goes through a macro defined before the `#define` under those
/// conditions (`vocab::instances_macro`): its arguments where the wrapper exists, nothing
/// elsewhere. Only where every use of the macro comes after the kernel's definition (the
/// wrappers are declared there), and the instantiation names the kernel alone (not through a
/// namespace).
fn macro_instantiations(plan: &KernelPlan, src: &str, edits: &mut Vec<Edit>) {
    let k = &plan.site;
    if plan.loop_state_dynamic {
        return; // as explicit_instantiations
    }
    if !src.contains("#define") || !src.contains(k.name.as_str()) {
        return;
    }
    // Compiled for the first replacement that could hold one: compiling it for every kernel
    // of a file with `#define`s cost 1.5% of a transform (docs/benchmarks.md).
    let mut instantiation: Option<regex::Regex> = None;
    let b = src.as_bytes();
    let defs = crate::parse::defines(src);
    let kernel_end = k.outer.end_byte();
    let mut first_define = None;
    for d in &defs {
        if !d.body.contains("template") || !d.body.contains(k.name.as_str()) {
            continue;
        }
        let instantiation = instantiation.get_or_insert_with(|| {
            regex::Regex::new(&format!(
                r"\btemplate\b([^;{{}}<>()]*?)\b({})\s*<",
                regex::escape(&k.name)
            ))
            .expect("valid regex")
        });
        let body_at = d.body.as_ptr() as usize - src.as_ptr() as usize;
        let define_at = src[..body_at].rfind('#').unwrap_or(body_at);
        let uses_after = crate::lang::word_indices(src, d.name)
            .filter(|&at| at > body_at + d.body.len())
            .all(|at| at > kernel_end);
        if !uses_after {
            continue;
        }
        for c in instantiation.captures_iter(d.body) {
            let (Some(all), Some(prefix), Some(name)) = (c.get(0), c.get(1), c.get(2)) else {
                continue;
            };
            if !prefix.as_str().split_whitespace().any(|w| w == "void")
                || d.body[..all.start()].trim_end().ends_with("extern")
            {
                continue;
            }
            let name_at = body_at + name.start();
            let angle = body_at + all.end() - 1;
            let Some(close) = closing_angle(b, angle) else {
                continue;
            };
            let Some(open) =
                (close + 1..b.len()).find(|&i| !b[i].is_ascii_whitespace() && b[i] != b'\\')
            else {
                continue;
            };
            if b[open] != b'(' {
                continue;
            }
            let Some(params_end) = crate::parse::closing_paren(b, open) else {
                continue;
            };
            let Some(semi) =
                (params_end + 1..b.len()).find(|&i| !b[i].is_ascii_whitespace() && b[i] != b'\\')
            else {
                continue;
            };
            if b[semi] != b';' || semi > body_at + d.body.len() {
                continue;
            }
            let inst_at = body_at + all.start();
            let launch = launch_parameter(src[open + 1..params_end].trim().is_empty());
            let instance = |wrapper: &str| {
                format!(
                    "{}{wrapper}{}{launch}{}",
                    &src[inst_at..name_at],
                    &src[name_at + k.name.len()..open + 1],
                    &src[open + 1..semi + 1],
                )
            };
            let mut text = format!(
                " {}({})",
                crate::vocab::instances_macro(&k.name, false),
                instance(&wrapper_name(&k.name))
            );
            if plan.capped_wrapper {
                text.push_str(&format!(
                    " {}({})",
                    crate::vocab::instances_macro(&k.name, true),
                    instance(&capped_wrapper_name(&k.name))
                ));
            }
            edits.push(Edit::insert(semi + 1, text));
            first_define.get_or_insert(define_at);
        }
    }
    let Some(at) = first_define else {
        return;
    };
    let on = |capped: bool| {
        format!(
            "#define {}(...) __VA_ARGS__\n",
            crate::vocab::instances_macro(&k.name, capped)
        )
    };
    let off = |capped: bool| {
        format!(
            "#define {}(...)\n",
            crate::vocab::instances_macro(&k.name, capped)
        )
    };
    let mut guards = String::from(
        "// cupreempt: the wrappers' instances that the macro below writes after each of this\n// kernel's, where the wrappers are built here.\n",
    );
    guards.push_str(&unless_split(
        &plan.assumed_undefined,
        &on(false),
        &off(false),
    ));
    if plan.capped_wrapper {
        guards.push_str(&by_capped(
            &k.name,
            &off(true),
            &unless_split(&plan.assumed_undefined, &on(true), &off(true)),
        ));
    }
    edits.push(Edit::insert(at, guards));
}

/// The wrapper's first parameter as an instantiation writes it in front of the kernel's
/// (`cupreempt_launch __cp_launch, `), without the comma where the kernel has none.
fn launch_parameter(no_params: bool) -> String {
    if no_params {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}")
    } else {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}, ")
    }
}

/// The index of the `>` that closes the `<` at `open` (nested angles and parentheses counted).
fn closing_angle(b: &[u8], open: usize) -> Option<usize> {
    let mut angles = 0usize;
    let mut parens = 0usize;
    for (i, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'(' => parens += 1,
            b')' => parens = parens.checked_sub(1)?,
            b'<' if parens == 0 => angles += 1,
            b'>' if parens == 0 => {
                angles -= 1;
                if angles == 0 {
                    return Some(i);
                }
            }
            b';' | b'{' | b'}' => return None,
            _ => {}
        }
    }
    None
}

/// Where the deletion of a kernel attribute ending at `end` ends: past the blanks after it, but
/// not past a line end that a directive follows (`__launch_bounds__(64, 1)` before `#else`).
fn attribute_end(src: &str, end: usize) -> usize {
    let rest = &src[end..];
    let blanks = rest.len() - rest.trim_start().len();
    match rest[..blanks].find('\n') {
        Some(nl) if rest[blanks..].starts_with('#') => end + nl,
        _ => end + blanks,
    }
}

/// The shared body's head without the conditional groups of `h`: their directive lines and
/// the branches the grammar did not read are emptied (their line ends stay, so the lines keep
/// their numbers); the branch it read is the head the body's rewrite already edits.
fn head_group_edits(src: &str, h: &crate::analysis::HeadBranches, edits: &mut Vec<Edit>) {
    for g in &h.groups {
        let mut at = g.start;
        while at < g.end {
            let end = src[at..g.end].find('\n').map_or(g.end, |i| at + i);
            let line = &src[at..end];
            let hidden = h.hidden.iter().any(|r| r.start <= at && end <= r.end);
            if !line.trim().is_empty() && (hidden || line.trim_start().starts_with('#')) {
                edits.push(Edit::delete(at..end));
            }
            at = end + 1;
        }
    }
}

/// The shared body's name: the kernel's, or for an explicit specialization one of its own.
fn plan_body_name(plan: &KernelPlan) -> String {
    match plan.specialization_ordinal {
        0 => body_name(&plan.site.name),
        n => format!("{}_s{n}", body_name(&plan.site.name)),
    }
}

fn trim_last_newline(mut s: String) -> String {
    if s.ends_with('\n') {
        s.pop();
    }
    s
}

/// The pieces of a kernel's header that generated functions copy.
struct Header {
    /// `template <typename T, int N = 4>\n` or empty: up to the specifiers, with whatever is
    /// written between (what the generated kernels' heads copy).
    template: String,
    /// The same for a copy that stands alone (the selector's declaration): without the text
    /// after the parameter list where that text opens or closes a conditional (`template_end`).
    template_alone: String,
    /// The same for a class template (the launch types' struct): C++ allows a function
    /// template's default arguments before parameters without one, a class template's only at
    /// the end (or before packs), so those defaults are left out (a launch names every
    /// argument up to the last without a default anyway).
    class_template: String,
    /// The same without any default argument: the head of a partial specialization of the
    /// launch types (`LaunchTypes::per_instance`).
    specialization_template: String,
    /// `extern "C" ` for an unbraced linkage specification, or empty.
    linkage: String,
    /// `static __global__ void __launch_bounds__(256) ` (all before the name).
    specifiers: String,
    /// The same with the kernel's own `__launch_bounds__(T, M)` raised to 32 registers, for the
    /// capped wrapper (`capped_specifiers`), where it has such bounds.
    capped_specifiers: Option<String>,
    name: String,
    /// An explicit specialization's template arguments, `<float>` (or empty): what the
    /// generated kernels' names take, as explicit specializations of the template's.
    targs: String,
    /// Parameter declarations, all named.
    params: String,
}

impl Header {
    fn of(k: &FunctionSite, src: &str) -> Header {
        let end = template_end(k, src);
        // A head cut before a directive line ends its own line.
        let alone = |text: String| {
            if end < k.head {
                format!("{text}\n")
            } else {
                text
            }
        };
        let class_header = |every: bool| {
            k.template
                .map(|t| {
                    alone(class_template_header(
                        t,
                        end,
                        src,
                        &k.template_params,
                        every,
                    ))
                })
                .unwrap_or_default()
        };
        Header {
            template: k.template_text(src),
            template_alone: k
                .template
                .map(|t| alone(names_inserted(src, t.start_byte()..end, &k.template_params)))
                .unwrap_or_default(),
            class_template: class_header(false),
            specialization_template: class_header(true),
            linkage: k
                .linkage
                .filter(|l| !l.braced)
                .map(|l| src[l.node.start_byte()..k.head].to_string())
                .unwrap_or_default(),
            // Up to the name's qualifier: the generated kernels are in its namespace.
            specifiers: src[k.head..k.written_name().start].to_string(),
            capped_specifiers: capped_specifiers(k, src),
            name: k.name.clone(),
            targs: k
                .specialized_args
                .clone()
                .map(|r| src[r].to_string())
                .unwrap_or_default(),
            params: k.named_params(),
        }
    }

    /// Everything before the function's name.
    fn prefix(&self) -> String {
        format!("{}{}{}", self.template, self.linkage, self.specifiers)
    }

    /// Everything before a wrapper's name: for the capped one, its register cap (the kernel's
    /// own bounds raised, or added where it has none).
    fn wrapper_prefix(&self, cap: bool) -> String {
        match (&self.capped_specifiers, cap) {
            (Some(raised), true) => format!("{}{}{raised}", self.template, self.linkage),
            (None, true) => format!("{}{}", self.prefix(), cap_32_registers()),
            (_, false) => self.prefix(),
        }
    }
}

/// The specifiers before `k`'s name with its own `__launch_bounds__(T)` or `(T, M)` made
/// `__launch_bounds__(T, CUPREEMPT_R32_BLOCKS_OF((T), (M)))`: the same block size, and as many
/// blocks per SM as make 32 registers (`FunctionSite::raisable_bounds` says where).
fn capped_specifiers(k: &FunctionSite, src: &str) -> Option<String> {
    let (bounds, args) = k.raisable_bounds(src)?;
    let threads = crate::lang::text(args[0], src);
    let min_blocks = args.get(1).map_or("1", |m| crate::lang::text(*m, src));
    Some(format!(
        "{}__launch_bounds__({threads}, {R32_BLOCKS_OF}(({threads}), ({min_blocks}))){}",
        &src[k.head..bounds.start_byte()],
        &src[bounds.end_byte()..k.written_name().start]
    ))
}

/// Where a copy of `k`'s template head that stands alone ends: at the specifiers (`k.head`),
/// or right after the parameter list (or the requires clause after it) where the text between
/// opens or closes a conditional, as in `template <int N>` `#if X` `__launch_bounds__(N)`
/// `#endif` `__global__ void k()`. The copy must be balanced; the group stays with the
/// specifiers, which only the generated kernels' heads copy, together with the whole head.
fn template_end(k: &FunctionSite, src: &str) -> usize {
    match k.template_head_end() {
        Some(e) if crate::lang::unbalanced_conditional(&src[e..k.head]).is_some() => e,
        _ => k.head,
    }
}

/// `template <bool B = false, int N>` → `template <bool B, int N>`: the text from the template
/// declaration `t` to `end` (`template_end`), without the default arguments that parameters
/// without one follow (`every`: without any).
fn class_template_header(
    t: Node,
    end: usize,
    src: &str,
    names: &[TemplateParam],
    every: bool,
) -> String {
    let start = t.start_byte();
    let copy = |range: std::ops::Range<usize>| names_inserted(src, range, names);
    let Some(list) = t.child_by_field_id(crate::lang::fields().parameters) else {
        return copy(start..end);
    };
    let mut c = list.walk();
    let params: Vec<Node> = list.named_children(&mut c).collect();
    let optional = |n: &Node| n.kind().starts_with("optional_");
    let variadic = |n: &Node| n.kind().starts_with("variadic_");
    let Some(last_required) = (if every {
        Some(params.len())
    } else {
        params
            .iter()
            .rposition(|n| !optional(n) && !variadic(n) && n.kind() != "comment")
    }) else {
        return copy(start..end);
    };
    let mut out = String::new();
    let mut at = start;
    for p in params[..last_required].iter().filter(|p| optional(p)) {
        let mut pc = p.walk();
        let Some(eq) = p.children(&mut pc).find(|x| x.kind() == "=") else {
            continue;
        };
        let cut = src[at..eq.start_byte()].trim_end().len() + at;
        out.push_str(&copy(at..cut));
        at = p.end_byte();
    }
    out.push_str(&copy(at..end));
    out
}

/// The launch types' class template head with one parameter more, last, whose default says
/// whether the instance's static shared memory (`bytes`) leaves the loop's state no room.
fn instance_choice_header(class_template: &str, bytes: &str) -> String {
    let head = class_template.trim_end();
    let close = head.rfind('>').unwrap_or(head.len());
    format!(
        "{}, bool = ({bytes} + CUPREEMPT_LOOP_SHARED_BYTES > {} * 1024)>\n",
        &head[..close],
        crate::vocab::STATIC_SHARED_LIMIT / 1024,
    )
}

fn wrapper_params(params: &str) -> String {
    if params.is_empty() {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}")
    } else {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}, {params}")
    }
}

/// The call of the shared body; `function`: the argument for its function-name parameter
/// (`FunctionNames`), where it has one. `per_task`: in the persistent wrapper, where each task
/// gets its own bitwise copy of a by-value parameter of a named type that has a destructor to
/// run (`TASK_PARAM`), as each original block got the launch's. Where every such type is
/// trivially destructible (known only once the templates are instantiated) the call passes the
/// parameters themselves: a kernel parameter passed through a function, even an inlined one
/// that returns it, gives the wrappers other machine code. A plain `if` on a constant, not `if
/// constexpr`: both calls compile for every type, the optimizer drops the other, and programs
/// built as C++11 or C++14 compile it too.
fn body_call(plan: &KernelPlan, ctx_type: &str, function: Option<&str>, per_task: bool) -> String {
    let k = &plan.site;
    let targs = if k.is_template() && !k.specialization {
        format!("{ctx_type}, {}", k.template_args())
    } else {
        ctx_type.to_string()
    };
    let call = |wrap: bool| {
        let args = k.join_params(|p| match &p.value_type {
            Some(_) if wrap => format!("{TASK_PARAM}({})", p.name),
            _ => p.forward(),
        });
        let sep = if args.is_empty() { "" } else { ", " };
        let function = function.map(|f| format!(", {f}")).unwrap_or_default();
        format!(
            "{}<{targs}>({CTX}{function}{sep}{args});",
            plan_body_name(plan)
        )
    };
    let types: Vec<&str> = k
        .param_list
        .iter()
        .filter_map(|p| p.value_type.as_ref().map(|v| v.text.as_str()))
        .collect();
    if !per_task || types.is_empty() {
        return call(false);
    }
    format!(
        "if ({TRIVIAL_PARAMS}<{}>::value) {{\n      {}\n    }} else {{\n      {}\n    }}",
        types.join(", "),
        call(false),
        call(true)
    )
}

/// `named`: the body takes the running kernel's pretty name, which here is the original's own.
/// In a split unit's wrapper module (`vocab::WRAPPER_MODULE`) the symbol has no body: only the
/// object's module runs it.
fn forwarder(plan: &KernelPlan, h: &Header, named: bool) -> String {
    format!(
        "// cupreempt: `{name}` keeps its symbol and runs the shared body on the hardware's blockIdx/gridDim.\n\
         {prefix}{name}{targs}({params}) {{\n#if !defined({module})\n  {native} {CTX};\n  {call}\n#endif\n}}\n",
        module = crate::vocab::WRAPPER_MODULE,
        native = NATIVE_CTX,
        name = h.name,
        targs = h.targs,
        prefix = h.prefix(),
        params = h.params,
        call = body_call(plan, NATIVE_CTX, named.then_some("__PRETTY_FUNCTION__"), false),
    )
}

/// `text` (whole lines) where the preprocessor condition `cond` holds.
fn only_if(cond: &str, text: &str) -> String {
    format!("#if {cond}\n{text}#endif\n")
}

/// `then` (whole lines) where `cond` holds, `otherwise` elsewhere.
fn choose(cond: &str, then: &str, otherwise: &str) -> String {
    format!("#if {cond}\n{then}#else\n{otherwise}#endif\n")
}

/// `whole` (the wrappers' definitions, the launch types' wrapper members) in a unit compiled
/// whole, `split` (nothing, null members) in the object of a unit whose wrappers the compiler
/// launcher compiled into a module of their own (`vocab::SPLIT_UNIT`).
fn unless_split(assumed_undefined: &[String], whole: &str, split: &str) -> String {
    let cond = format!(
        "!defined({}){}",
        crate::vocab::SPLIT_UNIT,
        undefined_too(assumed_undefined)
    );
    if split.is_empty() {
        only_if(&cond, whole)
    } else {
        choose(&cond, whole, split)
    }
}

/// Device code is not relocatable: with `-rdc`, functions the body calls through the ABI
/// (virtual destructors, functions of other files) keep their own register counts, and ptxas
/// refuses a kernel capped at 32 that calls one needing more (the CUDA samples' newdelete did
/// not build).
const NOT_RDC: &str = "!defined(__CUDACC_RDC__)";

/// `text` (the wrapper held to 32 registers, or its declaration) only where device code is not
/// relocatable (`NOT_RDC`).
pub(crate) fn without_rdc(text: &str) -> String {
    only_if(NOT_RDC, text)
}

/// `in_rdc` in relocatable-device-code builds, `otherwise` elsewhere: the launch type names
/// the plain wrapper where `without_rdc` left the capped one out.
pub(crate) fn by_rdc(in_rdc: &str, otherwise: &str) -> String {
    choose(NOT_RDC, otherwise, in_rdc)
}

fn capped_condition(kernel: &str) -> String {
    format!(
        "{NOT_RDC} && (!defined({}) || defined({}))",
        crate::vocab::CAPPED_CHOSEN,
        crate::vocab::capped_macro(kernel)
    )
}

/// `text` (the capped wrapper, or its declaration) where `kernel` gets one: not with `-rdc`,
/// and not where the launcher chose against it (`vocab::CAPPED_CHOSEN`).
pub(crate) fn where_capped(kernel: &str, text: &str) -> String {
    only_if(&capped_condition(kernel), text)
}

/// `otherwise` where `where_capped` keeps `kernel`'s capped wrapper, `absent` where not.
pub(crate) fn by_capped(kernel: &str, absent: &str, otherwise: &str) -> String {
    choose(&capped_condition(kernel), otherwise, absent)
}

/// The wrappers a kernel gets: the plain one (false), then the one held to 32 registers
/// (true) where the analysis says so (`KernelPlan::capped_wrapper`).
fn wrapper_kinds(plan: &KernelPlan) -> impl Iterator<Item = bool> {
    let capped = plan.capped_wrapper;
    [false, true].into_iter().filter(move |&cap| !cap || capped)
}

/// A wrapper's name; `dynamic`: the loop keeps its state in dynamic shared memory
/// (`KernelPlan::loop_state_dynamic`).
fn wrapper_head(kernel: &str, cap: bool, dynamic: bool) -> String {
    if dynamic {
        dynamic_wrapper_name(kernel, cap)
    } else if cap {
        capped_wrapper_name(kernel)
    } else {
        wrapper_name(kernel)
    }
}

/// Where wrappers that keep the loop's state in dynamic shared memory are defined: everywhere
/// but a split unit's wrapper module (`vocab::WRAPPER_MODULE`).
fn not_in_wrapper_module(assumed_undefined: &[String]) -> String {
    format!(
        "!defined({}){}",
        crate::vocab::WRAPPER_MODULE,
        undefined_too(assumed_undefined)
    )
}

/// ` && !defined(X)` for each macro the kernel was judged as if undefined (`KernelPlan::
/// assumed_undefined`): where one is defined, the kernel has no wrappers, and its launches run
/// it as written (launch.cuh), as the analysis did not judge that form.
fn undefined_too(assumed_undefined: &[String]) -> String {
    assumed_undefined
        .iter()
        .map(|m| format!(" && !defined({m})"))
        .collect()
}

/// `named`: the body takes the running kernel's pretty name (the wrapper's own; a lambda's
/// would name the lambda). `dynamic`: the form that keeps the loop's state in dynamic shared
/// memory.
fn wrapper(plan: &KernelPlan, h: &Header, cap: bool, named: bool, dynamic: bool) -> String {
    let predicated = plan.mode == Some(SyncMode::Predicated);
    let wrapper = wrapper_head(&h.name, cap, dynamic);
    let comment = if cap {
        format!("// cupreempt: the same, held to 32 registers (launch.cuh picks it where that keeps `{}`'s occupancy).\n", h.name)
    } else {
        format!(
            "// cupreempt: persistent, preemptible form of `{}`{}.\n",
            h.name,
            if predicated {
                " (predicated: returned threads skip work but pass barriers)"
            } else {
                ""
            }
        )
    };
    format!(
        "{comment}\
         {prefix}{wrapper}{targs}({params}) {{\n  using {CTX_TYPE} = {TASK_CTX};\n  {function}\
         {RUN_TASKS}<{CTX_TYPE}, /*task_barrier=*/{barrier}{state}>({LAUNCH_PARAM}, /*chunk=*/{chunk}, /*budget_ns=*/{budget}, [&]({CTX_TYPE}& {CTX}) {{\n    \
         {call}\n  }});\n}}\n",
        prefix = h.wrapper_prefix(cap),
        targs = h.targs,
        params = wrapper_params(&h.params),
        chunk = plan.chunk,
        budget = plan.budget_ns,
        barrier = plan.may_use_shared,
        state = if dynamic {
            format!(", /*loop_state=*/{IN_DYNAMIC_SHARED}")
        } else {
            String::new()
        },
        call = body_call(plan, CTX_TYPE, named.then_some(FUNCTION_PARAM), true),
        function = if named {
            format!("const char* const {FUNCTION_PARAM} = __PRETTY_FUNCTION__;\n  ")
        } else {
            String::new()
        },
    )
}

/// Declarations of the wrappers `plan` gets, with the header `h` (of the kernel or of an earlier
/// declaration of it), the capped one where it is compiled.
fn wrapper_declarations(plan: &KernelPlan, h: &Header) -> String {
    let mut out = String::new();
    for cap in wrapper_kinds(plan) {
        let name = wrapper_head(&h.name, cap, plan.loop_state_dynamic);
        let line = format!(
            "{}{name}({});\n",
            h.wrapper_prefix(cap),
            wrapper_params(&h.params)
        );
        out.push_str(&if cap {
            where_capped(&h.name, &line)
        } else {
            line
        });
    }
    out
}

/// After a kernel template's declaration (no definition in the file: every instance is an
/// explicit specialization): the wrapper templates' declarations and the launch types.
fn declared_family(plan: &KernelPlan, decl: &FunctionSite, src: &str) -> String {
    let h = Header::of(decl, src);
    let mut out = format!(
        "\n// cupreempt: the persistent forms of `{}`, defined by its explicit specializations below.\n",
        h.name
    );
    out.push_str(&wrapper_declarations(plan, &h));
    let types = LaunchTypes {
        site: decl,
        name: kernels_struct(plan),
        overloaded: false,
        capped: plan.capped_wrapper,
        selector: true,
        dynamic: plan.loop_state_dynamic,
        per_instance: None,
        function_namesake: plan.function_namesake,
        assumed_undefined: &plan.assumed_undefined,
    };
    out.push_str(&types.text(&h));
    trim_last_newline(out)
}

/// `K__cupreempt_kernels` (and `K__cupreempt_select` for templates and overloads).
fn launch_types(plan: &KernelPlan, h: &Header) -> String {
    let types = LaunchTypes {
        site: &plan.site,
        name: kernels_struct(plan),
        overloaded: plan.overloaded,
        capped: plan.capped_wrapper,
        selector: needs_selector(plan),
        dynamic: plan.loop_state_dynamic,
        per_instance: plan.loop_state_per_instance.as_deref(),
        function_namesake: plan.function_namesake,
        assumed_undefined: &plan.assumed_undefined,
    };
    types.text(h)
}

/// What a kernel's launch types are made from: the kernel (or the template declaration that
/// stands for a family of explicit specializations), the struct's name, and its wrappers.
struct LaunchTypes<'a, 't> {
    site: &'a FunctionSite<'t>,
    name: String,
    overloaded: bool,
    capped: bool,
    selector: bool,
    /// The wrappers keep the loop's state in dynamic shared memory (`KernelPlan::
    /// loop_state_dynamic`).
    dynamic: bool,
    /// Each instance chooses (`KernelPlan::loop_state_per_instance`): the bytes' expression.
    per_instance: Option<&'a str>,
    /// The original is named by its type (`KernelPlan::function_namesake`).
    function_namesake: bool,
    /// `KernelPlan::assumed_undefined`.
    assumed_undefined: &'a [String],
}

impl LaunchTypes<'_, '_> {
    /// `K__cupreempt_kernels` (and the selector where launches deduce).
    fn text(&self, h: &Header) -> String {
        let k = self.site;
        let s = &self.name;
        let targs = if k.is_template() {
            format!("<{}>", k.template_args())
        } else {
            String::new()
        };
        // The members' declarators: function pointer types for overloads (they pick the overload),
        // `auto` otherwise; the original's always where it is no template, since a header may
        // declare other kernels of its name that this file does not show.
        let types = k.join_params(|p| strip_default(&p.plain_declaration()));
        let member = |name: &str, params: &str, typed: bool| {
            if typed {
                format!("void (*{name})({params})")
            } else {
                format!("auto {name}")
            }
        };
        let orig_ty = member(
            MEMBER_ORIGINAL,
            &types,
            self.overloaded || !k.is_template() || self.function_namesake,
        );
        let wrap_ty = member(MEMBER_WRAPPER, &wrapper_params(&types), self.overloaded);
        let capped_ty = member(MEMBER_WRAPPER_R32, &wrapper_params(&types), self.overloaded);
        let amp = if self.overloaded { "" } else { "&" };
        let wrapper_members = |dynamic: bool| {
            let capped_wrapper = wrapper_head(&k.name, self.capped, dynamic);
            let wrapper = wrapper_head(&k.name, false, dynamic);
            let capped_line =
                |target: &str| format!("  static constexpr {capped_ty} = {amp}{target}{targs};\n");
            let capped_member = if self.capped {
                // No capped wrapper in relocatable-device-code builds, nor where the launcher
                // found that no launch would choose it (`where_capped`).
                by_capped(
                    &k.name,
                    &capped_line(&wrapper),
                    &capped_line(&capped_wrapper),
                )
            } else {
                capped_line(&capped_wrapper)
            };
            // Split units: null wrappers of the wrappers' types, spelled from the parameters,
            // not from the wrappers (naming a kernel template's instance that the unit does not
            // define draws nvcc's warning 20280); launch.cuh then asks the runtime.
            let null_member = |member: &str, params: &str| {
                format!("  static constexpr void (*{member})({params}) = nullptr;\n")
            };
            let wrapper_types = wrapper_params(&types);
            let whole =
                format!("  static constexpr {wrap_ty} = {amp}{wrapper}{targs};\n{capped_member}");
            let null = format!(
                "{}{}",
                null_member(MEMBER_WRAPPER, &wrapper_types),
                null_member(MEMBER_WRAPPER_R32, &wrapper_types)
            );
            if dynamic {
                // The wrappers are defined in a split unit's object too (`rewrite`), and the
                // launches add the state's bytes (launch.cuh, `loop_shared_bytes`).
                format!(
                    "  static constexpr bool {MEMBER_LOOP_STATE_DYNAMIC} = true;\n{}",
                    choose(
                        &not_in_wrapper_module(self.assumed_undefined),
                        &whole,
                        &null
                    )
                )
            } else {
                unless_split(self.assumed_undefined, &whole, &null)
            }
        };
        let original = format!("  static constexpr {orig_ty} = {amp}{}{targs};\n", k.name);
        let mut out = match self.per_instance {
            None => format!(
                "{}struct {s} {{\n{original}{}}};\n",
                h.class_template,
                wrapper_members(self.dynamic)
            ),
            Some(bytes) => format!(
                "// cupreempt: each instance's static shared memory (the last parameter's default) says \
                 whether the loop's state still fits beside it under the 48 KB a block may \
                 declare statically, or goes to dynamic shared memory.\n\
                 {}struct {s} {{\n{original}{}}};\n{}struct {s}<{}, true> {{\n{original}{}}};\n",
                instance_choice_header(&h.class_template, bytes),
                wrapper_members(false),
                h.specialization_template,
                k.template_args(),
                wrapper_members(true),
            ),
        };
        if !k.is_template() {
            // Launches that know the kernel only by its pointer (a macro's launch of the
            // kernel its use names, `launch_any`) find its wrappers through this. Each unit
            // that includes the definition registers it (idempotent); not an inline variable,
            // which is C++17 and warned of in older dialects.
            out.push_str(&format!(
                "static __attribute__((unused)) const bool {} = ::cupreempt::detail::register_any<{s}>();\n",
                any_registration_name(s)
            ));
        }
        if self.selector {
            out.push_str(&format!(
            "{template}{s}{targs} {sel}({params});  // cupreempt: picks the kernels for a launch's arguments\n",
            template = h.template_alone,
            sel = selector_name(&k.name),
            // A host declaration: no `__grid_constant__`.
            params = k.join_params(Param::plain_declaration),
        ));
        }
        if internal_linkage(k, h) {
            // A `static` kernel's launch types are this unit's alone: with external linkage,
            // two files' `static` kernels of one name would give launch.cuh's templates one
            // instance each that the linker merges, and one file's launches would run the other
            // file's kernel. Members of an unnamed namespace's class that nothing names draw
            // nvcc's warning 177 where the file does not launch the kernel, and neither
            // `[[maybe_unused]]` nor `__attribute__((unused))` on a member quiets it.
            out = format!(
                "#pragma nv_diagnostic push\n#pragma nv_diag_suppress 177\n\
                 namespace {{  // cupreempt: `{}` is static, so are its launch types\n{out}}}\n\
                 #pragma nv_diagnostic pop\n",
                k.name
            );
        }
        out
    }
}

/// A `static` kernel at namespace scope (a `static` member function has external linkage).
fn internal_linkage(k: &FunctionSite, h: &Header) -> bool {
    !k.member
        && crate::lang::word_indices(&h.specifiers, "static")
            .next()
            .is_some()
}

/// The template parts of kernel template `d`, declared here and defined in another file, for
/// its weak wrapper declarations and launch types (`rewrite::declared`).
pub(crate) fn declared_template(d: &FunctionSite, src: &str) -> crate::program::DeclaredTemplate {
    let h = Header::of(d, src);
    crate::program::DeclaredTemplate {
        head: h.template,
        head_alone: h.template_alone,
        class_head: h.class_template,
        args: d.template_args(),
    }
}

/// `int n = 4` → `int n` (function types cannot carry default arguments).
pub(crate) fn strip_default(decl: &str) -> String {
    match default_at(decl) {
        Some(i) => decl[..i].trim_end().to_string(),
        None => decl.to_string(),
    }
}

/// A parameter declaration's default argument (`4` of `int n = 4`), trimmed.
pub(crate) fn default_of(decl: &str) -> Option<&str> {
    default_at(decl).map(|i| decl[i + 1..].trim())
}

/// Where a parameter declaration's default argument begins: its `=` outside brackets.
fn default_at(decl: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, ch) in decl.char_indices() {
        match ch {
            '(' | '[' | '<' | '{' => depth += 1,
            ')' | ']' | '>' | '}' => depth -= 1,
            '=' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::strip_default;

    #[test]
    fn defaults_are_stripped_from_parameter_types() {
        assert_eq!(strip_default("int n = 4"), "int n");
        assert_eq!(
            strip_default("const float* __restrict__ x"),
            "const float* __restrict__ x"
        );
        assert_eq!(strip_default("Foo<(1 == 2)> f = {}"), "Foo<(1 == 2)> f");
    }
}
