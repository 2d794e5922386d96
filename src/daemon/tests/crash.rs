//! Crash safety: `kill -9` of resexd in the middle of throttling, then a restart (or
//! `resexd --restore`) leaves nothing throttled. The guest is a real busy process in a real
//! cgroup (or under the SIGSTOP duty cycle where no cgroup is writable); the daemon is the real
//! binary.
#![allow(clippy::cast_possible_truncation)]

use resex_backend::cap::CapHandle;
use resex_backend::local::{publish, DomainRecord};
use resex_embedded::cgroup::{CapMode, GuestCgroups, Mounts};
use resex_guestmem::FileMemory;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// FreeMarket with a tiny I/O budget and a high low-balance mark. The busy guest sends
/// nothing, so it is within its entitlement and no policy may cap it (docs/entitlements.md):
/// the cap comes from the admin (`resex cap busy 30`, through the API), while the policy runs.
/// Epochs are long (a refill right before the kill once made "the cap outlived the daemon"
/// fail on a loaded machine).
const POLICY: &str = r#"
policy = "freemarket"
[ledger]
epoch_ms = 30000
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
        None,
    );
    let ram = dir.path().join("busy.ram");
    FileMemory::create(&ram, 1 << 20).unwrap();
    publish(
        &run,
        &DomainRecord {
            entitled_bps: None,
            cpu_floor_pct: None,
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
            vf: None,
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
        let api = dir.path().join("api.sock");
        wait("the admin caps the busy guest", 20, || {
            resex_api::ApiClient::connect(&api)
                .and_then(|mut c| c.pin("busy", Some(30.0)))
                .is_ok()
        });
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

/// The same for the rate lever: a transmit limit the admin pinned through resexd on the
/// embedded host's softhca (its admin socket) outlives `kill -9`, and the restarted daemon,
/// or `resexd --restore`, puts the guest port's own setting back; SIGTERM restores too.
#[test]
fn kill_dash_nine_then_restart_or_restore_puts_transmit_limits_back() {
    use resex_common::TxLimit;
    use resex_softhca::{LinkConfig, MonotonicClock, PortId, SoftHca};
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let hca = SoftHca::new(LinkConfig::resex_testbed(), 2);
    let ram = dir.path().join("g.ram");
    let mem = Arc::new(FileMemory::create(&ram, 1 << 20).unwrap());
    let port = hca.add_guest(mem, PortId(0));
    let vport = port.guest();
    // The VF's own setting, as its admin configured it.
    let own = TxLimit {
        share_bps: None,
        max_bps: Some(6_000_000_000),
        weight: None,
    };
    hca.set_tx_limit(vport, own, 0);
    std::fs::create_dir_all(&run).unwrap();
    let admin = dir.path().join("hca-admin.sock");
    let stop = Arc::new(AtomicBool::new(false));
    let server = resex_embedded::sockets::serve_admin(
        &admin,
        hca.clone(),
        Arc::new(MonotonicClock::new()),
        stop.clone(),
    )
    .unwrap();
    // A sleeping process stands for the guest (its CPU is not what this test is about).
    let mut guest = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = guest.id();
    publish(
        &run,
        &DomainRecord {
            entitled_bps: None,
            cpu_floor_pct: None,
            id: 1,
            name: "g".into(),
            host: "rate-test".into(),
            vcpus: 1,
            ram_file: ram,
            ram_size: 1 << 20,
            pid,
            cpu: resex_backend::cpu::CpuSource::Proc(pid),
            cap: CapHandle::Sigstop(pid),
            channel: dir.path().join("no-agent.sock"),
            sla_threshold: None,
            weight: 1.0,
            vf: Some(resex_backend::lever::Vf::Soft {
                socket: admin.clone(),
                vport: vport.0,
            }),
        },
    )
    .unwrap();
    let pinned = TxLimit {
        share_bps: Some(1_000_000_000),
        max_bps: Some(2_000_000_000),
        weight: None,
    };
    let api = dir.path().join("api.sock");
    let pin = || {
        let t = Instant::now();
        loop {
            let answer = UnixStream::connect(&api).ok().and_then(|mut s| {
                let req = serde_json::json!({"cmd": "rate", "vm": "g", "tx": pinned});
                writeln!(s, "{req}").ok()?;
                let mut line = String::new();
                BufReader::new(s).read_line(&mut line).ok()?;
                Some(line)
            });
            if answer.as_deref().is_some_and(|a| a.contains("\"ok\"")) {
                return;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "pin: {answer:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let rates_file = dir.path().join("state/rates.json");
    let recorded = || {
        std::fs::read_to_string(&rates_file)
            .map(|t| t.contains("rate-test"))
            .unwrap_or(false)
    };
    let in_force = || hca.tx_limit(vport).unwrap();
    for round in ["restart", "restore", "sigterm"] {
        assert_eq!(in_force(), own, "{round}: starts with its own setting");
        let mut d = resexd(dir.path(), &["--no-policy"]);
        pin();
        wait("the pinned limit in force", 20, || {
            recorded() && in_force() == pinned
        });
        if round == "sigterm" {
            // SAFETY: kill(2) with plain integers, on our own child.
            unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
            assert!(d.wait().unwrap().success());
            assert_eq!(in_force(), own, "sigterm: the own setting is back");
            assert!(!recorded());
            continue;
        }
        d.kill().unwrap();
        d.wait().unwrap();
        assert!(recorded(), "{round}: the original setting is on disk");
        assert_eq!(in_force(), pinned, "{round}: the limit outlived the daemon");
        if round == "restart" {
            let mut d = resexd(dir.path(), &["--no-policy"]);
            wait("the restarted daemon restores", 10, || in_force() == own);
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
            assert_eq!(in_force(), own, "restore: the own setting is back");
        }
        assert!(!recorded(), "{round}: nothing left on record");
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    server.join().unwrap();
    guest.kill().unwrap();
    guest.wait().unwrap();
}
