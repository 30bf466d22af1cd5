//! Which kernels of a translation unit get the wrapper held to 32 registers, from ptxas's own
//! report (`-Xptxas -v`) of a compile without any (`CUPREEMPT_R32_CHOSEN`).
//!
//! `launch.cuh` launches the capped wrapper only where the original needs at most 32 registers
//! and the plain wrapper more; everywhere else it is code in the module that no launch runs,
//! and with lazy module loading the program's first launch loads it all the same (about 20 µs
//! a kernel plus its code, docs/runtime.md "Module loading"). Which kernels are in that band
//! is known only once ptxas has allocated registers, so the compiler launcher compiles once
//! without capped wrappers, reads the counts here, and compiles again with the few it needs.

use std::collections::{BTreeMap, BTreeSet};

use cupreempt::vocab::{capped_macro, CAPPED_CHOSEN};

/// The capped wrappers a unit needs, by kernel name; `Unknown` where the report does not say
/// enough (ptxas did not run, an entry name this module cannot read): keep them all.
#[derive(Debug, PartialEq, Eq)]
pub enum Choice {
    Kernels(BTreeSet<String>),
    Unknown,
}

impl Choice {
    /// The `-D` options of the compile that carries the chosen capped wrappers.
    pub fn defines(&self) -> Vec<String> {
        match self {
            Choice::Unknown => Vec::new(),
            Choice::Kernels(k) => std::iter::once(format!("-D{CAPPED_CHOSEN}"))
                .chain(k.iter().map(|name| format!("-D{}", capped_macro(name))))
                .collect(),
        }
    }
}

const WRAPPER_SUFFIX: &str = "__cupreempt";

/// Reads the registers of every entry function from ptxas's report, for every architecture it
/// compiled (an entry appears once per architecture).
pub fn entry_registers(report: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut entry: Option<String> = None;
    for line in report.lines() {
        let Some(info) = line.strip_prefix("ptxas info") else {
            continue;
        };
        let info = info.trim_start_matches([' ', ':']).trim_start();
        if let Some(rest) = info.strip_prefix("Compiling entry function '") {
            entry = rest.split('\'').next().map(str::to_string);
        } else if info.starts_with("Compiling ") {
            // A non-entry function (under -rdc): its counts are not a kernel's.
            entry = None;
        } else if let Some(rest) = info.strip_prefix("Used ") {
            let count = rest.split_whitespace().next().and_then(|n| n.parse().ok());
            if let (Some(name), Some(n)) = (entry.take(), count) {
                out.push((name, n));
            }
        }
    }
    out
}

/// The unqualified name of a function from its Itanium-mangled name (`_Z4sumsPKfPfii` ->
/// `sums`, `_ZN2ns6kernelIiEEvT_` -> `kernel`), read with `cpp_demangle` (as the build crate
/// reads its PTX entries), or the name itself where it is not mangled (`extern "C"`). `None`
/// for what does not demangle to a plain function name at namespace or class scope.
pub fn function_name(mangled: &str) -> Option<String> {
    let identifier = |n: &str| {
        (!n.is_empty() && n.chars().all(cupreempt::lang::is_identifier_char)).then(|| n.to_string())
    };
    if !mangled.starts_with("_Z") {
        return identifier(mangled);
    }
    if mangled.starts_with("_ZZ") {
        return None; // a local entity (`Z <function> E <name>`): no kernel
    }
    let options = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    let qualified = cpp_demangle::Symbol::new(mangled.as_bytes())
        .ok()?
        .demangle(&options)
        .ok()?;
    // `ns::kernel<int, Foo<2> >`: the template arguments off the end, then the qualifier.
    let name = qualified.trim_end();
    identifier(name[..template_args_start(name)?].rsplit("::").next()?)
}

/// Where a demangled name's trailing template arguments begin (`ns::k<int, Foo<2> >` → the
/// offset of the first `<`), or its length where it ends in none; `None` where its brackets do
/// not pair.
pub fn template_args_start(name: &str) -> Option<usize> {
    if !name.ends_with('>') {
        return Some(name.len());
    }
    let mut depth = 0usize;
    name.char_indices()
        .rev()
        .find(|&(_, ch)| {
            match ch {
                '>' => depth += 1,
                '<' => depth = depth.saturating_sub(1),
                _ => {}
            }
            depth == 0
        })
        .map(|(i, _)| i)
}

/// The kernels whose capped wrapper a launch could choose: the original needs at most 32
/// registers and the plain wrapper more, in any instantiation and architecture (the fewest
/// registers of the originals against the most of the wrappers: a kernel in doubt keeps it).
pub fn choose(report: &str) -> Choice {
    let entries = entry_registers(report);
    if entries.is_empty() {
        return Choice::Unknown; // ptxas did not run (PTX alone) or said nothing
    }
    let mut originals: BTreeMap<String, u32> = BTreeMap::new();
    let mut wrappers: BTreeMap<String, u32> = BTreeMap::new();
    for (entry, regs) in entries {
        let Some(name) = function_name(&entry) else {
            if entry.contains(WRAPPER_SUFFIX) {
                return Choice::Unknown;
            }
            continue;
        };
        match name.strip_suffix(WRAPPER_SUFFIX) {
            Some(kernel) => {
                let w = wrappers.entry(kernel.to_string()).or_insert(0);
                *w = (*w).max(regs);
            }
            None => {
                let o = originals.entry(name).or_insert(u32::MAX);
                *o = (*o).min(regs);
            }
        }
    }
    let mut chosen = BTreeSet::new();
    for (kernel, &most) in &wrappers {
        match originals.get(kernel) {
            Some(&fewest) if fewest <= 32 && most > 32 => {
                chosen.insert(kernel.clone());
            }
            Some(_) => {}
            None => return Choice::Unknown,
        }
    }
    Choice::Kernels(chosen)
}

/// ptxas's report lines (`ptxas info ...` and the indented counts under them): what the
/// launcher asked for itself, taken out of the messages the user sees.
pub fn is_report_line(line: &str) -> bool {
    line.starts_with("ptxas info")
        || (line.starts_with("    ") && line.contains("bytes stack frame"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // nvcc 13.5, sm_90: a kernel whose wrapper goes above 32 registers, one whose does not.
    const REPORT: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z15sums__cupreempt16cupreempt_launchPKfPfii' for 'sm_90'
ptxas info    : Function properties for _Z15sums__cupreempt16cupreempt_launchPKfPfii
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 168 bytes smem
ptxas info    : Compiling entry function '_Z4sumsPKfPfii' for 'sm_90'
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compiling entry function '_Z15tiny__cupreempt16cupreempt_launchPf' for 'sm_90'
ptxas info    : Used 31 registers, used 1 barriers, 168 bytes smem
ptxas info    : Compiling entry function '_Z4tinyPf' for 'sm_90'
ptxas info    : Used 8 registers, used 0 barriers
";

    #[test]
    fn the_report_gives_each_entrys_registers() {
        let r = entry_registers(REPORT);
        assert_eq!(r.len(), 4);
        assert_eq!(
            r[0],
            ("_Z15sums__cupreempt16cupreempt_launchPKfPfii".into(), 40)
        );
        assert_eq!(r[3], ("_Z4tinyPf".into(), 8));
        // Under -rdc ptxas reports device functions too: their counts are no kernel's.
        let rdc = "ptxas info    : Compiling function '_Z6helperi' for 'sm_90'\nptxas info    : Used 50 registers\n";
        assert!(entry_registers(rdc).is_empty());
    }

    #[test]
    fn only_kernels_whose_wrapper_crosses_32_registers_are_chosen() {
        assert_eq!(
            choose(REPORT),
            Choice::Kernels(BTreeSet::from(["sums".to_string()]))
        );
        assert_eq!(
            choose(REPORT).defines(),
            vec![
                "-DCUPREEMPT_R32_CHOSEN".to_string(),
                "-DCUPREEMPT_R32_sums".to_string()
            ]
        );
        // An original above 32 registers never takes the capped wrapper.
        let heavy = REPORT.replace("Used 32 registers", "Used 48 registers");
        assert_eq!(choose(&heavy), Choice::Kernels(BTreeSet::new()));
        assert_eq!(
            Choice::Kernels(BTreeSet::new()).defines(),
            vec!["-DCUPREEMPT_R32_CHOSEN"]
        );
    }

    #[test]
    fn a_report_without_the_originals_or_with_unread_names_keeps_every_capped_wrapper() {
        let no_original: String = REPORT
            .lines()
            .filter(|l| !l.contains("'_Z4sumsPKfPfii'") && !l.contains("Used 32"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(choose(&no_original), Choice::Unknown);
        let odd = "ptxas info    : Compiling entry function '_ZZ3fooE__cupreempt' for 'sm_90'\nptxas info    : Used 40 registers\n";
        assert_eq!(choose(odd), Choice::Unknown);
        assert_eq!(Choice::Unknown.defines(), Vec::<String>::new());
        assert_eq!(choose("ptxas info    : 0 bytes gmem\n"), Choice::Unknown);
    }

    #[test]
    fn instantiations_and_architectures_keep_a_kernel_in_doubt() {
        // One instantiation's wrapper above 32 with the other's original at 30: chosen.
        let r = "\
ptxas info    : Compiling entry function '_Z12k__cupreemptIfEv16cupreempt_launchPT_' for 'sm_90'
ptxas info    : Used 30 registers
ptxas info    : Compiling entry function '_Z12k__cupreemptIdEv16cupreempt_launchPT_' for 'sm_90'
ptxas info    : Used 38 registers
ptxas info    : Compiling entry function '_Z1kIfEvPT_' for 'sm_90'
ptxas info    : Used 30 registers
ptxas info    : Compiling entry function '_Z1kIdEvPT_' for 'sm_90'
ptxas info    : Used 36 registers
";
        assert_eq!(
            choose(r),
            Choice::Kernels(BTreeSet::from(["k".to_string()]))
        );
    }

    #[test]
    fn mangled_names_give_the_function_name() {
        assert_eq!(function_name("_Z4sumsPKfPfii").as_deref(), Some("sums"));
        assert_eq!(
            function_name("_ZN2ns6kernelIiEEvT_").as_deref(),
            Some("kernel")
        );
        assert_eq!(
            function_name("_ZN2ns1a14run__cupreemptILi5ENS_3FooEEEv16cupreempt_launch").as_deref(),
            Some("run__cupreempt")
        );
        assert_eq!(
            function_name("_ZN12_GLOBAL__N_16kernelEPf").as_deref(),
            Some("kernel")
        );
        assert_eq!(
            function_name("extern_c_kernel").as_deref(),
            Some("extern_c_kernel")
        );
        assert_eq!(function_name("_ZZ3fooE3bar"), None);
        assert_eq!(function_name("_Z99short"), None);
    }

    #[test]
    fn report_lines_are_told_from_messages() {
        assert!(is_report_line("ptxas info    : Used 8 registers"));
        assert!(is_report_line(
            "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
        ));
        assert!(!is_report_line(
            "k.cu(3): warning #177-D: variable \"x\" was declared but never referenced"
        ));
        assert!(!is_report_line(
            "ptxas warning : Stack size for entry function cannot be statically determined"
        ));
    }
}
