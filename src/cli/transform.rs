//! `cupreempt transform`

use super::render::render;
use super::{files, stderr_color, SelectArgs};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct TransformArgs {
    /// .cu/.cuh files, or folders to search for them.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output file (one input only); `-` or nothing: standard output.
    #[arg(short = 'o', long, conflicts_with_all = ["out_dir", "in_place"])]
    output: Option<PathBuf>,
    /// Write each output under this folder, mirroring the inputs' layout.
    #[arg(long, conflicts_with = "in_place")]
    out_dir: Option<PathBuf>,
    /// Replace each input, keeping the original as FILE.orig.
    #[arg(long)]
    in_place: bool,
    /// Write outputs even when some kernels were refused or a file has syntax errors.
    #[arg(long)]
    keep_going: bool,
    #[command(flatten)]
    select: SelectArgs,
}

pub fn run(a: TransformArgs) -> anyhow::Result<ExitCode> {
    let opts = a.select.options()?;
    let inputs = files::inputs(&a.inputs)?;
    let to_stdout = a.out_dir.is_none()
        && !a.in_place
        && a.output.as_deref().is_none_or(|o| o.as_os_str() == "-");
    if inputs.len() != 1 && (to_stdout || a.output.is_some()) {
        anyhow::bail!("{} input files: use --out-dir or --in-place", inputs.len());
    }
    // Transform everything first: with errors, nothing is written (unless --keep-going).
    let mut results = Vec::new();
    let mut any_errors = false;
    let color = stderr_color();
    for (path, root) in &inputs {
        let src = files::read(path)?;
        let name = path.display().to_string();
        let t = cupreempt::transform(&src, &name, &opts)?;
        eprint!("{}", render(&t.diagnostics, &name, &src, color));
        any_errors |= t.has_errors();
        results.push((path, root, src, t));
    }
    if any_errors && !a.keep_going {
        eprintln!(
            "cupreempt: nothing written because of the errors above (--keep-going writes anyway)"
        );
        return Ok(ExitCode::from(1));
    }
    for (path, root, src, t) in &results {
        let target = if to_stdout {
            print!("{}", t.output);
            continue;
        } else if a.in_place {
            if t.output == *src {
                continue;
            }
            let backup = files::backup_path(path);
            std::fs::copy(path, &backup)?;
            eprintln!(
                "cupreempt: {} (original kept as {})",
                path.display(),
                backup.display()
            );
            (*path).clone()
        } else if let Some(dir) = &a.out_dir {
            let rel = path.strip_prefix(root).unwrap_or(path);
            dir.join(rel)
        } else {
            a.output.clone().unwrap_or_default()
        };
        files::write_atomically(&target, &t.output)?;
        eprintln!(
            "cupreempt: wrote {} ({} of {} kernels transformed)",
            target.display(),
            t.transformed_count(),
            t.kernels.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
