//! The `cupreempt` command line: transform, diff, check, headers; and, when the first argument
//! names a compiler, the compiler launcher (`cli/launcher.rs`).

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `cupreempt nvcc ARGS...`, `cupreempt /path/to/nvcc ARGS...`: compiler-launcher mode.
    let mut raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let argv0 = raw.remove(0);
    // Run as `nvcc` (a link named so, ahead of the real one): launcher mode for the real one.
    if let Some(real) = cli::launcher::masquerade(&argv0) {
        let run = real.and_then(|nvcc| {
            raw.insert(0, nvcc.into_os_string());
            cli::launcher::run(raw)
        });
        return run.unwrap_or_else(|e| {
            eprintln!("cupreempt: {e:#}");
            ExitCode::from(2)
        });
    }
    if raw.first().is_some_and(|a| cli::launcher::is_compiler(a)) {
        return cli::launcher::run(raw).unwrap_or_else(|e| {
            eprintln!("cupreempt: {e:#}");
            ExitCode::from(2)
        });
    }
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cupreempt: {e:#}");
            ExitCode::from(2)
        }
    }
}
