//! `resex xen hca DOMAIN` (feature `xen`): a softhca whose port 0 is the domU's memory through
//! foreign mappings, served over the xenstore link `data/resex/hca`; port 1 a host-side peer on
//! a Unix socket; BenchEx's bootstrap relayed (`--relay`). While it serves, the link's `host`
//! key says `up` (the agent waits for it), and `down` after.

use anyhow::Result;
use clap::Args;

/// Options of `resex xen hca`.
#[derive(Debug, Args)]
pub struct HcaArgs {
    /// The domain's name (as `xl list` shows it).
    pub domain: String,
    /// RAM file of the host-side peer (created).
    #[arg(long, default_value = "/dev/shm/resex-xen-peer.ram")]
    pub peer_ram: std::path::PathBuf,
    /// Its size, MiB.
    #[arg(long, default_value_t = 64)]
    pub peer_ram_mib: u64,
    /// The control socket the host-side peer's shim connects to (benchex client --hca).
    #[arg(long, default_value = "/run/resex-xen-peer.sock")]
    pub peer_hca: std::path::PathBuf,
    /// NAME=PATH: relay clients of the Unix socket PATH to the domain's link NAME (BenchEx's
    /// `--listen xs:NAME` in the guest; `benchex client --connect PATH` here). Repeatable.
    #[arg(long, value_parser = parse_relay)]
    pub relay: Vec<(String, std::path::PathBuf)>,
    /// At exit, write what the HCA executed for the domain (per-QP and totals) as JSON here.
    #[arg(long)]
    pub stats: Option<std::path::PathBuf>,
}

/// Why a `--relay` value was refused.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not NAME=PATH (NAME: letters, digits, - and _)")]
pub struct RelayError(String);

fn parse_relay(s: &str) -> Result<(String, std::path::PathBuf), RelayError> {
    match s.split_once('=') {
        Some((n, p))
            if !n.is_empty()
                && !p.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Ok((n.to_owned(), p.into()))
        }
        _ => Err(RelayError(s.to_owned())),
    }
}

/// Runs `resex xen hca`.
#[cfg(not(feature = "xen"))]
pub fn run(_: &HcaArgs) -> Result<()> {
    anyhow::bail!("`resex xen` is not in this build: rebuild with `--features xen` (Debian: libxen-dev, libclang-dev)")
}

/// Runs `resex xen hca`.
#[cfg(feature = "xen")]
pub fn run(a: &HcaArgs) -> Result<()> {
    real::run(a)
}

#[cfg(feature = "xen")]
mod real {
    use super::HcaArgs;
    use anyhow::{bail, Context, Result};
    use resex_backend::xen::{link_base, relay, RealXen, XenBackend};
    use resex_backend::Hypervisor;
    use resex_proto::xsline::{self, Side, Store};
    use resex_softhca::GuestPort;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    pub fn run(a: &HcaArgs) -> Result<()> {
        let xen = XenBackend::new(RealXen::open()?);
        let Some(d) = xen.domains()?.into_iter().find(|d| d.name == a.domain) else {
            bail!("no running domain named `{}` (xl list)", a.domain);
        };
        let domid = XenBackend::<RealXen>::domid(&d.key)?;
        let ram = xen.memory(&d.key)?;
        let vm = crate::vm_hca::VmHca::start(ram, &a.peer_ram, a.peer_ram_mib)?;
        let (guest, peer) = (vm.guest.clone(), vm.peer.clone());
        let stop = benchex::opts::stop_on_signals()?;
        let store = xen.xs_store();
        let base = link_base(domid, "hca");
        let guest_thread = serve_guest(store.clone(), base.clone(), guest.clone(), stop.clone())?;
        let peer_thread = resex_embedded::sockets::serve_control(
            "peer",
            &a.peer_hca,
            peer.clone(),
            stop.clone(),
        )?;
        let mut relays = Vec::new();
        for (name, path) in &a.relay {
            relays.push(relay(
                store.clone(),
                link_base(domid, name),
                path,
                stop.clone(),
            )?);
        }
        let state = format!("{base}/host");
        store.write(&state, "up").context("writing xenstore")?;
        println!(
        "resex xen hca: {} (domid {domid}) on port 0 via xenstore {base}; peer on port 1 at {}{}",
        a.domain,
        a.peer_hca.display(),
        a.relay
            .iter()
            .map(|(n, p)| format!("; relay {} <-> data/resex/{n}", p.display()))
            .collect::<String>()
    );
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Err(e) = store.write(&state, "down") {
            tracing::warn!("{}: could not say `down` at {state}: {e}", a.domain);
        }
        let _ = peer_thread.join();
        let _ = guest_thread.join();
        for r in relays {
            let _ = r.join();
        }
        let _ = std::fs::remove_file(&a.peer_hca);
        let _ = std::fs::remove_file(&a.peer_ram);
        for (_, p) in &a.relay {
            let _ = std::fs::remove_file(p);
        }
        crate::vm_hca::report(&a.domain, &guest, a.stats.as_deref())
    }

    /// Serves the guest's control path on the link at `base` until `stop` (the link's reads give
    /// up every second so `stop` is seen; its writes wait up to 30 s for the guest's receipt).
    fn serve_guest(
        store: Arc<dyn Store>,
        base: String,
        guest: GuestPort,
        stop: Arc<AtomicBool>,
    ) -> Result<std::thread::JoinHandle<()>> {
        let t = std::thread::Builder::new()
            .name("xen-hca".into())
            .spawn(move || {
                let (mut r, mut w) = xsline::open(
                    store,
                    &base,
                    Side::Host,
                    Duration::from_secs(30),
                    resex_proto::channel::MAX_LINE,
                );
                r.set_timeout(Duration::from_secs(1));
                let mut log = resex_common::LogLimiter::default();
                while !stop.load(Ordering::Acquire) {
                    match resex_proto::hca_wire::serve(&guest, &mut r, &mut w, false) {
                        Ok(s) => tracing::info!("{base}: HCA session ended: {s:?}"),
                        Err(resex_proto::channel::LineError::Io(e))
                            if e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(e) => {
                            if let Some(n) = log.hit() {
                                tracing::warn!("{base}: HCA control path: {e} [{n}]");
                            }
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    }
                }
            })?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relays_are_name_equals_path() {
        assert_eq!(
            parse_relay("bench=/run/b.sock").unwrap(),
            ("bench".into(), "/run/b.sock".into())
        );
        for bad in ["bench", "=/x", "b=", "a/b=/x"] {
            let e = parse_relay(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}` is not NAME=PATH")), "{e}");
        }
    }
}
