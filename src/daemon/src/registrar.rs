//! The registration channel, host side: one thread per domain opens a session (`hello`), reads
//! the agent's documents, validates each against the guest's RAM (pages inside RAM, sane sizes,
//! bounded counts, no overlaps) and answers `accepted` or `rejected`; a bad document changes
//! nothing. Accepted layouts go to the control loop. When the session ends (the guest restarted
//! its agent, or was not listening yet) the thread opens a new one after a pause.

use crate::inbox::Post;
use resex_backend::Hypervisor;
use resex_common::{LogLimiter, VmId};
use resex_ibmon::registry::{validate, Layout, Limits};
use resex_proto::channel::{
    read_msg, write_msg, GuestMsg, HostMsg, LineError, CHANNEL_VERSION, MAX_LINE,
};
use resex_proto::Registration;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the registrar tells the control loop.
#[derive(Debug)]
pub enum RegEvent {
    /// A document was accepted.
    Accepted {
        /// The VM.
        id: VmId,
        /// The document.
        doc: Box<Registration>,
        /// Its validation against the guest's RAM.
        layout: Box<Layout>,
    },
    /// A document was refused.
    Rejected {
        /// The VM.
        id: VmId,
        /// Why.
        error: String,
    },
}

/// Serves one domain's channel until `stop` or until the domain is gone.
#[allow(clippy::too_many_arguments)]
pub fn run(
    hv: Arc<dyn Hypervisor>,
    id: VmId,
    key: String,
    name: String,
    ram_size: u64,
    limits: Limits,
    tx: Post<RegEvent>,
    stop: Arc<AtomicBool>,
) {
    Registrar {
        id,
        name,
        ram_size,
        limits,
        tx,
        log: LogLimiter::default(),
    }
    .serve(&*hv, &key, &stop);
}

/// One domain's registrar.
struct Registrar {
    id: VmId,
    name: String,
    ram_size: u64,
    limits: Limits,
    tx: Post<RegEvent>,
    log: LogLimiter,
}

/// The pause before a channel is opened again.
const REOPEN: Duration = Duration::from_millis(250);

impl Registrar {
    /// Opens a session after another until `stop` or until the domain is gone.
    fn serve(&mut self, hv: &dyn Hypervisor, key: &str, stop: &AtomicBool) {
        let mut log_open = LogLimiter::default();
        while !stop.load(Ordering::Acquire) {
            let (mut r, mut w) = match hv.open_channel(key) {
                Ok(c) => c,
                Err(resex_backend::BackendError::NoDomain(_)) => return,
                Err(e) => {
                    if let Some(n) = log_open.hit() {
                        let name = &self.name;
                        tracing::debug!("{name}: registration channel not open yet ({e}) [{n}]");
                    }
                    std::thread::sleep(REOPEN);
                    continue;
                }
            };
            let hello = HostMsg::Hello {
                version: CHANNEL_VERSION,
            };
            if write_msg(&mut w, &hello).is_ok() && self.session(&mut *r, &mut w, stop) {
                return;
            }
            std::thread::sleep(REOPEN);
        }
    }

    /// Answers the guest's messages until the session ends (false) or `stop` (true).
    fn session(&mut self, r: &mut dyn BufRead, w: &mut impl Write, stop: &AtomicBool) -> bool {
        loop {
            if stop.load(Ordering::Acquire) {
                return true;
            }
            let reply = match read_msg::<GuestMsg>(r, MAX_LINE) {
                Ok(None) => return false,
                // A channel that times out (Xen's xenstore link) is a guest saying nothing: no
                // agent yet, or an idle one. The session goes on: a link has no connection to
                // lose, and an agent that starts later speaks first.
                Err(LineError::Io(e)) if quiet(&e) => {
                    tracing::trace!("{}: nothing from the guest's agent yet", self.name);
                    continue;
                }
                Err(LineError::Io(_) | LineError::TooLong(_)) => {
                    if let Some(n) = self.log.hit() {
                        tracing::warn!(
                            "{}: registration channel broken or flooded; reopening [{n}]",
                            self.name
                        );
                    }
                    return false;
                }
                Err(LineError::Json(e)) => self.reject(format!("malformed message: {e}")),
                Ok(Some(GuestMsg::Register { registration })) => self.answer(registration),
            };
            if write_msg(w, &reply).is_err() {
                return false;
            }
        }
    }

    /// Validates a document against the guest's RAM: accepted (to the control loop), or
    /// refused.
    fn answer(&mut self, doc: Registration) -> HostMsg {
        if let Err(e) = doc.check_version() {
            return self.reject(e.to_string());
        }
        match validate(&doc, self.ram_size, &self.limits) {
            Ok(layout) => {
                let msg = HostMsg::Accepted {
                    vm: self.name.clone(),
                    qps: layout.qps.len(),
                    mailbox: layout.mailbox.is_some(),
                };
                let _ = self.tx.send(RegEvent::Accepted {
                    id: self.id,
                    doc: Box::new(doc),
                    layout: Box::new(layout),
                });
                msg
            }
            Err(e) => {
                let error = e.to_string();
                if let Some(n) = self.log.hit() {
                    tracing::warn!("{}: {error} [{n}]", self.name);
                }
                self.reject(error)
            }
        }
    }

    /// Tells the control loop, and the guest, that a message was refused.
    fn reject(&self, error: String) -> HostMsg {
        let _ = self.tx.send(RegEvent::Rejected {
            id: self.id,
            error: error.clone(),
        });
        HostMsg::Rejected { error }
    }
}

/// A read that ended for want of data, not because the channel broke.
fn quiet(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )
}
