//! The resex guest agent.
//!
//! It tells the host where the guest's rings and its latency mailbox are (the registration
//! document, over the control channel), and turns the application's latency recorder into one
//! report per interval in the mailbox, which the host polls out of guest memory.
//!
//! - reports go through `resex_shim::mailbox`, the guest's end of the mailbox.
//! - [`session`], the control channel: sessions, registration, re-registration.
//! - [`event`], what wakes a session.
//! - [`gate`], registration before use: a new QP is registered before the application posts.
//! - [`Agent`]: both, with a reporting thread.
//! - [`vm`], inside a real VM: virtio-serial ports for the channel and the HCA.
//! - [`xen`], inside a Xen domU: xenstore links for the channel, the HCA and the bootstrap.
//! - [`discover`], soft-RoCE queues found in a process's mappings, without its help.
//! - [`cli`], the `resex-agent` command line (the agent with BenchEx's server as the workload).

pub mod cli;
pub mod discover;
pub mod event;
pub mod gate;
pub mod preload;
pub mod session;
pub mod vm;
pub mod xen;

use gate::Gate;
use resex_common::LatencyRecorder;
use resex_shim::mailbox::Mailbox;
use session::{ChannelEnd, ChannelStatus, DocFn};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running agent; stops its threads when dropped.
pub struct Agent {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// The channel side's counters.
    pub channel: Arc<ChannelStatus>,
    /// Reports written into the mailbox.
    pub reports: Arc<AtomicU64>,
    /// Reports dropped because the mailbox was full.
    pub dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("reports", &self.reports)
            .finish()
    }
}

impl Agent {
    /// Starts the channel thread and (with an `interval`) a reporter that every interval takes
    /// the recorder's summary and, when it measured anything, writes it into `mailbox`.
    pub fn start(
        chan: Box<dyn ChannelEnd>,
        doc: DocFn,
        mut mailbox: Mailbox,
        recorder: Arc<Mutex<LatencyRecorder>>,
        interval: Option<Duration>,
        gate: Arc<Gate>,
    ) -> std::io::Result<Agent> {
        let stop = Arc::new(AtomicBool::new(false));
        let channel = Arc::new(ChannelStatus::default());
        let reports = Arc::new(AtomicU64::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        {
            let (stop, channel) = (stop.clone(), channel.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("agent-channel".into())
                    .spawn(move || {
                        session::run(chan, doc, channel, stop, Duration::from_millis(100), gate);
                    })?,
            );
        }
        if let Some(interval) = interval {
            let (stop, reports, dropped) = (stop.clone(), reports.clone(), dropped.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("agent-report".into())
                    .spawn(move || {
                        let mut last = Instant::now();
                        let mut next = last + interval;
                        while !stop.load(Ordering::Acquire) {
                            let now = Instant::now();
                            if now < next {
                                std::thread::sleep((next - now).min(Duration::from_millis(50)));
                                continue;
                            }
                            next += interval;
                            if next < now {
                                next = now + interval;
                            }
                            let s = recorder
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .take_interval();
                            let covered = u64::try_from(now.duration_since(last).as_nanos())
                                .unwrap_or(u64::MAX);
                            last = now;
                            if s.count == 0 {
                                continue;
                            }
                            match mailbox.report(&s, covered) {
                                Ok(true) => {
                                    reports.fetch_add(1, Ordering::AcqRel);
                                }
                                Ok(false) => {
                                    dropped.fetch_add(1, Ordering::AcqRel);
                                }
                                Err(e) => tracing::warn!("mailbox: {e}"),
                            }
                        }
                    })?,
            );
        }
        Ok(Agent {
            stop,
            threads,
            channel,
            reports,
            dropped,
        })
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
