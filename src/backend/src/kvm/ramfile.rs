//! Finding a KVM guest's RAM file from its QEMU process: the shared, file-backed mapping
//! (`rw-s`) of exactly the guest's RAM size, as `memory-backend-file` (what libvirt's
//! `<source type='file'/>` makes, under `/var/lib/libvirt/qemu/ram/`) maps it. A file already
//! unlinked is reached through `/proc/PID/map_files/`.

use crate::BackendError;
use std::path::PathBuf;

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// Start address.
    pub start: u64,
    /// End address.
    pub end: u64,
    /// Permissions (`rw-s`).
    pub perms: String,
    /// File offset.
    pub offset: u64,
    /// The path (empty for anonymous memory).
    pub path: String,
}

/// Parses `/proc/PID/maps` (lines that do not parse are skipped).
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
            let _dev = f.next()?;
            let _inode = f.next()?;
            let path = f.collect::<Vec<_>>().join(" ");
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                perms: perms.to_owned(),
                offset: u64::from_str_radix(offset, 16).ok()?,
                path,
            })
        })
        .collect()
}

/// The mapping that is the guest's RAM: shared, file-backed, from offset 0, `ram_size` long;
/// among several, the one under libvirt's RAM directory.
pub fn guest_ram(maps: &[Mapping], ram_size: u64) -> Option<&Mapping> {
    let mut c = maps.iter().filter(|m| {
        m.perms.ends_with('s')
            && m.offset == 0
            && m.path.starts_with('/')
            && !m.path.starts_with("/dev/")
            && m.end.saturating_sub(m.start) == ram_size
    });
    let first = c.next()?;
    Some(
        std::iter::once(first)
            .chain(c)
            .find(|m| m.path.contains("/libvirt/qemu/ram/"))
            .unwrap_or(first),
    )
}

/// The path to open for QEMU process `pid`'s guest RAM of `ram_size` bytes.
pub fn find(pid: u32, ram_size: u64) -> Result<PathBuf, BackendError> {
    let maps_path = format!("/proc/{pid}/maps");
    let text = std::fs::read_to_string(&maps_path)
        .map_err(|e| BackendError::io(format!("reading {maps_path}"), e))?;
    let maps = parse_maps(&text);
    let m = guest_ram(&maps, ram_size).ok_or_else(|| {
        BackendError::Unavailable(format!(
            "QEMU process {pid} maps no shared file of the guest's {ram_size} bytes: give the \
             domain {} (or run `resex kvm prepare DOMAIN`) and restart it",
            super::xml::MEMORY_SNIPPET
        ))
    })?;
    Ok(match m.path.strip_suffix(" (deleted)") {
        Some(_) => PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)),
        None => PathBuf::from(&m.path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0000000-55d0c0a00000 r-xp 00000000 fe:00 1234 /usr/bin/qemu-system-x86_64
7f8bc0000000-7f8bc8000000 rw-s 00000000 00:01 99 /dev/zero (deleted)
7f8bcffff000-7f8bd7fff000 rw-s 00000000 fe:00 763927                     /var/lib/libvirt/qemu/ram/1-resex-probe/pc.ram
7f8bd8000000-7f8bd8040000 rw-s 00000000 fe:00 763928 /var/lib/libvirt/qemu/ram/1-resex-probe/vga.vram
7f8be0000000-7f8be8000000 rw-p 00000000 00:00 0
garbage line
";

    #[test]
    fn the_ram_mapping_is_found_by_size_sharing_and_offset() {
        let maps = parse_maps(MAPS);
        assert_eq!(maps.len(), 5);
        let m = guest_ram(&maps, 128 << 20).unwrap();
        assert_eq!(m.path, "/var/lib/libvirt/qemu/ram/1-resex-probe/pc.ram");
        assert_eq!(guest_ram(&maps, 64 << 20), None);
        // A private anonymous mapping of the right size is not guest RAM we can share.
        assert_eq!(guest_ram(&maps[4..], 128 << 20), None);
    }

    #[test]
    fn our_own_process_has_no_guest_ram() {
        let e = find(std::process::id(), 12_345 * 4096)
            .unwrap_err()
            .to_string();
        assert!(e.contains("resex kvm prepare"), "{e}");
    }
}
