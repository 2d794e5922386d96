//! The agent's end of `libresex_preload.so` (`resex_proto::preload`): unmodified mlx5
//! applications, run with the interposer, report each QP they create; the agent takes the
//! process from the socket's peer credentials, turns the reported virtual addresses into
//! guest-physical pages through that process's pagemap, and registers the QP with the host. A
//! destroyed QP, or a connection that closes (the process exited), is unregistered.
//!
//! Reports are hostile input like any guest message: lines are bounded; a connection may name
//! at most [`MAX_QPS_PER_PROCESS`] QPs and all of them at most [`MAX_QPS`] (the host's limit);
//! at most [`MAX_CONNECTIONS`] are served at once, [`MAX_CONNECTIONS_PER_PROCESS`] per process;
//! a QP whose address does not translate or whose counts no mlx5 QP has is refused; warnings are
//! thinned; a connection that ends in any way (a panic included) unregisters its QPs.

use crate::discover::{guest_pages, DiscoverError, Mapping};
use resex_common::LogLimiter;
use resex_proto::preload::{CompletionQueue, PreloadMsg, WorkQueue, MAX_LINE};
use resex_proto::{CqRegistration, QpRegistration, SqRegistration};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most QPs one connection (a process's interposer) may have registered.
pub const MAX_QPS_PER_PROCESS: usize = 1024;
/// The most QPs registered through the interposer in all (the host's own limit per VM).
pub const MAX_QPS: usize = 1024;
/// The most connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// The most connections one process may hold open.
pub const MAX_CONNECTIONS_PER_PROCESS: usize = 4;
const PAGE: u64 = 4096;

/// The QPs reported, by (process, connection, QPN).
pub type Reported = Arc<Mutex<BTreeMap<(u32, u64, u32), QpRegistration>>>;

/// The addresses a report names, translated.
pub fn translate(
    proc_root: &Path,
    pid: u32,
    m: &PreloadMsg,
) -> Result<Option<QpRegistration>, DiscoverError> {
    let PreloadMsg::Created {
        qpn,
        sq,
        dbrec,
        send_cq,
        recv_cq,
    } = m
    else {
        return Ok(None);
    };
    let path = proc_root.join(pid.to_string()).join("pagemap");
    let pagemap = std::fs::File::open(&path).map_err(|source| DiscoverError::Io {
        path: path.clone(),
        source,
    })?;
    let t = Translator {
        pagemap: &pagemap,
        path: &path,
    };
    let cq = |c: &CompletionQueue| -> Result<CqRegistration, DiscoverError> {
        let (pages, offset) = t.range(c.buf, u64::from(c.cqe_cnt) * u64::from(c.cqe_size))?;
        Ok(CqRegistration {
            pages,
            offset,
            cqe_cnt: c.cqe_cnt,
            cqe_size: c.cqe_size,
            dbrec: t.one(c.dbrec)?,
            start: 0,
        })
    };
    let WorkQueue {
        buf,
        wqe_cnt,
        stride,
    } = *sq;
    let (pages, offset) = t.range(buf, u64::from(wqe_cnt) * u64::from(stride))?;
    Ok(Some(QpRegistration {
        qpn: *qpn,
        sq: SqRegistration {
            pages,
            offset,
            wqe_cnt,
            dbrec: t.one(*dbrec)?,
            start: 0,
        },
        send_cq: cq(send_cq)?,
        recv_cq: recv_cq.as_ref().map(cq).transpose()?,
    }))
}

struct Translator<'a> {
    pagemap: &'a std::fs::File,
    path: &'a Path,
}

impl Translator<'_> {
    /// The guest-physical pages of `len` bytes at `va`, and the offset in the first.
    fn range(&self, va: u64, len: u64) -> Result<(Vec<u64>, u64), DiscoverError> {
        // At most 256 MiB, as a registration may name (the page list is this long).
        let len = len.clamp(1, 1 << 28);
        let start = va & !(PAGE - 1);
        let end = va
            .checked_add(len)
            .and_then(|e| e.checked_next_multiple_of(PAGE))
            .ok_or(DiscoverError::BadAddress(va))?;
        let m = Mapping {
            start,
            end,
            pgoff: 0,
            dev: 0,
        };
        let pages = guest_pages(self.pagemap, self.path, m)?;
        if pages.is_empty() {
            return Err(DiscoverError::BadAddress(va));
        }
        Ok((pages, va - start))
    }

    /// The guest-physical address of the byte at `va`.
    fn one(&self, va: u64) -> Result<u64, DiscoverError> {
        let (pages, offset) = self.range(va, 8)?;
        pages
            .first()
            .map(|p| p + offset)
            .ok_or(DiscoverError::BadAddress(va))
    }
}

/// The pid of the process at the other end of `s` (`SO_PEERCRED`).
pub fn peer_pid(s: &UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .unwrap_or(libc::socklen_t::MAX);
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which is that large.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    u32::try_from(cred.pid).map_err(|_| std::io::Error::other("no peer process"))
}

/// The interposer's socket, served by threads of its own.
pub struct Server {
    /// What is registered now.
    pub reported: Reported,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

impl Server {
    /// Listens at `path` (its directory created, the socket open to every local user: any
    /// application may report its own QPs), reading `proc_root` for page maps; `changed` is
    /// called after each change.
    pub fn start(
        path: &Path,
        proc_root: PathBuf,
        changed: Arc<dyn Fn() + Send + Sync>,
    ) -> std::io::Result<Server> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        listener.set_nonblocking(true)?;
        let reported: Reported = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = Ctx {
            proc_root,
            reported: reported.clone(),
            changed,
            live: Arc::default(),
            conns: Arc::default(),
            per_pid: Arc::default(),
            warn: Arc::default(),
        };
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("agent-preload".into())
            .spawn(move || accept_loop(&listener, &ctx, &s))?;
        Ok(Server {
            reported,
            stop,
            thread: Some(thread),
        })
    }

    /// The QPs registered now, by process then QPN.
    pub fn qps(&self) -> Vec<QpRegistration> {
        self.reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Clone)]
struct Ctx {
    proc_root: PathBuf,
    reported: Reported,
    changed: Arc<dyn Fn() + Send + Sync>,
    live: Arc<AtomicUsize>,
    /// Connections numbered so far.
    conns: Arc<std::sync::atomic::AtomicU64>,
    /// Open connections per process.
    per_pid: Arc<Mutex<BTreeMap<u32, usize>>>,
    /// Warnings, thinned across all connections (any local user may provoke them).
    warn: Arc<Mutex<LogLimiter>>,
}

impl Ctx {
    fn warn(&self, what: std::fmt::Arguments<'_>) {
        if let Some(n) = self.warn.lock().unwrap_or_else(|p| p.into_inner()).hit() {
            tracing::warn!("preload: {what} (#{n})");
        }
    }
}

fn accept_loop(listener: &UnixListener, ctx: &Ctx, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((s, _)) => admit(s, ctx),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                ctx.warn(format_args!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Serves a new connection on a thread of its own, within the caps.
fn admit(s: UnixStream, ctx: &Ctx) {
    let Ok(pid) = peer_pid(&s) else {
        return;
    };
    if ctx.live.load(Ordering::Acquire) >= MAX_CONNECTIONS {
        ctx.warn(format_args!(
            "{MAX_CONNECTIONS} connections already served; process {pid} refused"
        ));
        return;
    }
    {
        let mut per = ctx.per_pid.lock().unwrap_or_else(|p| p.into_inner());
        let n = per.entry(pid).or_insert(0);
        if *n >= MAX_CONNECTIONS_PER_PROCESS {
            drop(per);
            ctx.warn(format_args!("process {pid} has {MAX_CONNECTIONS_PER_PROCESS} connections open; one more refused"));
            return;
        }
        *n += 1;
    }
    ctx.live.fetch_add(1, Ordering::AcqRel);
    let conn = ctx.conns.fetch_add(1, Ordering::AcqRel);
    let guard = Ended {
        ctx: ctx.clone(),
        pid,
        conn,
    };
    let spawned = std::thread::Builder::new()
        .name("agent-preload-conn".into())
        .spawn(move || serve(s, &guard));
    if let Err(e) = spawned {
        ctx.warn(format_args!("no thread for a connection: {e}"));
    }
}

/// A connection's end, however it ends (a panic included): its QPs go, its slots are freed.
struct Ended {
    ctx: Ctx,
    pid: u32,
    conn: u64,
}

impl Drop for Ended {
    fn drop(&mut self) {
        let ctx = &self.ctx;
        ctx.live.fetch_sub(1, Ordering::AcqRel);
        {
            let mut per = ctx.per_pid.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = per.get_mut(&self.pid) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    per.remove(&self.pid);
                }
            }
        }
        let mut map = ctx.reported.lock().unwrap_or_else(|p| p.into_inner());
        let before = map.len();
        map.retain(|&(_, c, _), _| c != self.conn);
        let gone = before - map.len();
        drop(map);
        if gone > 0 {
            tracing::info!(
                "preload: process {} closed its connection or exited: {gone} QP(s) unregistered",
                self.pid
            );
            (ctx.changed)();
        }
    }
}

/// One connection's reports until it closes.
fn serve(s: UnixStream, at: &Ended) {
    let _ = s.set_nonblocking(false);
    let mut r = BufReader::new(s);
    let mut line = String::new();
    let mut info = LogLimiter::default();
    loop {
        line.clear();
        match (&mut r).take(MAX_LINE as u64).read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if !line.ends_with('\n') => {
                at.ctx.warn(format_args!(
                    "process {} sent a line over {MAX_LINE} bytes; closed",
                    at.pid
                ));
                break;
            }
            Ok(_) => handle(at, &line, &mut info),
        }
    }
}

/// Whether a report describes a QP the host can take (checked before any page is read): an
/// mlx5 send queue of 64-byte basic blocks, counts and sizes in the host's ranges.
pub fn plausible(m: &PreloadMsg) -> bool {
    let PreloadMsg::Created {
        qpn,
        sq,
        send_cq,
        recv_cq,
        ..
    } = m
    else {
        return true;
    };
    let cq = |c: &CompletionQueue| {
        c.cqe_cnt.is_power_of_two()
            && (2..=1 << 24).contains(&c.cqe_cnt)
            && matches!(c.cqe_size, 64 | 128)
    };
    *qpn < 1 << 24
        && sq.stride == 64
        && sq.wqe_cnt.is_power_of_two()
        && sq.wqe_cnt <= 1 << 15
        && cq(send_cq)
        && recv_cq.as_ref().is_none_or(cq)
}

fn handle(at: &Ended, line: &str, info: &mut LogLimiter) {
    let (ctx, pid, conn) = (&at.ctx, at.pid, at.conn);
    let m: PreloadMsg = match serde_json::from_str(line) {
        Ok(m) => m,
        Err(e) => {
            ctx.warn(format_args!(
                "process {pid}: a report that does not parse: {e}"
            ));
            return;
        }
    };
    match &m {
        PreloadMsg::Destroyed { qpn } => {
            let mut map = ctx.reported.lock().unwrap_or_else(|p| p.into_inner());
            if map.remove(&(pid, conn, *qpn)).is_none() {
                return;
            }
            drop(map);
            if info.hit().is_some() {
                tracing::info!("preload: process {pid} destroyed QP {qpn:#x}");
            }
        }
        PreloadMsg::Created { qpn, .. } => {
            if !plausible(&m) {
                ctx.warn(format_args!(
                    "process {pid}: QP {qpn:#x} has counts or sizes no mlx5 QP has; not registered"
                ));
                return;
            }
            // Translated before the lock: the document is built under it.
            let q = match translate(&ctx.proc_root, pid, &m) {
                Ok(Some(q)) => q,
                Ok(None) => return,
                Err(e) => {
                    ctx.warn(format_args!(
                        "process {pid}: QP {qpn:#x} not registered: {e}"
                    ));
                    return;
                }
            };
            let mut map = ctx.reported.lock().unwrap_or_else(|p| p.into_inner());
            let mine = map.range((pid, conn, 0)..=(pid, conn, u32::MAX)).count();
            if mine >= MAX_QPS_PER_PROCESS || map.len() >= MAX_QPS {
                drop(map);
                ctx.warn(format_args!("process {pid}: QP {qpn:#x} refused: {mine} of this connection's and {MAX_QPS} in all are the most registered"));
                return;
            }
            map.insert((pid, conn, *qpn), q);
            drop(map);
            if info.hit().is_some() {
                tracing::info!("preload: process {pid} created QP {qpn:#x}");
            }
        }
    }
    (ctx.changed)();
}
