//! Copies between process memory and raw shared memory with relaxed atomic accesses.
//!
//! Memory a guest (another process, or a VM) can write concurrently must not be read through
//! Rust references or plain loads (that would be a data race). Relaxed atomic loads and stores
//! compile to plain moves on x86-64 and aarch64, so the cost is that of a `memcpy` done in
//! 8-byte words.
//!
//! Every naturally aligned piece of 2, 4 or 8 bytes is one access, as on hardware: a copy of
//! an aligned 32-bit counter is never torn (a doorbell record's word read byte by byte while
//! its writer was preempted between its byte stores was, once: `0x0AFE -> 0x0BFE`). The body is
//! copied in 8-byte words; the unaligned head and the tail (under 8 bytes each) in the largest
//! aligned pieces that fit.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The largest naturally aligned piece (8, 4, 2 or 1 bytes) at `addr` of at most `left` bytes.
#[inline]
fn piece(addr: usize, left: usize) -> usize {
    [8, 4, 2]
        .into_iter()
        .find(|&w| addr.is_multiple_of(w) && left >= w)
        .unwrap_or(1)
}

/// Loads `d.len()` (1, 2, 4 or 8) bytes at `at` in one access.
///
/// # Safety
/// `at` must be aligned to `d.len()` and `at .. at + d.len()` valid, mapped memory.
#[inline]
unsafe fn load(at: *const u8, d: &mut [u8]) {
    let p = at as *mut u8;
    match d.len() {
        8 => {
            // SAFETY: the caller vouches for the piece's alignment and mapping.
            let a = unsafe { AtomicU64::from_ptr(p.cast()) };
            d.copy_from_slice(&a.load(Ordering::Relaxed).to_ne_bytes());
        }
        4 => {
            // SAFETY: as above.
            let a = unsafe { AtomicU32::from_ptr(p.cast()) };
            d.copy_from_slice(&a.load(Ordering::Relaxed).to_ne_bytes());
        }
        2 => {
            // SAFETY: as above.
            let a = unsafe { AtomicU16::from_ptr(p.cast()) };
            d.copy_from_slice(&a.load(Ordering::Relaxed).to_ne_bytes());
        }
        _ => {
            // SAFETY: as above (a byte needs no alignment).
            let a = unsafe { AtomicU8::from_ptr(p) };
            d[0] = a.load(Ordering::Relaxed);
        }
    }
}

/// Stores `s` (1, 2, 4 or 8 bytes) at `at` in one access.
///
/// # Safety
/// `at` must be aligned to `s.len()` and `at .. at + s.len()` valid, mapped, writable memory.
#[inline]
unsafe fn store(s: &[u8], at: *mut u8) {
    let mut w = [0u8; 8];
    w[..s.len()].copy_from_slice(s);
    match s.len() {
        8 => {
            // SAFETY: the caller vouches for the piece's alignment and mapping.
            let a = unsafe { AtomicU64::from_ptr(at.cast()) };
            a.store(u64::from_ne_bytes(w), Ordering::Relaxed);
        }
        4 => {
            // SAFETY: as above.
            let a = unsafe { AtomicU32::from_ptr(at.cast()) };
            a.store(
                u32::from_ne_bytes([w[0], w[1], w[2], w[3]]),
                Ordering::Relaxed,
            );
        }
        2 => {
            // SAFETY: as above.
            let a = unsafe { AtomicU16::from_ptr(at.cast()) };
            a.store(u16::from_ne_bytes([w[0], w[1]]), Ordering::Relaxed);
        }
        _ => {
            // SAFETY: as above (a byte needs no alignment).
            let a = unsafe { AtomicU8::from_ptr(at) };
            a.store(w[0], Ordering::Relaxed);
        }
    }
}

/// Copies `dst.len()` bytes from `src` into `dst`.
///
/// # Safety
/// `src .. src + dst.len()` must be valid, mapped memory for the duration of the call.
#[inline]
pub(crate) unsafe fn copy_out(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    let head = ((src as usize).wrapping_neg() % 8).min(n);
    let body = (n - head) / 8 * 8;
    // SAFETY: the head is the first `head` bytes of the caller's range.
    unsafe { pieces_out(src, &mut dst[..head]) };
    for (k, chunk) in dst[head..head + body].chunks_exact_mut(8).enumerate() {
        // SAFETY: src + head is 8-aligned and head + 8k + 8 <= n: inside the caller's range.
        let a = unsafe { AtomicU64::from_ptr(src.add(head + 8 * k) as *mut u64) };
        chunk.copy_from_slice(&a.load(Ordering::Relaxed).to_ne_bytes());
    }
    // SAFETY: the tail is the last bytes of the caller's range.
    unsafe { pieces_out(src.add(head + body), &mut dst[head + body..]) };
}

/// Copies fewer than 8 bytes (a head or a tail) in the largest aligned pieces.
///
/// # Safety
/// As [`copy_out`].
#[inline]
unsafe fn pieces_out(src: *const u8, dst: &mut [u8]) {
    let mut i = 0;
    while i < dst.len() {
        // SAFETY: i < dst.len(), inside the caller's range.
        let at = unsafe { src.add(i) };
        let w = piece(at as usize, dst.len() - i);
        // SAFETY: `at` is aligned to w (piece), at + w inside the caller's range.
        unsafe { load(at, &mut dst[i..i + w]) };
        i += w;
    }
}

/// Copies `src` to `dst .. dst + src.len()`.
///
/// # Safety
/// `dst .. dst + src.len()` must be valid, mapped, writable memory for the duration of the call.
pub(crate) unsafe fn copy_in(src: &[u8], dst: *mut u8) {
    let n = src.len();
    let head = ((dst as usize).wrapping_neg() % 8).min(n);
    let body = (n - head) / 8 * 8;
    // SAFETY: the head is the first `head` bytes of the caller's writable range.
    unsafe { pieces_in(&src[..head], dst) };
    for (k, chunk) in src[head..head + body].chunks_exact(8).enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        // SAFETY: dst + head is 8-aligned and head + 8k + 8 <= n: inside the caller's
        // writable range.
        let a = unsafe { AtomicU64::from_ptr(dst.add(head + 8 * k) as *mut u64) };
        a.store(u64::from_ne_bytes(w), Ordering::Relaxed);
    }
    // SAFETY: the tail is the last bytes of the caller's writable range.
    unsafe { pieces_in(&src[head + body..], dst.add(head + body)) };
}

/// Stores fewer than 8 bytes (a head or a tail) in the largest aligned pieces.
///
/// # Safety
/// As [`copy_in`].
#[inline]
unsafe fn pieces_in(src: &[u8], dst: *mut u8) {
    let mut i = 0;
    while i < src.len() {
        // SAFETY: i < src.len(), inside the caller's writable range.
        let at = unsafe { dst.add(i) };
        let w = piece(at as usize, src.len() - i);
        // SAFETY: `at` is aligned to w (piece), at + w inside the caller's writable range.
        unsafe { store(&src[i..i + w], at) };
        i += w;
    }
}

/// Reads one byte.
///
/// # Safety
/// `p` must be valid, mapped memory.
#[inline]
pub(crate) unsafe fn load_u8(p: *const u8) -> u8 {
    // SAFETY: the caller vouches that p is mapped.
    unsafe { AtomicU8::from_ptr(p as *mut u8) }.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn pieces_are_naturally_aligned_and_as_large_as_fit() {
        assert_eq!(piece(0, 100), 8);
        assert_eq!(piece(4, 100), 4);
        assert_eq!(piece(4, 3), 2);
        assert_eq!(piece(6, 8), 2);
        assert_eq!(piece(3, 8), 1);
        assert_eq!(piece(8, 7), 4);
    }

    #[test]
    fn every_offset_and_length_copies_exactly() {
        let mut buf = vec![0u64; 8];
        let base = buf.as_mut_ptr().cast::<u8>();
        let src: Vec<u8> = (0..64u8)
            .map(|b| b.wrapping_mul(37).wrapping_add(1))
            .collect();
        for off in 0..16 {
            for len in 0..=(64 - off) {
                // SAFETY: buf's whole 64 bytes.
                unsafe { copy_in(&[0u8; 64], base) };
                // SAFETY: off + len <= 64, inside buf's 64 bytes.
                unsafe { copy_in(&src[..len], base.add(off)) };
                let mut out = vec![0u8; len];
                // SAFETY: the same range.
                unsafe { copy_out(base.add(off), &mut out) };
                assert_eq!(out, &src[..len], "off {off} len {len}");
                let mut all = [0u8; 64];
                // SAFETY: buf's whole 64 bytes.
                unsafe { copy_out(base, &mut all) };
                assert!(
                    all[..off].iter().all(|&b| b == 0),
                    "before, off {off} len {len}"
                );
                assert!(all[off + len..].iter().all(|&b| b == 0), "after");
            }
        }
    }

    /// A 4-byte counter at an offset of 4 (a doorbell record's second word), written and read
    /// concurrently: every read is one of the written values, never a mix.
    #[test]
    fn an_aligned_word_is_never_torn() {
        let mem = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let addr = mem[0].as_ptr() as usize + 4;
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (mem, stop) = (mem.clone(), stop.clone());
            std::thread::spawn(move || {
                let _keep = &mem;
                let mut k = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let v: u32 = if k.is_multiple_of(2) {
                        0x00ff_00ff
                    } else {
                        0xff00_ff00
                    };
                    // SAFETY: addr .. addr + 4 is inside `mem`, alive while `_keep` is.
                    unsafe { copy_in(&v.to_ne_bytes(), addr as *mut u8) };
                    k = k.wrapping_add(1);
                }
            })
        };
        for _ in 0..200_000 {
            let mut b = [0u8; 4];
            // SAFETY: inside `mem`, alive for the test.
            unsafe { copy_out(addr as *const u8, &mut b) };
            let v = u32::from_ne_bytes(b);
            assert!(
                [0, 0x00ff_00ff, 0xff00_ff00].contains(&v),
                "torn read {v:#x}"
            );
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }
}
