//! `resex host --daemon`: the embedded host with resexd in the same process, as `resex demo`
//! runs them (`EmbeddedDaemon`): the daemon's API in the run directory, the scenario's policy in
//! force before any guest starts, the guest registered, and SIGTERM stops both with the
//! daemon's figures.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn resex_host_with_the_daemon_serves_its_api_in_the_run_directory_under_the_scenarios_policy() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let scenario = dir.path().join("one.toml");
    std::fs::write(
        &scenario,
        r#"
name = "one"
duration_s = 60.0
policy = "ioshares"
[[guest]]
name = "solo"
ram = "32MiB"
[guest.benchex]
buffer = "4KiB"
rate = 200.0
"#,
    )
    .unwrap();
    let policies = concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies");
    let mut child = Command::new(env!("CARGO_BIN_EXE_resex"))
        .args([
            "host",
            "--daemon",
            "--caps",
            "sigstop",
            "--policies",
            policies,
        ])
        .arg("--scenario")
        .arg(&scenario)
        .arg("--run-dir")
        .arg(&run)
        .env("RESEX_NO_RT", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api = run.join("resexd.sock");
    let status = || {
        let o = Command::new(env!("CARGO_BIN_EXE_resex"))
            .args(["status", "--json", "--api"])
            .arg(&api)
            .output()
            .unwrap();
        o.status
            .success()
            .then(|| serde_json::from_slice::<resex_api::Snapshot>(&o.stdout).ok())
            .flatten()
    };
    let until = Instant::now() + Duration::from_secs(60);
    let snap = loop {
        if let Some(s) = status().filter(|s| s.vms.iter().any(|v| v.state == "registered")) {
            break s;
        }
        assert!(
            Instant::now() < until && child.try_wait().unwrap().is_none(),
            "no registered guest at {} within 60 s",
            api.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(snap.host.policy, "ioshares");
    assert_eq!(snap.vms[0].name, "solo");
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: a signal to the child this test started and has not reaped.
    let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(sent, 0);
    let code = child.wait().unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(code.success(), "{code:?}: {out}");
    assert!(out.contains("resex status --api"), "{out}");
    assert!(out.contains("started solo"), "{out}");
    assert!(out.contains("daemon: ") && out.contains(" ticks"), "{out}");
}
