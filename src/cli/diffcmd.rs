//! `cupreempt diff`

use super::{files, stderr_color, ColorChoice, SelectArgs};
use clap::Args;
use cupreempt::diagnostics::render;
use cupreempt::diff::{self, Style};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct DiffArgs {
    file: PathBuf,
    /// Only this kernel: its original definition beside everything generated for it.
    #[arg(long = "kernel", value_name = "NAME")]
    only: Option<String>,
    /// Two columns instead of a unified diff.
    #[arg(long)]
    side_by_side: bool,
    /// Only a summary: lines changed and each kernel's outcome.
    #[arg(long)]
    stat: bool,
    /// Total width for --side-by-side (default: the terminal's, else 160).
    #[arg(long)]
    width: Option<usize>,
    #[arg(long, value_enum, default_value_t)]
    color: ColorChoice,
    #[command(flatten)]
    select: SelectArgs,
}

pub fn run(a: DiffArgs) -> anyhow::Result<ExitCode> {
    let opts = a.select.options()?;
    let src = files::read(&a.file)?;
    let name = a.file.display().to_string();
    let t = cupreempt::transform(&src, &name, &opts)?;
    eprint!("{}", render(&t.diagnostics, &name, &src, stderr_color()));
    let style = Style {
        color: a.color.stdout(),
    };

    let (old, new, old_name, new_name) = match &a.only {
        Some(kernel) => {
            let k = t
                .kernels
                .iter()
                .find(|k| &k.name == kernel)
                .ok_or_else(|| anyhow::anyhow!("no kernel named `{kernel}` in {name}"))?;
            let (Some(s), Some(o)) = (k.source_range.clone(), k.output_range.clone()) else {
                anyhow::bail!("no kernel named `{kernel}` in {name}");
            };
            let label = format!("{name} ({kernel})");
            (
                src[s].to_string(),
                t.output[o].to_string(),
                label.clone(),
                format!("{label} transformed"),
            )
        }
        None => (
            src.clone(),
            t.output.clone(),
            name.clone(),
            format!("{name} (transformed)"),
        ),
    };
    if a.stat {
        let (ins, del) = diff::counts(&old, &new);
        println!("{new_name}: {ins} lines added, {del} removed");
        for k in &t.kernels {
            let what = match (k.transformed, k.mode) {
                (true, Some(m)) => format!("transformed ({})", m.as_str()),
                _ => format!("left as it is ({})", k.codes.join(", ")),
            };
            println!("  {}:{} {}  {what}", name, k.line, k.name);
        }
    } else if a.side_by_side {
        let width = a.width.or_else(terminal_width).unwrap_or(160);
        print!("{}", diff::side_by_side(&old, &new, width, &style));
    } else {
        print!(
            "{}",
            diff::unified(
                &old,
                &new,
                &format!("a/{old_name}"),
                &format!("b/{new_name}"),
                &style
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn terminal_width() -> Option<usize> {
    std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok())
}
