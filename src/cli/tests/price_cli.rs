//! `resex price` end to end: the shipped trace and policies, JSON lines, and refused input.

mod common;

use common::{resex, stdout};

const TRACE: &str = "tools/examples/pricing/trace.csv";

/// vm2m arrives at interval 300 with 70% of an epoch left: allotment 0.7 x (100 000 + 524 288) =
/// 437 001.6; at 700 Resos per interval it is under 10% after 562 intervals (interval 861), so
/// FreeMarket cuts at 870, 880 and 890 (at 900 only 9.9% of the epoch is left), and it leaves
/// after 899.
#[test]
fn freemarket_replay_of_the_shipped_trace() {
    let out = stdout(&resex(&[
        "price",
        "replay",
        "--policy",
        "policies/freemarket.toml",
        "--trace",
        TRACE,
    ]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "interval,vm,allotment,balance,charge_cpu,charge_io,rate,cap,intf_pct,interferer,reason"
    );
    // 1 200 intervals of vm64k plus 600 of vm2m.
    assert_eq!(lines.len(), 1 + 1800);
    assert!(lines.contains(&"300,vm2m,437001.600,436301.600,100.000,600.000,1.0000,100.000,,,"));
    let cuts: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains("cap cut"))
        .copied()
        .collect();
    assert_eq!(cuts.len(), 3, "{cuts:?}");
    assert!(cuts[0].starts_with("870,vm2m,437001.600,37301.600,100.000,600.000,1.0000,90.000,"));
    assert!(cuts[1].starts_with("880,vm2m,") && cuts[1].contains(",81.000,"));
    assert!(cuts[2].starts_with("890,vm2m,") && cuts[2].contains(",72.900,"));
    // Interval 1000: new epoch, vm64k alone gets the whole link.
    assert!(lines
        .iter()
        .any(|l| l.starts_with("1000,vm64k,1148576.000,1148492.000,")));
}

#[test]
fn ioshares_replay_as_json_lines_charges_the_interferer() {
    // The paper's rule (mode = paper): the interferer's share of the MTUs sent. A report counts
    // only as far as the host's own evidence bears it out: the trace has no NIC times, so the
    // link must have been congested. The shipped trace fills 67% of the policy's 1 GiB/s link
    // (a quiet link: its +50% report is discounted to +5%, and nobody is charged); on a
    // 750 MB/s link the same traffic fills 96% of it.
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("ioshares-paper.toml");
    let text = std::fs::read_to_string(common::root().join("policies/ioshares-paper.toml"))
        .unwrap()
        .replace(
            "link_bytes_per_sec = 1073741824",
            "link_bytes_per_sec = 750000000",
        );
    assert!(
        text.contains("750000000"),
        "the shipped file names its link"
    );
    std::fs::write(&policy, text).unwrap();
    let quiet = stdout(&resex(&[
        "price",
        "replay",
        "--policy",
        "policies/ioshares-paper.toml",
        "--trace",
        TRACE,
        "--json",
        "--changes-only",
    ]));
    assert!(
        quiet.lines().all(|l| !l.contains("\"interval\":310")),
        "a report the quiet link contradicts charges nobody: {quiet}"
    );
    let all = stdout(&resex(&[
        "price",
        "replay",
        "--policy",
        policy.to_str().unwrap(),
        "--trace",
        TRACE,
        "--json",
    ]));
    let rows: Vec<serde_json::Value> = all
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = |i: u64| {
        rows.iter()
            .find(|r| r["interval"] == i && r["vm"] == "vm2m")
            .unwrap()
    };
    // vm64k's baseline: its first 10 reports (10 us); at 309 it reports 15 us (+50%); vm2m sent
    // 600 of 664 MTUs: r' = 600/664 x 0.5 = 0.4518, charged at once.
    assert_eq!(at(308)["rate"], 1.0);
    let rate = at(309)["rate"].as_f64().unwrap();
    assert!((rate - (1.0 + 600.0 / 664.0 * 0.5)).abs() < 1e-9, "{rate}");
    // Its cap waits until the host has seen it above its entitlement (half of the 6 Gb/s link)
    // over its smoothed rate (about 100 ms after it arrived at 300): the first change is at
    // the actuation boundary 400, at 100 / its rate by then.
    assert_eq!(at(399)["cap"], 100.0);
    let changes: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["reason"].is_string()).collect();
    let first = changes[0];
    assert_eq!(
        (&first["interval"], &first["vm"]),
        (&400.into(), &"vm2m".into())
    );
    let rate = first["rate"].as_f64().unwrap();
    assert!((first["cap"].as_f64().unwrap() - 100.0 / rate).abs() < 1e-9);
    assert!(changes.iter().all(|r| r["vm"] == "vm2m"));
    assert!(changes
        .iter()
        .any(|r| r["reason"].as_str().unwrap().starts_with("low balance")));
}

#[test]
fn malformed_trace_names_the_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    let replay_err = |body: &str| {
        std::fs::write(&trace, body).unwrap();
        let o = resex(&[
            "price",
            "replay",
            "--policy",
            "policies/freemarket.toml",
            "--trace",
            trace.to_str().unwrap(),
        ]);
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = replay_err(
        "interval,vm,vcpus,cpu_pct,mtus,lat_count,lat_mean_ns,lat_stddev_ns,lat_p99_ns,extra\n\
         0,a,1,10,5,,,,,x\n\
         1,a,1,10,five,,,,,y\n",
    );
    assert!(
        err.contains("line 3") && err.contains("`mtus`") && err.contains("five"),
        "{err}"
    );
    let err = replay_err("interval,vm,cpu_pct\n0,a,1\n");
    assert!(err.contains("no `vcpus` column"), "{err}");
}

#[test]
fn bad_policy_file_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    std::fs::write(&policy, "policy = \"ioshares\"\n[ioshares]\ndecay = 2.0\n").unwrap();
    let o = resex(&["price", "check", policy.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ioshares.decay") && err.contains("0.0..=1.0"),
        "{err}"
    );
    let o = resex(&["price", "check", "policies/ioshares.toml"]);
    let out = stdout(&o);
    assert!(
        out.contains("valid") && out.contains("report_timeout_ms = 100"),
        "{out}"
    );
}
