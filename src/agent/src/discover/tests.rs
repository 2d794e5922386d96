#![allow(clippy::cast_possible_truncation)]

use super::*;
use std::fs::File;

/// A `/proc/PID` of our own making under `root`: `maps` listing `queues` (start, slots, log2,
/// pgoff) as uverbs mappings, `mem` holding each queue's header at its address, `pagemap`
/// giving page `i` of the address space frame `i + 7`.
fn fake_proc(root: &Path, pid: u32, queues: &[(u64, u32, u32, u64)]) {
    let dir = root.join(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let mut maps =
        String::from("00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/ib_write_bw\n");
    let mem = File::create(dir.join("mem")).unwrap();
    let pagemap = File::create(dir.join("pagemap")).unwrap();
    for &(start, slots, log2, pgoff) in queues {
        let bytes = (HEADER_BYTES + (u64::from(slots) << log2)).div_ceil(PAGE) * PAGE;
        maps.push_str(&format!(
            "{start:x}-{:x} rw-s {pgoff:08x} 00:05 1034 /dev/infiniband/uverbs0\n",
            start + bytes
        ));
        let mut h = [0u8; 8];
        h[..4].copy_from_slice(&log2.to_ne_bytes());
        h[4..].copy_from_slice(&(slots - 1).to_ne_bytes());
        mem.write_all_at(&h, start).unwrap();
        for p in start / PAGE..(start + bytes) / PAGE {
            let entry = (1u64 << 63) | (p + 7);
            pagemap.write_all_at(&entry.to_le_bytes(), p * 8).unwrap();
        }
    }
    maps.push_str("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]\n");
    std::fs::write(dir.join("maps"), maps).unwrap();
}

#[test]
fn maps_lines_give_the_uverbs_mappings_in_creation_order() {
    let maps = "\
7f0000002000-7f0000004000 rw-s 00003000 00:05 1034 /dev/infiniband/uverbs0
7f0000000000-7f0000001000 rw-s 00000000 00:05 1034 /dev/infiniband/uverbs0
7f0000009000-7f000000a000 rw-p 00000000 00:00 0
garbage line
7f000000a000-7f0000009000 rw-s 00001000 00:05 1034 /dev/infiniband/uverbs0
7f0000010000-7f0000011000 rw-s zz 00:05 1034 /dev/infiniband/uverbs1
";
    let m = uverbs_mappings(maps);
    assert_eq!(
        m,
        vec![
            Mapping {
                start: 0x7f00_0000_0000,
                end: 0x7f00_0000_1000,
                pgoff: 0
            },
            Mapping {
                start: 0x7f00_0000_2000,
                end: 0x7f00_0000_4000,
                pgoff: 0x3000
            },
        ]
    );
}

fn q(elem_size: u32) -> Queue {
    Queue {
        map: Mapping {
            start: 0,
            end: PAGE,
            pgoff: 0,
        },
        slots: 8,
        elem_size,
    }
}

#[test]
fn send_queues_are_told_by_their_slots_and_their_receive_queue_follows() {
    // ib_write_bw: a send CQ, a receive CQ, then the QP's send and receive queues.
    let queues = [q(128), q(128), q(512), q(64)];
    let kinds = classify(&queues, &[17]);
    assert_eq!(
        kinds,
        vec![
            (RingKind::Cq, None),
            (RingKind::Cq, None),
            (RingKind::Sq, Some(17)),
            (RingKind::Rq, Some(17)),
        ]
    );
    // A receive queue of many gather entries has big slots too: it is still the receive queue.
    let two = [q(128), q(512), q(256), q(1024), q(128)];
    assert_eq!(
        classify(&two, &[20, 21]),
        vec![
            (RingKind::Cq, None),
            (RingKind::Sq, Some(20)),
            (RingKind::Rq, Some(20)),
            (RingKind::Sq, Some(21)),
            (RingKind::Rq, Some(21)),
        ]
    );
    // QPNs that do not match the send queues tie nothing.
    assert!(classify(&two, &[20]).iter().all(|(_, qpn)| qpn.is_none()));
    assert_eq!(classify(&[], &[1]), vec![]);
}

#[test]
fn a_process_queues_become_rings_with_their_guest_pages() {
    let root = tempfile::tempdir().unwrap();
    // pgoff order: CQ (8 x 128), then SQ (16 x 512) and RQ (8 x 64); listed out of order.
    fake_proc(
        root.path(),
        42,
        &[
            (0x10_0000, 16, 9, 0x2000),
            (0x8_0000, 8, 7, 0x0000),
            (0x20_0000, 8, 6, 0x5000),
        ],
    );
    let rings = process_rings(root.path(), 42, &[17]).unwrap();
    let got: Vec<_> = rings
        .iter()
        .map(|r| (r.kind, r.qpn, r.slots, r.elem_size))
        .collect();
    assert_eq!(
        got,
        vec![
            (RingKind::Cq, None, 8, 128),
            (RingKind::Sq, Some(17), 16, 512),
            (RingKind::Rq, Some(17), 8, 64),
        ]
    );
    // 384 + 16 x 512 bytes: three pages, each the frame pagemap gave.
    let first = 0x10_0000 / PAGE;
    assert_eq!(
        rings[1].pages,
        (first..first + 3)
            .map(|p| (p + 7) * PAGE)
            .collect::<Vec<_>>()
    );
    assert!(rings
        .iter()
        .all(|r| r.format == RingFormat::Rxe && r.start.is_none()));
    // A process without uverbs mappings has no rings; one that is gone is an error naming the file.
    fake_proc(root.path(), 43, &[]);
    assert!(process_rings(root.path(), 43, &[]).unwrap().is_empty());
    let e = process_rings(root.path(), 44, &[]).unwrap_err().to_string();
    assert!(e.contains("44/maps"), "{e}");
}

#[test]
fn a_header_that_does_not_fit_its_mapping_is_not_a_queue() {
    let root = tempfile::tempdir().unwrap();
    fake_proc(root.path(), 7, &[(0x10000, 8, 7, 0)]);
    let mem = File::open(root.path().join("7/mem")).unwrap();
    let m = Mapping {
        start: 0x10000,
        end: 0x11000,
        pgoff: 0,
    };
    assert_eq!(
        read_queue(&mem, m).map(|q| (q.slots, q.elem_size)),
        Some((8, 128))
    );
    // The same header in a larger mapping, or a mapping with no header, is refused.
    assert!(read_queue(&mem, Mapping { end: 0x13000, ..m }).is_none());
    assert!(read_queue(
        &mem,
        Mapping {
            start: 0x20000,
            end: 0x21000,
            pgoff: 0
        }
    )
    .is_none());
}

#[test]
fn the_header_words_are_the_kernels() {
    use resex_ibmon::rxe::layout::queue;
    assert_eq!(
        (LOG2_ELEM_SIZE, INDEX_MASK),
        (queue::LOG2_ELEM_SIZE, queue::INDEX_MASK)
    );
    assert_eq!(HEADER_BYTES, queue::DATA as u64);
    assert_eq!(
        MIN_SQ_ELEM as usize,
        (resex_ibmon::rxe::layout::send_wqe::SIZE + resex_ibmon::rxe::layout::sge::SIZE)
            .next_power_of_two()
    );
}

#[test]
fn the_real_pagemap_gives_frames_to_root() {
    use std::os::unix::fs::MetadataExt;
    let layout = std::alloc::Layout::from_size_align(2 * PAGE as usize, PAGE as usize).unwrap();
    // SAFETY: a non-zero-sized layout; the block is freed below with the same layout.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!p.is_null());
    // SAFETY: both pages belong to the block just allocated; writing makes them present.
    unsafe {
        p.write_volatile(1);
        p.add(PAGE as usize).write_volatile(1);
    }
    let m = Mapping {
        start: p as u64,
        end: p as u64 + 2 * PAGE,
        pgoff: 0,
    };
    let path = Path::new("/proc/self/pagemap");
    let got = guest_pages(&File::open(path).unwrap(), path, m);
    // SAFETY: allocated above with this layout, not used after.
    unsafe { std::alloc::dealloc(p, layout) };
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    match got {
        Ok(pages) => {
            assert!(root, "frames shown to a non-root reader");
            assert_eq!(pages.len(), 2);
            assert!(pages.iter().all(|&g| g != 0 && g % PAGE == 0), "{pages:x?}");
        }
        Err(e) => assert!(!root && matches!(e, DiscoverError::NoFrames(_)), "{e}"),
    }
}
