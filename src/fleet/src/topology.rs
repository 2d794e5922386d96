//! The fabric the coordinator allocates over (`PREFIX/topology`): the shared links and which
//! hosts' traffic crosses each. The admin writes it
//! (`resex fleet topology set FILE.toml`); the coordinator reads it every round. A value that
//! is not a valid topology is refused with the reason (the round allocates nothing).
//!
//! ```toml
//! alpha = 0.5                 # fairness (DRUM's x-step utility), 0.1..=10; 1 = proportional
//! valid_s = 5                 # an allocation lapses this long after it is written
//! [compat]                    # adaptive unfairness between compatible periodic jobs
//! adaptive = true             # experimental, off by default: see docs/fleet.md
//! threshold = 0.9             # a link's jobs are compatible from this circle score
//! gain = 10.0                 # a job's weight: 1 + gain x its progress in its arc
//! [[link]]
//! name = "tor1-up"
//! capacity_mbps = 10000
//! hosts = ["node-1", "node-2"]
//! ```

use crate::error::{FleetError, TopologyError};
use crate::keys;
use serde::{Deserialize, Serialize};

/// The largest topology value accepted, bytes.
pub const MAX_TOPOLOGY_BYTES: usize = 1536 << 10;
/// The most links.
pub const MAX_LINKS: usize = 4096;

/// One shared link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopoLink {
    /// Its name.
    pub name: String,
    /// Capacity, Mb/s.
    pub capacity_mbps: f64,
    /// The hosts whose traffic crosses it.
    pub hosts: Vec<String>,
}

/// `[weights]`, from topologies written before entitlements: read, checked, and **ignored**.
/// A VM weighs in the fleet's split by its entitlement (what the admin grants it), never by
/// whether it reports its latency: running the agent buys no share (see `crate::plan`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    /// Was: a VM that reports its latency. Ignored.
    #[serde(default = "Weights::reporting")]
    pub reporting: f64,
    /// Was: any other VM. Ignored.
    #[serde(default = "Weights::bulk")]
    pub bulk: f64,
}

impl Weights {
    fn reporting() -> f64 {
        10.0
    }
    fn bulk() -> f64 {
        1.0
    }
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            reporting: Self::reporting(),
            bulk: Self::bulk(),
        }
    }
}

/// The fabric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Fairness exponent (0.1 <= alpha <= 10).
    #[serde(default = "Topology::alpha")]
    pub alpha: f64,
    /// An allocation lapses this long after it is written, seconds (1..=600).
    #[serde(default = "Topology::valid_s")]
    pub valid_s: u64,
    /// VM weights.
    #[serde(default)]
    pub weights: Weights,
    /// A VM's demand is its measured rate times this (room to grow), Mb/s at least
    /// `min_demand_mbps`; a VM at 90% of its ceiling or more asks for `probe` times the ceiling.
    #[serde(default = "Topology::headroom")]
    pub headroom: f64,
    /// See `headroom`.
    #[serde(default = "Topology::probe")]
    pub probe: f64,
    /// See `headroom`.
    #[serde(default = "Topology::min_demand")]
    pub min_demand_mbps: f64,
    /// Adaptive unfairness between compatible periodic jobs (not written when the defaults:
    /// an older coordinator, which refuses unknown keys, still reads such a topology).
    #[serde(default, skip_serializing_if = "CompatSettings::is_default")]
    pub compat: CompatSettings,
    /// The links.
    #[serde(default, rename = "link")]
    pub links: Vec<TopoLink>,
}

/// `[compat]`: when the coordinator shifts unfairness between a link's periodic jobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompatSettings {
    /// Shift unfairness at all. Off by default: experimental (a compatible pair measured
    /// 1.19-1.29x faster than fair on real processes, 1.15-1.36x on the lab fabric, but 2%
    /// slower where the pair already took turns: docs/fleet.md).
    pub adaptive: bool,
    /// A link's jobs are compatible from this score (the circle's, rotated), 0..=1; a link
    /// already on a grid stays so down to `threshold - compat::KEEP_MARGIN` (hysteresis).
    pub threshold: f64,
    /// A job's weight is `1 + gain x progress` (0..=100; the paper's experiment: 10).
    pub gain: f64,
}

impl CompatSettings {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

impl Default for CompatSettings {
    fn default() -> Self {
        Self {
            adaptive: false,
            threshold: 0.9,
            gain: 10.0,
        }
    }
}

impl Topology {
    fn alpha() -> f64 {
        0.5
    }
    fn valid_s() -> u64 {
        5
    }
    fn headroom() -> f64 {
        1.2
    }
    fn probe() -> f64 {
        1.5
    }
    fn min_demand() -> f64 {
        10.0
    }

    /// From the admin's TOML file.
    pub fn from_toml(text: &str) -> Result<Self, FleetError> {
        let t: Self = toml::from_str(text).map_err(TopologyError::Parse)?;
        t.validate()?;
        Ok(t)
    }

    /// Read back from `key` (bounded, checked).
    pub fn parse(key: &str, v: &[u8]) -> Result<Self, FleetError> {
        let bad = |reason: String| FleetError::BadValue {
            key: key.into(),
            reason,
        };
        if v.len() > MAX_TOPOLOGY_BYTES {
            return Err(bad(format!(
                "{} bytes, more than {MAX_TOPOLOGY_BYTES}",
                v.len()
            )));
        }
        let t: Self = serde_json::from_slice(v).map_err(|e| bad(e.to_string()))?;
        t.validate().map_err(|e| bad(e.to_string()))?;
        Ok(t)
    }

    /// Refuses what cannot be allocated over.
    pub fn validate(&self) -> Result<(), FleetError> {
        let inv = |e: TopologyError| Err(FleetError::Topology(e));
        if !(self.alpha >= 0.1 && self.alpha <= 10.0) {
            return inv(TopologyError::Alpha { alpha: self.alpha });
        }
        if !(1..=600).contains(&self.valid_s) {
            return inv(TopologyError::ValidS {
                valid_s: self.valid_s,
            });
        }
        let w = self.weights;
        if !(w.reporting.is_finite() && w.reporting > 0.0 && w.bulk.is_finite() && w.bulk > 0.0) {
            return inv(TopologyError::Weights {
                reporting: w.reporting,
                bulk: w.bulk,
            });
        }
        if !((1.0..=100.0).contains(&self.headroom) && (1.0..=100.0).contains(&self.probe)) {
            return inv(TopologyError::Headroom {
                headroom: self.headroom,
                probe: self.probe,
            });
        }
        if !(self.min_demand_mbps.is_finite() && (1.0..=1e6).contains(&self.min_demand_mbps)) {
            return inv(TopologyError::MinDemand {
                min_demand_mbps: self.min_demand_mbps,
            });
        }
        let c = self.compat;
        if !((0.0..=1.0).contains(&c.threshold) && (0.0..=100.0).contains(&c.gain)) {
            return inv(TopologyError::Compat {
                threshold: c.threshold,
                gain: c.gain,
            });
        }
        if self.links.len() > MAX_LINKS {
            return inv(TopologyError::Links {
                links: self.links.len(),
                max: MAX_LINKS,
            });
        }
        let mut names = std::collections::HashSet::new();
        for l in &self.links {
            if l.name.is_empty() || l.name.len() > 128 || !names.insert(l.name.as_str()) {
                return inv(TopologyError::LinkName {
                    name: l.name.clone(),
                });
            }
            if !(l.capacity_mbps.is_finite() && l.capacity_mbps > 0.0) {
                return inv(TopologyError::Capacity {
                    link: l.name.clone(),
                    capacity_mbps: l.capacity_mbps,
                });
            }
            let mut hosts = std::collections::HashSet::new();
            for h in &l.hosts {
                if !keys::valid_host(h) || !hosts.insert(h.as_str()) {
                    return inv(TopologyError::Host {
                        link: l.name.clone(),
                        host: h.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The links each host's traffic crosses, by link index.
    #[must_use]
    pub fn paths(&self) -> std::collections::HashMap<&str, Vec<usize>> {
        let mut out: std::collections::HashMap<&str, Vec<usize>> = Default::default();
        for (i, l) in self.links.iter().enumerate() {
            for h in &l.hosts {
                out.entry(h.as_str()).or_default().push(i);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = r#"
alpha = 1.0
[[link]]
name = "up"
capacity_mbps = 1000
hosts = ["a", "b"]
[[link]]
name = "spine"
capacity_mbps = 5000
hosts = ["a"]
"#;

    #[test]
    fn a_topology_reads_from_toml_and_round_trips_through_json() {
        let t = Topology::from_toml(T).unwrap();
        assert_eq!(t.valid_s, 5);
        assert_eq!(t.weights.reporting, 10.0);
        assert_eq!(t.paths()["a"], [0, 1]);
        let back = Topology::parse("k", &serde_json::to_vec(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn bad_topologies_are_refused_with_the_reason() {
        for (bad, why) in [
            (T.replace("1000", "0"), "capacity"),
            (T.replace("\"b\"", "\"a\""), "twice"),
            (T.replace("\"spine\"", "\"up\""), "repeated"),
            (T.replace("alpha = 1.0", "alpha = -1"), "alpha"),
            (T.replace("\"b\"", "\"b/c\""), "invalid"),
            (format!("valid_s = 0\n{T}"), "valid_s"),
            (format!("bogus = 1\n{T}"), "bogus"),
        ] {
            let e = Topology::from_toml(&bad).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
        let e = Topology::from_toml(&T.replace("1000", "0")).unwrap_err();
        assert!(
            matches!(
                &e,
                FleetError::Topology(TopologyError::Capacity { link, capacity_mbps })
                    if link == "up" && *capacity_mbps == 0.0
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "fleet: topology: link up: capacity_mbps must be positive"
        );
        assert!(matches!(
            Topology::from_toml(&format!("bogus = 1\n{T}")),
            Err(FleetError::Topology(TopologyError::Parse(_)))
        ));
        assert!(Topology::parse("k", b"{").is_err());
        assert!(Topology::parse("k", &vec![b' '; MAX_TOPOLOGY_BYTES + 1]).is_err());
    }
}
