//! The device's end of its guests' doorbells: the polling thread waits on them instead of
//! sleeping a fixed few microseconds, so an idle port costs nothing and a pacing one wakes
//! when a completion is due or a guest rings.
//!
//! A guest's doorbell is a byte stream (see `resex_proto::doorbell`); any bytes on it are
//! rings. A guest that asked for one is served when it rings; one that never did (a VM over a
//! virtio-serial channel, an old shim) is polled, and while any such guest is attached the
//! thread rests no longer than its poll interval. Nothing a guest writes costs more than one
//! bounded read per wake-up; a stream that closes or fails is dropped, and its guest is polled
//! again.

use crate::mr::GuestId;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Bytes read from one doorbell per wake-up (rings beyond it wait for the next one, which
/// comes at once: the stream is still readable).
const DRAIN: usize = 4096;

/// The doorbells the polling thread waits on.
#[derive(Debug, Default)]
pub(crate) struct Doorbells {
    bells: Vec<(GuestId, UnixStream)>,
    fds: Vec<libc::pollfd>,
    buf: Vec<u8>,
}

impl Doorbells {
    /// Adds guests' new doorbells.
    pub(crate) fn adopt(&mut self, new: impl IntoIterator<Item = (GuestId, UnixStream)>) {
        self.bells.extend(new);
    }

    /// Waits until a guest rings or `timeout` passes; reads the rings. Returns the guests whose
    /// last doorbell closed or failed (they are polled again).
    pub(crate) fn wait(&mut self, timeout: Duration) -> Vec<GuestId> {
        self.fds.clear();
        self.fds
            .extend(self.bells.iter().map(|(_, s)| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }));
        match resex_rt::wait_readable(&mut self.fds, timeout) {
            Ok(0) => return Vec::new(),
            Ok(_) => {}
            Err(e) => {
                // Not expected (the set is valid): rest as asked, as the timer did before.
                tracing::debug!("softhca: waiting on doorbells: {e}");
                std::thread::sleep(timeout);
                return Vec::new();
            }
        }
        self.buf.resize(DRAIN, 0);
        let mut closed = Vec::new();
        for (i, f) in self.fds.iter().enumerate() {
            if f.revents == 0 {
                continue;
            }
            let open =
                f.revents & libc::POLLIN != 0 && Self::drain(&self.bells[i].1, &mut self.buf);
            if !open {
                closed.push(i);
            }
        }
        let mut gone = Vec::new();
        for &i in closed.iter().rev() {
            let (g, _) = self.bells.swap_remove(i);
            gone.push(g);
        }
        gone.retain(|g| !self.bells.iter().any(|(o, _)| o == g));
        gone.sort_unstable();
        gone.dedup();
        gone
    }

    /// Reads one bounded batch of rings; false when the stream ended or failed.
    fn drain(mut s: &UnixStream, buf: &mut [u8]) -> bool {
        match s.read(buf) {
            Ok(0) => false,
            Ok(_) => true,
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ),
        }
    }
}
