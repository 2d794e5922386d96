//! The embedded host's Unix sockets: softhca's admin path (the rate lever) and each guest's
//! control path (`hca_wire`), each served by a thread per connection until stopped.

use crate::error::{io, HostError};
use resex_proto::hca_admin::{self, AdminRequest};
use resex_proto::hca_wire;
use resex_softhca::mr::GuestId;
use resex_softhca::{Clock, GuestPort, MonotonicClock, SoftHca};
use std::io::BufReader;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Serves softhca's admin path (`hca_admin`: the rate lever's vport limits) on a Unix socket
/// at `sock` (mode 0600), one thread per connection, until `stop`.
pub fn serve_admin(
    sock: &Path,
    hca: SoftHca,
    clock: Arc<MonotonicClock>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, HostError> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(sock);
    let l = UnixListener::bind(sock).map_err(io(format!("binding {}", sock.display())))?;
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(0o600))
        .map_err(io(format!("securing {}", sock.display())))?;
    l.set_nonblocking(true).map_err(io("socket"))?;
    std::thread::Builder::new()
        .name("hca-admin".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                match l.accept() {
                    Ok((s, _)) => {
                        let (hca, clock) = (hca.clone(), clock.clone());
                        std::thread::spawn(move || {
                            let _ = s.set_nonblocking(false);
                            let Ok(r) = s.try_clone() else { return };
                            let mut w = s;
                            let mut handle = |req: &AdminRequest| {
                                let (vport, set) = match req {
                                    AdminRequest::GetTx { vport } => (*vport, None),
                                    AdminRequest::SetTx { vport, tx } => (*vport, Some(*tx)),
                                };
                                let g = GuestId(vport);
                                if let Some(tx) = set {
                                    hca.set_tx_limit(g, tx, clock.now_ns());
                                }
                                hca.tx_limit(g).ok_or(hca_admin::NoVport(vport))
                            };
                            if let Err(e) =
                                hca_admin::serve(&mut BufReader::new(r), &mut w, &mut handle)
                            {
                                tracing::debug!("softhca admin session: {e}");
                            }
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => {
                        tracing::warn!("softhca admin socket: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
        .map_err(io("spawning a thread"))
}

/// Serves `port` (one guest's HCA control path, `hca_wire`) on a Unix socket at `sock`, one
/// thread per connection, until `stop`. Used by the embedded host for each guest and by
/// `resex kvm hca` for its host-side peer.
pub fn serve_control(
    name: &str,
    sock: &Path,
    port: GuestPort,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, HostError> {
    let _ = std::fs::remove_file(sock);
    let l = UnixListener::bind(sock).map_err(io(format!("binding {}", sock.display())))?;
    l.set_nonblocking(true).map_err(io("socket"))?;
    let name = name.to_owned();
    std::thread::Builder::new()
        .name(format!("hca-ctl-{name}"))
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                match l.accept() {
                    Ok((s, _)) => {
                        let port = port.clone();
                        let name = name.clone();
                        std::thread::spawn(move || {
                            let _ = s.set_nonblocking(false);
                            let Ok(r) = s.try_clone() else { return };
                            let mut r = BufReader::new(r);
                            let mut w = s;
                            match hca_wire::serve(&port, &mut r, &mut w, true) {
                                Ok(hca_wire::Served::Doorbell(_)) => {
                                    if let Err(e) = port.attach_doorbell(w) {
                                        tracing::warn!("{name}: HCA doorbell: {e}");
                                    }
                                }
                                Ok(hca_wire::Served::Ended(_)) => {}
                                Err(e) => tracing::warn!("{name}: HCA control channel: {e}"),
                            }
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => {
                        tracing::warn!("{name}: HCA control socket: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
        .map_err(io("spawning a thread"))
}
