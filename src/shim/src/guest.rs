//! A guest process's view of its machine: its RAM (a file whose offset is the guest-physical
//! address, as the embedded host gives every guest) and its software HCA's control channel.
//! [`GuestMachine::open`] turns the two into a [`SoftProvider`].

use crate::soft::SoftProvider;
use crate::ShimError;
use resex_guestmem::{FileMemory, GuestMemory};
use resex_proto::hca::HcaControl;
use resex_proto::hca_wire::RemoteHca;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a guest's memory and device are.
#[derive(Debug, Clone)]
pub struct GuestMachine {
    /// The guest RAM file.
    pub ram: PathBuf,
    /// The softhca control socket.
    pub hca: PathBuf,
    /// First byte of RAM the provider may allocate from (below it: the agent's mailbox).
    pub heap_start: u64,
}

impl GuestMachine {
    /// A machine whose heap starts at 1 MiB.
    pub fn new(ram: impl AsRef<Path>, hca: impl AsRef<Path>) -> Self {
        Self {
            ram: ram.as_ref().to_owned(),
            hca: hca.as_ref().to_owned(),
            heap_start: 1 << 20,
        }
    }

    /// Maps the RAM and connects to the device.
    pub fn open(&self) -> Result<(Arc<dyn GuestMemory>, SoftProvider), ShimError> {
        let mem: Arc<dyn GuestMemory> = Arc::new(FileMemory::open(&self.ram)?);
        let ctl: Arc<dyn HcaControl> =
            Arc::new(RemoteHca::connect_unix(&self.hca).map_err(|e| {
                ShimError::Unavailable(format!(
                    "cannot reach the software HCA at {}: {e}",
                    self.hca.display()
                ))
            })?);
        let size = mem.size();
        let p = SoftProvider::new(mem.clone(), self.heap_start, size, ctl)?;
        Ok((mem, p))
    }
}

/// The virtio-serial port device named `name` (a path is taken as it is): the kernel lists each
/// port's name in `/sys/class/virtio-ports/vportNpM/name` (udev's `/dev/virtio-ports/NAME`
/// links are not there in a minimal guest).
pub fn virtio_port(name: &str) -> std::io::Result<std::path::PathBuf> {
    virtio_port_in(
        Path::new("/sys/class/virtio-ports"),
        Path::new("/dev"),
        name,
    )
}

/// [`virtio_port`] against other directories (tests).
pub fn virtio_port_in(sys: &Path, dev: &Path, name: &str) -> std::io::Result<std::path::PathBuf> {
    if name.starts_with('/') {
        return Ok(std::path::PathBuf::from(name));
    }
    let mut seen = Vec::new();
    for e in std::fs::read_dir(sys)? {
        let e = e?;
        let n = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
        if n.trim() == name {
            return Ok(dev.join(e.file_name()));
        }
        seen.push(n.trim().to_owned());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "no virtio-serial port named {name} (the VM has: {}); the domain needs \
             <channel type='unix'><target type='virtio' name='{name}'/></channel>",
            seen.join(", ")
        ),
    ))
}

/// Waits until the host end of the virtio-serial port `f` is connected (the kernel reports
/// POLLHUP on a port whose host side is closed, and reads return end-of-file), checking `stop`
/// every 100 ms; false when stopped first.
pub fn wait_for_host(f: &std::fs::File, stop: &dyn Fn() -> bool) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    while !stop() {
        let mut p = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd for a file descriptor we own, for the call's duration.
        let n = unsafe { libc::poll(&mut p, 1, 100) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n > 0 && p.revents & libc::POLLHUP == 0 && p.revents & libc::POLLOUT != 0 {
            return Ok(true);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(false)
}

/// Opens the virtio-serial port `path` read-write and waits for its host end (see
/// [`wait_for_host`]).
pub fn open_port(path: &Path, stop: &dyn Fn() -> bool) -> std::io::Result<Option<std::fs::File>> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    Ok(wait_for_host(&f, stop)?.then_some(f))
}
