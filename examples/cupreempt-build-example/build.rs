// Transforms kernels/kernels.cu, compiles it to a fatbin (machine code for the usual GPUs, PTX
// for newer ones) and generates OUT_DIR/kernels.rs. The struct `Affine` of the kernels is
// `crate::Affine` in Rust (src/main.rs; the generated code checks that their layouts agree).
// In this repository, nvcc is the one scripts/test.sh installs when CUPREEMPT_NVCC is not set.
fn main() {
    let mut b = cupreempt_build::Build::new();
    b.file("kernels/kernels.cu")
        .instantiate("scale_by<float>")
        .param_type("Affine", "crate::Affine");
    if std::env::var_os("CUPREEMPT_NVCC").is_none() {
        let venv =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/nvcc-venv/lib");
        let found = std::fs::read_dir(&venv).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path().join("site-packages/nvidia/cu13/bin/nvcc"))
                .find(|p| p.is_file())
        });
        if let Some(nvcc) = found {
            b.nvcc(&nvcc);
        }
    }
    if let Err(e) = b.compile("kernels") {
        panic!("{e}");
    }
}
