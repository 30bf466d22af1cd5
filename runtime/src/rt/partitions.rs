//! SM partitions: green contexts (CUDA 12.4+) that hold a launch to part of the GPU.
//!
//! A grid launched on the whole GPU is placed once: each block lands where there is room when
//! the grid is dispatched, and a block that lands on an SM its kernel was told to leave leaves
//! at once, so an SM share set by command is bounded by where the kernel's blocks first landed
//! (docs/daemon.md, "The loss is the GPU's block placement"). A grid launched on a green
//! context's stream is placed by the hardware on that context's SMs only: its blocks wait there
//! for room instead. The driver splits the SMs into groups of a multiple of 8
//! (`cuDevSmResourceSplitByCount`), whose SM ids it does not say; the runtime finds them by
//! launching a kernel on each group that records `%smid`, until every SM of the group has been
//! seen. A partition is the green context of the groups that lie wholly inside an allowed set:
//! a resumed or refilling instance launched there runs only on SMs its kernel may use.
//!
//! Every process that splits the same GPU the same way gets the same groups (measured under
//! MPS: scripts/probes/green_partition.sh), so a daemon that hands out shares in whole groups
//! (`ClientMsg::SmGroups`) gives each process partitions that do not meet.

use super::driver::{drv, has_call, CUcontext, CUdevice, CUdeviceptr, CUstream};
use super::error::{Error, Result};
use crate::smset::SmSet;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// SMs per group: the split's granularity on Hopper (the driver rounds a smaller count up).
const GROUP_SMS: u32 = 8;
/// Distinct partitions (sets of groups) one runtime makes; later sets get none (each is a green
/// context, kept for the runtime's life: destroying one waits for its work).
const MAX_PARTITIONS: usize = 64;
/// How long finding the groups' SMs may take before the runtime goes without partitions
/// (each group's kernel waits for room on its SMs, which another process may fill).
const DISCOVERY_LIMIT: Duration = Duration::from_secs(2);
/// How long each block of the SM-finding kernel stays, so that blocks spread over the group's
/// SMs rather than run one after another on the first SM with room.
const SPIN_NS: u64 = 20_000;

/// Stores the block's `%smid` at `out[blockIdx.x]` after `spin` ns. PTX, JIT-compiled by the
/// driver for any GPU.
const SMID_PTX: &str = "\
.version 7.0
.target sm_70
.address_size 64
.visible .entry cupreempt_smid(.param .u64 out, .param .u64 spin)
{
  .reg .pred %p<3>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<9>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [spin];
  mov.u64 %rd3, %globaltimer;
WAIT:
  mov.u64 %rd4, %globaltimer;
  sub.u64 %rd5, %rd4, %rd3;
  setp.lt.u64 %p1, %rd5, %rd2;
  @%p1 bra WAIT;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p2, %r1, 0;
  @%p2 bra DONE;
  mov.u32 %r2, %smid;
  mov.u32 %r3, %ctaid.x;
  cvta.to.global.u64 %rd6, %rd1;
  mul.wide.u32 %rd7, %r3, 4;
  add.u64 %rd8, %rd6, %rd7;
  st.global.u32 [%rd8], %r2;
DONE:
  ret;
}
\0";

/// A green context on some of the GPU's SMs and a stream on it.
pub(crate) struct Partition {
    /// Current while launching on `stream` (the green context as a `CUcontext`).
    pub ctx: CUcontext,
    pub stream: CUstream,
    /// The SMs its launches run on.
    pub sms: SmSet,
}

struct Group {
    resource: sys::CUdevResource,
    sms: SmSet,
}

/// The GPU's SM groups and the partitions made from them so far.
pub(crate) struct Partitions {
    dev: CUdevice,
    groups: Vec<Group>,
    /// By the bit mask of their groups.
    made: Mutex<HashMap<u64, Arc<Partition>>>,
}

// SAFETY: driver handles, used with the runtime's context current; the map is behind a mutex.
unsafe impl Send for Partitions {}
unsafe impl Sync for Partitions {}

/// The groups (bit i: group i) that lie wholly inside `allowed`.
pub(crate) fn groups_within(groups: &[SmSet], allowed: &SmSet) -> u64 {
    groups
        .iter()
        .take(64)
        .enumerate()
        .filter(|(_, g)| !g.is_empty() && g.difference(allowed).is_empty())
        .fold(0, |mask, (i, _)| mask | 1 << i)
}

impl Partitions {
    /// Splits the GPU into groups and finds each group's SMs; `None` where the driver has no
    /// green contexts, the GPU has fewer than two groups, or the groups' SMs could not all be
    /// seen in time. `primary` is the runtime's context, current again on return.
    pub fn discover(dev: CUdevice, primary: CUcontext) -> Result<Option<Partitions>> {
        if !has_call(b"cuGreenCtxCreate\0") || !has_call(b"cuDevSmResourceSplitByCount\0") {
            return Ok(None);
        }
        // SAFETY: plain data, filled in by the driver.
        let mut all: sys::CUdevResource = unsafe { std::mem::zeroed() };
        drv!(cuDeviceGetDevResource(
            dev,
            &mut all,
            sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM
        ))?;
        let mut n: u32 = 0;
        drv!(cuDevSmResourceSplitByCount(
            std::ptr::null_mut(),
            &mut n,
            &all,
            std::ptr::null_mut(),
            0,
            GROUP_SMS
        ))?;
        if n < 2 {
            return Ok(None);
        }
        // SAFETY: as above.
        let mut split: Vec<sys::CUdevResource> = vec![unsafe { std::mem::zeroed() }; n as usize];
        // SAFETY: as above.
        let mut rest: sys::CUdevResource = unsafe { std::mem::zeroed() };
        drv!(cuDevSmResourceSplitByCount(
            split.as_mut_ptr(),
            &mut n,
            &all,
            &mut rest,
            0,
            GROUP_SMS
        ))?;
        split.truncate(n as usize);
        let parts = Partitions {
            dev,
            groups: Vec::new(),
            made: Mutex::new(HashMap::new()),
        };
        let found = parts.find_sms(&split, primary);
        drv!(cuCtxSetCurrent(primary))?;
        let Some(sms) = found? else {
            return Ok(None);
        };
        let groups = split
            .into_iter()
            .zip(sms)
            .map(|(resource, sms)| Group { resource, sms })
            .collect();
        Ok(Some(Partitions { groups, ..parts }))
    }

    /// Each group's SMs, seen by blocks of `cupreempt_smid` launched on the group until as
    /// many distinct SMs as the group has have answered; `None` if that takes too long.
    fn find_sms(
        &self,
        split: &[sys::CUdevResource],
        primary: CUcontext,
    ) -> Result<Option<Vec<SmSet>>> {
        drv!(cuCtxSetCurrent(primary))?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        drv!(cuModuleLoadData(&mut module, SMID_PTX.as_ptr().cast()))?;
        let mut func: sys::CUfunction = std::ptr::null_mut();
        drv!(cuModuleGetFunction(
            &mut func,
            module,
            c"cupreempt_smid".as_ptr()
        ))?;
        let started = Instant::now();
        let mut found = Vec::with_capacity(split.len());
        for res in split {
            // SAFETY: the union member for an SM resource.
            let count = unsafe { res.__bindgen_anon_1.sm.smCount };
            let part = self.make(std::slice::from_ref(res), SmSet::empty())?;
            let blocks = 32 * count.max(1);
            let mut seen = SmSet::empty();
            while (seen.len() as u32) < count {
                if started.elapsed() > DISCOVERY_LIMIT {
                    return Ok(None);
                }
                match launch_smid(func, &part, primary, blocks, started)? {
                    Some(ids) => {
                        for s in ids {
                            seen.insert(s)
                                .map_err(|_| Error::InvalidArgument("SM id"))?;
                        }
                    }
                    None => return Ok(None),
                }
            }
            found.push(seen);
        }
        Ok(Some(found))
    }

    /// A green context and stream on `resources` (groups of one split).
    fn make(&self, resources: &[sys::CUdevResource], sms: SmSet) -> Result<Partition> {
        // SAFETY: plain data, filled in by the driver.
        let mut desc: sys::CUdevResourceDesc = unsafe { std::mem::zeroed() };
        let mut res = resources.to_vec();
        drv!(cuDevResourceGenerateDesc(
            &mut desc,
            res.as_mut_ptr(),
            res.len() as u32
        ))?;
        let mut green: sys::CUgreenCtx = std::ptr::null_mut();
        drv!(cuGreenCtxCreate(
            &mut green,
            desc,
            self.dev,
            sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32
        ))?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        drv!(cuCtxFromGreenCtx(&mut ctx, green))?;
        let mut stream: CUstream = std::ptr::null_mut();
        drv!(cuGreenCtxStreamCreate(
            &mut stream,
            green,
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            0
        ))?;
        Ok(Partition { ctx, stream, sms })
    }

    /// Each group's SM ids, in the driver's order.
    pub fn groups(&self) -> Vec<Vec<u32>> {
        self.groups.iter().map(|g| g.sms.iter().collect()).collect()
    }

    /// The partition of the groups wholly inside `allowed`: none if there is no such group,
    /// if they are every group (the whole GPU serves as well), or past `MAX_PARTITIONS`.
    pub fn within(&self, allowed: &SmSet) -> Result<Option<Arc<Partition>>> {
        let sets: Vec<SmSet> = self.groups.iter().map(|g| g.sms).collect();
        let mask = groups_within(&sets, allowed);
        let every = if sets.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << sets.len()) - 1
        };
        if mask == 0 || mask == every {
            return Ok(None);
        }
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = made.get(&mask) {
            return Ok(Some(p.clone()));
        }
        if made.len() >= MAX_PARTITIONS {
            return Ok(None);
        }
        let chosen: Vec<&Group> = (0..self.groups.len())
            .filter(|i| mask >> i & 1 == 1)
            .map(|i| &self.groups[i])
            .collect();
        let sms = chosen.iter().fold(SmSet::empty(), |a, g| a.union(&g.sms));
        let resources: Vec<sys::CUdevResource> = chosen.iter().map(|g| g.resource).collect();
        let p = Arc::new(self.make(&resources, sms)?);
        made.insert(mask, p.clone());
        Ok(Some(p))
    }
}

/// One launch of the SM-finding kernel on `part`: the SM ids its blocks saw, or `None` if it
/// did not end before the discovery's limit (its buffer is then left to it).
fn launch_smid(
    func: sys::CUfunction,
    part: &Partition,
    primary: CUcontext,
    blocks: u32,
    started: Instant,
) -> Result<Option<Vec<u32>>> {
    drv!(cuCtxSetCurrent(primary))?;
    let bytes = 4 * blocks as usize;
    let mut buf: CUdeviceptr = 0;
    drv!(cuMemAlloc_v2(&mut buf, bytes))?;
    drv!(cuMemsetD32_v2(buf, u32::MAX, blocks as usize))?;
    drv!(cuCtxSetCurrent(part.ctx))?;
    let mut out = buf;
    let mut spin = SPIN_NS;
    let mut params = [
        &mut out as *mut CUdeviceptr as *mut c_void,
        &mut spin as *mut u64 as *mut c_void,
    ];
    drv!(cuLaunchKernel(
        func,
        blocks,
        1,
        1,
        32,
        1,
        1,
        0,
        part.stream,
        params.as_mut_ptr(),
        std::ptr::null_mut()
    ))?;
    loop {
        // SAFETY: a query of our stream.
        match unsafe { sys::cuStreamQuery(part.stream) } {
            sys::CUresult::CUDA_SUCCESS => break,
            sys::CUresult::CUDA_ERROR_NOT_READY => {
                if started.elapsed() > DISCOVERY_LIMIT {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            r => super::driver::check("cuStreamQuery", r)?,
        }
    }
    drv!(cuCtxSetCurrent(primary))?;
    let mut ids = vec![0u32; blocks as usize];
    drv!(cuMemcpyDtoH_v2(ids.as_mut_ptr().cast(), buf, bytes))?;
    drv!(cuMemFree_v2(buf))?;
    Ok(Some(ids.into_iter().filter(|&s| s != u32::MAX).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> SmSet {
        SmSet::from_ids(ids.iter().copied()).unwrap()
    }

    #[test]
    fn only_groups_wholly_inside_the_allowed_sms_count() {
        let groups = [set(&[0, 2, 4]), set(&[1, 3, 5]), set(&[6, 7, 8])];
        assert_eq!(groups_within(&groups, &set(&[0, 2, 4, 6, 7])), 0b001);
        assert_eq!(groups_within(&groups, &set(&[0, 1, 2, 3, 4, 5])), 0b011);
        assert_eq!(
            groups_within(&groups, &set(&[0, 1, 2, 3, 4, 6, 7, 8])),
            0b101
        );
        assert_eq!(groups_within(&groups, &SmSet::empty()), 0);
        // An empty group is no partition of anything.
        assert_eq!(groups_within(&[SmSet::empty()], &set(&[1])), 0);
    }
}
