//! The agent's control channel: JSON lines between the host daemon and the guest agent.
//!
//! The channel is a byte stream: a Unix socket on the embedded host, the virtio-serial port
//! `org.resex.agent.0` on KVM. A session starts when the host connects and says [`HostMsg::Hello`];
//! the agent answers with [`GuestMsg::Register`]; the host answers [`HostMsg::Accepted`] or
//! [`HostMsg::Rejected`] (nothing changed; the agent may fix and register again). The agent
//! registers again whenever a new session starts (the daemon restarted). Every line is at most
//! [`MAX_LINE`] bytes; a longer one ends the session.

use crate::registration::{Registration, MAX_DOCUMENT_BYTES};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};

/// Protocol version of the channel.
pub const CHANNEL_VERSION: u32 = 1;
/// Longest line accepted, bytes.
pub const MAX_LINE: usize = MAX_DOCUMENT_BYTES + 256;

/// Host to guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum HostMsg {
    /// A session starts: register.
    Hello {
        /// Channel protocol version.
        version: u32,
    },
    /// The registration is in force.
    Accepted {
        /// The VM's name as the host knows it.
        vm: String,
        /// Queue pairs now monitored.
        qps: usize,
        /// Whether the mailbox is polled.
        mailbox: bool,
    },
    /// The registration was refused; nothing changed.
    Rejected {
        /// Why, for people.
        error: String,
    },
}

/// Guest to host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum GuestMsg {
    /// The guest's rings and mailbox.
    Register {
        /// The document.
        registration: Registration,
    },
}

/// A line that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// The stream failed.
    #[error("channel I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The line is longer than the limit.
    #[error("channel line longer than {0} bytes")]
    TooLong(usize),
    /// Not a message of this protocol.
    #[error("channel message is malformed: {0}")]
    Json(#[from] serde_json::Error),
}

/// Reads one line of at most `max` bytes (without the newline); `None` at end of stream.
pub fn read_line(r: &mut dyn BufRead, max: usize) -> Result<Option<Vec<u8>>, LineError> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((!line.is_empty()).then_some(line));
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max + 1 {
            return Err(LineError::TooLong(max));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if done {
            line.pop();
            return Ok(Some(line));
        }
    }
}

/// Reads and parses one message; `None` at end of stream.
pub fn read_msg<T: for<'de> Deserialize<'de>>(
    r: &mut dyn BufRead,
    max: usize,
) -> Result<Option<T>, LineError> {
    match read_line(r, max)? {
        None => Ok(None),
        Some(l) => Ok(Some(serde_json::from_slice(&l)?)),
    }
}

/// Writes one message as a line and flushes.
pub fn write_msg<T: Serialize>(w: &mut dyn Write, m: &T) -> std::io::Result<()> {
    let mut s = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    s.push(b'\n');
    w.write_all(&s)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    #[test]
    fn messages_round_trip_as_lines() {
        let mut out = Vec::new();
        write_msg(&mut out, &HostMsg::Hello { version: 1 }).unwrap();
        write_msg(&mut out, &HostMsg::Rejected { error: "no".into() }).unwrap();
        assert!(out.starts_with(br#"{"type":"hello","version":1}"#));
        let mut r = BufReader::new(&out[..]);
        let a: HostMsg = read_msg(&mut r, MAX_LINE).unwrap().unwrap();
        assert_eq!(a, HostMsg::Hello { version: 1 });
        let b: HostMsg = read_msg(&mut r, MAX_LINE).unwrap().unwrap();
        assert!(matches!(b, HostMsg::Rejected { .. }));
        assert!(read_msg::<HostMsg>(&mut r, MAX_LINE).unwrap().is_none());
    }

    #[test]
    fn bounds_lines_and_refuses_unknown_messages() {
        let long = [b'x'; 100];
        let mut r = BufReader::with_capacity(7, &long[..]);
        assert!(matches!(read_line(&mut r, 50), Err(LineError::TooLong(50))));
        let mut r = BufReader::new(&br#"{"type":"format_disk"}"#[..]);
        assert!(matches!(
            read_msg::<GuestMsg>(&mut r, MAX_LINE),
            Err(LineError::Json(_))
        ));
    }
}
