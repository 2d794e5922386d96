//! `resex lab transport` end to end: the JSON the issue names, byte-identical run to run, the
//! plots, the mechanisms' directions that hold in the model, and a clear error for a testbed
//! it does not know.

mod common;

use common::{resex, stdout};

fn nums(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn lab_transport_quick_is_deterministic_complete_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().to_str().unwrap();
    let args = ["lab", "transport", "--quick", "--json", "--plot", plot];
    let a = stdout(&resex(&args));
    let b = stdout(&resex(&["lab", "transport", "--quick", "--json"]));
    assert_eq!(a, b, "the same seed must give the same bytes");
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();

    // Fig. 10: sync time per block count, both mechanisms.
    let blocks = nums(&v["blocks"]);
    assert!(!blocks.is_empty());
    for m in ["status_byte", "sliding_window"] {
        let s = nums(&v["sync_us"][m]);
        assert_eq!(s.len(), blocks.len(), "{m}");
        assert!(s.iter().all(|&x| x > 0.0 && x < 1000.0), "{m}: {s:?}");
    }
    // Fig. 11: each synchronisation of a run, and its distribution.
    for m in ["status_byte", "sliding_window"] {
        let s = nums(&v["sync_series_us"][m]);
        assert!(!s.is_empty(), "{m}");
        let d = &v["sync_dist_us"][m];
        assert_eq!(d["n"].as_u64(), Some(s.len() as u64), "{m}");
        assert!(d["min"].as_f64() <= d["p50"].as_f64() && d["p50"].as_f64() <= d["max"].as_f64());
    }
    // Figs. 12-15: per message size, latency, throughput and CPU, both mechanisms.
    let sizes = nums(&v["msg_sizes"]);
    assert!(sizes.len() >= 3);
    for key in ["latency_us", "throughput_mbps", "cpu_ns_per_msg"] {
        for m in ["status_byte", "sliding_window"] {
            let s = nums(&v[key][m]);
            assert_eq!(s.len(), sizes.len(), "{key} {m}");
            assert!(s.iter().all(|&x| x > 0.0), "{key} {m}: {s:?}");
        }
    }
    // Latency grows with the message (wire time), throughput too until the link fills.
    let lat = nums(&v["latency_us"]["status_byte"]);
    assert!(lat.last().unwrap() > lat.first().unwrap(), "{lat:?}");
    // HiPower against CPWR: gather, the direction the paper and the model share (master CPU
    // per message lower at the smallest size).
    let g = &v["hipower"]["gather"];
    let (hp, cp) = (nums(&g["hipower_cpu"]), nums(&g["cpwr_cpu"]));
    assert!(!hp.is_empty() && hp.len() == cp.len());
    assert!(
        hp[0] < cp[0],
        "gather master CPU: hipower {hp:?} cpwr {cp:?}"
    );
    for k in ["hipower_mbps", "cpwr_mbps"] {
        assert!(nums(&g[k]).iter().all(|&x| x > 0.0), "{k}");
    }
    for e in ["one_to_one", "broadcast"] {
        assert!(v["hipower"][e].is_object(), "{e}");
    }
    // The plots.
    let svgs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("transport-") && n.ends_with(".svg"))
        .collect();
    assert!(svgs.len() >= 3, "{svgs:?}");
    assert!(
        svgs.iter().any(|n| n == "transport-sync-series.svg"),
        "{svgs:?}"
    );
}

#[test]
fn lab_transport_with_an_unknown_testbed_is_one_clear_error() {
    let o = resex(&["lab", "transport", "--quick", "--testbed", "nope"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("unknown testbed \"nope\"") && e.contains("cx5-100g"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}
