//! Transformed kernels known by their original's host address, for launches that know a
//! kernel only by pointer (`launch.cuh`'s `launch_any`: a macro's launch of the kernel its use
//! names).
//!
//! Each transformed kernel that is no template registers, from a static initializer of its
//! unit, the function that picks its wrapper (`cupreempt_rt_register_any`); a template's
//! instance registers where a launch site of the program names it. The table lives here rather
//! than in the header: a registry in the header needs `<mutex>` and `<unordered_map>`, which
//! cost every transformed unit about 0.9 s of nvcc's time (docs/build.md, "Compile time").
//! Entries are never removed; a second registration of an address keeps the first picker (the
//! same kernel's, from another unit).

use super::fast_hash::FastMap;
use std::sync::{OnceLock, RwLock};

/// A kernel's host-side address (its stub), as the program's launches name it.
pub type AnyFn = unsafe extern "C" fn();
/// Returns the wrapper to launch for one kernel (its host stub), or null where it has none.
pub type AnyPick = unsafe extern "C" fn() -> Option<AnyFn>;

fn table() -> &'static RwLock<FastMap<usize, AnyPick>> {
    static T: OnceLock<RwLock<FastMap<usize, AnyPick>>> = OnceLock::new();
    T.get_or_init(|| RwLock::new(FastMap::default()))
}

/// Registers `pick` for the kernel at `original`; the first registration of an address stays.
pub(crate) fn register(original: AnyFn, pick: AnyPick) {
    let mut t = table().write().unwrap_or_else(|e| e.into_inner());
    t.entry(original as usize).or_insert(pick);
}

/// The picker registered for the kernel at `original`, if any.
pub(crate) fn pick_of(original: AnyFn) -> Option<AnyPick> {
    let t = table().read().unwrap_or_else(|e| e.into_inner());
    t.get(&(original as usize)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel address for the table, never called: functions of the test binary may share
    /// one address (an optimized build folds them).
    fn address(a: usize) -> AnyFn {
        // SAFETY: a non-null value; the table only compares it, nothing calls it.
        unsafe { std::mem::transmute::<usize, AnyFn>(a) }
    }
    unsafe extern "C" fn pick_a() -> Option<AnyFn> {
        Some(address(0x3000))
    }
    unsafe extern "C" fn pick_none() -> Option<AnyFn> {
        None
    }

    #[test]
    fn a_registered_kernel_is_found_by_its_address_and_keeps_its_first_picker() {
        let (kernel_a, kernel_b) = (address(0x1000), address(0x2000));
        assert!(pick_of(kernel_b).is_none());
        register(kernel_a, pick_a);
        register(kernel_a, pick_none);
        let pick = pick_of(kernel_a).expect("registered");
        // SAFETY: the pickers above take no arguments and touch nothing.
        let wrapper = unsafe { pick() }.expect("the first picker returns its wrapper");
        assert_eq!(wrapper as *const () as usize, 0x3000);
        assert!(pick_of(kernel_b).is_none());
    }
}
