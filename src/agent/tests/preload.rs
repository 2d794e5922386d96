//! The agent's end of the mlx5 interposer on a real Unix socket: a report becomes a QP
//! registration in guest-physical pages (from a pagemap of our making under a fake /proc, for
//! the reporting process the socket names), a destroyed QP and a closed connection unregister,
//! and hostile reports are refused without harm.

use resex_agent::preload::{peer_pid, Server};
use resex_proto::preload::{CompletionQueue, PreloadMsg, WorkQueue};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PAGE: u64 = 4096;

/// `/proc/PID/pagemap` under `root` giving page `p` of the address space frame `p + 7`, for the
/// pages from `first` on (`n` of them).
fn pagemap(root: &Path, pid: u32, first: u64, n: u64) {
    let dir = root.join(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let f = std::fs::File::create(dir.join("pagemap")).unwrap();
    for p in first..first + n {
        let entry = (1u64 << 63) | (p + 7);
        f.write_all_at(&entry.to_le_bytes(), p * 8).unwrap();
    }
}

fn created(qpn: u32, base: u64) -> PreloadMsg {
    PreloadMsg::Created {
        qpn,
        // 128 basic blocks of 64 bytes from 0x800 into a page: three pages.
        sq: WorkQueue {
            buf: base + 0x800,
            wqe_cnt: 128,
            stride: 64,
        },
        dbrec: base + 0x8010,
        send_cq: CompletionQueue {
            buf: base + 0x4000,
            cqe_cnt: 64,
            cqe_size: 64,
            dbrec: base + 0x8040,
        },
        recv_cq: None,
    }
}

fn send(s: &mut UnixStream, m: &PreloadMsg) {
    let mut line = serde_json::to_string(m).unwrap();
    line.push('\n');
    s.write_all(line.as_bytes()).unwrap();
}

/// Waits (at most 5 s) until `f` holds.
fn until(f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(5), "timed out");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_reported_qp_is_registered_in_guest_pages_and_unregistered_when_it_or_its_process_goes() {
    let root = tempfile::tempdir().unwrap();
    let base = 0x7f00_0000_0000u64;
    pagemap(root.path(), std::process::id(), base / PAGE, 16);
    let sock = root.path().join("run/preload.sock");
    let changes = Arc::new(AtomicU32::new(0));
    let c = changes.clone();
    let server = Server::start(
        &sock,
        root.path().to_path_buf(),
        Arc::new(move || {
            c.fetch_add(1, Ordering::AcqRel);
        }),
    )
    .unwrap();
    let mut s = UnixStream::connect(&sock).unwrap();
    assert_eq!(peer_pid(&s).unwrap(), std::process::id());
    send(&mut s, &created(0x11, base));
    until(|| server.qps().len() == 1);
    let q = &server.qps()[0];
    let frame = |va: u64| (va / PAGE + 7) * PAGE;
    assert_eq!(q.qpn, 0x11);
    assert_eq!(
        q.sq.pages,
        vec![frame(base), frame(base + PAGE), frame(base + 2 * PAGE)]
    );
    assert_eq!((q.sq.offset, q.sq.wqe_cnt, q.sq.start), (0x800, 128, 0));
    assert_eq!(q.sq.dbrec, frame(base + 0x8000) + 0x10);
    assert_eq!(q.send_cq.pages, vec![frame(base + 0x4000)]);
    assert_eq!(q.send_cq.dbrec, frame(base + 0x8000) + 0x40);
    assert!(q.recv_cq.is_none());
    // Hostile lines: garbage, and an address with no page: neither registers, neither ends the
    // connection.
    s.write_all(b"{not json\n").unwrap();
    send(&mut s, &created(0x12, 0x1000_0000));
    send(&mut s, &created(0x13, base));
    until(|| server.qps().len() == 2);
    assert_eq!(
        server.qps().iter().map(|q| q.qpn).collect::<Vec<_>>(),
        [0x11, 0x13]
    );
    send(&mut s, &PreloadMsg::Destroyed { qpn: 0x11 });
    until(|| server.qps().len() == 1);
    // The process exits: its connection closes and its last QP goes.
    drop(s);
    until(|| server.qps().is_empty());
    // Two created, one destroyed, one exit (each change is told after the map's lock).
    until(|| changes.load(Ordering::Acquire) == 4);
}

#[test]
fn a_line_longer_than_allowed_ends_that_connection_only() {
    let root = tempfile::tempdir().unwrap();
    let base = 0x7f00_0000_0000u64;
    pagemap(root.path(), std::process::id(), base / PAGE, 16);
    let sock = root.path().join("preload.sock");
    let server = Server::start(&sock, root.path().to_path_buf(), Arc::new(|| {})).unwrap();
    let mut good = UnixStream::connect(&sock).unwrap();
    send(&mut good, &created(0x21, base));
    until(|| server.qps().len() == 1);
    let mut bad = UnixStream::connect(&sock).unwrap();
    let _ = bad.write_all(&vec![b'x'; resex_proto::preload::MAX_LINE * 4]);
    // Sent after the long line: never read (the write may fail once the agent closed it).
    let mut late = serde_json::to_string(&created(0x31, base)).unwrap();
    late.push('\n');
    let _ = bad.write_all(late.as_bytes());
    // The long line closed the bad connection: it reads the end of the stream (what it sent
    // after is never read); the good one's QP stays and it still serves.
    assert!(closed(&mut bad), "the agent closed it");
    send(&mut good, &created(0x22, base));
    until(|| server.qps().len() == 2);
    assert_eq!(
        server.qps().iter().map(|q| q.qpn).collect::<Vec<_>>(),
        [0x21, 0x22]
    );
}

#[test]
fn hostile_reports_cannot_panic_the_agent_or_hold_its_slots() {
    let root = tempfile::tempdir().unwrap();
    let base = 0x7f00_0000_0000u64;
    pagemap(root.path(), std::process::id(), base / PAGE, 16);
    let sock = root.path().join("preload.sock");
    let server = Server::start(&sock, root.path().to_path_buf(), Arc::new(|| {})).unwrap();
    let mut s = UnixStream::connect(&sock).unwrap();
    // Addresses at the top of the address space (a range that wraps), a count that is not a
    // power of two, a CQE size mlx5 has not: none registers, the connection survives.
    let mut wraps = created(0x41, base);
    if let PreloadMsg::Created { dbrec, send_cq, .. } = &mut wraps {
        *dbrec = u64::MAX - 7;
        send_cq.dbrec = u64::MAX;
    }
    send(&mut s, &wraps);
    let mut odd = created(0x42, base);
    if let PreloadMsg::Created { sq, send_cq, .. } = &mut odd {
        sq.wqe_cnt = 100;
        send_cq.cqe_size = 96;
    }
    send(&mut s, &odd);
    send(&mut s, &created(0x43, base));
    until(|| server.qps().len() == 1);
    assert_eq!(server.qps()[0].qpn, 0x43);
    // A process may hold a few connections, not every slot: with `s` open, the next three are
    // served (accepted in order), the five after them closed at once.
    let mut extra: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    for c in &mut extra[3..] {
        assert!(
            closed(c),
            "a connection over the process's share is refused"
        );
    }
    send(&mut extra[2], &created(0x44, base));
    until(|| server.qps().len() == 2);
}

/// Whether the agent closed `c` (the end of its stream, or a reset when data was left unread).
fn closed(c: &mut UnixStream) -> bool {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    match c.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}
