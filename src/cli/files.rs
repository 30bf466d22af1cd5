//! Finding input files and writing output safely.

use anyhow::Context;
use cupreempt::diagnostics::{Code, Diagnostic};
use std::path::{Path, PathBuf};

pub const EXTENSIONS: &[&str] = &["cu", "cuh"];

/// Input files: each file as given, each folder walked for .cu/.cuh files (sorted).
/// Returns (path, root it was found under). A folder `skip` (an output folder inside the
/// inputs) is not walked, so that a second run does not take the first one's outputs as inputs.
pub fn inputs(paths: &[PathBuf], skip: Option<&Path>) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let skip = skip.and_then(|s| std::fs::canonicalize(s).ok());
    let mut out = Vec::new();
    for p in paths {
        if is_stdin(p) {
            out.push((p.clone(), PathBuf::new()));
            continue;
        }
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = walkdir::WalkDir::new(p)
                .into_iter()
                .filter_entry(|e| {
                    skip.as_ref().is_none_or(|s| {
                        !e.file_type().is_dir()
                            || std::fs::canonicalize(e.path()).map_or(true, |d| d != *s)
                    })
                })
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_file())
                .map(|e| e.into_path())
                .filter(|f| {
                    f.extension()
                        .and_then(|x| x.to_str())
                        .is_some_and(|x| EXTENSIONS.contains(&x))
                })
                .collect();
            found.sort();
            out.extend(found.into_iter().map(|f| (f, p.clone())));
        } else {
            let root = p.parent().map(Path::to_path_buf).unwrap_or_default();
            out.push((p.clone(), root));
        }
    }
    Ok(out)
}

/// An input file's text, or why it is skipped.
pub enum Source {
    Text(String),
    /// Not UTF-8: the diagnostic (CP012) and the text to show it against (invalid bytes shown
    /// as U+FFFD; everything before the first one is byte for byte the file's).
    Skipped(Diagnostic, String),
}

/// `-`: the input is standard input.
pub fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// How diagnostics name an input.
pub fn display_name(path: &Path) -> String {
    if is_stdin(path) {
        STDIN_NAME.to_string()
    } else {
        path.display().to_string()
    }
}

/// The name diagnostics and `#line` directives give standard input.
const STDIN_NAME: &str = "<stdin>";

pub fn read(path: &Path) -> anyhow::Result<Source> {
    let bytes = if is_stdin(path) {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes)
            .context("cannot read standard input")?;
        bytes
    } else {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    match String::from_utf8(bytes) {
        Ok(s) => Ok(Source::Text(s)),
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let byte = e.as_bytes()[at];
            let shown = String::from_utf8_lossy(e.as_bytes()).into_owned();
            let d = Diagnostic::new(
                Code::NotUtf8,
                format!("the file is not UTF-8 text (byte 0x{byte:02x}); it is skipped"),
            )
            .label(at..at + '\u{FFFD}'.len_utf8(), "not UTF-8")
            .help("convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`");
            Ok(Source::Skipped(d, shown))
        }
    }
}

/// Reads a file that must be text (one input commands).
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    match read(path)? {
        Source::Text(s) => Ok(s),
        Source::Skipped(d, _) => anyhow::bail!("{}: {}", path.display(), d.message),
    }
}

/// Writes through a temporary file in the same folder, so that a reader never sees half a file.
pub fn write_atomically(path: &Path, content: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let tmp = dir.join(format!(".{name}.cupreempt-tmp"));
    std::fs::write(&tmp, content).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

/// Whether `a` and `b` name one file (`b` may not exist yet).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `FILE.orig`, or `FILE.orig.N` if that exists: an earlier backup is never overwritten.
pub fn backup_path(path: &Path) -> PathBuf {
    let base = format!("{}.orig", path.display());
    let mut candidate = PathBuf::from(&base);
    let mut n = 1;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{base}.{n}"));
        n += 1;
    }
    candidate
}
