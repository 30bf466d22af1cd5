//! The runtime's host path on a stand-in driver (`tests/driver_stub/driver_stub.c`), no GPU
//! needed: which driver calls a preemptible launch makes once the runtime is warm, and how much
//! host time the runtime spends around them.
//!
//! The test compiles the stub into a `libcuda.so` with the system's C compiler and runs its
//! own binary again as a child, with that library first on `LD_LIBRARY_PATH`, so that the
//! runtime (cudarc loads libcuda at run time) drives the stub. The child plans, launches and
//! releases `LAUNCHES` launches of a 100,000-block grid through the C ABI the launch shim
//! calls, and prints the driver calls per steady-state launch and the host time per launch
//! (the stub's calls cost tens of nanoseconds, so the time is the runtime's own). The parent
//! checks the calls; the time is printed, never asserted (docs/runtime.md, "Launch cost").

use cupreempt_runtime::control::HostMirror;
use cupreempt_runtime::LaunchParams;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::mem::offset_of;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const CHILD: &str = "CUPREEMPT_HOST_PATH_CHILD";
/// Launches before the ones counted: the runtime's setup, slabs of control blocks, pools.
const WARMUP: usize = 2_000;
/// Launches counted and timed.
const LAUNCHES: usize = 20_000;

// The C ABI the launch shim calls, as the shim calls it.
use cupreempt_runtime::rt::capi::{
    cupreempt_rt_context_id, cupreempt_rt_last_error, cupreempt_rt_launch_planned,
    cupreempt_rt_plan,
};

/// Builds the stub as `DIR/libcuda.so` with `$CC` (default `cc`).
fn build_stub(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/driver_stub/driver_stub.c");
    std::fs::create_dir_all(dir).expect("stub directory");
    let lib = dir.join("libcuda.so");
    // Written under another name and renamed: a child of another test binary run may be
    // loading the library meanwhile.
    let building = dir.join(format!("libcuda.so.{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-o"])
        .arg(&building)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("this test needs a C compiler ({cc}): {e}"));
    assert!(
        out.status.success(),
        "{cc} failed on the driver stub:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&building, &lib).expect("the stub in place");
    lib
}

/// The stub's call counters, from the libcuda the runtime loaded (the same library: a second
/// dlopen of a loaded name returns it).
struct Counts {
    lib: libloading::Library,
}

impl Counts {
    fn open() -> Self {
        // SAFETY: the stub's constructors do nothing.
        let lib = unsafe { libloading::Library::new("libcuda.so") }.expect("the stub libcuda");
        Counts { lib }
    }

    fn calls(&self, name: &str) -> u64 {
        let name = CString::new(name).expect("name");
        // SAFETY: the stub exports this function with this signature.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(*const c_char) -> u64> = self
                .lib
                .get(b"cupreempt_stub_calls\0")
                .expect("a stub libcuda");
            f(name.as_ptr())
        }
    }

    /// Every call the stub has.
    fn names(&self) -> Vec<String> {
        // SAFETY: the stub exports this function with this signature; it returns static
        // strings, then null.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(c_uint) -> *const c_char> = self
                .lib
                .get(b"cupreempt_stub_call_name\0")
                .expect("a stub libcuda");
            (0..)
                .map(|i| f(i))
                .take_while(|p| !p.is_null())
                .map(|p| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
                .collect()
        }
    }

    fn reset(&self) {
        self.call(b"cupreempt_stub_reset\0");
    }

    /// The stub's context gets a new id at the same address, as a reset device's does.
    fn replace_context(&self) {
        self.call(b"cupreempt_stub_replace_context\0");
    }

    /// Calls the stub's function `name` (NUL-terminated), which takes and returns nothing.
    fn call(&self, name: &[u8]) {
        // SAFETY: the stub exports `name` with this signature.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn()> =
                self.lib.get(name).expect("a stub libcuda");
            f()
        }
    }
}

fn last_error() -> String {
    // SAFETY: the runtime returns a NUL-terminated string of this thread.
    unsafe { std::ffi::CStr::from_ptr(cupreempt_rt_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// One planned and launched launch, released at once, as the shim makes it; panics on any status but OK.
fn launch(original: *mut c_void, wrapper: *mut c_void, args: &[*const c_void], sizes: &[usize]) {
    launch_in(42, original, wrapper, args, sizes);
}

/// `launch` in the context whose key (`cupreempt_rt_context_id`) is `context`.
fn launch_in(
    context: u64,
    original: *mut c_void,
    wrapper: *mut c_void,
    args: &[*const c_void],
    sizes: &[usize],
) {
    let grid = [100_000u32, 1, 1];
    let block = [256u32, 1, 1];
    let stream = std::ptr::null_mut();
    // The key by which the shim keeps the functions it looked up (the stub's context id + 1).
    assert_eq!(cupreempt_rt_context_id(), context);
    // SAFETY: the pointers live across the calls; the stub takes any non-null function.
    unsafe {
        let plan = cupreempt_rt_plan(original, grid.as_ptr(), block.as_ptr(), 0, stream);
        assert_eq!(plan, 0, "plan: {plan} {}", last_error());
        // No handle: the shim's launches are released at once (a null `out`).
        let r = cupreempt_rt_launch_planned(
            wrapper,
            original,
            grid.as_ptr(),
            block.as_ptr(),
            0,
            stream,
            args.as_ptr(),
            sizes.as_ptr(),
            args.len(),
            0,
            0,
            std::ptr::null_mut(),
        );
        assert_eq!(r, 0, "launch: {}", last_error());
    }
}

/// What a child prints: each driver call's count per launch (`@@calls NAME N`) and the host
/// time per launch (`@@host_ns_per_launch NS`), for the `LAUNCHES` after the warm-up.
fn report(counts: &Counts, elapsed: std::time::Duration) {
    for name in counts.names() {
        let c = counts.calls(&name);
        if c > 0 {
            println!("\n@@calls {name} {:.4}", c as f64 / LAUNCHES as f64);
        }
    }
    let per_launch_ns = elapsed.as_nanos() as f64 / LAUNCHES as f64;
    println!("\n@@host_ns_per_launch {per_launch_ns:.0}");
}

/// Two distinct non-null handles that stand for an original kernel and its wrapper.
fn handles() -> (*mut c_void, *mut c_void) {
    let h: &'static mut [u64; 2] = Box::leak(Box::new([0; 2]));
    let original = (&mut h[0] as *mut u64).cast::<c_void>();
    let wrapper = (&mut h[1] as *mut u64).cast::<c_void>();
    (original, wrapper)
}

/// The child of `preemptible_launch_on_a_stub_driver`: planned, launched and released.
fn preemptible_child(counts: &Counts) {
    let (original, wrapper) = handles();
    let (x, n) = (0x7000_0000u64, 1u32 << 20);
    let args = [
        (&x as *const u64).cast::<c_void>(),
        (&n as *const u32).cast::<c_void>(),
    ];
    let sizes = [8usize, 4];
    for _ in 0..WARMUP {
        launch(original, wrapper, &args, &sizes);
    }
    counts.reset();
    let t = Instant::now();
    for _ in 0..LAUNCHES {
        launch(original, wrapper, &args, &sizes);
    }
    report(counts, t.elapsed());
}

/// The child of `unscheduled_plans_make_no_driver_call`: plans alone, each answered "the
/// original kernel" (the shim then launches it as written).
fn unscheduled_child(counts: &Counts) {
    let (original, _) = handles();
    let (grid, block) = ([100_000u32, 1, 1], [256u32, 1, 1]);
    let plan = || {
        // SAFETY: the pointers live across the call; the stub takes any non-null function.
        let r = unsafe {
            cupreempt_rt_plan(
                original,
                grid.as_ptr(),
                block.as_ptr(),
                0,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(r, RUN_ORIGINAL, "plan: {r} {}", last_error());
    };
    for _ in 0..WARMUP {
        plan();
    }
    counts.reset();
    let t = Instant::now();
    for _ in 0..LAUNCHES {
        plan();
    }
    report(counts, t.elapsed());
}

/// Less than one call per thousand launches is a one-time event caught while counting (a new
/// slab of control blocks, the setup thread's work at load), not a launch's.
const RARE: f64 = 0.001;

/// `CUPREEMPT_RUN_ORIGINAL` (runtime.h).
const RUN_ORIGINAL: c_int = 9;

/// Runs this test binary's test `test` as the stub's child with `env`, and returns its
/// driver calls per launch, its host time per launch and its output.
fn run_child(test: &str, env: &[(&str, String)]) -> (Vec<(String, f64)>, String, String) {
    // Built once for the tests of this process, which run at once: a library rewritten while
    // another child loads it would fail that child.
    static STUB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = STUB.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("driver_stub");
        build_stub(&dir);
        dir
    });
    let ld = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", dir.display()),
        _ => dir.display().to_string(),
    };
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", ld);
    for var in [
        "CUPREEMPT_PREEMPTIBLE",
        "CUPREEMPT_SHORT_US",
        "CUPREEMPT_SETUP",
        "CUPREEMPT_SCHEDULER",
        "CUPREEMPT_CHAOS",
        "CUPREEMPT_OVERLAP",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let calls = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("@@calls "))
        .filter_map(|l| {
            let (name, n) = l.split_once(' ')?;
            Some((name.to_string(), n.parse().ok()?))
        })
        .collect();
    let host_ns = stdout
        .lines()
        .find_map(|l| l.strip_prefix("@@host_ns_per_launch "))
        .unwrap_or("?")
        .to_string();
    // CUPREEMPT_TRACE_LAUNCH=1 (inherited) makes the child print each step's time at exit.
    if !stderr.trim().is_empty() {
        println!("child's stderr:\n{stderr}");
    }
    (calls, host_ns, stdout)
}

/// Without a scheduler (rule 7) a plan answers at once, before any driver call: the program's
/// launch then costs what it costs as written, plus the plan's host time.
#[test]
fn unscheduled_plans_make_no_driver_call() {
    if std::env::var_os(CHILD).is_some() {
        unscheduled_child(&Counts::open());
        return;
    }
    let (calls, host_ns, stdout) = run_child("unscheduled_plans_make_no_driver_call", &[]);
    println!("host time per unscheduled plan (stub driver): {host_ns} ns");
    // The runtime's setup thread asks the driver a few things once, at load, and may do so
    // while the child counts: less than one call per thousand plans is that, not the plans.
    assert!(
        calls.iter().all(|(_, n)| *n < RARE),
        "driver calls per plan: {calls:?}\n{stdout}"
    );
    assert_ne!(host_ns, "?", "{stdout}");
}

/// The environment of a child that launches preemptible, as the shim does.
fn preemptible_env() -> Vec<(&'static str, String)> {
    vec![
        ("CUPREEMPT_PREEMPTIBLE", "1".into()),
        ("CUPREEMPT_SHORT_US", "0".into()),
        ("CUPREEMPT_SETUP", "wait".into()),
        (
            "CUPREEMPT_STUB_HOST_OFFSET",
            offset_of!(LaunchParams, host).to_string(),
        ),
        (
            "CUPREEMPT_STUB_RUN_NS_OFFSET",
            offset_of!(HostMirror, run_ns).to_string(),
        ),
    ]
}

/// A slab's zeroing copy that is still running when its first launches come (the stub keeps
/// the zeroing's event not ready): the stream is made to wait for it once, and the slab's
/// later launches on that stream neither ask about the copy again nor wait again.
#[test]
fn a_zeroing_still_running_is_waited_for_once_per_stream() {
    if std::env::var_os(CHILD).is_some() {
        preemptible_child(&Counts::open());
        return;
    }
    let mut env = preemptible_env();
    env.push(("CUPREEMPT_STUB_ZEROING_PENDING", "1".into()));
    let (calls, _, stdout) = run_child(
        "a_zeroing_still_running_is_waited_for_once_per_stream",
        &env,
    );
    let per = |name: &str| {
        calls
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |&(_, c)| c)
    };
    // One slab of 16 slots, zeroed every 16 launches: one wait for each zeroing.
    let waits = per("cuStreamWaitEvent");
    assert!(
        (waits - 1.0 / 16.0).abs() < RARE,
        "{waits} waits per launch\n{stdout}"
    );
    // The wait's query and the drained check's, per zeroing.
    assert!(per("cuEventQuery") < 2.0 / 16.0 + RARE, "{stdout}");
}

/// The key by which launch sites keep the functions they looked up (`cupreempt_rt_context_id`)
/// is the context's id, not its address: a reset device's new primary context may have the old
/// address, and its functions are new.
#[test]
fn the_context_key_changes_with_the_context_at_the_same_address() {
    if std::env::var_os(CHILD).is_some() {
        let stub = Counts::open();
        assert_eq!(cupreempt_rt_context_id(), 42);
        assert_eq!(cupreempt_rt_context_id(), 42);
        stub.replace_context();
        assert_eq!(cupreempt_rt_context_id(), 43);
        println!("\n@@checked");
        return;
    }
    let (_, _, stdout) = run_child(
        "the_context_key_changes_with_the_context_at_the_same_address",
        &[],
    );
    assert!(stdout.contains("@@checked"), "{stdout}");
}

/// A reset device's new primary context at the old address (the stub's context replaced)
/// gets a runtime of its own: new streams and control blocks, where reusing the old runtime's
/// would use handles and memory of a context that is gone (the H100 then failed in
/// `cuEventQuery` and crashed reading pinned memory the reset had freed). The old runtime frees
/// and destroys nothing: its handles and addresses may be the new context's, the program's.
#[test]
fn a_context_replaced_at_the_same_address_gets_a_runtime_of_its_own() {
    if std::env::var_os(CHILD).is_some() {
        let stub = Counts::open();
        let (original, wrapper) = handles();
        let (x, n) = (0x7000_0000u64, 1u32 << 20);
        let args = [
            (&x as *const u64).cast::<c_void>(),
            (&n as *const u32).cast::<c_void>(),
        ];
        for _ in 0..100 {
            launch(original, wrapper, &args, &[8, 4]);
        }
        let slabs = stub.calls("cuMemAlloc_v2");
        stub.replace_context();
        stub.reset();
        for _ in 0..100 {
            launch_in(43, original, wrapper, &args, &[8, 4]);
        }
        println!(
            "\n@@replaced slabs_before {slabs} allocs {} frees {} host_frees {} streams_made {} destroyed {}",
            stub.calls("cuMemAlloc_v2"),
            stub.calls("cuMemFree_v2"),
            stub.calls("cuMemFreeHost"),
            stub.calls("cuStreamCreateWithPriority"),
            stub.calls("cuStreamDestroy_v2"),
        );
        return;
    }
    let (_, _, stdout) = run_child(
        "a_context_replaced_at_the_same_address_gets_a_runtime_of_its_own",
        &preemptible_env(),
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("@@replaced "))
        .unwrap_or_else(|| panic!("no report\n{stdout}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let count = |name: &str| -> u64 {
        let at = words.iter().position(|w| *w == name).expect(name);
        words[at + 1].parse().expect("a count")
    };
    assert!(count("slabs_before") >= 1, "{line}");
    // The new runtime's first slab and streams.
    assert!(count("allocs") >= 1, "{line}");
    assert!(count("streams_made") >= 1, "{line}");
    // Nothing of the old one freed or destroyed.
    assert_eq!(count("frees"), 0, "{line}");
    assert_eq!(count("host_frees"), 0, "{line}");
    assert_eq!(count("destroyed"), 0, "{line}");
}

#[test]
fn preemptible_launch_on_a_stub_driver() {
    if std::env::var_os(CHILD).is_some() {
        let counts = Counts::open();
        assert_ne!(
            counts.calls("cuInit"),
            u64::MAX,
            "the libcuda loaded is not the stub"
        );
        preemptible_child(&counts);
        return;
    }
    let (calls, host_ns, stdout) =
        run_child("preemptible_launch_on_a_stub_driver", &preemptible_env());
    println!("driver calls per steady-state preemptible launch (stub driver):");
    for (name, n) in &calls {
        println!("  {name:<44} {n:.4}");
    }
    println!("host time per launch, the runtime's own (stub driver): {host_ns} ns");
    let per = |name: &str| {
        calls
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0.0, |&(_, c)| c)
    };
    // The driver calls a warm preemptible launch may make, at most this many per launch on
    // average. Each is there for a reason (docs/runtime.md, "Launch cost"); a new one, or
    // more of one, fails here: a driver call costs the launching thread 0.05-1 us.
    let budget: &[(&str, f64)] = &[
        // The wrapper's launch, overlapping the kernel before it (the stub's wrapper has
        // today's launch parameters and PTX 9.0).
        ("cuLaunchKernelEx", 1.0),
        // The context: the shim's key for the functions it looked up, the plan's, the launch's
        // and the runtime's current-context checks; the first three with the context's id
        // (contexts are told apart by it: a reset device's new context may have the old address).
        ("cuCtxGetCurrent", 4.0),
        ("cuCtxGetId", 3.0),
        // The plan's capture query (a capture forbids what the runtime does).
        ("cuStreamIsCapturing", 1.0),
        // The end event, and every 16 launches a slab's zeroing event, each with its stream's
        // id (the drained check's order of records). The launch asks for its stream's id
        // once, for the end event and for the slab's zeroing check (a stream already made to
        // wait for the zeroing is not asked about it again).
        ("cuEventRecord", 1.0 + 1.0 / 16.0),
        ("cuStreamGetId", 1.0 + 1.0 / 16.0),
        // Every 16 launches: the slab's zeroing copy and its drained check.
        ("cuMemcpyHtoDAsync_v2", 1.0 / 16.0),
        ("cuEventQuery", 2.0 / 16.0),
    ];
    for (name, n) in &calls {
        let allowed = budget
            .iter()
            .find(|(b, _)| b == name)
            .map_or(0.0, |&(_, a)| a);
        assert!(
            *n < allowed + RARE,
            "{name}: {n} calls per launch, at most {allowed} expected\n{stdout}"
        );
    }
    // The launch itself happened, once per launch.
    assert_eq!(
        per("cuLaunchKernelEx") + per("cuLaunchKernel"),
        1.0,
        "{stdout}"
    );
}
