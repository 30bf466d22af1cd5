//! `cupreempt check`

use super::render::render;
use super::tally::Tally;
use super::{files, stderr_color, OutputFormat, SelectArgs};
use clap::Args;
use cupreempt::diagnostics::Diagnostic;
use cupreempt::KernelReport;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Files, or folders to search for .cu/.cuh files and for headers (.h, .hpp, .hxx, .inl...)
    /// whose code defines or launches a kernel.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    format: OutputFormat,
    #[command(flatten)]
    select: SelectArgs,
}

#[derive(Serialize)]
struct FileReport {
    file: String,
    kernels: Vec<KernelReport>,
    diagnostics: Vec<JsonDiagnostic>,
}

/// A diagnostic with line/column positions added for tools.
#[derive(Serialize)]
struct JsonDiagnostic {
    #[serde(flatten)]
    diagnostic: Diagnostic,
    line: usize,
    column: usize,
}

pub fn run(a: CheckArgs) -> anyhow::Result<ExitCode> {
    let opts = a.select.options()?;
    let mut refused = false;
    let mut reports = Vec::new();
    let mut kernels = std::collections::BTreeSet::new();
    let mut found = Tally::default();
    let inputs = files::inputs(&a.inputs, None)?;
    let checked = inputs.len();
    // As `transform` sees the inputs: one program.
    let opts = super::transform::one_program(opts, &inputs);
    let known = super::transform::known_kernels(&inputs, &opts, a.select.include_dirs());
    for (path, _) in inputs {
        let name = files::display_name(&path);
        let opts = known.get(&path).cloned().unwrap_or_default().options(&opts);
        let (src, mut t) = match files::read(&path)? {
            files::Source::Text(src) => {
                let t = cupreempt::transform(&src, &name, &opts);
                (src, t)
            }
            // Checked as `transform` would write it: its own bytes back in place, or CP012.
            files::Source::Foreign(f) => {
                let mut t = cupreempt::transform(&f.text, &name, &opts);
                if let Err(d) = f.restore_or_report(&t.output) {
                    t.diagnostics.push(d);
                }
                (f.text, t)
            }
            // Reported like any other file: no kernels, one diagnostic.
            files::Source::Skipped(d, shown) => (
                shown,
                cupreempt::Transformed {
                    output: String::new(),
                    diagnostics: vec![d],
                    kernels: Vec::new(),
                    defines: Vec::new(),
                    helpers: Vec::new(),
                },
            ),
        };
        if let Some(note) = files::includes_not_found(&src, &path, a.select.include_dirs(), &t) {
            t.diagnostics.push(note);
        }
        kernels.extend(t.kernels.iter().map(|k| k.name.clone()));
        refused |= t.diagnostics.iter().any(|d| d.is_refusal());
        found.add(&t);
        match a.format {
            OutputFormat::Text => {
                for k in &t.kernels {
                    let outcome = if k.transformed {
                        format!(
                            "transformable ({}{})",
                            k.mode.map_or("plain", |m| m.as_str()),
                            if k.loop_state_dynamic {
                                "; the loop's state in dynamic shared memory"
                            } else if k.loop_state_per_instance {
                                "; the loop's state in static or dynamic shared memory, by instance"
                            } else {
                                ""
                            }
                        )
                    } else {
                        let why: Vec<String> = t
                            .diagnostics
                            .iter()
                            .filter(|d| k.is_about(d) && k.codes.contains(&d.code))
                            .map(|d| format!("{} {}", d.code.id(), d.message))
                            .collect();
                        format!("left as it is: {}", why.join("; "))
                    };
                    println!("{name}:{}: {}: {outcome}", k.line, k.name);
                }
                eprint!("{}", render(&t.diagnostics, &name, &src, stderr_color()));
            }
            OutputFormat::Json => {
                let diagnostics = t
                    .diagnostics
                    .iter()
                    .map(|d| {
                        let at = d.labels.first().map_or(0, |l| l.start);
                        let line = src[..at].matches('\n').count() + 1;
                        let column = at - src[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
                        JsonDiagnostic {
                            diagnostic: d.clone(),
                            line,
                            column,
                        }
                    })
                    .collect();
                reports.push(FileReport {
                    file: name,
                    kernels: t.kernels,
                    diagnostics,
                });
            }
        }
    }
    for w in super::unmatched_selection(&opts, &kernels) {
        eprintln!("cupreempt: {w}");
        found.warnings += 1;
    }
    if let OutputFormat::Json = a.format {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    }
    // The run's last line, as `transform` ends with its own: what a tree holds at a glance.
    eprintln!(
        "cupreempt: {checked} files checked; {} kernels: {} transformable ({} predicated), {} refused{}; {} warnings",
        found.kernels,
        found.transformed,
        found.predicated,
        found.refused,
        found.by_code(),
        found.warnings
    );
    Ok(if refused {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
