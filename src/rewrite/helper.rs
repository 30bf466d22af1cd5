//! A `__device__` helper that reads blockIdx/gridDim (maybe through other helpers) and is called
//! by a transformed kernel gets a task-context version; the original signature stays as a
//! forwarder so that other callers keep working:
//!
//! ```text
//! template <class CupreemptCtx> __device__ int gid(CupreemptCtx& __cp) { ...blockIdx... }
//! __device__ int gid() { cupreempt::NativeCtx __cp; return gid(__cp); }
//! ```

use super::{context_calls, context_param, prologue};
use crate::analysis::HelperPlan;
use crate::edit::Edit;
use crate::vocab::{CTX, CTX_TYPE, NATIVE_CTX};
use std::collections::BTreeSet;

pub fn rewrite(
    h: &HelperPlan,
    src: &str,
    ctx_helpers: &BTreeSet<&str>,
    call_defaults: &std::collections::BTreeMap<&str, &[Option<String>]>,
    compact: bool,
    edits: &mut Vec<Edit>,
) {
    let s = &h.site;
    // Parameters written without a name get one: the forwarder passes them on.
    let template_text = s.template_text(src);
    edits.extend(s.template_name_edits());
    // The context's type parameter goes last, so explicit template arguments keep their meaning.
    let ctx_template = match s
        .template
        .and_then(|t| t.child_by_field_id(crate::lang::fields().parameters))
    {
        Some(list) => {
            let close = list.end_byte() - 1;
            edits.push(Edit::insert(close, format!(", class {CTX_TYPE}")));
            let cut = close - s.template.map_or(0, |t| t.start_byte());
            format!(
                "{}, class {CTX_TYPE}{}",
                &template_text[..cut],
                &template_text[cut..]
            )
        }
        None if s.member => {
            // A member template, inside its class (which has C++ linkage already).
            let t = format!("template <class {CTX_TYPE}>\n");
            let line_start = src[..s.head].rfind('\n').map_or(0, |i| i + 1);
            let indent = &src[line_start..s.head];
            let head = if compact || !indent.trim().is_empty() {
                format!("template <class {CTX_TYPE}> ")
            } else {
                format!("{t}{indent}")
            };
            edits.push(Edit::insert(s.head, head));
            t
        }
        None => {
            // A template needs C++ linkage, also where this file lies inside another file's
            // `extern "C" {` block (closed after the body, below).
            let t = format!("template <class {CTX_TYPE}>\n");
            let inline = format!("extern \"C++\" {{ template <class {CTX_TYPE}> ");
            let head = format!("extern \"C++\" {{  // cupreempt: templates need C++ linkage\n{t}");
            edits.push(Edit::insert(s.head, if compact { inline } else { head }));
            t
        }
    };
    context_param(s, src, edits);
    prologue(&h.facts, s.body, src, false, ctx_helpers, edits);
    context_calls(&h.facts, ctx_helpers, call_defaults, edits);
    super::block_index_calls(&h.facts, edits);

    let specifiers = &src[s.head..s.name_node.start_byte()];
    let params = s.named_params();
    // What stands between the parameters and the body (`noexcept`, a trailing return type),
    // without comments: the forwarder is written on one line, where a line comment would
    // swallow its body's brace (bm3d of HeCBench: `uint & start_idx) //OUT: ...`).
    let tail = super::one_line(s.func, s.params.end_byte()..s.body.start_byte(), src);
    // Directives in it (`one_line`) keep lines of their own: no space around those breaks.
    let tail = if tail.is_empty() || tail.starts_with('\n') {
        tail
    } else {
        format!(" {tail}")
    };
    let brace = if tail.ends_with('\n') { "{" } else { " {" };
    let targs = if s.is_template() {
        format!("<{}>", s.template_args())
    } else {
        String::new()
    };
    let args = s.forward_args();
    let sep = if args.is_empty() { "" } else { ", " };
    let unused_ok = unused_static_attribute(s, src);
    let forwarder = format!(
        "\n// cupreempt: `{name}` with the hardware's blockIdx/gridDim, for other callers.\n\
         {unused_ok}{template_text}{specifiers}{name}({params}){tail}{brace}\n  {NATIVE_CTX} {CTX};\n  return {name}{targs}({CTX}{sep}{args});\n}}",
        name = s.name,
    );
    let close = if s.template.is_none() && !s.member {
        if compact {
            " }"
        } else {
            "\n}  // extern \"C++\""
        }
    } else {
        ""
    };
    edits.push(Edit::insert(
        s.outer.end_byte(),
        format!("{close}{forwarder}"),
    ));

    if let Some(first) = h.prior_declarations.first() {
        let psep = if params.is_empty() { "" } else { ", " };
        let decl = format!(
            "\n{ctx_template}{specifiers}{name}({CTX_TYPE}& {CTX}{psep}{params}){tail};",
            name = s.name,
        );
        edits.push(Edit::insert(first.outer.end_byte(), decl));
    }
}

/// `[[maybe_unused]] ` for a function written beside `s` with its specifiers where they hold
/// `static` (not in a template or a class): one that no other caller needs is one nvcc warns
/// about (#177). Empty otherwise.
pub(super) fn unused_static_attribute(
    s: &crate::analysis::FunctionSite,
    src: &str,
) -> &'static str {
    let specifiers = &src[s.head..s.name_node.start_byte()];
    if !s.is_template()
        && !s.member
        && crate::lang::word_indices(specifiers, "static")
            .next()
            .is_some()
    {
        "[[maybe_unused]] "
    } else {
        ""
    }
}
