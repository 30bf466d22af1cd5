//! Sets of SMs, as the control word's `sm_mask` encodes them: bit `s % 32` of word `s / 32`.

pub const MAX_SMS: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmSet {
    words: [u32; MAX_SMS / 32],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmSetError {
    #[error("SM {0} is out of range (at most {MAX_SMS} SMs)")]
    OutOfRange(u32),
}

impl SmSet {
    pub fn empty() -> SmSet {
        SmSet::default()
    }
    /// SMs `0..k` ("all SMs with id < k").
    pub fn below(k: u32) -> Result<SmSet, SmSetError> {
        if k as usize > MAX_SMS {
            return Err(SmSetError::OutOfRange(k));
        }
        let mut s = SmSet::empty();
        for sm in 0..k {
            s.words[sm as usize / 32] |= 1 << (sm % 32);
        }
        Ok(s)
    }
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Result<SmSet, SmSetError> {
        let mut s = SmSet::empty();
        for id in ids {
            s.insert(id)?;
        }
        Ok(s)
    }
    pub fn insert(&mut self, sm: u32) -> Result<(), SmSetError> {
        if sm as usize >= MAX_SMS {
            return Err(SmSetError::OutOfRange(sm));
        }
        self.words[sm as usize / 32] |= 1 << (sm % 32);
        Ok(())
    }
    pub fn contains(&self, sm: u32) -> bool {
        (sm as usize) < MAX_SMS && self.words[sm as usize / 32] & (1 << (sm % 32)) != 0
    }
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn words(&self) -> &[u32; MAX_SMS / 32] {
        &self.words
    }
    pub fn union(&self, other: &SmSet) -> SmSet {
        self.zip(other, |a, b| a | b)
    }
    pub fn intersection(&self, other: &SmSet) -> SmSet {
        self.zip(other, |a, b| a & b)
    }
    pub fn difference(&self, other: &SmSet) -> SmSet {
        self.zip(other, |a, b| a & !b)
    }
    fn zip(&self, other: &SmSet, f: impl Fn(u32, u32) -> u32) -> SmSet {
        let mut s = *self;
        for (w, o) in s.words.iter_mut().zip(other.words) {
            *w = f(*w, o);
        }
        s
    }
    /// The set whose mask words are `words` (the C ABI's `const unsigned sm_mask[8]`).
    pub fn from_words(words: [u32; MAX_SMS / 32]) -> SmSet {
        SmSet { words }
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..MAX_SMS as u32).filter(|&s| self.contains(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_sets_the_first_k() {
        let s = SmSet::below(40).unwrap();
        assert_eq!(s.len(), 40);
        assert!(s.contains(0) && s.contains(39) && !s.contains(40));
        assert_eq!(s.words()[0], u32::MAX);
        assert_eq!(s.words()[1], 0xff);
    }

    #[test]
    fn ids_round_trip_and_range_is_checked() {
        let s = SmSet::from_ids([3, 131, 255]).unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![3, 131, 255]);
        assert_eq!(SmSet::from_ids([256]), Err(SmSetError::OutOfRange(256)));
        assert!(SmSet::below(257).is_err());
        assert!(!s.contains(1000));
    }
}
