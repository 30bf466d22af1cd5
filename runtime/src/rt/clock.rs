//! Preemption latency on the GPU clock. A preempt request is an event on the control stream;
//! the end of a yield is a `%globaltimer` stamp that the yielding blocks leave in the control
//! block (the first instance's last block never ends while the kernel is preempted, so an
//! instance's end event cannot mark it). One stamp kernel followed by a timed event puts both
//! on one time line: the globaltimer value of any later timed event is the stamp plus the
//! events' elapsed time. Both are the GPU's nanosecond timer; the stamp is taken a little
//! before its event (the kernel's end), so latencies come out that much longer, never shorter.

use super::driver::{drv, CUdeviceptr, CUstream, Event};
use super::error::Result;
use cudarc::driver::sys;
use std::ffi::c_void;

/// Stores `%globaltimer` at the address given. PTX, JIT-compiled by the driver for any GPU.
const STAMP_PTX: &str = "\
.version 7.0
.target sm_70
.address_size 64
.visible .entry cupreempt_stamp(.param .u64 out)
{
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u64 %rd3, %globaltimer;
  st.global.u64 [%rd2], %rd3;
  ret;
}
\0";

/// The stamp kernel and the pinned words it writes, made once per runtime (at the first clock)
/// and freed only with the runtime. Freeing pinned memory or unloading a module waits for the
/// whole context's work, which never ends while a kernel is preempted: a clock made and freed
/// every second deadlocked a program that launched while another kernel was preempted.
pub(crate) struct Clocks {
    stamper: Option<Stamper>,
    /// The newest clocks, oldest first (at most two).
    live: Vec<GpuClock>,
}

struct Stamper {
    module: sys::CUmodule,
    function: sys::CUfunction,
    /// `SLOTS` words of pinned host memory, mapped for the device: reading a stamp back needs
    /// no stream.
    host: *mut u64,
    device: CUdeviceptr,
    next: usize,
}

/// One word per live clock: a new clock starts only once the newest one's stamp is done, so
/// the word it takes over belongs to a clock whose stamp is done too.
const SLOTS: usize = 2;

// SAFETY: driver handles and pinned memory, used under the runtime's mutex with its context
// current.
unsafe impl Send for Clocks {}

impl Clocks {
    pub fn new() -> Clocks {
        Clocks {
            stamper: None,
            live: Vec::new(),
        }
    }

    /// Starts a clock on `stream` unless the newest one is younger than a second or its
    /// stamp is not done yet (its stream may wait behind a preempted kernel's stream: then
    /// the older clocks go on serving).
    pub fn keep(&mut self, stream: CUstream) -> Result<()> {
        if let Some(c) = self.live.last() {
            if c.born.elapsed() < std::time::Duration::from_secs(1) || !c.after.is_done()? {
                return Ok(());
            }
        }
        if self.stamper.is_none() {
            self.stamper = Some(Stamper::new()?);
        }
        let st = self.stamper.as_mut().expect("made above");
        let slot = st.next;
        st.next = (st.next + 1) % SLOTS;
        let clock = GpuClock::start(st, slot, stream)?;
        self.live.push(clock);
        if self.live.len() > SLOTS {
            self.live.remove(0);
        }
        Ok(())
    }

    /// The `%globaltimer` value (ns) when the timed event `e` completed, from the newest clock
    /// whose stamp is done.
    pub fn globaltime(&mut self, e: &Event) -> Result<Option<u64>> {
        for c in self.live.iter_mut().rev() {
            if c.after.is_done()? {
                return c.globaltime(e);
            }
        }
        Ok(None)
    }
}

impl Stamper {
    fn new() -> Result<Stamper> {
        let mut module: sys::CUmodule = std::ptr::null_mut();
        drv!(cuModuleLoadData(&mut module, STAMP_PTX.as_ptr().cast()))?;
        let mut st = Stamper {
            module,
            function: std::ptr::null_mut(),
            host: std::ptr::null_mut(),
            device: 0,
            next: 0,
        };
        drv!(cuModuleGetFunction(
            &mut st.function,
            module,
            c"cupreempt_stamp".as_ptr()
        ))?;
        let mut host: *mut c_void = std::ptr::null_mut();
        drv!(cuMemHostAlloc(
            &mut host,
            8 * SLOTS,
            sys::CU_MEMHOSTALLOC_DEVICEMAP
        ))?;
        st.host = host.cast();
        drv!(cuMemHostGetDevicePointer_v2(&mut st.device, host, 0))?;
        Ok(st)
    }
}

impl Drop for Stamper {
    fn drop(&mut self) {
        // SAFETY: ours; the runtime is going away, so no stamp of ours is still wanted.
        unsafe {
            if !self.host.is_null() {
                sys::cuMemFreeHost(self.host.cast());
            }
            sys::cuModuleUnload(self.module);
        }
    }
}

struct GpuClock {
    /// The stamp's word (pinned, in the stamper's `host`).
    stamp: *const u64,
    /// Timed, recorded right after the stamp kernel.
    after: Event,
    /// The stamp, once read.
    value: Option<u64>,
    /// Host time of the stamp's launch: event times are f32 milliseconds, so a clock is
    /// replaced before the elapsed times grow coarse (1 s: 0.06 µs steps).
    born: std::time::Instant,
}

impl GpuClock {
    /// Stamps once into word `slot` on `stream` (asynchronously).
    fn start(st: &Stamper, slot: usize, stream: CUstream) -> Result<GpuClock> {
        let mut device = st.device + (8 * slot) as u64;
        let mut params = [(&mut device as *mut CUdeviceptr).cast::<c_void>()];
        drv!(cuLaunchKernel(
            st.function,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut()
        ))?;
        let after = Event::new(true)?;
        after.record_on(stream)?;
        Ok(GpuClock {
            // SAFETY: within the stamper's SLOTS words.
            stamp: unsafe { st.host.add(slot) },
            after,
            value: None,
            born: std::time::Instant::now(),
        })
    }

    /// The `%globaltimer` value (ns) when the timed event `e` completed, if the stamp is done.
    fn globaltime(&mut self, e: &Event) -> Result<Option<u64>> {
        if !self.after.is_done()? {
            return Ok(None);
        }
        let stamp = match self.value {
            Some(v) => v,
            // SAFETY: the stamper's pinned word; the kernel that wrote it is done, and the
            // word is not stamped again while this clock lives (`SLOTS`).
            None => *self.value.insert(unsafe { self.stamp.read_volatile() }),
        };
        let ms = e.since(&self.after)? as f64;
        Ok(Some((stamp as f64 + ms * 1e6).max(0.0) as u64))
    }
}
