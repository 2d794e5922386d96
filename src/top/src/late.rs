//! Queue pairs whose counting started late, in one line for people (`resex status` and top's
//! detail pane): their totals lack what they did before the host attached.

use crate::VmSnap;

/// `counting started late on QP 0x107 (its send CQ had delivered 80 completions before) ...`,
/// or `None` when every QP was counted from its start.
pub fn line(v: &VmSnap) -> Option<String> {
    if v.late_qps.is_empty() {
        return None;
    }
    let qps: Vec<String> = v
        .late_qps
        .iter()
        .map(|q| match q.missed_completions {
            Some(n) => format!(
                "QP {:#x} (its send CQ had delivered {n} completions before)",
                q.qpn
            ),
            None => format!("QP {:#x} (what it missed is unknown)", q.qpn),
        })
        .collect();
    Some(format!(
        "counting started late on {}: registered after its rings had lapped, its totals lack \
         what it did before",
        qps.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_api::LateQp;

    #[test]
    fn names_each_late_qp_and_what_it_missed() {
        assert_eq!(line(&VmSnap::default()), None);
        let v = VmSnap {
            late_qps: vec![
                LateQp {
                    qpn: 0x107,
                    missed_completions: Some(80),
                },
                LateQp {
                    qpn: 0x108,
                    missed_completions: None,
                },
            ],
            ..Default::default()
        };
        let l = line(&v).unwrap();
        for want in [
            "counting started late",
            "QP 0x107 (its send CQ had delivered 80 completions before)",
            "QP 0x108 (what it missed is unknown)",
        ] {
            assert!(l.contains(want), "{want} in {l}");
        }
    }
}
