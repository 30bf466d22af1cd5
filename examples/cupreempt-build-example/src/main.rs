//! cupreempt-build example: runs SAXPY, a 2-D blend, an instance of a template kernel and a
//! kernel that takes a struct through the launchers that build.rs generated, preempts each mid-run, resumes it, and checks every
//! element against the host.
//! Without a CUDA driver it says so and exits 0.

use cudarc::driver::sys;
use cupreempt_runtime::rt::{self, LaunchConfig, Runtime, StreamRef, Target};

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// The kernels' `struct Affine`, field for field (build.rs: `Build::param_type`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Affine {
    scale: f32,
    shift: f32,
    n: i32,
}

fn check(call: &str, r: sys::CUresult) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {r:?}"))
    }
}

/// Device memory holding `data`.
fn upload(data: &[f32]) -> Result<u64, String> {
    let mut p = 0;
    check("cuMemAlloc", unsafe {
        sys::cuMemAlloc_v2(&mut p, data.len() * 4)
    })?;
    check("cuMemcpyHtoD", unsafe {
        sys::cuMemcpyHtoD_v2(p, data.as_ptr().cast(), data.len() * 4)
    })?;
    Ok(p)
}

fn download(p: u64, n: usize) -> Result<Vec<f32>, String> {
    let mut v = vec![0f32; n];
    check("cuMemcpyDtoH", unsafe {
        sys::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), p, n * 4)
    })?;
    Ok(v)
}

/// Deterministic pseudo-random floats.
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 10_000) as f32 / 97.0
        })
        .collect()
}

/// Preempts `k` on every SM, waits until it has yielded, reports its progress, resumes it and
/// waits for the end.
fn preempt_and_resume(name: &str, k: &mut rt::Kernel) -> Result<(), String> {
    let e = |e: rt::Error| format!("{name}: {e}");
    k.preempt(Target::All).map_err(e)?;
    k.wait_yielded().map_err(e)?;
    let p = k.progress().map_err(e)?;
    println!(
        "{name}: preempted at {} of {} tasks, resumed",
        p.done, p.total
    );
    k.resume(Target::All).map_err(e)?;
    k.wait().map_err(e)
}

fn run() -> Result<(), String> {
    let rt = Runtime::new(0).map_err(|e| e.to_string())?;
    let kernels = Kernels::load(&rt).map_err(|e| e.to_string())?;

    let n = 1 << 26;
    let (x, y) = (random(n, 7), random(n, 11));
    let (dx, dy) = (upload(&x)?, upload(&y)?);
    let cfg = LaunchConfig::new([(n as u32).div_ceil(256), 1, 1], [256, 1, 1], 0);
    let mut k = kernels
        .saxpy(
            &rt,
            &cfg,
            StreamRef::legacy_default(),
            n as i32,
            2.5,
            dx,
            dy,
        )
        .map_err(|e| e.to_string())?;
    preempt_and_resume("saxpy", &mut k)?;
    let out = download(dy, n)?;
    if let Some(i) = (0..n).find(|&i| out[i] != 2.5f32.mul_add(x[i], y[i])) {
        return Err(format!(
            "saxpy: y[{i}] = {}, expected {}",
            out[i],
            2.5f32.mul_add(x[i], y[i])
        ));
    }
    println!("saxpy: {n} elements exact");

    let (w, h) = (4096usize, 4096usize);
    let (a, b) = (random(w * h, 3), random(w * h, 5));
    let (da, db, dout) = (upload(&a)?, upload(&b)?, upload(&vec![f32::NAN; w * h])?);
    let cfg = LaunchConfig::new(
        [(w as u32).div_ceil(32), (h as u32).div_ceil(8), 1],
        [32, 8, 1],
        0,
    );
    let t = 0.25f32;
    let mut k = kernels
        .blend2d(
            &rt,
            &cfg,
            StreamRef::legacy_default(),
            da,
            db,
            dout,
            w as i32,
            h as i32,
            t,
        )
        .map_err(|e| e.to_string())?;
    preempt_and_resume("blend2d", &mut k)?;
    let out = download(dout, w * h)?;
    let want = |i: usize| t.mul_add(b[i], (1.0 - t) * a[i]);
    if let Some(i) = (0..w * h).find(|&i| out[i] != want(i)) {
        return Err(format!(
            "blend2d: out[{i}] = {}, expected {}",
            out[i],
            want(i)
        ));
    }
    println!("blend2d: {w}x{h} elements exact");

    // The template's instance that build.rs asked for (Build::instantiate).
    let v = random(n, 13);
    let dv = upload(&v)?;
    let cfg = LaunchConfig::new([(n as u32).div_ceil(256), 1, 1], [256, 1, 1], 0);
    let mut k = kernels
        .scale_by_float(&rt, &cfg, StreamRef::legacy_default(), dv, 0.5, n as i32)
        .map_err(|e| e.to_string())?;
    preempt_and_resume("scale_by<float>", &mut k)?;
    let out = download(dv, n)?;
    if let Some(i) = (0..n).find(|&i| out[i] != v[i] * 0.5) {
        return Err(format!(
            "scale_by<float>: v[{i}] = {}, expected {}",
            out[i],
            v[i] * 0.5
        ));
    }
    println!("scale_by<float>: {n} elements exact");

    // A struct by value (Build::param_type).
    let v = random(n, 17);
    let dv = upload(&v)?;
    let p = Affine {
        scale: 1.5,
        shift: -2.0,
        n: n as i32,
    };
    let mut k = kernels
        .affine(&rt, &cfg, StreamRef::legacy_default(), p, dv)
        .map_err(|e| e.to_string())?;
    preempt_and_resume("affine", &mut k)?;
    let out = download(dv, n)?;
    let want = |i: usize| p.scale.mul_add(v[i], p.shift);
    if let Some(i) = (0..n).find(|&i| out[i] != want(i)) {
        return Err(format!("affine: v[{i}] = {}, expected {}", out[i], want(i)));
    }
    println!("affine: {n} elements exact");
    Ok(())
}

fn main() -> std::process::ExitCode {
    if !rt::driver_available() {
        println!("cupreempt-build-example: SKIPPED, no CUDA driver on this machine");
        return std::process::ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => {
            println!("PASS");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cupreempt-build-example: FAIL: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    /// The example on the GPU, from `cargo test`; says so where there is no driver.
    #[test]
    fn launches_preempts_resumes_and_checks_on_the_gpu() {
        if !super::rt::driver_available() {
            eprintln!("cupreempt-build-example: SKIPPED, no CUDA driver on this machine");
            return;
        }
        super::run().unwrap_or_else(|e| panic!("{e}"));
    }
}
