//! The registration channel, host side: one thread per domain opens a session (`hello`), reads
//! the agent's documents, validates each against the guest's RAM (pages inside RAM, sane sizes,
//! bounded counts, no overlaps) and answers `accepted` or `rejected`; a bad document changes
//! nothing. Accepted layouts go to the control loop. When the session ends (the guest restarted
//! its agent, or was not listening yet) the thread opens a new one after a pause.

use resex_backend::Hypervisor;
use resex_common::{LogLimiter, VmId};
use resex_ibmon::registry::{validate, Layout, Limits};
use resex_proto::channel::{
    read_msg, write_msg, GuestMsg, HostMsg, LineError, CHANNEL_VERSION, MAX_LINE,
};
use resex_proto::Registration;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
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
        doc: Registration,
        /// Its validation against the guest's RAM.
        layout: Layout,
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
    tx: Sender<RegEvent>,
    stop: Arc<AtomicBool>,
) {
    let mut log = LogLimiter::default();
    let mut log_open = LogLimiter::default();
    while !stop.load(Ordering::Acquire) {
        let (mut r, mut w) = match hv.open_channel(&key) {
            Ok(c) => c,
            Err(e) => {
                if matches!(e, resex_backend::BackendError::NoDomain(_)) {
                    return;
                }
                if let Some(n) = log_open.hit() {
                    tracing::debug!("{name}: registration channel not open yet ({e}) [{n}]");
                }
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
        };
        if write_msg(
            &mut w,
            &HostMsg::Hello {
                version: CHANNEL_VERSION,
            },
        )
        .is_err()
        {
            std::thread::sleep(Duration::from_millis(250));
            continue;
        }
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let reply = match read_msg::<GuestMsg>(&mut *r, MAX_LINE) {
                Ok(None) => break,
                Err(LineError::Io(_)) | Err(LineError::TooLong(_)) => {
                    if let Some(n) = log.hit() {
                        tracing::warn!(
                            "{name}: registration channel broken or flooded; reopening [{n}]"
                        );
                    }
                    break;
                }
                Err(LineError::Json(e)) => {
                    let error = format!("malformed message: {e}");
                    let _ = tx.send(RegEvent::Rejected {
                        id,
                        error: error.clone(),
                    });
                    HostMsg::Rejected { error }
                }
                Ok(Some(GuestMsg::Register { registration })) => {
                    if let Err(e) = registration.check_version() {
                        let error = e.to_string();
                        let _ = tx.send(RegEvent::Rejected {
                            id,
                            error: error.clone(),
                        });
                        HostMsg::Rejected { error }
                    } else {
                        match validate(&registration, ram_size, &limits) {
                            Ok(layout) => {
                                let msg = HostMsg::Accepted {
                                    vm: name.clone(),
                                    qps: layout.qps.len(),
                                    mailbox: layout.mailbox.is_some(),
                                };
                                let _ = tx.send(RegEvent::Accepted {
                                    id,
                                    doc: registration,
                                    layout,
                                });
                                msg
                            }
                            Err(e) => {
                                let error = e.to_string();
                                if let Some(n) = log.hit() {
                                    tracing::warn!("{name}: {error} [{n}]");
                                }
                                let _ = tx.send(RegEvent::Rejected {
                                    id,
                                    error: error.clone(),
                                });
                                HostMsg::Rejected { error }
                            }
                        }
                    }
                }
            };
            if write_msg(&mut w, &reply).is_err() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
