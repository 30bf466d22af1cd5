//! Whether a kernel gets the second wrapper held to 32 registers (`K__cupreempt_r32`).
//!
//! `launch.cuh` launches the capped wrapper only where the original kernel needs at most 32
//! registers. For a kernel that surely needs more, the capped wrapper is never launched, yet
//! ptxas still compiles it, with the body's whole state spilled: for a tensor-core GEMM of the
//! CUDA samples (146 registers) the capped wrapper was 903 KB of the module's 1.26 MB, where the
//! original kernel is 118 KB. With lazy module loading (CUDA's default) the first use of any
//! kernel of the module loads the image, and that grew the program's first timed launch from
//! 2.2 to 4.8 ms (H100, 2026-11-23; with `CUDA_MODULE_LOADING=EAGER` both ran 0.92–1.0 ms).
//!
//! A kernel surely needs more than 32 registers when its body (or a helper of the file it
//! calls) does tensor-core matrix arithmetic: a warp-level matrix fragment alone holds 4–32
//! registers per thread, and an accumulator tile several fragments.

/// Names whose use means tensor-core matrix operations (the WMMA API, `mma`/`wgmma`/`ldmatrix`
/// in inline PTX).
const TENSOR_CORE_MARKS: &[&str] = &[
    "wmma::",
    "mma_sync",
    "load_matrix_sync",
    "store_matrix_sync",
    "mma.sync",
    "wgmma.",
    "ldmatrix",
];

/// Whether `text` (a function body) shows tensor-core matrix arithmetic.
pub fn tensor_core(text: &str) -> bool {
    TENSOR_CORE_MARKS.iter().any(|m| text.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wmma_and_inline_mma_are_tensor_core() {
        assert!(tensor_core(
            "wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;"
        ));
        assert!(tensor_core("using namespace nvcuda; mma_sync(d, a, b, c);"));
        assert!(tensor_core(
            r#"asm volatile("mma.sync.aligned.m16n8k16.row.col" : ...);"#
        ));
        assert!(!tensor_core(
            "c[i] = a[i] * b[i] + c[i]; // a dot product, no matrices"
        ));
    }
}
