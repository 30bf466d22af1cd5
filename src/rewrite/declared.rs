//! Launches of kernels that this file only declares: their definition is in another
//! translation unit, whose transformed form has the wrappers. The wrappers are declared here
//! weak, so that the program links whether or not that unit was transformed (or its kernel was
//! refused there); where a wrapper is missing its address is null, and the launch shim runs
//! the original kernel (`launch.cuh`).

use super::kernel::strip_default;
use crate::analysis::FunctionSite;
use crate::edit::Edit;
use crate::program::KnownKernel;
use crate::vocab::{
    capped_wrapper_name, kernels_struct_name, wrapper_name, LAUNCH_PARAM, LAUNCH_TYPE,
    MEMBER_ORIGINAL, MEMBER_WRAPPER, MEMBER_WRAPPER_R32, WEAK,
};

/// What a launch site needs to know of a declared kernel.
pub fn known(d: &FunctionSite) -> KnownKernel {
    KnownKernel {
        name: d.name.clone(),
        transformed: true,
        overloaded: false,
        ordinal: 0,
        params: d.param_list.len(),
        template_params: 0,
        pack: false,
    }
}

/// The weak wrapper declarations and the launch types, right after the declaration.
pub fn rewrite(d: &FunctionSite, src: &str, edits: &mut Vec<Edit>) {
    let specifiers = &src[d.func.start_byte()..d.name_node.start_byte()];
    let params: Vec<String> = d
        .param_list
        .iter()
        .map(|p| strip_default(&p.declaration()))
        .collect();
    let params = if params.is_empty() {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}")
    } else {
        format!("{LAUNCH_TYPE} {LAUNCH_PARAM}, {}", params.join(", "))
    };
    let (name, wrapper, capped) = (&d.name, wrapper_name(&d.name), capped_wrapper_name(&d.name));
    let text = format!(
        "\n// cupreempt: `{name}` is defined in another file; its wrappers, where that file was transformed (else the launch runs `{name}`).\n\
         {specifiers}{WEAK} {wrapper}({params});\n\
         {specifiers}{WEAK} {capped}({params});\n\
         struct {s} {{\n  static constexpr auto {MEMBER_ORIGINAL} = &{name};\n  static constexpr auto {MEMBER_WRAPPER} = &{wrapper};\n  static constexpr auto {MEMBER_WRAPPER_R32} = &{capped};\n}};",
        s = kernels_struct_name(name, None),
    );
    edits.push(Edit::insert(d.outer.end_byte(), text));
}
