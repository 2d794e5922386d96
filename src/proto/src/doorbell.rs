//! The guest's end of a device doorbell.
//!
//! A real HCA learns of new work from a doorbell write to its UAR page (MMIO); software cannot
//! trap a guest's doorbell record, so softhca's guests also ring a byte stream (a Unix socket
//! whose other end the device's thread waits on). A ring is one non-blocking write of one
//! byte: when the stream is full the device has unread rings and will wake anyway, and when
//! the device is gone nothing is lost but the ring, so ringing never blocks and never fails.

use std::io::Write;
use std::os::unix::net::UnixStream;

/// One guest's doorbell.
#[derive(Debug)]
pub struct Doorbell {
    stream: UnixStream,
}

impl Doorbell {
    /// A doorbell over `stream` (made non-blocking).
    pub fn new(stream: UnixStream) -> std::io::Result<Self> {
        stream.set_nonblocking(true)?;
        Ok(Self { stream })
    }

    /// Rings: the device wakes if it was waiting. Never blocks; a full stream (rings not read
    /// yet) or a closed one (the device stopped) is not an error.
    pub fn ring(&self) {
        let _ = (&self.stream).write(&[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_ring_is_one_byte_and_a_full_or_closed_stream_is_not_an_error() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let bell = Doorbell::new(a).unwrap();
        bell.ring();
        let mut buf = [0u8; 8];
        assert_eq!(b.read(&mut buf).unwrap(), 1);
        // Fill the stream far past its buffer: every ring returns at once.
        for _ in 0..10_000 {
            bell.ring();
        }
        drop(b);
        bell.ring();
    }
}
