//! Crash safety: `kill -9` of resexd in the middle of throttling, then a restart (or
//! `resexd --restore`) leaves nothing throttled. The guest is a real busy process in a real
//! cgroup (or under the SIGSTOP duty cycle where no cgroup is writable); the daemon is the real
//! binary.
#![allow(clippy::cast_possible_truncation)]

use resex_backend::cap::CapHandle;
use resex_backend::local::{publish, DomainRecord};
use resex_embedded::cgroup::{CapMode, GuestCgroups, Mounts};
use resex_guestmem::FileMemory;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// FreeMarket with a tiny I/O budget and a high low-balance mark: a VM that burns CPU runs
/// low within the first half of an epoch and is cut, every 10 ms, down to the floor.
const POLICY: &str = r#"
policy = "freemarket"
[ledger]
epoch_ms = 1000
interval_ms = 1
link_bytes_per_sec = 1048576
path_mtu = 1024
[caps]
floor_pct = 10.0
actuation_period_ms = 10
[balance_rule]
low_balance = 0.95
min_epoch_left = 0.01
cut_factor = 0.5
"#;

fn resexd(dir: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_resexd"))
        .args(["--backend", "local", "--run-dir"])
        .arg(dir.join("run"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--api")
        .arg(dir.join("api.sock"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Whether the guest is throttled right now, by its mechanism.
fn throttled(cap: &CapHandle, pid: u32) -> bool {
    match cap {
        CapHandle::Sigstop(_) => {
            // A duty cycle left behind shows as a stopped process.
            (0..20).any(|_| {
                std::thread::sleep(Duration::from_millis(1));
                let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('T'))
            })
        }
        c => c.current().unwrap().is_some(),
    }
}

fn wait(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_dash_nine_then_restart_or_restore_leaves_nothing_throttled() {
    crash_and_recover(CapMode::Auto);
}

#[test]
fn the_same_with_the_sigstop_duty_cycle() {
    crash_and_recover(CapMode::Sigstop);
}

fn crash_and_recover(mode: CapMode) {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
    let mut guest = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let pid = guest.id();
    let cg = GuestCgroups::setup(
        &Mounts::detect(),
        mode,
        &format!("resex-test-{pid}"),
        "busy",
        pid,
    );
    let ram = dir.path().join("busy.ram");
    FileMemory::create(&ram, 1 << 20).unwrap();
    publish(
        &run,
        &DomainRecord {
            id: 1,
            name: "busy".into(),
            host: "crash-test".into(),
            vcpus: 1,
            ram_file: ram,
            ram_size: 1 << 20,
            pid,
            cpu: cg.cpu.clone(),
            cap: cg.cap.clone(),
            channel: dir.path().join("no-agent.sock"),
            sla_threshold: None,
            weight: 1.0,
        },
    )
    .unwrap();
    let policy = dir.path().join("policy.toml");
    let policy = policy.to_str().unwrap();
    let caps_file = dir.path().join("state/caps.json");
    let recorded = || {
        std::fs::read_to_string(&caps_file)
            .map(|t| t.contains("busy"))
            .unwrap_or(false)
    };

    for round in ["restart", "restore"] {
        assert!(!throttled(&cg.cap, pid), "{round}: starts unthrottled");
        let mut d = resexd(dir.path(), &["--policy", policy]);
        wait("the daemon caps the busy guest", 20, || {
            recorded() && throttled(&cg.cap, pid)
        });
        if round == "restart" {
            // SIGHUP with a broken policy file: the daemon keeps its policy and keeps running.
            std::fs::write(dir.path().join("policy.toml"), "policy = \"auction\"").unwrap();
            // SAFETY: kill(2) with plain integers, on our own child.
            unsafe { libc::kill(d.id() as i32, libc::SIGHUP) };
            std::thread::sleep(Duration::from_millis(300));
            assert!(
                d.try_wait().unwrap().is_none(),
                "a bad reload does not stop the daemon"
            );
            assert!(recorded(), "and it still throttles");
            std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
        }
        // In the middle of throttling: SIGKILL, no chance to clean up.
        d.kill().unwrap();
        d.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(recorded(), "{round}: the original setting is on disk");
        if !matches!(cg.cap, CapHandle::Sigstop(_)) {
            assert!(
                throttled(&cg.cap, pid),
                "{round}: the cap outlived the daemon"
            );
        }
        if round == "restart" {
            // A restarted daemon (monitoring only) restores before anything else.
            let mut d = resexd(dir.path(), &["--no-policy"]);
            wait("the restarted daemon restores", 10, || !recorded());
            assert!(!throttled(&cg.cap, pid), "restart: nothing stays throttled");
            // SIGTERM: a clean exit.
            // SAFETY: kill(2) with plain integers, on our own child.
            unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
            assert!(d.wait().unwrap().success());
        } else {
            let st = Command::new(env!("CARGO_BIN_EXE_resexd"))
                .args(["--backend", "local", "--restore", "--run-dir"])
                .arg(&run)
                .arg("--state-dir")
                .arg(dir.path().join("state"))
                .output()
                .unwrap();
            assert!(
                st.status.success(),
                "{}",
                String::from_utf8_lossy(&st.stderr)
            );
            assert!(
                String::from_utf8_lossy(&st.stdout).contains("restored 1 caps and transmit limits")
            );
            assert!(!recorded());
            assert!(!throttled(&cg.cap, pid), "restore: nothing stays throttled");
        }
    }
    guest.kill().unwrap();
    guest.wait().unwrap();
    drop(cg);
}
