//! HiPower's bitmaps as pure code (no device, no memory): one bit per buffer. The requester's
//! buffer `i` is reusable when its bitmap0 bit equals its bitmap1 bit (the responder's bitmap0,
//! as last read); the responder's buffer `i` holds data when its bitmap1 bit (the requester's
//! bitmap0, as last read) differs from its own bitmap0 bit. A side flips its bitmap0 bit when it
//! hands a buffer over (the requester after its WRITE completed, the responder after consuming).
//!
//! The bitmap read from the peer is hostile: any bytes, any length. Indices past `n` are
//! ignored, a short copy counts as zeros, and no answer names a buffer twice or one in flight.

/// Bytes holding `n` bits.
pub fn bytes(n: u32) -> usize {
    (n as usize).div_ceil(8)
}

/// Bit `i` of `bits` (0 past the end).
pub fn get(bits: &[u8], i: u32) -> bool {
    bits.get(i as usize / 8)
        .is_some_and(|b| b & (1 << (i % 8)) != 0)
}

/// Flips bit `i` (nothing past the end).
pub fn flip(bits: &mut [u8], i: u32) {
    if let Some(b) = bits.get_mut(i as usize / 8) {
        *b ^= 1 << (i % 8);
    }
}

/// The requester's reusable buffers: `i < n` with `mine[i] == peer[i]`, neither in flight
/// (`busy`) nor already pooled (`pooled`); appended to `out` in index order, each marked pooled.
pub fn reusable(mine: &[u8], peer: &[u8], busy: &[bool], pooled: &mut [bool], out: &mut Vec<u32>) {
    let n = busy.len().min(pooled.len());
    for i in 0..n {
        let k = u32::try_from(i).unwrap_or(u32::MAX);
        if get(mine, k) == get(peer, k) && !busy[i] && !pooled[i] {
            pooled[i] = true;
            out.push(k);
        }
    }
}

/// The responder's buffers holding data: `i < n` with `peer[i] != mine[i]`, not already queued
/// (`queued`); appended to `out` in index order, each marked queued.
pub fn with_data(mine: &[u8], peer: &[u8], queued: &mut [bool], out: &mut Vec<u32>) {
    for (i, q) in queued.iter_mut().enumerate() {
        let k = u32::try_from(i).unwrap_or(u32::MAX);
        if get(mine, k) != get(peer, k) && !*q {
            *q = true;
            out.push(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_buffer_goes_round_the_four_states() {
        // Requester and responder bitmap0, one buffer.
        let (mut req, mut resp) = (vec![0u8; 1], vec![0u8; 1]);
        let (mut busy, mut pooled, mut queued) = (vec![false; 1], vec![false; 1], vec![false; 1]);
        let mut out = Vec::new();
        reusable(&req, &resp, &busy, &mut pooled, &mut out);
        assert_eq!(out, [0], "free at the start");
        // Taken, written: in flight, then handed over.
        pooled[0] = false;
        busy[0] = true;
        out.clear();
        reusable(&req, &resp, &busy, &mut pooled, &mut out);
        assert!(out.is_empty(), "in flight");
        flip(&mut req, 0);
        busy[0] = false;
        out.clear();
        reusable(&req, &resp, &busy, &mut pooled, &mut out);
        assert!(out.is_empty(), "holds data: not reusable");
        with_data(&resp, &req, &mut queued, &mut out);
        assert_eq!(out, [0], "the responder sees data");
        // Consumed: reusable again, no more data.
        flip(&mut resp, 0);
        queued[0] = false;
        out.clear();
        with_data(&resp, &req, &mut queued, &mut out);
        assert!(out.is_empty());
        reusable(&req, &resp, &busy, &mut pooled, &mut out);
        assert_eq!(out, [0]);
    }

    #[test]
    fn bits_past_the_pool_and_short_copies_are_ignored() {
        let mut pooled = vec![false; 3];
        let mut out = Vec::new();
        reusable(&[0b1111_1000], &[], &[false; 3], &mut pooled, &mut out);
        assert_eq!(out, [0, 1, 2]);
        let mut queued = vec![false; 3];
        out.clear();
        with_data(&[0], &[0xf8], &mut queued, &mut out);
        assert!(out.is_empty(), "bits 3..8 name no buffer");
        flip(&mut [], 9);
        assert!(!get(&[], 9));
    }

    proptest! {
        #[test]
        fn hostile_bitmaps_never_name_a_buffer_twice_or_one_in_flight(
            n in 1usize..300,
            mine in proptest::collection::vec(any::<u8>(), 0..40),
            peer in proptest::collection::vec(any::<u8>(), 0..40),
            busy_bits in proptest::collection::vec(any::<bool>(), 300),
            rounds in 1usize..4,
        ) {
            let busy = &busy_bits[..n];
            let mut pooled = vec![false; n];
            let mut queued = vec![false; n];
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                reusable(&mine, &peer, busy, &mut pooled, &mut a);
                with_data(&mine, &peer, &mut queued, &mut b);
            }
            let mut seen = std::collections::BTreeSet::new();
            for &i in &a {
                prop_assert!((i as usize) < n);
                prop_assert!(!busy[i as usize]);
                prop_assert!(seen.insert(i));
            }
            let mut seen = std::collections::BTreeSet::new();
            for &i in &b {
                prop_assert!((i as usize) < n);
                prop_assert!(seen.insert(i));
            }
        }
    }
}
