//! The scenario format: one TOML file describes a host (its link), its guests (vCPUs, RAM, the
//! BenchEx server each runs and the clients that load it from the far side of the link), the
//! pricing policy and how long to run. The embedded host (`resex host`), `resex demo` and the
//! lab read the same files (`tools/scenarios/`).
//!
//! ```toml
//! name = "pair"
//! duration_s = 20.0
//! policy = "ioshares"            # a file in policies/ (by name) or a path; omit for none
//!
//! [link]
//! preset = "testbed"             # 8 Gb/s, 1 KiB MTU, 1 us (the ResEx testbed); or "100g"
//!
//! [[guest]]
//! name = "reporting"
//! vcpus = 1
//! ram = "64MiB"
//! reports = true                 # its agent reports latency through the mailbox
//! tx_share = "2Gbit"             # optional: its VF's transmit share and ceiling
//! tx_max = "6Gbit"
//! [guest.benchex]
//! buffer = "64KiB"               # reply size
//! rate = 1000.0                  # orders/s per client; 0 = closed loop
//! clients = 1
//! # think_ms = 20.0              # a periodic job: `burst` orders, then a 20 ms pause once
//! # burst = 4                    # their replies are in (rate = 0; embedded host only)
//! ```

mod check;
mod error;

use check::unless;
pub use error::{GuestProblem, Problem, ScenarioError};
use serde::{Deserialize, Deserializer, Serialize};
use std::path::{Path, PathBuf};

/// A byte size written as people write it (`64KiB`, `2MiB`, `65536`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Size(n)),
            Raw::S(s) => resex_common::size::parse_size(&s)
                .map(Size)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A rate written as admins write it (`2Gbit`, `500Mbit`, tc units) or in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BitRate(pub u64);

impl<'de> Deserialize<'de> for BitRate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        resex_common::deserialize_bits(d).map(BitRate)
    }
}

/// A whole scenario.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name (used in paths and cgroup names).
    pub name: String,
    /// What it shows, for people.
    #[serde(default)]
    pub description: String,
    /// How long `resex host` runs it, seconds.
    #[serde(default = "default_duration")]
    pub duration_s: f64,
    /// The policy: a name of a file in `policies/` or a path; `None` runs without pricing caps.
    #[serde(default)]
    pub policy: Option<String>,
    /// The host's link.
    #[serde(default)]
    pub link: ScenarioLink,
    /// The guests (`[[guest]]`).
    #[serde(rename = "guest")]
    pub guests: Vec<GuestSpec>,
}

fn default_duration() -> f64 {
    20.0
}

/// The link presets a scenario may name (softhca's `LinkConfig::preset` knows each; a test in
/// the lab holds that).
pub const LINK_PRESETS: [&str; 2] = ["testbed", "100g"];

/// The link.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioLink {
    /// `testbed` or `100g`.
    #[serde(default = "default_preset")]
    pub preset: String,
    /// Overrides the preset's data rate, Gb/s.
    #[serde(default)]
    pub gbps: Option<f64>,
    /// Overrides the preset's base latency, us.
    #[serde(default)]
    pub base_latency_us: Option<f64>,
}

fn default_preset() -> String {
    "testbed".into()
}

impl Default for ScenarioLink {
    fn default() -> Self {
        Self {
            preset: default_preset(),
            gbps: None,
            base_latency_us: None,
        }
    }
}

/// One guest (VM) on the monitored host.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GuestSpec {
    /// Domain name.
    pub name: String,
    /// Virtual CPUs.
    #[serde(default = "one")]
    pub vcpus: u32,
    /// Guest RAM.
    #[serde(default = "default_ram")]
    pub ram: Size,
    /// Whether its agent reports latency.
    #[serde(default = "yes")]
    pub reports: bool,
    /// Seconds after the host starts at which the guest starts.
    #[serde(default)]
    pub start_s: f64,
    /// Its SLA threshold (fraction) for policies that use one.
    #[serde(default)]
    pub sla_threshold: Option<f64>,
    /// Its weight for a weighted link split.
    #[serde(default = "one_f")]
    pub weight: f64,
    /// A fixed CPU cap set when the guest starts, % of one CPU (the admin's own cap, as in the
    /// paper's Figs. 3 and 4; a policy may change it). None: uncapped.
    #[serde(default)]
    pub cap: Option<f64>,
    /// A fixed guaranteed transmit share in its port's scheduler, set when it starts (its VF's
    /// own setting, as an admin configures vport QoS; a policy may change it).
    #[serde(default)]
    pub tx_share: Option<BitRate>,
    /// A fixed transmit ceiling, set when it starts.
    #[serde(default)]
    pub tx_max: Option<BitRate>,
    /// Every latency its agent reports is multiplied by this: a lying guest (> 1) for
    /// experiments on what a policy trusts. Lab only: the embedded host refuses anything but 1.
    #[serde(default = "one_f")]
    pub report_scale: f64,
    /// Seconds after the host starts from which `report_scale` applies (a liar that first lets
    /// its honest baseline be learned).
    #[serde(default)]
    pub report_scale_from_s: f64,
    /// What the admin guarantees it on the link (its VF's `tx_share`): the one input that
    /// decides how much a policy protects it. Default: an equal split of what the guests
    /// with one configured leave of the link.
    #[serde(default)]
    pub entitlement: Option<BitRate>,
    /// The lowest CPU cap a policy may give it, % of one CPU (default: the policy's
    /// `caps.floor_pct`).
    #[serde(default)]
    pub cpu_floor: Option<f64>,
    /// What the guest is in the experiment, for `resex lab compare`'s evaluator only (no
    /// policy, host core or lab host reads it): default `victim` if it reports, else
    /// `aggressor`.
    #[serde(default)]
    pub role: Option<Role>,
    /// The BenchEx server it runs and the clients that load it.
    pub benchex: Workload,
    /// From a time on, a different workload (a latency-sensitive tenant that turns bulk). Lab
    /// only: the embedded host refuses it.
    #[serde(default)]
    pub turns: Option<Turn>,
}

/// A change of a guest's workload (`[guest.turns]`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Seconds after the host starts.
    pub at_s: f64,
    /// The reply size from then on.
    pub buffer: Size,
    /// Orders per second per client from then on (0: closed loop).
    pub rate: f64,
}

/// A guest's part in an experiment (`resex lab compare`), known to the evaluator only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Latency-sensitive: judged by its latency against its latency alone.
    Victim,
    /// Fills the link: judged by the throughput it keeps.
    Aggressor,
    /// Neither: judged only by what every guest is owed (its entitlement).
    Bystander,
}

fn one() -> u32 {
    1
}
fn one_f() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}
fn default_ram() -> Size {
    Size(64 << 20)
}

impl GuestSpec {
    /// Its role: as set, or `victim` if it reports and `aggressor` if it does not.
    pub fn role(&self) -> Role {
        self.role.unwrap_or(if self.reports {
            Role::Victim
        } else {
            Role::Aggressor
        })
    }

    /// What the admin grants it (`None` fields: the defaults).
    pub fn entitlement(&self) -> (Option<u64>, Option<f64>) {
        (self.entitlement.map(|r| r.0), self.cpu_floor)
    }

    /// Its fixed transmit limit ([`resex_common::TxLimit::NONE`] when the scenario sets none).
    pub fn tx(&self) -> resex_common::TxLimit {
        resex_common::TxLimit::new(self.tx_share.map(|r| r.0), self.tx_max.map(|r| r.0))
    }
}

/// A BenchEx workload.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Reply size.
    pub buffer: Size,
    /// Options priced per order.
    #[serde(default = "default_compute")]
    pub compute: u32,
    /// Orders per second per client (0: closed loop).
    #[serde(default = "default_rate")]
    pub rate: f64,
    /// Clients.
    #[serde(default = "one")]
    pub clients: u32,
    /// Outstanding orders per client in closed loop.
    #[serde(default = "default_window")]
    pub window: u64,
    /// Orders per client, then the clients stop (0: until the host stops).
    #[serde(default)]
    pub count: u64,
    /// Send each reply as WRITEs of this size, up to 4 outstanding, each started when an
    /// earlier one completes (0: one WRITE of the whole buffer). The lab's server model only:
    /// a training job's all-reduce in chunks, so that the monitor sees its progress interval by
    /// interval; the embedded host refuses it.
    #[serde(default)]
    pub chunk: Size,
    /// How the server and clients wait for the device: "spin" (busy-poll, the paper's BenchEx;
    /// a CPU cap then bounds the VM's I/O), "adaptive" (sleep after 200 us, for many guests
    /// on few CPUs) or "batch" (sleep after 20 us, up to 1 ms at a time: bulk and periodic
    /// jobs, whose transfers take milliseconds). On the embedded host the clients poll
    /// adaptively, or in batches when the guest does.
    #[serde(default)]
    pub polling: resex_common::Polling,
    /// A periodic job: `burst` orders, then a pause of this many ms once their replies are in
    /// (0: none). Closed loop (`rate = 0`) only; embedded host only, the lab refuses it.
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub think_ms: f64,
    /// A periodic job's orders per iteration (`window` outstanding; above 1 only with
    /// `think_ms`). Embedded host only, the lab refuses it.
    #[serde(default = "one_u64", skip_serializing_if = "is_one")]
    pub burst: u64,
}

fn one_u64() -> u64 {
    1
}
fn is_one(n: &u64) -> bool {
    *n == 1
}
fn is_zero_f(x: &f64) -> bool {
    *x == 0.0
}

impl Workload {
    /// A periodic job (`think_ms` or `burst` set), which only the embedded host runs.
    pub fn periodic(&self) -> bool {
        self.think_ms != 0.0 || self.burst != 1
    }

    /// Orders offered per second by all its clients together (0: closed loop).
    pub fn orders_per_s(&self) -> f64 {
        self.rate * f64::from(self.clients)
    }
}

fn default_compute() -> u32 {
    20
}
fn default_rate() -> f64 {
    1000.0
}
fn default_window() -> u64 {
    2
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl Scenario {
    /// Parses and validates scenario text.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    /// Reads a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ScenarioError::Parse(m) => ScenarioError::Parse(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// Checks names, sizes and rates.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let bad = |problem: Problem| ScenarioError::Invalid {
            scenario: self.name.clone(),
            problem,
        };
        if !valid_name(&self.name) {
            return Err(bad(Problem::Name));
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s <= 86_400.0) {
            return Err(bad(Problem::Duration(self.duration_s)));
        }
        if !LINK_PRESETS.contains(&self.link.preset.as_str()) {
            return Err(bad(Problem::LinkPreset(self.link.preset.clone())));
        }
        if self.guests.is_empty() {
            return Err(bad(Problem::NoGuests));
        }
        let mut names = std::collections::HashSet::new();
        for g in &self.guests {
            let problem = unless(valid_name(&g.name), || GuestProblem::Name)
                .or_else(|| unless(names.insert(g.name.as_str()), || GuestProblem::Twice))
                .or_else(|| g.problem());
            if let Some(problem) = problem {
                return Err(bad(Problem::Guest {
                    guest: g.name.clone(),
                    problem,
                }));
            }
        }
        Ok(())
    }

    /// The policy file this scenario names, resolved against `policies_dir` when it is a bare
    /// name (`ioshares` -> `policies_dir/ioshares.toml`).
    pub fn policy_path(&self, policies_dir: &Path) -> Option<PathBuf> {
        let p = self.policy.as_ref()?;
        if p.contains('/') || p.ends_with(".toml") {
            Some(PathBuf::from(p))
        } else {
            Some(policies_dir.join(format!("{p}.toml")))
        }
    }
}

#[cfg(test)]
mod tests;
