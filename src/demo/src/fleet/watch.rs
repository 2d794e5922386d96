//! What the fleet demo measures across its hosts, from their daemons' snapshots: the guests'
//! rate together, the ceilings in force, each VM's rate and ceiling; and waiting for a
//! condition.

use crate::error::DemoError;
use crate::fleet::host::FleetHost;
use resex_api::VmSnap;
use resex_fleet::etcd::Fleet;
use resex_fleet::{Allocation, FleetConfig, RoundReport};
use std::time::{Duration, Instant};

/// Every host's allocation and the coordinator's last round report, if they can be read.
pub(crate) fn allocations(url: &str) -> Option<(Vec<Allocation>, Option<RoundReport>)> {
    Fleet::connect(&FleetConfig::new(vec![url.to_owned()]))
        .and_then(|mut f| f.allocations())
        .ok()
}

/// Every running host's VMs now.
fn vms(hosts: &[FleetHost]) -> impl Iterator<Item = VmSnap> + '_ {
    hosts
        .iter()
        .filter_map(FleetHost::daemon)
        .flat_map(|d| d.snapshot().vms.clone())
}

/// The guests' transmit rate together over `over`, Mb/s, from the monitors' exact byte
/// totals.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn rate(hosts: &[FleetHost], over: Duration) -> f64 {
    let total = || -> u64 { vms(hosts).map(|v| v.tx_bytes_total).sum() };
    let (b0, t0) = (total(), Instant::now());
    std::thread::sleep(over);
    let (b1, dt) = (total(), t0.elapsed().as_secs_f64());
    b1.saturating_sub(b0) as f64 * 8.0 / 1e6 / dt
}

/// The fleet's ceilings in force together, Mb/s.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn ceilings(hosts: &[FleetHost]) -> f64 {
    vms(hosts)
        .filter_map(|v| v.tx_max_bps)
        .map(|b| b as f64 / 1e6)
        .sum()
}

/// VMs under a transmit ceiling right now.
pub(crate) fn throttled(hosts: &[FleetHost]) -> usize {
    vms(hosts).filter(|v| v.tx_max_bps.is_some()).count()
}

/// Each host's VMs now: rate and ceiling, for the progress lines.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn detail(hosts: &[FleetHost]) -> String {
    let mut out = Vec::new();
    for h in hosts {
        let Some(d) = h.daemon() else { continue };
        for v in &d.snapshot().vms {
            out.push(format!(
                "{}/{} {:.0} Mb/s (ceiling {})",
                h.name,
                v.name,
                v.bytes_per_s * 8.0 / 1e6,
                v.tx_max_bps
                    .map_or("none".into(), |b| format!("{:.0}", b as f64 / 1e6))
            ));
        }
    }
    out.join(", ")
}

/// Waits (every 20 ms) until `ok` says so, `limit` at most; how long it took.
pub(crate) fn wait(
    what: &'static str,
    limit: Duration,
    mut ok: impl FnMut() -> Result<bool, DemoError>,
) -> Result<Duration, DemoError> {
    let t = Instant::now();
    while !ok()? {
        if t.elapsed() > limit {
            return Err(DemoError::Timeout { what, limit });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(t.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_when_its_condition_holds_or_its_time_is_up() {
        let mut n = 0;
        let took = wait("three looks", Duration::from_secs(5), || {
            n += 1;
            Ok(n == 3)
        })
        .unwrap();
        assert!(took < Duration::from_secs(5));
        let e = wait("never", Duration::from_millis(50), || Ok(false)).unwrap_err();
        assert_eq!(e.to_string(), "never: not within 50ms");
        assert!(rate(&[], Duration::from_millis(1)) == 0.0);
        assert_eq!(
            (ceilings(&[]), throttled(&[]), detail(&[])),
            (0.0, 0, String::new())
        );
    }
}
