//! The software HCA's admin path: the host's own requests to the embedded host's softhca (not
//! a guest's), JSON lines over a Unix socket that only the host can reach (mode 0600). Today it
//! carries the rate lever: a guest port's (vport's) transmit share and ceiling.
//!
//! `{"op":"get_tx","vport":3}` answers `{"tx":{"share_bps":..,"max_bps":..}}`;
//! `{"op":"set_tx","vport":3,"tx":{...}}` sets it and answers the same; an error is
//! `{"error":"..."}`.

use resex_common::TxLimit;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};

/// The longest line either side accepts.
pub const MAX_LINE: usize = 4096;

/// A request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum AdminRequest {
    /// A vport's transmit limit.
    GetTx {
        /// The guest port.
        vport: u32,
    },
    /// Sets a vport's transmit limit ([`TxLimit::NONE`] lifts it).
    SetTx {
        /// The guest port.
        vport: u32,
        /// The limit.
        tx: TxLimit,
    },
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AdminAnswer {
    /// The vport's limit (after a `set_tx`: the one now in force).
    Tx {
        /// The limit.
        tx: TxLimit,
    },
    /// Refused.
    Error {
        /// Why.
        error: String,
    },
}

/// What went wrong on the admin path.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The stream failed or closed.
    #[error("softhca admin channel: {0}")]
    Io(#[from] std::io::Error),
    /// A line that is not of this protocol, or too long.
    #[error("softhca admin channel: {0}")]
    Protocol(String),
    /// The HCA refused.
    #[error("softhca refused: {0}")]
    Refused(String),
}

fn read_line<T: for<'de> Deserialize<'de>>(r: &mut dyn BufRead) -> Result<Option<T>, AdminError> {
    match crate::channel::read_line(r, MAX_LINE) {
        Ok(None) => Ok(None),
        Ok(Some(l)) => serde_json::from_slice(&l)
            .map(Some)
            .map_err(|e| AdminError::Protocol(e.to_string())),
        Err(crate::channel::LineError::Io(e)) => Err(AdminError::Io(e)),
        Err(e) => Err(AdminError::Protocol(e.to_string())),
    }
}

fn write_line<T: Serialize>(w: &mut dyn Write, m: &T) -> Result<(), AdminError> {
    let mut b = serde_json::to_vec(m).map_err(|e| AdminError::Protocol(e.to_string()))?;
    b.push(b'\n');
    w.write_all(&b)?;
    w.flush()?;
    Ok(())
}

/// Client side: one request, its answer.
pub fn ask(
    r: &mut dyn BufRead,
    w: &mut dyn Write,
    req: &AdminRequest,
) -> Result<TxLimit, AdminError> {
    write_line(w, req)?;
    match read_line::<AdminAnswer>(r)? {
        Some(AdminAnswer::Tx { tx }) => Ok(tx),
        Some(AdminAnswer::Error { error }) => Err(AdminError::Refused(error)),
        None => Err(AdminError::Protocol("the HCA closed the channel".into())),
    }
}

/// A vport the HCA does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no vport {0}")]
pub struct NoVport(pub u32);

/// Server side: answers requests with `handle` until the client goes away; what `handle`
/// refuses goes back as its error's text. A malformed line is answered with an error and the
/// session goes on.
pub fn serve<E: std::fmt::Display>(
    r: &mut dyn BufRead,
    w: &mut dyn Write,
    handle: &mut dyn FnMut(&AdminRequest) -> Result<TxLimit, E>,
) -> Result<(), AdminError> {
    loop {
        let answer = match read_line::<AdminRequest>(r) {
            Ok(None) => return Ok(()),
            Ok(Some(req)) => match handle(&req) {
                Ok(tx) => AdminAnswer::Tx { tx },
                Err(e) => AdminAnswer::Error {
                    error: e.to_string(),
                },
            },
            Err(AdminError::Io(e)) => return Err(AdminError::Io(e)),
            Err(e) => AdminAnswer::Error {
                error: e.to_string(),
            },
        };
        write_line(w, &answer)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor};

    #[test]
    fn requests_are_answered_and_garbage_refused_without_ending_the_session() {
        let t = TxLimit {
            share_bps: Some(7),
            max_bps: None,
            weight: None,
        };
        let input = format!(
            "{}\nnot json\n{}\n",
            serde_json::to_string(&AdminRequest::SetTx { vport: 3, tx: t }).unwrap(),
            serde_json::to_string(&AdminRequest::GetTx { vport: 9 }).unwrap()
        );
        let mut r = BufReader::new(Cursor::new(input.into_bytes()));
        let mut out = Vec::new();
        let mut set = TxLimit::NONE;
        serve(&mut r, &mut out, &mut |req| match req {
            AdminRequest::SetTx { vport: 3, tx } => {
                set = *tx;
                Ok(*tx)
            }
            AdminRequest::GetTx { vport } => Err(NoVport(*vport)),
            AdminRequest::SetTx { vport, .. } => Err(NoVport(*vport)),
        })
        .unwrap();
        assert_eq!(set, t);
        let lines: Vec<AdminAnswer> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0], AdminAnswer::Tx { tx: t });
        assert!(matches!(&lines[1], AdminAnswer::Error { .. }));
        assert_eq!(
            lines[2],
            AdminAnswer::Error {
                error: "no vport 9".into()
            }
        );
    }
}
