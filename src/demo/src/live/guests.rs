//! The demo's guests as the daemon sees them: a VM in a snapshot, waiting for a guest to
//! register, and what priority the host's time-critical threads got.

use crate::embedded::EmbeddedDaemon;
use crate::error::DemoError;
use resex_api::{Snapshot, VmSnap};
use std::path::Path;
use std::time::{Duration, Instant};

/// The VM `name` in `s`.
pub(crate) fn vm<'a>(s: &'a Snapshot, name: &str) -> Option<&'a VmSnap> {
    s.vms.iter().find(|v| v.name == name)
}

/// How long a guest may take to register before the demo gives up on it.
const REGISTER_WITHIN: Duration = Duration::from_secs(60);

/// Waits until the daemon has guest `name` registered (and, with `reports`, reporting).
pub(crate) fn wait_registered(
    node: &mut EmbeddedDaemon,
    name: &str,
    reports: bool,
) -> Result<(), DemoError> {
    let start = Instant::now();
    loop {
        node.host.check()?;
        let s = node.daemon.snapshot();
        if vm(&s, name).is_some_and(|v| v.state == "registered" && (!reports || v.reports > 0)) {
            return Ok(());
        }
        // Generous: on a loaded 2-CPU machine a guest's start can wait behind everything else;
        // a guest that never registers still fails here, with the end of its log.
        if start.elapsed() > REGISTER_WITHIN {
            return Err(not_registered(node, name));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The error of a guest that did not register: with the end of its log.
fn not_registered(node: &EmbeddedDaemon, name: &str) -> DemoError {
    let log = node
        .host
        .guests()
        .iter()
        .find(|g| g.spec.name == name)
        .map(|g| g.record.channel.with_file_name(format!("{name}.log")))
        .unwrap_or_default();
    DemoError::NotRegistered {
        name: name.to_owned(),
        within: REGISTER_WITHIN,
        tail: tail(&log, 5),
        log,
    }
}

/// The last `n` lines of the file at `path` (or why it could not be read).
fn tail(path: &Path, n: usize) -> String {
    std::fs::read_to_string(path)
        .map(|t| {
            let lines: Vec<&str> = t.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        })
        .unwrap_or_else(|e| format!("(unreadable: {e})"))
}

/// Waits (a second at most) for both time-critical threads to say what priority they got:
/// softhca's port thread and the daemon's loop (`asked`: real-time priority was asked for).
pub(crate) fn priorities(node: &EmbeddedDaemon, asked: bool) -> (String, String) {
    let start = Instant::now();
    loop {
        let hca = node.host.hca_priority();
        let lp = node.daemon.snapshot().host.loop_priority.clone();
        if ((hca.is_some() || !asked) && !lp.is_empty()) || start.elapsed() > Duration::from_secs(1)
        {
            let hca = match hca {
                Some(p) if node.host.has_port_group() => {
                    format!("{p}, {}", node.host.port_group())
                }
                Some(p) => p.to_string(),
                None if asked => "normal priority (the thread did not say)".to_owned(),
                None => "normal priority (not asked for: RESEX_NO_RT)".to_owned(),
            };
            return (hca, lp);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The warning when real-time priority was asked for (`rt`) and a thread did not get it.
pub(crate) fn lowered(rt: bool, hca_priority: &str, loop_priority: &str) -> Option<String> {
    let lowered: Vec<String> = [
        ("softhca's port", hca_priority),
        ("the control loop", loop_priority),
    ]
    .into_iter()
    .filter(|(_, p)| rt && !(p.starts_with("SCHED_FIFO") || p.starts_with("nice")))
    .map(|(who, p)| format!("{who} ({p})"))
    .collect();
    (!lowered.is_empty()).then(|| {
        format!(
            "resex demo: could not raise the priority of {}: on a busy host the figures will \
             suffer (run as root, or see `resex demo --lab`)",
            lowered.join(" or ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_priority_asked_for_and_not_given_is_a_warning() {
        assert_eq!(lowered(true, "SCHED_FIFO 10", "nice -10"), None);
        assert_eq!(lowered(false, "normal", "normal"), None);
        let w = lowered(true, "SCHED_FIFO 10", "normal priority").unwrap();
        assert!(
            w.contains("of the control loop (normal priority): on a busy host"),
            "{w}"
        );
        let w = lowered(true, "normal", "normal").unwrap();
        assert!(
            w.contains("softhca's port (normal) or the control loop"),
            "{w}"
        );
    }

    #[test]
    fn a_logs_tail_is_its_last_lines_or_why_not() {
        let dir = std::env::temp_dir().join(format!("resex-demo-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("g.log");
        std::fs::write(&f, "1\n2\n3\n4\n5\n6\n7\n").unwrap();
        assert_eq!(tail(&f, 5), "3\n4\n5\n6\n7");
        assert_eq!(tail(&f, 50), "1\n2\n3\n4\n5\n6\n7");
        assert!(tail(&dir.join("none"), 5).starts_with("(unreadable: "));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
