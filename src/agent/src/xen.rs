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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Gate;
    use crate::session::{run, ChannelStatus, DocFn};
    use resex_proto::channel::{read_msg, write_msg, GuestMsg, HostMsg, MAX_LINE};
    use resex_proto::xsline::MemStore;
    use resex_proto::{Registration, REGISTRATION_VERSION};

    /// The host's end of the registration link (as resexd's registrar opens it, but with
    /// `data/...` for the domain's home).
    fn host(store: &Arc<MemStore>) -> (xsline::XsReader, xsline::XsWriter) {
        xsline::open(
            store.clone(),
            &base("agent"),
            Side::Host,
            Duration::from_secs(20),
            MAX_LINE,
        )
    }

    fn register(r: &mut xsline::XsReader) -> Registration {
        match read_msg::<GuestMsg>(r, MAX_LINE).unwrap().unwrap() {
            GuestMsg::Register { registration } => registration,
        }
    }

    fn wait_accepted(status: &ChannelStatus, n: u64) {
        for _ in 0..1000 {
            if status.accepted.load(Ordering::Acquire) >= n {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(status.accepted.load(Ordering::Acquire), n);
    }

    #[test]
    fn the_agent_registers_unasked_and_again_for_a_restarted_host() {
        let store = Arc::new(MemStore::default());
        let doc: DocFn = Arc::new(|| Registration {
            rings: Vec::new(),
            version: REGISTRATION_VERSION,
            vm: Some("domv".into()),
            path_mtu: 1024,
            qps: Vec::new(),
            mailbox: None,
        });
        let (status, stop) = (
            Arc::new(ChannelStatus::default()),
            Arc::new(AtomicBool::new(false)),
        );
        let chan = Box::new(XenChannel::new(store.clone(), "agent"));
        let agent = {
            let (status, stop) = (status.clone(), stop.clone());
            std::thread::spawn(move || {
                run(
                    chan,
                    doc,
                    status,
                    stop,
                    Duration::from_millis(20),
                    Arc::new(Gate::default()),
                )
            })
        };
        // No hello yet: the agent spoke first.
        let (mut r, mut w) = host(&store);
        assert_eq!(register(&mut r).vm.as_deref(), Some("domv"));
        let accepted = HostMsg::Accepted {
            vm: "domv".into(),
            qps: 0,
            mailbox: false,
        };
        write_msg(&mut w, &accepted).unwrap();
        wait_accepted(&status, 1);
        // resexd restarts: a new host end says hello and gets the registration again. (A new
        // writer does not wait for the receipt of the last one's last line.)
        drop((r, w));
        let (mut r, mut w) = host(&store);
        write_msg(&mut w, &HostMsg::Hello { version: 1 }).unwrap();
        assert_eq!(register(&mut r).vm.as_deref(), Some("domv"));
        write_msg(&mut w, &accepted).unwrap();
        wait_accepted(&status, 2);
        // One session all along: the link has no connection to lose.
        assert_eq!(status.sessions.load(Ordering::Acquire), 1);
        stop.store(true, Ordering::Release);
        agent.join().unwrap();
    }
}
