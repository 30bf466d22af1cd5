//! `Runtime`: one per CUDA context. Owns the high-priority control stream on which commands are
//! written, and the pool of control blocks in device memory (`pool.rs`).

use super::clock::Clocks;
use super::config::Limits;
use super::driver::{self, drv, CUcontext, CUdevice, CUfunction, CUstream, Event, Stream};
use super::error::{Error, Result};
use super::fast_hash::FastMap;
use super::history::History;
use super::pool::{Pool, Retired, Slot};
use cudarc::driver::sys;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Streams for resumed instances.
const RESUME_STREAMS: usize = 4;

#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub ctx: CUcontext,
    /// This runtime's number in the process (never reused, where its address may be): the
    /// per-thread memory of its answers is kept under it (`recent.rs`).
    serial: u64,
    dev: CUdevice,
    /// SMs: the first launch's plan needs it (the one-wave rule).
    pub sm_count: u32,
    /// The device's other limits, asked for when a preemptible launch first needs them: each
    /// attribute is a driver call, and the first launch of a program is often timed.
    limits: OnceLock<Limits>,
    /// Whether the device's contexts are shared through MPS (none: the driver cannot say),
    /// asked for by the scheduler client, off the launch path.
    mps: OnceLock<Option<bool>>,
    /// The runtime's own streams, made by the setup thread as soon as the runtime exists (see
    /// `setup.rs`); whoever needs them first waits for them.
    streams: OnceLock<Result<Streams>>,
    /// Set once the setup thread has made the streams and the first slab.
    ready: AtomicBool,
    /// Set once a launch has asked for the setup (`Runtime::request_setup`).
    setup_requested: AtomicBool,
    next_resume: std::sync::atomic::AtomicUsize,
    /// Whether resume launches another instance (see `Runtime::set_resume_launches`).
    pub resume_launches: std::sync::atomic::AtomicBool,
    pool: Mutex<Pool>,
    /// How long earlier launches ran: which launches of the C ABI run the original kernel.
    pub history: History,
    /// Launches so far (each launch's number, written into its host mirror).
    pub launches: AtomicU64,
    events: Mutex<Vec<Event>>,
    /// Events and %globaltimer on one time line (latency measurements), once asked for: the
    /// newest clock, and the one before it while the newest one's stamp may still be pending.
    clocks: Mutex<Clocks>,
    /// Blocks per SM of (function, threads per block, dynamic shared memory).
    occupancy: Mutex<FastMap<(usize, u32, u32), u32>>,
    /// Per function: whether its code waits for the kernel before it (`waits_for_predecessor`).
    waits: Mutex<FastMap<usize, bool>>,
    /// The launches that may still be queued or running (a bound on them: `queued.rs`).
    pub queued: super::queued::Queued,
    /// Last field: released after the streams above are destroyed.
    _primary: PrimaryContext,
}

/// The runtime's streams. Making them costs about 300 us of host time (H100), which a
/// launch does not wait for: the first launch needs none of them.
pub(crate) struct Streams {
    /// Commands go here: highest priority, non-blocking, never behind a kernel.
    pub control: Stream,
    /// Zeroes control blocks for reuse, off every application stream's path.
    pub housekeeping: Stream,
    /// Resumed instances run here, kernels spread over a few streams. Few and made early, so
    /// that they rarely share a hardware queue with an application's stream (see
    /// docs/runtime.md, "Stream order and hardware queues").
    pub resume: Vec<Stream>,
}

// SAFETY: the driver's handles may be used from any thread once their context is current,
// which every entry point ensures (driver::make_current); shared state is behind mutexes.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

/// The device's primary context, when this runtime retained it.
struct PrimaryContext(Option<CUdevice>);

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        if let Some(dev) = self.0 {
            // SAFETY: balances the retain in Runtime::new; nothing of ours uses it any more.
            unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    /// A runtime on the primary context of device `ordinal` (the one the CUDA runtime API
    /// uses), made current on the calling thread.
    pub fn new(ordinal: i32) -> Result<Runtime> {
        driver::init()?;
        let mut dev: CUdevice = 0;
        drv!(cuDeviceGet(&mut dev, ordinal))?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        drv!(cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
        drv!(cuCtxSetCurrent(ctx))?;
        Runtime::build(ctx, dev, true, false)
    }

    /// A runtime on the context current on this thread (what an nvcc-built program has after
    /// its first CUDA runtime call). Its streams and first control blocks are made by the
    /// setup thread (`setup.rs`); [`Runtime::new`] makes them before it returns, so that they
    /// come before any stream the caller makes next (see `Streams`).
    pub fn from_current_context() -> Result<Runtime> {
        driver::init()?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        drv!(cuCtxGetCurrent(&mut ctx))?;
        if ctx.is_null() {
            return Err(Error::InvalidArgument("no CUDA context is current"));
        }
        let mut dev: CUdevice = 0;
        drv!(cuCtxGetDevice(&mut dev))?;
        Runtime::build(ctx, dev, false, true)
    }

    /// The runtime of context `ctx`, made on another thread than the application's (the setup
    /// thread): `ctx` becomes this thread's current context.
    pub(crate) fn for_context(ctx: CUcontext) -> Result<Runtime> {
        driver::init()?;
        driver::make_current(ctx)?;
        let mut dev: CUdevice = 0;
        drv!(cuCtxGetDevice(&mut dev))?;
        Runtime::build(ctx, dev, false, true)
    }

    fn build(ctx: CUcontext, dev: CUdevice, retained: bool, later: bool) -> Result<Runtime> {
        let sm_count = driver::device_attribute(
            dev,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )?
        .max(0) as u32;
        super::trace_setup("device attributes");
        let rt = Runtime {
            inner: Arc::new(Inner {
                ctx,
                serial: {
                    static SERIALS: AtomicU64 = AtomicU64::new(0);
                    SERIALS.fetch_add(1, Ordering::Relaxed)
                },
                dev,
                sm_count,
                limits: OnceLock::new(),
                mps: OnceLock::new(),
                streams: OnceLock::new(),
                ready: AtomicBool::new(false),
                setup_requested: AtomicBool::new(false),
                history: History::from_env(),
                launches: AtomicU64::new(0),
                next_resume: Default::default(),
                resume_launches: std::sync::atomic::AtomicBool::new(true),
                clocks: Mutex::new(Clocks::new()),
                pool: Mutex::new(Pool::default()),
                events: Mutex::new(Vec::new()),
                occupancy: Mutex::new(FastMap::default()),
                waits: Mutex::new(FastMap::default()),
                queued: Default::default(),
                _primary: PrimaryContext(retained.then_some(dev)),
            }),
        };
        // Otherwise the setup waits until a launch needs it (`request_setup`).
        if !later {
            rt.inner.streams()?;
            rt.inner.first_slab()?;
            rt.inner.mark_ready();
        }
        Ok(rt)
    }

    /// Whether `resume` launches another instance of a started kernel (the default), or
    /// leaves the remaining work to the first instance's staying block alone: one block, slow,
    /// but it shows that a kernel completes with no help from any other stream (tests).
    pub fn set_resume_launches(&self, on: bool) {
        self.inner
            .resume_launches
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Drops the events the runtime keeps for reuse, so that the next ones must be created:
    /// tests use it to check that no command waits inside the driver at the wrong moment
    /// (`Kernel::publish`).
    pub fn forget_pooled_events(&self) {
        self.inner.forget_pooled_events();
    }

    /// Hands the runtime's setup (streams, first slab) to the setup thread, once: the first
    /// launch planned preemptible asks for it (`plan.rs`), so that a program whose launches
    /// all run the original kernel never pays for it.
    pub(crate) fn request_setup(&self) {
        if !self.inner.setup_requested.swap(true, Ordering::AcqRel) {
            super::setup::set_up_later(self.inner.clone());
            super::trace_setup("setup handed to the setup thread");
        }
    }

    pub fn limits(&self) -> Result<Limits> {
        self.inner.limits()
    }

    /// The stream that carries commands into control blocks. Tests hold it up (work enqueued
    /// on it delays every later command) to check what kernels do before a command lands.
    #[doc(hidden)]
    pub fn command_stream(&self) -> Result<CUstream> {
        self.inner.control_stream()
    }

    /// The raw context, for code that mixes this runtime with other driver calls.
    pub fn context(&self) -> CUcontext {
        self.inner.ctx
    }

    /// Loads a module (PTX text or a cubin/fatbin image).
    pub fn load_module(&self, image: &[u8]) -> Result<Module> {
        self.inner.current()?;
        let mut data = image.to_vec();
        if !data.ends_with(&[0]) {
            data.push(0); // PTX must be NUL-terminated
        }
        let mut m: sys::CUmodule = std::ptr::null_mut();
        drv!(cuModuleLoadData(&mut m, data.as_ptr().cast()))?;
        Ok(Module {
            module: Arc::new(ModuleHandle(m, self.inner.clone())),
        })
    }
}

impl Inner {
    pub fn current(&self) -> Result<()> {
        driver::make_current(self.ctx)
    }

    /// The device's limits (asked for once).
    /// Whether this device's contexts are shared through MPS: the processes' kernels then run
    /// side by side; without it the GPU time-slices between the processes' contexts. None
    /// where the driver does not know the attribute.
    pub fn mps(&self) -> Option<bool> {
        *self.mps.get_or_init(|| {
            driver::device_attribute(
                self.dev,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MPS_ENABLED,
            )
            .ok()
            .map(|v| v != 0)
        })
    }

    pub fn limits(&self) -> Result<Limits> {
        if let Some(l) = self.limits.get() {
            return Ok(*l);
        }
        use sys::CUdevice_attribute::*;
        let a = |attr| driver::device_attribute(self.dev, attr).map(|v| v.max(0) as u32);
        let l = Limits {
            sm_count: self.sm_count,
            max_threads_per_block: a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block: [
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid: [
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
        };
        Ok(*self.limits.get_or_init(|| l))
    }

    /// The runtime's streams, made on first use (the context must be current).
    pub fn streams(&self) -> Result<&Streams> {
        self.streams
            .get_or_init(|| {
                let (mut least, mut greatest) = (0, 0);
                drv!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest))?;
                let streams = Streams {
                    control: Stream::new(greatest)?,
                    housekeeping: Stream::new(least)?,
                    resume: (0..RESUME_STREAMS)
                        .map(|_| Stream::new(least))
                        .collect::<Result<_>>()?,
                };
                super::trace_setup("streams (setup thread)");
                Ok(streams)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Whether the setup thread is done (streams and first slab made, or failed trying).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Makes the first slab of control blocks, unless there is one.
    pub fn first_slab(&self) -> Result<()> {
        lock(&self.pool).first_slab(self)
    }

    /// Sends the command path's first writes (setup thread): the first stream writes of a
    /// process cost the calling thread 15-20 us more than later ones (the driver's first use of
    /// them; H200), which a program's first preemption paid between its request and its
    /// command. Zeros over zeros, on the control stream, as a command's writes go.
    pub fn warm_command_path(&self) -> Result<()> {
        let Some(at) = lock(&self.pool).zero_words() else {
            return Ok(());
        };
        driver::write_values(self.control_stream()?, &[(at, 0), (at + 4, 0)])
    }

    /// The streams, if they are made already (never waits).
    pub fn streams_made(&self) -> Option<&Streams> {
        self.streams.get().and_then(|s| s.as_ref().ok())
    }

    /// The control stream (commands).
    pub fn control_stream(&self) -> Result<CUstream> {
        Ok(self.streams()?.control.0)
    }

    /// A zeroed control block and mirror for a launch on `stream` (which waits for the zeroing
    /// of the control block if that is still running).
    pub fn acquire_slot(&self, stream: CUstream, id: Option<u64>) -> Result<Slot> {
        lock(&self.pool).acquire(self, stream, id)
    }

    /// Gives a control block back; it is reused once `r.events` are done.
    pub fn retire(&self, r: Retired) {
        lock(&self.pool).retire(r);
    }

    /// The stream for the next kernel's resumed instances (round robin).
    pub fn resume_stream(&self) -> Result<CUstream> {
        let resume = &self.streams()?.resume;
        let i = self
            .next_resume
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(resume[i % resume.len()].0)
    }

    /// An event from the pool (creating and destroying events costs more than reusing them).
    /// Creating one takes the driver's context lock exclusively, which can wait long (for a
    /// preempted kernel, see `Kernel::publish`), so the pool's lock is not held meanwhile.
    pub fn event(&self, timed: bool) -> Result<Event> {
        let pooled = {
            let mut events = lock(&self.events);
            events
                .iter()
                .rposition(|e| e.timed == timed)
                .map(|i| events.swap_remove(i))
        };
        match pooled {
            Some(e) => Ok(e),
            None => Event::new(timed),
        }
    }

    /// Drops the pooled events (tests: the next command must create its event).
    pub fn forget_pooled_events(&self) {
        let events = std::mem::take(&mut *lock(&self.events));
        drop(events);
    }

    /// Returns events to the pool. A stream already waiting on one is not affected by its
    /// next record. Events beyond the pool's 1,024 are destroyed after its lock is let go (as
    /// in `event`).
    pub fn recycle(&self, events: impl IntoIterator<Item = Event>) {
        let mut extra = Vec::new();
        {
            let mut pool = lock(&self.events);
            for e in events {
                if pool.len() < 1024 {
                    pool.push(e);
                } else {
                    extra.push(e);
                }
            }
        }
        drop(extra);
    }

    /// With event timing on: starts a clock (see `clock.rs`) unless a recent one exists.
    pub fn keep_clock(&self) -> Result<()> {
        let stream = self.streams()?.housekeeping.0;
        lock(&self.clocks).keep(stream)
    }

    /// The `%globaltimer` value (ns) when the timed event `e` completed, from the newest clock
    /// whose stamp is done.
    pub fn globaltime(&self, e: &Event) -> Result<Option<u64>> {
        lock(&self.clocks).globaltime(e)
    }

    /// Resident blocks per SM of `func` for this block size and shared memory (cached).
    pub fn blocks_per_sm(&self, func: CUfunction, threads: u32, smem: u32) -> Result<u32> {
        let recent = (self.serial, func as usize, threads, smem);
        if let Some(n) = super::recent::OCCUPANCY.with(|r| r.get(recent)) {
            return Ok(n);
        }
        let key = (func as usize, threads, smem);
        if let Some(&n) = lock(&self.occupancy).get(&key) {
            super::recent::OCCUPANCY.with(|r| r.put(recent, n));
            return Ok(n);
        }
        let mut per_sm = 0i32;
        drv!(cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &mut per_sm,
            func,
            threads as i32,
            smem as usize
        ))?;
        let n = per_sm.max(0) as u32;
        lock(&self.occupancy).insert(key, n);
        super::recent::OCCUPANCY.with(|r| r.put(recent, n));
        Ok(n)
    }

    /// Whether wrapper `func` waits for the kernel before it in the stream before its first
    /// task, so that it may be launched to start while that kernel drains. The task loop
    /// waits where it is built for sm_90 or later (task_loop.cuh, `wait_for_predecessor`),
    /// which the function's PTX version says: code generated from an older virtual
    /// architecture (a JIT-compiled `compute_80`, say) has no wait, and must not start early.
    /// And only headers that have the wait have `cupreempt_launch.launch_version`: a program
    /// built with older ones, run with this library, passes a shorter first parameter
    /// (`launch_waits`).
    pub(crate) fn waits_for_predecessor(&self, func: CUfunction) -> bool {
        let recent = (self.serial, func as usize);
        if let Some(w) = super::recent::WAITS.with(|r| r.get(recent)) {
            return w;
        }
        if let Some(&w) = lock(&self.waits).get(&(func as usize)) {
            super::recent::WAITS.with(|r| r.put(recent, w));
            return w;
        }
        // cuLaunchKernelEx, which takes the launch attribute, exists from CUDA 12.0 on;
        // cuFuncGetParamInfo from 12.4.
        let mut ptx = 0i32;
        let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PTX_VERSION;
        let ptx = (driver::version() >= 12000
            && drv!(cuFuncGetAttribute(&mut ptx, attr, func)).is_ok())
        .then_some(ptx);
        let first_param = (ptx.is_some() && driver::has_call(b"cuFuncGetParamInfo\0"))
            .then(|| {
                let (mut offset, mut size) = (0usize, 0usize);
                drv!(cuFuncGetParamInfo(func, 0, &mut offset, &mut size))
                    .ok()
                    .map(|()| size)
            })
            .flatten();
        let waits = launch_waits(ptx, first_param);
        lock(&self.waits).insert(func as usize, waits);
        super::recent::WAITS.with(|r| r.put(recent, waits));
        waits
    }
}

/// Whether a wrapper waits for the kernel before it (`Inner::waits_for_predecessor`), from its
/// PTX version and the size of its first parameter (`None`: the driver could not say).
fn launch_waits(ptx_version: Option<i32>, first_param_size: Option<usize>) -> bool {
    ptx_version.is_some_and(|v| v >= 90)
        && first_param_size
            .is_some_and(|s| s >= std::mem::size_of::<crate::control::LaunchParams>())
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.current();
        let pool = std::mem::take(self.pool.get_mut().unwrap_or_else(|p| p.into_inner()));
        let housekeeping = self.streams.get().and_then(|s| s.as_ref().ok());
        pool.free(housekeeping.map(|s| s.housekeeping.0));
        // Streams, then the primary context, go with the fields, in declaration order.
    }
}

pub(crate) struct ModuleHandle(sys::CUmodule, Arc<Inner>);

// SAFETY: as for Inner.
unsafe impl Send for ModuleHandle {}
unsafe impl Sync for ModuleHandle {}

impl Drop for ModuleHandle {
    fn drop(&mut self) {
        if self.1.current().is_ok() {
            // SAFETY: functions of the module hold the handle, so none is used after this.
            unsafe { sys::cuModuleUnload(self.0) };
        }
    }
}

/// A loaded module.
#[derive(Clone)]
pub struct Module {
    module: Arc<ModuleHandle>,
}

impl Module {
    /// The kernel `name` (for a transformed kernel `K`, its wrapper is `K__cupreempt`, under
    /// its mangled name unless declared `extern "C"`).
    pub fn function(&self, name: &str) -> Result<Function> {
        let c = CString::new(name).map_err(|_| Error::InvalidArgument("name contains NUL"))?;
        self.module.1.current()?;
        let mut f: CUfunction = std::ptr::null_mut();
        drv!(cuModuleGetFunction(&mut f, self.module.0, c.as_ptr()))?;
        Ok(Function {
            raw: f,
            _module: Some(self.module.clone()),
        })
    }
}

/// A persistent wrapper kernel (`K__cupreempt`), whose first parameter is `cupreempt_launch`.
#[derive(Clone)]
pub struct Function {
    pub(crate) raw: CUfunction,
    _module: Option<Arc<ModuleHandle>>,
}

// SAFETY: a CUfunction is a driver handle, usable from any thread.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

impl Function {
    /// A function the caller got elsewhere (`cudaGetFuncBySymbol`, another module loader).
    ///
    /// # Safety
    /// `raw` must be a valid function of the runtime's context, with `cupreempt_launch` as its
    /// first parameter, and stay loaded while kernels launched from it exist.
    pub unsafe fn from_raw(raw: CUfunction) -> Function {
        Function { raw, _module: None }
    }
    pub fn raw(&self) -> CUfunction {
        self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::launch_waits;
    use crate::control::LaunchParams;
    use std::mem::{offset_of, size_of};

    #[test]
    fn only_wrappers_of_headers_with_the_wait_overlap() {
        let now = size_of::<LaunchParams>();
        // The headers before `launch_version` ended the struct at it.
        let older = offset_of!(LaunchParams, launch_version);
        assert!(older < now);
        assert!(launch_waits(Some(90), Some(now)));
        assert!(launch_waits(Some(100), Some(now)));
        assert!(!launch_waits(Some(90), Some(older)));
        assert!(!launch_waits(Some(80), Some(now)), "no wait below sm_90");
        assert!(!launch_waits(None, Some(now)));
        assert!(
            !launch_waits(Some(90), None),
            "a driver without cuFuncGetParamInfo"
        );
    }
}
