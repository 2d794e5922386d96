//! What the host's period detector made of a VM, in one line for people (`resex status` and
//! top's detail pane).

use crate::columns::si;
use crate::VmSnap;

/// `period 200.0 ms (duty 20%, 40.0MB each, last began 1.3 s ago, confidence 0.97; 2048
/// intervals looked at 0.4 s ago)`, `not periodic: ...`, or `None` when the daemon does not
/// detect periods.
pub fn line(v: &VmSnap) -> Option<String> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3);
    line_at(v, now_ms)
}

/// [`line`] at Unix time `now_ms`.
fn line_at(v: &VmSnap, now_ms: f64) -> Option<String> {
    let p = v.period.as_ref()?;
    #[allow(clippy::cast_precision_loss)]
    let seen = format!(
        "{} intervals looked at {:.1} s ago",
        p.samples,
        p.age_ms as f64 / 1000.0
    );
    Some(match (&p.found, &p.why_not) {
        (Some(f), _) => format!(
            "period {:.1} ms (duty {:.0}%, {}B each, last began {:.1} s ago, confidence {:.2}; \
             {seen})",
            f.period_ms,
            f.duty * 100.0,
            si(f.bytes_per_period),
            (now_ms - f.last_start_unix_ms) / 1e3,
            f.confidence
        ),
        (None, why) => format!(
            "not periodic: {} ({seen})",
            why.as_deref().unwrap_or("no verdict")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_api::{PeriodFound, PeriodSnap};

    #[test]
    fn a_period_its_figures_or_why_there_is_none() {
        assert_eq!(line(&VmSnap::default()), None);
        let mut v = VmSnap {
            period: Some(PeriodSnap {
                found: Some(PeriodFound {
                    period_ms: 200.04,
                    duty: 0.2,
                    bytes_per_period: 40e6,
                    last_start_unix_ms: 1_790_000_000_000.0,
                    confidence: 0.97,
                    latest_period_ms: None,
                }),
                why_not: None,
                samples: 2048,
                age_ms: 400,
            }),
            ..Default::default()
        };
        let l = line_at(&v, 1_790_000_001_300.0).unwrap();
        for want in [
            "period 200.0 ms",
            "duty 20%",
            "40.0MB each",
            "last began 1.3 s ago",
            "0.97",
            "2048 intervals looked at 0.4 s ago",
        ] {
            assert!(l.contains(want), "{want} in {l}");
        }
        v.period = Some(PeriodSnap {
            why_not: Some("the VM sent nothing".into()),
            samples: 10,
            ..Default::default()
        });
        assert_eq!(
            line(&v).unwrap(),
            "not periodic: the VM sent nothing (10 intervals looked at 0.0 s ago)"
        );
    }
}
