//! What the host's period detector made of a VM, in one line for people (`resex status` and
//! top's detail pane).

use crate::columns::si;
use crate::VmSnap;

/// `period 200.0 ms (duty 20%, 40.0MB each, starts 31.0 ms into it on the Unix clock,
/// confidence 0.97; 2048 ms looked at 0.4 s ago)`, `not periodic: ...`, or `None` when the
/// daemon does not detect periods.
pub fn line(v: &VmSnap) -> Option<String> {
    let p = v.period.as_ref()?;
    #[allow(clippy::cast_precision_loss)]
    let seen = format!(
        "{} intervals looked at {:.1} s ago",
        p.samples,
        p.age_ms as f64 / 1000.0
    );
    Some(match (&p.found, &p.why_not) {
        (Some(f), _) => format!(
            "period {:.1} ms (duty {:.0}%, {}B each, starts {:.1} ms into it on the Unix clock, \
             confidence {:.2}; {seen})",
            f.period_ms,
            f.duty * 100.0,
            si(f.bytes_per_period),
            f.phase_ms,
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
                    phase_ms: 31.0,
                    confidence: 0.97,
                }),
                why_not: None,
                samples: 2048,
                age_ms: 400,
            }),
            ..Default::default()
        };
        let l = line(&v).unwrap();
        for want in [
            "period 200.0 ms",
            "duty 20%",
            "40.0MB each",
            "starts 31.0 ms",
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
