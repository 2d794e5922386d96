//! The collector against a daemon that goes away and comes back: snapshots, the loss, then
//! snapshots again from the new daemon on the same socket.

use resex_top::app::Event;
use resex_top::Snapshot;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A one-connection stand-in for the daemon's API: answers a subscription with `n` snapshots
/// whose uptime starts at `t0`, then hangs up.
fn daemon(path: &std::path::Path, t0: u64, n: u64) -> std::thread::JoinHandle<()> {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.contains("subscribe"), "{line}");
        let mut w = s;
        for k in 0..n {
            let snap = Snapshot {
                uptime_ms: t0 + k,
                ..Default::default()
            };
            writeln!(w, "{}", serde_json::to_string(&snap).unwrap()).unwrap();
        }
    })
}

#[test]
fn a_daemon_that_goes_away_is_reported_and_reconnected_to() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("api.sock");
    let d1 = daemon(&sock, 100, 2);
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let _c = resex_top::collect::spawn(sock.clone(), Duration::from_millis(10), tx, stop.clone())
        .unwrap();
    let next = || rx.recv_timeout(Duration::from_secs(10)).unwrap();
    for want in [100, 101] {
        assert!(matches!(next(), Event::Snapshot(s) if s.uptime_ms == want));
    }
    d1.join().unwrap();
    assert!(matches!(next(), Event::Lost(why) if why.contains("closed")));
    let d2 = daemon(&sock, 500, 1);
    // The collector retries once a second; it may report the refused connection meanwhile.
    loop {
        match next() {
            Event::Snapshot(s) => {
                assert_eq!(s.uptime_ms, 500);
                break;
            }
            Event::Lost(_) => {}
            Event::Key(_) => unreachable!(),
        }
    }
    d2.join().unwrap();
    stop.store(true, std::sync::atomic::Ordering::Release);
}
