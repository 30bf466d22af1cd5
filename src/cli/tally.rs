//! What a run found, counted for its last line (`check`, `transform`).

use cupreempt::analysis::SyncMode;
use cupreempt::diagnostics::Level;
use cupreempt::Transformed;
use std::collections::BTreeMap;

/// Kernels by outcome, refusals by code and warnings, over the files of a run.
#[derive(Default)]
pub struct Tally {
    pub kernels: usize,
    pub transformed: usize,
    /// Of the transformed kernels, those in the predicated form (CP200).
    pub predicated: usize,
    pub refused: usize,
    /// Refusal codes and how many kernels (or files) each stopped.
    pub codes: BTreeMap<&'static str, usize>,
    pub warnings: usize,
}

impl Tally {
    /// Counts one file's result: each refused kernel once per code, file-wide refusals
    /// (CP011, CP013) once per file.
    pub fn add(&mut self, t: &Transformed) {
        self.kernels += t.kernels.len();
        for k in &t.kernels {
            if k.transformed {
                self.transformed += 1;
                self.predicated += usize::from(k.mode == Some(SyncMode::Predicated));
                continue;
            }
            let mut refused = false;
            for c in k.codes.iter().filter(|c| c.severity() == Level::Error) {
                refused = true;
                *self.codes.entry(c.id()).or_default() += 1;
            }
            self.refused += usize::from(refused);
        }
        for d in &t.diagnostics {
            match d.severity {
                Level::Error if d.kernel.is_none() => {
                    *self.codes.entry(d.code.id()).or_default() += 1
                }
                Level::Warning => self.warnings += 1,
                _ => {}
            }
        }
    }

    /// ` (CP004 ×2, CP008 ×1)`, or nothing when no kernel or file was refused.
    pub fn by_code(&self) -> String {
        if self.codes.is_empty() {
            return String::new();
        }
        let codes: Vec<String> = self
            .codes
            .iter()
            .map(|(c, n)| format!("{c} ×{n}"))
            .collect();
        format!(" ({})", codes.join(", "))
    }
}
