//! GPU share over time and response-time distributions, as numbers and as small SVG plots
//! (`cupreempt sim --plot DIR`). No plotting library: the pictures are a few lines and
//! polygons, so that they can be diffed and read.

use crate::metrics::Interval;
use crate::model::KernelView;
use crate::sim::Outcome;
use std::fmt::Write;

/// Share of the GPUs' time each group of kernels held in each of `buckets` equal slices of
/// `[t0, t1)`: `shares[group][bucket]` in 0..=1, groups summing to at most 1 per bucket.
pub fn share_over_time(
    intervals: &[Interval],
    group_of: impl Fn(usize) -> usize,
    groups: usize,
    gpus: usize,
    (t0, t1): (f64, f64),
    buckets: usize,
) -> Vec<Vec<f64>> {
    let mut shares = vec![vec![0.0; buckets]; groups];
    let width = (t1 - t0) / buckets as f64;
    if width <= 0.0 || gpus == 0 {
        return shares;
    }
    for iv in intervals {
        let g = group_of(iv.kernel);
        let (mut s, e) = (iv.start.max(t0), iv.end.min(t1));
        while s < e {
            let b = (((s - t0) / width) as usize).min(buckets - 1);
            let bucket_end = t0 + (b + 1) as f64 * width;
            let piece = e.min(bucket_end) - s;
            shares[g][b] += piece * iv.share / (width * gpus as f64);
            s = if bucket_end > s { bucket_end } else { e };
        }
    }
    shares
}

/// Each kernel's GPU share over time (`shares[kernel][bucket]`): the metric behind the plot.
pub fn per_kernel_share(o: &Outcome, gpus: usize, buckets: usize) -> Vec<Vec<f64>> {
    let (t0, t1) = span(o);
    share_over_time(
        &o.intervals,
        |k| k,
        o.kernels.len(),
        gpus,
        (t0, t1),
        buckets,
    )
}

fn span(o: &Outcome) -> (f64, f64) {
    let t0 = o
        .kernels
        .iter()
        .map(|k| k.spec.arrival)
        .fold(f64::INFINITY, f64::min);
    let t1 = o.finish.iter().copied().fold(0.0, f64::max);
    if t0.is_finite() && t1 > t0 {
        (t0, t1)
    } else {
        (0.0, 1.0)
    }
}

/// Groups for the share plot: priority levels, highest first (user-facing kernels carry the
/// upper priorities in generated workloads).
fn priority_groups(kernels: &[KernelView]) -> Vec<u8> {
    let mut levels: Vec<u8> = kernels.iter().map(|k| k.spec.priority).collect();
    levels.sort_unstable_by(|a, b| b.cmp(a));
    levels.dedup();
    levels
}

const COLORS: [&str; 8] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];
const W: f64 = 760.0;
const H: f64 = 320.0;
const PAD: f64 = 55.0;

fn frame(title: &str, xlabel: &str, ylabel: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\">{}</text>\n\
         <line x1=\"{PAD}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{PAD}\" y1=\"{PAD}\" x2=\"{PAD}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>\n",
        W / 2.0,
        esc(title),
        H - PAD,
        W - PAD,
        H - PAD,
        H - PAD,
        W / 2.0,
        H - 12.0,
        esc(xlabel),
        H / 2.0,
        H / 2.0,
        esc(ylabel)
    );
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn x_of(v: f64, max: f64) -> f64 {
    PAD + (W - 2.0 * PAD) * v / max
}
fn y_of(f: f64) -> f64 {
    H - PAD - (H - 2.0 * PAD) * f
}

/// Stacked GPU share over time per priority level.
pub fn gpu_share_svg(o: &Outcome, gpus: usize, buckets: usize) -> String {
    let levels = priority_groups(&o.kernels);
    let group_of = |k: usize| {
        let p = o.kernels[k].spec.priority;
        levels.iter().position(|&l| l == p).unwrap_or(0)
    };
    let (t0, t1) = span(o);
    let shares = share_over_time(
        &o.intervals,
        group_of,
        levels.len(),
        gpus,
        (t0, t1),
        buckets,
    );
    let mut s = frame(
        &format!(
            "{}: share of {gpus} GPU(s) held by each priority level",
            o.policy
        ),
        "time (ms)",
        "GPU share",
    );
    let span_ms = (t1 - t0) / 1000.0;
    for i in 0..=4 {
        let v = span_ms * i as f64 / 4.0;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{v:.0}</text>",
            x_of(v, span_ms),
            H - PAD + 14.0
        );
        let f = i as f64 / 4.0;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{f:.2}</text>",
            PAD - 4.0,
            y_of(f) + 4.0
        );
    }
    let mut below = vec![0.0; buckets];
    for (g, row) in shares.iter().enumerate() {
        let top: Vec<f64> = below
            .iter()
            .zip(row)
            .map(|(b, v)| (b + v).min(1.0))
            .collect();
        let mut pts = Vec::new();
        for (b, &v) in top.iter().enumerate() {
            let x = span_ms * (b as f64 + 0.5) / buckets as f64;
            pts.push(format!("{:.1},{:.1}", x_of(x, span_ms), y_of(v)));
        }
        for (b, &v) in below.iter().enumerate().rev() {
            let x = span_ms * (b as f64 + 0.5) / buckets as f64;
            pts.push(format!("{:.1},{:.1}", x_of(x, span_ms), y_of(v)));
        }
        let c = COLORS[g % COLORS.len()];
        let _ = writeln!(
            s,
            "<polygon fill=\"{c}\" fill-opacity=\"0.6\" stroke=\"{c}\" points=\"{}\"/>",
            pts.join(" ")
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{c}\">priority {}</text>",
            W - PAD - 80.0,
            PAD + 14.0 * (g + 1) as f64,
            levels[g]
        );
        below = top;
    }
    s.push_str("</svg>\n");
    s
}

/// Response-time distribution (CDF over a log time axis), one curve per policy.
pub fn response_cdf_svg(outcomes: &[Outcome]) -> String {
    let mut curves: Vec<(&str, Vec<f64>)> = outcomes
        .iter()
        .map(|o| {
            let mut r: Vec<f64> = o
                .kernels
                .iter()
                .zip(&o.finish)
                .map(|(k, f)| (f - k.spec.arrival).max(1.0))
                .collect();
            r.sort_by(|a, b| a.total_cmp(b));
            (o.policy, r)
        })
        .collect();
    curves.retain(|(_, r)| !r.is_empty());
    let lo = curves
        .iter()
        .map(|(_, r)| r[0])
        .fold(f64::INFINITY, f64::min)
        .max(1.0);
    let hi = curves
        .iter()
        .map(|(_, r)| r[r.len() - 1])
        .fold(1.0, f64::max);
    let (l0, l1) = (
        lo.log10().floor(),
        hi.log10().ceil().max(lo.log10().floor() + 1.0),
    );
    let mut s = frame(
        "response time distribution per policy",
        "response time (µs, log scale)",
        "share of kernels done",
    );
    let xl = |v: f64| x_of(v.log10() - l0, l1 - l0);
    let mut decade = l0;
    while decade <= l1 {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">1e{decade:.0}</text>",
            xl(10f64.powf(decade)),
            H - PAD + 14.0
        );
        decade += 1.0;
    }
    for (i, (name, r)) in curves.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let step = (r.len() / 400).max(1);
        let pts: Vec<String> = (0..r.len())
            .step_by(step)
            .chain(std::iter::once(r.len() - 1))
            .map(|j| {
                format!(
                    "{:.1},{:.1}",
                    xl(r[j]),
                    y_of((j + 1) as f64 / r.len() as f64)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" points=\"{}\"/>",
            pts.join(" ")
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{c}\">{}</text>",
            PAD + 10.0,
            PAD + 14.0 * (i + 1) as f64,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(kernel: usize, start: f64, end: f64) -> Interval {
        Interval {
            gpu: 0,
            kernel,
            start,
            end,
            share: 1.0,
        }
    }

    #[test]
    fn shares_split_intervals_across_buckets() {
        // One GPU, [0, 100) in 4 buckets; kernel 0 runs 0..50, kernel 1 runs 50..100.
        let s = share_over_time(
            &[iv(0, 0.0, 50.0), iv(1, 50.0, 100.0)],
            |k| k,
            2,
            1,
            (0.0, 100.0),
            4,
        );
        assert_eq!(s[0], vec![1.0, 1.0, 0.0, 0.0]);
        assert_eq!(s[1], vec![0.0, 0.0, 1.0, 1.0]);
        // A piece across a bucket boundary counts in both, by length (two GPUs: half).
        let s = share_over_time(&[iv(0, 10.0, 40.0)], |k| k, 1, 2, (0.0, 100.0), 4);
        let want = [0.3, 0.3, 0.0, 0.0];
        for (got, want) in s[0].iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
    }

    #[test]
    fn shares_never_exceed_one_per_bucket() {
        let ivs: Vec<Interval> = (0..50)
            .map(|k| iv(k % 3, k as f64 * 7.0, k as f64 * 7.0 + 7.0))
            .collect();
        let s = share_over_time(&ivs, |k| k, 3, 1, (0.0, 350.0), 10);
        let totals = (0..10).map(|b| s.iter().map(|row| row[b]).sum::<f64>());
        for (b, total) in totals.enumerate() {
            assert!(total <= 1.0 + 1e-9, "bucket {b}: {total}");
        }
    }
}
