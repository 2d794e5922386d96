//! The `kvm` backend: domains from libvirt (feature `libvirt`).
//!
//! - Domains: libvirt's active domains; the key is the UUID.
//! - CPU time: `virDomainGetCPUStats`' total, in ns from the domain's cgroup (what `virsh
//!   domstats` shows as `cpu.time`); `virDomainGetInfo` (10 ms ticks) where that is missing.
//! - Caps: the domain's `global_period` / `global_quota` (`virsh schedinfo`): a cap of C% of one
//!   physical CPU is a quota of C/100 x the 10 ms period, whatever the vCPUs; libvirt writes it
//!   to the domain's cgroup (`cpu.cfs_quota_us` on cgroup v1, `cpu.max` on v2).
//! - Guest memory: the domain's shared RAM backing file, found from its QEMU process
//!   ([`ramfile`]); file offset = guest-physical address below the PCI hole ([`crate::lowmem`]).
//! - Registration: the virtio-serial channel named [`xml::AGENT_CHANNEL`].
//! - The rate lever's VF: the first network SR-IOV VF among the domain's passthrough PCI
//!   functions (`<interface type='hostdev'>`, `<hostdev type='pci'>`), by sysfs.
//!
//! [`xml`] and [`ramfile`] are plain code and always built; the backend itself needs libvirt.

#[cfg(feature = "libvirt")]
mod libvirt;
pub mod ramfile;
pub mod xml;

#[cfg(feature = "libvirt")]
pub use libvirt::KvmBackend;

use crate::BackendError;

/// The cap period, us (credit2 and CFS act on about 10 ms).
pub const PERIOD_US: u64 = 10_000;

/// The CFS (period, quota) for a cap, us (quota `-1`: unlimited). The period is 10 ms, or longer
/// for caps under 10%: the kernel refuses quotas under 1 ms, so 3% is 1 ms per 33.3 ms. Periods
/// stop at the kernel's 1 s (a 0.1% floor).
pub fn bandwidth_us(pct: Option<f64>) -> Result<(u64, i64), BackendError> {
    match pct {
        None => Ok((PERIOD_US, -1)),
        Some(p) if p.is_finite() && p > 0.0 => {
            #[allow(clippy::cast_possible_truncation)]
            let q = (p / 100.0 * PERIOD_US as f64).round() as i64;
            if q >= 1_000 {
                return Ok((PERIOD_US, q));
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let period = ((1_000.0 * 100.0 / p).round() as u64).min(1_000_000);
            Ok((period, 1_000))
        }
        Some(pct) => Err(BackendError::BadCap { pct }),
    }
}

/// A saved `{global_period, global_quota}` back as values.
pub fn parse_saved(v: &serde_json::Value) -> Result<(Option<u64>, Option<i64>), BackendError> {
    let bad = || BackendError::from(crate::SavedError::Libvirt { saved: v.clone() });
    let obj = v.as_object().ok_or_else(bad)?;
    let period = match obj.get("global_period") {
        None | Some(serde_json::Value::Null) => None,
        Some(p) => Some(p.as_u64().ok_or_else(bad)?),
    };
    let quota = match obj.get("global_quota") {
        None | Some(serde_json::Value::Null) => None,
        Some(q) => Some(q.as_i64().ok_or_else(bad)?),
    };
    Ok((period, quota))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_become_quotas_of_the_10_ms_period() {
        assert_eq!(bandwidth_us(None).unwrap(), (10_000, -1));
        assert_eq!(bandwidth_us(Some(50.0)).unwrap(), (10_000, 5_000));
        assert_eq!(
            bandwidth_us(Some(250.0)).unwrap(),
            (10_000, 25_000),
            "2.5 CPUs"
        );
        assert_eq!(bandwidth_us(Some(10.0)).unwrap(), (10_000, 1_000));
        // Under 10% the quota stays at the kernel's 1 ms minimum and the period grows.
        assert_eq!(bandwidth_us(Some(3.0)).unwrap(), (33_333, 1_000));
        assert_eq!(bandwidth_us(Some(0.01)).unwrap(), (1_000_000, 1_000));
        assert!(bandwidth_us(Some(0.0)).is_err() && bandwidth_us(Some(f64::NAN)).is_err());
        let e = bandwidth_us(Some(-5.0)).unwrap_err();
        assert!(
            matches!(e, BackendError::BadCap { pct } if pct == -5.0),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "cap -5% is not a positive number");
    }

    #[test]
    fn saved_settings_round_trip_and_junk_is_refused() {
        let v = serde_json::json!({"global_period": 100_000, "global_quota": -1});
        assert_eq!(parse_saved(&v).unwrap(), (Some(100_000), Some(-1)));
        let v = serde_json::json!({"global_period": null, "global_quota": null});
        assert_eq!(parse_saved(&v).unwrap(), (None, None));
        assert!(parse_saved(&serde_json::json!({"global_quota": "x"})).is_err());
        let e = parse_saved(&serde_json::json!(7)).unwrap_err();
        assert!(
            matches!(&e, BackendError::Saved(crate::SavedError::Libvirt { saved }) if saved == 7),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "saved libvirt cap `7` is not ours");
    }
}
