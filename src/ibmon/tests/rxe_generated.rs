//! The soft-RoCE monitor against a guest written with the kernel's own structs.
//!
//! `tests/c/rxe_gen.c`, compiled by gcc against `rdma/rdma_user_rxe.h` and
//! `rdma/ib_user_verbs.h`, posts send WQEs and writes completions into queues in a RAM file as
//! rdma-core's provider and the kernel do; a proptest drives it with random work between scans
//! of random budgets, and the monitor's counts must equal a model of the work, exactly, per QP.
//! Needs gcc and linux-libc-dev; without them the tests say how to enable them and pass, and
//! with `RESEX_REQUIRE_SYSTEM_DEPS=1` (CI) their absence fails.

use proptest::prelude::*;
use resex_guestmem::{FileMemory, GuestMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::rxe::{wc_op, wr_op, RxeMonitor};
use resex_ibmon::Counters;
use resex_proto::{Registration, RingFormat, RingKind, RingRegistration};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

const HEADER: &str = "/usr/include/rdma/rdma_user_rxe.h";
const RAM: usize = 1 << 20;

/// The generator, built once per test binary (`None`: not buildable here, and not required).
fn generator() -> Option<&'static Path> {
    static EXE: OnceLock<Option<PathBuf>> = OnceLock::new();
    EXE.get_or_init(|| {
        let required = std::env::var("RESEX_REQUIRE_SYSTEM_DEPS").is_ok_and(|v| v == "1");
        if !Path::new(HEADER).exists() {
            assert!(
                !required,
                "{HEADER} is missing: apt-get install linux-libc-dev"
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED rxe_generated: {HEADER} not found. Enable with `apt-get install \
                 linux-libc-dev` (CI sets RESEX_REQUIRE_SYSTEM_DEPS=1 and requires it)."
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap().keep();
        let exe = dir.join("rxe_gen");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/rxe_gen.c");
        let cc = Command::new("gcc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("gcc must be installed to build the rxe generator");
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        Some(exe)
    })
    .as_deref()
}

/// A guest: the generator process and its RAM file.
struct Guest {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    mem: FileMemory,
    _dir: tempfile::TempDir,
}

impl Guest {
    fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
    }

    fn sync(&mut self) {
        self.say("sync");
        self.stdin.flush().unwrap();
        let mut ok = String::new();
        self.stdout.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim(), "ok", "the generator failed");
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates the RAM file first so that it can be opened before the generator runs.
fn guest(exe: &Path) -> Guest {
    let dir = tempfile::tempdir().unwrap();
    let ram = dir.path().join("ram");
    std::fs::write(&ram, vec![0u8; RAM]).unwrap();
    let mut child = Command::new(exe)
        .arg(&ram)
        .arg(RAM.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut g = Guest {
        child,
        stdin,
        stdout,
        mem: FileMemory::open_read_only(&ram).unwrap(),
        _dir: dir,
    };
    g.sync();
    g
}

/// The queues of the test guest: (kind, qpn, address, slots, log2 of the slot size).
const QUEUES: [(RingKind, Option<u32>, u64, u32, u32); 4] = [
    (RingKind::Sq, Some(17), 0x1000, 16, 8),
    (RingKind::Cq, None, 0x4000, 16, 6),
    (RingKind::Sq, Some(18), 0x6000, 8, 9),
    (RingKind::Rq, Some(17), 0x9000, 8, 6),
];

fn registration(mtu: u32) -> Registration {
    let rings = QUEUES
        .iter()
        .map(|&(kind, qpn, addr, slots, log2)| {
            let bytes = 384 + (u64::from(slots) << log2);
            RingRegistration {
                format: RingFormat::Rxe,
                kind,
                qpn,
                pages: (0..bytes.div_ceil(4096)).map(|p| addr + p * 4096).collect(),
                offset: 0,
                slots,
                elem_size: 1 << log2,
                start: Some(0),
                key: None,
            }
        })
        .collect();
    Registration {
        version: 1,
        vm: None,
        path_mtu: mtu,
        qps: vec![],
        mailbox: None,
        rings,
    }
}

fn monitor(g: &mut Guest, mtu: u32) -> RxeMonitor {
    for &(_, _, addr, slots, log2) in &QUEUES {
        g.say(&format!("queue {addr} {slots} {log2}"));
    }
    g.sync();
    let layout = validate(&registration(mtu), g.mem.size(), &Limits::default()).unwrap();
    RxeMonitor::new(layout.rxe, mtu)
}

/// One piece of work the guest does.
#[derive(Clone, Copy, Debug)]
enum Work {
    /// A send WQE on send queue 0 or 2: opcode, length.
    Send(usize, u32, u32),
    /// A completion: status, opcode, byte_len, QPN (17, 18 or 99, not registered).
    Wc(u32, u32, u32, u32),
}

fn work() -> impl Strategy<Value = Work> {
    let op = prop::sample::select(vec![
        wr_op::RDMA_WRITE,
        wr_op::RDMA_WRITE_WITH_IMM,
        wr_op::SEND,
        wr_op::SEND_WITH_IMM,
        wr_op::RDMA_READ,
        wr_op::ATOMIC_FETCH_AND_ADD,
        wr_op::LOCAL_INV,
    ]);
    let wop = prop::sample::select(vec![0, 1, 2, wc_op::RECV, wc_op::RECV_RDMA_WITH_IMM]);
    prop_oneof![
        (
            prop::sample::select(vec![0usize, 2]),
            op,
            prop_oneof![Just(0u32), 0u32..20_000]
        )
            .prop_map(|(q, o, l)| Work::Send(q, o, l)),
        (
            prop::sample::select(vec![0u32, 0, 0, 5]),
            wop,
            0u32..70_000,
            prop::sample::select(vec![17u32, 18, 99])
        )
            .prop_map(|(s, o, b, q)| Work::Wc(s, o, b, q)),
    ]
}

/// What the model expects a piece of work to count, and for which QP (`None`: no QP).
fn expect(w: Work, mtu: u64) -> (Option<u32>, Counters) {
    let pk = |l: u64| l.div_ceil(mtu).max(1);
    let mut c = Counters::default();
    match w {
        Work::Send(q, op, len) => {
            let len = u64::from(len);
            c.wqes = 1;
            match op {
                wr_op::RDMA_READ => {
                    (c.tx_packets, c.rx_read_bytes, c.rx_read_packets) = (1, len, pk(len));
                }
                wr_op::ATOMIC_FETCH_AND_ADD => (c.tx_packets, c.rx_read_packets) = (1, 1),
                wr_op::LOCAL_INV => {}
                _ => (c.tx_bytes, c.tx_packets) = (len, pk(len)),
            }
            c.mtus = c.tx_packets + c.rx_read_packets;
            (Some(if q == 0 { 17 } else { 18 }), c)
        }
        Work::Wc(status, op, bytes, qpn) => {
            c.completions = 1;
            c.errors = u64::from(status != 0);
            if status == 0 && (op == wc_op::RECV || op == wc_op::RECV_RDMA_WITH_IMM) {
                c.recv_bytes = u64::from(bytes);
            }
            ((qpn != 99).then_some(qpn), c)
        }
    }
}

/// The model's per-queue bookkeeping: posted, consumed and read by the monitor.
#[derive(Default, Clone, Copy)]
struct Fill {
    posted: u64,
    consumed: u64,
}

/// Applies a batch to the guest, as much of it as fits in the queues without lapping the
/// monitor (which has read `read[q]` entries of queue `q`); returns what was applied.
fn apply(g: &mut Guest, batch: &[Work], fill: &mut [Fill; 4], read: &[u64; 4]) -> Vec<Work> {
    let mut done = Vec::new();
    for &w in batch {
        let q = match w {
            Work::Send(q, ..) => q,
            Work::Wc(..) => 1,
        };
        let slots = u64::from(QUEUES[q].3);
        let f = &mut fill[q];
        // A queue keeps one slot empty; the monitor must not be lapped either.
        if f.posted - f.consumed >= slots - 1 || f.posted - read[q] >= slots - 1 {
            g.say(&format!("consume {q} {}", f.posted - f.consumed));
            f.consumed = f.posted;
            if f.posted - read[q] >= slots - 1 {
                continue;
            }
        }
        match w {
            Work::Send(q, op, len) => g.say(&format!("send {q} {op} {len}")),
            Work::Wc(s, op, b, qpn) => g.say(&format!("wc 1 {s} {op} {b} {qpn}")),
        }
        f.posted += 1;
        done.push(w);
    }
    g.sync();
    done
}

fn by_qpn(mon: &RxeMonitor, qpn: Option<u32>) -> Counters {
    mon.counters()
        .into_iter()
        .find(|c| c.qpn == qpn)
        .map(|c| c.counts)
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// Random work between scans of random budgets is counted exactly, per QP.
    #[test]
    fn counts_equal_the_work_posted(
        mtu in prop::sample::select(vec![256u32, 1024, 4096]),
        batches in prop::collection::vec(
            (prop::collection::vec(work(), 0..30), 1u32..40), 1..12),
    ) {
        let Some(exe) = generator() else { return Ok(()) };
        let mut g = guest(exe);
        let mut mon = monitor(&mut g, mtu);
        let mut fill = [Fill::default(); 4];
        let mut want: Vec<(Option<u32>, Counters)> = Vec::new();
        for (batch, budget) in batches {
            let read = [
                by_qpn(&mon, Some(17)).wqes,
                mon.total().completions,
                by_qpn(&mon, Some(18)).wqes,
                0,
            ];
            for w in apply(&mut g, &batch, &mut fill, &read) {
                want.push(expect(w, u64::from(mtu)));
            }
            mon.scan_delta(&g.mem, budget);
        }
        while !mon.scan_delta(&g.mem, 7).is_zero() {}
        for qpn in [Some(17), Some(18), None] {
            let mut w = Counters::default();
            for (q, c) in &want {
                if *q == qpn {
                    w += *c;
                }
            }
            prop_assert_eq!(by_qpn(&mon, qpn), w, "qp {:?}", qpn);
        }
        prop_assert_eq!(mon.total().anomalies, 0);
    }
}

#[test]
fn a_lap_between_scans_is_an_overrun_and_a_bad_header_stops_its_ring() {
    let Some(exe) = generator() else { return };
    let mut g = guest(exe);
    let mut mon = monitor(&mut g, 1024);
    g.say("send 2 0 4096");
    g.sync();
    assert_eq!(mon.scan_delta(&g.mem, 100).tx_packets, 4);
    // Queue 2 has 8 slots: 8 + 1 more requests between two scans look like one.
    g.say("consume 2 1");
    g.say("skip 2 8");
    g.say("send 2 2 100");
    g.sync();
    let d = mon.scan_delta(&g.mem, 100);
    assert_eq!((d.wqes, d.overruns, d.anomalies), (1, 1, 0));
    // A header rewritten to another geometry: one anomaly, then nothing until it is restored.
    g.say("queue 24576 4 9");
    g.say("send 2 2 100");
    g.sync();
    let d = mon.scan_delta(&g.mem, 100);
    assert_eq!((d.wqes, d.anomalies), (0, 1));
    assert_eq!(mon.scan_delta(&g.mem, 100).anomalies, 0);
}
