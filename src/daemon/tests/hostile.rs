//! Hostile guests against the real daemon: registrations with pages outside RAM, a million
//! pages, overlapping rings, malformed JSON, and a mailbox full of garbage and absurd values.
//! Each is refused and counted, and the daemon keeps serving a well-behaved neighbour.
#![allow(clippy::cast_possible_truncation)]

use resex_api::VmSnap;
use resex_backend::cap::CapHandle;
use resex_backend::cpu::CpuSource;
use resex_backend::local::{publish, DomainRecord, LocalBackend};
use resex_common::LatencySummary;
use resex_guestmem::{FileMemory, GuestAddress, GuestMemory};
use resex_proto::channel::{read_msg, GuestMsg, HostMsg, MAX_LINE};
use resex_proto::mailbox::{Report, DATA, REPORT_BYTES};
use resex_proto::{
    CqRegistration, MailboxRegistration, QpRegistration, Registration, SqRegistration,
};
use resex_shim::mailbox::Mailbox;
use std::io::{BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RAM: u64 = 4 << 20;

fn doc(qps: Vec<QpRegistration>) -> Registration {
    Registration {
        rings: Vec::new(),
        version: 1,
        vm: None,
        path_mtu: 1024,
        qps,
        mailbox: Some(MailboxRegistration {
            pages: vec![0x10000],
            offset: 0,
            blocks: 32,
            block_size: 128,
        }),
    }
}

fn qp(sq_page: u64, cq_page: u64) -> QpRegistration {
    QpRegistration {
        qpn: 7,
        sq: SqRegistration {
            pages: vec![sq_page],
            offset: 0,
            wqe_cnt: 64,
            dbrec: 0x30000,
            start: 0,
        },
        send_cq: CqRegistration {
            pages: vec![cq_page],
            offset: 0,
            cqe_cnt: 64,
            cqe_size: 64,
            dbrec: 0x30040,
            start: 0,
        },
        recv_cq: None,
    }
}

/// A fake guest: a RAM file, a live process to stand for it, and an agent socket that plays
/// `script` (raw lines) after the host's hello, sending each reply back.
struct Guest {
    mem: Arc<FileMemory>,
    proc_: Child,
    replies: mpsc::Receiver<String>,
}

fn guest(dir: &Path, name: &str, id: u32, script: Vec<Vec<u8>>) -> Guest {
    let ram = dir.join(format!("{name}.ram"));
    let mem = Arc::new(FileMemory::create(&ram, RAM).unwrap());
    let proc_ = Command::new("sleep").arg("60").spawn().unwrap();
    let sock = dir.join(format!("{name}.sock"));
    let l = UnixListener::bind(&sock).unwrap();
    let (tx, replies) = mpsc::channel();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        let hello: HostMsg = read_msg(&mut r, MAX_LINE).unwrap().unwrap();
        assert!(matches!(hello, HostMsg::Hello { .. }));
        for line in script {
            w.write_all(&line).unwrap();
            w.write_all(b"\n").unwrap();
            let reply: HostMsg = read_msg(&mut r, MAX_LINE).unwrap().unwrap();
            tx.send(serde_json::to_string(&reply).unwrap()).unwrap();
        }
        // Stay connected.
        std::thread::sleep(Duration::from_secs(60));
    });
    publish(
        &dir.join("run"),
        &DomainRecord {
            entitled_bps: None,
            cpu_floor_pct: None,
            id,
            name: name.into(),
            host: "hostile-test".into(),
            vcpus: 1,
            ram_file: ram,
            ram_size: RAM,
            pid: proc_.id(),
            cpu: CpuSource::Proc(proc_.id()),
            cap: CapHandle::Sigstop(proc_.id()),
            channel: sock,
            sla_threshold: None,
            weight: 1.0,
            vf: None,
        },
    )
    .unwrap();
    Guest {
        mem,
        proc_,
        replies,
    }
}

fn register(d: Registration) -> Vec<u8> {
    serde_json::to_vec(&GuestMsg::Register { registration: d }).unwrap()
}

/// The real daemon over the guests published in `dir/run`, no policy.
fn daemon(dir: &Path) -> resex_daemon::DaemonHandle {
    let cfg = resex_daemon::config::Config {
        run_dir: Some(dir.join("run")),
        state_dir: Some(dir.join("state")),
        api_socket: Some(dir.join("api.sock")),
        ..Default::default()
    };
    resex_daemon::start(
        resex_daemon::Settings {
            cfg,
            policy: None,
            limits: Default::default(),
        },
        Arc::new(LocalBackend::new(&dir.join("run"))),
    )
    .unwrap()
}

fn snap(d: &resex_daemon::DaemonHandle, name: &str) -> Option<VmSnap> {
    d.snapshot().vms.iter().find(|v| v.name == name).cloned()
}

#[test]
fn hostile_registrations_and_mailboxes_are_refused_and_counted_and_neighbours_served() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    let mut million = doc(vec![qp(0x20000, 0x21000)]);
    million.qps[0].sq.pages = vec![0; 1_000_000];
    let script = vec![
        register(doc(vec![qp(RAM, 0x21000)])),     // a page outside RAM
        register(million),                         // a million pages
        register(doc(vec![qp(0x20000, 0x20000)])), // SQ and CQ on one page
        b"{\"type\":\"register\",\"registration\":{\"version\":1".to_vec(), // malformed
        register(doc(vec![qp(0x20000, 0x21000)])), // finally a good one
    ];
    let mut evil = guest(dir.path(), "evil", 1, script);
    let mut good = guest(dir.path(), "good", 2, vec![register(doc(vec![]))]);

    let d = daemon(dir.path());

    let replies: Vec<String> = (0..5)
        .map(|_| evil.replies.recv_timeout(Duration::from_secs(20)).unwrap())
        .collect();
    assert!(replies[0].contains("outside guest RAM"), "{}", replies[0]);
    assert!(replies[1].contains("exceeds the limit"), "{}", replies[1]);
    assert!(replies[2].contains("overlaps"), "{}", replies[2]);
    assert!(replies[3].contains("malformed"), "{}", replies[3]);
    assert!(replies[4].contains("accepted"), "{}", replies[4]);
    assert!(good
        .replies
        .recv_timeout(Duration::from_secs(20))
        .unwrap()
        .contains("accepted"));

    // The good guest reports; the evil one fills its mailbox with garbage and absurd values.
    let mut mb = Mailbox::new(good.mem.clone() as Arc<dyn GuestMemory>, 0x10000, 32, 128).unwrap();
    let s = LatencySummary {
        count: 10,
        mean_ns: 100_000.0,
        stddev_ns: 1_000.0,
        min_ns: 90_000,
        max_ns: 120_000,
        p50_ns: 99_000,
        p99_ns: 119_000,
        p999_ns: 120_000,
    };
    let absurd = Report {
        count: 0,
        ..Report::default()
    }
    .encode();
    let mut inverted = Report {
        seq: 1,
        interval_ns: 1,
        count: 5,
        mean_ns: 10,
        stddev_ns: 0,
        min_ns: 10,
        max_ns: 10,
        p50_ns: 10,
        p99_ns: 10,
        p999_ns: 10,
    };
    inverted.max_ns = u64::MAX;
    let garbage = [DATA; REPORT_BYTES];
    let start = Instant::now();
    let mut round = 0u64;
    while start.elapsed() < Duration::from_secs(2) {
        mb.report(&s, 10_000_000).unwrap();
        for (k, bytes) in [absurd, inverted.encode(), garbage].iter().enumerate() {
            let at = 0x10000 + ((round * 3 + k as u64) % 32) * 128;
            evil.mem.write(GuestAddress(at + 1), &bytes[1..]).unwrap();
            evil.mem.write_u8(GuestAddress(at), DATA).unwrap();
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let e = snap(&d, "evil").unwrap();
    let g = snap(&d, "good").unwrap();
    assert_eq!(e.rejected_registrations, 4, "{e:#?}");
    assert_eq!(e.state, "registered");
    assert!(
        e.bad_reports >= 3 * round - 3,
        "{} of {} bad blocks counted",
        e.bad_reports,
        3 * round
    );
    assert_eq!(e.reports, 0);
    assert_eq!(g.state, "registered");
    assert_eq!(g.rejected_registrations, 0);
    assert!(
        g.reports >= round - 2,
        "the neighbour's {} reports: {g:#?}",
        round
    );
    assert!((g.lat_mean_us.unwrap() - 100.0).abs() < 1.0);
    let summary = d.stop();
    assert!(summary.ticks > 1000, "the loop kept ticking: {summary:?}");
    for p in [&mut evil.proc_, &mut good.proc_] {
        p.kill().unwrap();
        p.wait().unwrap();
    }
}

/// A QP whose send CQ had delivered 200 completions (three laps of its 64 entries) before the
/// agent registered it: counted from then on only, and the daemon says so (the snapshot's
/// `late_qps`, as `resex status`, top and /metrics show it).
#[test]
fn a_qp_registered_after_its_rings_lapped_is_named_late() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("run")).unwrap();
    let q = qp(0x20000, 0x21000);
    let mut late = guest(dir.path(), "late", 1, vec![register(doc(vec![q.clone()]))]);
    let mut fresh = guest(dir.path(), "fresh", 2, vec![register(doc(vec![q.clone()]))]);
    // The CQ's doorbell record: its consumer index, big-endian, 200 past the start it gives.
    late.mem
        .write(GuestAddress(q.send_cq.dbrec), &200u32.to_be_bytes())
        .unwrap();
    let d = daemon(dir.path());
    for g in [&late, &fresh] {
        let r = g.replies.recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(r.contains("accepted"), "{r}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let (l, f) = loop {
        if let (Some(l), Some(f)) = (snap(&d, "late"), snap(&d, "fresh")) {
            if !l.late_qps.is_empty() && l.qps == 1 && f.qps == 1 {
                break (l, f);
            }
        }
        assert!(Instant::now() < deadline, "never named late");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        l.late_qps,
        vec![resex_api::LateQp {
            qpn: 7,
            missed_completions: Some(200),
        }]
    );
    assert!(
        f.late_qps.is_empty(),
        "a fresh QP is counted from its start"
    );
    let text = resex_daemon::metrics::encode(&d.snapshot(), &Default::default());
    assert!(
        text.contains("resex_qp_attached_late{vm=\"late\",qpn=\"0x7\"} 1"),
        "{text}"
    );
    assert!(!text.contains("resex_qp_attached_late{vm=\"fresh\""));
    d.stop();
    for p in [&mut late.proc_, &mut fresh.proc_] {
        p.kill().unwrap();
        p.wait().unwrap();
    }
}
