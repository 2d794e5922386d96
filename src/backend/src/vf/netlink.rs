//! One netlink request and its answers, synchronously, on a socket of its own (rtnetlink for
//! the legacy VF rate, generic netlink for devlink). Framing ([`frame`]) and reading the
//! kernel's answers ([`Answers::take`]: data, the end of a dump, an acknowledgement, an error
//! with the kernel's extended-ack message) are plain functions over bytes, tested on recorded
//! answers; [`Conn`] only moves the bytes.

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable,
    NlasIterator, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLM_F_ACK_TLVS, NLM_F_CAPPED,
};
use netlink_sys::{Socket, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// `NLMSGERR_ATTR_MSG` (linux/netlink.h): the extended ack's message.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// How long the kernel may take to answer (it answers a `doit` before `send` returns, and
/// builds a dump as it is read: this is only a guard).
const TIMEOUT: Duration = Duration::from_secs(5);
/// The largest datagram read (the kernel's dump messages are at most 32 KiB).
const MAX_DATAGRAM: usize = 1 << 20;

/// What can go wrong on the socket or in the kernel's answer.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel refused the request: its errno and extended-ack message.
    #[error("{}", refusal(*errno, msg.as_deref()))]
    Refused {
        /// The (positive) errno.
        errno: i32,
        /// The kernel's extended-ack message, when it gave one.
        msg: Option<String>,
    },
    /// The socket failed.
    #[error("netlink socket: {0}")]
    Io(#[from] std::io::Error),
    /// An answer that does not parse.
    #[error("malformed netlink answer: {0}")]
    Malformed(String),
}

impl NetlinkError {
    /// The errno of a refusal.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Refused { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// The C name of the errnos a lever meets.
fn errno_name(e: i32) -> Option<&'static str> {
    Some(match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ERANGE => "ERANGE",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOMEM => "ENOMEM",
        _ => return None,
    })
}

/// `EINVAL (Invalid argument): MESSAGE`.
fn refusal(errno: i32, msg: Option<&str>) -> String {
    let io = std::io::Error::from_raw_os_error(errno).to_string();
    let desc = io.split(" (os error").next().unwrap_or(&io);
    let head = match errno_name(errno) {
        Some(n) => format!("{n} ({desc})"),
        None => format!("errno {errno} ({desc})"),
    };
    match msg.map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => format!("{head}: {m}"),
        None => head,
    }
}

/// A request as bytes: `payload` under a netlink header with `flags` (`NLM_F_REQUEST` is
/// added) and sequence number `seq`.
pub fn frame<T: NetlinkSerializable>(payload: T, flags: u16, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = flags | netlink_packet_core::NLM_F_REQUEST;
    header.sequence_number = seq;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(payload));
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

/// One message of an answer: its type and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    /// `nlmsg_type`.
    pub kind: u16,
    /// What follows the netlink header.
    pub payload: Vec<u8>,
}

/// The answers to one request, gathered datagram by datagram.
#[derive(Debug, Default)]
pub struct Answers {
    /// The messages that carry data.
    pub msgs: Vec<Msg>,
    /// The answer is complete (an acknowledgement, or the end of a dump).
    pub done: bool,
}

impl Answers {
    /// Takes in one datagram. Messages of another sequence number are not ours and are
    /// skipped; an error ends the exchange with [`NetlinkError::Refused`].
    pub fn take(&mut self, datagram: &[u8], seq: u32) -> Result<(), NetlinkError> {
        let mut off = 0;
        while off < datagram.len() && !self.done {
            let rest = &datagram[off..];
            let b = NetlinkBuffer::new_checked(rest)
                .map_err(|e| NetlinkError::Malformed(e.to_string()))?;
            let len = b.length() as usize;
            // Each message starts 4-aligned; the last may end the datagram unpadded.
            off += len.div_ceil(4) * 4;
            if b.sequence_number() != seq {
                continue;
            }
            let payload = &rest[16..len];
            match b.message_type() {
                NLMSG_NOOP => {}
                NLMSG_DONE => {
                    // A dump that failed part-way ends with its (negative) errno here.
                    if let Some(b) = payload.get(..4) {
                        let code = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                        if code < 0 {
                            return Err(NetlinkError::Refused {
                                errno: code.checked_neg().unwrap_or(i32::MAX),
                                msg: None,
                            });
                        }
                    }
                    self.done = true;
                }
                NLMSG_ERROR => {
                    ack(payload, b.flags())?;
                    self.done = true;
                }
                kind => self.msgs.push(Msg {
                    kind,
                    payload: payload.to_vec(),
                }),
            }
        }
        Ok(())
    }
}

/// An `NLMSG_ERROR` payload: `Ok` for an acknowledgement (error 0), else the refusal with
/// the extended ack's message, if any. `flags` are the error message's own.
pub fn ack(payload: &[u8], flags: u16) -> Result<(), NetlinkError> {
    let code = payload
        .get(..4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| {
            NetlinkError::Malformed(format!("error message of {} bytes", payload.len()))
        })?;
    if code == 0 {
        return Ok(());
    }
    let msg = if flags & NLM_F_ACK_TLVS != 0 {
        // The request's header follows the code (the whole request unless capped), then the
        // attributes.
        let orig = payload
            .get(4..8)
            .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let skip = if flags & NLM_F_CAPPED != 0 {
            16
        } else {
            orig.div_ceil(4) * 4
        };
        payload.get(4 + skip..).and_then(extack_msg)
    } else {
        None
    };
    Err(NetlinkError::Refused {
        errno: code.checked_neg().unwrap_or(i32::MAX),
        msg,
    })
}

fn extack_msg(tlvs: &[u8]) -> Option<String> {
    NlasIterator::new(tlvs)
        .map_while(Result::ok)
        .find(|n| n.kind() == NLMSGERR_ATTR_MSG)
        .and_then(|n| netlink_packet_core::parse_string(n.value()).ok())
}

/// A netlink socket for one protocol (`NETLINK_ROUTE`, `NETLINK_GENERIC`).
pub struct Conn {
    sock: Socket,
    seq: u32,
}

impl Conn {
    /// Opens and binds a socket, asking for extended acks.
    pub fn open(protocol: isize) -> Result<Self, NetlinkError> {
        let mut sock = Socket::new(protocol)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        // Both are refused only by kernels before 4.12: the errors then lack their message.
        let _ = sock.set_ext_ack(true);
        let _ = sock.set_cap_ack(true);
        set_timeout(&sock, TIMEOUT)?;
        Ok(Self { sock, seq: 0 })
    }

    /// Sends a request (built by `build` with a fresh sequence number) and reads every
    /// answer up to its acknowledgement or the end of its dump (`NLM_F_ACK` or `NLM_F_DUMP`
    /// must be in the request's flags, or the kernel sends no end).
    pub fn request(
        &mut self,
        build: impl FnOnce(u32) -> Vec<u8>,
    ) -> Result<Vec<Msg>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let req = build(seq);
        tracing::trace!(target: "resex_backend::vf::wire", "sent {}", hex(&req));
        self.sock.send(&req, 0)?;
        let mut answers = Answers::default();
        while !answers.done {
            // The datagram's size first (peeked), then the datagram.
            let mut probe: Vec<u8> = Vec::new();
            let n = self
                .sock
                .recv(&mut probe, libc::MSG_PEEK | libc::MSG_TRUNC)?;
            if n > MAX_DATAGRAM {
                return Err(NetlinkError::Malformed(format!("a datagram of {n} bytes")));
            }
            let mut buf: Vec<u8> = Vec::with_capacity(n.max(16));
            self.sock.recv(&mut buf, 0)?;
            tracing::trace!(target: "resex_backend::vf::wire", "received {}", hex(&buf));
            answers.take(&buf, seq)?;
        }
        Ok(answers.msgs)
    }
}

/// Bytes as hex, for the wire trace (answers recorded from a kernel become test fixtures).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes from hex (tests' recorded answers); `None` for odd lengths or other characters.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    let s: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

#[allow(clippy::cast_possible_truncation)] // 16 bytes
const TIMEVAL_LEN: libc::socklen_t = std::mem::size_of::<libc::timeval>() as libc::socklen_t;

fn set_timeout(sock: &Socket, t: Duration) -> Result<(), NetlinkError> {
    let tv = libc::timeval {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_usec: libc::suseconds_t::from(t.subsec_micros()),
    };
    // SAFETY: the fd is the open socket `sock` owns for the whole call; `tv` is a valid
    // timeval on the stack and the length passed is its size, as SO_RCVTIMEO expects.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::addr_of!(tv).cast(),
            TIMEVAL_LEN,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().into())
    }
}
