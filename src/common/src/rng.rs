//! The seeded randomness of deterministic runs (the lab, the fabric): xorshift64.

/// One xorshift64 step (Marsaglia 13/7/17): a nonzero state never becomes zero.
#[must_use]
pub fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_sequence_and_no_zero() {
        assert_eq!(super::xorshift(1), 1_082_269_761);
        let mut x = 1;
        for _ in 0..10_000 {
            x = super::xorshift(x);
            assert_ne!(x, 0);
        }
    }
}
