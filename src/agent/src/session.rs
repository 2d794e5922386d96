//! The agent's side of the control channel (`resex_proto::channel`): wait for the host to open
//! a session, register, re-register whenever the guest's rings change, and wait for the next
//! session when the host goes away (a restarted daemon gets the registration again).

use resex_proto::channel::{read_msg, write_msg, GuestMsg, HostMsg, MAX_LINE};
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
        session(r, &mut *w, &doc, &status, &stop, poll, &gate);
        tracing::info!("host closed the session; waiting for the next");
    }
}

fn session(
    mut r: Box<dyn BufRead + Send>,
    w: &mut dyn Write,
    doc: &DocFn,
    status: &ChannelStatus,
    stop: &AtomicBool,
    poll: Duration,
    gate: &Gate,
) {
    let (tx, rx) = mpsc::channel();
    gate.opened(tx.clone());
    let reader = std::thread::spawn(move || loop {
        let m = read_msg::<HostMsg>(&mut *r, MAX_LINE);
        let end = !matches!(m, Ok(Some(_)));
        if tx.send(Event::Host(m)).is_err() || end {
            return;
        }
    });
    // The last document sent, and the QPNs of each one not yet answered, oldest first.
    type Sent = (Option<Registration>, VecDeque<Vec<u32>>);
    let mut sent: Sent = (None, VecDeque::new());
    let send = |d: Registration, w: &mut dyn Write, sent: &mut Sent| -> bool {
        let ok = write_msg(
            w,
            &GuestMsg::Register {
                registration: d.clone(),
            },
        )
        .is_ok();
        if ok {
            status.sent.fetch_add(1, Ordering::AcqRel);
            sent.1.push_back(qpns(&d));
            sent.0 = Some(d);
        }
        ok
    };
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
    drop(rx);
    // The reader ends when the host closes the stream; do not wait for it otherwise.
    if reader.is_finished() {
        let _ = reader.join();
    }
}
