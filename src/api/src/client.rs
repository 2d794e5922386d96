//! The client end of the API: JSON lines over the Unix socket (see the README's API section).

use crate::request::{ErrorAnswer, PinAnswer, Request};
use crate::Snapshot;
use resex_common::TxLimit;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the API could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The socket could not be reached.
    #[error("cannot connect to the daemon at {path} (is resexd running? is this the right --api socket? it is root-only)")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The connection failed.
    #[error("daemon connection: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon closed the connection.
    #[error("the daemon closed the connection")]
    Closed,
    /// The daemon answered an error.
    #[error("the daemon refused: {0}")]
    Refused(String),
    /// An answer that is not a snapshot.
    #[error("unreadable answer from the daemon: {0}")]
    Parse(String),
}

/// The longest line accepted from the daemon (a snapshot of thousands of VMs fits).
const MAX_LINE: usize = 64 << 20;

/// A connection to the daemon's API.
#[derive(Debug)]
pub struct ApiClient {
    r: BufReader<UnixStream>,
    w: UnixStream,
    line: String,
}

impl ApiClient {
    /// Connects to the socket at `path`.
    pub fn connect(path: &Path) -> Result<Self, ApiError> {
        let s = UnixStream::connect(path).map_err(|source| ApiError::Connect {
            path: path.to_owned(),
            source,
        })?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let w = s.try_clone()?;
        Ok(Self {
            r: BufReader::new(s),
            w,
            line: String::new(),
        })
    }

    /// One snapshot.
    pub fn status(&mut self) -> Result<Snapshot, ApiError> {
        self.w.write_all(Request::Status.to_line().as_bytes())?;
        self.next_snapshot()
    }

    /// Asks for a snapshot every `interval`; read them with [`Self::next_snapshot`].
    pub fn subscribe(&mut self, interval: Duration) -> Result<(), ApiError> {
        let interval_ms = u64::try_from(interval.as_millis().max(1)).unwrap_or(u64::MAX);
        self.w
            .write_all(Request::Subscribe { interval_ms }.to_line().as_bytes())?;
        Ok(())
    }

    /// Pins a VM's cap (percent of one CPU) or, with `None`, unpins it; the daemon's answer.
    pub fn pin(&mut self, vm: &str, pct: Option<f64>) -> Result<String, ApiError> {
        self.ask(&Request::Pin {
            vm: vm.to_owned(),
            pct,
        })
    }

    /// Pins a VM's transmit limit or, with `None`, unpins it; the daemon's answer.
    pub fn rate(&mut self, vm: &str, tx: Option<TxLimit>) -> Result<String, ApiError> {
        self.ask(&Request::Rate {
            vm: vm.to_owned(),
            tx,
        })
    }

    /// A request answered `{"ok": ...}` or `{"error": ...}`.
    fn ask(&mut self, req: &Request) -> Result<String, ApiError> {
        self.w.write_all(req.to_line().as_bytes())?;
        self.line.clear();
        if self.r.read_line(&mut self.line)? == 0 {
            return Err(ApiError::Closed);
        }
        if let Ok(e) = serde_json::from_str::<ErrorAnswer>(&self.line) {
            return Err(ApiError::Refused(e.error));
        }
        serde_json::from_str::<PinAnswer>(&self.line)
            .map(|a| a.ok)
            .map_err(|_| ApiError::Parse(format!("unexpected answer: {}", self.line.trim())))
    }

    /// The next snapshot on the connection.
    pub fn next_snapshot(&mut self) -> Result<Snapshot, ApiError> {
        self.line.clear();
        let n = (&mut self.r)
            .take(MAX_LINE as u64)
            .read_line(&mut self.line)?;
        if n == 0 {
            return Err(ApiError::Closed);
        }
        parse_answer(&self.line)
    }
}

/// A line from the daemon: a snapshot, or `{"error": ...}`.
pub fn parse_answer(line: &str) -> Result<Snapshot, ApiError> {
    if let Ok(e) = serde_json::from_str::<ErrorAnswer>(line) {
        return Err(ApiError::Refused(e.error));
    }
    serde_json::from_str(line).map_err(|e| {
        if serde_json::from_str::<serde_json::Value>(line).is_ok() {
            ApiError::Parse(e.to_string())
        } else {
            ApiError::Parse(format!(
                "not JSON: {}",
                line.chars().take(80).collect::<String>()
            ))
        }
    })
}

use std::io::Read as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_snapshots_are_told_apart() {
        assert!(
            matches!(parse_answer("{\"error\":\"bad\"}"), Err(ApiError::Refused(e)) if e == "bad")
        );
        let s = serde_json::to_string(&Snapshot::default()).unwrap();
        assert_eq!(parse_answer(&s).unwrap(), Snapshot::default());
        assert!(matches!(parse_answer("garbage"), Err(ApiError::Parse(_))));
    }
}
