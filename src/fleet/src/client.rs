//! The etcd client (feature `etcd`): connecting (auth, TLS), paged reads, and [`Fleet`], the
//! fleet as an admin reads and writes it (the view, the topology, the allocations). The
//! coordinator ([`crate::coord`]) and a host's membership ([`crate::member`]) build on it;
//! [`crate::etcd`] is the public face of all three.

use crate::alloc::{Allocation, RoundReport};
use crate::config::FleetConfig;
use crate::error::FleetError;
use crate::keys;
use crate::record::HostSummary;
use crate::status::FleetStatus;
use crate::topology::Topology;
use etcd_client::{Client, ConnectOptions, GetOptions, LeaseTimeToLiveOptions};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Unix time, ms.
#[must_use]
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, FleetError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| FleetError::Etcd(format!("runtime: {e}")))
}

fn options(cfg: &FleetConfig) -> ConnectOptions {
    let t = Duration::from_millis(u64::try_from(cfg.ttl_s).unwrap_or(5) * 1000 / 3);
    // No request timeout on the client: a campaign waits as long as another host leads. Each
    // other call has its own timeout (a third of the TTL).
    let mut o = ConnectOptions::new()
        .with_connect_timeout(t)
        .with_keep_alive(Duration::from_secs(1), t)
        .with_keep_alive_while_idle(true);
    if let (Some(u), Some(p)) = (&cfg.user, &cfg.password) {
        o = o.with_user(u.clone(), p.clone());
    }
    o
}

/// The TLS settings of `cfg` (none without `ca_file`).
fn tls(cfg: &FleetConfig) -> Result<Option<etcd_client::TlsOptions>, FleetError> {
    cfg.check_tls()?;
    let Some(ca) = &cfg.ca_file else {
        return Ok(None);
    };
    let read = |p: &std::path::Path, setting: &'static str| {
        std::fs::read(p).map_err(|source| FleetError::TlsFile {
            setting,
            path: p.to_owned(),
            source,
        })
    };
    let mut t = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read(ca, "ca_file")?));
    if let (Some(c), Some(k)) = (&cfg.cert_file, &cfg.key_file) {
        t = t.identity(etcd_client::Identity::from_pem(
            read(c, "cert_file")?,
            read(k, "key_file")?,
        ));
    }
    if let Some(d) = &cfg.tls_domain {
        t = t.domain_name(d.clone());
    }
    Ok(Some(t))
}

pub(crate) async fn connect(cfg: &FleetConfig) -> Result<Client, FleetError> {
    let mut o = options(cfg);
    if let Some(t) = tls(cfg)? {
        o = o.with_tls(t);
    }
    Client::connect(cfg.endpoints.clone(), Some(o))
        .await
        .map_err(|e| FleetError::Unreachable {
            endpoints: cfg.endpoints.join(","),
            reason: e.to_string(),
        })
}

/// The fleet as a reader sees it (the admin's view).
pub struct Fleet {
    rt: tokio::runtime::Runtime,
    client: Client,
    prefix: String,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fleet {{ prefix: {} }}", self.prefix)
    }
}

impl Fleet {
    /// Connects to etcd (a clear error when it is not reachable).
    pub fn connect(cfg: &FleetConfig) -> Result<Self, FleetError> {
        let rt = runtime()?;
        let client = rt.block_on(connect(cfg))?;
        let mut f = Self {
            rt,
            client,
            prefix: cfg.prefix.clone(),
        };
        // The client connects lazily: ask once, so an absent etcd is reported here.
        let endpoints = cfg.endpoints.join(",");
        f.rt.block_on(f.client.status())
            .map_err(|e| FleetError::Unreachable {
                endpoints,
                reason: e.to_string(),
            })?;
        Ok(f)
    }

    /// The coordinator's name, if any host won the election.
    pub fn leader(&mut self) -> Result<Option<String>, FleetError> {
        let name = keys::election(&self.prefix);
        match self.rt.block_on(self.client.leader(name)) {
            Ok(r) => Ok(r.kv().and_then(|kv| kv.value_str().ok().map(String::from))),
            // etcd answers "election: no leader" as an error.
            Err(e) if e.to_string().contains("no leader") => Ok(None),
            Err(e) => Err(etcd(e)),
        }
    }

    /// Every key under `prefix`, in pages (see [`crate::coord`]).
    fn get_prefix(&mut self, prefix: &str) -> Result<Vec<(String, Vec<u8>, i64)>, FleetError> {
        self.rt.block_on(get_prefix(&mut self.client, prefix))
    }

    /// Writes the topology the coordinator allocates over (checked first).
    pub fn set_topology(&mut self, t: &Topology) -> Result<(), FleetError> {
        t.validate()?;
        let v = serde_json::to_vec(t).map_err(|e| FleetError::Etcd(e.to_string()))?;
        self.rt
            .block_on(self.client.put(keys::topology(&self.prefix), v, None))
            .map_err(etcd)?;
        Ok(())
    }

    /// The topology, if one is set (a bad value is an error that says why).
    pub fn topology(&mut self) -> Result<Option<Topology>, FleetError> {
        let k = keys::topology(&self.prefix);
        let r = self
            .rt
            .block_on(self.client.get(k.clone(), None))
            .map_err(etcd)?;
        r.kvs()
            .first()
            .map(|kv| Topology::parse(&k, kv.value()))
            .transpose()
    }

    /// Every host's last summary (refused values skipped).
    pub fn summaries(&mut self) -> Result<Vec<HostSummary>, FleetError> {
        let p = self.prefix.clone();
        Ok(self
            .get_prefix(&keys::summaries(&p))?
            .into_iter()
            .filter_map(|(k, v, _)| {
                HostSummary::parse(&k, &v)
                    .ok()
                    .filter(|s| k == keys::summary(&p, &s.host))
            })
            .collect())
    }

    /// Every allocation the coordinator wrote, and its last round.
    pub fn allocations(&mut self) -> Result<(Vec<Allocation>, Option<RoundReport>), FleetError> {
        let mut out = Vec::new();
        let p = self.prefix.clone();
        for (k, v, _) in self.get_prefix(&keys::allocs(&p))? {
            // Under its own host's key only (a value elsewhere claiming a host is not shown).
            if let Ok(a) = Allocation::parse(&k, &v) {
                if k == keys::alloc(&p, &a.host) {
                    out.push(a);
                }
            }
        }
        Ok((out, self.round()?))
    }

    /// The coordinator's last round report (None: none, or a value that is not one).
    pub fn round(&mut self) -> Result<Option<RoundReport>, FleetError> {
        let k = keys::round(&self.prefix);
        let r = self
            .rt
            .block_on(self.client.get(k.clone(), None))
            .map_err(etcd)?;
        Ok(r.kvs()
            .first()
            .and_then(|kv| RoundReport::parse(&k, kv.value()).ok()))
    }

    /// The fleet view.
    pub fn status(&mut self) -> Result<FleetStatus, FleetError> {
        let prefix = self.prefix.clone();
        let records = self.get_prefix(&keys::hosts(&prefix))?;
        let summaries: Vec<(String, Vec<u8>)> = self
            .get_prefix(&keys::summaries(&prefix))?
            .into_iter()
            .map(|(k, v, _)| (k, v))
            .collect();
        let mut ttls = HashMap::new();
        for (_, _, lease) in &records {
            if *lease == 0 || ttls.contains_key(lease) {
                continue;
            }
            let r = self.rt.block_on(
                self.client
                    .lease_time_to_live(*lease, Some(LeaseTimeToLiveOptions::new())),
            );
            if let Ok(r) = r {
                ttls.insert(*lease, (r.ttl(), r.granted_ttl()));
            }
        }
        let leader = self.leader()?;
        let mut s = FleetStatus::build(&prefix, &records, &summaries, leader, &ttls, unix_ms());
        s.round = self.round()?;
        Ok(s)
    }
}

/// The most bytes one read of a prefix returns.
pub const MAX_BYTES: usize = 256 << 20;

/// Keys per read (each answer must stay under gRPC's 4 MiB limit: a 64-VM summary is ~9 KB;
/// a page that is too large is read again in halves).
pub const PAGE: i64 = 128;

/// The most keys one read of a prefix returns (a hostile writer cannot make it unbounded).
pub const MAX_KEYS: usize = 1_000_000;

pub(crate) fn etcd(e: etcd_client::Error) -> FleetError {
    FleetError::Etcd(e.to_string())
}

/// Every key under `prefix` (key, value, lease), in pages of [`PAGE`], at most [`MAX_KEYS`].
pub(crate) async fn get_prefix(
    c: &mut Client,
    prefix: &str,
) -> Result<Vec<(String, Vec<u8>, i64)>, FleetError> {
    let mut end = prefix.as_bytes().to_vec();
    // The range end of a prefix: its last byte plus one (prefixes here end in '/').
    if let Some(b) = end.last_mut() {
        *b += 1;
    }
    let mut from = prefix.as_bytes().to_vec();
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut page = PAGE;
    loop {
        let opts = GetOptions::new().with_range(end.clone()).with_limit(page);
        let r = match c.get(from.clone(), Some(opts)).await {
            Ok(r) => r,
            // Large values (up to etcd's 1.5 MiB request limit each): smaller pages, down to
            // one key, which always fits.
            Err(e) if page > 1 && e.to_string().contains("too large") => {
                page /= 2;
                continue;
            }
            Err(e) => return Err(etcd(e)),
        };
        for kv in r.kvs() {
            bytes += kv.key().len() + kv.value().len();
            out.push((
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.value().to_vec(),
                kv.lease(),
            ));
        }
        match r.kvs().last() {
            Some(last) if r.more() && out.len() < MAX_KEYS && bytes < MAX_BYTES => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok(out),
        }
    }
}
