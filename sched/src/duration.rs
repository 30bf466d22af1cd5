//! Duration model (FLEP): per kernel, a linear regression of duration on (grid size, block
//! size, input size, shared memory) with an L2 penalty, trained from samples and updated online
//! as kernels complete; plus the mean measured preemption overhead per kernel.
//!
//! Online: the model keeps the sums of the normal equations (XᵀX, Xᵀy), so a sample costs
//! O(F²) and a prediction one small solve. The penalty is relative to each feature's variance
//! and spares the intercept, so it does not depend on the features' units.

// Small dense matrices read best with explicit indices.
#![allow(clippy::needless_range_loop)]

use crate::model::KernelSpec;
use std::collections::HashMap;

pub const FEATURES: usize = 4;

/// grid size (blocks), block size (threads), input size (bytes), shared memory (bytes).
pub type Features = [f64; FEATURES];

#[derive(Debug, Clone)]
pub struct Ridge {
    pub lambda: f64,
    n: f64,
    sx: [f64; FEATURES],
    sy: f64,
    sxx: [[f64; FEATURES]; FEATURES],
    sxy: [f64; FEATURES],
}

impl Ridge {
    pub fn new(lambda: f64) -> Ridge {
        Ridge {
            lambda,
            n: 0.0,
            sx: [0.0; FEATURES],
            sy: 0.0,
            sxx: [[0.0; FEATURES]; FEATURES],
            sxy: [0.0; FEATURES],
        }
    }

    pub fn samples(&self) -> usize {
        self.n as usize
    }

    pub fn observe(&mut self, x: &Features, y: f64) {
        self.n += 1.0;
        self.sy += y;
        for i in 0..FEATURES {
            self.sx[i] += x[i];
            self.sxy[i] += x[i] * y;
            for j in 0..FEATURES {
                self.sxx[i][j] += x[i] * x[j];
            }
        }
    }

    /// (weights, intercept), or None before the first sample.
    pub fn fit(&self) -> Option<(Features, f64)> {
        if self.n == 0.0 {
            return None;
        }
        let mean: Features = std::array::from_fn(|i| self.sx[i] / self.n);
        let my = self.sy / self.n;
        // Centered normal equations with a penalty proportional to each feature's variance.
        let mut a = [[0.0; FEATURES]; FEATURES];
        let mut b = [0.0; FEATURES];
        for i in 0..FEATURES {
            for j in 0..FEATURES {
                a[i][j] = self.sxx[i][j] - self.n * mean[i] * mean[j];
            }
            b[i] = self.sxy[i] - self.n * mean[i] * my;
        }
        for i in 0..FEATURES {
            // A constant feature has zero variance: pin its weight to 0.
            a[i][i] = if a[i][i] > 1e-12 * (1.0 + self.sxx[i][i]) {
                a[i][i] * (1.0 + self.lambda)
            } else {
                1.0
            };
        }
        let w = solve(a, b)?;
        let intercept = my - (0..FEATURES).map(|i| w[i] * mean[i]).sum::<f64>();
        Some((w, intercept))
    }

    pub fn predict(&self, x: &Features) -> Option<f64> {
        let (w, c) = self.fit()?;
        Some(c + (0..FEATURES).map(|i| w[i] * x[i]).sum::<f64>())
    }
}

/// Gaussian elimination with partial pivoting.
fn solve(mut a: [[f64; FEATURES]; FEATURES], mut b: [f64; FEATURES]) -> Option<Features> {
    for col in 0..FEATURES {
        let pivot = (col..FEATURES).max_by(|&i, &j| {
            a[i][col]
                .abs()
                .partial_cmp(&a[j][col].abs())
                .unwrap_or(std::cmp::Ordering::Equal)
        })?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..FEATURES {
            let f = a[row][col] / a[col][col];
            for k in col..FEATURES {
                a[row][k] -= f * a[col][k];
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; FEATURES];
    for row in (0..FEATURES).rev() {
        let s: f64 = (row + 1..FEATURES).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

/// Per-kernel durations and preemption overheads, learned online.
#[derive(Debug, Clone)]
pub struct DurationModel {
    lambda: f64,
    kernels: HashMap<String, Ridge>,
    overheads: HashMap<String, (f64, u32)>,
}

impl DurationModel {
    pub fn new(lambda: f64) -> DurationModel {
        DurationModel {
            lambda,
            kernels: HashMap::new(),
            overheads: HashMap::new(),
        }
    }
    /// A kernel completed: learn from its measured duration.
    pub fn observe(&mut self, kernel: &str, x: &Features, duration: f64) {
        let lambda = self.lambda;
        self.kernels
            .entry(kernel.to_string())
            .or_insert_with(|| Ridge::new(lambda))
            .observe(x, duration);
    }
    /// Predicted standalone duration `Te`; None for a kernel never seen.
    pub fn predict(&self, kernel: &str, x: &Features) -> Option<f64> {
        self.kernels.get(kernel)?.predict(x).map(|d| d.max(0.0))
    }
    /// A measured preemption (yield + relaunch) cost.
    pub fn observe_overhead(&mut self, kernel: &str, overhead: f64) {
        let e = self.overheads.entry(kernel.to_string()).or_insert((0.0, 0));
        e.0 += overhead;
        e.1 += 1;
    }
    /// `O`: the mean of the measured preemption overheads.
    pub fn overhead(&self, kernel: &str) -> Option<f64> {
        self.overheads
            .get(kernel)
            .filter(|e| e.1 > 0)
            .map(|e| e.0 / e.1 as f64)
    }
}

/// What the simulator tells policies about a kernel's duration when they must not see the
/// truth: the duration model's prediction from the kernel's name and features, learned online
/// from the kernels completed so far; else the mean duration completed so far; else `prior`.
#[derive(Debug, Clone)]
pub struct Estimator {
    pub model: DurationModel,
    pub prior: f64,
    completed: (f64, u64),
}

impl Estimator {
    pub fn new(lambda: f64, prior: f64) -> Estimator {
        Estimator {
            model: DurationModel::new(lambda),
            prior,
            completed: (0.0, 0),
        }
    }

    /// The duration to believe for `spec`, at its arrival.
    pub fn estimate(&mut self, spec: &KernelSpec) -> f64 {
        let learned = spec
            .features
            .as_ref()
            .and_then(|x| self.model.predict(&spec.name, x))
            .filter(|d| *d > 0.0);
        learned.unwrap_or(if self.completed.1 > 0 {
            self.completed.0 / self.completed.1 as f64
        } else {
            self.prior
        })
    }

    /// A kernel completed: its measured standalone duration teaches the model.
    pub fn completed(&mut self, spec: &KernelSpec) {
        self.completed.0 += spec.work;
        self.completed.1 += 1;
        if let Some(x) = &spec.features {
            self.model.observe(&spec.name, x, spec.work);
        }
    }
}

/// Mean absolute relative error of predictions for `test`, after training on `train`.
pub fn holdout_error(
    lambda: f64,
    train: &[(&str, Features, f64)],
    test: &[(&str, Features, f64)],
) -> f64 {
    let mut m = DurationModel::new(lambda);
    for (k, x, y) in train {
        m.observe(k, x, *y);
    }
    let errors: Vec<f64> = test
        .iter()
        .filter_map(|(k, x, y)| m.predict(k, x).map(|p| ((p - y) / y).abs()))
        .collect();
    if errors.is_empty() {
        f64::NAN
    } else {
        errors.iter().sum::<f64>() / errors.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;

    /// A kernel whose time grows with the grid and the input, with 2% multiplicative noise.
    fn samples(rng: &mut Rng, n: usize) -> Vec<(&'static str, Features, f64)> {
        (0..n)
            .map(|_| {
                let grid = (1 + rng.next_u64() % 100_000) as f64;
                let block = [64.0, 128.0, 256.0, 512.0][(rng.next_u64() % 4) as usize];
                let input = grid * block * 4.0;
                let smem = [0.0, 16_384.0][(rng.next_u64() % 2) as usize];
                let t = 8.0 + 0.002 * grid + 1e-6 * input + 0.0001 * smem;
                let noise = 1.0 + 0.02 * (2.0 * rng.unit() - 1.0);
                ("vadd", [grid, block, input, smem], t * noise)
            })
            .collect()
    }

    #[test]
    fn held_out_error_is_small_and_units_do_not_matter() {
        let mut rng = Rng::new(11);
        let data = samples(&mut rng, 400);
        let (train, test) = data.split_at(300);
        let err = holdout_error(1e-6, train, test);
        assert!(err < 0.03, "mean relative error {err}");
        // The same data in other units (kilobytes, thousands of blocks) predicts the same.
        let scale = |v: &[(&'static str, Features, f64)]| -> Vec<(&'static str, Features, f64)> {
            v.iter()
                .map(|(k, x, y)| (*k, [x[0] / 1000.0, x[1], x[2] / 1024.0, x[3] / 1024.0], *y))
                .collect()
        };
        let err2 = holdout_error(1e-6, &scale(train), &scale(test));
        assert!((err - err2).abs() < 1e-9, "{err} vs {err2}");
    }

    #[test]
    fn exact_linear_data_is_recovered_and_online_updates_move_predictions() {
        let mut r = Ridge::new(0.0);
        for g in 1..20 {
            let x = [g as f64, 128.0, 0.0, 0.0];
            r.observe(&x, 5.0 + 3.0 * g as f64);
        }
        let (w, c) = r.fit().unwrap();
        assert!(
            (w[0] - 3.0).abs() < 1e-9 && (c - 5.0).abs() < 1e-6,
            "{w:?} {c}"
        );
        assert_eq!(w[1], 0.0, "a constant feature gets no weight");
        let before = r.predict(&[100.0, 128.0, 0.0, 0.0]).unwrap();
        for _ in 0..50 {
            r.observe(&[100.0, 128.0, 0.0, 0.0], 1000.0);
        }
        assert!(r.predict(&[100.0, 128.0, 0.0, 0.0]).unwrap() > before + 100.0);
    }

    #[test]
    fn penalty_shrinks_weights_and_unknown_kernels_have_no_prediction() {
        let mut rng = Rng::new(3);
        let data = samples(&mut rng, 50);
        let fit = |lambda| {
            let mut r = Ridge::new(lambda);
            for (_, x, y) in &data {
                r.observe(x, *y);
            }
            r.fit().unwrap().0[0].abs()
        };
        assert!(fit(10.0) < fit(0.0));
        let mut m = DurationModel::new(1e-3);
        assert_eq!(m.predict("nope", &[1.0; 4]), None);
        assert_eq!(m.overhead("vadd"), None);
        m.observe_overhead("vadd", 40.0);
        m.observe_overhead("vadd", 60.0);
        assert_eq!(m.overhead("vadd"), Some(50.0));
    }
}
