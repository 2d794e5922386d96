//! What the admin grants a VM beside what it uses, in one line for people (`resex status`
//! and top's detail pane).

use crate::columns::{entitled, si, use_pct};
use crate::VmSnap;

/// `entitled 2.0G, cpu floor 20%; sends 1.2G (60%): within ...`, or why there is none.
pub fn line(v: &VmSnap) -> String {
    let estimate = v.io_latency_us.map_or_else(String::new, |us| {
        format!("; host-estimated I/O latency {us:.1} us")
    });
    let Some(e) = entitled(v) else {
        return format!("entitlement: unknown{estimate}");
    };
    let floor = v
        .cpu_floor_pct
        .map_or_else(String::new, |f| format!(", cpu floor {f:.0}%"));
    let using = match (v.tx_rate_bps, use_pct(v)) {
        (Some(r), Some(p)) => format!("; sends {}b/s ({p:.0}%)", si(r)),
        _ => String::new(),
    };
    let state = match v.excess {
        Some(true) => ": ABOVE it, a policy may limit the excess",
        Some(false) => ": within it, no policy may limit it",
        None => "",
    };
    let weight = v
        .tx_weight
        .map_or_else(String::new, |w| format!("; excess weight {w}"));
    let host = v
        .host_slowdown
        .map_or_else(String::new, |s| format!("; NIC-measured slowdown {s:.2}"));
    let report = v
        .report_discounted
        .as_deref()
        .map_or_else(String::new, |r| format!("; report discounted: {r}"));
    format!(
        "entitled {}b/s{floor}{using}{state}{weight}{host}{estimate}{report}",
        si(e)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_what_is_granted_used_and_discounted() {
        assert!(line(&VmSnap::default()).contains("unknown"));
        let v = VmSnap {
            entitled_bps: 2e9,
            cpu_floor_pct: Some(20.0),
            tx_rate_bps: Some(1.2e9),
            excess: Some(false),
            report_discounted: Some("claimed 3.00, host saw 0.01".into()),
            ..Default::default()
        };
        let l = line(&v);
        for want in [
            "entitled 2.0Gb/s",
            "cpu floor 20%",
            "1.2Gb/s (60%)",
            "within",
            "report discounted: claimed 3.00",
        ] {
            assert!(l.contains(want), "{want} in {l}");
        }
        let x = VmSnap {
            excess: Some(true),
            tx_rate_bps: Some(3e9),
            ..v
        };
        assert!(line(&x).contains("ABOVE"));
        let est = VmSnap {
            io_latency_us: Some(41.25),
            ..VmSnap::default()
        };
        assert_eq!(
            line(&est),
            "entitlement: unknown; host-estimated I/O latency 41.2 us"
        );
    }
}
