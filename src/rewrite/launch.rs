//! `k<<<grid, block, smem, stream>>>(args)` → `cupreempt::launch<K>(grid, block, smem, stream, args)`.

use super::kernel::{kernels_struct, needs_selector};
use crate::analysis::{Analysis, LaunchSite};
use crate::diagnostics::{Code, Diagnostic};
use crate::edit::Edit;
use crate::lang::text;
use crate::vocab::{selector_name, LAUNCH};

pub fn rewrite(
    l: &LaunchSite,
    a: &Analysis,
    src: &str,
    edits: &mut Vec<Edit>,
    diags: &mut Vec<Diagnostic>,
) {
    let targets: Vec<&crate::analysis::KernelPlan> = a
        .kernels
        .iter()
        .filter(|k| k.transformed() && k.site.name == l.name)
        .collect();
    if l.in_device_code {
        return; // inside a kernel that was refused for launching from the device
    }
    if targets.is_empty() {
        if !a.kernels.iter().any(|k| k.site.name == l.name) {
            // Defined elsewhere: its wrappers are not known here, so the launch stays plain.
            // (A kernel of this file that is refused says so itself.)
            diags.push(
                Diagnostic::new(
                    Code::LaunchLeft,
                    format!(
                        "launch of `{}` left as it is: it names no kernel defined in this file (a kernel of another file or header, or a function pointer)",
                        l.name
                    ),
                )
                .label(l.call.byte_range(), "this launch is not preemptible")
                .help("launches are rewritten only in the file that defines the kernel: launch it from a host function of that file, and call that function from here"),
            );
        }
        return;
    }
    let left = |why: &str| {
        Diagnostic::new(
            Code::LaunchLeft,
            format!("launch of `{}` left as it is: {why}", l.name),
        )
        .kernel(targets[0].id, &l.name)
        .label(l.call.byte_range(), "this launch is not preemptible")
    };
    if l.in_error {
        diags.push(left("it is inside a syntax error"));
        return;
    }
    let min_params = targets
        .iter()
        .map(|k| k.site.param_list.len())
        .min()
        .unwrap_or(0);
    if l.arg_count < min_params {
        diags.push(left("it relies on default arguments, which a launch through a function pointer cannot supply"));
        return;
    }
    if !(2..=4).contains(&l.config.len()) {
        diags.push(left(
            "it has an unexpected number of configuration arguments",
        ));
        return;
    }
    let plan = targets[0];
    let explicit = l.template_args.map(|t| text(t, src)).unwrap_or("");
    let explicit_count = l.template_args.map(|t| t.named_child_count()).unwrap_or(0);
    let complete = targets.len() == 1
        && !plan.overloaded
        && (!plan.site.is_template()
            || (explicit_count == plan.site.template_params.len()
                && !plan.site.template_params.iter().any(|p| p.pack)));
    let args_text = &src[l.args.start_byte() + 1..l.args.end_byte() - 1];
    let kernels = if complete || !targets.iter().any(|k| needs_selector(k)) {
        format!("{}{}{explicit}", l.qualifier, kernels_struct(plan))
    } else {
        format!(
            "decltype({}{}{explicit}({args_text}))",
            l.qualifier,
            selector_name(&l.name)
        )
    };
    let cfg: Vec<&str> = l.config.iter().map(|n| text(*n, src)).collect();
    let smem = cfg.get(2).copied().unwrap_or("0");
    let stream = cfg.get(3).copied().unwrap_or("0");
    let sep = if l.arg_count > 0 { ", " } else { "" };
    let head = format!(
        "{LAUNCH}<{kernels}>({}, {}, {smem}, {stream}{sep}",
        cfg[0], cfg[1]
    );
    edits.push(Edit::replace(
        l.call.start_byte()..l.args.start_byte() + 1,
        head,
    ));
}
