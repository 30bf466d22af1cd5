//! The pool of control blocks: device memory for each launch's [`ControlBlock`] and pinned,
//! device-mapped memory for its [`HostMirror`], handed out in slabs and zeroed off every
//! application stream's path.
//!
//! A slab's control blocks are zeroed by a copy from pinned zeros (the copy engine), never by
//! a memset: a memset is a kernel, and under MPS a memset of ours queued behind an
//! application's kernel made that process's kernels fail ("illegal memory access", an MMU
//! fault in the constant cache) when another client exited meanwhile
//! (scripts/probes/mps_exit.sh; docs/daemon.md, "MPS and exiting clients").

use super::driver::{drv, CUdeviceptr, CUstream, Event, Recorded};
use super::error::{Error, Result};
use super::runtime::Inner;
use super::steps::{self, Step};
use crate::control::{ControlBlock, HostMirror, LEFTOVER_SLOTS};
use cudarc::driver::sys;

/// Control blocks are handed out from slabs. The first slab is small, so that the first launch
/// of a program allocates and pins little (it waits for both); each new slab doubles, up to
/// `MAX_SLAB_SLOTS` (a host that runs far ahead of the GPU retires slots faster than their
/// kernels finish, and then needs new slabs).
const FIRST_SLAB_SLOTS: usize = 16;
const MAX_SLAB_SLOTS: usize = 256;
/// Each control block starts on its own 256-byte boundary.
const SLOT_BYTES: usize = std::mem::size_of::<ControlBlock>().next_multiple_of(256);
/// Each launch's leftover slots (`LaunchParams::leftover`): never zeroed, the control block
/// says which hold one.
const LEFTOVER_BYTES: usize = LEFTOVER_SLOTS * 8;
/// Each host mirror starts on its own cache line.
const MIRROR_BYTES: usize = std::mem::size_of::<HostMirror>().next_multiple_of(64);

/// What a launch gets: a zeroed control block in device memory, its leftover slots and its
/// host mirror.
pub(crate) struct Slot {
    pub control: CUdeviceptr,
    pub leftover: CUdeviceptr,
    pub mirror: Mirror,
}

/// A [`HostMirror`] in pinned memory, as the host sees it and as kernels address it.
#[derive(Clone, Copy)]
pub(crate) struct Mirror {
    pub host: *mut HostMirror,
    pub device: u64,
}

/// A control block its kernel handle gave back, reusable once its events are done.
pub(crate) struct Retired {
    pub slot: CUdeviceptr,
    pub events: RetiredEvents,
}

/// A retired launch's events: most launches have one (their first instance's end), kept
/// without an allocation.
pub(crate) type RetiredEvents = smallvec::SmallVec<[Event; 2]>;

/// Control blocks come in slabs. A slab hands its slots out in order; once every slot has been
/// retired and its work is done, the whole slab is zeroed with one copy on the housekeeping
/// stream and handed out again. Launches thus never zero anything on the application's stream.
struct Slab {
    /// The control blocks, `SLOT_BYTES` each, and behind them their launches' leftover slots,
    /// `LEFTOVER_BYTES` each (one allocation).
    base: CUdeviceptr,
    /// Slots in the slab.
    slots: usize,
    /// The slots' host mirrors: pinned, mapped for the device, zeroed when allocated. Behind
    /// them, `SLOT_BYTES * slots` bytes of zeros that nothing changes: the source of the copy
    /// that zeroes the control blocks (the command path's warm-up stores zeros there too).
    mirrors: *mut u8,
    mirrors_device: u64,
    /// Slots handed out since the slab was last zeroed.
    next: usize,
    retired: Vec<Retired>,
    /// Retired slots known to be done (a prefix of `retired`).
    done: usize,
    /// The copy that zeroed the slab, while it may still run.
    zeroed: Option<Event>,
    /// The streams (`driver::stream_id`) already made to wait for `zeroed`: their later
    /// launches come after that wait in stream order, and need neither a query nor a wait.
    zero_waiters: smallvec::SmallVec<[u64; 4]>,
}

#[derive(Default)]
pub(super) struct Pool {
    slabs: Vec<Slab>,
    current: Option<usize>,
}

/// Pinned, device-mapped, zeroed memory for a slab's host mirrors and, behind them, the zeros
/// its control blocks are copied from: (host, device) addresses.
fn alloc_mirrors(slots: usize) -> Result<(*mut u8, u64)> {
    let bytes = MIRROR_BYTES * slots + SLOT_BYTES * slots;
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

impl Pool {
    /// A zeroed control block and mirror for a launch on `stream`, whose id is `id`
    /// (`driver::stream_id`; the launch's end event is recorded with the same), which waits
    /// for the zeroing of the control block if that is still running. Slabs are zeroed on the housekeeping
    /// stream; a new slab before the runtime's streams exist (the first launch) is zeroed on
    /// `stream` itself, so that the first launch waits for no stream to be made. `rt` lends
    /// and takes back the events.
    pub fn acquire(&mut self, rt: &Inner, stream: CUstream, id: Option<u64>) -> Result<Slot> {
        let usable = |p: &Pool| p.current.filter(|&c| p.slabs[c].next < p.slabs[c].slots);
        if usable(self).is_none() {
            self.current = None;
            for i in 0..self.slabs.len() {
                let drained = drained(&mut self.slabs[i])?;
                steps::lap(Step::SlabScan);
                if drained {
                    let housekeeping = rt.streams()?.housekeeping.0;
                    let slab = &mut self.slabs[i];
                    rt.recycle(slab.retired.drain(..).flat_map(|r| r.events));
                    slab.done = 0;
                    slab.next = 0;
                    zero_control_blocks(slab, housekeeping)?;
                    let zeroed = rt.event(false)?;
                    zeroed.record_on(housekeeping)?;
                    rt.recycle(slab.zeroed.replace(zeroed));
                    slab.zero_waiters.clear();
                    self.current = Some(i);
                    steps::lap(Step::SlabZero);
                    break;
                }
            }
        }
        if self.current.is_none() {
            let zero_on = rt.streams_made().map_or(stream, |s| s.housekeeping.0);
            self.grow(rt, zero_on)?;
            steps::lap(Step::SlabGrow);
        }
        let c = self
            .current
            .ok_or(Error::InvalidArgument("no control block"))?;
        let slab = &mut self.slabs[c];
        if let Some(z) = slab.zeroed.take() {
            if id.is_some_and(|id| slab.zero_waiters.contains(&id)) {
                slab.zeroed = Some(z);
            } else if z.is_done()? {
                rt.recycle([z]);
                slab.zero_waiters.clear();
            } else {
                drv!(cuStreamWaitEvent(stream, z.raw, 0))?;
                slab.zeroed = Some(z);
                slab.zero_waiters.extend(id);
            }
            steps::lap(Step::ZeroWait);
        }
        let control = slab.base + (slab.next * SLOT_BYTES) as u64;
        let leftover = slab.base + (slab.slots * SLOT_BYTES + slab.next * LEFTOVER_BYTES) as u64;
        let at = slab.next * MIRROR_BYTES;
        slab.next += 1;
        // `landed_seq` must start at 0 too: a launch's commands are numbered from 2 on, and
        // `command_landed` compares the latest with it.
        const _: () = assert!(
            std::mem::offset_of!(HostMirror, landed_seq) < std::mem::offset_of!(HostMirror, lanes)
        );
        // SAFETY: the slot's earlier kernel is done (the slab was drained) and every block
        // clears its own lane when it leaves, so only the words before the lanes need zeroing.
        let host = unsafe { slab.mirrors.add(at) }.cast::<HostMirror>();
        unsafe {
            let lanes = std::mem::offset_of!(HostMirror, lanes);
            std::ptr::write_bytes(host.cast::<u8>(), 0, lanes);
        }
        Ok(Slot {
            control,
            leftover,
            mirror: Mirror {
                host,
                device: slab.mirrors_device + at as u64,
            },
        })
    }

    /// Adds a slab (zeroed on `zero_on`) and makes it the current one.
    fn grow(&mut self, rt: &Inner, zero_on: CUstream) -> Result<()> {
        let slots = self
            .slabs
            .last()
            .map_or(FIRST_SLAB_SLOTS, |s| (2 * s.slots).min(MAX_SLAB_SLOTS));
        // Another thread may be capturing a stream into a graph, where allocating would
        // invalidate its capture in the default (global) mode; ours is no stream work.
        let _relaxed = RelaxedCapture::new();
        let mut base: CUdeviceptr = 0;
        drv!(cuMemAlloc_v2(
            &mut base,
            (SLOT_BYTES + LEFTOVER_BYTES) * slots
        ))?;
        super::trace_setup("slab of control blocks (device memory)");
        let (mirrors, mirrors_device) = match alloc_mirrors(slots) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: just allocated, nothing uses it yet.
                unsafe { sys::cuMemFree_v2(base) };
                return Err(e);
            }
        };
        super::trace_setup("slab's host mirrors (pinned memory)");
        let mut slab = Slab {
            base,
            slots,
            mirrors,
            mirrors_device,
            next: 0,
            retired: Vec::new(),
            done: 0,
            zeroed: None,
            zero_waiters: smallvec::SmallVec::new(),
        };
        // Zeroed like a recycled slab: the first launches wait for it on the GPU, not here.
        let zeroed = zero_control_blocks(&slab, zero_on)
            .and_then(|()| rt.event(false))
            .and_then(|e| e.record_on(zero_on).map(|()| e));
        let zeroed = match zeroed {
            Ok(e) => e,
            Err(e) => {
                // SAFETY: nothing but the copy, if queued, uses the slab; waiting for the
                // stream orders the frees after it.
                unsafe {
                    sys::cuStreamSynchronize(zero_on);
                    sys::cuMemFree_v2(slab.base);
                    sys::cuMemFreeHost(slab.mirrors.cast());
                }
                return Err(e);
            }
        };
        slab.zeroed = Some(zeroed);
        self.slabs.push(slab);
        self.current = Some(self.slabs.len() - 1);
        Ok(())
    }

    /// Makes the first slab (the setup thread, before any launch needs it).
    pub fn first_slab(&mut self, rt: &Inner) -> Result<()> {
        if self.slabs.is_empty() {
            self.grow(rt, rt.streams()?.housekeeping.0)?;
        }
        Ok(())
    }

    /// The device address of two words of the first slab's zeros, where storing zeros
    /// changes nothing (`Inner::warm_command_path`).
    pub fn zero_words(&self) -> Option<CUdeviceptr> {
        let slab = self.slabs.first()?;
        Some(slab.mirrors_device + (MIRROR_BYTES * slab.slots) as u64)
    }

    /// Gives a control block back; it is reused once `r.events` are done.
    pub fn retire(&mut self, r: Retired) {
        if let Some(slab) = self
            .slabs
            .iter_mut()
            .find(|s| r.slot >= s.base && r.slot < s.base + (SLOT_BYTES * s.slots) as u64)
        {
            slab.retired.push(r);
        }
    }

    /// Waits for every retired slot's work and for `housekeeping` (when the runtime made its
    /// streams), then frees the slabs (the context must be current).
    pub fn free(self, housekeeping: Option<CUstream>) {
        for slab in &self.slabs {
            for e in slab.retired.iter().flat_map(|r| &r.events) {
                let _ = e.wait();
            }
            if let Some(z) = &slab.zeroed {
                let _ = z.wait();
            }
        }
        if let Some(h) = housekeeping {
            let _ = drv!(cuStreamSynchronize(h));
        }
        for slab in self.slabs {
            // SAFETY: every kernel that used the slab has retired and its work is done.
            unsafe {
                sys::cuMemFree_v2(slab.base);
                sys::cuMemFreeHost(slab.mirrors.cast());
            }
        }
    }
}

/// Queues on `stream` the copy that zeroes `slab`'s control blocks (from the zeros behind its
/// mirrors; the copy engine, no kernel).
fn zero_control_blocks(slab: &Slab, stream: CUstream) -> Result<()> {
    let bytes = SLOT_BYTES * slab.slots;
    // SAFETY: the zeros lie behind the mirrors, inside the slab's pinned allocation.
    let zeros = unsafe { slab.mirrors.add(MIRROR_BYTES * slab.slots) };
    drv!(cuMemcpyHtoDAsync_v2(slab.base, zeros.cast(), bytes, stream))
}

/// True when every slot of `slab` is retired and all their work is done. Asks the driver
/// about the last-recorded event of each stream only (a query costs about 1 µs on the H100,
/// one per launch when each was asked: `CUPREEMPT_TRACE_LAUNCH`), and about events whose
/// stream is not known one by one.
fn drained(slab: &mut Slab) -> Result<bool> {
    if slab.retired.len() < slab.slots {
        return Ok(false);
    }
    let pending = &slab.retired[slab.done..];
    for e in newest_per_stream(pending.iter().flat_map(|r| &r.events), Event::recorded) {
        if !e.is_done()? {
            return Ok(false);
        }
    }
    slab.done = slab.retired.len();
    Ok(true)
}

/// The events whose completion tells that all of `events` are done: of those recorded on one
/// stream, the last-recorded; every event whose stream is not known.
fn newest_per_stream<'a, E>(
    events: impl Iterator<Item = &'a E>,
    recorded: impl Fn(&E) -> Option<Recorded>,
) -> Vec<&'a E> {
    let mut newest: Vec<(u64, u64, &E)> = Vec::new();
    let mut alone = Vec::new();
    for e in events {
        match recorded(e) {
            None => alone.push(e),
            Some(r) => match newest.iter_mut().find(|(s, _, _)| *s == r.stream) {
                Some(n) if n.1 < r.number => *n = (r.stream, r.number, e),
                Some(_) => {}
                None => newest.push((r.stream, r.number, e)),
            },
        }
    }
    alone.extend(newest.into_iter().map(|(_, _, e)| e));
    alone
}

/// Relaxed stream-capture mode for the calling thread while it lives (see `Pool::acquire`).
struct RelaxedCapture(sys::CUstreamCaptureMode);

impl RelaxedCapture {
    fn new() -> RelaxedCapture {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: exchanges a thread-local setting; restored on drop.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
        RelaxedCapture(mode)
    }
}

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        let mut mode = self.0;
        // SAFETY: as in new.
        unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
}

#[cfg(test)]
mod tests {
    use super::{newest_per_stream, Recorded};

    /// The runtime queues no memset anywhere (see the module's comment): under MPS a memset
    /// of ours behind an application's kernel made that process fail when another client
    /// exited. The GPU check is scripts/probes/mps_exit.sh; this keeps a memset from coming
    /// back unnoticed.
    #[test]
    fn a_slab_is_drained_by_the_last_record_of_each_stream_and_every_unknown_one() {
        let at = |stream, number| Some(Recorded { stream, number });
        // Two streams, records out of order in the list (retired in another order than
        // recorded), and one record whose stream the driver could not name.
        let events = [at(1, 3), at(2, 4), at(1, 7), None, at(2, 2), at(1, 5)];
        let asked: Vec<Option<Recorded>> = newest_per_stream(events.iter(), |e| *e)
            .into_iter()
            .copied()
            .collect();
        assert_eq!(asked, vec![None, at(1, 7), at(2, 4)]);
        assert!(newest_per_stream(std::iter::empty::<&Option<Recorded>>(), |e| *e).is_empty());
    }

    #[test]
    fn the_runtime_queues_no_memset() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/rt");
        let mut offenders = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("runtime/src/rt") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("source");
            let calls = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .filter(|l| l.contains(&["cuMem", "set"].concat()))
                .count();
            if calls > 0 {
                offenders.push(path.display().to_string());
            }
        }
        assert!(offenders.is_empty(), "memset in {offenders:?}");
    }
}
