//! Faulting in the runtime library's own pages at load, on the setup thread.
//!
//! The first call of each code path of a shared library takes a page fault for each page of
//! code and read-only data that it touches for the first time; in a virtual machine whose
//! memory the host maps in lazily, such faults cost microseconds each. A program's first launch
//! runs the plan's whole path (`cupreempt_rt_plan`: the driver's lookups, the registry, the
//! setup thread's queue) for the first time, inside a launch that many programs time. The setup
//! thread, which starts when the library is loaded, reads one byte of each page of the library's
//! readable mappings first, so that the launch finds them mapped.

/// Most bytes read: the library is about 1 MB; a test executable that links the runtime
/// statically (tens of MB) gets its first pages only.
const MAX_BYTES: usize = 8 << 20;
const PAGE: usize = 4096;

/// Reads one byte of each page of every readable, not writable mapping of the file that holds
/// this function (the runtime library, or the executable it is linked into).
pub(crate) fn fault_in_own_pages() {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let here = fault_in_own_pages as fn() as usize;
    let mappings: Vec<Mapping> = maps.lines().filter_map(Mapping::parse).collect();
    let Some(own) = mappings.iter().find(|m| m.start <= here && here < m.end) else {
        return;
    };
    let mut budget = MAX_BYTES;
    for m in mappings
        .iter()
        .filter(|m| m.path == own.path && m.readable && !m.writable)
    {
        let mut page = m.start;
        while page < m.end && budget >= PAGE {
            // SAFETY: `page` lies in a readable mapping of the file this code runs from, which
            // stays mapped while its code runs.
            unsafe { std::ptr::read_volatile(page as *const u8) };
            page += PAGE;
            budget -= PAGE;
        }
    }
}

/// One line of /proc/self/maps: `start-end perms offset dev inode path`.
#[derive(Debug, PartialEq)]
struct Mapping<'a> {
    start: usize,
    end: usize,
    readable: bool,
    writable: bool,
    path: &'a str,
}

impl<'a> Mapping<'a> {
    fn parse(line: &'a str) -> Option<Mapping<'a>> {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let perms = fields.next()?.as_bytes();
        let path = fields.nth(3)?;
        Some(Mapping {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            readable: perms.first() == Some(&b'r'),
            writable: perms.get(1) == Some(&b'w'),
            path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let m = Mapping::parse(
            "7f1c2a000000-7f1c2a0d5000 r-xp 00040000 103:02 1234   /opt/lib/libcupreempt_runtime.so",
        );
        assert_eq!(
            m,
            Some(Mapping {
                start: 0x7f1c2a000000,
                end: 0x7f1c2a0d5000,
                readable: true,
                writable: false,
                path: "/opt/lib/libcupreempt_runtime.so",
            })
        );
        let anonymous = "7ffd1000-7ffd2000 rw-p 00000000 00:00 0";
        assert_eq!(Mapping::parse(anonymous), None, "no file, nothing to read");
        assert_eq!(Mapping::parse("garbage"), None);
    }

    /// Runs over this test executable's own mappings without faulting.
    #[test]
    fn own_pages_are_read() {
        fault_in_own_pages();
    }
}
