//! The local API, server side: a Unix socket (mode 0600: root only, like libvirt's admin
//! socket) speaking the JSON lines of `resex_api` (requests, answers, snapshots).

use resex_api::{ErrorAnswer, PinAnswer, Request, Snapshot};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The shared snapshot.
pub type Shared = Arc<RwLock<Arc<Snapshot>>>;

/// What the admin asks of the control loop through the API.
#[derive(Debug, Clone, PartialEq)]
pub enum Admin {
    /// Pin (or with `None` unpin) a VM's cap.
    Pin(String, Option<f64>),
    /// Pin (or with `None` unpin) a VM's transmit limit.
    Rate(String, Option<resex_common::TxLimit>),
}

/// Why an [`Admin`] request was not done.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The core refused it (no such VM, a bad value, no rate lever).
    #[error(transparent)]
    Refused(#[from] resex_core::CoreError),
    /// The daemon is stopping.
    #[error("the daemon is stopping")]
    Stopping,
    /// The control loop did not answer in time.
    #[error("the control loop did not answer")]
    NoAnswer,
}

/// Carries an [`Admin`] request to the loop: answers what was done, or why not.
pub type PinFn = Arc<dyn Fn(Admin) -> Result<String, AdminError> + Send + Sync>;

fn current(s: &Shared) -> Arc<Snapshot> {
    s.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Writes an admin request's answer: what was done, or why not.
fn answer(w: &mut dyn Write, r: Result<String, AdminError>) -> std::io::Result<()> {
    match r {
        Ok(ok) => serde_json::to_writer(&mut *w, &PinAnswer { ok })?,
        Err(e) => serde_json::to_writer(
            &mut *w,
            &ErrorAnswer {
                error: e.to_string(),
            },
        )?,
    }
    w.write_all(b"\n")
}

fn serve(
    stream: UnixStream,
    shared: Shared,
    stop: Arc<AtomicBool>,
    pin: PinFn,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    // A subscriber that stops reading is dropped instead of holding its thread forever.
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut w = stream.try_clone()?;
    let r = BufReader::new(stream.take(64 * 1024));
    for line in r.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match Request::parse(&line) {
            Ok(Request::Status) => {
                serde_json::to_writer(&mut w, &*current(&shared))?;
                w.write_all(b"\n")?;
            }
            Ok(Request::Subscribe { interval_ms }) => {
                let every = Duration::from_millis(interval_ms.clamp(10, 60_000));
                while !stop.load(Ordering::Acquire) {
                    serde_json::to_writer(&mut w, &*current(&shared))?;
                    w.write_all(b"\n")?;
                    w.flush()?;
                    std::thread::sleep(every);
                }
                return Ok(());
            }
            // The core checks the values (a cap must be a positive percent).
            Ok(Request::Pin { vm, pct }) => answer(&mut w, pin(Admin::Pin(vm, pct)))?,
            Ok(Request::Rate { vm, tx }) => answer(&mut w, pin(Admin::Rate(vm, tx)))?,
            Err(e) => {
                serde_json::to_writer(
                    &mut w,
                    &ErrorAnswer {
                        error: e.to_string(),
                    },
                )?;
                w.write_all(b"\n")?;
            }
        }
    }
    Ok(())
}

use std::io::Read;

/// Binds the socket (mode 0600) and serves it on a thread until `stop`.
pub fn start(
    path: &Path,
    shared: Shared,
    stop: Arc<AtomicBool>,
    pin: PinFn,
) -> std::io::Result<(PathBuf, std::thread::JoinHandle<()>)> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    if UnixStream::connect(path).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("{} is in use: another resexd is running", path.display()),
        ));
    }
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    l.set_nonblocking(true)?;
    let p = path.to_owned();
    let t = std::thread::Builder::new()
        .name("resexd-api".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                match l.accept() {
                    Ok((s, _)) => {
                        let (shared, stop, pin) = (shared.clone(), stop.clone(), pin.clone());
                        let _ = s.set_nonblocking(false);
                        std::thread::spawn(move || {
                            let _ = serve(s, shared, stop, pin);
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        tracing::warn!("API socket: {e}");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
            let _ = std::fs::remove_file(&p);
        })?;
    Ok((path.to_owned(), t))
}
