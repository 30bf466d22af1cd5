//! Argument parsing and the commands. Library code does the work; this only reads, writes and
//! prints.

mod capped;
mod check;
mod diff;
mod files;
pub mod launcher;
mod render;
mod side_by_side;
mod sim;
mod split;
mod tally;
mod transform;

use clap::{Args, Parser, Subcommand, ValueEnum};
use cupreempt::Options;
use regex::Regex;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "cupreempt",
    version,
    about = "Makes CUDA kernels preemptible: rewrites them into persistent-thread form"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Rewrite kernels and their launch sites.
    Transform(transform::TransformArgs),
    /// Show what `transform` would change.
    Diff(diff::DiffArgs),
    /// Report, per kernel, whether it can be transformed and why not (exit 1 if any is refused).
    Check(check::CheckArgs),
    /// Run scheduling policies on a workload in the discrete-event simulator.
    Sim(sim::SimArgs),
    /// Write the headers that transformed files include (cupreempt.cuh and cupreempt/).
    Headers {
        /// Folder to write them into.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Options shared by the commands that transform.
#[derive(Args, Debug, Clone)]
pub struct SelectArgs {
    /// Transform only kernels whose name matches this regex (repeatable).
    #[arg(long = "select", value_name = "REGEX")]
    select: Vec<Regex>,
    /// Never transform kernels whose name matches this regex (repeatable).
    #[arg(long, value_name = "REGEX")]
    exclude: Vec<Regex>,
    /// Tasks per control-word check: `N` for every kernel or `NAME=N` for one (repeatable).
    /// Default: sized at run time from measured task time.
    #[arg(long, value_name = "N|NAME=N")]
    chunk: Vec<String>,
    /// Adaptive chunks: microseconds of work between two checks (default 20).
    #[arg(long, value_name = "US")]
    budget_us: Option<u32>,
    /// Emit #line directives so that compiler errors point into the original file.
    #[arg(long)]
    line_directives: bool,
    /// Accepted for scripts that pass it: every transform already parses its output from
    /// scratch, and an output that parses worse than the input is never written (CP013).
    #[arg(long)]
    verify: bool,
    /// A folder to search for included files, as nvcc's -I (repeatable): after the including
    /// file's own folder for `#include "..."`, the only places searched for `#include <...>`.
    #[arg(short = 'I', long = "include-dir", value_name = "DIR")]
    include_dirs: Vec<std::path::PathBuf>,
    /// A macro the build defines, as nvcc's -D (repeatable): a conditional that tests it alone
    /// is not taken as off (CP203); a value after `=` is read as its definition where no file
    /// read defines it (`-D KERNEL_SPEC=__global__`).
    #[arg(short = 'D', long = "define", value_name = "NAME[=VALUE]")]
    defines: Vec<String>,
}

impl SelectArgs {
    /// The -I folders, in order.
    pub(crate) fn include_dirs(&self) -> &[std::path::PathBuf] {
        &self.include_dirs
    }

    fn options(&self) -> anyhow::Result<Options> {
        let mut o = Options {
            select: self.select.clone(),
            exclude: self.exclude.clone(),
            budget_us: self.budget_us,
            line_directives: self.line_directives,
            verify: self.verify,
            defined_macros: self
                .defines
                .iter()
                .map(|d| d.split('=').next().unwrap_or(d).to_string())
                .collect(),
            defined_values: self
                .defines
                .iter()
                .filter_map(|d| d.split_once('='))
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Options::default()
        };
        for c in &self.chunk {
            match c.split_once('=') {
                Some((name, n)) => {
                    o.chunk_per_kernel.insert(name.to_string(), parse_chunk(n)?);
                }
                None => o.chunk = Some(parse_chunk(c)?),
            }
        }
        if self.budget_us == Some(0) {
            anyhow::bail!("--budget-us must be at least 1");
        }
        Ok(o)
    }
}

/// CP202 warnings: each `--select`, `--exclude` and `--chunk NAME=N` that names no kernel of
/// `kernels` (the names of every kernel in the files read). A selection that matches nothing
/// would otherwise quietly transform nothing, or everything.
fn unmatched_selection(opts: &Options, kernels: &BTreeSet<String>) -> Vec<String> {
    let code = cupreempt::diagnostics::Code::SelectionUnmatched.id();
    let known = if kernels.is_empty() {
        "the inputs hold no kernel".to_string()
    } else {
        let shown: Vec<&str> = kernels.iter().take(8).map(String::as_str).collect();
        let more = kernels.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!("kernels: {}{more}", shown.join(", "))
    };
    let none = |r: &Regex| !kernels.iter().any(|k| r.is_match(k));
    let mut out = Vec::new();
    for r in opts.select.iter().filter(|r| none(r)) {
        out.push(format!(
            "warning[{code}]: --select `{r}` matches no kernel of the inputs ({known})"
        ));
    }
    for r in opts.exclude.iter().filter(|r| none(r)) {
        out.push(format!(
            "warning[{code}]: --exclude `{r}` matches no kernel of the inputs ({known})"
        ));
    }
    for name in opts
        .chunk_per_kernel
        .keys()
        .filter(|n| !kernels.contains(*n))
    {
        out.push(format!(
            "warning[{code}]: --chunk {name}=N names no kernel of the inputs ({known})"
        ));
    }
    out
}

fn parse_chunk(s: &str) -> anyhow::Result<u32> {
    match s.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => anyhow::bail!("--chunk takes a whole number of tasks ≥ 1, or NAME=N; got `{s}`"),
    }
}

/// How `check` and `sim` print their results.
#[derive(ValueEnum, Clone, Copy, Debug, Default)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, Default)]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    fn stdout(self) -> bool {
        match self {
            ColorChoice::Auto => {
                std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
            }
            ColorChoice::Always => true,
            ColorChoice::Never => false,
        }
    }
}

fn stderr_color() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Transform(a) => transform::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Check(a) => check::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Headers { out } => {
            for (rel, content) in cupreempt::SUPPORT_FILES {
                let path = out.join(rel);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(&path, content)?;
                println!("{}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
