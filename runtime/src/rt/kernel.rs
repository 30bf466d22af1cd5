//! `Kernel`: one launch of a transformed kernel, which can be preempted and resumed.
//!
//! Stream order. On the application's stream a launch enqueues only
//!
//! ```text
//!   [first instance of the persistent kernel] [end event]
//! ```
//!
//! and whatever the application enqueues next runs after the last task, however often the
//! kernel is preempted, because the first instance does not end before then: its last block
//! to leave the task loop stays (sleeping while the kernel is preempted, working while it is
//! not) until every task has retired (`stay()` in task_loop.cuh). That block depends on no
//! other stream: a resumed instance only speeds the work up.
//!
//! Commands are stream memory writes into the control block on the runtime's high-priority
//! control stream, which running blocks poll. The host also publishes each command in the
//! launch's host mirror (pinned memory, `HostMirror`) first: the staying block reads it there
//! while it sleeps, so a resume reaches it even when the control stream's writes wait behind
//! another stream's blocked work in a shared hardware queue (docs/runtime.md, "Stream order
//! and hardware queues"). Blocks report the SMs they run on in the mirror (plain stores), so
//! that `wait_yielded` reads no device memory through any stream.

use super::command::{Command, Target};
use super::config::{persistent_blocks, LaunchConfig};
use super::driver::{drv, CUdeviceptr, CUstream, Event};
use super::error::{Error, Result};
use super::pool::{Mirror, Retired, RetiredEvents};
use super::runtime::{Function, Inner, Runtime};
use super::steps::{self, Step};
use crate::control::{
    progress_shift, ControlBlock, HostMirror, LaunchParams, ANCHOR, FIRST, LANES, LAUNCH_VERSION,
    LINK, RESUMED,
};
use crate::smset::{SmSet, MAX_SMS};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::mem::{offset_of, size_of, MaybeUninit};
use std::ptr::{addr_of, addr_of_mut};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The kernel's parameters after `cupreempt_launch`, by value, in order: their bytes in one
/// buffer, each on an 8-byte boundary (the driver copies each parameter from the address it is
/// given, so host alignment beyond that is not needed), so that a launch makes two
/// allocations for its arguments, not one per parameter.
#[derive(Default, Clone)]
pub struct KernelArgs {
    words: Vec<MaybeUninit<u64>>,
    /// Where each parameter starts in `words`.
    starts: Vec<u32>,
}

/// `cuLaunchKernel`'s parameter pointers are made on the stack up to this many parameters.
const ON_STACK: usize = 32;

impl KernelArgs {
    pub fn new() -> KernelArgs {
        KernelArgs::default()
    }
    /// Room for `params` parameters of `bytes` bytes in all, allocated once.
    pub fn with_capacity(params: usize, bytes: usize) -> KernelArgs {
        KernelArgs {
            words: Vec::with_capacity(bytes.div_ceil(8) + params),
            starts: Vec::with_capacity(params),
        }
    }
    /// Appends a parameter; `T` must have the layout of the kernel's parameter (for a pointer
    /// parameter, a `u64` device address or a raw pointer).
    pub fn push<T: Copy>(&mut self, value: T) -> &mut KernelArgs {
        // SAFETY: reads size_of::<T>() bytes of a live value (padding stays uninitialized,
        // which MaybeUninit allows).
        unsafe { self.push_raw((&value as *const T).cast(), size_of::<T>()) }
    }
    /// Appends `size` bytes at `ptr`, copied now.
    ///
    /// # Safety
    /// `ptr` must be valid for reading `size` bytes.
    pub unsafe fn push_raw(&mut self, ptr: *const c_void, size: usize) -> &mut KernelArgs {
        let start = self.words.len();
        self.starts.push(start as u32);
        self.words
            .resize(start + size.div_ceil(8), MaybeUninit::uninit());
        std::ptr::copy_nonoverlapping(
            ptr.cast::<u8>(),
            self.words.as_mut_ptr().add(start).cast::<u8>(),
            size,
        );
        self
    }
    pub fn len(&self) -> usize {
        self.starts.len()
    }
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }
    /// Calls `f` with the driver's parameter array: `first`, then each parameter's address.
    fn with_pointers<T>(&self, first: *mut c_void, f: impl FnOnce(&mut [*mut c_void]) -> T) -> T {
        let base = self.words.as_ptr() as *mut MaybeUninit<u64>;
        // SAFETY: every start lies inside `words` (push_raw).
        let at = |start: u32| unsafe { base.add(start as usize) }.cast::<c_void>();
        let n = self.starts.len() + 1;
        if n <= ON_STACK {
            let mut ptrs = [std::ptr::null_mut::<c_void>(); ON_STACK];
            ptrs[0] = first;
            for (p, &start) in ptrs[1..].iter_mut().zip(&self.starts) {
                *p = at(start);
            }
            f(&mut ptrs[..n])
        } else {
            let mut ptrs: Vec<*mut c_void> = std::iter::once(first)
                .chain(self.starts.iter().map(|&s| at(s)))
                .collect();
            f(&mut ptrs)
        }
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
    /// Its id (`driver::stream_id`), asked for at the launch.
    app_stream_id: Option<u64>,
    cfg: LaunchConfig,
    params: LaunchParams,
    mirror: Mirror,
    /// The launch's number (also in the mirror's `launch`).
    number: u64,
    args: KernelArgs,
    per_sm: u32,
    command: Command,
    /// Number of the command in force (even; see `HostMirror::seq`).
    seq: u32,
    /// Recorded on the control stream after the last resume's writes (the stream of its
    /// instance waits for it). A preemption records none: the host sees it land in the host
    /// mirror (`command_landed`).
    landed: Option<Event>,
    /// The first instance (its end is the kernel's completion), then one per resume.
    instances: smallvec::SmallVec<[Instance; 1]>,
    /// The runtime stream its resumed instances go to (chosen at the first resume).
    resume_stream: Option<CUstream>,
    /// Gated links before the last instance (rt::links), and how many gates resumes opened.
    links: u32,
    gates_opened: u32,
    last_request: Option<Event>,
    /// The next resume's events (its landed event, its instance's end), taken before the
    /// preemption was published: creating one after the resume's publishing would hold its
    /// instance back until the kernel ends (see `publish`).
    for_resume: Option<(Event, Event)>,
    /// The highest progress seen (the mirror's stores may land out of order).
    progress_seen: AtomicU64,
    /// The first instance was launched to start while the kernel before it drains
    /// (`launch_grid`).
    overlapped: bool,
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
        self.launch_kept_off(func, cfg, stream, args, None)
    }

    /// As [`Runtime::launch`], with the kernel preempted on the SMs `off` from its start (a
    /// scheduler's standing order): no block takes a task there until they are resumed. The
    /// command is sent as any command (host mirror, then the control block through the control
    /// stream), and the launch does not wait for it to land: its parameters carry the SMs
    /// (`start_off`), which blocks obey until a command has reached the control block. Reading
    /// the host mirror at entry instead (a system-scope fence in every block) kept the blocks
    /// of a 4,224-block launch on those SMs for 17 ms on the H100, against 0.15 ms.
    pub fn launch_kept_off(
        &self,
        func: &Function,
        cfg: &LaunchConfig,
        stream: StreamRef,
        args: &KernelArgs,
        off: Option<&SmSet>,
    ) -> Result<Kernel> {
        self.launch_owned(func, cfg, stream, args.clone(), off)
            .map(|k| *k)
    }

    /// As [`Runtime::launch_kept_off`], keeping `args` (the C ABI's launches, which copy the
    /// caller's arguments once), the handle boxed: the C ABI's launches pass it on several
    /// times, and moving the struct each time cost more than the box (5,169 instructions of
    /// the runtime per launch against 4,936, `scripts/probes/host_path_instructions.sh`).
    pub(crate) fn launch_owned(
        &self,
        func: &Function,
        cfg: &LaunchConfig,
        stream: StreamRef,
        args: KernelArgs,
        off: Option<&SmSet>,
    ) -> Result<Box<Kernel>> {
        let stream = stream.0;
        let rt = &self.inner;
        let tasks = cfg.tasks(&rt.limits()?)?;
        rt.current()?;
        steps::lap(Step::Limits);
        let per_sm = rt.blocks_per_sm(func.raw, cfg.threads_per_block(), cfg.shared_mem_bytes)?;
        super::trace_setup("occupancy");
        steps::lap(Step::Occupancy);
        // Never so many queued that the driver's queue fills behind a preempted launch.
        rt.queued
            .wait_for_room(super::links::queued_limit(cfg.links));
        // Asked once: the slot's zeroing check and the end event's record both need it.
        let stream_id = super::driver::stream_id(stream);
        let slot = rt.acquire_slot(stream, stream_id)?;
        super::trace_setup("control block");
        steps::lap(Step::ControlBlock);
        let number = rt.launches.fetch_add(1, Ordering::Relaxed) + 1;
        // SAFETY: the slot is ours; kernels never write `launch`, and the slot's earlier launch
        // retired after its last command's writes (Drop), so none of them is still on its way.
        // (`Pool::acquire` zeroed every word before the lanes, `landed_seq` among them.)
        unsafe {
            addr_of_mut!((*slot.mirror.host).launch).write_volatile(number);
        }
        if super::timing() {
            rt.keep_clock()?;
        }
        let mut k = Box::new(Kernel {
            rt: rt.clone(),
            func: func.clone(),
            app_stream: stream,
            app_stream_id: stream_id,
            cfg: *cfg,
            params: LaunchParams {
                control: slot.control,
                total_tasks: tasks,
                grid: cfg.grid,
                chunk: cfg.chunk,
                budget_ns: cfg.budget_ns,
                audit: 0,
                host: slot.mirror.device,
                first: FIRST,
                progress_shift: progress_shift(tasks),
                task_ns: cfg.task_ns,
                start_off: [0; MAX_SMS / 32],
                leftover: if super::leftover_slots() {
                    slot.leftover
                } else {
                    0
                },
                launch_version: LAUNCH_VERSION,
                reserved: 0,
            },
            mirror: slot.mirror,
            number,
            args,
            per_sm,
            command: Command::default(),
            seq: 0,
            landed: None,
            instances: smallvec::SmallVec::new(),
            resume_stream: None,
            links: cfg.links,
            gates_opened: 0,
            last_request: None,
            for_resume: None,
            progress_seen: AtomicU64::new(0),
            overlapped: false,
        });
        if let Some(sms) = off.filter(|s| !s.is_empty()) {
            let mut next = k.command;
            next.preempt(&Target::Sms(*sms))?;
            let control = k.rt.control_stream()?;
            k.publish(next);
            k.deliver(next, None, control)?;
            k.params.start_off = *sms.words();
        }
        // On error the handle drops here and retires the slot after what was enqueued.
        let blocks = persistent_blocks(k.per_sm, rt.sm_count, tasks);
        steps::lap(Step::Handle);
        let launched = if k.links > 0 {
            k.launch_links(stream, blocks)
        } else {
            Ok(())
        }
        .and_then(|()| k.launch_instance(stream, blocks, None));
        if let Err(e) = launched {
            // Links already enqueued must not leave the application's stream at a closed gate.
            k.open_every_gate();
            return Err(e);
        }
        rt.queued.add(k.mirror, number);
        super::trace_setup("launch and end event");
        // Every later instance is a resumed one, launched after the newest command has landed.
        k.params.first = RESUMED;
        k.params.start_off = [0; MAX_SMS / 32];
        Ok(k)
    }
}

impl Runtime {
    /// Blocks of `func` that fit on the device at once for `cfg` (per SM times SMs).
    pub(crate) fn capacity(&self, func: &Function, cfg: &LaunchConfig) -> Result<u64> {
        let rt = &self.inner;
        let per_sm = rt.blocks_per_sm(func.raw, cfg.threads_per_block(), cfg.shared_mem_bytes)?;
        Ok(per_sm as u64 * rt.sm_count as u64)
    }
}

impl Kernel {
    /// A pooled event recorded on `stream`.
    fn record(&self, stream: CUstream, timed: bool) -> Result<Event> {
        let e = self.rt.event(timed)?;
        e.record_on(stream)?;
        Ok(e)
    }

    /// The gated links (rt::links) on the application's stream, each followed by its wait;
    /// the instance launched next is their anchor.
    fn launch_links(&mut self, stream: CUstream, blocks: u32) -> Result<()> {
        // SAFETY: the slot is ours, and no kernel of an earlier launch that had it still runs.
        unsafe { addr_of_mut!((*self.mirror.host).gate).write_volatile(0) };
        let gate = self.mirror.device + offset_of!(HostMirror, gate) as u64;
        self.params.first = LINK;
        for link in 1..=self.links {
            self.launch_grid(stream, blocks)?;
            drv!(cuStreamWaitValue32_v2(
                stream,
                gate,
                link,
                cudarc::driver::sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32
            ))?;
        }
        self.params.first = ANCHOR;
        Ok(())
    }

    /// Opens every gate from the host (a launch that failed after enqueueing links): the
    /// links then run whatever is left, as the kernel's own last retirement would have let them.
    fn open_every_gate(&mut self) {
        if self.links > 0 {
            self.open_gates(self.links);
        }
    }

    /// Opens gates 1..=`opened` (rt::links) with the host's store to the gate.
    fn open_gates(&mut self, opened: u32) {
        self.gates_opened = opened;
        // SAFETY: the mirror is ours; the host writes only the gate's low 16 bits, the kernel
        // only its top byte.
        unsafe {
            addr_of_mut!((*self.mirror.host).gate)
                .cast::<u16>()
                .write_volatile(super::links::host_gate(opened))
        };
    }

    /// `end`: an event taken earlier for the instance's end (a resume's, see `for_resume`).
    fn launch_instance(&mut self, stream: CUstream, blocks: u32, end: Option<Event>) -> Result<()> {
        self.launch_grid(stream, blocks)?;
        let timed = super::timing();
        let end = match end {
            Some(e) if e.timed == timed => e,
            other => {
                self.rt.recycle(other);
                self.rt.event(timed)?
            }
        };
        let id = if stream == self.app_stream {
            self.app_stream_id
        } else {
            super::driver::stream_id(stream)
        };
        end.record_on_id(stream, id)?;
        self.instances.push(Instance { blocks, end });
        steps::lap(Step::EndEvent);
        Ok(())
    }

    fn launch_grid(&mut self, stream: CUstream, blocks: u32) -> Result<()> {
        let [bx, by, bz] = self.cfg.block;
        // A first instance may start while the kernel before it in the stream drains
        // (docs/runtime.md, "Launches that overlap"). Not links and their anchor, which follow
        // a wait on their gate, nor resumed instances, which run beside the first.
        let overlap = self.params.first == FIRST
            && super::overlap_launches()
            && self.rt.waits_for_predecessor(self.func.raw);
        let params = &self.params as *const LaunchParams as *mut c_void;
        let (func, smem) = (self.func.raw, self.cfg.shared_mem_bytes);
        self.args.with_pointers(params, |ptrs| {
            if overlap {
                let mut attr = sys::CUlaunchAttribute {
                    id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                    pad: [0; 4],
                    value: sys::CUlaunchAttributeValue {
                        programmaticStreamSerializationAllowed: 1,
                    },
                };
                let config = sys::CUlaunchConfig {
                    gridDimX: blocks,
                    gridDimY: 1,
                    gridDimZ: 1,
                    blockDimX: bx,
                    blockDimY: by,
                    blockDimZ: bz,
                    sharedMemBytes: smem,
                    hStream: stream,
                    attrs: &mut attr,
                    numAttrs: 1,
                };
                drv!(cuLaunchKernelEx(
                    &config,
                    func,
                    ptrs.as_mut_ptr(),
                    std::ptr::null_mut()
                ))
            } else {
                drv!(cuLaunchKernel(
                    func,
                    blocks,
                    1,
                    1,
                    bx,
                    by,
                    bz,
                    smem,
                    stream,
                    ptrs.as_mut_ptr(),
                    std::ptr::null_mut()
                ))
            }
        })?;
        self.overlapped |= overlap;
        steps::lap(Step::LaunchCall);
        Ok(())
    }

    /// The host mirror and the launch's number (for the launch history).
    pub(crate) fn mirror(&self) -> (Mirror, u64) {
        (self.mirror, self.number)
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

    /// The launched function's name as the driver knows it (the wrapper's mangled name), or
    /// its handle where the driver cannot say.
    pub fn function_name(&self) -> String {
        // cuFuncGetName exists from CUDA 12.3 on; asking an older driver for it would fail to
        // load the symbol.
        let new_enough = super::driver::version() >= 12030;
        let mut name: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: the function handle lives as long as `self`; the driver writes a pointer to a
        // string it owns, or leaves it null.
        if new_enough
            && unsafe { sys::cuFuncGetName(&mut name, self.func.raw) }
                == sys::CUresult::CUDA_SUCCESS
            && !name.is_null()
        {
            // SAFETY: not null: a NUL-terminated string of the driver's.
            return unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
        }
        format!("function@{:p}", self.func.raw)
    }

    /// How far above the context's lowest stream priority the launch's stream is: 0 for the
    /// lowest (the default), more for higher ones (CUDA's own numbers fall as priority rises).
    pub fn stream_priority_rank(&self) -> Result<u32> {
        self.rt.current()?;
        let mut p = 0;
        drv!(cuStreamGetPriority(self.app_stream, &mut p))?;
        let (mut least, mut greatest) = (0, 0);
        drv!(cuCtxGetStreamPriorityRange(&mut least, &mut greatest))?;
        Ok((least - p).max(0) as u32)
    }

    /// The launch's configuration, as the program gave it.
    pub fn launch_config(&self) -> LaunchConfig {
        self.cfg
    }

    /// The SMs of the GPU the kernel runs on.
    pub fn sm_count(&self) -> u32 {
        self.rt.sm_count
    }

    /// Whether the GPU's contexts are shared through MPS (none: unknown); see `Inner::mps`.
    pub fn gpu_shared_through_mps(&self) -> Option<bool> {
        self.rt.mps()
    }

    /// Whether the command in force keeps the kernel off every SM: then nothing of it runs
    /// until a resume, and any wait for it inside the driver lasts until then.
    pub fn held_everywhere(&self) -> bool {
        self.command.yielded_sms(self.rt.sm_count).len() >= self.rt.sm_count as usize
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
        // The request's event serves latency measurements only: without event timing none is
        // recorded (a driver call of 2-6 us that would come before the command).
        if super::timing() {
            let request = self.record(self.rt.control_stream()?, true)?;
            if let Some(old) = self.last_request.replace(request) {
                self.rt.recycle([old]);
            }
        } else if let Some(old) = self.last_request.take() {
            self.rt.recycle([old]);
        }
        // Whatever may wait inside the driver comes before the command is published (see
        // `publish`): the resume's events may have to be created, and creating one waits for
        // any thread of the program in a synchronous copy, which waits for this very kernel.
        // So may the control stream, which the first caller makes, and recycling, which may
        // destroy an event (a full pool). The preemption itself records no event: the host
        // sees its writes land in host memory.
        let control = self.rt.control_stream()?;
        if self.for_resume.is_none() {
            self.for_resume = Some((self.rt.event(false)?, self.rt.event(super::timing())?));
        }
        if let Some(old) = self.landed.take() {
            self.rt.recycle([old]);
        }
        self.publish(next);
        self.deliver(next, None, control)
    }

    /// Blocks the calling thread until no block of the kernel works on the preempted SMs (all
    /// of them after a temporal preemption). A block that starts later on such an SM leaves
    /// before taking a task. The first instance's last block may stay resident, asleep, until
    /// the kernel is resumed: that is what keeps the application's stream waiting (see the
    /// module comment).
    ///
    /// One exception, so that this never waits forever: a kernel that has not started, whose
    /// command is still held up after `HELD_UP` (the control stream's writes wait behind
    /// another stream's blocked work in a shared hardware queue, and so may the kernel's own
    /// launch: both can be behind a stream whose kernel is preempted), counts as yielded,
    /// since no block of it holds an SM. Its blocks that start before the command lands may
    /// take tasks until it does (docs/runtime.md, "Stream order and hardware queues").
    ///
    /// It reads host memory only, no driver call: while the kernel is preempted, a thread of
    /// the program may wait inside the driver for it (`cudaFree`, a synchronous copy) and hold
    /// the context's lock, and a query behind that lock would wait for the resume this thread
    /// is about to send (docs/runtime.md, "No wait inside the driver while preempted").
    pub fn wait_yielded(&self) -> Result<()> {
        if !self.command.is_preempted() {
            return Err(Error::NotPreempted);
        }
        let sms = self.command.yielded_sms(self.rt.sm_count);
        let idle = || sms.iter().all(|s| self.sm_idle(s as usize));
        let asked = Instant::now();
        let not_started = || self.instances.len() == 1 && !self.started();
        let mut said = false;
        loop {
            if self.done_in_host_memory() && idle() {
                return Ok(());
            }
            if !said && asked.elapsed() >= STILL_WAITING {
                // A hang's first clue, where the program may never print anything again.
                said = true;
                eprintln!(
                    "cupreempt: waited {} s for kernel {} to yield: {}",
                    STILL_WAITING.as_secs(),
                    self.number,
                    self.waiting_state(&sms)
                );
            }
            // Once the command is in the control block, a block that starts from now on sees
            // it before taking a task, and one that started earlier has set its lane first.
            let landed = self.command_landed();
            let look = |idle: bool| YieldLook {
                landed,
                host_decides: self.host_decides(),
                held_up: asked.elapsed() >= HELD_UP,
                gone: not_started() || self.is_parked(),
                idle,
            };
            if look(false).command_settled() {
                // Twice, a few microseconds apart: a lane's store may still be on its way.
                fence(Ordering::SeqCst);
                if idle() {
                    spin_for(Duration::from_micros(5), || false);
                    if look(idle()).may_have_yielded() {
                        return Ok(());
                    }
                }
            }
            std::hint::spin_loop();
        }
    }

    /// What `wait_yielded` waits on, in words, from host memory: the command's writes, the
    /// lanes held on the SMs it must leave, the tail, the tasks done.
    fn waiting_state(&self, sms: &SmSet) -> String {
        let held: Vec<String> = sms
            .iter()
            .filter(|&s| !self.sm_idle(s as usize))
            .map(|s| s.to_string())
            .collect();
        let instances: Vec<String> = self
            .instances
            .iter()
            .map(|i| i.blocks.to_string())
            .collect();
        format!(
            "command {:#x} on {} SMs, its writes {}; lanes held on SMs [{}]; started {}, tail \
             parked {}, {} of {} tasks done; instances of [{}] blocks",
            self.command.word(),
            sms.len(),
            if self.command_landed() {
                "landed"
            } else {
                "not landed"
            },
            held.join(","),
            self.started(),
            self.is_parked(),
            self.progress_in_host_memory().done,
            self.params.total_tasks,
            instances.join(", ")
        )
    }

    /// Lets blocks run on `target` again: publishes the command, and if the kernel has started
    /// and is not finished, launches another instance on a runtime stream, as large as the GPU
    /// holds. Blocks of earlier instances that have not yet seen the preemption keep going, and
    /// the first instance's staying block goes back to work too; the task counter keeps the
    /// work exactly-once.
    pub fn resume(&mut self, target: Target) -> Result<()> {
        let mut next = self.command;
        next.resume(&target, self.rt.sm_count)?;
        self.rt.current()?;
        // Host memory first: from here on the staying block can finish the work alone, so
        // whatever the driver calls below wait for ends (see `publish`).
        self.publish(next);
        let control = self.rt.control_stream()?;
        let (landed, end) = match self.for_resume.take() {
            Some((landed, end)) => (landed, Some(end)),
            None => (self.rt.event(false)?, None),
        };
        if let Some(old) = self.landed.take() {
            self.rt.recycle([old]);
        }
        self.deliver(next, Some(landed), control)?;
        // Not started: its blocks will find the command cleared. Another instance before then
        // would run tasks before the application's earlier work on its stream is done.
        if !self.started() || self.first_instance_ended()? {
            self.rt.recycle(end);
            return Ok(());
        }
        // Gated links: the next link goes on with the work (rt::links). A gate opened while a
        // link still runs (the resume of part of the GPU) lets the next link start once that
        // one ends, with nothing to do if it did it all.
        if self.gates_opened < self.links {
            self.open_gates(self.gates_opened + 1);
            self.rt.recycle(end);
            return Ok(());
        }
        if !self.rt.resume_launches.load(Ordering::Relaxed) {
            self.rt.recycle(end);
            return Ok(());
        }
        // As many blocks as the whole GPU holds, not just the freed SMs: the hardware places
        // a grid's first blocks on every SM with room, and those that start outside the freed
        // SMs leave at once, so an instance sized for the freed SMs left them part empty
        // (resumed on 66 of 132 SMs, idle otherwise: the freed SMs half full). Blocks that find
        // no room wait in the queue until some leave, and then find the work done or leave.
        let blocks = persistent_blocks(self.per_sm, self.rt.sm_count, self.params.total_tasks);
        // The new instance's blocks must see the cleared command, or they leave at once. If the
        // control stream is held up, so is this instance; the staying block does not need it.
        let stream = match self.resume_stream {
            Some(s) => s,
            None => *self.resume_stream.insert(self.rt.resume_stream()?),
        };
        if let Some(landed) = &self.landed {
            drv!(cuStreamWaitEvent(stream, landed.raw, 0))?;
        }
        self.launch_instance(stream, blocks, end)
    }

    /// Tasks done so far (a snapshot from the host mirror, which the kernel refreshes every
    /// 1/1024 or so of its tasks, and at the end).
    pub fn progress(&self) -> Result<Progress> {
        if self.first_instance_ended()? {
            self.progress_seen
                .fetch_max(self.params.total_tasks, Ordering::Relaxed);
        }
        Ok(self.progress_in_host_memory())
    }

    /// Tasks done so far as the host mirror has them (and as `progress` last saw them), with
    /// no driver call: for a thread that must not wait inside the driver while a kernel is
    /// preempted (chaos mode's progress lines).
    pub fn progress_in_host_memory(&self) -> Progress {
        // SAFETY: as in resume.
        let done = unsafe { addr_of!((*self.mirror.host).done_tasks).read_volatile() };
        let done = self
            .progress_seen
            .fetch_max(done, Ordering::Relaxed)
            .max(done);
        Progress {
            done: done.min(self.params.total_tasks),
            total: self.params.total_tasks,
        }
    }

    /// True once every task is done and the application's stream has passed the kernel.
    pub fn is_complete(&self) -> Result<bool> {
        self.rt.current()?;
        self.first_instance_ended()
    }

    /// Blocks until the kernel is complete. A preempted kernel would never complete, so that
    /// is an error.
    pub fn wait(&self) -> Result<()> {
        if self.command.is_preempted() {
            return Err(Error::AlreadyPreempted);
        }
        self.rt.current()?;
        match self.instances.first() {
            Some(i) => i.end.wait(),
            None => Ok(()),
        }
    }

    /// (latest yield, latest entry of a block into the task loop), `%globaltimer` ns from the
    /// host mirror; 0 where none has happened. The yield stamp is copied there by the
    /// sleeping block, so it appears once the kernel has parked.
    pub fn gpu_stamps(&self) -> (u64, u64) {
        // SAFETY: as in resume.
        unsafe {
            (
                addr_of!((*self.mirror.host).yield_ns).read_volatile(),
                addr_of!((*self.mirror.host).entered_ns).read_volatile(),
            )
        }
    }

    /// True while the first instance's last block sleeps (preempted, or waiting for other
    /// instances' last tasks).
    pub fn is_parked(&self) -> bool {
        // SAFETY: as in resume.
        unsafe { addr_of!((*self.mirror.host).tail_parked).read_volatile() != 0 }
    }

    /// GPU time from the last preempt request to the last block's yield, in milliseconds: the
    /// GPU-side preemption latency. Call after `wait_yielded` of a temporal preemption. Needs
    /// [`set_event_timing`](super::set_event_timing) on before the launch and the preemption
    /// (None otherwise, or when no block yielded after the request). The yield stamp comes
    /// from the host mirror, where the sleeping block copies it (within microseconds of
    /// parking), so this waits on no stream: under compute-sanitizer, which runs one kernel at
    /// a time, a copy would wait behind the parked kernel for ever.
    pub fn last_yield_latency_ms(&self) -> Result<Option<f32>> {
        let Some(req) = self.last_request.as_ref().filter(|r| r.timed) else {
            return Ok(None);
        };
        self.rt.current()?;
        // On the control stream: done at once, unless its writes wait behind another
        // stream's blocked work (a shared hardware queue); then no figure rather than a wait
        // that may never end.
        let mut done = req.is_done()?;
        if !done {
            spin_for(Duration::from_millis(20), || {
                done = req.is_done().unwrap_or(false);
                done
            });
        }
        if !done {
            return Ok(None);
        }
        let Some(request_ns) = self.rt.globaltime(req)? else {
            return Ok(None);
        };
        // SAFETY: as in resume.
        let stamp = || unsafe { addr_of!((*self.mirror.host).yield_ns).read_volatile() };
        let mut seen = stamp();
        spin_for(Duration::from_millis(20), || {
            seen = stamp();
            self.is_parked() && seen > request_ns
        });
        // A few sleeping-block polls more, for yields of other instances that came last.
        spin_for(Duration::from_micros(20), || {
            seen = seen.max(stamp());
            false
        });
        Ok((seen > request_ns).then(|| (seen - request_ns) as f32 / 1e6))
    }

    /// No block of the kernel is in the task loop on any SM (a parked last block, which has
    /// left the loop, aside): what a preempted kernel leaves behind (tests).
    pub fn holds_no_sm_but_a_parked_block(&self) -> bool {
        (0..self.rt.sm_count as usize).all(|s| self.sm_idle(s))
    }

    /// Whether every block that may still start reads the command in host memory before it
    /// takes a task: gated links and their anchor do (rt::links), a resumed instance does not.
    fn host_decides(&self) -> bool {
        self.links > 0 && self.instances.len() == 1 && self.links_entered()
    }

    /// Whether every block of the gated-link instance whose forwarded command may predate the
    /// latest command has entered, so that the lanes show it (task_loop.cuh, link_command):
    /// an instance that announced itself after the command was published reads that command.
    /// Called after the command was published (with a fence between).
    fn links_entered(&self) -> bool {
        // SAFETY: as in resume; words the kernel writes, read as they are.
        let (announced, entered) = unsafe {
            (
                addr_of!((*self.mirror.host).link_announced).read_volatile(),
                addr_of!((*self.mirror.host).link_entered).read_volatile(),
            )
        };
        super::links::instance_entered(announced, entered)
    }

    /// Whether a block of the kernel has begun taking tasks (the host mirror's flag, set by
    /// its first block once the application's earlier work on its stream is done; a launch
    /// still queued behind that work has not). A flag rather than an event recorded before the
    /// launch: one stream operation less per launch (an event record costs about 1.5 us of GPU
    /// time between back-to-back launches, H100).
    pub fn started(&self) -> bool {
        // SAFETY: as in resume.
        unsafe { addr_of!((*self.mirror.host).started).read_volatile() != 0 }
    }

    /// Whether the first instance was launched so that its blocks may start while the kernel
    /// before it in the stream drains (docs/runtime.md, "Launches that overlap"): a function
    /// built for sm_90 or later with headers that have the wait (`launch_version`), a CUDA
    /// 12.4 driver, and `overlap_launches()`.
    pub fn overlapped(&self) -> bool {
        self.overlapped
    }

    /// Whether the control block holds the newest command: the control stream has written
    /// its number into host memory after its writes (`deliver`).
    fn command_landed(&self) -> bool {
        // SAFETY: as in resume; a word the control stream writes.
        let landed = unsafe { addr_of!((*self.mirror.host).landed_seq).read_volatile() };
        landed == self.seq
    }

    /// Whether every task is done as host memory says (the kernel writes the count at its
    /// end), with no driver call: for a thread that must not wait inside the driver while a
    /// kernel is preempted (the scheduler client while it holds one).
    pub fn done_in_host_memory(&self) -> bool {
        let p = self.progress_in_host_memory();
        p.done >= p.total
    }

    fn first_instance_ended(&self) -> Result<bool> {
        match self.instances.first() {
            Some(i) => i.end.is_done(),
            None => Ok(false),
        }
    }

    /// True when no block of the kernel holds a lane on SM `sm` (host mirror).
    fn sm_idle(&self, sm: usize) -> bool {
        // SAFETY: as in resume; the lanes are whole bytes, each written by one block at a time.
        let lanes = unsafe { addr_of!((*self.mirror.host).lanes[sm]) };
        (0..LANES / 8).all(|w| unsafe { lanes.cast::<u64>().add(w).read_volatile() } == 0)
    }

    // Making a command the one in force takes two steps, `publish` (host memory) and `deliver`
    // (the control block). Between a preemption's publishing and its resume's, no driver call
    // that can wait for the preempted kernel (docs/runtime.md, "No wait inside the driver
    // while preempted"): a thread of the program in a synchronous copy (`cudaMemcpy` to
    // pageable memory) holds the driver's context lock shared until the work before the copy
    // (the kernel) is done, and creating an event or a stream takes that lock exclusively (seen
    // on the H200: the chaos thread in `cuEventCreate`, `pthread_rwlock_wrlock`, for a landed
    // event; the program in `cuMemcpyDtoH_v2`; the kernel's staying block asleep, preempted,
    // forever). So a preemption takes the control stream and every event it and its resume
    // need before it publishes, and a resume publishes before anything else: once host memory
    // says resume, the staying block can finish the work alone and every wait inside the
    // driver ends.

    /// Publishes `next` in the host mirror (a seqlock: odd `seq` while it changes); the
    /// sleeping tail and blocks that follow host memory act on it from here on. Host stores
    /// only, no driver call. `deliver` must follow.
    fn publish(&mut self, next: Command) {
        let seq = self.seq.wrapping_add(2);
        let words = next.mask().words();
        let m: *mut HostMirror = self.mirror.host;
        // The seqlock's stores need only stay in order (release fences: no instruction on x86,
        // where a full fence after stores to memory the GPU maps cost microseconds).
        // SAFETY: the mirror is ours; kernels only read these words.
        unsafe {
            addr_of_mut!((*m).seq).write_volatile(seq.wrapping_sub(1));
            fence(Ordering::Release);
            for (i, &w) in words.iter().enumerate() {
                addr_of_mut!((*m).sm_mask[i]).write_volatile(w);
            }
            addr_of_mut!((*m).command).write_volatile(next.word());
            fence(Ordering::Release);
            addr_of_mut!((*m).seq).write_volatile(seq);
            // Before any later look at what the kernel writes: a gated link's announcement
            // (links_entered) either comes after this or its read sees this command.
            fence(Ordering::SeqCst);
        }
    }

    /// Writes `next`, just published, into the control block through `control` (the
    /// mask words that change, the word, its number, and the number again into the host
    /// mirror's `landed_seq`: in this order, in one call; each write comes after the earlier
    /// ones are visible), and records `landed` after it where given: the event a resumed
    /// instance's stream waits for (the caller has taken the previous one away).
    fn deliver(&mut self, next: Command, landed: Option<Event>, control: CUstream) -> Result<()> {
        let seq = self.seq.wrapping_add(2);
        let words = next.mask().words();
        let base = self.params.control;
        let old = self.command.mask().words();
        let mut writes = Vec::with_capacity(words.len() + 2);
        for (i, (&new, &was)) in words.iter().zip(old.iter()).enumerate() {
            if new != was {
                let at = offset_of!(ControlBlock, sm_mask) + 4 * i;
                writes.push((base + at as u64, new));
            }
        }
        writes.push((base + offset_of!(ControlBlock, command) as u64, next.word()));
        writes.push((base + offset_of!(ControlBlock, command_seq) as u64, seq));
        let landed_seq = self.mirror.device + offset_of!(HostMirror, landed_seq) as u64;
        writes.push((landed_seq, seq));
        super::driver::write_values(control, &writes)?;
        self.command = next;
        self.seq = seq;
        if let Some(landed) = landed {
            landed.record_on(control)?;
            self.landed = Some(landed);
        }
        Ok(())
    }
}

/// What `wait_yielded` sees of a kernel at one look.
#[derive(Debug, Clone, Copy)]
struct YieldLook {
    /// The command's writes are in the control block.
    landed: bool,
    /// Every block that starts from now on reads the command in host memory first or takes
    /// a forward of it (gated links), where the host published it before anything else, and
    /// every block of an instance whose forward may be older has entered.
    host_decides: bool,
    /// `HELD_UP` has passed since the command was given.
    held_up: bool,
    /// No block of the first instance is in the loop: it has not started, or its tail is
    /// parked (it read the command in host memory, as the tail does when the control block
    /// lags).
    gone: bool,
    /// No block of the kernel holds a lane on the SMs it must leave.
    idle: bool,
}

impl YieldLook {
    /// Whether the kernel counts as yielded: no block on those SMs, and either the command is
    /// in the control block (a block that starts from now on sees it before taking a task; one
    /// that started earlier set its lane first) or its writes are held up and the first
    /// instance is gone. The writes can wait behind another preempted kernel's stream in a
    /// shared hardware queue, and waiting for them would then wait for a resume that the
    /// waiting thread itself would send (runtime_gpu's many-streams scenario hung so). Blocks
    /// of queued instances that start before the command lands may take a chunk of tasks.
    fn may_have_yielded(&self) -> bool {
        self.idle && self.command_settled()
    }

    /// The command is in the control block, or held up while no block of the first
    /// instance can still be working: what the lanes then decide.
    fn command_settled(&self) -> bool {
        self.landed || self.host_decides || (self.held_up && self.gone)
    }
}

/// How long `wait_yielded` waits for a command to reach the control block before a kernel
/// whose first instance is gone may count as yielded without it (the control stream's writes
/// take about 30 us when nothing holds them up).
const HELD_UP: Duration = Duration::from_millis(1);
/// After this long `wait_yielded` says on stderr what it is waiting for (once).
const STILL_WAITING: Duration = Duration::from_secs(10);

/// Spins until `done` says so or `limit` has passed; true if `done` did.
fn spin_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

impl Drop for Kernel {
    fn drop(&mut self) {
        if self.command.is_preempted() && !self.instances.is_empty() {
            // Without this the application's stream would wait for the kernel forever.
            let _ = self.resume(Target::All);
        }
        // Pushed one by one: most launches have their first instance's end alone, and
        // `extend` over the empty options cost more than the rest of this (about 400
        // instructions per launch, scripts/probes/host_path_instructions.sh).
        let mut events = RetiredEvents::new();
        for i in self.instances.drain(..) {
            events.push(i.end);
        }
        if events.is_empty() {
            // A launch that failed: retire after what it did enqueue.
            if let Ok(e) = self.record(self.app_stream, false) {
                events.push(e);
            }
        }
        if let Some(e) = self.last_request.take() {
            events.push(e);
        }
        if let Some(e) = self.landed.take() {
            events.push(e);
        }
        // A command with no landed event (a standing order at launch) may still be on its way
        // to the control block and the mirror: the slot is reused after it.
        if self.seq != 0 && !self.command_landed() {
            if let Ok(e) = self
                .rt
                .control_stream()
                .and_then(|control| self.record(control, false))
            {
                events.push(e);
            }
        }
        if let Some((a, b)) = self.for_resume.take() {
            events.push(a);
            events.push(b);
        }
        self.rt.retire(Retired {
            slot: self.params.control,
            events,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{KernelArgs, YieldLook, ON_STACK};
    use std::ffi::c_void;

    /// Each parameter's bytes, read back through the pointer array the driver is given.
    fn read_back(args: &KernelArgs, sizes: &[usize]) -> (usize, Vec<Vec<u8>>) {
        let first = 0x1234usize as *mut c_void;
        args.with_pointers(first, |ptrs| {
            assert_eq!(ptrs[0], first, "the launch parameters come first");
            let values = ptrs[1..]
                .iter()
                .zip(sizes)
                .map(|(&p, &n)| {
                    assert_eq!(p as usize % 8, 0, "each parameter on an 8-byte boundary");
                    // SAFETY: the pointer is into `args`, which holds `n` bytes there.
                    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }.to_vec()
                })
                .collect();
            (ptrs.len(), values)
        })
    }

    /// Parameters of mixed sizes keep their bytes and order, within the stack's array and past
    /// it (a kernel of more than ON_STACK - 1 parameters gets a heap array).
    #[test]
    fn the_driver_reads_each_parameter_as_it_was_pushed() {
        for count in [0, 5, ON_STACK - 1, ON_STACK, 3 * ON_STACK] {
            let mut args = KernelArgs::new();
            let mut want = Vec::new();
            for i in 0..count {
                // Sizes 1, 4, 8, 12, 24 in turn, bytes that tell the parameters apart.
                let n = [1usize, 4, 8, 12, 24][i % 5];
                let bytes: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
                // SAFETY: `bytes` holds `n` readable bytes.
                unsafe { args.push_raw(bytes.as_ptr().cast(), n) };
                want.push(bytes);
            }
            assert_eq!(args.len(), count);
            let sizes: Vec<usize> = want.iter().map(Vec::len).collect();
            let (pointers, got) = read_back(&args, &sizes);
            assert_eq!(pointers, count + 1);
            assert_eq!(got, want, "{count} parameters");
            // A copy (the Rust API's launches clone the caller's arguments) reads the same.
            assert_eq!(read_back(&args.clone(), &sizes).1, want);
        }
        let mut typed = KernelArgs::with_capacity(2, 12);
        typed.push(0x1122_3344_5566_7788u64).push(-7i32);
        let (_, got) = read_back(&typed, &[8, 4]);
        assert_eq!(got[0], 0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(got[1], (-7i32).to_ne_bytes());
    }

    fn look(landed: bool, held_up: bool, gone: bool, idle: bool) -> bool {
        YieldLook {
            landed,
            host_decides: false,
            held_up,
            gone,
            idle,
        }
        .may_have_yielded()
    }

    #[test]
    fn a_kernel_counts_as_yielded_only_with_no_block_on_its_sms() {
        // The command landed and no lane is held: yielded.
        assert!(look(true, false, false, true));
        // A block still holds a lane on an SM it must leave: never, whatever else.
        assert!(!look(true, true, true, false));
        // The command is not in the control block yet: a started kernel whose blocks may
        // still be in the loop has not yielded...
        assert!(!look(false, false, false, true));
        assert!(!look(false, true, false, true));
        // ...nor one whose first instance is gone, before the writes count as held up...
        assert!(!look(false, false, true, true));
        // ...after which it has (not started, or its tail parked on the command it read in
        // host memory: the many-streams hang).
        assert!(look(false, true, true, true));
    }

    /// Gated links: every block that may still start reads the command in host memory, so
    /// no lane held on the SMs is enough, landed or not; a lane held is still never enough.
    #[test]
    fn with_gated_links_host_memory_decides() {
        let linked = |landed: bool, idle: bool| {
            YieldLook {
                landed,
                host_decides: true,
                held_up: false,
                gone: false,
                idle,
            }
            .may_have_yielded()
        };
        assert!(linked(false, true));
        assert!(!linked(false, false));
        assert!(!linked(true, false));
    }
}
