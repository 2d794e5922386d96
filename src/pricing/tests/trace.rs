//! The trace format: what is accepted, and what is refused with the line it is on.

use resex_pricing::replay::replay;
use resex_pricing::trace::{Trace, TraceError};
use resex_pricing::{PolicyConfig, PolicyKind};

const HEAD: &str = "interval,vm,vcpus,cpu_pct,mtus,lat_count,lat_mean_ns,lat_stddev_ns,lat_p99_ns";

fn read(body: &str) -> Result<Trace, TraceError> {
    Trace::read(format!("{HEAD}\n{body}").as_bytes())
}

#[test]
fn rows_with_and_without_reports_and_extra_columns() {
    let t = Trace::read(
        "note,lat_p99_ns,lat_stddev_ns,lat_mean_ns,lat_count,mtus,cpu_pct,vcpus,vm,interval,bytes\n\
         x,,,,,5,12.5,2,a,0,5120\n\
         y,30000,1000,12000,40,0,0,2,a,1,\n"
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(t.rows.len(), 2);
    assert_eq!(
        (t.rows[0].line, t.rows[0].cpu_pct, t.rows[0].bytes),
        (2, 12.5, 5120)
    );
    assert!(t.rows[0].report.is_none());
    let r = t.rows[1].report.unwrap();
    assert_eq!(
        (r.count, r.mean_ns, r.stddev_ns, r.p99_ns),
        (40, 12000.0, 1000.0, 30000.0)
    );
}

#[test]
fn refusals_name_the_line() {
    let cases: [(&str, &str); 7] = [
        (
            "0,a,1,10,5,,,,\n1,a,1,-3,5,,,,\n",
            "line 3: column `cpu_pct`",
        ),
        (
            "0,a,1,10,5,,,,\n0,a,1,10,5,,,,\n",
            "line 3: a second row for `a` in interval 0",
        ),
        (
            "5,a,1,10,5,,,,\n4,b,1,10,5,,,,\n",
            "line 3: interval 4 comes after interval 5",
        ),
        (
            "0,a,1,10,5,,,,\n1,a,2,10,5,,,,\n",
            "line 3: `a` has 2 vCPUs here but 1 before",
        ),
        ("0,a,1,10,5,3,100,,\n", "line 2: a latency report needs"),
        ("0,a,0,10,5,,,,\n", "line 2: column `vcpus`"),
        ("0,a,1,10,5,,,\n", "line 2"),
    ];
    for (body, want) in cases {
        let err = read(body).unwrap_err().to_string();
        assert!(err.contains(want), "{body:?}: {err}");
    }
}

#[test]
fn replay_does_not_depend_on_row_order_within_an_interval() {
    let a = "0,a,1,10,50,,,,\n0,b,1,90,900,,,,\n1,a,1,10,50,10,1000,100,2000\n1,b,1,90,900,,,,\n";
    let b = "0,b,1,90,900,,,,\n0,a,1,10,50,,,,\n1,b,1,90,900,,,,\n1,a,1,10,50,10,1000,100,2000\n";
    let cfg = PolicyConfig::defaults(PolicyKind::Ioshares);
    let run = |body: &str| {
        let mut rows = Vec::new();
        replay(&cfg, &read(body).unwrap(), |r| rows.push(format!("{r:?}"))).unwrap();
        rows
    };
    let ra = run(a);
    assert_eq!(ra.len(), 4);
    assert_eq!(ra, run(b));
}

/// The shipped example trace (the paper's pair), with or without its `bytes` column.
fn shipped(with_bytes: bool) -> Trace {
    let text = include_str!("../../../tools/examples/pricing/trace.csv");
    let body: String = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            if !with_bytes {
                f.remove(5);
            }
            f.join(",") + "\n"
        })
        .collect();
    assert!(text.starts_with("interval,vm,vcpus,cpu_pct,mtus,bytes,"));
    Trace::read(body.as_bytes()).unwrap()
}

/// Every cap the default IOShares sets over the trace: (interval, vm, cap).
fn caps(trace: &Trace) -> Vec<(u64, String, String)> {
    let mut cfg = PolicyConfig::from_toml(include_str!("../../../policies/ioshares.toml")).unwrap();
    // A link the pair fills (96%): its report is borne out by congestion.
    cfg.ledger.link_bytes_per_sec = 750_000_000;
    let mut out = Vec::new();
    replay(&cfg, trace, |r| {
        let f = r.csv_fields();
        if f[7] != "100.000" {
            out.push((r.interval, f[1].clone(), f[7].clone()));
        }
    })
    .unwrap();
    out
}

#[test]
fn a_trace_without_bytes_is_charged_by_mtus_at_the_path_mtu() {
    let (with, without) = (shipped(true), shipped(false));
    assert!(with.has_bytes && !without.has_bytes);
    assert!(without.rows.iter().all(|r| r.bytes == 0));
    // The default IOShares attributes by bytes: without the column it must still charge the
    // interferer, exactly as with it (the example's bytes are its MTUs x 1024, the path MTU).
    let caps_with = caps(&with);
    assert!(
        caps_with.iter().any(|(_, vm, _)| vm == "vm2m"),
        "the interferer is capped: {caps_with:?}"
    );
    assert_eq!(caps(&without), caps_with);
}
