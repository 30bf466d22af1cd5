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

pub(crate) struct GpuClock {
    module: sys::CUmodule,
    /// Pinned host memory, mapped for the device: reading it back needs no stream.
    stamp: *mut u64,
    /// Timed, recorded right after the stamp kernel.
    after: Event,
    /// The stamp, once read.
    value: Option<u64>,
    /// Host time of the stamp's launch: event times are f32 milliseconds, so a clock is
    /// replaced before the elapsed times grow coarse (1 s: 0.06 µs steps).
    pub born: std::time::Instant,
}

// SAFETY: driver handles, used under the runtime's mutex with its context current.
unsafe impl Send for GpuClock {}

impl GpuClock {
    /// Stamps once on `stream` (asynchronously).
    pub fn start(stream: CUstream) -> Result<GpuClock> {
        let mut module: sys::CUmodule = std::ptr::null_mut();
        drv!(cuModuleLoadData(&mut module, STAMP_PTX.as_ptr().cast()))?;
        let mut clock = GpuClock {
            module,
            stamp: std::ptr::null_mut(),
            after: Event::new(true)?,
            value: None,
            born: std::time::Instant::now(),
        };
        let mut f: sys::CUfunction = std::ptr::null_mut();
        drv!(cuModuleGetFunction(
            &mut f,
            module,
            c"cupreempt_stamp".as_ptr()
        ))?;
        let mut host: *mut c_void = std::ptr::null_mut();
        drv!(cuMemHostAlloc(&mut host, 8, sys::CU_MEMHOSTALLOC_DEVICEMAP))?;
        clock.stamp = host.cast();
        let mut device: CUdeviceptr = 0;
        drv!(cuMemHostGetDevicePointer_v2(&mut device, host, 0))?;
        let mut params = [(&mut device as *mut CUdeviceptr).cast::<c_void>()];
        drv!(cuLaunchKernel(
            f,
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
        clock.after.record_on(stream)?;
        Ok(clock)
    }

    pub fn is_ready(&self) -> Result<bool> {
        self.after.is_done()
    }

    /// The `%globaltimer` value (ns) when the timed event `e` completed, if the stamp is done.
    pub fn globaltime(&mut self, e: &Event) -> Result<Option<u64>> {
        if !self.after.is_done()? {
            return Ok(None);
        }
        let stamp = match self.value {
            Some(v) => v,
            // SAFETY: our pinned word; the kernel that wrote it is done.
            None => *self.value.insert(unsafe { self.stamp.read_volatile() }),
        };
        let ms = e.since(&self.after)? as f64;
        Ok(Some((stamp as f64 + ms * 1e6).max(0.0) as u64))
    }
}

impl Drop for GpuClock {
    fn drop(&mut self) {
        // SAFETY: ours; the stamp kernel is done or the context is going away.
        unsafe {
            let _ = self.after.wait();
            if !self.stamp.is_null() {
                sys::cuMemFreeHost(self.stamp.cast());
            }
            sys::cuModuleUnload(self.module);
        }
    }
}
