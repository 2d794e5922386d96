//! The daemon API client: JSON lines over the Unix socket (see the README's API section).

use crate::Snapshot;
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
        self.w.write_all(b"{\"cmd\":\"status\"}\n")?;
        self.next_snapshot()
    }

    /// Asks for a snapshot every `interval`; read them with [`Self::next_snapshot`].
    pub fn subscribe(&mut self, interval: Duration) -> Result<(), ApiError> {
        let ms = interval.as_millis().max(1);
        writeln!(self.w, "{{\"cmd\":\"subscribe\",\"interval_ms\":{ms}}}")?;
        Ok(())
    }

    /// Pins a VM's cap (percent of one CPU) or, with `None`, unpins it; the daemon's answer.
    pub fn pin(&mut self, vm: &str, pct: Option<f64>) -> Result<String, ApiError> {
        let req = serde_json::json!({ "cmd": "pin", "vm": vm, "pct": pct });
        writeln!(self.w, "{req}")?;
        self.line.clear();
        if self.r.read_line(&mut self.line)? == 0 {
            return Err(ApiError::Closed);
        }
        let v: serde_json::Value =
            serde_json::from_str(&self.line).map_err(|e| ApiError::Parse(e.to_string()))?;
        if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
            return Err(ApiError::Refused(e.to_owned()));
        }
        v.get("ok")
            .and_then(|m| m.as_str())
            .map(str::to_owned)
            .ok_or_else(|| ApiError::Parse(format!("unexpected answer: {}", self.line.trim())))
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
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
        if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
            return Err(ApiError::Refused(e.to_owned()));
        }
        return serde_json::from_value(v).map_err(|e| ApiError::Parse(e.to_string()));
    }
    Err(ApiError::Parse(format!(
        "not JSON: {}",
        line.chars().take(80).collect::<String>()
    )))
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
