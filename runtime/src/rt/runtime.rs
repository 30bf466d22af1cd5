//! `Runtime`: one per CUDA context. Owns the high-priority control stream on which commands are
//! written, and the pool of control blocks in device memory.

use super::clock::GpuClock;
use super::config::Limits;
use super::driver::{
    self, drv, CUcontext, CUdevice, CUdeviceptr, CUfunction, CUstream, Event, Stream,
};
use super::error::{Error, Result};
use crate::control::{ControlBlock, HostMirror};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, MutexGuard};

/// Control blocks are handed out from slabs of this many (320 KiB each). A host that runs far
/// ahead of the GPU retires slots faster than their kernels finish, and then needs new slabs.
const SLAB_SLOTS: usize = 256;
/// Streams for resumed instances.
const RESUME_STREAMS: usize = 4;
/// Each control block starts on its own 256-byte boundary.
const SLOT_BYTES: usize = std::mem::size_of::<ControlBlock>().next_multiple_of(256);
/// Each host mirror starts on its own cache line.
const MIRROR_BYTES: usize = std::mem::size_of::<HostMirror>().next_multiple_of(64);

#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub ctx: CUcontext,
    pub limits: Limits,
    /// Commands go here: highest priority, non-blocking, never behind a kernel.
    pub control: Stream,
    /// Zeroes retired control blocks, off every application stream's path.
    housekeeping: Stream,
    /// Resumed instances run here, kernels spread over a few streams. Few and created early,
    /// so that they rarely share a hardware queue with an application's stream (see
    /// docs/runtime.md, "Stream order and hardware queues").
    resume: Vec<Stream>,
    next_resume: std::sync::atomic::AtomicUsize,
    /// Whether resume launches another instance (see `Runtime::set_resume_launches`).
    pub resume_launches: std::sync::atomic::AtomicBool,
    pool: Mutex<Pool>,
    events: Mutex<Vec<Event>>,
    /// Events and %globaltimer on one time line (latency measurements), once asked for: the
    /// newest clock, and the one before it while the newest one's stamp may still be pending.
    clocks: Mutex<Vec<GpuClock>>,
    /// Blocks per SM of (function, threads per block, dynamic shared memory).
    occupancy: Mutex<HashMap<(usize, u32, u32), u32>>,
    /// Last field: released after the streams above are destroyed.
    _primary: PrimaryContext,
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

/// What a launch gets: a zeroed control block in device memory and its host mirror.
pub(crate) struct Slot {
    pub control: CUdeviceptr,
    pub mirror: Mirror,
}

/// A [`HostMirror`] in pinned memory, as the host sees it and as kernels address it.
#[derive(Clone, Copy)]
pub(crate) struct Mirror {
    pub host: *mut HostMirror,
    pub device: u64,
}

/// A control block no longer owned by a kernel handle, reusable once its events are done.
pub(crate) struct Retired {
    pub slot: CUdeviceptr,
    pub events: Vec<Event>,
}

/// Control blocks come in slabs. A slab hands its slots out in order; once every slot has been
/// retired and its work is done, the whole slab is zeroed with one memset on the housekeeping
/// stream and handed out again. Launches thus never zero anything on the application's stream.
struct Slab {
    base: CUdeviceptr,
    /// The slots' host mirrors: pinned, mapped for the device, zeroed when allocated.
    mirrors: *mut u8,
    mirrors_device: u64,
    /// Slots handed out since the slab was last zeroed.
    next: usize,
    retired: Vec<Retired>,
    /// Retired slots known to be done (a prefix of `retired`).
    done: usize,
    /// The memset that zeroed the slab, while it may still run.
    zeroed: Option<Event>,
}

#[derive(Default)]
struct Pool {
    slabs: Vec<Slab>,
    current: Option<usize>,
}

/// Pinned, device-mapped, zeroed memory for a slab's host mirrors: (host, device) addresses.
fn alloc_mirrors() -> Result<(*mut u8, u64)> {
    let bytes = MIRROR_BYTES * SLAB_SLOTS;
    let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
    drv!(cuMemHostAlloc(
        &mut host,
        bytes,
        sys::CU_MEMHOSTALLOC_DEVICEMAP
    ))?;
    let mut device: CUdeviceptr = 0;
    if let Err(e) = drv!(cuMemHostGetDevicePointer_v2(&mut device, host, 0)) {
        // SAFETY: just allocated, not shared.
        unsafe { sys::cuMemFreeHost(host) };
        return Err(e);
    }
    // SAFETY: `bytes` of pinned memory we own.
    unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
    Ok((host.cast(), device))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    /// A runtime on the primary context of device `ordinal` (the one the CUDA runtime API
    /// uses), made current on the calling thread.
    pub fn new(ordinal: i32) -> Result<Runtime> {
        driver::widen_hardware_queues();
        driver::init()?;
        let mut dev: CUdevice = 0;
        drv!(cuDeviceGet(&mut dev, ordinal))?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        drv!(cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
        drv!(cuCtxSetCurrent(ctx))?;
        Runtime::build(ctx, dev, true)
    }

    /// A runtime on the context current on this thread (what an nvcc-built program has after
    /// its first CUDA runtime call).
    pub fn from_current_context() -> Result<Runtime> {
        driver::init()?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        drv!(cuCtxGetCurrent(&mut ctx))?;
        if ctx.is_null() {
            return Err(Error::InvalidArgument("no CUDA context is current"));
        }
        let mut dev: CUdevice = 0;
        drv!(cuCtxGetDevice(&mut dev))?;
        Runtime::build(ctx, dev, false)
    }

    fn build(ctx: CUcontext, dev: CUdevice, retained: bool) -> Result<Runtime> {
        use sys::CUdevice_attribute::*;
        let a = |attr| driver::device_attribute(dev, attr).map(|v| v.max(0) as u32);
        let limits = Limits {
            sm_count: a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
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
        let (mut least, mut greatest) = (0, 0);
        drv!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest))?;
        Ok(Runtime {
            inner: Arc::new(Inner {
                ctx,
                limits,
                control: Stream::new(greatest)?,
                housekeeping: Stream::new(least)?,
                resume: (0..RESUME_STREAMS)
                    .map(|_| Stream::new(least))
                    .collect::<Result<_>>()?,
                next_resume: Default::default(),
                resume_launches: std::sync::atomic::AtomicBool::new(true),
                clocks: Mutex::new(Vec::new()),
                pool: Mutex::new(Pool::default()),
                events: Mutex::new(Vec::new()),
                occupancy: Mutex::new(HashMap::new()),
                _primary: PrimaryContext(retained.then_some(dev)),
            }),
        })
    }

    /// Whether `resume` launches another instance of a started kernel (the default), or
    /// leaves the remaining work to the first instance's staying block alone: one block, slow,
    /// but it shows that a kernel completes with no help from any other stream (tests).
    pub fn set_resume_launches(&self, on: bool) {
        self.inner
            .resume_launches
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn limits(&self) -> Limits {
        self.inner.limits
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

    /// A zeroed control block and mirror for a launch on `stream` (which waits for the zeroing
    /// of the control block if that is still running).
    pub fn acquire_slot(&self, stream: CUstream) -> Result<Slot> {
        let mut pool = lock(&self.pool);
        let usable = |p: &Pool| p.current.filter(|&c| p.slabs[c].next < SLAB_SLOTS);
        if usable(&pool).is_none() {
            pool.current = None;
            for i in 0..pool.slabs.len() {
                if self.drained(&mut pool.slabs[i])? {
                    let slab = &mut pool.slabs[i];
                    let events: Vec<Event> =
                        slab.retired.drain(..).flat_map(|r| r.events).collect();
                    self.recycle(events);
                    slab.done = 0;
                    slab.next = 0;
                    drv!(cuMemsetD8Async(
                        slab.base,
                        0,
                        SLOT_BYTES * SLAB_SLOTS,
                        self.housekeeping.0
                    ))?;
                    let zeroed = self.event(false)?;
                    zeroed.record_on(self.housekeeping.0)?;
                    slab.zeroed = Some(zeroed);
                    pool.current = Some(i);
                    break;
                }
            }
        }
        if pool.current.is_none() {
            let mut base: CUdeviceptr = 0;
            drv!(cuMemAlloc_v2(&mut base, SLOT_BYTES * SLAB_SLOTS))?;
            // Zeroed like a recycled slab: the first launches wait for it on the GPU, not here.
            drv!(cuMemsetD8Async(
                base,
                0,
                SLOT_BYTES * SLAB_SLOTS,
                self.housekeeping.0
            ))?;
            let (mirrors, mirrors_device) = match alloc_mirrors() {
                Ok(m) => m,
                Err(e) => {
                    // SAFETY: just allocated, nothing uses it yet but the memset, which is
                    // stream-ordered before the free.
                    unsafe { sys::cuMemFreeAsync(base, self.housekeeping.0) };
                    return Err(e);
                }
            };
            let zeroed = self.event(false)?;
            zeroed.record_on(self.housekeeping.0)?;
            pool.slabs.push(Slab {
                base,
                mirrors,
                mirrors_device,
                next: 0,
                retired: Vec::new(),
                done: 0,
                zeroed: Some(zeroed),
            });
            pool.current = Some(pool.slabs.len() - 1);
        }
        let c = pool
            .current
            .ok_or(Error::InvalidArgument("no control block"))?;
        let slab = &mut pool.slabs[c];
        if let Some(z) = slab.zeroed.take() {
            if z.is_done()? {
                self.recycle([z]);
            } else {
                drv!(cuStreamWaitEvent(stream, z.raw, 0))?;
                slab.zeroed = Some(z);
            }
        }
        let control = slab.base + (slab.next * SLOT_BYTES) as u64;
        let at = slab.next * MIRROR_BYTES;
        slab.next += 1;
        // SAFETY: the slot's earlier kernel is done (the slab was drained) and every block
        // clears its own lane when it leaves, so only the words before the lanes need zeroing.
        let host = unsafe { slab.mirrors.add(at) }.cast::<HostMirror>();
        unsafe {
            let lanes = std::mem::offset_of!(HostMirror, lanes);
            std::ptr::write_bytes(host.cast::<u8>(), 0, lanes);
        }
        Ok(Slot {
            control,
            mirror: Mirror {
                host,
                device: slab.mirrors_device + at as u64,
            },
        })
    }

    /// True when every slot of `slab` is retired and all their work is done.
    fn drained(&self, slab: &mut Slab) -> Result<bool> {
        if slab.retired.len() < SLAB_SLOTS {
            return Ok(false);
        }
        while slab.done < slab.retired.len() {
            for e in &slab.retired[slab.done].events {
                if !e.is_done()? {
                    return Ok(false);
                }
            }
            slab.done += 1;
        }
        Ok(true)
    }

    /// Gives a control block back; it is reused once `r.events` are done.
    pub fn retire(&self, r: Retired) {
        let mut pool = lock(&self.pool);
        let span = (SLOT_BYTES * SLAB_SLOTS) as u64;
        if let Some(slab) = pool
            .slabs
            .iter_mut()
            .find(|s| r.slot >= s.base && r.slot < s.base + span)
        {
            slab.retired.push(r);
        }
    }

    /// The stream for the next kernel's resumed instances (round robin).
    pub fn resume_stream(&self) -> CUstream {
        let i = self
            .next_resume
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.resume[i % self.resume.len()].0
    }

    /// An event from the pool (creating and destroying events costs more than reusing them).
    pub fn event(&self, timed: bool) -> Result<Event> {
        let mut events = lock(&self.events);
        match events.iter().rposition(|e| e.timed == timed) {
            Some(i) => Ok(events.swap_remove(i)),
            None => Event::new(timed),
        }
    }

    /// Returns events to the pool. A stream already waiting on one is not affected by its
    /// next record.
    pub fn recycle(&self, events: impl IntoIterator<Item = Event>) {
        let mut pool = lock(&self.events);
        for e in events {
            if pool.len() < 1024 {
                pool.push(e);
            }
        }
    }

    /// With event timing on: starts a clock (see `clock.rs`) unless a recent one exists.
    pub fn keep_clock(&self) -> Result<()> {
        let mut clocks = lock(&self.clocks);
        if clocks
            .last()
            .is_some_and(|c| c.born.elapsed() < std::time::Duration::from_secs(1))
        {
            return Ok(());
        }
        clocks.push(GpuClock::start(self.housekeeping.0)?);
        if clocks.len() > 2 {
            clocks.remove(0);
        }
        Ok(())
    }

    /// The `%globaltimer` value (ns) when the timed event `e` completed, from the newest clock
    /// whose stamp is done.
    pub fn globaltime(&self, e: &Event) -> Result<Option<u64>> {
        let mut clocks = lock(&self.clocks);
        for c in clocks.iter_mut().rev() {
            if c.is_ready()? {
                return c.globaltime(e);
            }
        }
        Ok(None)
    }

    /// Resident blocks per SM of `func` for this block size and shared memory (cached).
    pub fn blocks_per_sm(&self, func: CUfunction, threads: u32, smem: u32) -> Result<u32> {
        let key = (func as usize, threads, smem);
        if let Some(&n) = lock(&self.occupancy).get(&key) {
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
        Ok(n)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.current();
        let pool = std::mem::take(self.pool.get_mut().unwrap_or_else(|p| p.into_inner()));
        for slab in &pool.slabs {
            for e in slab.retired.iter().flat_map(|r| &r.events) {
                let _ = e.wait();
            }
        }
        let _ = drv!(cuStreamSynchronize(self.housekeeping.0));
        for slab in pool.slabs {
            // SAFETY: every kernel that used the slab has retired and its work is done.
            unsafe {
                sys::cuMemFree_v2(slab.base);
                sys::cuMemFreeHost(slab.mirrors.cast());
            }
        }
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
