//! The bootstrap stream over which endpoints are exchanged: a Unix socket path, `tcp:HOST:PORT`,
//! or, for a server inside a VM, `port:NAME`, a virtio-serial port whose host end a client on
//! the host connects to (QEMU's Unix socket): one client, the port being one stream; or, in a
//! Xen domU, `xs:NAME`, the xenstore link `data/resex/NAME` whose host end `resex xen hca
//! --relay NAME=PATH` relays to a Unix socket: each client there starts with
//! [`XS_CONNECT`], and clients take turns (the link is one stream).

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A bootstrap stream.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// Where a server listens.
pub enum Listener {
    /// A Unix socket.
    Unix(UnixListener),
    /// TCP.
    Tcp(TcpListener),
    /// A virtio-serial port: its one stream, handed out once.
    Port(std::path::PathBuf, std::sync::atomic::AtomicBool),
    /// A xenstore link (a Xen domU).
    Xs(Arc<Mutex<XsLink>>),
}

/// The line a relay sends on a xenstore link when a client connects to it.
pub use resex_proto::xsline::CONNECT as XS_CONNECT;

/// Both ends of a xenstore link.
pub type XsLink = (resex_proto::xsline::XsReader, resex_proto::xsline::XsWriter);

/// One client's turn on a xenstore link.
struct XsTurn(Arc<Mutex<XsLink>>);

impl Read for XsTurn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        l.0.set_timeout(Duration::from_secs(30));
        l.0.read(buf)
    }
}

impl Write for XsTurn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn tcp(addr: &str) -> Option<&str> {
    addr.strip_prefix("tcp:")
}

impl Listener {
    /// Binds `addr` (a stale Unix socket file is replaced).
    pub fn bind(addr: &str) -> std::io::Result<Listener> {
        if let Some(name) = addr.strip_prefix("xs:") {
            let store = resex_shim::xenbus::XenBus::open()?;
            let link = resex_proto::xsline::open(
                Arc::new(store),
                &format!("data/resex/{name}"),
                resex_proto::xsline::Side::Guest,
                Duration::from_secs(30),
                64 * 1024,
            );
            return Ok(Listener::Xs(Arc::new(Mutex::new(link))));
        }
        if let Some(name) = addr.strip_prefix("port:") {
            let path = resex_shim::guest::virtio_port(name)?;
            return Ok(Listener::Port(
                path,
                std::sync::atomic::AtomicBool::new(false),
            ));
        }
        if let Some(a) = tcp(addr) {
            return TcpListener::bind(a).map(Listener::Tcp);
        }
        let _ = std::fs::remove_file(addr);
        UnixListener::bind(addr).map(Listener::Unix)
    }

    /// Makes `accept` return `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        match self {
            Listener::Unix(l) => l.set_nonblocking(on),
            Listener::Tcp(l) => l.set_nonblocking(on),
            Listener::Port(..) | Listener::Xs(_) => Ok(()),
        }
    }

    /// The next client.
    pub fn accept(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(match self {
            Listener::Unix(l) => {
                let s = l.accept()?.0;
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(Duration::from_secs(30)))?;
                Box::new(s)
            }
            Listener::Tcp(l) => {
                let s = l.accept()?.0;
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                Box::new(s)
            }
            Listener::Port(path, taken) => {
                if taken.swap(true, std::sync::atomic::Ordering::AcqRel) {
                    std::thread::sleep(Duration::from_millis(20));
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                // The client is there when the port's host end is connected.
                match resex_shim::guest::open_port(path, &|| false)? {
                    Some(f) => Box::new(f),
                    None => return Err(std::io::ErrorKind::WouldBlock.into()),
                }
            }
            Listener::Xs(link) => {
                xs_wait_connect(link)?;
                Box::new(XsTurn(link.clone()))
            }
        })
    }
}

/// Waits up to 100 ms for a relay's [`XS_CONNECT`] on the link (`WouldBlock` without one);
/// other lines (a late half of an earlier client's turn) are skipped.
fn xs_wait_connect(link: &Mutex<XsLink>) -> std::io::Result<()> {
    let mut l = link.lock().unwrap_or_else(|p| p.into_inner());
    l.0.set_timeout(Duration::from_millis(100));
    let mut line = String::new();
    match l.0.read_line(&mut line) {
        Ok(_) if line.trim_end() == XS_CONNECT => Ok(()),
        Ok(_) => Err(std::io::ErrorKind::WouldBlock.into()),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            Err(std::io::ErrorKind::WouldBlock.into())
        }
        Err(e) => Err(e),
    }
}

/// Connects to `addr`, retrying for up to `wait` while the server is not there yet.
pub fn connect(addr: &str, wait: Duration) -> std::io::Result<Box<dyn Stream>> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let r: std::io::Result<Box<dyn Stream>> = match tcp(addr) {
            Some(a) => TcpStream::connect(a).map(|s| Box::new(s) as Box<dyn Stream>),
            None => UnixStream::connect(addr).map(|s| Box::new(s) as Box<dyn Stream>),
        };
        match r {
            Ok(s) => return Ok(s),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Sends one JSON line.
pub fn send<T: Serialize>(s: &mut dyn Stream, m: &T) -> std::io::Result<()> {
    let mut v = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    v.push(b'\n');
    s.write_all(&v)?;
    s.flush()
}

/// Receives one JSON line (at most 64 KiB).
pub fn recv<T: for<'de> Deserialize<'de>>(s: &mut dyn Stream) -> std::io::Result<T> {
    let mut r = BufReader::new(s.take(64 * 1024));
    let mut line = String::new();
    // One byte at a time would be slow; a BufReader over `take` may read past the line, so the
    // protocol is strictly one message per turn: nothing follows until we answer.
    r.read_line(&mut line)?;
    if line.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "peer closed the bootstrap stream",
        ));
    }
    serde_json::from_str(&line).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
