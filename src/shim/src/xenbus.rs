//! xenstore from inside a Xen domU, through the kernel's `/dev/xen/xenbus` (the xenbus wire
//! protocol of `xen/io/xs_wire.h`: a 16-byte header `type, req_id, tx_id, len`, native-endian,
//! then `len` bytes of payload; the kernel forwards each whole message to xenstored over the
//! domain's xenstore ring and queues the reply). Paths without a leading `/` are relative to the
//! domain's home, `/local/domain/ID`. Only READ and WRITE, which [`Store`] needs.

use resex_proto::xsline::Store;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Mutex;

/// The kernel's xenbus device in a domU (with devtmpfs on /dev).
pub const DEVICE: &str = "/dev/xen/xenbus";
/// Largest payload xenstored sends or takes (`XENSTORE_PAYLOAD_MAX`).
pub const PAYLOAD_MAX: usize = 4096;
const XS_READ: u32 = 2;
const XS_WRITE: u32 = 11;
const XS_WATCH_EVENT: u32 = 15;
const XS_ERROR: u32 = 16;

/// Whether this machine is a Xen domain with the xenbus device.
pub fn available() -> bool {
    Path::new(DEVICE).exists()
}

/// A connection to xenstored: one request at a time.
#[derive(Debug)]
pub struct XenBus<T> {
    conn: Mutex<(T, u32)>,
}

impl XenBus<std::fs::File> {
    /// Opens [`DEVICE`].
    pub fn open() -> io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEVICE)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{DEVICE}: {e} (not a Xen domU, or no devtmpfs on /dev)"),
                )
            })?;
        Ok(Self::new(f))
    }
}

impl<T: Read + Write> XenBus<T> {
    /// A connection over `conn` (the device, or a test's socket).
    pub fn new(conn: T) -> Self {
        Self {
            conn: Mutex::new((conn, 0)),
        }
    }

    /// Sends one request and returns its reply's payload; `Err(name)` for xenstored's error
    /// reply (`ENOENT`, `EACCES`, ...).
    fn call(&self, ty: u32, payload: &[u8]) -> io::Result<Result<Vec<u8>, String>> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&n| n as usize <= PAYLOAD_MAX)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "xenstore request of {} bytes (most {PAYLOAD_MAX})",
                        payload.len()
                    ),
                )
            })?;
        let mut g = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let (conn, next) = &mut *g;
        *next = next.wrapping_add(1);
        let id = *next;
        let mut msg = Vec::with_capacity(16 + payload.len());
        for v in [ty, id, 0, len] {
            msg.extend_from_slice(&v.to_ne_bytes());
        }
        msg.extend_from_slice(payload);
        conn.write_all(&msg)?;
        loop {
            let mut h = [0u8; 16];
            conn.read_exact(&mut h)?;
            let word = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            let (rty, rid, len) = (word(0), word(4), word(12) as usize);
            if len > PAYLOAD_MAX {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("xenstore reply of {len} bytes (most {PAYLOAD_MAX})"),
                ));
            }
            let mut body = vec![0u8; len];
            conn.read_exact(&mut body)?;
            if rty == XS_WATCH_EVENT || rid != id {
                continue; // not ours: no watch is set, and requests are one at a time
            }
            if rty == XS_ERROR {
                let name = String::from_utf8_lossy(&body);
                return Ok(Err(name.trim_end_matches('\0').to_owned()));
            }
            if rty != ty {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("xenstore answered request type {ty} with type {rty}"),
                ));
            }
            return Ok(Ok(body));
        }
    }
}

fn refused(op: &str, path: &str, name: &str) -> io::Error {
    let kind = match name {
        "EACCES" | "EPERM" => io::ErrorKind::PermissionDenied,
        "ENOENT" => io::ErrorKind::NotFound,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("xenstore {op} {path}: {name}"))
}

impl<T: Read + Write + Send> Store for XenBus<T> {
    fn read(&self, path: &str) -> io::Result<Option<String>> {
        let mut p = path.as_bytes().to_vec();
        p.push(0);
        match self.call(XS_READ, &p)? {
            Ok(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
            Err(n) if n == "ENOENT" => Ok(None),
            Err(n) => Err(refused("read", path, &n)),
        }
    }

    fn write(&self, path: &str, value: &str) -> io::Result<()> {
        let mut p = path.as_bytes().to_vec();
        p.push(0);
        p.extend_from_slice(value.as_bytes());
        match self.call(XS_WRITE, &p)? {
            Ok(_) => Ok(()),
            Err(n) => Err(refused("write", path, &n)),
        }
    }
}

#[cfg(test)]
mod tests;
