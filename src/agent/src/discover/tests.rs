#![allow(clippy::cast_possible_truncation)]

use super::fixture::fake_proc;
use super::*;
use std::fs::File;

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

mod watching {
    use super::fixture::qp_queues;
    use super::*;
    use crate::discover::rdma_nl::NetlinkError;
    use crate::discover::watch::{QpnSource, Watcher};
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    /// A QP table giving `pid` the QPNs in `table`, counting how often it is asked.
    fn source(table: BTreeMap<u32, Vec<u32>>, asked: Arc<AtomicU32>) -> QpnSource {
        Box::new(move || {
            asked.fetch_add(1, Ordering::AcqRel);
            Ok(table.clone())
        })
    }

    #[test]
    fn queues_are_found_kept_and_dropped_as_processes_come_and_go() {
        let root = tempfile::tempdir().unwrap();
        // Present at the first scan: its past is unknown.
        fake_proc(root.path(), 10, &qp_queues(0x100_000, 0));
        std::fs::write(root.path().join("10/comm"), "ib_write_bw\n").unwrap();
        // A process without RDMA queues is never read further.
        fake_proc(root.path(), 11, &[]);
        let asked = Arc::new(AtomicU32::new(0));
        let table = BTreeMap::from([(10, vec![0x11]), (12, vec![0x12])]);
        let mut w = Watcher::new(root.path(), source(table, asked.clone()));
        let c = w.scan();
        assert_eq!(c.found.len(), 1);
        assert_eq!(
            (c.found[0].pid, c.found[0].comm.as_str(), c.found[0].queues),
            (10, "ib_write_bw", 3)
        );
        assert_eq!(c.found[0].qps, vec![0x11]);
        assert!(w.rings().iter().all(|r| r.start.is_none()));
        assert_eq!(asked.load(Ordering::Acquire), 1);
        // Nothing changed: nothing read, the QP table not asked.
        assert!(!w.scan().any());
        assert_eq!(asked.load(Ordering::Acquire), 1);
        // A process created after the first scan: counted from its queues' first entries.
        fake_proc(root.path(), 12, &qp_queues(0x300_000, 0x8000));
        let c = w.scan();
        assert_eq!((c.found.len(), c.found[0].pid), (1, 12));
        let rings = w.rings();
        assert_eq!(rings.len(), 6);
        assert_eq!(
            rings.iter().map(|r| r.start).collect::<Vec<_>>(),
            [None, None, None, Some(0), Some(0), Some(0)]
        );
        assert_eq!(
            rings.iter().map(|r| r.qpn).collect::<Vec<_>>(),
            [None, Some(0x11), Some(0x11), None, Some(0x12), Some(0x12)]
        );
        // It exits: its queues are unregistered, the others stay.
        std::fs::remove_dir_all(root.path().join("12")).unwrap();
        let c = w.scan();
        assert!(c.found.is_empty());
        assert_eq!((c.gone.len(), c.gone[0].pid, c.gone[0].queues), (1, 12, 3));
        assert_eq!(w.rings().len(), 3);
    }

    #[test]
    fn a_new_qp_in_a_known_process_counts_from_its_start_and_the_old_keep_theirs() {
        let root = tempfile::tempdir().unwrap();
        fake_proc(root.path(), 20, &qp_queues(0x100_000, 0));
        let asked = Arc::new(AtomicU32::new(0));
        let table = BTreeMap::from([(20, vec![0x11, 0x12])]);
        let mut w = Watcher::new(root.path(), source(table, asked));
        w.scan();
        // Two QPs in the table, one send queue: nothing is tied (never a wrong tie).
        assert!(w.rings().iter().all(|r| r.qpn.is_none()));
        let mut both = qp_queues(0x100_000, 0);
        both.extend(qp_queues(0x200_000, 0x8000));
        fake_proc(root.path(), 20, &both);
        let c = w.scan();
        assert_eq!(c.found[0].qps, vec![0x11, 0x12]);
        let rings = w.rings();
        assert_eq!(
            rings.iter().map(|r| r.start).collect::<Vec<_>>(),
            [None, None, None, Some(0), Some(0), Some(0)]
        );
    }

    #[test]
    fn without_the_qp_table_queues_register_untied_and_the_table_is_asked_a_few_times_more() {
        let root = tempfile::tempdir().unwrap();
        fake_proc(root.path(), 30, &qp_queues(0x100_000, 0));
        let asked = Arc::new(AtomicU32::new(0));
        let a = asked.clone();
        let mut w = Watcher::new(
            root.path(),
            Box::new(move || {
                a.fetch_add(1, Ordering::AcqRel);
                Err(NetlinkError::TooLong)
            }),
        );
        assert_eq!(w.scan().found.len(), 1);
        assert_eq!(w.rings().len(), 3);
        assert!(w.rings().iter().all(|r| r.qpn.is_none()));
        for _ in 0..30 {
            assert!(!w.scan().any(), "the same untied queues are not a change");
        }
        // Bounded: the first read and 10 retries.
        assert_eq!(asked.load(Ordering::Acquire), 11);
    }

    #[test]
    fn an_unreadable_process_is_skipped_until_its_mappings_change() {
        let root = tempfile::tempdir().unwrap();
        fake_proc(root.path(), 40, &qp_queues(0x100_000, 0));
        // Its pagemap gives no frames (as to a reader without root).
        let pm = root.path().join("40/pagemap");
        std::fs::write(&pm, vec![0u8; 0x400_000 / 4096 * 8]).unwrap();
        let mut w = Watcher::new(root.path(), Box::new(|| Ok(BTreeMap::new())));
        assert!(!w.scan().any());
        assert!(!w.scan().any());
        assert!(w.rings().is_empty());
        fake_proc(root.path(), 40, &qp_queues(0x100_000, 0x1000));
        assert_eq!(w.scan().found.len(), 1, "changed mappings are read again");
    }
}

mod serving {
    use super::fixture::qp_queues;
    use super::*;
    use crate::discover::serve::{run, Options};
    use crate::session::{ChannelStatus, UnixChannel};
    use resex_proto::channel::{read_msg, write_msg, GuestMsg, HostMsg, MAX_LINE};
    use std::collections::BTreeMap;
    use std::io::BufReader;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    /// A host that says hello, accepts every document and passes on the rings' count.
    fn host(sock: &Path, seen: mpsc::Sender<(usize, Instant)>) {
        let s = UnixStream::connect(sock).unwrap();
        std::thread::spawn(move || {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            write_msg(&mut w, &HostMsg::Hello { version: 1 }).unwrap();
            while let Ok(Some(GuestMsg::Register { registration })) =
                read_msg::<GuestMsg>(&mut r, MAX_LINE)
            {
                assert!(registration.qps.is_empty() && registration.mailbox.is_none());
                let _ = seen.send((registration.rings.len(), Instant::now()));
                let ok = HostMsg::Accepted {
                    vm: "g".into(),
                    qps: 0,
                    mailbox: false,
                };
                if write_msg(&mut w, &ok).is_err() {
                    return;
                }
            }
        });
    }

    #[test]
    fn the_host_hears_of_new_queues_within_a_scan_and_of_an_exit() {
        let root = tempfile::tempdir().unwrap();
        let sock = root.path().join("agent.sock");
        let chan = UnixChannel::bind(&sock).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        // The session's own look is once a minute: only the scan's nudge can register in time.
        let opts = Options {
            proc_root: root.path().to_path_buf(),
            session_poll: Duration::from_secs(60),
            ..Options::new(Duration::from_millis(20), 1024, Some("g".into()))
        };
        let agent = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let table = Box::new(|| Ok(BTreeMap::from([(7, vec![0x11])])));
                let status = Arc::new(ChannelStatus::default());
                run(Box::new(chan), &opts, table, &stop, status).unwrap()
            })
        };
        let (tx, rx) = mpsc::channel();
        host(&sock, tx);
        let (n, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(n, 0, "nothing yet");
        fake_proc(root.path(), 7, &qp_queues(0x100_000, 0));
        let (n, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(n, 3);
        std::fs::remove_dir_all(root.path().join("7")).unwrap();
        let (n, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(n, 0, "the exited process's queues are unregistered");
        stop.store(true, Ordering::Release);
        let totals = agent.join().unwrap();
        assert_eq!((totals.found, totals.gone), (1, 1));
        assert!(totals.scans >= 2);
    }
}
