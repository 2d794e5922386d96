//! The fleet view from what etcd holds: live hosts (their records exist only while their leases
//! do), the coordinator, each lease's age, per-host VM counts and traffic, the top aggressors
//! fleet-wide, and Prometheus `file_sd` targets. Pure: the etcd client reads the keys, this
//! turns them into the view; bad values are listed, never trusted.

use crate::record::{HostRecord, HostSummary};
use serde::Serialize;
use std::collections::HashMap;

/// Top aggressors listed.
pub const TOP: usize = 10;

/// One live host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostStatus {
    /// Name.
    pub host: String,
    /// Its resexd's pid.
    pub pid: u32,
    /// Its `/metrics` address.
    pub metrics: Option<String>,
    /// Its backend.
    pub backend: String,
    /// Coordinates the fleet.
    pub leader: bool,
    /// Its lease id.
    pub lease: i64,
    /// Seconds left on its lease (`None`: unknown).
    pub lease_ttl_left_s: Option<i64>,
    /// The lease's TTL, seconds.
    pub lease_granted_s: Option<i64>,
    /// Seconds since this resexd started.
    pub up_s: f64,
    /// Age of its last summary, ms (`None`: none yet).
    pub summary_age_ms: Option<u64>,
    /// Its VMs (in its last summary).
    pub vms: usize,
    /// Their transmit rate together, Mb/s.
    pub tx_mbps: f64,
    /// Its link utilisation, 0-1.
    pub link_util: f64,
    /// Its policy.
    pub policy: String,
}

/// A VM among the fleet's top senders.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Aggressor {
    /// Its host.
    pub host: String,
    /// The VM.
    pub vm: String,
    /// Transmit rate, Mb/s.
    pub tx_mbps: f64,
    /// Its cap, percent.
    pub cap_pct: Option<f64>,
    /// Its transmit ceiling, Mb/s.
    pub tx_max_mbps: Option<f64>,
}

/// The fleet.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FleetStatus {
    /// The key prefix read.
    pub prefix: String,
    /// The coordinator (`None`: no election won).
    pub leader: Option<String>,
    /// Live hosts, by name.
    pub hosts: Vec<HostStatus>,
    /// The fleet's top senders.
    pub top_aggressors: Vec<Aggressor>,
    /// Keys whose values were refused, and why.
    pub refused: Vec<String>,
    /// The coordinator's last round (its allocations and each link's periodic jobs and their
    /// compatibility), when one was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<crate::alloc::RoundReport>,
}

/// A host's record as read: key, value, lease.
pub type RawRecord = (String, Vec<u8>, i64);

/// A Prometheus `file_sd` target group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    /// `host:port` of `/metrics`.
    pub targets: Vec<String>,
    /// Labels.
    pub labels: HashMap<String, String>,
}

impl FleetStatus {
    /// The view from the records, summaries (key, value), the leader's name, each lease's
    /// (seconds left, granted) and the time now.
    #[must_use]
    pub fn build(
        prefix: &str,
        records: &[RawRecord],
        summaries: &[(String, Vec<u8>)],
        leader: Option<String>,
        ttls: &HashMap<i64, (i64, i64)>,
        now_unix_ms: u64,
    ) -> Self {
        let mut refused = Vec::new();
        let mut sums: HashMap<String, HostSummary> = HashMap::new();
        for (k, v) in summaries {
            match HostSummary::parse(k, v) {
                Ok(s) if *k == crate::keys::summary(prefix, &s.host) => {
                    sums.insert(s.host.clone(), s);
                }
                Ok(s) => refused.push(format!(
                    "{k}: a summary of host {:?} under another key",
                    s.host
                )),
                Err(e) => refused.push(e.to_string()),
            }
        }
        let mut hosts = Vec::new();
        let mut top = Vec::new();
        for (k, v, lease) in records {
            let r = match HostRecord::parse(k, v) {
                Ok(r) if *k == crate::keys::host(prefix, &r.host) => r,
                Ok(r) => {
                    refused.push(format!(
                        "{k}: the record of host {:?} under another key",
                        r.host
                    ));
                    continue;
                }
                Err(e) => {
                    refused.push(e.to_string());
                    continue;
                }
            };
            let s = sums.get(&r.host);
            if let Some(s) = s {
                for vm in &s.vms {
                    top.push(Aggressor {
                        host: r.host.clone(),
                        vm: vm.name.clone(),
                        tx_mbps: vm.tx_mbps,
                        cap_pct: vm.cap_pct,
                        tx_max_mbps: vm.tx_max_mbps,
                    });
                }
            }
            let ttl = ttls.get(lease);
            hosts.push(HostStatus {
                leader: leader.as_deref() == Some(r.host.as_str()),
                host: r.host,
                pid: r.pid,
                metrics: r.metrics,
                backend: r.backend,
                lease: *lease,
                lease_ttl_left_s: ttl.map(|t| t.0),
                lease_granted_s: ttl.map(|t| t.1),
                up_s: now_unix_ms.saturating_sub(r.started_unix_ms) as f64 / 1e3,
                summary_age_ms: s.map(|s| now_unix_ms.saturating_sub(s.at_unix_ms)),
                vms: s.map_or(0, |s| s.vms.len()),
                tx_mbps: s.map_or(0.0, |s| s.vms.iter().fold(0.0, |a, v| a + v.tx_mbps)),
                link_util: s.map_or(0.0, |s| s.link_util),
                policy: s.map_or_else(String::new, |s| s.policy.clone()),
            });
        }
        hosts.sort_by(|a, b| a.host.cmp(&b.host));
        top.sort_by(|a, b| b.tx_mbps.total_cmp(&a.tx_mbps).then(a.vm.cmp(&b.vm)));
        top.truncate(TOP);
        Self {
            prefix: prefix.into(),
            leader,
            hosts,
            top_aggressors: top,
            refused,
            round: None,
        }
    }

    /// Prometheus `file_sd` groups: one per live host that serves `/metrics`.
    #[must_use]
    pub fn targets(&self) -> Vec<Target> {
        self.hosts
            .iter()
            .filter_map(|h| {
                let m = h.metrics.clone()?;
                let labels = HashMap::from([
                    ("host".to_string(), h.host.clone()),
                    ("resex_backend".to_string(), h.backend.clone()),
                ]);
                Some(Target {
                    targets: vec![m],
                    labels,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(host: &str, metrics: Option<&str>) -> Vec<u8> {
        serde_json::to_vec(&HostRecord {
            host: host.into(),
            pid: 7,
            started_unix_ms: 1_000,
            metrics: metrics.map(String::from),
            backend: "local".into(),
            version: "0".into(),
        })
        .unwrap()
    }

    #[test]
    fn hosts_leader_aggressors_and_refusals() {
        let sum = br#"{"host":"h2","at_unix_ms":9000,"vms":[
            {"name":"a","tx_mbps":900.0,"cpu_pct":50.0},
            {"name":"b","tx_mbps":10.0,"cpu_pct":5.0,"cap_pct":40.0}]}"#;
        let s = FleetStatus::build(
            "/resex/v1",
            &[
                (
                    "/resex/v1/hosts/h2".into(),
                    rec("h2", Some("127.0.0.1:9464")),
                    11,
                ),
                ("/resex/v1/hosts/h1".into(), rec("h1", None), 10),
                ("/resex/v1/hosts/x".into(), b"garbage".to_vec(), 12),
            ],
            &[
                ("/resex/v1/summary/h2".into(), sum.to_vec()),
                // Another writer's summary claiming to be h2's: refused.
                ("/resex/v1/summary/zzz".into(), sum.to_vec()),
            ],
            Some("h1".into()),
            &HashMap::from([(10, (4, 5))]),
            10_000,
        );
        assert_eq!(s.hosts.len(), 2);
        assert_eq!(s.hosts[0].host, "h1");
        assert!(s.hosts[0].leader && !s.hosts[1].leader);
        assert_eq!(s.hosts[0].lease_ttl_left_s, Some(4));
        assert_eq!(s.hosts[1].vms, 2);
        assert_eq!(s.hosts[1].summary_age_ms, Some(1000));
        assert_eq!(s.top_aggressors[0].vm, "a");
        assert_eq!(s.refused.len(), 2, "{:?}", s.refused);
        let t = s.targets();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].targets, vec!["127.0.0.1:9464".to_string()]);
    }
}
