//! Launches of kernels that are only declared where the launch can see them: in this file or
//! in a file it includes (the definition is in another translation unit, whose transformed
//! form has the wrappers). The wrappers are declared here weak, so that the program links
//! whether or not that unit was transformed (or its kernel was refused there); where a wrapper
//! is missing its address is null, and the launch shim runs the original kernel
//! (`launch.cuh`).

use crate::analysis::{Analysis, FunctionSite};
use crate::edit::Edit;
use crate::program::{Declaration, KnownKernel};
use crate::vocab::{
    capped_wrapper_name, kernels_struct_name, selector_name, wrapper_name, LAUNCH_PARAM,
    LAUNCH_TYPE, MEMBER_ORIGINAL, MEMBER_WRAPPER, MEMBER_WRAPPER_R32, WEAK,
};
use tree_sitter::Node;

/// The weak wrapper declarations and the launch type of kernel `name`, inside a guard: one
/// translation unit may hold them twice (a header that launches the kernel and the file that
/// includes it and launches it too), and the launch type may be defined only once.
fn weak_block(name: &str, d: &Declaration, whence: &str) -> String {
    let guard = format!(
        "CUPREEMPT_WRAPPERS_{}{}",
        d.scope.iter().map(|s| format!("{s}_")).collect::<String>(),
        kernels_struct_name(name, None)
    );
    format!(
        "#ifndef {guard}\n#define {guard}\n{}\n#endif",
        weak_declarations(name, d, whence)
    )
}

fn weak_declarations(name: &str, d: &Declaration, whence: &str) -> String {
    if let Some(t) = &d.template {
        return weak_template_declarations(name, d, t, whence);
    }
    let params = if d.params.is_empty() {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}")
    } else {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}, {}", d.params.join(", "))
    };
    let (wrapper, capped) = (wrapper_name(name), capped_wrapper_name(name));
    let specifiers = &d.specifiers;
    let member =
        |target: &str| format!("  static constexpr auto {MEMBER_WRAPPER_R32} = &{target};\n");
    format!(
        "// cupreempt: `{name}` is {whence}; its wrappers, where the file defining it was transformed (else the launch runs `{name}`).\n\
         {specifiers}{WEAK} {wrapper}({params});\n\
         {capped_decl}\
         struct {s} {{\n  static constexpr auto {MEMBER_ORIGINAL} = &{name};\n  static constexpr auto {MEMBER_WRAPPER} = &{wrapper};\n{capped_member}}};",
        s = kernels_struct_name(name, None),
        capped_decl = super::kernel::without_rdc(&format!("{specifiers}{WEAK} {capped}({params});\n")),
        capped_member = super::kernel::by_rdc(&member(&wrapper), &member(&capped)),
    )
}

/// A kernel template's (`template <class T> __global__ void k(T* p, int n);`, defined and
/// explicitly instantiated in another file): its wrapper templates declared weak, the launch
/// types as a class template, and the selector that deduced launches name. An instance the
/// defining unit did not instantiate transformed (`kernel::explicit_instantiations`) has null
/// wrappers, and its launch runs the original.
fn weak_template_declarations(
    name: &str,
    d: &Declaration,
    t: &crate::program::DeclaredTemplate,
    whence: &str,
) -> String {
    let params = if d.params.is_empty() {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}")
    } else {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}, {}", d.params.join(", "))
    };
    let (wrapper, capped) = (wrapper_name(name), capped_wrapper_name(name));
    let (head, specifiers, args) = (&t.head, &d.specifiers, &t.args);
    let s = kernels_struct_name(name, None);
    let member = |target: &str| {
        format!("  static constexpr auto {MEMBER_WRAPPER_R32} = &{target}<{args}>;\n")
    };
    // nvcc warns (20280) of a kernel template instance without a definition in the unit
    // where `-static-global-template-stub` is on (CUDA 13's default without `-rdc`), as it
    // does of the original's launches: a program whose units launch each other's kernel
    // templates is built with it off, and the warning of the wrappers' declarations would
    // only repeat the original's.
    format!(
        "// cupreempt: `{name}` is {whence}; its wrappers, where the file defining it instantiated them transformed (else the launch runs `{name}`).\n\
         #pragma nv_diagnostic push\n#pragma nv_diag_suppress 20280\n\
         {head}{specifiers}{WEAK} {wrapper}({params});\n\
         {capped_decl}\
         {class_head}struct {s} {{\n  static constexpr auto {MEMBER_ORIGINAL} = &{name}<{args}>;\n  static constexpr auto {MEMBER_WRAPPER} = &{wrapper}<{args}>;\n{capped_member}}};\n\
         {head_alone}{s}<{args}> {selector}({plain});  // cupreempt: picks the kernels for a launch's arguments\n\
         #pragma nv_diagnostic pop",
        class_head = t.class_head,
        head_alone = t.head_alone,
        capped_decl = super::kernel::without_rdc(&format!("{head}{specifiers}{WEAK} {capped}({params});\n")),
        capped_member = super::kernel::by_rdc(&member(&wrapper), &member(&capped)),
        selector = selector_name(name),
        plain = d.params.join(", "),
    )
}

/// Right after a declaration in this file.
pub fn rewrite(d: &FunctionSite, src: &str, edits: &mut Vec<Edit>) {
    let Some(decl) = KnownKernel::declared(d, src).declaration else {
        return;
    };
    let text = weak_block(&d.name, &decl, "defined in another file");
    edits.push(Edit::insert(d.outer.end_byte(), format!("\n{text}")));
}

/// The one declaration of `name` that included files give, if they agree.
pub fn included<'k>(known: &'k [KnownKernel], name: &str) -> Option<&'k Declaration> {
    let mut decls = known
        .iter()
        .filter(|k| k.name == name)
        .map(|k| k.declaration.as_ref());
    let first = decls.next()??;
    decls.all(|d| d == Some(first)).then_some(first)
}

/// Kernels that included files only declare, launched here and known here by nothing else:
/// their blocks go before the first top-level construct that launches them, in their
/// namespaces. Returns whether any was written.
pub fn rewrite_included(a: &Analysis, known: &[KnownKernel], edits: &mut Vec<Edit>) -> bool {
    let mut done: Vec<&str> = Vec::new();
    for l in a.launches.iter().filter(|l| !l.in_device_code) {
        let name = l.name.as_str();
        if done.contains(&name)
            || a.kernels.iter().any(|k| k.site.name == name)
            || a.declared_kernels.iter().any(|d| d.name == name)
            || known
                .iter()
                .any(|k| k.name == name && k.declaration.is_none())
        {
            continue;
        }
        let Some(decl) = included(known, name) else {
            continue;
        };
        let mut text = String::new();
        for s in &decl.scope {
            text.push_str(&format!("namespace {s} {{\n"));
        }
        text.push_str(&weak_block(name, decl, "declared in an included file"));
        text.push('\n');
        for _ in &decl.scope {
            text.push_str("}\n");
        }
        edits.push(Edit::insert(top_level(l.call).start_byte(), text));
        done.push(name);
    }
    !done.is_empty()
}

/// The construct at file level that holds `n`.
fn top_level(mut n: Node) -> Node {
    while let Some(p) = n.parent() {
        if p.parent().is_none() {
            return n; // `p` is the translation unit
        }
        n = p;
    }
    n
}
