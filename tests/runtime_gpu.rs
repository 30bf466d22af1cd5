//! On a machine with an NVIDIA GPU: the runtime's Rust API (cupreempt_runtime::rt) launches,
//! preempts and resumes a transformed kernel loaded from PTX. Checked: output and every task
//! exactly once after temporal and spatial preemptions and a storm of 1000+ preempt/resume
//! cycles; stream order (work enqueued after the kernel waits while it is preempted); errors
//! (double resume, double preempt, invalid configuration); a handle dropped while preempted.
//! Without a CUDA driver the test says so and does nothing.

mod support;

use cudarc::driver::sys;
use cupreempt_runtime::rt::{
    self, Error, Function, Kernel, KernelArgs, LaunchConfig, Runtime, StreamRef, Target,
};
use cupreempt_runtime::{ControlBlock, SmSet};
use std::ffi::c_void;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Seconds (since the test started) of the last sign of progress, and the scenario running.
static PROGRESS_AT: AtomicU64 = AtomicU64::new(0);
static SCENARIO: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
/// The call the scenario is in, for the watchdog's report.
static STEP: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

fn step(what: String) {
    *STEP.lock().unwrap_or_else(|p| p.into_inner()) = what;
}

/// How long the test may go without progress before the watchdog calls it a hang.
const HANG_S: u64 = 60;

fn tick(started: Instant) {
    PROGRESS_AT.store(started.elapsed().as_secs(), Ordering::Relaxed);
}

/// Fails the whole process (a blocked call cannot be interrupted) once no scenario has made
/// progress for `HANG_S`: a hang reads as a failure that names the scenario, not as a run
/// that never ends.
fn watchdog(started: Instant) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let idle = started.elapsed().as_secs() - PROGRESS_AT.load(Ordering::Relaxed);
        if idle >= HANG_S {
            let name = SCENARIO.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let _ = writeln!(
                std::io::stderr(),
                "runtime_gpu: FAIL {name}: no progress for {idle} s (a hang), in: {}",
                STEP.lock().unwrap_or_else(|p| p.into_inner())
            );
            std::process::exit(101);
        }
    });
}

fn test_clock() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

fn ck(call: &str, r: sys::CUresult) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{call}");
}

struct Buf {
    ptr: u64,
    words: usize,
}

impl Buf {
    fn new(words: usize) -> Buf {
        let mut ptr = 0;
        ck("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut ptr, words * 4)
        });
        Buf { ptr, words }
    }
    fn fill(&self, v: u32, s: sys::CUstream) {
        ck("cuMemsetD32Async", unsafe {
            sys::cuMemsetD32Async(self.ptr, v, self.words, s)
        });
    }
    /// Read on a stream of its own, so that it never waits for the application's stream.
    fn read(&self, side: sys::CUstream) -> Vec<u32> {
        let mut v = vec![0u32; self.words];
        unsafe {
            ck(
                "cuMemcpyDtoHAsync",
                sys::cuMemcpyDtoHAsync_v2(v.as_mut_ptr().cast(), self.ptr, self.words * 4, side),
            );
            ck("cuStreamSynchronize", sys::cuStreamSynchronize(side));
        }
        v
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// An ordinary (untransformed) kernel launch on a 1-D grid, straight through the driver.
fn launch_plain(f: &Function, grid: u32, block: u32, s: sys::CUstream, params: &mut [*mut c_void]) {
    ck("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            f.raw(),
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    });
}

fn stream() -> sys::CUstream {
    let mut s = std::ptr::null_mut();
    ck("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
    });
    s
}

fn stream_idle(s: sys::CUstream) -> bool {
    unsafe { sys::cuStreamQuery(s) == sys::CUresult::CUDA_SUCCESS }
}

/// Waits for `s` for at most `limit`: a hang is a failure, not a stuck test.
fn sync_within(s: sys::CUstream, limit: Duration) -> Result<(), String> {
    let t = Instant::now();
    while !stream_idle(s) {
        if t.elapsed() > limit {
            return Err(format!("stream still busy after {limit:?}"));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(())
}

struct Setup {
    rt: Runtime,
    spin: Function,
    /// spin_fill's wrapper with the first parameter of headers older than
    /// `cupreempt_launch.launch_version` (tests/gpu/runtime_kernels.cu).
    spin_older_headers: Function,
    spin_original: Function,
    copy: Function,
    side: sys::CUstream,
    /// The scenarios' module as PTX, for a thread that loads it again.
    ptx: Vec<u8>,
}

/// One spin_fill launch with its buffers, and what it must produce.
struct Job {
    out: Buf,
    runs: Buf,
    snap: Buf,
    grid: [u32; 3],
    block: u32,
    stream: sys::CUstream,
    /// Gated links of each launch (LaunchConfig::links).
    links: u32,
}

const POISON: u32 = 0xdeadbeef;

/// spin_fill's `runs[task]`: the times the task ran (low 16 bits), plus the SMs it ran on
/// (above them; one run: its SM).
fn times_run(r: u32) -> u32 {
    r & 0xffff
}
fn sm_of(r: u32) -> u32 {
    r >> 16
}

impl Job {
    fn new(grid: [u32; 3], block: u32) -> Job {
        let tasks = grid.iter().product::<u32>() as usize;
        Job {
            out: Buf::new(tasks * block as usize),
            runs: Buf::new(tasks),
            snap: Buf::new(tasks * block as usize),
            grid,
            block,
            stream: stream(),
            links: 0,
        }
    }

    /// Two jobs of `first` and `second` tasks of 64 threads on one stream, their outputs
    /// poisoned there before either is launched: fills between the two kernels would keep
    /// them apart, and on another stream they would wait for SMs until the first kernel's end.
    fn back_to_back(first: u32, second: u32) -> (Job, Job) {
        let a = Job::new([first, 1, 1], 64);
        let b = Job {
            stream: a.stream,
            ..Job::new([second, 1, 1], 64)
        };
        a.poison(a.stream);
        b.poison(a.stream);
        (a, b)
    }

    /// Poisons the outputs, launches spin_fill, then (as the application's next work on the
    /// same stream) copy_words into `snap`.
    fn launch(&self, g: &Setup, spin_ns: u64) -> Result<Kernel, Error> {
        self.launch_kept_off(g, spin_ns, None)
    }

    /// As `launch`, the kernel kept off the SMs `off` from its start.
    fn launch_kept_off(
        &self,
        g: &Setup,
        spin_ns: u64,
        off: Option<&SmSet>,
    ) -> Result<Kernel, Error> {
        self.snap.fill(POISON, self.stream);
        self.poison(self.stream);
        let k = self.launch_spin(g, spin_ns, off)?;
        let n = self.out.words as u32;
        let (mut src, mut dst, mut n) = (self.out.ptr, self.snap.ptr, n);
        let mut params = [
            (&mut src as *mut u64).cast(),
            (&mut dst as *mut u64).cast(),
            (&mut n as *mut u32).cast(),
        ];
        launch_plain(&g.copy, 264, 256, self.stream, &mut params);
        Ok(k)
    }

    fn expected(&self) -> Vec<u32> {
        let tasks = self.grid.iter().product::<u32>();
        (0..tasks)
            .flat_map(|t| {
                (0..self.block).map(move |i| t.wrapping_mul(2654435761) ^ i.wrapping_mul(40503))
            })
            .map(|v| v ^ self.grid[1])
            .collect()
    }

    /// After the stream is idle: output, the copy made after the kernel, and exactly-once.
    fn check(&self, g: &Setup) -> Result<(), String> {
        self.check_output(g)?;
        let want = self.expected();
        let snap = self.snap.read(g.side);
        if let Some(i) = (0..want.len()).find(|&i| snap[i] != want[i]) {
            return Err(format!(
                "stream order broken: the copy enqueued after the kernel saw snap[{i}] = {:#x}",
                snap[i]
            ));
        }
        Ok(())
    }

    /// After the stream is idle: the kernel's output, and each task run exactly once.
    fn check_output(&self, g: &Setup) -> Result<(), String> {
        let want = self.expected();
        let out = self.out.read(g.side);
        if let Some(i) = (0..want.len()).find(|&i| out[i] != want[i]) {
            return Err(format!("out[{i}] = {:#x}, expected {:#x}", out[i], want[i]));
        }
        let runs = self.runs.read(g.side);
        if let Some(t) = runs.iter().position(|&r| times_run(r) != 1) {
            return Err(format!("task {t} ran {} times", times_run(runs[t])));
        }
        Ok(())
    }

    /// Poisons spin_fill's output and clears its run counts, on stream `s`.
    fn poison(&self, s: sys::CUstream) {
        self.out.fill(POISON, s);
        self.runs.fill(0, s);
    }

    /// Launches spin_fill on the job's stream, nothing before or after it, kept off the SMs
    /// `off` from its start.
    fn launch_spin(&self, g: &Setup, spin_ns: u64, off: Option<&SmSet>) -> Result<Kernel, Error> {
        self.launch_wrapper(g, &g.spin, spin_ns, off)
    }

    /// As `launch_spin`, through `wrapper` (spin_fill's or one of its kind).
    fn launch_wrapper(
        &self,
        g: &Setup,
        wrapper: &Function,
        spin_ns: u64,
        off: Option<&SmSet>,
    ) -> Result<Kernel, Error> {
        let mut args = KernelArgs::new();
        args.push(self.out.ptr).push(self.runs.ptr).push(spin_ns);
        g.rt.launch_kept_off(
            wrapper,
            &LaunchConfig {
                links: self.links,
                ..LaunchConfig::new(self.grid, [self.block, 1, 1], 0)
            },
            unsafe { StreamRef::from_raw(self.stream) },
            &args,
            off,
        )
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn plain(g: &Setup) -> Result<String, String> {
    let job = Job::new([300, 2, 1], 128);
    let t = Instant::now();
    let k = job.launch(g, 2_000).map_err(|e| e.to_string())?;
    let launch_us = t.elapsed().as_secs_f64() * 1e6;
    sync_within(job.stream, Duration::from_secs(10))?;
    job.check(g)?;
    let p = k.progress().map_err(|e| e.to_string())?;
    if p.done != p.total || p.total != 600 {
        return Err(format!("progress {p:?}"));
    }
    if !k.is_complete().map_err(|e| e.to_string())? {
        return Err("not complete after the stream went idle".into());
    }
    Ok(format!("launch call {launch_us:.0} us"))
}

fn temporal(g: &Setup) -> Result<String, String> {
    rt::set_event_timing(true); // for the GPU-side latency below
                                // About 2.4 ms on the H100 (4,224 resident blocks, 100 us tasks): 20,000 tasks (0.5 ms)
                                // sometimes ended before the preemption 300 us in.
    let job = Job::new([100_000, 1, 1], 64);
    let mut k = job.launch(g, 100_000).map_err(|e| e.to_string())?;
    if k.is_complete().map_err(|e| e.to_string())? {
        return Err("launch blocked the caller until the kernel was done".into());
    }
    std::thread::sleep(Duration::from_micros(300));
    let t = Instant::now();
    k.preempt(Target::All).map_err(|e| e.to_string())?;
    k.wait_yielded().map_err(|e| e.to_string())?;
    let host_us = t.elapsed().as_secs_f64() * 1e6;
    let gpu_us = k
        .last_yield_latency_ms()
        .map_err(|e| e.to_string())?
        .unwrap_or(f32::NAN) as f64
        * 1e3;
    let p1 = k.progress().map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(20));
    let p2 = k.progress().map_err(|e| e.to_string())?;
    if p1.done != p2.done {
        return Err(format!(
            "tasks ran while preempted: {} then {}",
            p1.done, p2.done
        ));
    }
    if p1.done >= p1.total {
        return Err("finished before the preemption landed; make the kernel longer".into());
    }
    if !k.is_parked() {
        return Err("the first instance's last block is not parked while preempted".into());
    }
    if stream_idle(job.stream) {
        return Err("the application's stream went on while the kernel was preempted".into());
    }
    if job.snap.read(g.side).iter().any(|&w| w != POISON) {
        return Err("work enqueued after the kernel ran while it was preempted".into());
    }
    if k.wait() != Err(Error::AlreadyPreempted) {
        return Err("wait() on a preempted kernel must refuse".into());
    }
    k.resume(Target::All).map_err(|e| e.to_string())?;
    sync_within(job.stream, Duration::from_secs(20))?;
    job.check(g)?;
    Ok(format!(
        "preempted at {}/{} tasks; request->yielded {host_us:.0} us host, {gpu_us:.0} us GPU (100 us tasks)",
        p1.done, p1.total
    ))
}

/// Tasks per ms over a window of about 1 ms, and the progress at its end (done, total).
fn rate(k: &Kernel) -> Result<(f64, u64, u64), String> {
    let (t0, a) = (Instant::now(), k.progress().map_err(|e| e.to_string())?);
    std::thread::sleep(Duration::from_millis(1));
    let b = k.progress().map_err(|e| e.to_string())?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(((b.done - a.done) as f64 / ms, b.done, b.total))
}

fn spatial(g: &Setup) -> Result<String, String> {
    let sms = g.rt.limits().expect("device limits").sm_count;
    // About 5 ms at full speed on the H100 (32 blocks of 64 threads per SM, 100 us tasks): both
    // 1 ms windows below fall while tasks are left.
    let job = Job::new([200_000, 1, 1], 64);
    let mut k = job.launch(g, 100_000).map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_micros(300));
    let (full, _, _) = rate(&k)?;
    let even = SmSet::from_ids((0..sms).filter(|s| s % 2 == 0)).map_err(|e| e.to_string())?;
    k.preempt(Target::Sms(even)).map_err(|e| e.to_string())?;
    k.wait_yielded().map_err(|e| e.to_string())?;
    let p1 = k.progress().map_err(|e| e.to_string())?;
    let (half, done, total) = rate(&k)?;
    let p2 = k.progress().map_err(|e| e.to_string())?;
    // Both windows while tasks were left, or the rates say nothing.
    if done >= total {
        return Err(format!(
            "the kernel ended during the check ({done} of {total}): it proves nothing"
        ));
    }
    if half <= 0.0 {
        return Err(format!(
            "the odd SMs stopped too: {} then {}",
            p1.done, done
        ));
    }
    // The blocks on the even SMs left: the kernel works at about half its rate.
    if half > 0.75 * full {
        return Err(format!(
            "the even SMs kept working: {half:.0} tasks/ms while yielded, {full:.0} before"
        ));
    }
    k.resume(Target::Sms(even)).map_err(|e| e.to_string())?;
    if k.resume(Target::Sms(even)) != Err(Error::NotPreempted) {
        return Err("a double resume must be refused".into());
    }
    sync_within(job.stream, Duration::from_secs(20))?;
    job.check(g)?;
    Ok(format!(
        "{} of {} tasks done while the even SMs were yielded ({half:.0} tasks/ms, {full:.0} before)",
        p2.done - p1.done,
        p1.total
    ))
}

/// Launched kept off the even SMs from its start (a scheduler's standing order,
/// `Runtime::launch_kept_off`): no task may run there until they are resumed, also while the
/// command has not reached the control block: the runtime's command stream is held up by a
/// one-block kernel of 3 ms enqueued on it first, so for those 3 ms only what the launch
/// itself carries keeps its blocks off. Every task claimed before the resume was claimed by
/// a block on an odd SM; tasks are claimed in order, so those are all tasks below the
/// progress read before the resume.
fn kept_off(g: &Setup) -> Result<String, String> {
    let sms = g.rt.limits().expect("device limits").sm_count;
    let job = Job::new([200_000, 1, 1], 64);
    let even = SmSet::from_ids((0..sms).filter(|s| s % 2 == 0)).map_err(|e| e.to_string())?;
    let hold = Job::new([1, 1, 1], 64);
    let commands = g.rt.command_stream().map_err(|e| e.to_string())?;
    let (mut o, mut r, mut spin) = (hold.out.ptr, hold.runs.ptr, 3_000_000u64);
    let mut params = [
        (&mut o as *mut u64).cast(),
        (&mut r as *mut u64).cast(),
        (&mut spin as *mut u64).cast(),
    ];
    launch_plain(&g.spin_original, 1, 64, commands, &mut params);
    let launched = Instant::now();
    let mut k = job
        .launch_kept_off(g, 100_000, Some(&even))
        .map_err(|e| e.to_string())?;
    if k.command().yielded_sms(sms) != even {
        return Err("the launch does not count as preempted on the even SMs".into());
    }
    std::thread::sleep(Duration::from_millis(2));
    let held = k.progress().map_err(|e| e.to_string())?;
    // The blocks that the hardware placed on the even SMs left before taking a task.
    k.wait_yielded().map_err(|e| e.to_string())?;
    let left_ms = launched.elapsed().as_secs_f64() * 1e3;
    std::thread::sleep(Duration::from_millis(1));
    let before = k.progress().map_err(|e| e.to_string())?;
    k.resume(Target::Sms(even)).map_err(|e| e.to_string())?;
    drop(k);
    sync_within(job.stream, Duration::from_secs(20))?;
    job.check(g)?;
    if held.done < 1000 || before.done >= before.total {
        return Err(format!(
            "{} tasks done while the commands were held up, {} of {} before the resume: the \
             check proves nothing",
            held.done, before.done, before.total
        ));
    }
    let runs = job.runs.read(g.side);
    let on_even: Vec<usize> = (0..before.done as usize)
        .filter(|&t| sm_of(runs[t]) % 2 == 0)
        .collect();
    if let Some(&t) = on_even.first() {
        return Err(format!(
            "{} of the {} tasks done before the resume ran on even SMs (task {t} on SM {})",
            on_even.len(),
            before.done,
            sm_of(runs[t])
        ));
    }
    let later_even = runs[before.done as usize..]
        .iter()
        .filter(|&&r| sm_of(r) % 2 == 0)
        .count();
    if later_even == 0 {
        return Err("no task ran on the even SMs after their resume".into());
    }
    Ok(format!(
        "{} tasks done while the commands were held up, {} before the resume, all on odd SMs \
         (wait_yielded returned {left_ms:.1} ms after the launch); {later_even} later on even \
         SMs; exact",
        held.done, before.done
    ))
}

/// Preempted on every SM, then resumed on half of them: the instance the resume launches must
/// fill those SMs, wherever the hardware first places its blocks (blocks that start on the
/// other SMs leave at once). Rate of tasks with half the SMs: about half the full rate.
fn resumed_on_half(g: &Setup) -> Result<String, String> {
    let sms = g.rt.limits().expect("device limits").sm_count;
    let job = Job::new([200_000, 1, 1], 64);
    let mut k = job.launch(g, 100_000).map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_micros(300));
    let (full, _, _) = rate(&k)?;
    k.preempt(Target::All).map_err(|e| e.to_string())?;
    k.wait_yielded().map_err(|e| e.to_string())?;
    let first_half = SmSet::from_ids(0..sms / 2).map_err(|e| e.to_string())?;
    k.resume(Target::Sms(first_half))
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_micros(300));
    let (half, done, total) = rate(&k)?;
    if done >= total {
        return Err(format!(
            "the kernel ended during the check ({done} of {total}): it proves nothing"
        ));
    }
    k.resume(Target::All).map_err(|e| e.to_string())?;
    sync_within(job.stream, Duration::from_secs(20))?;
    job.check(g)?;
    let ratio = half / full;
    if ratio < 0.4 {
        return Err(format!(
            "resumed on {} of {sms} SMs, the kernel ran at {ratio:.2} of its full rate \
             ({half:.0} vs {full:.0} tasks/ms): the resumed instance does not fill its SMs",
            sms / 2
        ));
    }
    Ok(format!(
        "resumed on {} of {sms} SMs: {ratio:.2} of the full rate ({half:.0} vs {full:.0} tasks/ms); exact",
        sms / 2
    ))
}

/// Two launches on one stream, both preempted: the second has not started (it waits behind the
/// first), and waiting for it to yield must return at once, not when it would have ended.
fn queued(g: &Setup) -> Result<String, String> {
    let a = Job::new([20000, 1, 1], 64);
    let b = Job {
        stream: a.stream,
        ..Job::new([20000, 1, 1], 64)
    };
    let mut ka = a.launch(g, 100_000).map_err(|e| e.to_string())?;
    let mut kb = b.launch(g, 100_000).map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_micros(300));
    ka.preempt(Target::All).map_err(|e| e.to_string())?;
    kb.preempt(Target::All).map_err(|e| e.to_string())?;
    let t = Instant::now();
    ka.wait_yielded().map_err(|e| e.to_string())?;
    kb.wait_yielded().map_err(|e| e.to_string())?;
    let us = t.elapsed().as_secs_f64() * 1e6;
    let (pa, pb) = (
        ka.progress().map_err(|e| e.to_string())?,
        kb.progress().map_err(|e| e.to_string())?,
    );
    if pb.done != 0 {
        return Err(format!(
            "the queued launch ran while the one before it was preempted: first {}/{} done, \
             complete {:?}, parked {}; second {}/{} done, complete {:?}",
            pa.done,
            pa.total,
            ka.is_complete(),
            ka.is_parked(),
            pb.done,
            pb.total,
            kb.is_complete()
        ));
    }
    kb.resume(Target::All).map_err(|e| e.to_string())?;
    ka.resume(Target::All).map_err(|e| e.to_string())?;
    sync_within(a.stream, Duration::from_secs(20))?;
    a.check(g)?;
    b.check(g)?;
    Ok(format!(
        "both yielded within {us:.0} us; both complete and exact after resuming"
    ))
}

/// Two launches back to back on one stream, the second launched to start while the first
/// drains (docs/runtime.md, "Launches that overlap"). While the first is preempted its staying
/// block must not let the second start: the second's blocks would wait on the SMs that the
/// preemption freed until the first is resumed. Then both finish, each task once.
fn overlap(g: &Setup) -> Result<String, String> {
    // About 2.4 ms on the H100, as in `temporal`.
    let (a, b) = Job::back_to_back(100_000, 2_000);
    let mut ka = a.launch_spin(g, 100_000, None).map_err(|e| e.to_string())?;
    let kb = b.launch_spin(g, 2_000, None).map_err(|e| e.to_string())?;
    if !kb.overlapped() && rt::overlap_launches() {
        return Err("the second launch was not launched to overlap (sm_90 PTX, CUDA 12)".into());
    }
    std::thread::sleep(Duration::from_micros(300));
    if ka.is_complete().map_err(|e| e.to_string())? {
        return Err("the first kernel ended before its preemption".into());
    }
    ka.preempt(Target::All).map_err(|e| e.to_string())?;
    ka.wait_yielded().map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(2));
    if !kb.holds_no_sm_but_a_parked_block() || kb.started() {
        return Err("the second launch started while the first was preempted".into());
    }
    let p = ka.progress().map_err(|e| e.to_string())?;
    ka.resume(Target::All).map_err(|e| e.to_string())?;
    sync_within(a.stream, Duration::from_secs(10))?;
    a.check_output(g)?;
    b.check_output(g)?;
    Ok(format!(
        "overlapped launch {}; it held no SM while the first was preempted at {} of {} tasks",
        kb.overlapped(),
        p.done,
        p.total
    ))
}

/// A wrapper built with headers older than the wait for the kernel before it (its first
/// parameter ends before `cupreempt_launch.launch_version`) is launched the old way, never to
/// overlap, and computes what spin_fill computes; the current wrapper before it on the same
/// stream is launched to overlap.
fn older_headers(g: &Setup) -> Result<String, String> {
    let (a, b) = Job::back_to_back(2_000, 2_000);
    let ka = a.launch_spin(g, 20_000, None).map_err(|e| e.to_string())?;
    let kb = b
        .launch_wrapper(g, &g.spin_older_headers, 20_000, None)
        .map_err(|e| e.to_string())?;
    if kb.overlapped() {
        return Err(
            "the older headers' wrapper was launched to overlap the kernel before it".into(),
        );
    }
    if !ka.overlapped() && rt::overlap_launches() {
        return Err(
            "the current wrapper was not launched to overlap (sm_90 PTX, CUDA 12.4)".into(),
        );
    }
    sync_within(a.stream, Duration::from_secs(10))?;
    a.check_output(g)?;
    b.check_output(g)?;
    Ok(format!(
        "current wrapper overlapped {}, older headers' wrapper {}; both exact",
        ka.overlapped(),
        kb.overlapped()
    ))
}

/// Resumed with no helper instance: the first instance's staying block must finish the work
/// alone, so that a kernel completes even when no other stream can run anything for it.
fn tail_alone(g: &Setup) -> Result<String, String> {
    let job = Job::new([100_000, 1, 1], 64);
    // A preemption that lands after the kernel's end proves nothing, and the kernel can end
    // first (seen once in a run of every scenario on the H200; why that launch outran the
    // preemption is not known). Such a launch is dropped while preempted, checked exact, and
    // launched again.
    let mut caught = None;
    for _ in 0..3 {
        let mut k = job.launch(g, 10_000).map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_micros(50));
        k.preempt(Target::All).map_err(|e| e.to_string())?;
        k.wait_yielded().map_err(|e| e.to_string())?;
        let p = k.progress().map_err(|e| e.to_string())?;
        if p.done < p.total {
            caught = Some((k, p));
            break;
        }
        drop(k);
        sync_within(job.stream, Duration::from_secs(20))?;
        job.check(g)?;
    }
    let Some((mut k, p)) = caught else {
        return Err(
            "finished before the preemption landed in three launches; make the kernel longer"
                .into(),
        );
    };
    g.rt.set_resume_launches(false);
    let t = Instant::now();
    let resumed = k.resume(Target::All);
    g.rt.set_resume_launches(true);
    resumed.map_err(|e| e.to_string())?;
    sync_within(job.stream, Duration::from_secs(20))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    job.check(g)?;
    if k.instances() != 1 {
        return Err(format!("{} instances launched", k.instances()));
    }
    Ok(format!(
        "{} of {} tasks left after the preemption, done by one block in {ms:.1} ms; exact",
        p.total - p.done,
        p.total
    ))
}

/// A thread of the program waits in a synchronous copy to pageable memory (as `cudaMemcpy`
/// does) for the kernel, on the legacy stream, while this one preempts and resumes it, the
/// runtime's event pool emptied before each resume. The copying thread holds the driver's
/// context lock shared until the kernel is done, and creating an event (or the runtime's
/// streams) takes it exclusively. A preemption published before such a wait is never resumed:
/// the watchdog fails the hang. A resume that creates an event before its instance is
/// launched leaves the work to the staying block alone until the kernel ends: the copy then
/// takes seconds instead of milliseconds (`Kernel::publish`, `for_resume`).
fn synchronous_copy(g: &Setup) -> Result<String, String> {
    let mut job = Job::new([800_000, 1, 1], 64);
    job.stream = std::ptr::null_mut(); // the legacy stream, which a synchronous copy waits for
    let mut k = job.launch(g, 50_000).map_err(|e| e.to_string())?;
    let cycle = |k: &mut Kernel, empty_pool: bool| -> Result<(), String> {
        k.preempt(Target::All).map_err(|e| e.to_string())?;
        k.wait_yielded().map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_micros(100));
        if empty_pool {
            g.rt.forget_pooled_events();
        }
        k.resume(Target::All).map_err(|e| e.to_string())
    };
    // One cycle before the copy starts: the runtime's streams exist from here on.
    step("synchronous copy: the cycle before the copy".into());
    cycle(&mut k, false)?;
    let mut ctx = std::ptr::null_mut();
    ck("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut ctx) });
    let ctx = ctx as usize;
    let (out, words) = (job.out.ptr, job.out.words);
    let started = Instant::now();
    let copier = std::thread::spawn(move || {
        // SAFETY: the context outlives the scenario; the buffer is pageable host memory.
        unsafe {
            let _ = sys::cuCtxSetCurrent(ctx as sys::CUcontext);
            let mut v = vec![0u32; words];
            let r = sys::cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), out, words * 4);
            (r, v)
        }
    });
    std::thread::sleep(Duration::from_micros(200));
    let mut cycles = 0;
    while !copier.is_finished() && cycles < 40 {
        std::thread::sleep(Duration::from_micros(100));
        step(format!("synchronous copy: preemption {cycles}"));
        cycle(&mut k, true)?;
        cycles += 1;
        tick(test_clock());
    }
    let (r, copied) = copier
        .join()
        .map_err(|_| "the copying thread panicked".to_string())?;
    let copy_ms = started.elapsed().as_secs_f64() * 1e3;
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("the synchronous copy failed: {r:?}"));
    }
    sync_within(job.stream, Duration::from_secs(20))?;
    job.check(g)?;
    if copied != job.expected() {
        return Err("the synchronous copy did not see the kernel's whole output".into());
    }
    if cycles == 0 {
        return Err("the kernel ended before the copy began waiting; make it longer".into());
    }
    // About 10 ms of work on the whole GPU; the staying block alone needs tens of seconds.
    if copy_ms > 5_000.0 {
        return Err(format!(
            "the copy waited {copy_ms:.0} ms: a resume's instance was held back"
        ));
    }
    Ok(format!(
        "{cycles} preemptions while the program waited in a synchronous copy (the event pool emptied before each resume); the copy took {copy_ms:.1} ms; exact"
    ))
}

/// Another thread of the program in `cuMemFree` (which synchronizes with the device) and
/// `cuModuleLoadData`, from `scratch`, in the current context. Returns their results and the
/// time spent inside them.
fn free_and_load(
    ctx: usize,
    scratch: u64,
    ptx: Vec<u8>,
) -> std::thread::JoinHandle<(sys::CUresult, sys::CUresult, Duration)> {
    std::thread::spawn(move || {
        // SAFETY: the context outlives the scenario; `scratch` is this thread's to free.
        unsafe {
            let _ = sys::cuCtxSetCurrent(ctx as sys::CUcontext);
            let t = Instant::now();
            let freed = sys::cuMemFree_v2(scratch);
            let mut m = std::ptr::null_mut();
            let loaded = sys::cuModuleLoadData(&mut m, ptx.as_ptr().cast());
            if loaded == sys::CUresult::CUDA_SUCCESS {
                let _ = sys::cuModuleUnload(m);
            }
            (freed, loaded, t.elapsed())
        }
    })
}

fn current_context() -> usize {
    let mut ctx = std::ptr::null_mut();
    ck("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut ctx) });
    ctx as usize
}

fn scratch() -> u64 {
    let mut scratch = 0u64;
    ck("cuMemAlloc", unsafe {
        sys::cuMemAlloc_v2(&mut scratch, 1 << 20)
    });
    scratch
}

fn joined(
    other: std::thread::JoinHandle<(sys::CUresult, sys::CUresult, Duration)>,
) -> Result<Duration, String> {
    let (freed, loaded, took) = other
        .join()
        .map_err(|_| "the freeing thread panicked".to_string())?;
    if freed != sys::CUresult::CUDA_SUCCESS || loaded != sys::CUresult::CUDA_SUCCESS {
        return Err(format!(
            "cuMemFree: {freed:?}, cuModuleLoadData: {loaded:?}"
        ));
    }
    Ok(took)
}

/// A thread of the program already waits inside the driver for the kernel (`cudaFree`
/// synchronizes with the device; it holds the context's lock meanwhile) when the kernel is
/// preempted: llm.c's `layernorm_backward` frees memory right after its launches, and chaos
/// mode hung there, its preemption recording an event behind that lock with the command
/// already in host memory (the staying block asleep, the free waiting for it). The preemption
/// must record nothing: its control-stream writes may wait behind the free (the kernel then
/// runs to its end, the command not in the control block), but nothing may wait for a resume.
/// The watchdog fails a hang; three launches, each preempted once.
fn free_before_preemption(g: &Setup) -> Result<String, String> {
    let ctx = current_context();
    let mut preempt_ms = Vec::new();
    for round in 0..3 {
        let job = Job::new([400_000, 1, 1], 64);
        let mut k = job.launch(g, 50_000).map_err(|e| e.to_string())?;
        let mem = scratch();
        while !k.started() {
            std::hint::spin_loop();
        }
        step(format!("free before preemption: the free {round}"));
        let other = free_and_load(ctx, mem, g.ptx.clone());
        std::thread::sleep(Duration::from_micros(500));
        step(format!("free before preemption: preemption {round}"));
        let t = Instant::now();
        k.preempt(Target::All).map_err(|e| e.to_string())?;
        preempt_ms.push(t.elapsed().as_secs_f64() * 1e3);
        step(format!("free before preemption: wait_yielded {round}"));
        k.wait_yielded().map_err(|e| e.to_string())?;
        step(format!("free before preemption: resume {round}"));
        k.resume(Target::All).map_err(|e| e.to_string())?;
        step(format!("free before preemption: the other thread {round}"));
        joined(other)?;
        sync_within(job.stream, Duration::from_secs(20))?;
        job.check(g)?;
        tick(test_clock());
    }
    Ok(format!(
        "3 launches preempted while another thread waited in cuMemFree; preempt() took {} ms; \
         exact",
        preempt_ms
            .iter()
            .map(|m| format!("{m:.1}"))
            .collect::<Vec<_>>()
            .join("/")
    ))
}

/// Another thread of the program frees memory and loads a module while the kernel is
/// preempted, as programs do between launches. Both wait for the GPU inside the driver, and
/// the preempted kernel ends only after the resume: a `wait_yielded` or `resume` that waits
/// behind them inside the driver for anything but the work never comes back (the watchdog
/// fails the hang). The resume publishes first, so the staying block goes back to work; its
/// instance's launch waits behind the free (docs/runtime.md, "No wait inside the driver while
/// preempted"), so the kernel may run on the staying block alone until then: 20,000 tasks of
/// 50 us, about 1 s for one block. Fails if the kernel takes more than 4 s.
fn free_while_preempted(g: &Setup) -> Result<String, String> {
    let job = Job::new([20_000, 1, 1], 64);
    let mut k = job.launch(g, 50_000).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let ctx = current_context();
    let mut cycles = 0;
    let mut blocked_us = Vec::new();
    let (mut waited_us, mut resumed_us) = (0u64, 0u64);
    while !k.is_complete().map_err(|e| e.to_string())? && cycles < 5 {
        std::thread::sleep(Duration::from_micros(100));
        let mem = scratch();
        step(format!("free while preempted: preemption {cycles}"));
        k.preempt(Target::All).map_err(|e| e.to_string())?;
        let other = free_and_load(ctx, mem, g.ptx.clone());
        std::thread::sleep(Duration::from_micros(200));
        step(format!("free while preempted: wait_yielded {cycles}"));
        let t = Instant::now();
        k.wait_yielded().map_err(|e| e.to_string())?;
        waited_us = waited_us.max(t.elapsed().as_micros() as u64);
        std::thread::sleep(Duration::from_micros(200));
        step(format!("free while preempted: resume {cycles}"));
        let t = Instant::now();
        k.resume(Target::All).map_err(|e| e.to_string())?;
        resumed_us = resumed_us.max(t.elapsed().as_micros() as u64);
        step(format!("free while preempted: the other thread {cycles}"));
        blocked_us.push(joined(other)?.as_micros() as u64);
        cycles += 1;
        tick(test_clock());
    }
    sync_within(job.stream, Duration::from_secs(20))?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    job.check(g)?;
    if cycles == 0 {
        return Err("the kernel ended before the first preemption; make it longer".into());
    }
    let summary = format!(
        "{cycles} preemptions, each with another thread freeing memory and loading a module \
         (median {} us inside those calls); longest wait_yielded {waited_us} us, longest \
         resume {resumed_us} us; the kernel took {ms:.1} ms",
        {
            blocked_us.sort_unstable();
            blocked_us[blocked_us.len() / 2]
        }
    );
    if ms > 4_000.0 {
        return Err(format!(
            "{summary}: longer than its staying block alone needs"
        ));
    }
    Ok(format!("{summary}; exact"))
}

/// Reproducible random numbers below `n` (xorshift64).
fn xorshift(mut state: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    }
}

/// Gated links (rt::links): a launch with 3 links, preempted and resumed 5 times. The first
/// three preemptions leave no block of the kernel on the GPU (each link leaves whole and the
/// stream waits at the next closed gate), the later ones park the anchor's last block as a
/// first instance does; the stream waits for the kernel throughout and every task runs once.
/// Then a launch with links that is never preempted: the kernel opens its gates itself.
fn gated_links(g: &Setup) -> Result<String, String> {
    let job = Job {
        links: 3,
        ..Job::new([200_000, 1, 1], 64)
    };
    let mut k = job.launch(g, 100_000).map_err(|e| e.to_string())?;
    let (mut seen, mut starts) = (Vec::new(), Vec::new());
    let mut before = 0;
    for cycle in 1..=5 {
        // Each preemption must catch the kernel at work: first the next link's (or the
        // anchor's, or a resumed instance's) blocks in the task loop.
        let t = Instant::now();
        while k.holds_no_sm_but_a_parked_block() {
            if t.elapsed() > Duration::from_millis(100) {
                return Err(format!(
                    "cycle {cycle}: no block at work 100 ms after the start or resume"
                ));
            }
        }
        starts.push(format!("{:.0}", t.elapsed().as_secs_f64() * 1e6));
        std::thread::sleep(Duration::from_micros(300));
        k.preempt(Target::All).map_err(|e| e.to_string())?;
        k.wait_yielded().map_err(|e| e.to_string())?;
        // The anchor's tail takes a moment to park; a link leaves nothing behind at all.
        std::thread::sleep(Duration::from_millis(2));
        let p1 = k.progress().map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(10));
        let p2 = k.progress().map_err(|e| e.to_string())?;
        if p1.done != p2.done || p1.done >= p1.total || p1.done <= before {
            return Err(format!(
                "cycle {cycle}: progress {} then {} of {} while preempted",
                p1.done, p2.done, p1.total
            ));
        }
        let parked = k.is_parked();
        if parked != (cycle > 3) {
            return Err(format!(
                "cycle {cycle}: a block parked: {parked} (links leave none; the anchor parks one)"
            ));
        }
        if !k.holds_no_sm_but_a_parked_block() {
            return Err(format!("cycle {cycle}: blocks still in the task loop"));
        }
        if stream_idle(job.stream) || job.snap.read(g.side).iter().any(|&w| w != POISON) {
            return Err(format!("cycle {cycle}: the stream went on while preempted"));
        }
        seen.push(format!("{}", p1.done));
        before = p1.done;
        k.resume(Target::All).map_err(|e| e.to_string())?;
    }
    sync_within(job.stream, Duration::from_secs(20))?;
    job.check(g)?;
    let instances = k.instances();
    drop(k);
    let quiet = Job {
        links: 3,
        ..Job::new([20_000, 1, 1], 64)
    };
    let q = quiet.launch(g, 1_000).map_err(|e| e.to_string())?;
    sync_within(quiet.stream, Duration::from_secs(10))?;
    quiet.check(g)?;
    if !q.is_complete().map_err(|e| e.to_string())? {
        return Err("a launch with links is not complete after its stream went idle".into());
    }
    Ok(format!(
        "preempted at {} of 200000 tasks, no block left on the GPU for the first 3, the anchor parked for the rest ({instances} instances in all); blocks at work {} us after the launch and each resume; exact; a launch with links never preempted: exact",
        seen.join(", "),
        starts.join(", ")
    ))
}

/// Random preempt/resume cycles on a stream of launches until `cycles` have run.
fn storm(g: &Setup, cycles: usize) -> Result<String, String> {
    storm_with(g, cycles, 0, 20_000, 100_000).map(|(summary, _)| summary)
}

/// The chunks of `k` cut short by a command (its control block's `cut_chunks`).
fn cut_chunks(k: &Kernel, side: sys::CUstream) -> u32 {
    let mut c = ControlBlock::zeroed();
    unsafe {
        ck(
            "cuMemcpyDtoHAsync",
            sys::cuMemcpyDtoHAsync_v2(
                (&mut c as *mut ControlBlock).cast(),
                k.control_block(),
                std::mem::size_of::<ControlBlock>(),
                side,
            ),
        );
        ck("cuStreamSynchronize", sys::cuStreamSynchronize(side));
    }
    c.cut_chunks
}

/// As `storm`, with tasks of 2 us: chunks of about ten tasks, which a preemption must cut short
/// (the kernels are built with CUPREEMPT_LOOKS; the block gives the rest back and a later block
/// takes it): the outputs stay exact, and some chunks must have been cut. A preemption that
/// finds every block at a chunk's end, cycle after cycle, means that looks inside chunks do not
/// cut.
fn storm_short(g: &Setup, cycles: usize) -> Result<String, String> {
    let (summary, cuts) = storm_with(g, cycles, 0, 2_000, 1_000_000)?;
    if cuts == 0 {
        return Err(format!("no chunk cut short (2 us tasks): {summary}"));
    }
    Ok(summary)
}

/// As `storm`, every launch with `links` gated links, tasks of `spin_ns`. Returns its summary
/// and how many chunks the preemptions cut short.
fn storm_with(
    g: &Setup,
    cycles: usize,
    links: u32,
    spin_ns: u64,
    tasks: u32,
) -> Result<(String, u64), String> {
    rt::set_event_timing(true);
    let mut next = xorshift(0x9e3779b97f4a7c15);
    // About 0.5 ms per launch on the H100 (4,224 resident blocks, 20 us tasks; 1,000,000 of
    // 2 us): most random gaps of up to 200 us fall while tasks are left.
    let job = Job {
        links,
        ..Job::new([tasks, 1, 1], 32)
    };
    let mut cuts = 0u64;
    // `done` counts only the cycles that caught the kernel with tasks left; one that yielded
    // at its end (it finished between the look and the command) proves nothing.
    let (mut done, mut launches, mut missed) = (0, 0, 0);
    let (mut host, mut gpu) = (Vec::new(), Vec::new());
    while done < cycles {
        let mut k = job.launch(g, spin_ns).map_err(|e| e.to_string())?;
        launches += 1;
        loop {
            let gap = Instant::now() + Duration::from_micros(next(200));
            while Instant::now() < gap {}
            if k.is_complete().map_err(|e| e.to_string())? {
                break;
            }
            let t = Instant::now();
            k.preempt(Target::All).map_err(|e| e.to_string())?;
            k.wait_yielded().map_err(|e| e.to_string())?;
            let caught = {
                let p = k.progress().map_err(|e| e.to_string())?;
                p.done < p.total
            };
            host.push(t.elapsed().as_secs_f64() * 1e6);
            if let Some(ms) = k.last_yield_latency_ms().map_err(|e| e.to_string())? {
                gpu.push(ms as f64 * 1e3);
            }
            k.resume(Target::All).map_err(|e| e.to_string())?;
            if caught {
                done += 1;
            } else {
                missed += 1;
                if missed > cycles {
                    return Err(format!(
                        "{missed} preemptions came too late (the kernel had ended), {done} caught it"
                    ));
                }
            }
            tick(test_clock());
        }
        sync_within(job.stream, Duration::from_secs(20))?;
        job.check(g)
            .map_err(|e| format!("launch {launches} after {done} cycles: {e}"))?;
        cuts += cut_chunks(&k, g.side) as u64;
    }
    let summary = format!(
        "{done} cycles caught the kernel mid-run ({missed} more came at its end) over {launches} launches, all outputs exact, {cuts} chunks cut short; request->yielded p50/p99: host {:.0}/{:.0} us, GPU {:.0}/{:.0} us ({} us tasks)",
        percentile(&mut host, 0.5),
        percentile(&mut host, 0.99),
        percentile(&mut gpu, 0.5),
        percentile(&mut gpu, 0.99),
        spin_ns / 1000
    );
    Ok((summary, cuts))
}

/// Many applications' streams at once, preempted and resumed at random, several preempted at
/// a time: every stream must drain with exact outputs. Run it with CUDA_DEVICE_MAX_CONNECTIONS=1
/// too (all streams on one hardware queue): a resumed instance must never wait behind a stream
/// that waits for it.
fn many_streams(g: &Setup, cycles: usize) -> Result<String, String> {
    let mut next = xorshift(0x2545f4914f6cdd1d);
    let streams: usize = std::env::var("CUPREEMPT_MANY_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let jobs: Vec<Job> = (0..streams).map(|_| Job::new([40000, 1, 1], 32)).collect();
    let mut kernels: Vec<Option<Kernel>> = (0..streams).map(|_| None).collect();
    let mut preempted: Vec<usize> = Vec::new();
    let (mut done, mut launches, mut checked) = (0usize, 0usize, 0usize);
    let started = Instant::now();
    while done < cycles {
        let i = next(streams as u64) as usize;
        if preempted.contains(&i) {
            continue;
        }
        step(format!(
            "is_complete of stream {i} (preempted: {preempted:?})"
        ));
        let complete = match &kernels[i] {
            None => true,
            Some(k) => k.is_complete().map_err(|e| e.to_string())?,
        };
        if complete {
            if kernels[i].take().is_some() {
                step(format!("sync of stream {i} (preempted: {preempted:?})"));
                sync_within(jobs[i].stream, Duration::from_secs(20))?;
                step(format!(
                    "check of stream {i} (reads on the side stream; preempted: {preempted:?})"
                ));
                jobs[i].check(g).map_err(|e| format!("stream {i}: {e}"))?;
                checked += 1;
            }
            step(format!("launch on stream {i} (preempted: {preempted:?})"));
            kernels[i] = Some(jobs[i].launch(g, 20_000).map_err(|e| e.to_string())?);
            launches += 1;
            continue;
        }
        let k = kernels[i].as_mut().expect("launched");
        step(format!(
            "preempt + wait_yielded of stream {i} (preempted: {preempted:?}, started: {})",
            k.progress().map(|p| format!("{p:?}")).unwrap_or_default()
        ));
        k.preempt(Target::All).map_err(|e| e.to_string())?;
        k.wait_yielded().map_err(|e| e.to_string())?;
        preempted.push(i);
        done += 1;
        tick(test_clock());
        if done % 50 == 0 && progress_lines() {
            let _ = writeln!(
                std::io::stderr(),
                "many streams: {done} preemptions, {launches} launches, {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        // Up to four kernels stay preempted while others run; resume in random order.
        while preempted.len() > next(5) as usize {
            let j = preempted.swap_remove(next(preempted.len() as u64) as usize);
            step(format!("resume of stream {j}"));
            let k = kernels[j].as_mut().expect("launched");
            k.resume(Target::All).map_err(|e| e.to_string())?;
        }
    }
    for j in preempted.drain(..) {
        let k = kernels[j].as_mut().expect("launched");
        k.resume(Target::All).map_err(|e| e.to_string())?;
    }
    for (i, job) in jobs.iter().enumerate() {
        if kernels[i].take().is_some() {
            sync_within(job.stream, Duration::from_secs(30))
                .map_err(|e| format!("stream {i} never drained ({e}): a deadlock"))?;
            job.check(g).map_err(|e| format!("stream {i}: {e}"))?;
            checked += 1;
        }
    }
    Ok(format!(
        "{done} preemptions over {streams} streams ({launches} launches, up to 4 preempted at once), all {checked} outputs exact and in stream order; CUDA_DEVICE_MAX_CONNECTIONS={}",
        std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or_else(|_| "unset".into())
    ))
}

/// CUPREEMPT_PROGRESS: the many-streams scenario prints a line every 50 launches (for probing
/// where the hardware-queue hazard bites; pick the scenario with CUPREEMPT_SCENARIOS).
fn progress_lines() -> bool {
    std::env::var_os("CUPREEMPT_PROGRESS").is_some()
}

fn errors(g: &Setup) -> Result<String, String> {
    let job = Job::new([1000, 1, 1], 64);
    let bad = g.rt.launch(
        &g.spin,
        &LaunchConfig::new([10, 1, 1], [2048, 1, 1], 0),
        unsafe { StreamRef::from_raw(job.stream) },
        &KernelArgs::new(),
    );
    if !matches!(bad, Err(Error::InvalidConfiguration(_))) {
        return Err(format!("block of 2048 threads: {:?}", bad.err()));
    }
    let mut k = job.launch(g, 100_000).map_err(|e| e.to_string())?;
    if k.resume(Target::All) != Err(Error::NotPreempted) {
        return Err("resume without a preemption must be refused".into());
    }
    k.preempt(Target::All).map_err(|e| e.to_string())?;
    if k.preempt(Target::All) != Err(Error::AlreadyPreempted) {
        return Err("a double preempt must be refused".into());
    }
    // Dropped while preempted: resumed, so the application's stream still finishes.
    drop(k);
    sync_within(job.stream, Duration::from_secs(20))?;
    job.check(g)?;
    Ok("invalid configuration, double resume/preempt refused; dropped while preempted still completes".into())
}

/// Per-launch cost, for docs/bench (reported, not asserted): `n` back-to-back launches of a
/// 16-block kernel with no spin, GPU time over the batch, through the runtime and directly;
/// and the stream operations a runtime launch adds, each on its own.
fn launch_cost(g: &Setup) -> Result<String, String> {
    let n = 500;
    let job = Job::new([16, 1, 1], 64);
    let s = job.stream;
    let flag = Buf::new(1);
    flag.fill(1, s);
    let batch = |what: &mut dyn FnMut()| -> Result<(f64, f64), String> {
        let (e0, e1) = (new_event(), new_event());
        what(); // warm-up
        ck("sync", unsafe { sys::cuStreamSynchronize(s) });
        let t = Instant::now();
        ck("record", unsafe { sys::cuEventRecord(e0, s) });
        for _ in 0..n {
            what();
        }
        let host = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        ck("record", unsafe { sys::cuEventRecord(e1, s) });
        ck("sync", unsafe { sys::cuEventSynchronize(e1) });
        let mut ms = 0.0f32;
        ck("elapsed", unsafe {
            sys::cuEventElapsedTime(&mut ms, e0, e1)
        });
        Ok((ms as f64 * 1e3 / n as f64, host))
    };
    let (out, runs) = (job.out.ptr, job.runs.ptr);
    let direct = |with: &dyn Fn()| {
        let (mut o, mut r, mut spin) = (out, runs, 0u64);
        let mut params = [
            (&mut o as *mut u64).cast(),
            (&mut r as *mut u64).cast(),
            (&mut spin as *mut u64).cast(),
        ];
        launch_plain(&g.spin_original, 16, 64, s, &mut params);
        with();
    };
    let (orig, orig_host) = batch(&mut || direct(&|| {}))?;
    let (wait, _) = batch(&mut || {
        direct(&|| {
            ck("wait", unsafe {
                sys::cuStreamWaitValue32_v2(
                    s,
                    flag.ptr,
                    1,
                    sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
                )
            })
        })
    })?;
    let ev = new_event();
    let (events, events_host) =
        batch(&mut || direct(&|| ck("record", unsafe { sys::cuEventRecord(ev, s) })))?;
    let mut err = None;
    // Host time spent dropping the handles (retiring the control block), apart.
    let mut releasing = std::time::Duration::ZERO;
    let (rt_gpu, rt_host) = batch(&mut || {
        let mut args = KernelArgs::new();
        args.push(out).push(runs).push(0u64);
        match g.rt.launch(
            &g.spin,
            &LaunchConfig::new([16, 1, 1], [64, 1, 1], 0),
            unsafe { StreamRef::from_raw(s) },
            &args,
        ) {
            Ok(k) => {
                let t = Instant::now();
                drop(k);
                releasing += t.elapsed();
            }
            Err(e) => err = Some(e),
        }
    })?;
    if let Some(e) = err {
        return Err(e.to_string());
    }
    let release_us = releasing.as_secs_f64() * 1e6 / (n + 1) as f64; // n timed + the warm-up
    Ok(format!(
        "per launch of a 16-block kernel ({n} back to back), GPU time: original {orig:.1} us, through the runtime {rt_gpu:.1} us; \
         original + one stream wait-value {wait:.1} us, + one event record {events:.1} us; host time per launch call: original {orig_host:.1} us, + one event record {events_host:.1} us, runtime {rt_host:.1} us (of which releasing the handle {release_us:.1} us)"
    ))
}

fn new_event() -> sys::CUevent {
    let mut e = std::ptr::null_mut();
    ck("cuEventCreate", unsafe { sys::cuEventCreate(&mut e, 0) });
    e
}

#[test]
fn runtime_launches_preempts_and_resumes_on_the_gpu() {
    if !rt::driver_available() {
        let _ = writeln!(std::io::stderr(), "runtime_gpu: SKIPPED, no CUDA driver on this machine (tests/runtime_gpu.rs runs on a GPU machine)");
        return;
    }
    let nvcc = support::nvcc().unwrap_or_else(|e| panic!("{e}"));
    let dir = support::tempdir("runtime-gpu");
    let src =
        std::fs::read_to_string(support::root().join("tests/gpu/runtime_kernels.cu")).unwrap();
    let t = cupreempt::transform(&src, "runtime_kernels.cu", &cupreempt::Options::default());
    assert_eq!(t.transformed_count(), 1, "{:?}", t.diagnostics);
    let cu = dir.join("runtime_kernels.cu");
    std::fs::write(&cu, &t.output).unwrap();
    let ptx = dir.join("runtime_kernels.ptx");
    let st = std::process::Command::new(&nvcc)
        // Looks inside chunks (docs/transformation.md): every scenario runs them, and "storm of
        // short tasks" checks that they cut chunks.
        .args([
            "-ptx",
            "-arch=sm_90",
            "-std=c++17",
            "-O2",
            "-DCUPREEMPT_LOOKS",
        ])
        .arg(format!(
            "-I{}",
            support::root().join("cuda_support").display()
        ))
        .args(support::toolkit_flags(&nvcc))
        .arg(&cu)
        .arg("-o")
        .arg(&ptx)
        .status()
        .expect("nvcc");
    assert!(st.success(), "nvcc -ptx failed");

    let rt = Runtime::new(0).expect("runtime");
    let mut ptx = std::fs::read(&ptx).unwrap();
    let module = rt.load_module(&ptx).expect("module");
    ptx.push(0); // cuModuleLoadData reads PTX up to its NUL
    let g = Setup {
        spin: module.function("spin_fill__cupreempt").expect("wrapper"),
        spin_older_headers: module
            .function("spin_fill_older_headers")
            .expect("older headers' wrapper"),
        spin_original: module.function("spin_fill").expect("original"),
        copy: module.function("copy_words").expect("copy_words"),
        side: stream(),
        ptx,
        rt,
    };
    let cycles = std::env::var("CUPREEMPT_STORM_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut failed = 0;
    type Scenario = fn(&Setup) -> Result<String, String>;
    let scenarios: [(&str, Scenario); 15] = [
        ("queued", queued),
        ("synchronous copy", synchronous_copy),
        ("free before preemption", free_before_preemption),
        ("free while preempted", free_while_preempted),
        ("tail alone", tail_alone),
        ("launch cost", launch_cost),
        ("plain", plain),
        ("temporal", temporal),
        ("spatial", spatial),
        ("resumed on half", resumed_on_half),
        ("kept off", kept_off),
        ("errors", errors),
        ("gated links", gated_links),
        ("overlap", overlap),
        ("older headers", older_headers),
    ];
    // CUPREEMPT_SCENARIOS=name,name,...: only those (e.g. "queued,queued,storm").
    let chosen = std::env::var("CUPREEMPT_SCENARIOS").ok();
    let wanted: Vec<&str> = match &chosen {
        Some(list) => list.split(',').map(str::trim).collect(),
        None => scenarios
            .iter()
            .map(|(n, _)| *n)
            .chain([
                "storm",
                "storm of short tasks",
                "storm with links",
                "many streams",
            ])
            .collect(),
    };
    watchdog(test_clock());
    for name in wanted {
        *SCENARIO.lock().unwrap_or_else(|p| p.into_inner()) = name.to_string();
        tick(test_clock());
        let r = match scenarios.iter().find(|(n, _)| *n == name) {
            Some((_, f)) => f(&g),
            None if name == "storm" => storm(&g, cycles),
            None if name == "storm of short tasks" => storm_short(&g, cycles / 4),
            None if name == "storm with links" => {
                storm_with(&g, cycles / 4, 4, 20_000, 100_000).map(|(s, _)| s)
            }
            None if name == "many streams" => many_streams(&g, cycles / 2),
            None => Err(format!("no scenario called {name:?}")),
        };
        report(name, r, &mut failed);
    }
    assert_eq!(failed, 0, "runtime GPU scenarios failed");
}

fn report(name: &str, r: Result<String, String>, failed: &mut usize) {
    let line = match &r {
        Ok(m) => format!("runtime_gpu: ok   {name}: {m}"),
        Err(e) => {
            *failed += 1;
            format!("runtime_gpu: FAIL {name}: {e}")
        }
    };
    let _ = writeln!(std::io::stderr(), "{line}");
}
