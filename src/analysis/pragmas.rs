//! `#pragma cupreempt` lines before a kernel, and how they combine with the command line's
//! chunking options.

use crate::diagnostics::{Code, Diagnostic};
use crate::lang::{fields, kinds, text};
use crate::options::Options;
use tree_sitter::Node;

#[derive(Debug, Clone, Default)]
pub struct Pragmas {
    pub chunk: Option<u32>,
    pub budget_us: Option<u32>,
    pub skip: bool,
}

/// The pragmas in the run of `#pragma` lines (comments between them allowed) just before
/// `outer`; a `#pragma cupreempt` that is not understood adds a diagnostic and is ignored.
pub fn before(outer: Node, src: &str, diagnostics: &mut Vec<Diagnostic>) -> Pragmas {
    let k = kinds();
    let mut p = Pragmas::default();
    let mut sib = outer.prev_sibling();
    while let Some(s) = sib {
        if s.kind_id() == k.comment {
            sib = s.prev_sibling();
            continue;
        }
        if s.kind_id() != k.preproc_call {
            break;
        }
        let directive = s
            .child_by_field_id(fields().directive)
            .map(|d| text(d, src))
            .unwrap_or("");
        let arg = s
            .child_by_field_id(fields().argument)
            .map(|a| text(a, src).trim())
            .unwrap_or("");
        if directive != "#pragma" {
            break;
        }
        if let Some(rest) = arg.strip_prefix("cupreempt") {
            if let Err(why) = parse(rest.trim(), &mut p) {
                diagnostics.push(
                    Diagnostic::new(
                        Code::BadPragma,
                        format!(
                            "`#pragma cupreempt {}` is not understood: {why}",
                            rest.trim()
                        ),
                    )
                    .label(s.byte_range(), "ignored")
                    .help("known: `#pragma cupreempt chunk(N)`, `budget_us(N)`, `skip`"),
                );
            }
        }
        sib = s.prev_sibling();
    }
    p
}

fn parse(s: &str, p: &mut Pragmas) -> Result<(), String> {
    for item in s.split_whitespace() {
        if item == "skip" {
            p.skip = true;
            continue;
        }
        let (key, val) = item
            .strip_suffix(')')
            .and_then(|i| i.split_once('('))
            .ok_or_else(|| format!("expected `key(value)`, found `{item}`"))?;
        let n: u32 = val
            .trim()
            .parse()
            .map_err(|_| format!("`{val}` is not a whole number"))?;
        if n == 0 {
            return Err(format!("`{key}` must be at least 1"));
        }
        match key {
            "chunk" => p.chunk = Some(n),
            "budget_us" => p.budget_us = Some(n),
            _ => return Err(format!("unknown key `{key}`")),
        }
    }
    Ok(())
}

/// (chunk, budget_ns) compiled into a kernel's wrapper; 0 means "decide at run time". A chunk
/// given for this kernel on the command line wins over its pragma, which wins over the command
/// line's default.
pub fn chunking(opts: &Options, kernel: &str, pragmas: &Pragmas) -> (u32, u32) {
    let chunk = opts
        .chunk_per_kernel
        .get(kernel)
        .copied()
        .or(pragmas.chunk)
        .or(opts.chunk)
        .unwrap_or(0);
    let budget_us = pragmas.budget_us.or(opts.budget_us).unwrap_or(0);
    (chunk, budget_us.saturating_mul(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pragma_keys() {
        let mut p = Pragmas::default();
        parse("chunk(8) budget_us(50)", &mut p).unwrap();
        assert_eq!((p.chunk, p.budget_us, p.skip), (Some(8), Some(50), false));
        assert!(parse("chunk(0)", &mut p).is_err());
        assert!(parse("chunky(3)", &mut p).is_err());
        assert!(parse("chunk", &mut p).is_err());
        parse("skip", &mut p).unwrap();
        assert!(p.skip);
    }

    #[test]
    fn chunk_precedence_is_cli_kernel_then_pragma_then_cli_default() {
        let mut o = Options {
            chunk: Some(2),
            budget_us: Some(30),
            ..Options::default()
        };
        let p = Pragmas {
            chunk: Some(8),
            budget_us: None,
            skip: false,
        };
        assert_eq!(chunking(&o, "k", &p), (8, 30_000));
        assert_eq!(chunking(&o, "k", &Pragmas::default()), (2, 30_000));
        o.chunk_per_kernel.insert("k".into(), 5);
        assert_eq!(chunking(&o, "k", &p), (5, 30_000));
        assert_eq!(
            chunking(&Options::default(), "k", &Pragmas::default()),
            (0, 0)
        );
    }
}
