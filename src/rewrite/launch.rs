//! `k<<<grid, block, smem, stream>>>(args)` → `cupreempt::launch<K>(grid, block, smem, stream)(args)`.

use crate::analysis::{Analysis, LaunchSite};
use crate::diagnostics::{Code, Diagnostic};
use crate::edit::Edit;
use crate::program::KnownKernel;
use crate::vocab::{selector_name, LAUNCH, LAUNCH_ANY, LAUNCH_THROUGH};

/// `in_macro`: the launch is in a macro's body (`macro_launch.rs`; `src` is then the body's
/// parse text, the same bytes at the same offsets with its line continuations blanked): line
/// breaks kept in the rewritten head get their continuation back.
pub fn rewrite(
    l: &LaunchSite,
    a: &Analysis,
    src: &str,
    known: &[KnownKernel],
    in_macro: bool,
    edits: &mut Vec<Edit>,
    diags: &mut Vec<Diagnostic>,
) -> bool {
    if l.in_device_code {
        return false; // inside a kernel that was refused for launching from the device
    }
    let local = a.kernels.iter().any(|k| k.site.name == l.name);
    let plans: Vec<&crate::analysis::KernelPlan> = a
        .kernels
        .iter()
        .filter(|k| k.transformed() && k.launched_by_name() && k.site.name == l.name)
        .collect();
    // Defined in an included file (declared-only ones come last, below); one that is not
    // transformed with this file only names itself in the diagnostic below.
    let elsewhere: Vec<&KnownKernel> = known
        .iter()
        .filter(|k| k.name == l.name && k.declaration.is_none() && k.untransformed_file.is_none())
        .collect();
    if local && !elsewhere.is_empty() && !plans.is_empty() {
        // The same name defined here and in an included file: two launch types of one name.
        diags.push(
            Diagnostic::new(
                Code::LaunchLeft,
                format!(
                    "launch of `{}` left as it is: kernels of that name are defined both in this file and in a file it includes",
                    l.name
                ),
            )
            .kernel(plans[0].id, &l.name)
            .label(l.call.byte_range(), "this launch is not preemptible"),
        );
        return false;
    }
    let mut declared: Vec<KnownKernel> = a
        .declared_kernels
        .iter()
        .filter(|d| d.name == l.name)
        .map(|d| KnownKernel::declared(d, src))
        .collect();
    if declared.is_empty() && super::declared::included(known, &l.name).is_some() {
        // Declared in an included file: the same block is written here (`declared.rs`).
        declared.extend(known.iter().filter(|k| k.name == l.name).take(1).cloned());
    }
    let targets: Vec<KnownKernel> = if local {
        plans.iter().map(|k| KnownKernel::of(k)).collect()
    } else if elsewhere.is_empty() && !declared.is_empty() && in_macro {
        // Its weak wrapper declarations are written for launches outside macros only.
        diags.push(
            Diagnostic::new(
                Code::LaunchLeft,
                format!(
                    "launch of `{}` in a macro left as it is: the kernel is only declared here (defined in another file)",
                    l.name
                ),
            )
            .label(l.call.byte_range(), "this launch is not preemptible")
            .help("launch the kernel from a function, and call that function in the macro"),
        );
        return false;
    } else if elsewhere.is_empty() && !declared.is_empty() {
        declared
    } else {
        elsewhere
            .iter()
            .filter(|k| k.transformed)
            .map(|k| (*k).clone())
            .collect()
    };
    if targets.is_empty() && l.pointer_object && !l.in_error && (2..=4).contains(&l.config.len()) {
        // A pointer the code holds (a parameter, a variable chosen at run time): the launch
        // goes through it (`launch_any`), preemptible where its kernel registered itself.
        any_launch(l, src, in_macro, edits);
        return true;
    }
    if targets.is_empty() {
        // A kernel a syntax error hides here is refused (CP001) and says so itself.
        let lost = a.lost_kernels.iter().any(|(_, k)| k.name == l.name);
        if !local && elsewhere.is_empty() && !lost {
            // Defined elsewhere: its wrappers are not known here, so the launch stays plain.
            // (A kernel of this file or of an included one that is refused says so itself.)
            let untransformed = known
                .iter()
                .find_map(|k| k.untransformed_file.as_deref().filter(|_| k.name == l.name));
            let d = match untransformed {
                Some(file) => Diagnostic::new(
                    Code::LaunchLeft,
                    format!(
                        "launch of `{}` left as it is: the kernel is defined in {file}, which is not transformed with this file",
                        l.name
                    ),
                )
                .help(format!(
                    "give {file} to the same `cupreempt transform` (its kernels then get the wrappers this launch would use)"
                )),
                None => Diagnostic::new(
                    Code::LaunchLeft,
                    format!(
                        "launch of `{}` left as it is: it names no kernel defined in this file or in a file it includes, nor one declared here once (overloads declared here, or a function pointer)",
                        l.name
                    ),
                )
                .help("launches are rewritten where the kernel's definition is visible: define the kernel in a header that this file includes, or launch it from a host function of its own file and call that from here; a launch through a pointer is rewritten where the launching function declares the pointer with a kernel's name (`auto kernel = &k<T>;`) and never changes it"),
            };
            diags.push(d.label(l.call.byte_range(), "this launch is not preemptible"));
        }
        return false;
    }
    let tag = plans.first().map(|k| k.id);
    let left = |why: &str| {
        let d = Diagnostic::new(
            Code::LaunchLeft,
            format!("launch of `{}` left as it is: {why}", l.name),
        )
        .label(l.call.byte_range(), "this launch is not preemptible");
        match tag {
            Some(id) => d.kernel(id, &l.name),
            None => d,
        }
    };
    if l.in_error {
        diags.push(left("it is inside a syntax error"));
        return false;
    }
    let min_params = targets.iter().map(|k| k.params).min().unwrap_or(0);
    // An argument that is an object-like macro of the file standing for several (`#define
    // ARGS a, b, c` then `k<<<g, b>>>(ARGS)`) counts as those.
    let arg_count = if l.arg_count < min_params {
        arguments_through_macros(l, src)
    } else {
        l.arg_count
    };
    // Default arguments the launch leaves out, written by the launch itself (a call through a
    // function pointer takes every argument): where one kernel is launched and its defaults
    // are literals (`KnownKernel::defaults`).
    let mut supplied = String::new();
    if arg_count < min_params {
        let k = &targets[0];
        let first = k.params - k.defaults.len();
        if targets.len() > 1 || k.overloaded_here || arg_count < first {
            diags.push(left("it relies on default arguments that the launch cannot write itself (only literal ones of a kernel launched by a name that is not overloaded, whose types name no template parameter), and a launch through a function pointer cannot supply them"));
            return false;
        }
        for d in &k.defaults[arg_count - first..] {
            if !supplied.is_empty() || arg_count > 0 {
                supplied.push_str(", ");
            }
            supplied.push_str(d);
        }
    }
    // More arguments than any kernel of that name takes: the launch calls another overload,
    // one declared here and defined in another file (HeCBench's qtclustering declares one).
    let max_params = targets
        .iter()
        .try_fold(0, |most, k| k.max_params.map(|n| most.max(n)));
    if max_params.is_some_and(|most| arg_count > most) {
        diags.push(left("it passes more arguments than the kernel of that name defined here takes, so it calls another overload"));
        return false;
    }
    if !(2..=4).contains(&l.config.len()) {
        diags.push(left(
            "it has an unexpected number of configuration arguments",
        ));
        return false;
    }
    let plan = &targets[0];
    let explicit = l
        .template_args
        .map(|t| super::one_line(t, t.byte_range(), src))
        .unwrap_or_default();
    // Comments between the arguments (`k<T, /*N=*/2>`) are no arguments.
    let explicit_count = l.template_args.map(crate::lang::count_named).unwrap_or(0);
    // One kernel of that name where the launch can see, not a template left to deduction: its
    // launch types by name (numbered where another file of the program has a namesake).
    let complete = targets.len() == 1
        && !plan.overloaded_here
        && (!plan.is_template() || (explicit_count == plan.template_params && !plan.pack));
    let selector = !complete && targets.iter().any(KnownKernel::needs_selector);
    if selector && has_directive_line(&src[l.args.byte_range()]) {
        // The selector's copy of the arguments goes on the launch's line (`one_line`).
        diags.push(left("its arguments hold preprocessor lines (`#if`), which the launch's choice among the kernels of that name cannot copy onto one line"));
        return false;
    }
    let kernels = if !selector {
        format!("{}{}{explicit}", l.qualifier, plan.struct_name())
    } else {
        format!(
            "decltype({}{}{explicit}({}{supplied}))",
            l.qualifier,
            selector_name(&l.name),
            one_line(l.args, src)
        )
    };
    let cfg: Vec<String> = l
        .config
        .iter()
        .map(|n| super::one_line(*n, n.byte_range(), src))
        .collect();
    let smem = cfg.get(2).map_or("0", String::as_str);
    let stream = cfg.get(3).map_or("0", String::as_str);
    // The arguments go to a call whose parameters are the kernel's own (launch.cuh), so
    // they convert as in the original launch. The head is written on one line, followed by as
    // many line breaks as the launch's head had: every line after it keeps its number, and no
    // `#line` directive is needed (one would land inside the argument list, where the grammar
    // cannot read it).
    let breaks = src[l.call.start_byte()..l.args.start_byte() + 1]
        .matches('\n')
        .count();
    // A launch through a local variable passes it along: the launch checks that it holds the
    // kernel (and launches it as written if not), and the variable stays used.
    let launcher = match &l.through_variable {
        Some(var) => format!(
            "{LAUNCH_THROUGH}<{kernels}>({var}, {}, {}, {smem}, {stream})",
            cfg[0], cfg[1]
        ),
        None => format!(
            "{LAUNCH}<{kernels}>({}, {}, {smem}, {stream})",
            cfg[0], cfg[1]
        ),
    };
    let head = format!(
        "{launcher}({}",
        (if in_macro { " \\\n" } else { "\n" }).repeat(breaks)
    );
    edits.push(Edit::replace(
        l.call.start_byte()..l.args.start_byte() + 1,
        head,
    ));
    if !supplied.is_empty() {
        // Right before the `)`: after any comment the last argument has (a line comment there
        // ends before the `)`'s line).
        edits.push(Edit::insert(l.args.end_byte() - 1, supplied));
    }
    false
}

/// Whether `text` has a line that begins with `#` (a preprocessor directive).
fn has_directive_line(text: &str) -> bool {
    text.lines()
        .skip(1)
        .any(|l| l.trim_start().starts_with('#'))
}

/// `kernel<<<g, b, smem, stream>>>(` through a pointer the code holds →
/// `::cupreempt::launch_any(kernel, g, b, smem, stream)(`, on one line and followed by the
/// line breaks the launch's head had (as `rewrite` writes its head).
fn any_launch(l: &LaunchSite, src: &str, in_macro: bool, edits: &mut Vec<Edit>) {
    let mut parts = vec![l.name.clone()];
    parts.extend(
        l.config
            .iter()
            .map(|n| super::one_line(*n, n.byte_range(), src)),
    );
    let breaks = src[l.call.start_byte()..l.args.start_byte() + 1]
        .matches('\n')
        .count();
    let head = format!(
        "{LAUNCH_ANY}({})({}",
        parts.join(", "),
        (if in_macro { " \\\n" } else { "\n" }).repeat(breaks)
    );
    edits.push(Edit::replace(
        l.call.start_byte()..l.args.start_byte() + 1,
        head,
    ));
}

/// The text inside an argument list on one line, without its comments: the selector's copy of
/// a launch's arguments adds no line to the file (a `#line` directive would otherwise follow
/// it, inside the launch's argument list, where the grammar cannot read one, CP013; and the
/// lines after it would need renumbering for nothing).
fn one_line(args: tree_sitter::Node, src: &str) -> String {
    super::one_line(args, args.start_byte() + 1..args.end_byte() - 1, src)
}

/// How many arguments a launch passes where an argument is an object-like macro of the file
/// whose replacement is a list (`#define ARGS scores, labels, n`, as LightGBM passes every
/// kernel its arguments): the list's entries count, not the macro's one name. The definition
/// read is the file's last one before the launch, not undefined since (`#undef` between two
/// definitions of the same name); one whose text has a `<` (`pair<a, b>` would split wrong) or
/// that takes parameters is not read, and such an argument counts as one.
fn arguments_through_macros(l: &LaunchSite, src: &str) -> usize {
    let kinds = crate::lang::kinds();
    let mut c = l.args.walk();
    let names: Vec<&str> = l
        .args
        .named_children(&mut c)
        .filter(|a| a.kind_id() != kinds.comment)
        .map(|a| crate::lang::text(a, src))
        .collect();
    if !names
        .iter()
        .any(|a| a.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric()))
    {
        return l.arg_count;
    }
    let defines = crate::parse::defines(src);
    let at = l.call.start_byte();
    let offset = |t: &str| t.as_ptr() as usize - src.as_ptr() as usize;
    names
        .iter()
        .map(|a| {
            let Some(d) = defines
                .iter()
                .rev()
                .find(|d| d.name == *a && offset(d.body) < at)
            else {
                return 1;
            };
            let undefined = src[offset(d.body)..at].lines().any(|line| {
                let words: Vec<&str> = line
                    .trim_start_matches([' ', '\t', '#'])
                    .split_whitespace()
                    .collect();
                line.trim_start().starts_with('#')
                    && words.first() == Some(&"undef")
                    && words.get(1) == Some(a)
            });
            if undefined {
                return 1;
            }
            let body = crate::parse::replacement_text(d.body);
            if d.function_like || body.is_empty() || body.contains('<') {
                return 1;
            }
            crate::lang::split_top_level(&body).len()
        })
        .sum()
}
