//! `resex ibmon` end to end, through the real binary.

#![allow(clippy::cast_possible_truncation)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn resex(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(args)
        .output()
        .expect("run resex")
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/examples/ibmon")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `resex ibmon scan --ram RAM --rings RINGS EXTRA...`.
fn scan(ram: &Path, rings: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["ibmon", "scan", "--ram", s(ram), "--rings", s(rings)];
    args.extend_from_slice(extra);
    resex(&args)
}

#[test]
fn scanning_the_shipped_example_reports_exactly_its_ground_truth() {
    let ex = example();
    let out = scan(&ex.join("guest.ram"), &ex.join("rings.json"), &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ex.join("truth.json")).unwrap()).unwrap();
    assert_eq!(got, want);
    assert!(got["total"]["wqes"].as_u64().unwrap() > 0);
    // The exact key order of the documented format.
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with(r#"{"qps":[{"qpn":256,"wqes":"#), "{text}");
    assert!(
        text.contains(r#""errors":0,"overruns":0,"anomalies":0}],"total":{"wqes":"#),
        "{text}"
    );
}

#[test]
fn synth_is_deterministic_and_matches_the_shipped_example() {
    let dir = tempfile::tempdir().unwrap();
    let out = resex(&["ibmon", "synth", "--out", s(dir.path())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["guest.ram", "rings.json", "truth.json"] {
        assert!(
            std::fs::read(dir.path().join(f)).unwrap() == std::fs::read(example().join(f)).unwrap(),
            "{f} differs from tools/examples/ibmon/{f}: regenerate with `resex ibmon synth --out tools/examples/ibmon`"
        );
    }
}

#[test]
fn state_file_makes_consecutive_scans_count_each_request_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let ex = example();
    let args = |st: &Path| {
        scan(
            &ex.join("guest.ram"),
            &ex.join("rings.json"),
            &["--state", s(st), "--json"],
        )
    };
    let first: serde_json::Value = serde_json::from_slice(&args(&state).stdout).unwrap();
    let second: serde_json::Value = serde_json::from_slice(&args(&state).stdout).unwrap();
    assert!(first["total"]["wqes"].as_u64().unwrap() > 0);
    assert_eq!(second["total"]["wqes"], 0);
    assert_eq!(second["total"]["completions"], 0);
    // A state that belongs to other rings is refused, with advice.
    std::fs::write(
        &state,
        std::fs::read_to_string(&state)
            .unwrap()
            .replace("\"qpn\": 256", "\"qpn\": 9"),
    )
    .unwrap();
    let out = args(&state);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("delete the state file"));
}

#[test]
fn bad_inputs_fail_with_one_clear_line() {
    let ex = example();
    let out = scan(Path::new("/nonexistent/ram"), &ex.join("rings.json"), &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot map guest RAM file /nonexistent/ram: No such file"),
        "{err}"
    );
    // A registration whose pages lie beyond a small RAM file.
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.ram");
    std::fs::write(&small, vec![0u8; 8192]).unwrap();
    let out = scan(&small, &ex.join("rings.json"), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is outside guest RAM (8192 bytes)"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // Malformed JSON names the problem.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"version":1,"path_mtu":1024,"qps":[],"extra":1}"#).unwrap();
    let out = scan(&small, &bad, &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `extra`"));
}

#[test]
fn watch_reports_the_rate_of_a_live_guest() {
    let dir = tempfile::tempdir().unwrap();
    let d = s(dir.path()).to_string();
    let mut guest = Command::new(env!("CARGO_BIN_EXE_resex"))
        .args([
            "ibmon",
            "synth",
            "--out",
            &d,
            "--ram-kib",
            "4096",
            "--qps",
            "1",
            "--live",
            "4s",
            "--rate",
            "5000",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rings = dir.path().join("rings.json");
    for _ in 0..200 {
        if rings.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let out = resex(&[
        "ibmon",
        "watch",
        "--ram",
        &format!("{d}/guest.ram"),
        "--rings",
        s(&rings),
        "--report",
        "500ms",
        "--count",
        "3",
        "--json",
    ]);
    let _ = guest.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let last = &lines[2]["qps"][0];
    assert!(last["wqes_per_s"].as_f64().unwrap() > 0.0, "{last}");
    assert!(last["mtus_per_s"].as_f64().unwrap() > 0.0, "{last}");
    assert_eq!(last["anomalies"], 0, "{last}");
}

/// A soft-RoCE guest's RAM: a send queue of QP 5 at 0x1000 (8 slots of 512 bytes) and a CQ at
/// 0x4000 (8 of 64), written with ibmon's UAPI layouts (`tests/rxe_c_reference.rs` checks them
/// against the kernel's header); `sends` are (opcode, length), `wcs` (opcode, byte_len, qpn).
fn rxe_ram(sends: &[(u32, u32)], wcs: &[(u32, u32, u32)]) -> Vec<u8> {
    use resex_ibmon::rxe::layout::{queue, send_wqe, wc};
    let mut ram = vec![0u8; 0x8000];
    let mut put = |at: usize, v: u32| ram[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    for (base, log2, n) in [(0x1000, 9, sends.len()), (0x4000, 6, wcs.len())] {
        put(base + queue::LOG2_ELEM_SIZE, log2);
        put(base + queue::INDEX_MASK, 7);
        put(base + queue::PRODUCER, n as u32);
    }
    for (i, &(op, len)) in sends.iter().enumerate() {
        let at = 0x1000 + queue::DATA + (i << 9);
        put(at + send_wqe::OPCODE, op);
        put(at + send_wqe::DMA_LENGTH, len);
        put(at + send_wqe::SSN, i as u32);
    }
    for (i, &(op, len, qpn)) in wcs.iter().enumerate() {
        let at = 0x4000 + queue::DATA + (i << 6);
        put(at + wc::OPCODE, op);
        put(at + wc::BYTE_LEN, len);
        put(at + wc::QP_NUM, qpn);
    }
    ram
}

const RXE_RINGS: &str = r#"{ "version": 1, "path_mtu": 1024, "qps": [], "rings": [
  { "format": "rxe", "kind": "sq", "qpn": 5, "pages": [4096, 8192], "slots": 8, "elem_size": 512, "start": 0 },
  { "format": "rxe", "kind": "cq", "pages": [16384], "slots": 8, "elem_size": 64, "start": 0 } ] }"#;

#[test]
fn scan_counts_soft_roce_rings_exactly_and_the_state_file_keeps_their_cursors() {
    use resex_ibmon::rxe::{wc_op, wr_op};
    let dir = tempfile::tempdir().unwrap();
    let (ram, rings, state) = (
        dir.path().join("ram"),
        dir.path().join("rings.json"),
        dir.path().join("state.json"),
    );
    std::fs::write(&rings, RXE_RINGS).unwrap();
    let sends = [
        (wr_op::RDMA_WRITE, 4096),
        (wr_op::SEND, 100),
        (wr_op::RDMA_READ, 2048),
    ];
    let wcs = [(wc_op::RECV, 100, 5), (0, 0, 5), (0, 0, 9)];
    std::fs::write(&ram, rxe_ram(&sends, &wcs)).unwrap();
    let json = |out: Output| -> serde_json::Value {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let got = json(scan(&ram, &rings, &["--json", "--state", s(&state)]));
    let qp5 = &got["qps"][0];
    assert_eq!(
        (qp5["qpn"].as_u64(), qp5["format"].as_str()),
        (Some(5), Some("rxe"))
    );
    // WRITE 4096 (4 packets), SEND 100 (1), READ 2048 (1 request out, 2 packets back).
    assert_eq!(qp5["wqes"], 3);
    assert_eq!(
        (qp5["tx_bytes"].as_u64(), qp5["tx_packets"].as_u64()),
        (Some(4196), Some(6))
    );
    assert_eq!(
        (&qp5["rx_read_bytes"], &qp5["rx_read_packets"], &qp5["mtus"]),
        (&2048.into(), &2.into(), &8.into())
    );
    assert_eq!(
        (qp5["completions"].as_u64(), qp5["recv_bytes"].as_u64()),
        (Some(2), Some(100))
    );
    // QP 9 is not registered: its completion counts for no QP.
    let none = &got["qps"][1];
    assert!(none["qpn"].is_null());
    assert_eq!(none["completions"], 1);
    assert_eq!(got["total"]["anomalies"], 0);
    // One more WRITE: the next scan with the state counts it alone.
    let more = [sends[0], sends[1], sends[2], (wr_op::RDMA_WRITE, 1)];
    std::fs::write(&ram, rxe_ram(&more, &wcs)).unwrap();
    let got = json(scan(&ram, &rings, &["--json", "--state", s(&state)]));
    assert_eq!(
        (
            got["total"]["wqes"].as_u64(),
            got["total"]["tx_bytes"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(got["total"]["completions"], 0);
    // The table names the format.
    let out = scan(&ram, &rings, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("0x5 rxe") && text.contains("- rxe"), "{text}");
}
