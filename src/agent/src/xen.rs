//! The agent inside a Xen domU: its channels are [`resex_proto::xsline`] links over xenstore
//! (through the kernel's `/dev/xen/xenbus`), under the domain's guest-writable
//! `data/resex/NAME`: `agent` (registration, to resexd), `hca` (the software HCA's control path,
//! to `resex xen hca`) and BenchEx's bootstrap (`--listen xs:NAME`, relayed by `resex xen hca
//! --relay`). Doorbells do not cross them: the HCA polls the doorbell records in guest memory.

use crate::session::{ChannelEnd, Session};
use resex_proto::xsline::{self, Side, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A link's directory, relative to the domain's home.
pub fn base(name: &str) -> String {
    format!("data/resex/{name}")
}

/// The key `resex xen hca` sets to `up` while it serves the domain (and `down` as it exits).
pub fn hca_state_key() -> String {
    format!("{}/host", base("hca"))
}

/// How long a write waits for the host's receipt, and a read for the host's next line before
/// it says `TimedOut` (the agent's channel reads on).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The registration channel over the link `agent`: a session is a new writer on it; the
/// agent registers as it starts (no connection tells the host), and reads that time out do not
/// end it (a write the host does not take in [`TIMEOUT`] does).
pub struct XenChannel {
    store: Arc<dyn Store>,
    base: String,
}

impl std::fmt::Debug for XenChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XenChannel")
            .field("base", &self.base)
            .finish()
    }
}

impl XenChannel {
    /// The channel on the link `name` through `store`.
    pub fn new(store: Arc<dyn Store>, name: &str) -> Self {
        Self {
            store,
            base: base(name),
        }
    }
}

impl ChannelEnd for XenChannel {
    fn next_session(&mut self, stop: &AtomicBool) -> std::io::Result<Option<Session>> {
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        let (r, w) = xsline::open(
            self.store.clone(),
            &self.base,
            Side::Guest,
            TIMEOUT,
            resex_proto::channel::MAX_LINE,
        );
        Ok(Some((Box::new(r), Box::new(w))))
    }

    fn speaks_first(&self) -> bool {
        true
    }
}

/// Waits until `resex xen hca` serves this domain (its state key says `up`), checking `stop`
/// every 200 ms; false when stopped first.
pub fn wait_for_hca(store: &dyn Store, stop: &dyn Fn() -> bool) -> std::io::Result<bool> {
    let key = hca_state_key();
    while !stop() {
        if store.read(&key)?.as_deref().map(str::trim) == Some("up") {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(false)
}

/// The software HCA's control path over the link `hca`.
pub fn remote_hca(store: Arc<dyn Store>) -> resex_proto::hca_wire::RemoteHca {
    let (mut r, w) = xsline::open(
        store,
        &base("hca"),
        Side::Guest,
        TIMEOUT,
        resex_proto::channel::MAX_LINE,
    );
    // An answer may wait for the HCA thread and a busy dom0.
    r.set_timeout(Duration::from_secs(60));
    resex_proto::hca_wire::RemoteHca::new(Box::new(r), Box::new(w))
}
