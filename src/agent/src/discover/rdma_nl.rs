//! The kernel's RDMA netlink (`NETLINK_RDMA`, the interface `rdma resource show qp` reads): which
//! process owns which QP, so that discovered send and receive queues are tied to their QPNs.
//!
//! Two dumps: `RDMA_NLDEV_CMD_GET` lists the devices (a QP dump needs a device index), then
//! `RDMA_NLDEV_CMD_RES_QP_GET` per device lists its QPs. RDMA netlink messages carry their
//! attributes right after the netlink header (no generic-netlink header). Replies are parsed
//! with every length checked: a short or inconsistent message ends the parse, never a panic.

use std::collections::BTreeMap;

/// `NETLINK_RDMA` (linux/netlink.h).
const NETLINK_RDMA: i32 = 20;
/// `RDMA_NL_NLDEV`, the device interface's client number.
const RDMA_NL_NLDEV: u16 = 5;
/// `RDMA_NLDEV_CMD_GET`.
const CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_RES_QP_GET`, `_CQ_GET`, `_SRQ_GET`.
const CMD_RES_QP_GET: u16 = 10;
const CMD_RES_CQ_GET: u16 = 12;
const CMD_RES_SRQ_GET: u16 = 23;
/// `RDMA_NLDEV_ATTR_*` (rdma/rdma_netlink.h).
const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_RES_QP: u16 = 19;
const ATTR_RES_QP_ENTRY: u16 = 20;
const ATTR_RES_LQPN: u16 = 21;
const ATTR_RES_TYPE: u16 = 26;
const ATTR_RES_PID: u16 = 28;
const ATTR_RES_CQ: u16 = 35;
const ATTR_RES_CQ_ENTRY: u16 = 36;
const ATTR_RES_SRQ: u16 = 88;
const ATTR_RES_SRQ_ENTRY: u16 = 89;
/// `NLM_F_REQUEST | NLM_F_DUMP`; `NLMSG_ERROR`, `NLMSG_DONE`.
const REQUEST_DUMP: u16 = 0x1 | 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `NLA_TYPE_MASK`: an attribute's type without the nested / byte-order flags.
const NLA_TYPE_MASK: u16 = 0x3fff;
/// The largest reply taken (the dump of one device, in pieces of at most this).
const RECV_BYTES: usize = 1 << 16;
/// The most messages one dump may return before it is given up (bounded work per scan).
const MAX_MESSAGES: usize = 4096;

/// The netlink message type of an RDMA device-interface command.
pub fn msg_type(cmd: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + cmd
}

/// One QP as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpEntry {
    /// The device's index.
    pub dev_index: u32,
    /// Its local QPN.
    pub qpn: u32,
    /// The owning process (absent for the kernel's own QPs).
    pub pid: Option<u32>,
    /// `IB_QPT_*` (2 RC, 3 UC, 4 UD, ...), if given.
    pub qp_type: Option<u8>,
}

/// Why the kernel could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel has no RDMA netlink: `ib_core` is not loaded (no RDMA device).
    #[error("RDMA netlink: the kernel has none (ib_core is not loaded: no RDMA device)")]
    Unsupported,
    /// The socket failed.
    #[error("RDMA netlink: {0}")]
    Socket(std::io::Error),
    /// The kernel answered with an error.
    #[error("RDMA netlink: the kernel refused the dump: {0}")]
    Refused(std::io::Error),
    /// More messages than one scan reads.
    #[error("RDMA netlink: more than {MAX_MESSAGES} messages in one dump")]
    TooLong,
}

/// Every process's RDMA resources, by the pid the kernel gives (the creating thread's: see
/// [`crate::discover::watch`] for the step to its process).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// Each process's QPNs, ascending (the kernel numbers a device's QPs in creation order, so
    /// this is also the order of their queues).
    pub qps: BTreeMap<u32, Vec<u32>>,
    /// Each process's CQs.
    pub cqs: BTreeMap<u32, usize>,
    /// Each process's shared receive queues (`None`: the kernel does not list them).
    pub srqs: Option<BTreeMap<u32, usize>>,
}

/// The user QPs, CQs and SRQs of every RDMA device.
pub fn resources() -> Result<Resources, NetlinkError> {
    let sock = Socket::open()?;
    let mut out = Resources::default();
    let mut srqs = BTreeMap::new();
    let mut srqs_listed = true;
    for dev in sock.dump(msg_type(CMD_GET), None)?.iter().flat_map(devices) {
        for m in sock.dump(msg_type(CMD_RES_QP_GET), Some(dev))? {
            for q in qp_entries(&m) {
                if let Some(pid) = q.pid {
                    out.qps.entry(pid).or_default().push(q.qpn);
                }
            }
        }
        for m in sock.dump(msg_type(CMD_RES_CQ_GET), Some(dev))? {
            for pid in owners(&m, CMD_RES_CQ_GET, ATTR_RES_CQ, ATTR_RES_CQ_ENTRY) {
                *out.cqs.entry(pid).or_default() += 1;
            }
        }
        match sock.dump(msg_type(CMD_RES_SRQ_GET), Some(dev)) {
            Ok(ms) => {
                for m in ms {
                    for pid in owners(&m, CMD_RES_SRQ_GET, ATTR_RES_SRQ, ATTR_RES_SRQ_ENTRY) {
                        *srqs.entry(pid).or_default() += 1;
                    }
                }
            }
            // An older kernel has no SRQ dump.
            Err(NetlinkError::Refused(_)) => srqs_listed = false,
            Err(e) => return Err(e),
        }
    }
    for v in out.qps.values_mut() {
        v.sort_unstable();
    }
    out.srqs = srqs_listed.then_some(srqs);
    Ok(out)
}

/// The owning pids of the entries a resource dump's reply lists (`table` of `entry`s, or one
/// entry per message at the top level).
pub fn owners(m: &Message, cmd: u16, table: u16, entry: u16) -> Vec<u32> {
    if m.kind != msg_type(cmd) {
        return Vec::new();
    }
    let pid_of = |e: &[u8]| {
        attrs(e)
            .find(|&(k, _)| k == ATTR_RES_PID)
            .and_then(|(_, v)| u32_of(v))
    };
    let mut out = Vec::new();
    let mut nested = false;
    for (k, v) in attrs(&m.payload) {
        if k == table {
            nested = true;
            out.extend(
                attrs(v)
                    .filter(|&(e, _)| e == entry)
                    .filter_map(|(_, e)| pid_of(e)),
            );
        }
    }
    if !nested {
        out.extend(pid_of(&m.payload));
    }
    out
}

/// A request: the netlink header, and the device index as the one attribute when given.
pub fn request(kind: u16, seq: u32, dev: Option<u32>) -> Vec<u8> {
    let len: u32 = if dev.is_some() { 16 + 8 } else { 16 };
    let mut b = Vec::with_capacity(len as usize);
    b.extend_from_slice(&len.to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(&REQUEST_DUMP.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    if let Some(d) = dev {
        b.extend_from_slice(&8u16.to_ne_bytes());
        b.extend_from_slice(&ATTR_DEV_INDEX.to_ne_bytes());
        b.extend_from_slice(&d.to_ne_bytes());
    }
    b
}

/// A reply message: its type and its payload (the attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `nlmsg_type`.
    pub kind: u16,
    /// The bytes after the 16-byte header.
    pub payload: Vec<u8>,
}

/// The messages in one datagram; stops at the first header that does not fit.
pub fn split_messages(buf: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(h) = buf.get(at..at + 16) {
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let kind = u16::from_ne_bytes([h[4], h[5]]);
        let Some(body) = (len >= 16).then(|| buf.get(at + 16..at + len)).flatten() else {
            break;
        };
        out.push(Message {
            kind,
            payload: body.to_vec(),
        });
        at += align4(len);
    }
    out
}

fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// The attributes in `buf`: (type without flags, value).
pub fn attrs(buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let h = buf.get(at..at + 4)?;
        let len = usize::from(u16::from_ne_bytes([h[0], h[1]]));
        let kind = u16::from_ne_bytes([h[2], h[3]]) & NLA_TYPE_MASK;
        let value = (len >= 4).then(|| buf.get(at + 4..at + len)).flatten()?;
        at += align4(len);
        Some((kind, value))
    })
}

fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

/// The device index a `CMD_GET` reply names.
fn devices(m: &Message) -> Option<u32> {
    if m.kind != msg_type(CMD_GET) {
        return None;
    }
    attrs(&m.payload)
        .find(|&(k, _)| k == ATTR_DEV_INDEX)
        .and_then(|(_, v)| u32_of(v))
}

/// The QPs a `CMD_RES_QP_GET` reply lists.
pub fn qp_entries(m: &Message) -> Vec<QpEntry> {
    if m.kind != msg_type(CMD_RES_QP_GET) {
        return Vec::new();
    }
    let mut dev_index = 0;
    let mut out = Vec::new();
    for (k, v) in attrs(&m.payload) {
        match k {
            ATTR_DEV_INDEX => dev_index = u32_of(v).unwrap_or(0),
            ATTR_RES_QP => {
                for (e, entry) in attrs(v) {
                    if e == ATTR_RES_QP_ENTRY {
                        out.extend(qp_entry(dev_index, entry));
                    }
                }
            }
            // A newer kernel lists one QP per message, its fields at the top level.
            ATTR_RES_LQPN => out.extend(qp_entry(dev_index, &m.payload)),
            _ => {}
        }
    }
    out
}

fn qp_entry(dev_index: u32, entry: &[u8]) -> Option<QpEntry> {
    let (mut qpn, mut pid, mut qp_type) = (None, None, None);
    for (k, v) in attrs(entry) {
        match k {
            ATTR_RES_LQPN => qpn = u32_of(v),
            ATTR_RES_PID => pid = u32_of(v),
            ATTR_RES_TYPE => qp_type = v.first().copied(),
            ATTR_DEV_NAME | ATTR_DEV_INDEX => {}
            _ => {}
        }
    }
    Some(QpEntry {
        dev_index,
        qpn: qpn?,
        pid,
        qp_type,
    })
}

/// `AF_NETLINK` (16) as the address's family field.
const AF_NETLINK_FAMILY: libc::sa_family_t = 16;

/// The size of a socket argument (all of them are a few bytes).
fn socklen<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

/// A `NETLINK_RDMA` socket.
struct Socket(std::os::fd::OwnedFd);

impl Socket {
    fn open() -> Result<Self, NetlinkError> {
        use std::os::fd::FromRawFd;
        // SAFETY: socket(2) with constant arguments; the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_RDMA,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPROTONOSUPPORT) => NetlinkError::Unsupported,
                _ => NetlinkError::Socket(e),
            });
        }
        // SAFETY: `fd` is a descriptor we just opened and own alone.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a valid timeval for the duration of the call; the size is its own.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                socklen::<libc::timeval>(),
            )
        };
        if rc < 0 {
            return Err(NetlinkError::Socket(std::io::Error::last_os_error()));
        }
        Ok(Self(owned))
    }

    /// Sends a dump request and collects its replies up to `NLMSG_DONE`.
    fn dump(&self, kind: u16, dev: Option<u32>) -> Result<Vec<Message>, NetlinkError> {
        use std::os::fd::AsRawFd;
        let req = request(kind, 1, dev);
        // SAFETY: an all-zero sockaddr_nl is valid; nl_pid 0 addresses the kernel.
        let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        to.nl_family = AF_NETLINK_FAMILY;
        // SAFETY: `req` and `to` are valid for the given lengths during the call.
        let sent = unsafe {
            libc::sendto(
                self.0.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                (&raw const to).cast(),
                socklen::<libc::sockaddr_nl>(),
            )
        };
        if sent < 0 {
            return Err(NetlinkError::Socket(std::io::Error::last_os_error()));
        }
        let mut buf = vec![0u8; RECV_BYTES];
        let mut out = Vec::new();
        loop {
            // SAFETY: `buf` is valid for writes of its length during the call.
            let n =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let n = usize::try_from(n)
                .map_err(|_| NetlinkError::Socket(std::io::Error::last_os_error()))?;
            if n == 0 {
                return Ok(out);
            }
            for m in split_messages(&buf[..n]) {
                match m.kind {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let errno = m
                            .payload
                            .get(..4)
                            .map_or(0, |e| i32::from_ne_bytes(e.try_into().unwrap_or([0; 4])));
                        if errno == 0 {
                            return Ok(out);
                        }
                        let e = std::io::Error::from_raw_os_error(errno.saturating_neg());
                        return Err(NetlinkError::Refused(e));
                    }
                    _ => out.push(m),
                }
                if out.len() > MAX_MESSAGES {
                    return Err(NetlinkError::TooLong);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::cast_possible_truncation)]
    use super::*;

    #[test]
    fn the_family_is_af_netlink() {
        assert_eq!(i32::from(AF_NETLINK_FAMILY), libc::AF_NETLINK);
    }

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = 4 + value.len();
        let mut b = Vec::new();
        b.extend_from_slice(&(len as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(value);
        b.resize(align4(b.len()), 0);
        b
    }

    fn message(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&2u16.to_ne_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(payload);
        b
    }

    fn entry(qpn: u32, pid: Option<u32>) -> Vec<u8> {
        let mut e = attr(ATTR_RES_LQPN, &qpn.to_ne_bytes());
        e.extend(attr(ATTR_RES_TYPE, &[2]));
        if let Some(p) = pid {
            e.extend(attr(ATTR_RES_PID, &p.to_ne_bytes()));
        }
        attr(ATTR_RES_QP_ENTRY | 0x8000, &e)
    }

    #[test]
    fn the_type_is_the_kernels() {
        // RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_QP_GET), from the UAPI header.
        assert_eq!(msg_type(CMD_RES_QP_GET), 5130);
        let r = request(msg_type(CMD_RES_QP_GET), 9, Some(3));
        assert_eq!(r.len(), 24);
        assert_eq!(u32::from_ne_bytes(r[..4].try_into().unwrap()), 24);
        assert_eq!(u16::from_ne_bytes(r[6..8].try_into().unwrap()), 0x301);
        assert_eq!(u32::from_ne_bytes(r[20..24].try_into().unwrap()), 3);
    }

    #[test]
    fn a_nested_dump_gives_each_qp_and_its_owner() {
        let mut payload = attr(ATTR_DEV_INDEX, &4u32.to_ne_bytes());
        payload.extend(attr(ATTR_DEV_NAME, b"rxe0\0"));
        let mut table = entry(1, None);
        table.extend(entry(0x11, Some(240)));
        table.extend(entry(0x12, Some(240)));
        payload.extend(attr(ATTR_RES_QP | 0x8000, &table));
        let mut buf = message(msg_type(CMD_RES_QP_GET), &payload);
        buf.extend(message(NLMSG_DONE, &[0; 4]));
        let ms = split_messages(&buf);
        assert_eq!(ms.len(), 2);
        let qps = qp_entries(&ms[0]);
        assert_eq!(qps.len(), 3);
        assert_eq!(
            qps[1],
            QpEntry {
                dev_index: 4,
                qpn: 0x11,
                pid: Some(240),
                qp_type: Some(2)
            }
        );
        assert_eq!(qps[0].pid, None, "the kernel's own QP 1 has no pid");
    }

    #[test]
    fn a_flat_message_per_qp_is_read_too() {
        let mut payload = attr(ATTR_DEV_INDEX, &0u32.to_ne_bytes());
        payload.extend(attr(ATTR_RES_LQPN, &7u32.to_ne_bytes()));
        payload.extend(attr(ATTR_RES_PID, &99u32.to_ne_bytes()));
        let ms = split_messages(&message(msg_type(CMD_RES_QP_GET), &payload));
        let qps = qp_entries(&ms[0]);
        assert_eq!(qps.len(), 1);
        assert_eq!((qps[0].qpn, qps[0].pid), (7, Some(99)));
    }

    #[test]
    fn cq_and_srq_owners_are_counted_from_their_tables() {
        let entry = |pid: u32| {
            let e = attr(ATTR_RES_PID, &pid.to_ne_bytes());
            attr(ATTR_RES_CQ_ENTRY | 0x8000, &e)
        };
        let mut payload = attr(ATTR_DEV_INDEX, &1u32.to_ne_bytes());
        let mut table = entry(7);
        table.extend(entry(7));
        table.extend(attr(ATTR_RES_CQ_ENTRY, &[]));
        payload.extend(attr(ATTR_RES_CQ | 0x8000, &table));
        let ms = split_messages(&message(msg_type(CMD_RES_CQ_GET), &payload));
        assert_eq!(
            owners(&ms[0], CMD_RES_CQ_GET, ATTR_RES_CQ, ATTR_RES_CQ_ENTRY),
            [7, 7]
        );
        // The wrong reply type lists nothing; a flat one lists its one owner.
        assert!(owners(&ms[0], CMD_RES_SRQ_GET, ATTR_RES_SRQ, ATTR_RES_SRQ_ENTRY).is_empty());
        let flat = attr(ATTR_RES_PID, &9u32.to_ne_bytes());
        let ms = split_messages(&message(msg_type(CMD_RES_SRQ_GET), &flat));
        assert_eq!(
            owners(&ms[0], CMD_RES_SRQ_GET, ATTR_RES_SRQ, ATTR_RES_SRQ_ENTRY),
            [9]
        );
    }

    #[test]
    fn truncated_and_lying_lengths_end_the_parse_without_a_panic() {
        let mut payload = attr(ATTR_DEV_INDEX, &4u32.to_ne_bytes());
        payload.extend(attr(ATTR_RES_QP, &entry(5, Some(1))));
        let whole = message(msg_type(CMD_RES_QP_GET), &payload);
        for cut in 0..whole.len() {
            let ms = split_messages(&whole[..cut]);
            assert!(ms.is_empty(), "a cut message is not taken ({cut})");
        }
        // Every byte of the message set to every value: the parse ends, whatever it finds.
        for at in 0..whole.len() {
            for v in [0u8, 1, 3, 4, 0x7f, 0xff] {
                let mut b = whole.clone();
                b[at] = v;
                for m in split_messages(&b) {
                    let _ = qp_entries(&m);
                    let _ = owners(&m, CMD_RES_QP_GET, ATTR_RES_QP, ATTR_RES_QP_ENTRY);
                }
            }
        }
        // A zero-length attribute does not loop forever.
        let zero = [0u8, 0, 21, 0, 0, 0, 0, 0];
        assert_eq!(attrs(&zero).count(), 0);
    }
}
