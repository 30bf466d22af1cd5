//! The few driver calls the runtime makes, through cudarc's dynamically loaded bindings.
//!
//! cudarc panics when it first touches a missing libcuda, so every entry point goes through
//! [`init`], which checks that the library loads and turns its absence into `Error::NoDriver`.

use super::error::{Error, Result};
use cudarc::driver::sys;
use std::ffi::CStr;
use std::sync::{Mutex, OnceLock};

pub use sys::{CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUstream};

/// True when libcuda can be loaded on this machine (checked once).
pub fn driver_available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to open the library.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Whether the driver library has the call `name` (NUL-terminated), without calling it:
/// cudarc panics at a call of a symbol an older driver lacks. The library must be present
/// (`driver_available`).
pub fn has_call(name: &[u8]) -> bool {
    // SAFETY: looks the symbol up without calling it; callers checked the library is present.
    unsafe { sys::culib().get::<unsafe extern "C" fn()>(name) }.is_ok()
}

/// Loads and initializes the driver once; every other function here assumes it succeeded.
pub fn init() -> Result<()> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    INIT.get_or_init(|| {
        super::trace_setup("start");
        if !driver_available() {
            return Err(Error::NoDriver);
        }
        super::trace_setup("libcuda found");
        // A program that launches through the CUDA runtime has initialized the driver already:
        // asking for the current context tells, and costs less than cuInit (whose symbol the
        // setup thread cannot look up in advance without calling it, see `preload`).
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: a query; before cuInit it answers CUDA_ERROR_NOT_INITIALIZED.
        let r = match unsafe { sys::cuCtxGetCurrent(&mut ctx) } {
            sys::CUresult::CUDA_ERROR_NOT_INITIALIZED => {
                // SAFETY: the library is present; cuInit may be called any number of times.
                check("cuInit", unsafe { sys::cuInit(0) })
            }
            _ => Ok(()),
        };
        super::trace_setup("driver API initialized");
        r
    })
    .clone()
}

/// Turns a driver status into a `Result`, naming the call.
pub fn check(call: &'static str, r: sys::CUresult) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string or leaves it null.
    let name = unsafe {
        sys::cuGetErrorName(r, &mut name);
        if name.is_null() {
            format!("{r:?}")
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    };
    Err(Error::Driver {
        call,
        code: r as u32,
        name,
    })
}

/// Calls a driver function and checks its status: `drv!(cuFoo(a, b))`.
macro_rules! drv {
    ($f:ident($($arg:expr),* $(,)?)) => {
        $crate::rt::driver::check(stringify!($f), unsafe { cudarc::driver::sys::$f($($arg),*) })
    };
}
pub(crate) use drv;

/// Opens libcuda and looks up the symbols of a launch's first calls, calling only what needs
/// no cuInit (the setup thread, at load: a program may fork before it uses CUDA, and a child of
/// an initialized driver cannot use it). cudarc looks a symbol up at its first call (dlsym),
/// and finding the library searches the library path for several names; a program's first
/// launch would pay for both.
pub fn preload() {
    if !driver_available() {
        return;
    }
    // SAFETY: the library is present; none of these calls needs cuInit, and before it they
    // answer CUDA_ERROR_NOT_INITIALIZED and change nothing.
    unsafe {
        let mut version = 0;
        let _ = sys::cuDriverGetVersion(&mut version);
        let mut ctx: CUcontext = std::ptr::null_mut();
        let _ = sys::cuCtxGetCurrent(&mut ctx);
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let _ = sys::cuStreamIsCapturing(std::ptr::null_mut(), &mut status);
    }
}

/// Whether `stream` is being captured into a graph (an invalidated capture counts).
pub fn is_capturing(stream: CUstream) -> Result<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    drv!(cuStreamIsCapturing(stream, &mut status))?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// The stream's priority, in CUDA's numbers (lower is more urgent; default streams have the
/// context's least priority).
pub fn stream_priority(stream: CUstream) -> Result<i32> {
    let mut p = 0;
    drv!(cuStreamGetPriority(stream, &mut p))?;
    Ok(p)
}

/// Makes `ctx` current on the calling thread if it is not already.
/// A context as the runtime tells contexts apart: its address and its id (`cuCtxGetId`, unique
/// in the process and never reused). A reset device's new primary context may have the old
/// one's address (on the H100 it does: `scripts/probes/driver_calls.sh`), never its id, and
/// everything of the old one (functions, streams, events, memory, pinned memory) is gone: state
/// kept per context is kept per key. The id is 0 where the driver cannot say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ContextKey {
    pub addr: usize,
    pub id: u64,
}

impl ContextKey {
    /// The key of `ctx` (0: none).
    pub fn of(ctx: CUcontext) -> ContextKey {
        ContextKey {
            addr: ctx as usize,
            id: if ctx.is_null() { 0 } else { context_id(ctx) },
        }
    }

    pub fn is_none(&self) -> bool {
        self.addr == 0
    }

    pub fn raw(&self) -> CUcontext {
        self.addr as CUcontext
    }
}

/// `ctx`'s id (`cuCtxGetId`, CUDA 12.0 on), or 0 where the driver has no such call or cannot
/// say.
pub fn context_id(ctx: CUcontext) -> u64 {
    static HAS_ID: OnceLock<bool> = OnceLock::new();
    if !*HAS_ID.get_or_init(|| has_call(b"cuCtxGetId\0")) {
        return 0;
    }
    let mut id = 0u64;
    // SAFETY: a query that writes one word.
    match unsafe { sys::cuCtxGetId(ctx, &mut id) } {
        sys::CUresult::CUDA_SUCCESS => id,
        _ => 0,
    }
}

/// The key of the context current on this thread (`ContextKey::is_none`: none is).
pub fn current_context() -> Result<ContextKey> {
    init()?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    drv!(cuCtxGetCurrent(&mut ctx))?;
    Ok(ContextKey::of(ctx))
}

pub fn make_current(ctx: CUcontext) -> Result<()> {
    let mut cur: CUcontext = std::ptr::null_mut();
    drv!(cuCtxGetCurrent(&mut cur))?;
    if cur != ctx {
        drv!(cuCtxSetCurrent(ctx))?;
    }
    Ok(())
}

/// Enqueues 32-bit writes of device memory on `stream`, in order, in one driver call
/// (`cuStreamBatchMemOp`) where the driver has it. Each call costs the calling thread 1.5-7 us
/// while the GPU runs a memory-bound kernel (H200), and a command reaches the GPU only when
/// the call that carries it returns: separate writes put that much more between a preemption's
/// request and its command (docs/runtime.md, "Commands").
///
/// A driver that refuses the batch (where its writes work one at a time) gets them one at a
/// time from then on.
pub fn write_values(stream: CUstream, writes: &[(CUdeviceptr, u32)]) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static HAS_BATCH: OnceLock<bool> = OnceLock::new();
    static BATCH_REFUSED: AtomicBool = AtomicBool::new(false);
    if writes.len() > 1
        && !BATCH_REFUSED.load(Ordering::Relaxed)
        && *HAS_BATCH.get_or_init(|| has_call(b"cuStreamBatchMemOp_v2\0"))
    {
        let ops: Vec<sys::CUstreamBatchMemOpParams> = writes
            .iter()
            .map(|&(address, value)| {
                // SAFETY: a plain C union of integers; all-zero is a valid value of each member.
                let mut op: sys::CUstreamBatchMemOpParams = unsafe { std::mem::zeroed() };
                op.writeValue.operation =
                    sys::CUstreamBatchMemOpType::CU_STREAM_MEM_OP_WRITE_VALUE_32;
                op.writeValue.address = address;
                op.writeValue.__bindgen_anon_1.value = value;
                op
            })
            .collect();
        let n = ops.len() as u32;
        // The driver reads the array during the call only.
        let batch = drv!(cuStreamBatchMemOp_v2(stream, n, ops.as_ptr().cast_mut(), 0));
        if batch.is_ok() {
            return batch;
        }
        one_at_a_time(stream, writes)?;
        BATCH_REFUSED.store(true, Ordering::Relaxed);
        return Ok(());
    }
    one_at_a_time(stream, writes)
}

fn one_at_a_time(stream: CUstream, writes: &[(CUdeviceptr, u32)]) -> Result<()> {
    for &(address, value) in writes {
        drv!(cuStreamWriteValue32_v2(stream, address, value, 0))?;
    }
    Ok(())
}

/// The driver's CUDA version (12080 for 12.8), 0 where it cannot say.
pub fn version() -> i32 {
    static VERSION: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let mut v = 0;
        // SAFETY: writes one int; needs no cuInit.
        if unsafe { sys::cuDriverGetVersion(&mut v) } != sys::CUresult::CUDA_SUCCESS {
            v = 0;
        }
        v
    })
}

pub fn device_attribute(dev: CUdevice, attr: sys::CUdevice_attribute) -> Result<i32> {
    let mut v = 0;
    drv!(cuDeviceGetAttribute(&mut v, attr, dev))?;
    Ok(v)
}

/// A non-blocking stream the runtime owns: it never waits for the legacy default stream, on
/// which an application's kernel may be waiting for us.
pub struct Stream(pub CUstream);

impl Stream {
    pub fn new(priority: i32) -> Result<Stream> {
        let mut s = std::ptr::null_mut();
        drv!(cuStreamCreateWithPriority(
            &mut s,
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            priority
        ))?;
        Ok(Stream(s))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Work still queued on the stream completes; the driver frees it afterwards.
        // SAFETY: we own the stream.
        unsafe { sys::cuStreamDestroy_v2(self.0) };
    }
}

/// An event. Timed ones (`timed`) can measure preemption latency on the GPU clock; the others
/// only order work and are cheaper to record.
pub struct Event {
    pub raw: CUevent,
    pub timed: bool,
    /// Where and when it was last recorded: see [`Event::recorded`].
    recorded: Mutex<Option<Recorded>>,
}

/// An event's last record: the stream's id (`cuStreamGetId`, unique in the context and never
/// reused, unlike a stream's handle, which a new stream may take after the old one is
/// destroyed; the per-thread default stream has one per thread) and the record's number in
/// the process's order of records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub stream: u64,
    pub number: u64,
}

/// The stream's id (`cuStreamGetId`: unique in the context and never reused, unlike a
/// stream's handle), where the driver can give it.
pub fn stream_id(stream: CUstream) -> Option<u64> {
    let mut id = 0;
    drv!(cuStreamGetId(stream, &mut id)).ok().map(|()| id)
}

/// Records are numbered under this lock, so that two records on one stream are numbered in
/// the order the driver put them into the stream, whatever threads made them.
static RECORDS: Mutex<u64> = Mutex::new(0);

impl Event {
    pub fn new(timed: bool) -> Result<Event> {
        let mut e = std::ptr::null_mut();
        let flags = if timed {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        drv!(cuEventCreate(&mut e, flags as u32))?;
        Ok(Event {
            raw: e,
            timed,
            recorded: Mutex::new(None),
        })
    }
    pub fn record_on(&self, stream: CUstream) -> Result<()> {
        self.record_on_id(stream, stream_id(stream))
    }
    /// As [`Event::record_on`], with the stream's id already asked for (`stream_id`). An id
    /// the driver could not give leaves the record unnumbered: it is then asked alone.
    pub fn record_on_id(&self, stream: CUstream, id: Option<u64>) -> Result<()> {
        let mut records = RECORDS.lock().unwrap_or_else(|p| p.into_inner());
        drv!(cuEventRecord(self.raw, stream))?;
        *records += 1;
        let recorded = id.map(|stream| Recorded {
            stream,
            number: *records,
        });
        drop(records);
        *self.recorded.lock().unwrap_or_else(|p| p.into_inner()) = recorded;
        Ok(())
    }
    /// The stream and number of the event's last record, where known. Of two records on one
    /// stream, the later-numbered one completes after the earlier (stream order), so a done
    /// record tells that every earlier record on its stream is done too.
    pub fn recorded(&self) -> Option<Recorded> {
        *self.recorded.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// True once everything before the record has run.
    pub fn is_done(&self) -> Result<bool> {
        // SAFETY: we own the event.
        match unsafe { sys::cuEventQuery(self.raw) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check("cuEventQuery", r).map(|_| false),
        }
    }
    pub fn wait(&self) -> Result<()> {
        drv!(cuEventSynchronize(self.raw))
    }
    /// Milliseconds from `start` to `self`, both timed and done.
    pub fn since(&self, start: &Event) -> Result<f32> {
        let mut ms = 0.0f32;
        drv!(cuEventElapsedTime(&mut ms, start.raw, self.raw))?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: we own the event; destroying a pending event is allowed.
        unsafe { sys::cuEventDestroy_v2(self.raw) };
    }
}
