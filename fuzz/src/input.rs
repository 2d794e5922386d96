//! Reading structure out of fuzzer bytes: a cursor that never fails (an exhausted input reads
//! as zeros), so every byte string is a valid input and small mutations make small changes.

/// A cursor over fuzzer bytes.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// The next byte (0 once exhausted).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        let v = if n <= 256 {
            u32::from(self.u8())
        } else {
            self.u32()
        };
        v % n
    }

    /// One byte's worth of a coin: true for odd bytes.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// The next `n` bytes, or as many as are left.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// Everything not read yet.
    pub fn rest(self) -> &'a [u8] {
        self.data
    }

    /// Bytes not read yet.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True once every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Guest RAM of `size` bytes filled with `image` repeated (zeros when `image` is empty), so a
/// short input still reaches every ring.
pub fn tiled_memory(image: &[u8], size: usize) -> resex_guestmem::VecMemory {
    let mem = resex_guestmem::VecMemory::new(size);
    if !image.is_empty() {
        let mut at = 0;
        while at < size {
            let n = image.len().min(size - at);
            // Inside the memory by construction: cannot fail.
            let _ = resex_guestmem::GuestMemory::write(
                &mem,
                resex_guestmem::GuestAddress(at as u64),
                &image[..n],
            );
            at += n;
        }
    }
    mem
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_guestmem::{GuestAddress, GuestMemory};

    #[test]
    fn an_exhausted_input_reads_zeros() {
        let mut i = Input::new(&[7]);
        assert_eq!((i.u8(), i.u8(), i.u32(), i.below(5)), (7, 0, 0, 0));
        assert!(i.is_empty());
    }

    #[test]
    fn tiles_the_image_over_the_whole_memory() {
        let mem = tiled_memory(&[1, 2, 3], 8);
        let mut b = [0u8; 8];
        mem.read(GuestAddress(0), &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 1, 2, 3, 1, 2]);
    }
}
