//! The `cupreempt` command line: transform, diff, check, headers.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cupreempt: {e:#}");
            ExitCode::from(2)
        }
    }
}
