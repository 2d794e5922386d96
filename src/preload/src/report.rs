//! What the interposer does with a QP the application created: asks the mlx5 provider where its
//! queues are ([`Mlx5`]), and tells the agent ([`Reporter`]). Everything here is testable
//! without a device: the provider is behind a trait, the agent is any Unix stream socket.

use crate::abi::{IbvQp, Mlx5dvCq, Mlx5dvQp};
use resex_proto::preload::{CompletionQueue, PreloadMsg, WorkQueue};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The mlx5 provider's view of a QP's objects.
pub trait Mlx5: Send + Sync {
    /// The QP's device name (`rxe0`, `mlx5_0`), or `None` when it cannot be told.
    fn device_name(&self, qp: &IbvQp) -> Option<String>;
    /// Whether the QP is on an mlx5 device.
    fn is_mlx5(&self, qp: &IbvQp) -> bool;
    /// `mlx5dv_init_obj` of the QP.
    fn qp(&self, qp: &IbvQp) -> Option<Mlx5dvQp>;
    /// `mlx5dv_init_obj` of a CQ (`struct ibv_cq *`).
    fn cq(&self, cq: *mut std::ffi::c_void) -> Option<Mlx5dvCq>;
}

/// What became of one created QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Told to the agent.
    Reported(PreloadMsg),
    /// Not on an mlx5 device (its device's name, if known).
    NotMlx5(Option<String>),
    /// The provider would not describe it.
    NoView,
    /// The agent could not be told (why).
    NoAgent(String),
}

/// The message for a created QP, from the provider's views.
pub fn created(qp: &IbvQp, v: &Mlx5dvQp, send: &Mlx5dvCq, recv: Option<&Mlx5dvCq>) -> PreloadMsg {
    let cq = |c: &Mlx5dvCq| CompletionQueue {
        buf: c.buf as u64,
        cqe_cnt: c.cqe_cnt,
        cqe_size: c.cqe_size,
        dbrec: c.dbrec as u64,
    };
    PreloadMsg::Created {
        qpn: qp.qp_num,
        sq: WorkQueue {
            buf: v.sq.buf as u64,
            wqe_cnt: v.sq.wqe_cnt,
            stride: v.sq.stride,
        },
        dbrec: v.dbrec as u64,
        send_cq: cq(send),
        recv_cq: recv.map(cq),
    }
}

/// Describes a created QP through `dv`.
pub fn describe(dv: &dyn Mlx5, qp: &IbvQp) -> Result<PreloadMsg, Outcome> {
    if !dv.is_mlx5(qp) {
        return Err(Outcome::NotMlx5(dv.device_name(qp)));
    }
    let v = dv.qp(qp).ok_or(Outcome::NoView)?;
    let send = dv.cq(qp.send_cq).ok_or(Outcome::NoView)?;
    let recv = if qp.recv_cq.is_null() || qp.recv_cq == qp.send_cq {
        None
    } else {
        Some(dv.cq(qp.recv_cq).ok_or(Outcome::NoView)?)
    };
    Ok(created(qp, &v, &send, recv.as_ref()))
}

/// The connection to the agent: opened at the first report, opened again once after it broke,
/// and again in a forked child (the agent learns the process from the socket, so a child must
/// not speak on its parent's). A process that exits closes it, which unregisters its QPs.
/// Writes never raise SIGPIPE in the application and give up after [`WRITE_TIMEOUT`].
#[derive(Debug)]
pub struct Reporter {
    path: PathBuf,
    /// The connection and the process that opened it.
    conn: Mutex<Option<(u32, UnixStream)>>,
    said: AtomicBool,
}

/// Why a report did not reach the agent.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The message could not be written as JSON.
    #[error("a report that cannot be encoded: {0}")]
    Encode(serde_json::Error),
    /// No agent listens at the socket (or it could not be set up).
    #[error("no agent at {}: {source}", path.display())]
    NoAgent {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The agent closed the connection and did not take it again.
    #[error("the agent at {} went away", .0.display())]
    Gone(PathBuf),
}

/// The connection's descriptor, for the fork handler (-1: none).
static CONN_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The child's side of `fork()` (register with `pthread_atfork`): closes the connection it
/// inherited, so its parent's exit still ends the parent's connection (and unregisters its
/// QPs) and the child opens its own. Only `close(2)`: async-signal-safe, as a child handler
/// must be.
pub extern "C" fn close_inherited() {
    let fd = CONN_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: `fd` is the inherited copy of the connection; nothing else in the child
        // uses it (the reporter forgets its stream when it sees its pid changed).
        unsafe {
            libc::close(fd);
        }
    }
}

/// Connects to the agent without waiting: a full backlog (a stalled agent) is an error, never
/// a hold-up of the application's `ibv_create_qp`.
fn connect_now(path: &std::path::Path) -> std::io::Result<UnixStream> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(std::io::ErrorKind::InvalidInput.into());
    }
    addr.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).unwrap_or(1);
    for (d, &b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by the stream from here on.
    let s = unsafe { UnixStream::from_raw_fd(fd) };
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_un>())
        .unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes during the call.
    let rc = unsafe { libc::connect(fd, (&raw const addr).cast(), len) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    s.set_nonblocking(false)?;
    Ok(s)
}

/// The longest a report may hold up the application's call.
pub const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

/// Writes all of `buf` with `MSG_NOSIGNAL` (a closed socket is an error, not a signal that
/// would end the application), within the socket's send timeout.
fn send_all(s: &UnixStream, mut buf: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for reads of its length during the call.
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        match usize::try_from(n) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n.min(buf.len())..],
            Err(_) => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

impl Reporter {
    /// A reporter to the agent's socket at `path`.
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            conn: Mutex::new(None),
            said: AtomicBool::new(false),
        }
    }

    /// The reporter to the socket `RESEX_PRELOAD_SOCKET` names, or the default one.
    pub fn from_env() -> Self {
        let path = std::env::var_os(resex_proto::preload::SOCKET_ENV).map_or_else(
            || resex_proto::preload::DEFAULT_SOCKET.into(),
            PathBuf::from,
        );
        Self::new(path)
    }

    /// Sends `m` as one line.
    pub fn send(&self, m: &PreloadMsg) -> Result<(), ReportError> {
        let mut line = serde_json::to_string(m).map_err(ReportError::Encode)?;
        line.push('\n');
        let me = std::process::id();
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((pid, s)) = conn.take() {
            if pid == me {
                *conn = Some((pid, s));
            } else {
                // A forked child: its parent's connection is not its own, and the fork handler
                // ([`close_inherited`]) closed this copy already: forget it, do not close it again.
                std::mem::forget(s);
            }
        }
        for _ in 0..2 {
            if conn.is_none() {
                let no_agent = |source| ReportError::NoAgent {
                    path: self.path.clone(),
                    source,
                };
                let s = connect_now(&self.path).map_err(no_agent)?;
                s.set_write_timeout(Some(WRITE_TIMEOUT)).map_err(no_agent)?;
                CONN_FD.store(std::os::fd::AsRawFd::as_raw_fd(&s), Ordering::Release);
                *conn = Some((me, s));
            }
            if let Some((_, s)) = conn.as_ref() {
                match send_all(s, line.as_bytes()) {
                    Ok(()) => return Ok(()),
                    Err(_) => {
                        CONN_FD.store(-1, Ordering::Release);
                        *conn = None;
                    }
                }
            }
        }
        Err(ReportError::Gone(self.path.clone()))
    }

    /// Whether this is the first time something is said (one line per process, not per QP).
    pub fn first_word(&self) -> bool {
        !self.said.swap(true, Ordering::AcqRel)
    }
}

/// Handles a created QP: describes and reports it.
pub fn on_created(dv: &dyn Mlx5, r: &Reporter, qp: &IbvQp) -> Outcome {
    match describe(dv, qp) {
        Err(o) => o,
        Ok(m) => match r.send(&m) {
            Ok(()) => Outcome::Reported(m),
            Err(e) => Outcome::NoAgent(e.to_string()),
        },
    }
}

/// The one line a process prints about the interposer, the first time something is not
/// reported (`None` for a report).
pub fn say(o: &Outcome, qpn: u32) -> Option<String> {
    let why = match o {
        Outcome::Reported(_) => return None,
        Outcome::NotMlx5(dev) => format!(
            "QP {qpn:#x} is on {}, not an mlx5 device: nothing to report (soft-RoCE queues are \
             found by `resex-agent --discover`)",
            dev.as_deref().unwrap_or("a device without a name")
        ),
        Outcome::NoView => {
            format!("mlx5dv_init_obj would not describe QP {qpn:#x}: not reported")
        }
        Outcome::NoAgent(e) => format!("{e}: QP {qpn:#x} not reported"),
    };
    Some(format!("resex-preload: {why}"))
}
