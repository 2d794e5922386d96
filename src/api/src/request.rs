//! Requests and the answers that are not snapshots.
//!
//! A request is one JSON object per line: `{"cmd":"status"}` answers one [`Snapshot`];
//! `{"cmd":"subscribe","interval_ms":500}` streams a snapshot every interval until the client
//! goes away; `{"cmd":"pin","vm":"NAME","pct":30}` pins a VM's cap (the admin's cap wins over
//! the policy's until `"pct":null` unpins it and puts its original setting back), answered
//! `{"ok":"..."}`; `{"cmd":"rate","vm":"NAME","tx":{"share_bps":500000000,"max_bps":2000000000}}`
//! pins its transmit limit in the port's scheduler likewise (`"tx":null` unpins). Bare `status`
//! and `subscribe` lines work too. Errors: `{"error":"..."}`.
//!
//! [`Snapshot`]: crate::Snapshot

use resex_common::TxLimit;
use serde::{Deserialize, Serialize};

/// The default `subscribe` period, ms.
pub const DEFAULT_SUBSCRIBE_MS: u64 = 500;

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// One snapshot.
    Status,
    /// A snapshot every `interval_ms` (clamped by the daemon to 10 ms .. 60 s).
    Subscribe {
        /// The period, ms.
        #[serde(default = "default_every")]
        interval_ms: u64,
    },
    /// Pin a VM's cap (percent of one CPU), or with `None` unpin it.
    Pin {
        /// The VM's name.
        vm: String,
        /// The cap; `None` (JSON null) unpins.
        pct: Option<f64>,
    },
    /// Pin a VM's transmit limit (the rate lever), or with `None` unpin it.
    Rate {
        /// The VM's name.
        vm: String,
        /// The limit; `None` (JSON null) unpins.
        tx: Option<TxLimit>,
    },
}

fn default_every() -> u64 {
    DEFAULT_SUBSCRIBE_MS
}

/// A request line that is not a request: what the JSON parser said.
#[derive(Debug, thiserror::Error)]
#[error("bad request ({0}); try {{\"cmd\":\"status\"}}")]
pub struct BadRequest(#[source] serde_json::Error);

impl Request {
    /// Parses one request line (JSON, or a bare `status` / `subscribe`).
    pub fn parse(line: &str) -> Result<Request, BadRequest> {
        match line.trim() {
            "status" => return Ok(Request::Status),
            "subscribe" => {
                return Ok(Request::Subscribe {
                    interval_ms: DEFAULT_SUBSCRIBE_MS,
                })
            }
            _ => {}
        }
        serde_json::from_str(line).map_err(BadRequest)
    }

    /// The request as one line, newline included.
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|_| unreachable!("plain data"));
        s.push('\n');
        s
    }
}

/// The answer to a request that succeeded without a snapshot (`pin`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinAnswer {
    /// What was done, for people.
    pub ok: String,
}

/// The answer to a request that failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorAnswer {
    /// Why, for people.
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests() {
        assert_eq!(Request::parse("status").ok(), Some(Request::Status));
        assert_eq!(
            Request::parse(r#"{"cmd":"subscribe","interval_ms":50}"#).ok(),
            Some(Request::Subscribe { interval_ms: 50 })
        );
        assert_eq!(
            Request::parse(r#"{"cmd":"subscribe"}"#).ok(),
            Some(Request::Subscribe {
                interval_ms: DEFAULT_SUBSCRIBE_MS
            })
        );
        assert!(Request::parse(r#"{"cmd":"reboot"}"#).is_err());
        assert!(
            Request::parse(r#"{"cmd":"pin","pct":3}"#).is_err(),
            "pin names a VM"
        );
        assert!(Request::parse(r#"{"cmd":"subscribe","every":3}"#).is_err());
        assert_eq!(
            Request::parse(r#"{"cmd":"pin","vm":"a","pct":30}"#).ok(),
            Some(Request::Pin {
                vm: "a".into(),
                pct: Some(30.0)
            })
        );
        assert_eq!(
            Request::parse(r#"{"cmd":"pin","vm":"a","pct":null}"#).ok(),
            Some(Request::Pin {
                vm: "a".into(),
                pct: None
            })
        );
    }

    #[test]
    fn every_request_survives_its_own_line() {
        for r in [
            Request::Status,
            Request::Subscribe { interval_ms: 25 },
            Request::Pin {
                vm: "web \"1\"".into(),
                pct: Some(12.5),
            },
            Request::Pin {
                vm: "b".into(),
                pct: None,
            },
            Request::Rate {
                vm: "c".into(),
                tx: Some(TxLimit {
                    share_bps: None,
                    max_bps: Some(2_000_000_000),
                    weight: None,
                }),
            },
            Request::Rate {
                vm: "c".into(),
                tx: None,
            },
        ] {
            let line = r.to_line();
            assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
            assert_eq!(Request::parse(&line).ok(), Some(r));
        }
    }
}
