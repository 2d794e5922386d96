//! A local etcd (the installed `etcd` binary, Debian etcd-server) on loopback ports with its
//! data in a temporary directory: what `resex fleet demo` and the tests run against. It can be
//! killed and started again on the same ports and data (etcd lost and back).

use crate::config::FleetConfig;
use crate::error::FleetError;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running (or stopped) local etcd.
#[derive(Debug)]
pub struct LocalEtcd {
    child: Option<Child>,
    dir: tempfile::TempDir,
    client: u16,
    peer: u16,
    tls: Option<Tls>,
}

/// A TLS etcd's files (PEM).
#[derive(Debug, Clone)]
struct Tls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// A loopback port free now (the kernel's pick).
pub fn free_port() -> Result<u16, FleetError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| FleetError::Etcd(format!("port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| FleetError::Etcd(e.to_string()))?
        .port())
}

/// For tests and benches: runs `f` to completion on a single-threaded runtime (direct etcd
/// calls beside a member's own thread).
///
/// # Panics
/// When the runtime cannot be built (out of threads or file descriptors).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

/// Is the etcd binary installed?
#[must_use]
pub fn installed() -> bool {
    Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// For tests: whether etcd is installed; when it is not, says so on stderr (the test then
/// passes as skipped), unless `RESEX_REQUIRE_SYSTEM_DEPS=1` (CI), where it panics.
#[must_use]
pub fn installed_or_skip() -> bool {
    if installed() {
        return true;
    }
    assert!(
        std::env::var("RESEX_REQUIRE_SYSTEM_DEPS").as_deref() != Ok("1"),
        "etcd is not installed (apt-get install etcd-server)"
    );
    eprintln!("etcd is not installed (apt-get install etcd-server): skipped");
    false
}

impl LocalEtcd {
    /// Starts etcd and waits (up to 20 s) until it answers.
    pub fn start() -> Result<Self, FleetError> {
        Self::start_with(None)
    }

    /// Starts etcd serving TLS only (`https://`), with `tls` = (server certificate, its key,
    /// the CA that clients' certificates must chain to: `--client-cert-auth`).
    pub fn start_tls(cert: PathBuf, key: PathBuf, ca: PathBuf) -> Result<Self, FleetError> {
        Self::start_with(Some(Tls { cert, key, ca }))
    }

    fn start_with(tls: Option<Tls>) -> Result<Self, FleetError> {
        if !installed() {
            return Err(FleetError::NotInstalled);
        }
        let mut e = Self {
            child: None,
            // In memory where there is a tmpfs: a throwaway etcd need not wait on a shared
            // disk's fsync (seen: 0.7 s writes on a loaded machine, a fleet that flapped).
            dir: (if std::path::Path::new("/dev/shm").is_dir() {
                tempfile::tempdir_in("/dev/shm")
            } else {
                tempfile::tempdir()
            })
            .map_err(|e| FleetError::Etcd(format!("temp dir: {e}")))?,
            client: free_port()?,
            peer: free_port()?,
            tls,
        };
        e.restart()?;
        Ok(e)
    }

    /// Its client URL.
    #[must_use]
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client)
    }

    /// Its data directory.
    #[must_use]
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts it (again, on the same ports and data) and waits until it answers.
    pub fn restart(&mut self) -> Result<(), FleetError> {
        self.kill();
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let url = self.url();
        let child = Command::new("etcd")
            .args(["--name", "resex", "--data-dir"])
            .arg(self.data_dir())
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("resex={peer}")])
            .args(self.tls.iter().flat_map(|t| {
                [
                    "--cert-file".into(),
                    t.cert.clone().into_os_string(),
                    "--key-file".into(),
                    t.key.clone().into_os_string(),
                    "--trusted-ca-file".into(),
                    t.ca.clone().into_os_string(),
                    "--client-cert-auth".into(),
                ]
            }))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| FleetError::Etcd(format!("starting etcd: {e}")))?;
        self.child = Some(child);
        let mut cfg = FleetConfig::new(vec![url]);
        if let Some(t) = &self.tls {
            // Ready when it answers a client with the CA's own client certificate.
            cfg.ca_file = Some(t.ca.clone());
            cfg.cert_file = Some(t.cert.clone());
            cfg.key_file = Some(t.key.clone());
        }
        let t = Instant::now();
        while crate::client::Fleet::connect(&cfg).is_err() {
            if t.elapsed() > Duration::from_secs(20) {
                return Err(FleetError::Etcd("etcd did not answer within 20 s".into()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Kills it (SIGKILL): etcd lost.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}
