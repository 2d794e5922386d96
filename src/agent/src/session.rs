//! The agent's side of the control channel (`resex_proto::channel`): wait for the host to open
//! a session, register, re-register whenever the guest's rings change, and wait for the next
//! session when the host goes away (a restarted daemon gets the registration again).

use resex_proto::channel::{read_msg, write_msg, GuestMsg, HostMsg, LineError, MAX_LINE};
use resex_proto::Registration;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::event::Event;
use crate::gate::Gate;
use std::collections::VecDeque;

/// One session's streams.
pub type Session = (Box<dyn BufRead + Send>, Box<dyn Write + Send>);

/// Where sessions come from: a listening Unix socket on the embedded host; the virtio-serial
/// port in a VM.
pub trait ChannelEnd: Send {
    /// Waits for the host to open the next session; `Ok(None)` when told to stop.
    fn next_session(&mut self, stop: &AtomicBool) -> std::io::Result<Option<Session>>;
    /// Whether the agent registers as a session starts, unasked: where the host cannot see a
    /// session start (a xenstore link has no connection), so a host already listening hears
    /// of a new agent. Reads that time out on such a channel do not end the session.
    fn speaks_first(&self) -> bool {
        false
    }
}

/// A Unix socket the agent listens on (the embedded host's channel).
#[derive(Debug)]
pub struct UnixChannel {
    listener: UnixListener,
}

impl UnixChannel {
    /// Binds `path` (replacing a stale socket file).
    pub fn bind(path: &Path) -> std::io::Result<Self> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(Self { listener })
    }
}

impl ChannelEnd for UnixChannel {
    fn next_session(&mut self, stop: &AtomicBool) -> std::io::Result<Option<Session>> {
        while !stop.load(Ordering::Acquire) {
            match self.listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    let r = BufReader::new(s.try_clone()?);
                    return Ok(Some((Box::new(r), Box::new(s))));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

/// What the agent's channel side has seen.
#[derive(Debug, Default)]
pub struct ChannelStatus {
    /// Sessions the host opened.
    pub sessions: AtomicU64,
    /// Registrations sent.
    pub sent: AtomicU64,
    /// Registrations the host accepted.
    pub accepted: AtomicU64,
    /// Registrations the host rejected.
    pub rejected: AtomicU64,
    /// The last rejection's reason.
    pub last_error: Mutex<Option<String>>,
}

/// Produces the current registration document.
pub type DocFn = Arc<dyn Fn() -> Registration + Send + Sync>;

/// The QPNs a document names.
fn qpns(d: &Registration) -> Vec<u32> {
    d.qps.iter().map(|q| q.qpn).collect()
}

/// Serves sessions until `stop`. How often the rings are checked for changes: `poll`.
pub fn run(
    mut chan: Box<dyn ChannelEnd>,
    doc: DocFn,
    status: Arc<ChannelStatus>,
    stop: Arc<AtomicBool>,
    poll: Duration,
    gate: Arc<Gate>,
) {
    while !stop.load(Ordering::Acquire) {
        let (r, mut w) = match chan.next_session(&stop) {
            Ok(Some(s)) => s,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!("agent channel: {e}; retrying");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        status.sessions.fetch_add(1, Ordering::AcqRel);
        tracing::info!("host opened a session");
        let first = chan.speaks_first();
        session(r, &mut *w, &doc, &status, &stop, poll, &gate, first);
        tracing::info!("host closed the session; waiting for the next");
    }
}

#[allow(clippy::too_many_arguments)]
fn session(
    mut r: Box<dyn BufRead + Send>,
    w: &mut dyn Write,
    doc: &DocFn,
    status: &ChannelStatus,
    stop: &AtomicBool,
    poll: Duration,
    gate: &Gate,
    speak_first: bool,
) {
    let (tx, rx) = mpsc::channel();
    gate.opened(tx.clone());
    let closed = Arc::new(AtomicBool::new(false));
    let done = closed.clone();
    let reader = std::thread::spawn(move || loop {
        let m = read_msg::<HostMsg>(&mut *r, MAX_LINE);
        // A quiet channel (a read that timed out) is still open, until this session ends.
        if let Err(LineError::Io(e)) = &m {
            if e.kind() == std::io::ErrorKind::TimedOut && !done.load(Ordering::Acquire) {
                continue;
            }
        }
        let end = !matches!(m, Ok(Some(_)));
        if tx.send(Event::Host(m)).is_err() || end {
            return;
        }
    });
    // The last document sent, and the QPNs of each one not yet answered, oldest first.
    type Sent = (Option<Registration>, VecDeque<Vec<u32>>);
    let mut sent: Sent = (None, VecDeque::new());
    let send = |d: Registration, w: &mut dyn Write, sent: &mut Sent| -> bool {
        tracing::debug!("registering {} queue pairs", d.qps.len());
        let r = write_msg(
            w,
            &GuestMsg::Register {
                registration: d.clone(),
            },
        );
        if let Err(e) = &r {
            use std::io::ErrorKind::{BrokenPipe, TimedOut};
            if matches!(e.kind(), BrokenPipe | TimedOut) {
                tracing::debug!("registration not sent: {e}");
            } else {
                tracing::warn!("registration not sent: {e}");
            }
        }
        let ok = r.is_ok();
        if ok {
            status.sent.fetch_add(1, Ordering::AcqRel);
            sent.1.push_back(qpns(&d));
            sent.0 = Some(d);
        }
        ok
    };
    if speak_first && !send(doc(), w, &mut sent) {
        tracing::debug!("the host is not reading the channel yet");
    }
    while !stop.load(Ordering::Acquire) {
        match rx.recv_timeout(poll) {
            Ok(Event::Host(Ok(Some(HostMsg::Hello { version })))) => {
                tracing::debug!("hello (channel version {version})");
                if !send(doc(), w, &mut sent) {
                    break;
                }
            }
            Ok(Event::Host(Ok(Some(HostMsg::Accepted { vm, qps, mailbox })))) => {
                status.accepted.fetch_add(1, Ordering::AcqRel);
                tracing::info!("registered as {vm}: {qps} queue pairs, mailbox {mailbox}");
                if let Some(q) = sent.1.pop_front() {
                    gate.accepted(&q);
                }
            }
            Ok(Event::Host(Ok(Some(HostMsg::Rejected { error })))) => {
                status.rejected.fetch_add(1, Ordering::AcqRel);
                tracing::warn!("host rejected the registration: {error}");
                *status.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
                sent.1.pop_front();
            }
            Ok(Event::Host(Ok(None) | Err(_))) | Err(RecvTimeoutError::Disconnected) => break,
            // Rings created since the last registration (a QP waiting, or the periodic look):
            // register again.
            Ok(Event::Nudge) | Err(RecvTimeoutError::Timeout) => {
                if let Some(prev) = &sent.0 {
                    let now = doc();
                    if &now != prev && !send(now, w, &mut sent) {
                        break;
                    }
                }
            }
        }
    }
    gate.closed();
    closed.store(true, Ordering::Release);
    drop(rx);
    // The reader ends when the host closes the stream; do not wait for it otherwise.
    if reader.is_finished() {
        let _ = reader.join();
    }
}
