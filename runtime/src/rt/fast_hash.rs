//! The hash of the runtime's own maps, which a launch looks up several times (handles, launch
//! histories, occupancies, wrappers). Their keys are addresses, launch configurations and
//! handle numbers that the process itself makes, never input from outside it, so they need no
//! protection from chosen collisions: std's SipHash cost a preemptible launch about 900
//! instructions (callgrind, `tests/launch_host_path.rs`), this hash a few per word.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A multiply-rotate hash of the words written (the scheme of rustc's FxHasher). The product's
/// high bits depend on every bit of the word, and hashbrown takes its control byte from the
/// top 7 bits, so keys that differ only in their low bits (handle numbers, aligned addresses)
/// still spread.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::{FastHasher, FastMap};
    use std::hash::{Hash, Hasher};

    fn hash<T: Hash>(t: &T) -> u64 {
        let mut h = FastHasher::default();
        t.hash(&mut h);
        h.finish()
    }

    /// Sequential handle numbers and 256-byte-aligned addresses must differ in the top 7 bits
    /// (hashbrown's control byte) often, or every lookup would probe a run of equal bytes.
    #[test]
    fn keys_that_differ_in_low_bits_spread_over_the_top_bits() {
        for keys in [
            (1u64..=1024).collect::<Vec<_>>(),
            (0..1024u64).map(|i| 0x7f00_0000_0000 + 256 * i).collect(),
        ] {
            let tops: std::collections::HashSet<u64> = keys.iter().map(|k| hash(k) >> 57).collect();
            assert!(tops.len() >= 100, "{} distinct top bytes", tops.len());
        }
        // A tail of bytes that differ only in their length still hash apart (whole zero
        // words do not, as in FxHasher; std's slices and strings write their length first).
        let bytes = |n: usize| {
            let mut h = FastHasher::default();
            h.write(&vec![0u8; n]);
            h.finish()
        };
        assert_ne!(bytes(3), bytes(4));
        assert_ne!(bytes(9), bytes(10));
    }

    #[test]
    fn a_map_finds_what_it_holds() {
        let mut m: FastMap<(usize, [u32; 3], u32), u32> = FastMap::default();
        for i in 0..1000usize {
            m.insert((i * 4096, [i as u32, 1, 1], 7), i as u32);
        }
        assert!(
            (0..1000usize).all(|i| m.get(&(i * 4096, [i as u32, 1, 1], 7)) == Some(&(i as u32)))
        );
        assert_eq!(m.get(&(4096, [2, 1, 1], 7)), None);
    }
}
