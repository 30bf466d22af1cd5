//! Diagnostics rendered for people, by miette: the library's diagnostics are data (codes,
//! messages, byte-range labels); this binds one to its source and draws it.
//!
//! The fixture tests include this file too (`#[path]`), so that the snapshots show exactly what
//! the command line prints.

use cupreempt::diagnostics::{Diagnostic, Level};
use miette::{Diagnostic as MietteDiagnostic, LabeledSpan, NamedSource, Severity};
use std::fmt;
use std::sync::Arc;

/// A diagnostic bound to its source, renderable by miette.
#[derive(Debug)]
struct Rendered {
    diag: Diagnostic,
    source: NamedSource<Arc<String>>,
}

impl Rendered {
    fn new(diag: &Diagnostic, file_name: &str, src: Arc<String>) -> Rendered {
        Rendered {
            diag: diag.clone(),
            source: NamedSource::new(file_name, src).with_language("cpp"),
        }
    }
}

impl fmt::Display for Rendered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diag.message)
    }
}

impl std::error::Error for Rendered {}

impl MietteDiagnostic for Rendered {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.diag.code.id()))
    }
    fn severity(&self) -> Option<Severity> {
        Some(match self.diag.severity {
            Level::Error => Severity::Error,
            Level::Warning => Severity::Warning,
            Level::Note => Severity::Advice,
        })
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.diag
            .help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }
    fn url<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(format!(
            "docs/diagnostics.md#{}",
            self.diag.code.id().to_lowercase()
        )))
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        Some(&self.source)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.diag.labels.is_empty() {
            return None;
        }
        Some(Box::new(self.diag.labels.iter().enumerate().map(
            |(i, l)| {
                let span = (l.start, l.end.saturating_sub(l.start));
                if i == 0 {
                    LabeledSpan::new_primary_with_span(Some(l.message.clone()), span)
                } else {
                    LabeledSpan::new_with_span(Some(l.message.clone()), span)
                }
            },
        )))
    }
}

/// Renders diagnostics as text (no colours), e.g. for snapshots and logs.
pub fn render_plain(diags: &[Diagnostic], file_name: &str, src: &str) -> String {
    let handler =
        miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
            .with_width(100)
            .with_links(false);
    render_with(&handler, diags, file_name, src)
}

/// Renders diagnostics for a terminal (colours when `color`).
pub fn render(diags: &[Diagnostic], file_name: &str, src: &str, color: bool) -> String {
    if !color {
        return render_plain(diags, file_name, src);
    }
    let handler = miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode())
        .with_links(false);
    render_with(&handler, diags, file_name, src)
}

fn render_with(
    handler: &miette::GraphicalReportHandler,
    diags: &[Diagnostic],
    file_name: &str,
    src: &str,
) -> String {
    let src = Arc::new(src.to_string());
    let mut out = String::new();
    for d in diags {
        if d.labels.iter().any(|l| on_long_line(&src, l.start, l.end)) {
            out.push_str(&one_line(d, file_name, &src));
            continue;
        }
        let _ = handler.render_report(&mut out, &Rendered::new(d, file_name, src.clone()));
    }
    out
}

/// Lines longer than this are not drawn with their source (miette's layout pads with format
/// widths, which are limited to 16 bits).
const LONGEST_DRAWN_LINE: usize = 4096;

fn on_long_line(src: &str, start: usize, end: usize) -> bool {
    let start = start.min(src.len());
    let end = end.clamp(start, src.len());
    let from = src.as_bytes()[..start]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let to = src.as_bytes()[end..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(src.len(), |i| end + i);
    to - from > LONGEST_DRAWN_LINE
}

/// `severity[CODE]: message` and `file:line:column`, for a diagnostic whose line is too long
/// to draw.
fn one_line(d: &Diagnostic, file_name: &str, src: &str) -> String {
    let severity = match d.severity {
        Level::Error => "error",
        Level::Warning => "warning",
        Level::Note => "note",
    };
    let mut out = format!("{severity}[{}]: {}\n", d.code.id(), d.message);
    for l in &d.labels {
        let at = l.start.min(src.len());
        let line = src.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        let column = at
            - src.as_bytes()[..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
            + 1;
        out.push_str(&format!(
            "  --> {file_name}:{line}:{column}: {}\n",
            l.message
        ));
    }
    if let Some(h) = &d.help {
        out.push_str(&format!("  help: {h}\n"));
    }
    out
}
