//! What the caller shows while a real-time run goes: [`LiveView`]. The library decides what
//! happens and when; the view decides how it looks (`resex demo` shows `resex top`'s dashboard
//! on a terminal, a plain table elsewhere, or nothing with `--headless`).

use resex_api::Snapshot;
use std::path::Path;

/// The caller's side of a real-time run, told in this order: warnings about the host's
/// priorities, [`LiveView::started`], then per phase [`LiveView::phase`] and its snapshots and
/// warning, and [`LiveView::finished`] (also when a phase failed).
pub trait LiveView {
    /// A line for the user: a time-critical thread whose priority could not be raised, a phase
    /// whose figures are the host's rather than the design's.
    fn warn(&mut self, line: String);

    /// The host (`host_id`) and its daemon run; the daemon's API is on `api_socket`.
    fn started(&mut self, host_id: &str, api_socket: &Path) {
        let _ = (host_id, api_socket);
    }

    /// A phase of `secs` seconds starts.
    fn phase(&mut self, name: &str, secs: f64) {
        let _ = (name, secs);
    }

    /// The daemon's latest snapshot, about ten times a second while a phase runs.
    fn snapshot(&mut self, s: &Snapshot) {
        let _ = s;
    }

    /// The phases are over, or one failed: the view stops showing the run.
    fn finished(&mut self) {}
}
