//! The collection thread: subscribes to the daemon, forwards every snapshot, and when the
//! daemon goes away says so and reconnects (once a second) until the receiver hangs up.

use crate::app::Event;
use resex_api::ApiClient;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

/// Starts the collector for the socket at `path`, a snapshot every `interval`.
pub fn spawn(
    path: PathBuf,
    interval: Duration,
    tx: Sender<Event>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("top-collect".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let r = ApiClient::connect(&path).and_then(|mut c| {
                    c.subscribe(interval)?;
                    loop {
                        let s = c.next_snapshot()?;
                        if tx.send(Event::Snapshot(Box::new(s))).is_err()
                            || stop.load(Ordering::Acquire)
                        {
                            return Ok(());
                        }
                    }
                });
                match r {
                    Ok(()) => return,
                    Err(e) => {
                        if tx.send(Event::Lost(e.to_string())).is_err() {
                            return;
                        }
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
}
