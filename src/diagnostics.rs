//! Diagnostics with stable codes, as data: a code, a message, byte-range labels, the kernel
//! concerned. Every code is documented in docs/diagnostics.md; a test keeps the two in step. The
//! command line renders them (src/cli/render.rs).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Code {
    /// CP001: the kernel contains a syntax error.
    ParseErrorInKernel,
    /// CP002: grid-wide synchronization.
    GridSync,
    /// CP003: dynamic parallelism (a launch from device code).
    DynamicParallelism,
    /// CP004: a thread-dependent return reaches a barrier we cannot rewrite.
    BarrierHazard,
    /// CP005: thread-block clusters.
    Clusters,
    /// CP006: inline PTX that reads the block index, synchronizes or exits.
    InlineAsm,
    /// CP007: a kernel construct this version does not handle.
    Unsupported,
    /// CP008: a helper reads blockIdx/gridDim or synchronizes in a way we cannot rewrite.
    Helper,
    /// CP009: the input is the output of an earlier run; it is left as it is.
    AlreadyTransformed,
    /// CP010: the kernel was not selected (pragma or command line).
    NotSelected,
    /// CP011: the file nests too deep to be analysed; it is left as it is.
    TooDeep,
    /// CP012: the file is not UTF-8 text; it is skipped.
    NotUtf8,
    /// CP013: the transformed file would parse worse than the input, or two of its edits
    /// overlap; it is left as it is.
    WorseOutput,
    /// CP014: a loop waits for memory that another block writes (a grid barrier, a flag).
    WaitsForBlocks,
    /// CP100: a syntax error outside any kernel; that region is left as it is.
    ParseError,
    /// CP101: a launch site that is left unchanged.
    LaunchLeft,
    /// CP200: a thread-dependent return reaches a barrier; rewritten into the predicated form.
    PredicatedRewrite,
    /// CP201: a `#pragma cupreempt` that is not understood.
    BadPragma,
    /// CP202: `--select`, `--exclude` or `--chunk NAME=N` names no kernel of the inputs.
    SelectionUnmatched,
    /// CP203: kernels judged without a macro that is defined only where a configuration macro
    /// no file defines is; their wrappers are compiled only where it stays undefined.
    UnconfiguredMacro,
    /// CP204: a file with refused kernels or syntax warnings includes a file that was not
    /// found, whose definitions the analysis therefore lacks.
    IncludeNotFound,
}

impl Code {
    pub const ALL: [Code; 21] = [
        Code::AlreadyTransformed,
        Code::ParseErrorInKernel,
        Code::GridSync,
        Code::DynamicParallelism,
        Code::BarrierHazard,
        Code::Clusters,
        Code::InlineAsm,
        Code::Unsupported,
        Code::Helper,
        Code::NotSelected,
        Code::TooDeep,
        Code::NotUtf8,
        Code::WorseOutput,
        Code::WaitsForBlocks,
        Code::ParseError,
        Code::LaunchLeft,
        Code::PredicatedRewrite,
        Code::BadPragma,
        Code::SelectionUnmatched,
        Code::UnconfiguredMacro,
        Code::IncludeNotFound,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Code::ParseErrorInKernel => "CP001",
            Code::GridSync => "CP002",
            Code::DynamicParallelism => "CP003",
            Code::BarrierHazard => "CP004",
            Code::Clusters => "CP005",
            Code::InlineAsm => "CP006",
            Code::Unsupported => "CP007",
            Code::Helper => "CP008",
            Code::AlreadyTransformed => "CP009",
            Code::NotSelected => "CP010",
            Code::TooDeep => "CP011",
            Code::NotUtf8 => "CP012",
            Code::WorseOutput => "CP013",
            Code::WaitsForBlocks => "CP014",
            Code::ParseError => "CP100",
            Code::LaunchLeft => "CP101",
            Code::PredicatedRewrite => "CP200",
            Code::BadPragma => "CP201",
            Code::SelectionUnmatched => "CP202",
            Code::UnconfiguredMacro => "CP203",
            Code::IncludeNotFound => "CP204",
        }
    }

    /// Refusals leave a kernel untouched; everything else is informational.
    pub fn severity(self) -> Level {
        match self {
            Code::AlreadyTransformed
            | Code::NotSelected
            | Code::PredicatedRewrite
            | Code::UnconfiguredMacro
            | Code::IncludeNotFound => Level::Note,
            Code::ParseError | Code::LaunchLeft | Code::BadPragma | Code::SelectionUnmatched => {
                Level::Warning
            }
            _ => Level::Error,
        }
    }
}

impl Serialize for Level {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Note => "note",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Note,
    Warning,
    Error,
}

#[derive(Debug, Clone, Serialize)]
pub struct Label {
    pub start: usize,
    pub end: usize,
    pub message: String,
}

/// A kernel of the file: its index in the analysis' list of kernels, which is in source order.
/// Kernels can share a name (overloads, namespaces); their ids differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelId(pub usize);

/// The kernel a diagnostic concerns: its id, and its name as reports show it (JSON output
/// carries the name only).
#[derive(Debug, Clone)]
pub struct KernelTag {
    pub id: KernelId,
    pub name: String,
}

impl Serialize for KernelTag {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

/// One finding about one place in one file.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    #[serde(serialize_with = "code_id")]
    pub code: Code,
    pub severity: Level,
    pub message: String,
    /// The kernel concerned, if any.
    pub kernel: Option<KernelTag>,
    pub labels: Vec<Label>,
    pub help: Option<String>,
    /// The macro a refusal blames (CP008: it calls a helper that reads blockIdx/gridDim), for
    /// the transform's second reading of a file (CP203, `transform::unconfigured_retry`). Not
    /// part of reports; boxed, so that a diagnostic stays small as an error value.
    #[serde(skip)]
    pub blamed_macro: Option<Box<BlamedMacro>>,
}

/// A macro that a refusal blames, where the file uses it, and the helper it calls that reads
/// blockIdx/gridDim (as the call names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlamedMacro {
    pub name: String,
    pub used: std::ops::Range<usize>,
    pub reader: String,
}

fn code_id<S: serde::Serializer>(c: &Code, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.id())
}

/// Codes as their ids (`["CP004", "CP008"]`), as JSON reports show them.
pub(crate) fn code_ids<S: serde::Serializer>(codes: &[Code], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(codes.iter().map(|c| c.id()))
}

impl Diagnostic {
    pub fn new(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: code.severity(),
            message: message.into(),
            kernel: None,
            labels: Vec::new(),
            help: None,
            blamed_macro: None,
        }
    }
    pub fn kernel(mut self, id: KernelId, name: &str) -> Self {
        self.kernel = Some(KernelTag {
            id,
            name: name.to_string(),
        });
        self
    }
    pub fn label(mut self, range: std::ops::Range<usize>, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            start: range.start,
            end: range.end,
            message: message.into(),
        });
        self
    }
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
    pub fn is_refusal(&self) -> bool {
        self.severity == Level::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_documented() {
        let doc = include_str!("../docs/diagnostics.md");
        for c in Code::ALL {
            assert!(
                doc.contains(&format!("## {}", c.id())),
                "{} missing from docs/diagnostics.md",
                c.id()
            );
        }
    }

    #[test]
    fn codes_are_unique() {
        let mut ids: Vec<_> = Code::ALL.iter().map(|c| c.id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), Code::ALL.len());
    }
}
