//! Copies between process memory and raw shared memory with relaxed atomic accesses.
//!
//! Memory a guest (another process, or a VM) can write concurrently must not be read through
//! Rust references or plain loads (that would be a data race). Relaxed atomic loads and stores
//! compile to plain moves on x86-64 and aarch64, so the cost is that of a `memcpy` done in
//! 8-byte words.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Copies `dst.len()` bytes from `src` into `dst`.
///
/// # Safety
/// `src .. src + dst.len()` must be valid, mapped memory for the duration of the call.
#[inline]
pub(crate) unsafe fn copy_out(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    // Unaligned head, byte by byte.
    let head = (src as usize).wrapping_neg() % 8;
    let head = head.min(n);
    for (i, d) in dst[..head].iter_mut().enumerate() {
        // SAFETY: i < n, inside the caller's range; u8 needs no alignment.
        *d = unsafe { AtomicU8::from_ptr(src.add(i) as *mut u8) }.load(Ordering::Relaxed);
    }
    // Aligned body, a word at a time.
    let mut i = head;
    let (body, tail) = dst[head..].split_at_mut((n - head) / 8 * 8);
    for chunk in body.chunks_exact_mut(8) {
        // SAFETY: src + i is 8-aligned (head skipped to alignment) and i + 8 <= n.
        let v = unsafe { AtomicU64::from_ptr(src.add(i) as *mut u64) }.load(Ordering::Relaxed);
        chunk.copy_from_slice(&v.to_ne_bytes());
        i += 8;
    }
    for (k, d) in tail.iter_mut().enumerate() {
        // SAFETY: i + k < n, inside the caller's range.
        *d = unsafe { AtomicU8::from_ptr(src.add(i + k) as *mut u8) }.load(Ordering::Relaxed);
    }
}

/// Copies `src` to `dst .. dst + src.len()`.
///
/// # Safety
/// `dst .. dst + src.len()` must be valid, mapped, writable memory for the duration of the call.
pub(crate) unsafe fn copy_in(src: &[u8], dst: *mut u8) {
    let n = src.len();
    // Unaligned head, byte by byte.
    let head = (dst as usize).wrapping_neg() % 8;
    let head = head.min(n);
    for (i, &b) in src[..head].iter().enumerate() {
        // SAFETY: i < n, so dst + i is inside the range the caller vouched for.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(b, Ordering::Relaxed);
    }
    // Aligned body, a word at a time.
    let mut i = head;
    let (body, tail) = src[head..].split_at((n - head) / 8 * 8);
    for chunk in body.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        // SAFETY: dst + i is 8-aligned (head skipped to alignment) and i + 8 <= n, inside the
        // caller's writable range.
        unsafe { AtomicU64::from_ptr(dst.add(i) as *mut u64) }
            .store(u64::from_ne_bytes(w), Ordering::Relaxed);
        i += 8;
    }
    for (k, &b) in tail.iter().enumerate() {
        // SAFETY: i + k < n, inside the caller's writable range.
        unsafe { AtomicU8::from_ptr(dst.add(i + k)) }.store(b, Ordering::Relaxed);
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
