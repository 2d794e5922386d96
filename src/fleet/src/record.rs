//! What a host publishes: its record (who it is, where its API and metrics are), under its
//! lease, and its per-VM summary every publish period. Values read back are bounded and
//! checked: another writer on the same etcd must not be able to crash or stall a reader.

use crate::error::FleetError;
use resex_api::Snapshot;
use serde::{Deserialize, Serialize};

/// The largest record accepted, bytes.
pub const MAX_RECORD_BYTES: usize = 64 << 10;
/// The largest summary accepted, bytes (etcd's default request limit is 1.5 MiB).
pub const MAX_SUMMARY_BYTES: usize = 1536 << 10;
/// The most VMs a summary may list.
pub const MAX_VMS: usize = 4096;

/// A host's record (`PREFIX/hosts/HOST`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRecord {
    /// The host's name.
    pub host: String,
    /// resexd's process id.
    pub pid: u32,
    /// When this resexd started, Unix ms.
    pub started_unix_ms: u64,
    /// Its Prometheus endpoint (`ADDR` of `/metrics`), if it serves one.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Its backend (local, kvm, xen).
    #[serde(default)]
    pub backend: String,
    /// resex's version.
    #[serde(default)]
    pub version: String,
}

/// One VM in a summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmSummary {
    /// The VM.
    pub name: String,
    /// Transmit rate, Mb/s.
    pub tx_mbps: f64,
    /// CPU, percent of one CPU.
    pub cpu_pct: f64,
    /// Its cap, percent (none: uncapped).
    #[serde(default)]
    pub cap_pct: Option<f64>,
    /// Its transmit share and ceiling, Mb/s.
    #[serde(default)]
    pub tx_share_mbps: Option<f64>,
    /// Ceiling.
    #[serde(default)]
    pub tx_max_mbps: Option<f64>,
    /// Its reported p99 latency, us.
    #[serde(default)]
    pub lat_p99_us: Option<f64>,
    /// Interference it reported, percent.
    #[serde(default)]
    pub intf_pct: Option<f64>,
    /// What the admin grants it on the link, Mb/s (its entitlement; None from an older
    /// resexd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entitled_mbps: Option<f64>,
    /// Its period, when the host's detector found one (a training job's iterations). Read
    /// leniently: a period that does not parse (another version's, a non-number) is none, not
    /// a refused summary.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_period"
    )]
    pub period: Option<JobPeriod>,
}

fn lenient_period<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<JobPeriod>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

/// A periodic VM's iterations as its host measured them (from `resex_api::PeriodFound`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JobPeriod {
    /// The iteration time, ms.
    pub period_ms: f64,
    /// When its latest communication arc began, Unix time in ms.
    pub last_start_unix_ms: f64,
    /// Bytes it sends per iteration.
    pub bytes_per_period: f64,
    /// Fraction of the intervals in which it sends.
    pub duty: f64,
    /// How sure the host's detector is, 0 to 1.
    pub confidence: f64,
    /// The time between its two latest arc starts as its host saw them, ms (see
    /// `resex_api::PeriodFound`); the schedules time a job by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_period_ms: Option<f64>,
}

impl JobPeriod {
    /// The longest period taken, ms (10 minutes).
    pub const MAX_PERIOD_MS: f64 = 600_000.0;

    /// Whether its figures are usable (a summary is read from etcd: any writer may have put
    /// anything there).
    #[must_use]
    pub fn plausible(&self) -> bool {
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        // At most 10^13 bytes a second (80 Tb/s): the circle refuses absurd demands.
        let rate_ok = self.bytes_per_period <= 1e10 * self.period_ms;
        rate_ok
            && self.period_ms >= 0.001
            && self.period_ms <= Self::MAX_PERIOD_MS
            && self.last_start_unix_ms.is_finite()
            && (0.0..=1e14).contains(&self.last_start_unix_ms)
            && self.bytes_per_period.is_finite()
            && (0.0..=1e15).contains(&self.bytes_per_period)
            && unit(self.duty)
            && unit(self.confidence)
            && self
                .latest_period_ms
                .is_none_or(|l| l.is_finite() && (0.001..=Self::MAX_PERIOD_MS).contains(&l))
    }

    /// The period a schedule times the job by: the latest one its host saw when it is within
    /// a quarter of the detector's (a job whose iterations have just changed), else the
    /// detector's.
    #[must_use]
    pub fn timing_period_ms(&self) -> f64 {
        self.latest_period_ms
            .filter(|l| (l / self.period_ms - 1.0).abs() <= 0.25)
            .unwrap_or(self.period_ms)
    }
}

impl From<&resex_api::PeriodFound> for JobPeriod {
    fn from(p: &resex_api::PeriodFound) -> Self {
        Self {
            period_ms: p.period_ms,
            last_start_unix_ms: p.last_start_unix_ms,
            bytes_per_period: p.bytes_per_period,
            duty: p.duty,
            confidence: p.confidence,
            latest_period_ms: p.latest_period_ms,
        }
    }
}

/// A host's summary (`PREFIX/summary/HOST`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSummary {
    /// The host.
    pub host: String,
    /// When it was taken, Unix ms.
    pub at_unix_ms: u64,
    /// The host's policy.
    #[serde(default)]
    pub policy: String,
    /// Its link utilisation, 0-1.
    #[serde(default)]
    pub link_util: f64,
    /// Its VMs.
    pub vms: Vec<VmSummary>,
}

fn mbps(bps: Option<u64>) -> Option<f64> {
    bps.map(|b| b as f64 / 1e6)
}

impl HostSummary {
    /// The summary of resexd's snapshot (at most [`MAX_VMS`] VMs, the busiest first).
    #[must_use]
    pub fn from_snapshot(host: &str, s: &Snapshot, at_unix_ms: u64) -> Self {
        let mut vms: Vec<VmSummary> = s
            .vms
            .iter()
            .map(|v| VmSummary {
                name: v.name.clone(),
                tx_mbps: v.bytes_per_s * 8.0 / 1e6,
                cpu_pct: v.cpu_pct,
                cap_pct: v.cap_pct,
                tx_share_mbps: mbps(v.tx_share_bps),
                tx_max_mbps: mbps(v.tx_max_bps),
                lat_p99_us: v.lat_p99_us,
                intf_pct: v.intf_pct,
                entitled_mbps: (v.entitled_bps > 0.0).then_some(v.entitled_bps / 1e6),
                period: v
                    .period
                    .as_ref()
                    .and_then(|p| p.found.as_ref())
                    .map(JobPeriod::from)
                    .filter(JobPeriod::plausible),
            })
            .collect();
        vms.sort_by(|a, b| b.tx_mbps.total_cmp(&a.tx_mbps));
        vms.truncate(MAX_VMS);
        Self {
            host: host.into(),
            at_unix_ms,
            policy: s.host.policy.clone(),
            link_util: s.host.link_util,
            vms,
        }
    }
}

/// Each VM's rate over the publish period, from the monitor's exact byte totals (a snapshot's
/// rate covers its last window only, 100 ms: bursty senders look idle or doubled in it).
#[derive(Debug, Clone, Default)]
pub struct PeriodRates {
    last: std::collections::HashMap<String, u64>,
    at_ms: Option<u64>,
}

impl PeriodRates {
    /// The summary of `s`, whose VMs' `tx_mbps` is their mean since the previous call (the
    /// snapshot's own rate the first time, or for a VM new since).
    pub fn summary(&mut self, host: &str, s: &Snapshot, at_unix_ms: u64) -> HostSummary {
        let mut h = HostSummary::from_snapshot(host, s, at_unix_ms);
        let dt_ms = self.at_ms.map(|t| s.uptime_ms.saturating_sub(t));
        let mut next = std::collections::HashMap::with_capacity(s.vms.len());
        for v in &s.vms {
            if let (Some(dt), Some(prev)) = (dt_ms.filter(|d| *d > 0), self.last.get(&v.name)) {
                if let Some(d) = v.tx_bytes_total.checked_sub(*prev) {
                    if let Some(row) = h.vms.iter_mut().find(|r| r.name == v.name) {
                        row.tx_mbps = d as f64 * 8.0 / (dt as f64 * 1e3);
                    }
                }
            }
            next.insert(v.name.clone(), v.tx_bytes_total);
        }
        self.last = next;
        self.at_ms = Some(s.uptime_ms);
        h.vms.sort_by(|a, b| b.tx_mbps.total_cmp(&a.tx_mbps));
        h
    }
}

/// A JSON value read back from `key`, refused above `max` bytes.
pub(crate) fn parse<T: for<'de> Deserialize<'de>>(
    key: &str,
    v: &[u8],
    max: usize,
) -> Result<T, FleetError> {
    if v.len() > max {
        return Err(FleetError::BadValue {
            key: key.into(),
            reason: format!("{} bytes, more than {max}", v.len()),
        });
    }
    serde_json::from_slice(v).map_err(|e| FleetError::BadValue {
        key: key.into(),
        reason: e.to_string(),
    })
}

impl HostRecord {
    /// A record read back from `key`.
    pub fn parse(key: &str, v: &[u8]) -> Result<Self, FleetError> {
        let r: Self = parse(key, v, MAX_RECORD_BYTES)?;
        if !crate::keys::valid_host(&r.host) {
            return Err(FleetError::BadValue {
                key: key.into(),
                reason: format!("host name {:?} is not [A-Za-z0-9._-]{{1,128}}", r.host),
            });
        }
        Ok(r)
    }
}

impl HostSummary {
    /// A summary read back from `key`.
    pub fn parse(key: &str, v: &[u8]) -> Result<Self, FleetError> {
        let s: Self = parse(key, v, MAX_SUMMARY_BYTES)?;
        if s.vms.len() > MAX_VMS {
            return Err(FleetError::BadValue {
                key: key.into(),
                reason: format!("{} VMs, more than {MAX_VMS}", s.vms.len()),
            });
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_rates_come_from_the_byte_totals() {
        let mut s = Snapshot::default();
        let mut v = resex_api::VmSnap {
            name: "v".into(),
            bytes_per_s: 0.0,
            tx_bytes_total: 1_000_000,
            ..Default::default()
        };
        s.vms.push(v.clone());
        s.uptime_ms = 1000;
        let mut r = PeriodRates::default();
        assert_eq!(r.summary("h", &s, 0).vms[0].tx_mbps, 0.0);
        // 12.5 MB in 500 ms: 200 Mb/s, whatever the snapshot's last window said.
        v.tx_bytes_total += 12_500_000;
        s.vms[0] = v;
        s.uptime_ms = 1500;
        assert!((r.summary("h", &s, 0).vms[0].tx_mbps - 200.0).abs() < 1e-9);
    }

    #[test]
    fn hostile_values_are_refused_not_trusted() {
        assert!(HostRecord::parse("k", b"not json").is_err());
        assert!(HostRecord::parse("k", &vec![b' '; MAX_RECORD_BYTES + 1]).is_err());
        let r = br#"{"host":"a/b","pid":1,"started_unix_ms":0}"#;
        assert!(HostRecord::parse("k", r)
            .unwrap_err()
            .to_string()
            .contains("a/b"));
        let ok = br#"{"host":"h1","pid":1,"started_unix_ms":0}"#;
        assert_eq!(HostRecord::parse("k", ok).unwrap().host, "h1");
        let many = serde_json::to_vec(&HostSummary {
            host: "h".into(),
            at_unix_ms: 0,
            policy: String::new(),
            link_util: 0.0,
            vms: vec![
                VmSummary {
                    name: "v".into(),
                    tx_mbps: 0.0,
                    cpu_pct: 0.0,
                    cap_pct: None,
                    tx_share_mbps: None,
                    tx_max_mbps: None,
                    lat_p99_us: None,
                    intf_pct: None,
                    entitled_mbps: None,
                    period: None,
                };
                MAX_VMS + 1
            ],
        })
        .unwrap();
        assert!(HostSummary::parse("k", &many).is_err());
    }

    #[test]
    fn a_summary_carries_each_periodic_vms_period_and_checks_it_when_read() {
        let found = resex_api::PeriodFound {
            period_ms: 200.0,
            duty: 0.1,
            bytes_per_period: 5e6,
            last_start_unix_ms: 1_790_000_000_012.5,
            confidence: 0.9,
            latest_period_ms: None,
        };
        let mut s = Snapshot::default();
        for (name, period) in [("job", Some(found)), ("steady", None)] {
            s.vms.push(resex_api::VmSnap {
                name: name.into(),
                period: Some(resex_api::PeriodSnap {
                    found: period,
                    why_not: period.is_none().then(|| "steady sender".into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        let h = HostSummary::from_snapshot("h", &s, 0);
        let p = h
            .vms
            .iter()
            .find(|v| v.name == "job")
            .unwrap()
            .period
            .unwrap();
        assert_eq!(
            (p.period_ms, p.last_start_unix_ms, p.bytes_per_period),
            (200.0, 1_790_000_000_012.5, 5e6)
        );
        assert!(p.plausible());
        assert!(h
            .vms
            .iter()
            .find(|v| v.name == "steady")
            .unwrap()
            .period
            .is_none());
        let text = serde_json::to_string(&h).unwrap();
        assert_eq!(
            text.matches("period_ms").count(),
            1,
            "no key for a VM without one"
        );
        for bad in [
            JobPeriod {
                last_start_unix_ms: f64::NAN,
                ..p
            },
            JobPeriod {
                period_ms: f64::NAN,
                ..p
            },
            JobPeriod {
                period_ms: 1e9,
                ..p
            },
            JobPeriod {
                bytes_per_period: -1.0,
                ..p
            },
            JobPeriod { duty: 2.0, ..p },
            JobPeriod {
                latest_period_ms: Some(f64::NAN),
                ..p
            },
            JobPeriod {
                latest_period_ms: Some(0.0),
                ..p
            },
            JobPeriod {
                latest_period_ms: Some(1e9),
                ..p
            },
        ] {
            assert!(!bad.plausible(), "{bad:?}");
        }
        // The latest period times the job only within a quarter of the detector's.
        let seen = |l| JobPeriod {
            latest_period_ms: Some(l),
            ..p
        };
        assert!(seen(160.0).plausible());
        assert_eq!(seen(180.0).timing_period_ms(), 180.0);
        assert_eq!(seen(100.0).timing_period_ms(), p.period_ms);
    }

    #[test]
    fn a_period_that_does_not_parse_is_none_not_a_refused_summary() {
        let text = br#"{"host":"h","at_unix_ms":0,"vms":[
            {"name":"old","tx_mbps":1,"cpu_pct":0,"period":{"period_ms":200,"phase_ms":3}},
            {"name":"nan","tx_mbps":1,"cpu_pct":0,"period":{"period_ms":null}},
            {"name":"ok","tx_mbps":1,"cpu_pct":0,"period":{"period_ms":200,
             "last_start_unix_ms":1.0,"bytes_per_period":5,"duty":0.1,"confidence":0.5}}]}"#;
        let s = HostSummary::parse("k", text).unwrap();
        let p: Vec<bool> = s.vms.iter().map(|v| v.period.is_some()).collect();
        assert_eq!(p, [false, false, true]);
    }
}
