//! The agent inside a real VM: no RAM file, so the shim works in locked memory of its own
//! (`PinnedMemory`, guest-physical pages from `/proc/self/pagemap`), reaches the software HCA
//! and the host daemon over virtio-serial ports, and registers guest-physical page lists.

use crate::session::{ChannelEnd, Session};
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use resex_shim::guest::{virtio_port as port, virtio_port_in as port_in};

/// A virtio-serial port as the agent's channel: each session is the port opened afresh; it ends
/// when the host side goes away.
#[derive(Debug)]
pub struct PortChannel {
    path: PathBuf,
}

impl PortChannel {
    /// The channel on the port device at `path`.
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }
}

impl ChannelEnd for PortChannel {
    fn next_session(&mut self, stop: &AtomicBool) -> std::io::Result<Option<Session>> {
        while !stop.load(Ordering::Acquire) {
            let stopped = || stop.load(Ordering::Acquire);
            match resex_shim::guest::open_port(&self.path, &stopped) {
                Ok(Some(f)) => {
                    let r = BufReader::new(f.try_clone()?);
                    return Ok(Some((Box::new(r), Box::new(f))));
                }
                Ok(None) => return Ok(None),
                // Busy (still open from the last session): try again.
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_found_by_name() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("sys");
        for (p, n) in [
            ("vport0p1", "org.resex.agent.0"),
            ("vport0p2", "org.resex.hca.0"),
        ] {
            std::fs::create_dir_all(sys.join(p)).unwrap();
            std::fs::write(sys.join(p).join("name"), format!("{n}\n")).unwrap();
        }
        let dev = d.path().join("dev");
        assert_eq!(
            port_in(&sys, &dev, "org.resex.hca.0").unwrap(),
            dev.join("vport0p2")
        );
        assert_eq!(
            port_in(&sys, &dev, "/dev/x").unwrap(),
            PathBuf::from("/dev/x")
        );
        let e = port_in(&sys, &dev, "nope").unwrap_err().to_string();
        assert!(
            e.contains("org.resex.agent.0") && e.contains("<channel"),
            "{e}"
        );
    }
}
