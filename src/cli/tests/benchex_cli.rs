//! `resex benchex local`: server and clients on an in-process softhca, end to end.
#![allow(missing_docs)]

/// `resex benchex local` in closed loop: `count` orders of 4 KiB, `extra` options, its JSON.
fn local_json(count: u32, extra: &[&str]) -> serde_json::Value {
    let count = count.to_string();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(["benchex", "local", "--buffer", "4KiB", "--rate", "0"])
        .args(["--count", &count, "--duration", "0", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{extra:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn benchex_local_answers_every_order_and_prints_json() {
    let v = local_json(50, &[]);
    assert_eq!(v["server"]["requests"], 50, "{v}");
    assert_eq!(v["clients"][0]["received"], 50, "{v}");
    assert!(v["server_latency"]["count"].as_u64() == Some(50), "{v}");
}

#[test]
fn an_unknown_link_preset_is_one_clear_error() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(["benchex", "local", "--link", "400g", "--count", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("unknown link preset `400g`"), "{e}");
}

/// Every mechanism of the shim carries BenchEx's orders and replies: the server chooses, the
/// client follows its offer, and every order is answered.
#[test]
fn benchex_local_runs_on_every_transport() {
    for kind in ["status_byte", "sliding_window", "cpwr", "hipower"] {
        let v = local_json(40, &["--transport", kind]);
        assert_eq!(v["transport"], kind, "{v}");
        assert_eq!(v["server"]["requests"], 40, "{kind}: {v}");
        assert_eq!(v["clients"][0]["received"], 40, "{kind}: {v}");
        assert_eq!(v["clients"][0]["reply_bytes"], 40 * 4096, "{kind}: {v}");
    }
}

#[test]
fn an_unknown_transport_is_one_clear_error() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(["benchex", "local", "--transport", "tcp", "--count", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("status_byte, sliding_window, cpwr or hipower") && e.contains("\"tcp\""),
        "{e}"
    );
}
