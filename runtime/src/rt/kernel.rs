//! `Kernel`: one launch of a transformed kernel, which can be preempted and resumed.
//!
//! Stream order (DESIGN.md §3 item 9). On the application's stream a launch enqueues:
//!
//! ```text
//!   [persistent kernel] [end event] [wait until control.finished >= 1] [finished event]
//! ```
//!
//! so whatever the application enqueues next runs after the last task, however often the
//! kernel is preempted. Commands are stream memory writes on the runtime's high-priority
//! control stream: the host never waits, the GPU never polls host memory.
//!
//! A resume writes the command, then reads the control block (on the same stream, so after
//! the write). If no block of the kernel has started yet, nothing is launched: the first
//! instance, still queued on the application's stream, will find the command cleared. If one
//! has, the application's earlier work is done (stream order), so another instance can run at
//! once on a runtime stream: resumed instances never wait for anything, and kernels sharing a
//! runtime stream cannot hold each other back.

use super::command::{Command, Target};
use super::config::{persistent_blocks, LaunchConfig};
use super::driver::{drv, CUdeviceptr, CUstream, Event};
use super::error::{Error, Result};
use super::runtime::{Function, Inner, Retired, Runtime};
use crate::control::{ControlBlock, LaunchParams};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::mem::{offset_of, size_of, MaybeUninit};
use std::sync::Arc;

/// The kernel's parameters after `cupreempt_launch`, by value, in order.
#[derive(Default, Clone)]
pub struct KernelArgs {
    values: Vec<Box<[MaybeUninit<u8>]>>,
}

impl KernelArgs {
    pub fn new() -> KernelArgs {
        KernelArgs::default()
    }
    /// Appends a parameter; `T` must have the layout of the kernel's parameter (for a pointer
    /// parameter, a `u64` device address or a raw pointer).
    pub fn push<T: Copy>(&mut self, value: T) -> &mut KernelArgs {
        // SAFETY: reads size_of::<T>() bytes of a live value (padding stays uninitialized,
        // which MaybeUninit<u8> allows).
        unsafe { self.push_raw((&value as *const T).cast(), size_of::<T>()) }
    }
    /// Appends `size` bytes at `ptr`, copied now.
    ///
    /// # Safety
    /// `ptr` must be valid for reading `size` bytes.
    pub unsafe fn push_raw(&mut self, ptr: *const c_void, size: usize) -> &mut KernelArgs {
        let mut v = vec![MaybeUninit::<u8>::uninit(); size].into_boxed_slice();
        std::ptr::copy_nonoverlapping(ptr.cast::<MaybeUninit<u8>>(), v.as_mut_ptr(), size);
        self.values.push(v);
        self
    }
    pub fn len(&self) -> usize {
        self.values.len()
    }
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// The application's stream a kernel is launched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamRef(CUstream);

impl StreamRef {
    /// The legacy default stream (stream 0).
    pub fn legacy_default() -> StreamRef {
        StreamRef(std::ptr::null_mut())
    }
    /// A stream created by the caller (cudarc, the CUDA runtime API: a `cudaStream_t` is a
    /// `CUstream`).
    ///
    /// # Safety
    /// `s` must be a valid stream of the runtime's context, alive while kernels launched on it
    /// exist.
    pub unsafe fn from_raw(s: CUstream) -> StreamRef {
        StreamRef(s)
    }
    pub fn raw(&self) -> CUstream {
        self.0
    }
}

/// Tasks finished out of all tasks of the launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

struct Instance {
    blocks: u32,
    end: Event,
}

/// A launched transformed kernel. Dropping the handle detaches it: a preempted kernel is
/// resumed everywhere first (so the application's stream cannot wait forever), and its control
/// block is reused once all its work is done.
pub struct Kernel {
    rt: Arc<Inner>,
    func: Function,
    app_stream: CUstream,
    cfg: LaunchConfig,
    params: LaunchParams,
    args: KernelArgs,
    per_sm: u32,
    command: Command,
    finished: Option<Event>,
    instances: Vec<Instance>,
    /// The runtime stream its resumed instances go to.
    resume_stream: CUstream,
    last_request: Option<Event>,
}

// SAFETY: see runtime::Inner; a Kernel is used by one thread at a time (&mut self).
unsafe impl Send for Kernel {}

impl Runtime {
    /// Launches `func` (a persistent wrapper) for the original launch `cfg` on `stream`,
    /// asynchronously. Returns the configuration error the original launch would get.
    pub fn launch(
        &self,
        func: &Function,
        cfg: &LaunchConfig,
        stream: StreamRef,
        args: &KernelArgs,
    ) -> Result<Kernel> {
        let stream = stream.0;
        let rt = &self.inner;
        let tasks = cfg.tasks(&rt.limits)?;
        rt.current()?;
        let per_sm = rt.blocks_per_sm(func.raw, cfg.threads_per_block(), cfg.shared_mem_bytes)?;
        let slot = rt.acquire_slot(stream)?;
        let mut k = Kernel {
            rt: rt.clone(),
            func: func.clone(),
            app_stream: stream,
            cfg: *cfg,
            params: LaunchParams {
                control: slot,
                total_tasks: tasks,
                grid: cfg.grid,
                chunk: cfg.chunk,
                budget_ns: cfg.budget_ns,
                audit: 0,
            },
            args: args.clone(),
            per_sm,
            command: Command::default(),
            finished: None,
            instances: Vec::new(),
            resume_stream: rt.resume_stream(),
            last_request: None,
        };
        // On error the handle drops here and retires the slot after what was enqueued.
        let blocks = persistent_blocks(k.per_sm, rt.limits.sm_count, tasks);
        k.launch_instance(stream, blocks)?;
        drv!(cuStreamWaitValue32_v2(
            stream,
            slot + offset_of!(ControlBlock, finished) as u64,
            1,
            sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32
        ))?;
        k.finished = Some(k.record(stream, false)?);
        Ok(k)
    }
}

impl Kernel {
    /// A pooled event recorded on `stream`.
    fn record(&self, stream: CUstream, timed: bool) -> Result<Event> {
        let e = self.rt.event(timed)?;
        e.record_on(stream)?;
        Ok(e)
    }

    fn launch_instance(&mut self, stream: CUstream, blocks: u32) -> Result<()> {
        let mut ptrs: Vec<*mut c_void> = std::iter::once(&self.params as *const _ as *mut c_void)
            .chain(self.args.values.iter().map(|v| v.as_ptr() as *mut c_void))
            .collect();
        let [bx, by, bz] = self.cfg.block;
        drv!(cuLaunchKernel(
            self.func.raw,
            blocks,
            1,
            1,
            bx,
            by,
            bz,
            self.cfg.shared_mem_bytes,
            stream,
            ptrs.as_mut_ptr(),
            std::ptr::null_mut()
        ))?;
        let end = self.record(stream, super::timing())?;
        self.instances.push(Instance { blocks, end });
        Ok(())
    }

    /// The control block's device address.
    pub fn control_block(&self) -> CUdeviceptr {
        self.params.control
    }

    pub fn total_tasks(&self) -> u64 {
        self.params.total_tasks
    }

    /// Blocks of the first (persistent) instance.
    pub fn persistent_blocks(&self) -> u32 {
        self.instances.first().map_or(0, |i| i.blocks)
    }

    /// Instances launched so far (the first launch and one per resume).
    pub fn instances(&self) -> usize {
        self.instances.len()
    }

    /// The command in force now.
    pub fn command(&self) -> Command {
        self.command
    }

    /// Asks the kernel's blocks on `target` to stop taking tasks. Returns at once; see
    /// [`Kernel::wait_yielded`].
    pub fn preempt(&mut self, target: Target) -> Result<()> {
        let mut next = self.command;
        next.preempt(&target)?;
        self.rt.current()?;
        let request = self.record(self.rt.control.0, super::timing())?;
        self.write_command(&next)?;
        self.command = next;
        if let Some(old) = self.last_request.replace(request) {
            self.rt.recycle([old]);
        }
        Ok(())
    }

    /// Blocks the calling thread until no block of the kernel runs on the preempted SMs (all
    /// of them after a temporal preemption: every instance has ended). A block that starts
    /// later on such an SM leaves before taking a task.
    pub fn wait_yielded(&self) -> Result<()> {
        if !self.command.is_preempted() {
            return Err(Error::NotPreempted);
        }
        self.rt.current()?;
        if self.command.word() == crate::control::YIELD_ALL {
            // Usually every instance ends within microseconds. An instance that has not
            // started (queued behind other work, maybe behind another preempted kernel) may
            // not end for a long time, but no block of it runs: the control block's count of
            // blocks inside the loop says so (a block counts itself before it looks at the
            // command, so one that starts later leaves without taking a task).
            for round in 0u32.. {
                if self
                    .instances
                    .iter()
                    .try_fold(true, |all, i| Ok::<_, Error>(all && i.end.is_done()?))?
                {
                    return Ok(());
                }
                if round % 16 == 15 && self.read_control()?.running_blocks == 0 {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        let sms = self.command.yielded_sms(self.rt.limits.sm_count);
        loop {
            let c = self.read_control()?;
            if sms.iter().all(|s| c.sm_blocks[s as usize] == 0) {
                return Ok(());
            }
            if self
                .instances
                .iter()
                .try_fold(true, |all, i| Ok::<_, Error>(all && i.end.is_done()?))?
            {
                return Ok(());
            }
        }
    }

    /// Lets blocks run on `target` again: clears the command, and if the kernel had started,
    /// launches another instance on a runtime stream, sized for the SMs freed (see the module
    /// comment). Blocks of earlier instances that have not yet seen the preemption keep going;
    /// the task counter keeps the work exactly-once.
    pub fn resume(&mut self, target: Target) -> Result<()> {
        let mut next = self.command;
        let freed = next.resume(&target, self.rt.limits.sm_count)?;
        self.rt.current()?;
        self.write_command(&next)?;
        self.command = next;
        // Read after the write: a block counts itself before it looks at the command.
        let c = self.read_control()?;
        let started = c.running_blocks > 0 || c.yielded_blocks > 0 || c.next_task > 0;
        if !started || c.finished != 0 {
            return Ok(());
        }
        let blocks = persistent_blocks(self.per_sm, freed.len() as u32, self.params.total_tasks);
        self.launch_instance(self.resume_stream, blocks)
    }

    /// Tasks done so far (a snapshot read through the control stream).
    pub fn progress(&self) -> Result<Progress> {
        self.rt.current()?;
        let c = self.read_control()?;
        Ok(Progress {
            done: c.done_tasks,
            total: self.params.total_tasks,
        })
    }

    /// True once every task is done and the application's stream has passed the kernel.
    pub fn is_complete(&self) -> Result<bool> {
        self.rt.current()?;
        match &self.finished {
            Some(e) => e.is_done(),
            None => Ok(false),
        }
    }

    /// Blocks until the kernel is complete. A preempted kernel would never complete, so that
    /// is an error.
    pub fn wait(&self) -> Result<()> {
        if self.command.is_preempted() {
            return Err(Error::AlreadyPreempted);
        }
        self.rt.current()?;
        match &self.finished {
            Some(e) => e.wait(),
            None => Ok(()),
        }
    }

    /// GPU time from the last preempt request to the end of the last instance that had
    /// started before it, in milliseconds: the GPU-side preemption latency. Call after
    /// `wait_yielded` of a temporal preemption. Needs [`set_event_timing`](super::set_event_timing)
    /// on before the launch and the preemption (None otherwise).
    pub fn last_yield_latency_ms(&self) -> Result<Option<f32>> {
        let Some(req) = self.last_request.as_ref().filter(|r| r.timed) else {
            return Ok(None);
        };
        req.wait()?; // on the control stream: done at once, but maybe not yet
        let mut latest: Option<f32> = None;
        for i in self.instances.iter().filter(|i| i.end.timed) {
            if i.end.is_done()? {
                let ms = i.end.since(req)?;
                latest = Some(latest.map_or(ms, |l: f32| l.max(ms)));
            }
        }
        Ok(latest)
    }

    fn write_command(&self, next: &Command) -> Result<()> {
        let control = self.rt.control.0;
        let base = self.params.control;
        let old = self.command.mask().words();
        for (i, (&new, &was)) in next.mask().words().iter().zip(old.iter()).enumerate() {
            if new != was {
                let at = offset_of!(ControlBlock, sm_mask) + 4 * i;
                drv!(cuStreamWriteValue32_v2(control, base + at as u64, new, 0))?;
            }
        }
        let at = base + offset_of!(ControlBlock, command) as u64;
        drv!(cuStreamWriteValue32_v2(control, at, next.word(), 0))
    }

    fn read_control(&self) -> Result<ControlBlock> {
        let mut c = ControlBlock::zeroed();
        let control = self.rt.control.0;
        drv!(cuMemcpyDtoHAsync_v2(
            (&mut c as *mut ControlBlock).cast(),
            self.params.control,
            size_of::<ControlBlock>(),
            control
        ))?;
        drv!(cuStreamSynchronize(control))?;
        Ok(c)
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if self.command.is_preempted() && !self.instances.is_empty() {
            // Without this the application's stream would wait for the kernel forever.
            let _ = self.resume(Target::All);
        }
        let mut events: Vec<Event> = self.instances.drain(..).map(|i| i.end).collect();
        if self.finished.is_none() {
            // A launch that failed half-way: retire after what it did enqueue.
            events.extend(self.record(self.app_stream, false).ok());
        }
        events.extend(self.finished.take());
        events.extend(self.last_request.take());
        self.rt.retire(Retired {
            slot: self.params.control,
            events,
        });
    }
}
