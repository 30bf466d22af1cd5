//! Finding input files and writing output safely.

use anyhow::Context;
use cupreempt::diagnostics::{Code, Diagnostic};
use std::path::{Path, PathBuf};

pub const EXTENSIONS: &[&str] = &["cu", "cuh"];

/// Header extensions a folder walk takes a file of where it defines or launches a kernel, or
/// reads the block index in its code (`kernel_header`): kernels in `.hxx` or `.inl` headers (a
/// public GPU primitives library keeps all of them there) were neither reported nor
/// transformed, and launches of them from the walked files got CP101 (defined in a file not
/// transformed with this one); a rasterizer's kernels that call `__device__` functions of its
/// `.inl` files that read `blockIdx` (`CR::triangleSetupImpl(p)`) were refused (CP008: a
/// helper of a file not transformed with this one), though the whole folder was given. Any
/// other header is not taken: nothing in it can change, and a header of prototypes may be
/// included by host-only sources, which its transformed form (cupreempt's header included,
/// wrappers declared) would break; one whose code reads `blockIdx` compiles only with nvcc.
pub const HEADER_EXTENSIONS: &[&str] = &["h", "hh", "hpp", "hxx", "inl", "inc", "ipp", "tcc"];

/// Whether the file at `path` launches a kernel (`<<<`) or defines one (`__global__`, then `{`
/// before any `;`), comments aside: the program's own test for kernels
/// (`program::mentions_kernels`), then a definition's brace; or reads the block index outside
/// comments and preprocessor lines (`reads_block_ids_in_code`: a helper that a kernel
/// elsewhere needs in its task-context form); or calls `__syncthreads` there
/// (`synchronizes_in_code`: a helper whose live copy a predicated kernel elsewhere calls).
fn kernel_header(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let text = String::from_utf8_lossy(&bytes);
    if reads_block_ids_in_code(&text) || synchronizes_in_code(&text) {
        return true;
    }
    if !cupreempt::program::mentions_kernels(&text) {
        return false;
    }
    let code = cupreempt::lang::without_comments(&text);
    code.contains("<<<")
        || cupreempt::lang::word_indices(&code, "__global__").any(|at| {
            let rest = &code[at..];
            rest.find('{')
                .is_some_and(|open| rest.find(';').is_none_or(|semi| open < semi))
        })
}

/// The built-ins that hold the block index.
const BLOCK_INDEX_BUILTINS: &[&str] = &["blockIdx", "gridDim"];

/// Calls that read the block index: cooperative groups' block and grid queries
/// (`lang::BLOCK_INDEX_QUERIES`) and `this_grid()`, whose queries read it (a quantization
/// library's `__device__` helpers in a `.h` read it only so, and its kernels were refused,
/// CP008, though the whole folder was given). A name that is not called (a host function's
/// `block_index` parameter) does not count.
fn block_index_calls() -> impl Iterator<Item = &'static &'static str> {
    cupreempt::lang::BLOCK_INDEX_QUERIES
        .iter()
        .chain(&["this_grid"])
}

/// Whether `text` calls a block barrier (`lang::BARRIER_FUNCTIONS`) outside comments and
/// preprocessor lines.
fn synchronizes_in_code(text: &str) -> bool {
    let barriers = || cupreempt::lang::BARRIER_FUNCTIONS.iter().map(|(b, _)| *b);
    barriers().any(|b| text.contains(b))
        && any_code_line(text, |line| barriers().any(|b| called(line, b)))
}

/// Whether `line` calls `name` (the word followed by `(`).
fn called(line: &str, name: &str) -> bool {
    cupreempt::lang::word_indices(line, name)
        .any(|at| line[at + name.len()..].trim_start().starts_with('('))
}

/// Whether a line of `text`'s code, comments aside and outside preprocessor lines, satisfies
/// `found`.
fn any_code_line(text: &str, found: impl Fn(&str) -> bool) -> bool {
    let code = cupreempt::lang::without_comments(text);
    let any = cupreempt::lang::lines_in_directives(&code)
        .any(|(line, in_directive)| !in_directive && found(line));
    any
}

/// Whether `text` reads the block index in code (`BLOCK_INDEX_BUILTINS`, `block_index_calls`):
/// outside comments and preprocessor lines (a macro's definition is read with the files that
/// use it).
fn reads_block_ids_in_code(text: &str) -> bool {
    let words = || BLOCK_INDEX_BUILTINS.iter().chain(block_index_calls());
    if !words().any(|w| text.contains(w)) {
        return false;
    }
    any_code_line(text, |line| {
        BLOCK_INDEX_BUILTINS
            .iter()
            .any(|w| cupreempt::lang::has_word(line, w))
            || block_index_calls().any(|w| called(line, w))
    })
}

/// Input files: each file as given, each folder walked for .cu/.cuh files and for headers
/// that define or launch kernels (`HEADER_EXTENSIONS`), sorted.
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
                    let ext = f.extension().and_then(|x| x.to_str()).unwrap_or_default();
                    EXTENSIONS.contains(&ext)
                        || (HEADER_EXTENSIONS.contains(&ext) && kernel_header(f))
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
    /// Not UTF-8 (often a Latin-1 character in a comment), transformed all the same: see
    /// `Foreign`.
    Foreign(Foreign),
    /// Not UTF-8: the diagnostic (CP012) and the text to show it against (invalid bytes shown
    /// as U+FFFD; everything before the first one is byte for byte the file's).
    Skipped(Diagnostic, String),
}

/// Stands in for each byte that is not part of UTF-8 text, one byte for one, so that offsets
/// into the text are offsets into the file. A file that holds it already cannot be read so.
const STAND_IN: u8 = 0x1A;

/// A file that is not UTF-8, read as text with `STAND_IN` for each byte that is not UTF-8;
/// `restore` puts those bytes back into the transformed text.
pub struct Foreign {
    pub text: String,
    /// The bytes stood in for, in order.
    bytes: Vec<u8>,
}

impl Foreign {
    /// `bytes` as text with stand-ins; none when the file holds the stand-in byte itself.
    pub fn read(bytes: &[u8]) -> Option<Foreign> {
        if bytes.contains(&STAND_IN) {
            return None;
        }
        let mut text = Vec::with_capacity(bytes.len());
        let mut replaced = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(_) => {
                    text.extend_from_slice(rest);
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    let bad = e.error_len().unwrap_or(rest.len() - good);
                    text.extend_from_slice(&rest[..good]);
                    replaced.extend_from_slice(&rest[good..good + bad]);
                    text.extend(std::iter::repeat_n(STAND_IN, bad));
                    rest = &rest[good + bad..];
                }
            }
        }
        Some(Foreign {
            text: String::from_utf8(text).ok()?,
            bytes: replaced,
        })
    }

    /// Where the first stand-in is (for CP012 when the bytes cannot be put back).
    fn first(&self) -> (u8, usize) {
        let at = self.text.bytes().position(|b| b == STAND_IN).unwrap_or(0);
        (self.bytes.first().copied().unwrap_or(STAND_IN), at)
    }

    /// `restore`, or CP012 at the first odd byte where the bytes cannot be put back.
    pub fn restore_or_report(&self, output: &str) -> Result<Vec<u8>, Diagnostic> {
        self.restore(output).ok_or_else(|| {
            let (byte, at) = self.first();
            not_utf8(byte, at)
        })
    }

    /// The transformed text with the file's own bytes back in place of the stand-ins; none
    /// when the transformation changed how many there are (it copied or dropped text that
    /// holds one), so that no byte could land in the wrong place.
    pub fn restore(&self, output: &str) -> Option<Vec<u8>> {
        if output.bytes().filter(|&b| b == STAND_IN).count() != self.bytes.len() {
            return None;
        }
        let mut own = self.bytes.iter();
        Some(
            output
                .bytes()
                .map(|b| match b {
                    STAND_IN => own.next().copied().unwrap_or(b),
                    _ => b,
                })
                .collect(),
        )
    }
}

/// A file's text for reading only (what other files define): UTF-8, or with stand-ins.
pub fn text_of(bytes: Vec<u8>) -> Option<String> {
    match decode(bytes) {
        Source::Text(s) => Some(s),
        Source::Foreign(f) => Some(f.text),
        Source::Skipped(..) => None,
    }
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
    Ok(decode(bytes))
}

/// A file's bytes as text: UTF-8, with stand-ins (`Foreign`), or skipped with CP012.
pub fn decode(bytes: Vec<u8>) -> Source {
    match String::from_utf8(bytes) {
        Ok(s) => Source::Text(s),
        Err(e) => match Foreign::read(e.as_bytes()) {
            Some(f) => Source::Foreign(f),
            None => {
                let at = e.utf8_error().valid_up_to();
                let byte = e.as_bytes()[at];
                let shown = String::from_utf8_lossy(e.as_bytes()).into_owned();
                Source::Skipped(not_utf8(byte, at), shown)
            }
        },
    }
}

/// CP012 for a file whose first byte that is not UTF-8 is `byte`, at offset `at`.
pub fn not_utf8(byte: u8, at: usize) -> Diagnostic {
    Diagnostic::new(
        Code::NotUtf8,
        format!("the file is not UTF-8 text (byte 0x{byte:02x}); it is skipped"),
    )
    .label(at..at + '\u{FFFD}'.len_utf8(), "not UTF-8")
    .help("convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`")
}

/// Reads a file that must be text (one input commands).
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    match read(path)? {
        Source::Text(s) => Ok(s),
        Source::Foreign(_) => anyhow::bail!("{}: the file is not UTF-8 text", path.display()),
        Source::Skipped(d, _) => anyhow::bail!("{}: {}", path.display(), d.message),
    }
}

/// Writes through a temporary file in the same folder, so that a reader never sees half a file.
pub fn write_atomically(path: &Path, content: &str) -> anyhow::Result<()> {
    write_bytes_atomically(path, content.as_bytes())
}

/// `write_atomically` for bytes that need not be UTF-8.
pub fn write_bytes_atomically(path: &Path, content: &[u8]) -> anyhow::Result<()> {
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

/// CP204 where `t` refused a kernel, warned of a syntax error or left a launch as written
/// (CP101: the kernel it names may be defined in such a file), and files that `src` (at
/// `path`) includes with quotes are found neither next to it nor along `search` (the `-I`
/// folders): the analysis then lacks their definitions, so a helper they define reads as
/// unknown (a condition that calls it as possibly thread-dependent, CP004; a call of it as
/// unseen, CP008), a macro as an unknown word (CP100) and a kernel as none (CP101). One
/// note, labelled at each such include; None where every quoted include resolves.
/// Angle-bracket includes are the toolkit's and the system's, which the analysis does not
/// read anyway.
pub(crate) fn includes_not_found(
    src: &str,
    path: &std::path::Path,
    search: &[std::path::PathBuf],
    t: &cupreempt::Transformed,
) -> Option<cupreempt::diagnostics::Diagnostic> {
    use cupreempt::diagnostics::{Code, Diagnostic};
    let doubtful = t
        .diagnostics
        .iter()
        .any(|d| d.is_refusal() || matches!(d.code, Code::ParseError | Code::LaunchLeft));
    if !doubtful {
        return None;
    }
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let missing: Vec<_> = cupreempt::program::includes(src)
        .into_iter()
        .filter(|inc| inc.quoted && cupreempt::program::resolve(inc, dir, search).is_none())
        .collect();
    let first = missing.first()?;
    let names: Vec<String> = missing.iter().map(|i| format!("`{}`", i.name)).collect();
    let mut d = Diagnostic::new(
        Code::IncludeNotFound,
        format!(
            "{} not found: what {} is unknown to the analysis, and the verdicts above may change with {}",
            names.join(", "),
            if missing.len() == 1 { "it defines" } else { "they define" },
            if missing.len() == 1 { "it" } else { "them" },
        ),
    )
    .label(first.name_range.clone(), "not found next to this file or in an -I folder");
    for inc in &missing[1..] {
        d = d.label(inc.name_range.clone(), "nor this");
    }
    Some(d.help("give cupreempt the folders the compiler searches (`-I DIR`, as nvcc gets them)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_bytes_stand_in_one_for_one_and_come_back() {
        let bytes = b"// caf\xE9 \xFF\xFE\n__global__ void k() {}\n".to_vec();
        let f = Foreign::read(&bytes).expect("no stand-in byte in the file");
        assert_eq!(f.text.len(), bytes.len(), "offsets unchanged");
        assert_eq!(f.first(), (0xE9, 6));
        assert_eq!(f.restore(&f.text).as_deref(), Some(&bytes[..]));
        // Edits elsewhere keep the bytes in place.
        let edited = f.text.replace("void k()", "void renamed()");
        let back = f.restore(&edited).expect("same stand-ins");
        assert!(back.starts_with(b"// caf\xE9 \xFF\xFE\n"));
        // A copied comment would put a byte in two places: refused.
        let copied = format!("{}{}", f.text, &f.text[..10]);
        assert_eq!(f.restore(&copied), None);
        // A file that holds the stand-in itself cannot be read so.
        assert!(Foreign::read(b"\x1A caf\xE9").is_none());
        assert_eq!(text_of(b"plain".to_vec()).as_deref(), Some("plain"));
    }
}
