//! `[fleet]`: how a resexd joins the fleet.
//!
//! ```toml
//! [fleet]
//! endpoints = ["http://127.0.0.1:2379"]
//! host = "node-1"        # default: the machine's host name
//! ttl_s = 5              # the lease: a host silent this long is gone
//! publish_ms = 1000      # per-VM summaries
//! # TLS (https:// endpoints), and etcd's auth, passed through to the client:
//! # ca_file = "/etc/etcd/ca.pem"; cert_file = "client.pem"; key_file = "client-key.pem"
//! # user = "resex"; password = "..."
//! ```

use crate::error::{FleetError, SettingError};
use crate::keys;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[fleet]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// etcd's client URLs.
    pub endpoints: Vec<String>,
    /// This host's name in the fleet (default: the machine's host name).
    #[serde(default)]
    pub host: Option<String>,
    /// The key prefix (several fleets may share one etcd).
    #[serde(default = "FleetConfig::default_prefix")]
    pub prefix: String,
    /// The lease's TTL, seconds (2..=60): a host that stops keeping it alive is gone after this.
    #[serde(default = "FleetConfig::default_ttl")]
    pub ttl_s: i64,
    /// Summaries are published this often, ms (100..=60000).
    #[serde(default = "FleetConfig::default_publish")]
    pub publish_ms: u64,
    /// etcd user (with `password`), passed through to etcd's auth.
    #[serde(default)]
    pub user: Option<String>,
    /// etcd password.
    #[serde(default)]
    pub password: Option<String>,
    /// TLS: the CA that signed etcd's server certificate (PEM); endpoints are then `https://`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// TLS client certificate (PEM), with `key_file`, for etcd's `--client-cert-auth`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The name etcd's certificate is checked against (default: the endpoint's host).
    #[serde(default)]
    pub tls_domain: Option<String>,
}

impl FleetConfig {
    fn default_prefix() -> String {
        keys::DEFAULT_PREFIX.into()
    }
    fn default_ttl() -> i64 {
        5
    }
    fn default_publish() -> u64 {
        1000
    }

    /// A configuration for `endpoints` with every default.
    #[must_use]
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            host: None,
            prefix: Self::default_prefix(),
            ttl_s: Self::default_ttl(),
            publish_ms: Self::default_publish(),
            user: None,
            password: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            tls_domain: None,
        }
    }

    /// The host's name: the configured one, else the machine's.
    pub fn host_name(&self) -> Result<String, FleetError> {
        let name = match &self.host {
            Some(h) => h.clone(),
            None => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .map_err(SettingError::NoHostName)?,
        };
        if keys::valid_host(&name) {
            Ok(name)
        } else {
            Err(SettingError::HostName { name }.into())
        }
    }

    /// Refuses TLS settings that cannot work (every connection checks them).
    pub fn check_tls(&self) -> Result<(), FleetError> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(SettingError::KeyPair.into());
        }
        if (self.cert_file.is_some() || self.tls_domain.is_some()) && self.ca_file.is_none() {
            return Err(SettingError::TlsWithoutCa.into());
        }
        let https = self
            .endpoints
            .iter()
            .filter(|e| e.starts_with("https://"))
            .count();
        if self.ca_file.is_some() && https != self.endpoints.len() {
            return Err(SettingError::PlainEndpoint.into());
        }
        if self.ca_file.is_none() && https > 0 {
            return Err(SettingError::HttpsWithoutCa.into());
        }
        Ok(())
    }

    /// Refuses what cannot work.
    pub fn validate(&self) -> Result<(), FleetError> {
        if self.endpoints.is_empty() || self.endpoints.iter().any(|e| e.trim().is_empty()) {
            return Err(SettingError::Endpoints.into());
        }
        if !(2..=60).contains(&self.ttl_s) {
            return Err(SettingError::Ttl { ttl_s: self.ttl_s }.into());
        }
        if !(100..=60_000).contains(&self.publish_ms) {
            return Err(SettingError::Publish {
                publish_ms: self.publish_ms,
            }
            .into());
        }
        let reserved = self
            .prefix
            .split('/')
            .any(|seg| keys::SEGMENTS.contains(&seg));
        if !self.prefix.starts_with('/')
            || self.prefix.ends_with('/')
            || self.prefix.len() > 256
            || reserved
        {
            return Err(SettingError::Prefix {
                prefix: self.prefix.clone(),
            }
            .into());
        }
        self.check_tls()?;
        if self.user.is_some() != self.password.is_some() {
            return Err(SettingError::Credentials.into());
        }
        self.host_name().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_refusals() {
        let c: FleetConfig =
            serde_json::from_str(r#"{"endpoints":["http://127.0.0.1:2379"],"host":"h1"}"#).unwrap();
        assert_eq!(c.ttl_s, 5);
        assert_eq!(c.publish_ms, 1000);
        assert_eq!(c.prefix, "/resex/v1");
        c.validate().unwrap();
        for bad in [
            FleetConfig {
                ttl_s: 1,
                ..c.clone()
            },
            FleetConfig {
                publish_ms: 10,
                ..c.clone()
            },
            FleetConfig {
                endpoints: vec![],
                ..c.clone()
            },
            FleetConfig {
                host: Some("a b".into()),
                ..c.clone()
            },
            FleetConfig {
                prefix: "x/".into(),
                ..c.clone()
            },
            FleetConfig {
                user: Some("u".into()),
                ..c.clone()
            },
            FleetConfig {
                ca_file: Some("ca.pem".into()),
                ..c.clone()
            },
            FleetConfig {
                endpoints: vec!["https://127.0.0.1:2379".into()],
                ..c.clone()
            },
            FleetConfig {
                endpoints: vec!["https://127.0.0.1:2379".into()],
                ca_file: Some("ca.pem".into()),
                cert_file: Some("c.pem".into()),
                ..c.clone()
            },
            FleetConfig {
                tls_domain: Some("etcd".into()),
                ..c.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let e = FleetConfig {
            ttl_s: 1,
            ..c.clone()
        }
        .validate()
        .unwrap_err();
        assert!(
            matches!(e, FleetError::Setting(SettingError::Ttl { ttl_s: 1 })),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "fleet: `ttl_s` 1 must be 2..=60");
        let e = FleetConfig {
            endpoints: vec!["https://127.0.0.1:2379".into()],
            ..c
        }
        .validate()
        .unwrap_err();
        assert!(
            matches!(e, FleetError::Setting(SettingError::HttpsWithoutCa)),
            "{e:?}"
        );
    }
}
