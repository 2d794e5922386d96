//! Why the fleet cannot be reached or used.

/// A fleet failure.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// This build has no etcd client.
    #[error(
        "fleet mode needs the etcd client, not in this build: rebuild with `--features fleet` \
         (Debian: apt-get install protobuf-compiler; run etcd with apt-get install etcd-server)"
    )]
    NotBuilt,
    /// etcd did not answer.
    #[error("etcd at {endpoints} is not reachable: {reason} (is etcd running? `etcd --listen-client-urls ...`, Debian package etcd-server)")]
    Unreachable {
        /// The endpoints tried.
        endpoints: String,
        /// What the client said.
        reason: String,
    },
    /// etcd answered with an error.
    #[error("etcd: {0}")]
    Etcd(String),
    /// A value in etcd that is not what resex writes (another tool's key, a hostile writer).
    #[error("{key}: {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// Why it was refused.
        reason: String,
    },
    /// A `[fleet]` setting that cannot work.
    #[error("fleet: {0}")]
    Setting(SettingError),
    /// An admin's topology that cannot be allocated over.
    #[error("fleet: topology: {0}")]
    Topology(TopologyError),
    /// A TLS file (`ca_file`, `cert_file`, `key_file`) that cannot be read.
    #[error("fleet: {setting} {}: {source}", path.display())]
    TlsFile {
        /// The setting naming it.
        setting: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No etcd binary to start a local etcd with.
    #[error("fleet: the etcd binary is not installed: apt-get install etcd-server")]
    NotInstalled,
    /// The coordinator's DRUM round refused the problem built from the topology.
    #[cfg(feature = "coordinator")]
    #[error("fleet: allocation: {0}")]
    Allocation(#[source] resex_drum::DrumError),
}

/// A `[fleet]` setting that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    /// No `host` given, and the machine's host name cannot be read.
    #[error("no `host` given and no host name: {0}")]
    NoHostName(#[source] std::io::Error),
    /// A host name that cannot be a key segment.
    #[error("host name {name:?} must be 1 to 128 of [A-Za-z0-9._-]")]
    HostName {
        /// The name.
        name: String,
    },
    /// No etcd endpoint, or an empty one.
    #[error("`endpoints` must list etcd's client URLs")]
    Endpoints,
    /// A lease TTL outside 2..=60 s.
    #[error("`ttl_s` {ttl_s} must be 2..=60")]
    Ttl {
        /// The TTL given, s.
        ttl_s: i64,
    },
    /// A publishing period outside 100..=60000 ms.
    #[error("`publish_ms` {publish_ms} must be 100..=60000")]
    Publish {
        /// The period given, ms.
        publish_ms: u64,
    },
    /// A key prefix that is not absolute, ends with `/`, is too long or has a reserved segment.
    #[error(
        "`prefix` {prefix:?} must start with / and not end with one, and have no {} segment \
         (one fleet's keys would sit in another's)",
        crate::keys::SEGMENTS.join(", ")
    )]
    Prefix {
        /// The prefix given.
        prefix: String,
    },
    /// One of `user` and `password` without the other.
    #[error("`user` and `password` go together")]
    Credentials,
    /// One of `cert_file` and `key_file` without the other.
    #[error("`cert_file` and `key_file` go together")]
    KeyPair,
    /// A client certificate or a TLS domain without `ca_file`.
    #[error("`cert_file` and `tls_domain` need `ca_file` (TLS)")]
    TlsWithoutCa,
    /// `ca_file` with an `http://` endpoint.
    #[error("with `ca_file` every endpoint must be https://")]
    PlainEndpoint,
    /// An `https://` endpoint without `ca_file`.
    #[error("an https:// endpoint needs `ca_file` (the CA of etcd's certificate)")]
    HttpsWithoutCa,
}

/// A topology that cannot be allocated over.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The TOML does not parse or has unknown fields.
    #[error("{0}")]
    Parse(#[source] toml::de::Error),
    /// The fairness exponent outside [0.1, 10].
    #[error("alpha {alpha} must be in [0.1, 10]")]
    Alpha {
        /// The exponent given.
        alpha: f64,
    },
    /// A validity outside 1..=600 s.
    #[error("valid_s {valid_s} must be 1..=600")]
    ValidS {
        /// The validity given, s.
        valid_s: u64,
    },
    /// A class weight that is not a positive number.
    #[error("weights must be positive")]
    Weights {
        /// The reporting class's weight.
        reporting: f64,
        /// The bulk class's weight.
        bulk: f64,
    },
    /// `[compat]` out of range.
    #[error("[compat] threshold {threshold} must be 0..=1 and gain {gain} 0..=100")]
    Compat {
        /// The threshold given.
        threshold: f64,
        /// The gain given.
        gain: f64,
    },
    /// `headroom` or `probe` outside [1, 100].
    #[error("headroom and probe must be in [1, 100]")]
    Headroom {
        /// The headroom given.
        headroom: f64,
        /// The probe given.
        probe: f64,
    },
    /// `min_demand_mbps` outside [1, 1e6].
    #[error("min_demand_mbps must be in [1, 1e6]")]
    MinDemand {
        /// The value given, Mb/s.
        min_demand_mbps: f64,
    },
    /// More links than a topology may have.
    #[error("{links} links, more than {max}")]
    Links {
        /// Links given.
        links: usize,
        /// The most.
        max: usize,
    },
    /// A link name that is empty, longer than 128 bytes or used twice.
    #[error("link name {name:?} empty, too long or repeated")]
    LinkName {
        /// The name.
        name: String,
    },
    /// A link capacity that is not a positive number.
    #[error("link {link}: capacity_mbps must be positive")]
    Capacity {
        /// The link.
        link: String,
        /// The capacity given, Mb/s.
        capacity_mbps: f64,
    },
    /// A link's host that is not a valid host name or is listed twice.
    #[error("link {link}: host {host:?} invalid or listed twice")]
    Host {
        /// The link.
        link: String,
        /// The host.
        host: String,
    },
}

impl From<SettingError> for FleetError {
    fn from(e: SettingError) -> Self {
        FleetError::Setting(e)
    }
}

impl From<TopologyError> for FleetError {
    fn from(e: TopologyError) -> Self {
        FleetError::Topology(e)
    }
}
