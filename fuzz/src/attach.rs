//! Target `attach`: a host's hold on one VM's rings (`resex_ibmon::VmRings`): registrations
//! installed whole, or a first QP and then the whole document (a new monitor, or a re-attachment
//! when the new QP shares a CQ), each monitor attached at its first scan from the registration's
//! start indices or, for rings a lap or more past them, at the present position (the doorbell
//! records, the last requester CQE and its WQE read from guest memory). Input: the `monitor`
//! target's (the same seeds serve both).
//!
//! Checked: nothing panics; the rings never write guest memory; what the scans return adds up to
//! what the rings report in total (nothing counted twice or lost between scans, across a
//! re-attachment too); the same document again changes nothing; the late QPs named stay within
//! their bound and within the QPs registered.

use crate::monitor::{decode, RAM};
use resex_guestmem::VecMemory;
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::rings::MAX_LATE;
use resex_ibmon::{Counters, VmRings};
use resex_proto::Registration;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let _ = paths(data);
}

/// Which paths an input took (for the test that the seeds reach them all).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Paths {
    /// Rings counted from the registration's start and something counted.
    pub counted: bool,
    /// A monitor attached at the present position (rings already live).
    pub live: bool,
    /// A re-attachment (a new QP on a CQ already monitored).
    pub reattached: bool,
    /// A second QP given a monitor of its own.
    pub added: bool,
}

/// Runs the target on one input and says which paths it took.
pub fn paths(data: &[u8]) -> Paths {
    let mut p = Paths::default();
    let Some((reg, mem, budget)) = decode(data) else {
        return p;
    };
    let before = mem.to_vec();
    let mut whole = VmRings::new("fuzz");
    if install(&mut whole, &reg) {
        scans(&mut whole, &mem, budget);
        let qps = whole.qps();
        assert!(install(&mut whole, &reg), "the same document again");
        assert_eq!((whole.qps(), whole.reattached()), (qps, 0));
        scans(&mut whole, &mem, budget);
        p.live |= whole.attached_live() > 0;
        p.counted |= whole.attached_live() == 0 && whole.total().completions > 0;
    }
    if reg.qps.len() > 1 {
        let first = Registration {
            rings: Vec::new(),
            qps: reg.qps[..1].to_vec(),
            ..reg.clone()
        };
        let mut grown = VmRings::new("fuzz");
        if install(&mut grown, &first) {
            scans(&mut grown, &mem, budget);
            let added = install(&mut grown, &reg);
            scans(&mut grown, &mem, budget);
            assert!(grown.reattached() <= 1);
            p.reattached |= grown.reattached() == 1;
            p.added |= added && grown.reattached() == 0 && grown.qps() == reg.qps.len();
        }
    }
    assert!(mem.to_vec() == before, "the rings wrote guest memory");
    p
}

/// Validates `reg` and installs it; false when validation refuses it.
fn install(rings: &mut VmRings, reg: &Registration) -> bool {
    let Ok(layout) = validate(reg, RAM as u64, &Limits::default()) else {
        return false;
    };
    rings
        .install(reg, layout, RAM as u64, &Limits::default())
        .is_ok()
}

/// A few scans; their deltas add up to the total.
fn scans(rings: &mut VmRings, mem: &VecMemory, budget: u32) {
    let start = rings.total();
    let mut sum = Counters::default();
    for _ in 0..3 {
        sum += rings.scan(mem, budget);
    }
    assert_eq!(start_plus(start, sum), rings.total(), "deltas add up");
    assert!(rings.late().len() <= MAX_LATE.min(rings.qps()));
    assert!(rings.attached_live() <= 2);
}

fn start_plus(mut a: Counters, b: Counters) -> Counters {
    a += b;
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_reach_every_path() {
        let mut all = Paths::default();
        for (_, bytes) in crate::seeds::seeds("attach") {
            let p = paths(&bytes);
            all.counted |= p.counted;
            all.live |= p.live;
            all.reattached |= p.reattached;
            all.added |= p.added;
        }
        assert_eq!(
            all,
            Paths {
                counted: true,
                live: true,
                reattached: true,
                added: true
            }
        );
    }
}
