//! Wrappers compiled into a module of their own (the compiler launcher's split units).
//!
//! A program's first use of any kernel of a translation unit loads that unit's whole module,
//! and each kernel in it costs the load about 15 µs whatever its code (docs/runtime.md,
//! "Module loading"). The compiler launcher therefore compiles a transformed unit twice: once
//! whole but device-only, into a fatbin that holds the wrappers (the "wrapper module"), and
//! once without the wrappers' definitions (`CUPREEMPT_SPLIT_UNIT`), which is the object the
//! program links. That object registers the fatbin and a table from a static initializer:
//! for each original kernel, by mangled name, the mangled names of its wrapper and of its
//! 32-register wrapper (docs/build.md, "Wrappers in a module of their own").
//!
//! A launch whose unit has no wrapper symbol of its own (`launch.cuh`) asks here by the
//! original's handle: its name (`cuFuncGetName`) is looked up in every registered table, the
//! module is loaded once (`cuLibraryLoadData`, context-independent), and the wrapper's handle
//! in the current context is cached. Nothing here runs before a launch would be preemptible,
//! so the wrappers' code never loads inside a launch that runs the original; the runtime's
//! setup loads them at a quiet moment (`load_all_into_current`).

use super::driver::{self, CUfunction};
use super::fast_hash::FastMap;
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::{Mutex, OnceLock};

/// One original kernel's wrappers, by mangled name; `capped` is the 32-register one, where the
/// unit has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wrappers {
    pub plain: String,
    pub capped: Option<String>,
}

struct Module {
    /// The fatbin, in the program's read-only data (it lives as long as the program).
    image: usize,
    /// Original kernel's mangled name → its wrappers.
    table: HashMap<String, Wrappers>,
    /// The same by `comparable` names, for launches from the unit itself.
    own: HashMap<String, Wrappers>,
    /// Loaded once, on first need: `None` until then; `Some(None)` if the load failed.
    library: Option<Option<usize>>,
}

#[derive(Default)]
struct Registry {
    modules: Vec<Module>,
    /// (context, original function) → the chosen wrapper, so that a kernel is looked up once
    /// per context; or none, with the number of modules registered when that was found (a
    /// module registered later, by a library loaded later, may have it).
    chosen: FastMap<(super::driver::ContextKey, usize), Result<usize, usize>>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

/// A kernel's name as tables compare it within one unit: what differs between the unit's two
/// compiles left out. With relocatable device code nvcc prefixes a kernel of internal linkage
/// (`static`, an anonymous namespace) with `__nv_static_N__UNIT__`, which the wrapper module,
/// compiled without it, lacks; and an anonymous namespace's mangled name
/// (`_GLOBAL__N__HASH_...`) differs from one compile of a file to the next. Both name things
/// of one translation unit only, so the unit's own table is searched with them left out.
pub(crate) fn comparable(name: &str) -> String {
    let mut s = name;
    if let Some(rest) = s.strip_prefix("__nv_static_") {
        if let Some(i) = rest.find("__Z") {
            s = &rest[i + 1..];
        }
    }
    const ANON: &str = "_GLOBAL__N_";
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while let Some(j) = s[i..].find(ANON) {
        let at = i + j;
        // `<length><identifier>`: the digits before the identifier give its length.
        let digits = s[..at].trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let len = s[digits..at]
            .parse::<usize>()
            .ok()
            .filter(|l| at + l <= s.len());
        match len {
            Some(len) if digits >= i => {
                out.push_str(&s[i..digits]);
                out.push_str("(anonymous)");
                i = at + len;
            }
            _ => {
                out.push_str(&s[i..at + ANON.len()]);
                i = at + ANON.len();
            }
        }
    }
    out.push_str(&s[i..]);
    out
}

/// The table a unit registers: `3 * n` strings, for each kernel the original's mangled name,
/// its wrapper's and its 32-register wrapper's (empty where there is none). Entries without an
/// original or a wrapper are skipped.
pub(crate) fn parse_table(names: &[&str]) -> HashMap<String, Wrappers> {
    names
        .chunks_exact(3)
        .filter(|e| !e[0].is_empty() && !e[1].is_empty())
        .map(|e| {
            let capped = (!e[2].is_empty()).then(|| e[2].to_string());
            (
                e[0].to_string(),
                Wrappers {
                    plain: e[1].to_string(),
                    capped,
                },
            )
        })
        .collect()
}

/// Registers a unit's wrapper module; returns the unit's number (from 1; 0 for nothing
/// registered), which its own launches pass to `wrapper_of`.
///
/// # Safety
/// `image` points to a fatbin that lives as long as the program; `names` to `3 * n` valid C
/// strings (copied here).
pub(crate) unsafe fn register(
    image: *const c_void,
    names: *const *const c_char,
    n: c_uint,
) -> c_int {
    if image.is_null() || names.is_null() {
        return 0;
    }
    let strings: Vec<&str> = (0..3 * n as usize)
        .map(|i| {
            let p = *names.add(i);
            if p.is_null() {
                ""
            } else {
                CStr::from_ptr(p).to_str().unwrap_or("")
            }
        })
        .collect();
    let table = parse_table(&strings);
    let own = table
        .iter()
        .map(|(k, w)| (comparable(k), w.clone()))
        .collect();
    let mut r = super::capi::lock(registry());
    r.modules.push(Module {
        image: image as usize,
        table,
        own,
        library: None,
    });
    r.modules.len() as c_int
}

/// Whether the driver has every call this module makes (cuLibrary*: CUDA 12.0, cuFuncGetName:
/// 12.3). cudarc panics at a call of a missing symbol, so ask the library once.
fn driver_has_calls() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        [
            &b"cuLibraryLoadData\0"[..],
            b"cuLibraryGetKernel\0",
            b"cuKernelGetFunction\0",
            b"cuFuncGetName\0",
        ]
        .iter()
        .all(|s| driver::has_call(s))
    })
}

/// The module's library, loaded on first use (context-independent: every context gets the
/// module's code when it first asks for a kernel of it).
fn library(m: &mut Module) -> Option<sys::CUlibrary> {
    if m.library.is_none() {
        let mut lib: sys::CUlibrary = std::ptr::null_mut();
        // SAFETY: the image is a fatbin in the program's data; no options.
        let r = unsafe {
            sys::cuLibraryLoadData(
                &mut lib,
                m.image as *const c_void,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        m.library = Some((r == sys::CUresult::CUDA_SUCCESS).then_some(lib as usize));
        if r != sys::CUresult::CUDA_SUCCESS {
            super::trace_setup(&format!("wrapper module: cuLibraryLoadData failed ({r:?})"));
        }
    }
    m.library.flatten().map(|l| l as sys::CUlibrary)
}

/// `name`'s function in `lib` for the current context.
fn function(lib: sys::CUlibrary, name: &str) -> Option<CUfunction> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut k: sys::CUkernel = std::ptr::null_mut();
    let mut f: CUfunction = std::ptr::null_mut();
    // SAFETY: a loaded library and a NUL-terminated name; then that kernel's handle.
    unsafe {
        (sys::cuLibraryGetKernel(&mut k, lib, c.as_ptr()) == sys::CUresult::CUDA_SUCCESS
            && sys::cuKernelGetFunction(&mut f, k) == sys::CUresult::CUDA_SUCCESS)
            .then_some(f)
    }
}

fn name_of(f: CUfunction) -> Option<String> {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: a function handle of the current context; the driver owns the string.
    unsafe {
        (sys::cuFuncGetName(&mut p, f) == sys::CUresult::CUDA_SUCCESS && !p.is_null())
            .then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

fn attribute(f: CUfunction, a: sys::CUfunction_attribute) -> Option<i32> {
    let mut v = 0;
    // SAFETY: a function handle of the current context.
    (unsafe { sys::cuFuncGetAttribute(&mut v, a, f) } == sys::CUresult::CUDA_SUCCESS).then_some(v)
}

/// Which wrapper keeps the original's occupancy: the 32-register one where the original needs
/// at most 32 registers and the plain wrapper more (as `launch.cuh`'s `pick_wrapper`).
pub(crate) fn capped_keeps_occupancy(original_regs: i32, plain_regs: i32) -> bool {
    original_regs <= 32 && plain_regs > 32
}

fn no_r32() -> bool {
    static NO: OnceLock<bool> = OnceLock::new();
    // As launch.cuh reads it: any number but 0.
    *NO.get_or_init(|| {
        std::env::var("CUPREEMPT_NO_R32")
            .is_ok_and(|v| v.trim().parse::<u32>().is_ok_and(|n| n != 0))
    })
}

/// The wrapper to launch for `original` (a function of the current context) from the
/// registered wrapper modules, or `None` where none has it. `unit`: the launching unit's number
/// where it was split (its own table is searched first, by `comparable` names), else 0; then
/// every table by the exact name (a kernel of external linkage defined in another unit).
pub(crate) fn wrapper_of(original: CUfunction, unit: c_int) -> Option<CUfunction> {
    if original.is_null() || !driver::driver_available() {
        return None;
    }
    let ctx = super::capi::current_context()
        .ok()
        .filter(|c| !c.is_none())?;
    let mut r = super::capi::lock(registry());
    if r.modules.is_empty() || !driver_has_calls() {
        return None;
    }
    let key = (ctx, original as usize);
    match r.chosen.get(&key) {
        Some(Ok(f)) => return Some(*f as CUfunction),
        Some(Err(modules)) if *modules == r.modules.len() => return None,
        _ => {}
    }
    let chosen = name_of(original)
        .and_then(|name| {
            let own = usize::try_from(unit)
                .ok()
                .and_then(|u| u.checked_sub(1))
                .filter(|&u| u < r.modules.len());
            let w = own
                .and_then(|u| {
                    let w = r.modules[u].own.get(&comparable(&name))?.clone();
                    Some((u, w))
                })
                .or_else(|| {
                    r.modules
                        .iter()
                        .enumerate()
                        .find_map(|(u, m)| Some((u, m.table.get(&name)?.clone())))
                });
            let (u, w) = w?;
            Some((library(&mut r.modules[u])?, w))
        })
        .and_then(|(lib, w)| {
            let plain = function(lib, &w.plain)?;
            let capped = w.capped.as_deref().filter(|_| !no_r32()).and_then(|c| {
                let regs = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS;
                let keep =
                    capped_keeps_occupancy(attribute(original, regs)?, attribute(plain, regs)?);
                keep.then(|| function(lib, c)).flatten()
            });
            Some(capped.unwrap_or(plain))
        });
    let found = chosen.map(|f| f as usize).ok_or(r.modules.len());
    r.chosen.insert(key, found);
    chosen
}

/// A program that raised the original's dynamic shared-memory limit expects the launch to
/// work: the wrapper gets the original's limit (launches above the 48 KB default only).
pub(crate) fn copy_smem_limit(original: CUfunction, wrapper: CUfunction, smem: usize) {
    if smem <= 48 * 1024 {
        return;
    }
    let a = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    if let Some(limit) = attribute(original, a) {
        // SAFETY: a function handle of the current context; a failure leaves the launch to
        // report the original's error.
        unsafe { sys::cuFuncSetAttribute(wrapper, a, limit) };
    }
}

/// Loads every registered wrapper module's wrappers into the current context (the runtime's
/// setup, on its thread, at a quiet moment). Returns how many it loaded.
pub(crate) fn load_all_into_current(load: impl Fn(CUfunction)) -> usize {
    let mut r = super::capi::lock(registry());
    if r.modules.is_empty() || !driver::driver_available() || !driver_has_calls() {
        return 0;
    }
    let mut loaded = 0;
    for m in r.modules.iter_mut() {
        let Some(lib) = library(m) else { continue };
        let names: Vec<String> = m
            .table
            .values()
            .flat_map(|w| std::iter::once(w.plain.clone()).chain(w.capped.clone()))
            .collect();
        for name in names {
            if let Some(f) = function(lib, &name) {
                load(f);
                loaded += 1;
            }
        }
    }
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_maps_each_original_to_its_wrappers() {
        let t = parse_table(&[
            "_Z1kPf",
            "_Z12k__cupreempt16cupreempt_launchPf",
            "_Z16k__cupreempt_r3216cupreempt_launchPf",
            "_Z1jv",
            "_Z12j__cupreempt16cupreempt_launch",
            "",
            "",
            "_Z5lonely",
            "",
            "_Z1mv",
            "",
            "",
        ]);
        assert_eq!(
            t.len(),
            2,
            "entries without an original or a wrapper are skipped"
        );
        assert_eq!(
            t["_Z1kPf"],
            Wrappers {
                plain: "_Z12k__cupreempt16cupreempt_launchPf".into(),
                capped: Some("_Z16k__cupreempt_r3216cupreempt_launchPf".into()),
            }
        );
        assert_eq!(t["_Z1jv"].capped, None);
    }

    /// nvcc 13.5, one file with a `static` kernel and one in an anonymous namespace: the names
    /// the object's module gives them with `-rdc=true`, and without, and the names in the
    /// wrapper module's table (compiled apart, without `-rdc`) all compare equal.
    #[test]
    fn names_of_one_units_two_compiles_compare_equal() {
        let same = |a: &str, b: &str| assert_eq!(comparable(a), comparable(b), "{a} / {b}");
        same(
            "__nv_static_31__fd157294_4_s_cu_c8c7c9ed_11197__Z2skPf",
            "_Z2skPf",
        );
        same(
            "__nv_static_31__fd157294_4_s_cu_c8c7c9ed_11197__ZN42_GLOBAL__N__fd157294_4_s_cu_c8c7c9ed_111972akEPf",
            "_ZN36_GLOBAL__N__fd157294_4_s_cu__Z3runPf2akEPf",
        );
        same(
            "_ZN36_GLOBAL__N__46dc6172_4_s_cu__Z3runPf2akEPf",
            "_ZN36_GLOBAL__N__fd157294_4_s_cu__Z3runPf2akEPf",
        );
        assert_ne!(
            comparable("_ZN36_GLOBAL__N__46dc6172_4_s_cu__Z3runPf2akEPf"),
            comparable("_ZN36_GLOBAL__N__46dc6172_4_s_cu__Z3runPf2bkEPf"),
            "other kernels stay apart"
        );
        assert_eq!(comparable("_Z2skPf"), "_Z2skPf");
        assert_eq!(comparable("vadd"), "vadd");
    }

    #[test]
    fn the_capped_wrapper_is_chosen_only_where_it_keeps_occupancy() {
        assert!(capped_keeps_occupancy(24, 40));
        assert!(capped_keeps_occupancy(32, 33));
        assert!(
            !capped_keeps_occupancy(24, 32),
            "the plain one fits already"
        );
        assert!(
            !capped_keeps_occupancy(40, 48),
            "the original is above 32 itself"
        );
    }

    /// Without a registered module (or a driver) nothing is found and nothing is loaded.
    #[test]
    fn no_module_finds_nothing() {
        if driver::driver_available() {
            return; // a GPU machine's registry may hold modules of other tests
        }
        assert!(wrapper_of(std::ptr::null_mut(), 0).is_none());
        assert_eq!(load_all_into_current(|_| {}), 0);
    }
}
