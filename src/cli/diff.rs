//! `cupreempt diff`, and how a diff is drawn: unified or side by side, coloured on a terminal.

use super::render::render;
use super::{files, stderr_color, ColorChoice, SelectArgs};
use clap::Args;
use cupreempt::diff::{self, Change, Mark};
use std::fmt::Write;
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
    let src = files::read_text(&a.file)?;
    let name = files::display_name(&a.file);
    let t = cupreempt::transform(&src, &name, &opts);
    eprint!("{}", render(&t.diagnostics, &name, &src, stderr_color()));
    let kernels = t.kernels.iter().map(|k| k.name.clone()).collect();
    for w in super::unmatched_selection(&opts, &kernels) {
        eprintln!("cupreempt: {w}");
    }
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
                _ => format!(
                    "left as it is ({})",
                    k.codes
                        .iter()
                        .map(|c| c.id())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            println!("  {}:{} {}  {what}", name, k.line, k.name);
        }
    } else if a.side_by_side {
        let width = a.width.or_else(terminal_width).unwrap_or(160);
        print!("{}", side_by_side(&old, &new, width, &style));
    } else {
        print!(
            "{}",
            unified(
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

const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

struct Style {
    color: bool,
}

impl Style {
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("{code}{s}{RESET}")
        } else {
            s.to_string()
        }
    }
}

/// A unified diff with three lines of context; empty when the texts are equal.
fn unified(old: &str, new: &str, old_name: &str, new_name: &str, style: &Style) -> String {
    let hunks = diff::unified(old, new);
    let mut out = String::new();
    if hunks.is_empty() {
        return out;
    }
    let _ = writeln!(out, "{}", style.paint(BOLD, &format!("--- {old_name}")));
    let _ = writeln!(out, "{}", style.paint(BOLD, &format!("+++ {new_name}")));
    for hunk in hunks {
        let _ = writeln!(out, "{}", style.paint(CYAN, &hunk.header));
        for line in hunk.lines {
            let text = &line.text;
            let s = match line.change {
                Change::Delete => style.paint(RED, &format!("-{text}")),
                Change::Insert => style.paint(GREEN, &format!("+{text}")),
                Change::Equal => format!(" {text}"),
            };
            let _ = writeln!(out, "{s}");
            if line.missing_newline {
                let _ = writeln!(out, "\\ No newline at end of file");
            }
        }
    }
    out
}

/// Two columns, original on the left, with line numbers; `width` is the whole line.
fn side_by_side(old: &str, new: &str, width: usize, style: &Style) -> String {
    let col = width.saturating_sub(17).max(20) / 2;
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out = String::new();
    let cell = |n: Option<usize>, lines: &[&str]| -> (String, String) {
        match n {
            Some(i) => (
                format!("{:>5}", i + 1),
                fit(lines.get(i).copied().unwrap_or(""), col),
            ),
            None => ("     ".to_string(), " ".repeat(col)),
        }
    };
    for (g, group) in diff::side_by_side(old, new).iter().enumerate() {
        if g > 0 {
            let _ = writeln!(out, "{}", style.paint(DIM, &"┄".repeat(col * 2 + 15)));
        }
        for row in group {
            let (ln, lt) = cell(row.old, &old_lines);
            let (rn, rt) = cell(row.new, &new_lines);
            let (lt, rt, mark) = match row.mark {
                Mark::Old => (style.paint(RED, &lt), rt, '<'),
                Mark::New => (lt, style.paint(GREEN, &rt), '>'),
                Mark::Changed => (style.paint(RED, &lt), style.paint(GREEN, &rt), '|'),
                Mark::Same => (lt, rt, ' '),
            };
            let _ = writeln!(out, "{ln} {lt} {mark} {rn} {rt}");
        }
    }
    out
}

fn fit(s: &str, width: usize) -> String {
    let s = s.replace('\t', "    ");
    let n = s.chars().count();
    if n > width {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    } else {
        format!("{s}{}", " ".repeat(width - n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_marks_changes_and_is_empty_when_equal() {
        let s = Style { color: false };
        assert_eq!(unified("a\n", "a\n", "x", "y", &s), "");
        let d = unified("a\nb\nc\n", "a\nB\nc\n", "x", "y", &s);
        assert!(
            d.contains("--- x\n+++ y\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"),
            "{d}"
        );
    }

    #[test]
    fn side_by_side_pairs_lines() {
        let s = Style { color: false };
        let d = side_by_side("a\nb\n", "a\nc\nd\n", 80, &s);
        assert!(
            d.lines()
                .any(|l| l.contains(" b ") && l.contains('|') && l.contains(" c")),
            "{d}"
        );
        assert!(
            d.lines()
                .any(|l| l.contains('>') && l.trim_end().ends_with('d')),
            "{d}"
        );
    }
}
