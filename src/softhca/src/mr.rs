//! Memory regions: keys to guest page lists, access rights and bounds.

use resex_guestmem::GuestAddress;
use resex_proto::hca::{access, ControlError, MrKeys, RegMr, RegionError};
use std::collections::HashMap;

/// Page size of the page lists.
pub const PAGE: u64 = 4096;
/// Regions larger than this are refused (the guest's whole RAM is the real bound).
pub const MAX_MR_BYTES: u64 = 1 << 40;

/// A guest, as the HCA numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GuestId(pub u32);

/// One registered region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mr {
    /// Owner.
    pub guest: GuestId,
    /// Address of the first byte in work requests.
    pub iova: u64,
    /// Length.
    pub length: u64,
    /// GPAs of the pages, in order.
    pub pages: Vec<u64>,
    /// `access::*`.
    pub access: u32,
}

/// Why an access to a region failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MrFault {
    /// No region with this key (or it belongs to another guest).
    BadKey,
    /// The range is not inside the region.
    OutOfBounds,
    /// The region does not allow this access.
    NoAccess,
}

/// All regions of one HCA.
#[derive(Debug, Default)]
pub struct MrTable {
    by_index: HashMap<u32, Mr>,
    next: u32,
}

impl MrTable {
    /// Validates and registers a region for `guest` whose RAM is `ram_size` bytes.
    pub fn register(
        &mut self,
        guest: GuestId,
        req: &RegMr,
        ram_size: u64,
    ) -> Result<MrKeys, ControlError> {
        if req.length == 0 || req.length > MAX_MR_BYTES {
            return Err(ControlError::Region(RegionError::Length {
                length: req.length,
                max: MAX_MR_BYTES,
            }));
        }
        let first = req.iova % PAGE;
        let need = (first + req.length).div_ceil(PAGE);
        if req.pages.len() as u64 != need {
            return Err(ControlError::Region(RegionError::PageCount {
                length: req.length,
                iova: req.iova,
                need,
                given: req.pages.len() as u64,
            }));
        }
        if let Some(bad) = req
            .pages
            .iter()
            .find(|&&p| p % PAGE != 0 || p.checked_add(PAGE).is_none_or(|e| e > ram_size))
        {
            return Err(ControlError::Region(RegionError::Page {
                page: *bad,
                ram: ram_size,
            }));
        }
        if req.iova.checked_add(req.length).is_none() {
            return Err(ControlError::Region(RegionError::Wraps));
        }
        let known = access::LOCAL_WRITE
            | access::REMOTE_WRITE
            | access::REMOTE_READ
            | access::REMOTE_ATOMIC;
        if req.access & !known != 0 {
            return Err(ControlError::Region(RegionError::UnknownAccess(
                req.access & !known,
            )));
        }
        if self.by_index.len() >= 1 << 20 {
            return Err(ControlError::NoResources("memory regions".into()));
        }
        // Key = index << 8 | a tag byte, like mlx5 mkeys: a stale key fails even if its index is reused.
        let index = loop {
            self.next = (self.next + 1) & 0x00ff_ffff;
            if self.next != 0 && !self.by_index.contains_key(&self.next) {
                break self.next;
            }
        };
        self.by_index.insert(
            index,
            Mr {
                guest,
                iova: req.iova,
                length: req.length,
                pages: req.pages.clone(),
                access: req.access,
            },
        );
        let key = (index << 8) | (index.wrapping_mul(0x9e) & 0xff);
        Ok(MrKeys {
            lkey: key,
            rkey: key,
        })
    }

    /// Removes a region.
    pub fn deregister(&mut self, guest: GuestId, key: u32) -> Result<(), ControlError> {
        match self.lookup(guest, key) {
            Ok(_) => {
                self.by_index.remove(&(key >> 8));
                Ok(())
            }
            Err(_) => Err(ControlError::NotFound(format!(
                "memory region with key {key:#x}"
            ))),
        }
    }

    /// Removes every region of a guest.
    pub fn remove_guest(&mut self, guest: GuestId) {
        self.by_index.retain(|_, mr| mr.guest != guest);
    }

    fn lookup(&self, guest: GuestId, key: u32) -> Result<&Mr, MrFault> {
        let index = key >> 8;
        let mr = self.by_index.get(&index).ok_or(MrFault::BadKey)?;
        if mr.guest != guest || (index.wrapping_mul(0x9e) & 0xff) != key & 0xff {
            return Err(MrFault::BadKey);
        }
        Ok(mr)
    }

    /// Translates `len` bytes at `addr` of region `key` (owned by `guest`, allowing `need`) into
    /// guest-physical spans, appended to `out`.
    pub fn translate(
        &self,
        guest: GuestId,
        key: u32,
        addr: u64,
        len: u64,
        need: u32,
        out: &mut Vec<(GuestAddress, u64)>,
    ) -> Result<(), MrFault> {
        let mr = self.lookup(guest, key)?;
        if mr.access & need != need {
            return Err(MrFault::NoAccess);
        }
        let end = addr.checked_add(len).ok_or(MrFault::OutOfBounds)?;
        if addr < mr.iova || end > mr.iova + mr.length {
            return Err(MrFault::OutOfBounds);
        }
        let mut off = addr - mr.iova + mr.iova % PAGE;
        let mut left = len;
        while left > 0 {
            let page = usize::try_from(off / PAGE).map_err(|_| MrFault::OutOfBounds)?;
            let gpa = *mr.pages.get(page).ok_or(MrFault::OutOfBounds)?;
            let in_page = off % PAGE;
            let n = (PAGE - in_page).min(left);
            let at = GuestAddress(gpa + in_page);
            match out.last_mut() {
                Some((last, l)) if last.0 + *l == at.0 => *l += n,
                _ => out.push((at, n)),
            }
            off += n;
            left -= n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(iova: u64, length: u64, pages: Vec<u64>, acc: u32) -> RegMr {
        RegMr {
            iova,
            length,
            pages,
            access: acc,
        }
    }

    #[test]
    fn translates_across_scattered_pages_and_checks_rights() {
        let mut t = MrTable::default();
        let g = GuestId(1);
        let keys = t
            .register(
                g,
                &req(
                    0x1000_0800,
                    8192,
                    vec![0x5000, 0x2000, 0x9000],
                    access::REMOTE_WRITE,
                ),
                1 << 20,
            )
            .unwrap();
        let mut out = Vec::new();
        t.translate(
            g,
            keys.rkey,
            0x1000_0f00,
            0x300,
            access::REMOTE_WRITE,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            vec![(GuestAddress(0x5f00), 0x100), (GuestAddress(0x2000), 0x200)]
        );
        assert_eq!(
            t.translate(g, keys.rkey, 0x1000_0800, 8193, 0, &mut out),
            Err(MrFault::OutOfBounds)
        );
        assert_eq!(
            t.translate(g, keys.rkey, 0x1000_0800, 8, access::REMOTE_READ, &mut out),
            Err(MrFault::NoAccess)
        );
        assert_eq!(
            t.translate(GuestId(2), keys.rkey, 0x1000_0800, 8, 0, &mut out),
            Err(MrFault::BadKey)
        );
        assert_eq!(
            t.translate(g, keys.rkey ^ 1, 0x1000_0800, 8, 0, &mut out),
            Err(MrFault::BadKey)
        );
        t.deregister(g, keys.lkey).unwrap();
        assert_eq!(
            t.translate(g, keys.rkey, 0x1000_0800, 8, 0, &mut out),
            Err(MrFault::BadKey)
        );
    }

    #[test]
    fn refuses_bad_page_lists() {
        let mut t = MrTable::default();
        let g = GuestId(1);
        let e = t
            .register(g, &req(0, 4097, vec![0], 0), 1 << 20)
            .unwrap_err();
        assert!(e.to_string().contains("touches 2 pages, 1 given"), "{e}");
        let e = t
            .register(g, &req(0, 10, vec![1 << 20], 0), 1 << 20)
            .unwrap_err();
        assert!(e.to_string().contains("inside guest RAM"), "{e}");
        let e = t
            .register(g, &req(0, 10, vec![0x10], 0), 1 << 20)
            .unwrap_err();
        assert!(e.to_string().contains("not a 4 KiB page"), "{e}");
        assert_eq!(
            e,
            ControlError::Region(RegionError::Page {
                page: 0x10,
                ram: 1 << 20
            })
        );
        let e = t
            .register(g, &req(0, 10, vec![0], 0x40), 1 << 20)
            .unwrap_err();
        assert_eq!(e, ControlError::Region(RegionError::UnknownAccess(0x40)));
    }
}
