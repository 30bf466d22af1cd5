//! What the user asked for: which kernels, chunking, output details.

use regex::Regex;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Transform only kernels whose name matches one of these (all when empty).
    pub select: Vec<Regex>,
    /// Never transform kernels whose name matches one of these.
    pub exclude: Vec<Regex>,
    /// Tasks per control-word check for every kernel (0 or None: adaptive).
    pub chunk: Option<u32>,
    /// Per-kernel chunk sizes; they win over pragmas and `chunk`.
    pub chunk_per_kernel: BTreeMap<String, u32>,
    /// Work between two checks for adaptive chunks, in microseconds (None: 20 us).
    pub budget_us: Option<u32>,
    /// Emit `#line` directives that point back into the original file.
    pub line_directives: bool,
    /// With `line_directives`: `#line N` alone, which keeps the name the build compiles the
    /// file under (a file written in place is compiled as the original was, and `__FILE__`
    /// stays what it was), instead of `#line N "FILE"`.
    pub line_directives_keep_name: bool,
    /// `--verify`: adds nothing; every transform parses its output from scratch and compares
    /// its syntax errors with the input's (CP013).
    pub verify: bool,
    /// Kernels defined in files that this one includes (`program.rs`): their launches here
    /// are rewritten too, through the launch types their transformed definitions declare.
    pub known_kernels: Vec<crate::program::KnownKernel>,
    /// Device functions of included files that read blockIdx/gridDim (a kernel here that
    /// calls one passes the task context where its file gives it the context form, and is
    /// refused otherwise, CP008) or synchronize (a call is a barrier).
    pub known_helpers: Vec<crate::program::KnownHelper>,
    /// Macros of the files that this one includes (`program::macros_of`): their replacement
    /// texts, so that what they expand to counts (a `blockIdx` read, a barrier, a return), and
    /// the function-like ones' parameters, for the analysis of what they expand to (the masked
    /// view reads every included macro as object-like). The file's own definitions win.
    pub known_macros: crate::program::IncludedMacros,
    /// Every helper here that reads blockIdx/gridDim gets its task-context form, called or not
    /// by a kernel of this file: the kernels of other files transformed in the same run (a
    /// folder, the compiler launcher's translation unit) call it (`KnownHelper::with_ctx`).
    pub helpers_for_other_files: bool,
    /// Kernel names that other files of the same program transform too (overloads spread over
    /// headers that one translation unit includes together, `program::namesake_ordinals`),
    /// with how many of them come before this file's: its launch types of that name are
    /// numbered after those, so that no two files define the same one.
    pub namesakes: std::collections::BTreeMap<String, usize>,
    /// Include cupreempt's header even where the file has nothing of its own that needs it: a
    /// translation unit's source whose included files are transformed (the compiler
    /// launcher). The header, and the standard headers it includes, then come before the
    /// program's macros, as in a transformed source; included first by a transformed header,
    /// they met the macros the program defines before it (HeCBench's sw4ck defines `base`
    /// and `u`, which broke libstdc++'s `<string>`).
    pub include_support: bool,
    /// Macros given a definition on the command line (`-D NAME`, nvcc's own flags where the
    /// compiler launcher runs): a conditional that tests one of them is not judged off
    /// (`transform::unconfigured_retry`).
    pub defined_macros: Vec<String>,
    /// Macros given a value on the command line (`-D NAME=VALUE`): read as object-like
    /// definitions after every included file's (`transform`), so that a kernel's specifier
    /// macro that only an including file's header defines (`-DKERNEL_SPEC=__global__`) is
    /// understood. The file's own definitions win, as do the included files'.
    pub defined_values: Vec<(String, String)>,
    /// Macros the file's kernels were judged without (`transform::unconfigured_retry`): every
    /// wrapper is compiled only where each of them stays undefined.
    pub assumed_undefined: Vec<String>,
}

impl Options {
    pub fn selects(&self, kernel: &str) -> bool {
        (self.select.is_empty() || self.select.iter().any(|r| r.is_match(kernel)))
            && !self.exclude.iter().any(|r| r.is_match(kernel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_and_exclusion() {
        let o = Options {
            select: vec![Regex::new("^k").unwrap()],
            exclude: vec![Regex::new("slow$").unwrap()],
            ..Options::default()
        };
        assert!(o.selects("kfast"));
        assert!(!o.selects("kslow"));
        assert!(!o.selects("other"));
        assert!(Options::default().selects("anything"));
    }
}
