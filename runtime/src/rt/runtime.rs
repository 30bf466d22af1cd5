//! `Runtime`: one per CUDA context. Owns the high-priority control stream on which commands are
//! written, and the pool of control blocks in device memory.

use super::config::Limits;
use super::driver::{self, drv, CUcontext, CUdevice, CUdeviceptr, CUfunction, Event, Stream};
use super::error::{Error, Result};
use crate::control::ControlBlock;
use cudarc::driver::sys;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

/// Control blocks are handed out from slabs of this many.
const SLAB_SLOTS: usize = 64;
/// Each control block starts on its own 256-byte boundary.
const SLOT_BYTES: usize = std::mem::size_of::<ControlBlock>().next_multiple_of(256);

#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub ctx: CUcontext,
    /// Set when this runtime retained the device's primary context (released on drop).
    primary_of: Option<CUdevice>,
    pub limits: Limits,
    /// Commands go here: highest priority, non-blocking, never behind a kernel.
    pub control: Stream,
    pool: Mutex<Pool>,
}

// SAFETY: the driver's handles may be used from any thread once their context is current,
// which every entry point ensures (driver::make_current); the pool is behind a mutex.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

/// A control block no longer owned by a kernel handle, free once its events are done.
pub(crate) struct Retired {
    pub slot: CUdeviceptr,
    pub events: Vec<Event>,
    /// The kernel's resume stream, destroyed with the slot's events.
    pub _stream: Option<Stream>,
}

#[derive(Default)]
struct Pool {
    slabs: Vec<CUdeviceptr>,
    free: Vec<CUdeviceptr>,
    draining: Vec<Retired>,
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
                primary_of: retained.then_some(dev),
                limits,
                control: Stream::new(greatest)?,
                pool: Mutex::new(Pool::default()),
            }),
        })
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

    /// A zeroed-on-launch control block, reusing retired ones whose work is done.
    pub fn acquire_slot(&self) -> Result<CUdeviceptr> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let mut i = 0;
        while i < pool.draining.len() {
            let done = pool.draining[i]
                .events
                .iter()
                .try_fold(true, |all, e| Ok::<_, Error>(all && e.is_done()?))?;
            if done {
                let r = pool.draining.swap_remove(i);
                pool.free.push(r.slot);
            } else {
                i += 1;
            }
        }
        if let Some(slot) = pool.free.pop() {
            return Ok(slot);
        }
        let mut base: CUdeviceptr = 0;
        drv!(cuMemAlloc_v2(&mut base, SLOT_BYTES * SLAB_SLOTS))?;
        pool.slabs.push(base);
        pool.free.extend(
            (1..SLAB_SLOTS)
                .rev()
                .map(|i| base + (i * SLOT_BYTES) as u64),
        );
        Ok(base)
    }

    /// Gives a control block back once `events` are done.
    pub fn retire(&self, r: Retired) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        pool.draining.push(r);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.current();
        let pool = std::mem::take(self.pool.get_mut().unwrap_or_else(|p| p.into_inner()));
        for r in &pool.draining {
            for e in &r.events {
                let _ = e.wait();
            }
        }
        drop(pool.draining);
        for slab in pool.slabs {
            // SAFETY: no kernel uses the slab any more (all retired and drained).
            unsafe { sys::cuMemFree_v2(slab) };
        }
        if let Some(dev) = self.primary_of {
            // SAFETY: balances the retain in Runtime::new.
            unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
        }
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
