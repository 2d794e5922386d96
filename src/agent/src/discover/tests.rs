#![allow(clippy::cast_possible_truncation)]

use super::fixture::fake_proc;
use super::*;
use std::fs::File;

#[test]
fn maps_lines_give_the_uverbs_mappings_by_device_in_creation_order() {
    let maps = "\
7f0000002000-7f0000004000 rw-s 00003000 00:05 1034 /dev/infiniband/uverbs0
7f0000020000-7f0000021000 rw-s 00000000 00:05 1035 /dev/infiniband/uverbs1
7f0000000000-7f0000001000 rw-s 00000000 00:05 1034 /dev/infiniband/uverbs0
7f0000009000-7f000000a000 rw-p 00000000 00:00 0
garbage line
7f000000a000-7f0000009000 rw-s 00001000 00:05 1034 /dev/infiniband/uverbs0
7f0000010000-7f0000011000 rw-s zz 00:05 1034 /dev/infiniband/uverbs1
7f0000030000-7f0000031000 rw-s 00000000 00:05 1034 /dev/infiniband/uverbsX
";
    let m = uverbs_mappings(maps);
    let at = |start: u64, end: u64, pgoff: u64, dev: u32| Mapping {
        start,
        end,
        pgoff,
        dev,
    };
    assert_eq!(
        m,
        vec![
            at(0x7f00_0000_0000, 0x7f00_0000_1000, 0, 0),
            at(0x7f00_0000_2000, 0x7f00_0000_4000, 0x3000, 0),
            at(0x7f00_0002_0000, 0x7f00_0002_1000, 0, 1),
        ]
    );
    assert_ne!(
        m[0].key(),
        m[2].key(),
        "one offset on two devices: two queues"
    );
}

fn q(elem_size: u32) -> Queue {
    on(0, elem_size)
}

fn on(dev: u32, elem_size: u32) -> Queue {
    Queue {
        map: Mapping {
            start: 0,
            end: PAGE,
            pgoff: 0,
            dev,
        },
        slots: 8,
        elem_size,
    }
}

fn owned(qpns: &[u32], cqs: Option<usize>, srqs: Option<usize>) -> Owned {
    Owned {
        qpns: qpns.to_vec(),
        cqs,
        srqs,
    }
}

#[test]
fn send_queues_are_told_by_their_slots_and_their_receive_queue_follows() {
    use RingKind::{Cq, Rq, Sq};
    // ib_write_bw: a send CQ, a receive CQ, then the QP's send and receive queues.
    let queues = [q(128), q(128), q(512), q(64)];
    let kinds = classify(&queues, &owned(&[17], Some(2), Some(0)));
    assert_eq!(
        kinds,
        vec![
            Some((Cq, None)),
            Some((Cq, None)),
            Some((Sq, Some(17))),
            Some((Rq, Some(17)))
        ]
    );
    // A receive queue of many gather entries has big slots too: it is still the receive queue.
    let two = [q(128), q(512), q(256), q(1024), q(128)];
    assert_eq!(
        classify(&two, &owned(&[20, 21], None, None)),
        vec![
            Some((Cq, None)),
            Some((Sq, Some(20))),
            Some((Rq, Some(20))),
            Some((Sq, Some(21))),
            Some((Rq, Some(21))),
        ]
    );
    // QPNs that do not match the send queues tie nothing.
    let untied = classify(&two, &owned(&[20], None, None));
    assert!(untied.iter().flatten().all(|(_, qpn)| qpn.is_none()));
    assert_eq!(classify(&[], &owned(&[1], None, None)), vec![]);
}

#[test]
fn what_cannot_be_told_apart_is_not_registered() {
    use RingKind::{Cq, Rq, Sq};
    // A 64-byte queue that follows no send queue (a shared receive queue of one gather entry)
    // is no CQ.
    let srq1 = [q(128), q(64), q(512), q(64)];
    let k = classify(&srq1, &owned(&[5], None, None));
    assert_eq!(k[0], Some((Cq, None)));
    assert_eq!(k[1], None);
    // With shared receive queues the kernel lists: send queues only (a QP on one has no
    // receive queue after its send queue; one of 3-4 gather entries has 128-byte slots).
    let srq = [q(128), q(128), q(512), q(128)];
    assert_eq!(
        classify(&srq, &owned(&[5], Some(2), Some(1))),
        vec![None, None, Some((Sq, Some(5))), None]
    );
    // A shared receive queue of six gather entries looks like a send queue: with more such
    // queues than QPs, nothing of the process is registered.
    let srq6 = [q(128), q(512), q(256)];
    assert_eq!(
        classify(&srq6, &owned(&[5], Some(1), Some(1))),
        vec![None, None, None]
    );
    // More 128-byte queues than the kernel's CQs: none of them is taken for a CQ.
    let k = classify(
        &[q(128), q(128), q(128), q(512), q(64)],
        &owned(&[5], Some(2), Some(0)),
    );
    assert_eq!(
        k,
        vec![None, None, None, Some((Sq, Some(5))), Some((Rq, Some(5)))]
    );
    // Two devices: each its own order; a send queue's receive queue is on its device, and
    // QPNs (numbered per device) are not tied.
    let two_devs = [on(0, 512), on(1, 128), on(1, 512), on(1, 64)];
    assert_eq!(
        classify(&two_devs, &owned(&[3, 4], Some(1), Some(0))),
        vec![
            Some((Sq, None)),
            Some((Cq, None)),
            Some((Sq, None)),
            Some((Rq, None))
        ]
    );
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
    let rings = process_rings(root.path(), 42, &owned(&[17], Some(1), Some(0))).unwrap();
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
    // Each keyed by its device and mmap offset.
    assert_eq!(
        rings.iter().map(|r| r.key).collect::<Vec<_>>(),
        [Some(0), Some(0x2000), Some(0x5000)]
    );
    // A process without uverbs mappings has no rings; one that is gone is an error naming the file.
    fake_proc(root.path(), 43, &[]);
    let none = Owned::default();
    assert!(process_rings(root.path(), 43, &none).unwrap().is_empty());
    let e = process_rings(root.path(), 44, &none)
        .unwrap_err()
        .to_string();
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
        dev: 0,
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
            ..m
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
        dev: 0,
    };
    let path = Path::new("/proc/self/pagemap");
    let got = guest_pages(&File::open(path).unwrap(), path, m);
    // SAFETY: allocated above with this layout, not used after.
    unsafe { std::alloc::dealloc(p, layout) };
    // Frame numbers are shown to CAP_SYS_ADMIN (bit 21 of the effective set), not to uid 0 as
    // such (a container's root may lack it).
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap();
    let root = cap_eff & (1 << 21) != 0;
    match got {
        Ok(pages) => {
            assert!(root, "frames shown to a reader without CAP_SYS_ADMIN");
            assert_eq!(pages.len(), 2);
            assert!(pages.iter().all(|&g| g != 0 && g % PAGE == 0), "{pages:x?}");
        }
        Err(e) => assert!(!root && matches!(e, DiscoverError::NoFrames(_)), "{e}"),
    }
}

mod watching {
    use super::super::fixture::qp_queues;
    use super::*;
    use crate::discover::rdma_nl::{NetlinkError, Resources};
    use crate::discover::watch::{ResourceSource, Watcher};
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    /// The kernel's table as `t` holds it now (a test changes it between scans).
    fn source(t: Arc<Mutex<Resources>>) -> ResourceSource {
        Box::new(move || Ok(t.lock().unwrap().clone()))
    }

    /// `pid` owns `qpns` and `cqs` CQs, and no shared receive queue.
    fn owns(t: &Arc<Mutex<Resources>>, pid: u32, qpns: &[u32], cqs: usize) {
        let mut t = t.lock().unwrap();
        t.qps.insert(pid, qpns.to_vec());
        t.cqs.insert(pid, cqs);
        t.srqs.get_or_insert_with(BTreeMap::new);
    }

    fn table() -> Arc<Mutex<Resources>> {
        Arc::new(Mutex::new(Resources::default()))
    }

    #[test]
    fn queues_are_found_kept_and_dropped_as_processes_come_and_go() {
        let root = tempfile::tempdir().unwrap();
        let t = table();
        // Present at the first scan: its past is unknown.
        fake_proc(root.path(), 10, &qp_queues(0x100_000, 0));
        std::fs::write(root.path().join("10/comm"), "ib_write_bw\n").unwrap();
        owns(&t, 10, &[0x11], 1);
        // A process without RDMA mappings has nothing to register.
        fake_proc(root.path(), 11, &[]);
        let mut w = Watcher::new(root.path(), source(t.clone()));
        let c = w.scan();
        assert_eq!(c.found.len(), 1);
        assert_eq!(
            (c.found[0].pid, c.found[0].comm.as_str(), c.found[0].queues),
            (10, "ib_write_bw", 3)
        );
        assert_eq!(c.found[0].qps, vec![0x11]);
        assert!(w.rings().iter().all(|r| r.start.is_none()));
        // Nothing changed: nothing to say.
        assert!(!w.scan().any());
        // A process created after the first scan: its queues have higher offsets, and are
        // counted from their first entries.
        fake_proc(root.path(), 12, &qp_queues(0x300_000, 0x8000));
        owns(&t, 12, &[0x12], 1);
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
        t.lock().unwrap().qps.remove(&12);
        let c = w.scan();
        assert!(c.found.is_empty());
        assert_eq!((c.gone.len(), c.gone[0].pid, c.gone[0].queues), (1, 12, 3));
        assert_eq!(w.rings().len(), 3);
    }

    #[test]
    fn a_new_qp_counts_from_its_start_a_forked_child_is_not_counted_twice() {
        let root = tempfile::tempdir().unwrap();
        let t = table();
        fake_proc(root.path(), 20, &qp_queues(0x100_000, 0));
        owns(&t, 20, &[0x11, 0x12], 1);
        let mut w = Watcher::new(root.path(), source(t.clone()));
        w.scan();
        // Two QPs in the table, one send queue: nothing is tied (never a wrong tie), and the
        // CQ count does not match either: the CQ is not taken.
        assert!(w.rings().iter().all(|r| r.qpn.is_none()));
        let mut both = qp_queues(0x100_000, 0);
        both.extend(qp_queues(0x200_000, 0x8000));
        fake_proc(root.path(), 20, &both);
        owns(&t, 20, &[0x11, 0x12], 2);
        let c = w.scan();
        assert_eq!(c.found[0].qps, vec![0x11, 0x12]);
        let rings = w.rings();
        assert_eq!(
            rings.iter().map(|r| r.start).collect::<Vec<_>>(),
            [None, None, None, Some(0), Some(0), Some(0)]
        );
        // A forked child maps the same queues: they stay registered once, and it is not a new
        // queue's start.
        fake_proc(root.path(), 21, &both);
        owns(&t, 21, &[], 0);
        w.scan();
        assert_eq!(w.rings(), rings);
    }

    #[test]
    fn only_changed_owners_are_read_and_every_process_at_a_sweep() {
        use crate::discover::watch::SWEEP_EVERY;
        let root = tempfile::tempdir().unwrap();
        let t = table();
        owns(&t, 1, &[], 0);
        let mut w = Watcher::new(root.path(), source(t));
        w.scan();
        // Queues whose owner the kernel does not list (the thread that made them exited): not
        // looked for at every scan, found at the next sweep.
        fake_proc(root.path(), 51, &qp_queues(0x100_000, 0x8000));
        let mut found_at = None;
        for k in 2..=SWEEP_EVERY + 1 {
            if w.scan().any() {
                found_at = Some(k);
                break;
            }
        }
        assert_eq!(found_at, Some(SWEEP_EVERY + 1));
    }

    #[test]
    fn a_thread_s_resources_are_its_process_s() {
        let root = tempfile::tempdir().unwrap();
        let t = table();
        fake_proc(root.path(), 30, &qp_queues(0x100_000, 0));
        // The kernel names thread 31 of process 30 as the QP's owner.
        std::fs::create_dir_all(root.path().join("31")).unwrap();
        std::fs::write(
            root.path().join("31/status"),
            "Name:\tworker\nTgid:\t30\nPid:\t31\n",
        )
        .unwrap();
        owns(&t, 31, &[0x15], 1);
        let mut w = Watcher::new(root.path(), source(t));
        let c = w.scan();
        assert_eq!((c.found[0].pid, c.found[0].qps.clone()), (30, vec![0x15]));
    }

    #[test]
    fn without_rdma_netlink_every_process_is_looked_at_and_nothing_is_tied() {
        let root = tempfile::tempdir().unwrap();
        fake_proc(root.path(), 40, &qp_queues(0x100_000, 0));
        let mut w = Watcher::new(root.path(), Box::new(|| Err(NetlinkError::Unsupported)));
        assert_eq!(w.scan().found.len(), 1);
        assert_eq!(w.rings().len(), 3);
        assert!(w.rings().iter().all(|r| r.qpn.is_none()));
        assert!(!w.scan().any(), "the same queues are not a change");
    }

    #[test]
    fn an_unreadable_process_is_skipped_until_its_mappings_change() {
        let root = tempfile::tempdir().unwrap();
        fake_proc(root.path(), 40, &qp_queues(0x100_000, 0));
        // Its pagemap gives no frames (as to a reader without root).
        let pm = root.path().join("40/pagemap");
        std::fs::write(&pm, vec![0u8; 0x400_000 / 4096 * 8]).unwrap();
        let mut w = Watcher::new(root.path(), Box::new(|| Err(NetlinkError::Unsupported)));
        assert!(!w.scan().any());
        assert!(!w.scan().any());
        assert!(w.rings().is_empty());
        fake_proc(root.path(), 40, &qp_queues(0x100_000, 0x1000));
        assert_eq!(w.scan().found.len(), 1, "changed mappings are read again");
    }
}

mod serving {
    use super::fixture::{accepting_host, qp_queues};
    use super::*;
    use crate::discover::serve::{run, Options};
    use crate::session::{ChannelStatus, UnixChannel};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// The rings' count of the next registration the host accepts; it names no QP and no
    /// mailbox (discovery registers soft-RoCE rings alone here).
    fn next(rx: &mpsc::Receiver<(resex_proto::Registration, std::time::Instant)>) -> usize {
        let (reg, _) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(reg.qps.is_empty() && reg.mailbox.is_none());
        reg.rings.len()
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
                let table = Box::new(|| {
                    let mut t = crate::discover::rdma_nl::Resources::default();
                    t.qps.insert(7, vec![0x11]);
                    t.cqs.insert(7, 1);
                    Ok(t)
                });
                let status = Arc::new(ChannelStatus::default());
                run(Box::new(chan), &opts, table, &stop, status).unwrap()
            })
        };
        let (tx, rx) = mpsc::channel();
        accepting_host(&sock, tx);
        let n = next(&rx);
        assert_eq!(n, 0, "nothing yet");
        fake_proc(root.path(), 7, &qp_queues(0x100_000, 0));
        let n = next(&rx);
        assert_eq!(n, 3);
        std::fs::remove_dir_all(root.path().join("7")).unwrap();
        let n = next(&rx);
        assert_eq!(n, 0, "the exited process's queues are unregistered");
        stop.store(true, Ordering::Release);
        let totals = agent.join().unwrap();
        assert_eq!((totals.found, totals.gone), (1, 1));
        assert!(totals.scans >= 2);
    }
}
