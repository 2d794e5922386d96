//! The `memory` backend: domains whose guest RAM is memory in this process, each registering
//! the rings it was given over an in-process channel, with a CPU-time counter and a cap that
//! are plain numbers. Every call can be slowed down (a delay) or held (a gate), as a hung
//! libvirt would: what the daemon's tests and benchmark use to prove that no backend call
//! delays a tick. It is not a hypervisor; the real backends sit behind the same trait.

use crate::lever::{tx_json, tx_of, RateLever};
use crate::{BackendError, Channel, DomainInfo, Hypervisor};
use resex_common::TxLimit;
use resex_guestmem::GuestMemory;
use resex_proto::channel::{read_msg, write_msg, GuestMsg, HostMsg, MAX_LINE};
use resex_proto::Registration;
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// One domain.
pub struct MemDomain {
    /// What `domains` lists.
    pub info: DomainInfo,
    /// Its RAM.
    pub mem: Arc<dyn GuestMemory>,
    /// What its agent registers when the host opens its channel.
    pub registration: Option<Registration>,
    /// Its CPU time, ns (the caller advances it).
    pub cpu_ns: AtomicU64,
    /// The cap in force.
    pub cap: Mutex<Option<f64>>,
    /// The transmit limit in force (its rate lever).
    pub tx: Mutex<TxLimit>,
}

impl MemDomain {
    /// A domain named `name` (its key too) with `mem` as RAM.
    pub fn new(name: &str, mem: Arc<dyn GuestMemory>, registration: Option<Registration>) -> Self {
        Self {
            info: DomainInfo {
                entitled_bps: None,
                cpu_floor_pct: None,
                key: name.to_owned(),
                id: 0,
                name: name.to_owned(),
                vcpus: 1,
                ram_size: mem.size(),
                weight: 1.0,
                sla_threshold: None,
            },
            mem,
            registration,
            cpu_ns: AtomicU64::new(0),
            cap: Mutex::new(None),
            tx: Mutex::new(TxLimit::NONE),
        }
    }
}

/// A gate every call waits at while it is closed.
#[derive(Default)]
pub struct Gate {
    closed: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    /// Closes (`true`) or opens the gate.
    pub fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap_or_else(|p| p.into_inner()) = closed;
        self.cv.notify_all();
    }

    fn wait(&self) {
        let mut c = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        while *c {
            c = self.cv.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The backend.
pub struct MemoryBackend {
    domains: Vec<Arc<MemDomain>>,
    delay: Duration,
    gate: Arc<Gate>,
}

impl MemoryBackend {
    /// Domains, each call taking at least `delay`.
    pub fn new(domains: Vec<MemDomain>, delay: Duration) -> Self {
        Self {
            domains: domains
                .into_iter()
                .enumerate()
                .map(|(i, mut d)| {
                    d.info.id = u32::try_from(i + 1).unwrap_or(u32::MAX);
                    Arc::new(d)
                })
                .collect(),
            delay,
            gate: Arc::new(Gate::default()),
        }
    }

    /// The gate every call passes (open at first).
    pub fn gate(&self) -> Arc<Gate> {
        self.gate.clone()
    }

    /// The domains.
    pub fn domain(&self, key: &str) -> Result<&Arc<MemDomain>, BackendError> {
        self.domains
            .iter()
            .find(|d| d.info.key == key)
            .ok_or_else(|| BackendError::NoDomain(key.to_owned()))
    }

    fn call(&self) {
        self.gate.wait();
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
    }
}

/// The guest's end of a channel: answers `hello` with the registration, then reads answers
/// until the host goes away.
fn agent(s: UnixStream, doc: Option<Registration>) {
    let Ok(mut w) = s.try_clone() else { return };
    let mut r = BufReader::new(s);
    while let Ok(Some(m)) = read_msg::<HostMsg>(&mut r, MAX_LINE) {
        if let (HostMsg::Hello { .. }, Some(d)) = (&m, &doc) {
            let msg = GuestMsg::Register {
                registration: d.clone(),
            };
            if write_msg(&mut w, &msg).is_err() {
                return;
            }
        }
    }
}

impl Hypervisor for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn domains(&self) -> Result<Vec<DomainInfo>, BackendError> {
        self.call();
        Ok(self.domains.iter().map(|d| d.info.clone()).collect())
    }

    fn cpu_time_ns(&self, key: &str) -> Result<u64, BackendError> {
        self.call();
        Ok(self.domain(key)?.cpu_ns.load(Ordering::Relaxed))
    }

    fn memory(&self, key: &str) -> Result<Arc<dyn GuestMemory>, BackendError> {
        self.call();
        Ok(self.domain(key)?.mem.clone())
    }

    fn open_channel(&self, key: &str) -> Result<Channel, BackendError> {
        self.call();
        let d = self.domain(key)?;
        let (host, guest) =
            UnixStream::pair().map_err(|e| BackendError::io("a channel socket pair", e))?;
        let doc = d.registration.clone();
        std::thread::Builder::new()
            .name(format!("agent-{key}"))
            .spawn(move || agent(guest, doc))
            .map_err(|e| BackendError::io("starting the domain's agent", e))?;
        let rd = host
            .try_clone()
            .map_err(|e| BackendError::io("cloning the channel socket", e))?;
        Ok((Box::new(BufReader::new(rd)), Box::new(host)))
    }

    fn cap_mechanism(&self, _key: &str) -> String {
        self.call();
        "a number in memory".into()
    }

    fn save_cap(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        self.call();
        let cap = *self
            .domain(key)?
            .cap
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Ok(serde_json::json!(cap))
    }

    fn set_cap(&self, key: &str, pct: Option<f64>) -> Result<(), BackendError> {
        self.call();
        *self
            .domain(key)?
            .cap
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = pct;
        Ok(())
    }

    fn restore_cap(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
        self.call();
        *self
            .domain(key)?
            .cap
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = saved.as_f64();
        Ok(())
    }

    fn rate_lever(self: Arc<Self>) -> Option<Arc<dyn RateLever>> {
        Some(self)
    }
}

impl RateLever for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn describe(&self, key: &str) -> Option<String> {
        self.call();
        self.domain(key)
            .ok()
            .map(|_| "a limit in memory".to_owned())
    }

    fn save(&self, key: &str) -> Result<serde_json::Value, BackendError> {
        self.call();
        let tx = *self
            .domain(key)?
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Ok(tx_json(tx))
    }

    fn set(&self, key: &str, tx: TxLimit) -> Result<(), BackendError> {
        self.call();
        *self
            .domain(key)?
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = tx;
        Ok(())
    }

    fn restore(&self, key: &str, saved: &serde_json::Value) -> Result<(), BackendError> {
        self.call();
        *self
            .domain(key)?
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = tx_of(saved)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_guestmem::VecMemory;
    use std::io::BufRead;

    #[test]
    fn lists_counts_caps_and_registers_over_its_channel() {
        let doc = Registration {
            rings: Vec::new(),
            version: resex_proto::REGISTRATION_VERSION,
            vm: Some("a".into()),
            path_mtu: 1024,
            qps: vec![],
            mailbox: None,
        };
        let b = MemoryBackend::new(
            vec![MemDomain::new(
                "a",
                Arc::new(VecMemory::new(1 << 16)),
                Some(doc.clone()),
            )],
            Duration::ZERO,
        );
        assert_eq!(b.domains().unwrap()[0].ram_size, 1 << 16);
        b.domain("a").unwrap().cpu_ns.store(7, Ordering::Relaxed);
        assert_eq!(b.cpu_time_ns("a").unwrap(), 7);
        assert!(matches!(b.cpu_time_ns("b"), Err(BackendError::NoDomain(_))));
        let saved = b.save_cap("a").unwrap();
        b.set_cap("a", Some(20.0)).unwrap();
        assert_eq!(*b.domain("a").unwrap().cap.lock().unwrap(), Some(20.0));
        b.restore_cap("a", &saved).unwrap();
        assert_eq!(*b.domain("a").unwrap().cap.lock().unwrap(), None);
        let (mut r, mut w) = b.open_channel("a").unwrap();
        write_msg(&mut w, &HostMsg::Hello { version: 1 }).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let m: GuestMsg = serde_json::from_str(&line).unwrap();
        assert_eq!(m, GuestMsg::Register { registration: doc });
    }

    #[test]
    fn a_closed_gate_holds_every_call_until_it_opens() {
        let b = Arc::new(MemoryBackend::new(vec![], Duration::ZERO));
        b.gate().set_closed(true);
        let (tx, rx) = std::sync::mpsc::channel();
        let b2 = b.clone();
        std::thread::spawn(move || tx.send(b2.domains().map(|d| d.len())).unwrap());
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "held");
        b.gate().set_closed(false);
        assert_eq!(rx.recv().unwrap().unwrap(), 0);
    }
}
