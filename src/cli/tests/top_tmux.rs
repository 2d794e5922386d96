//! `resex top` in a real terminal: tmux runs it against a live `resex demo --headless`; keys are
//! sent (sort, select, detail, help, quit) and the captured screen is checked. tmux is a system
//! package: without it this test says so and passes, unless `RESEX_REQUIRE_SYSTEM_DEPS=1` (set
//! by `.ci/run`, which installs it).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Tmux {
    server: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.server)
            .args(args)
            .output()
            .expect("running tmux")
    }

    fn capture(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "top"];
        a.extend_from_slice(keys);
        assert!(self.cmd(&a).status.success());
    }

    /// Waits until the screen satisfies `ok`; returns it.
    fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.capture();
            if ok(&s) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        // SIGINT: the demo restores caps and stops its guests.
        let pid = libc::pid_t::try_from(self.0.id()).unwrap_or(0);
        // SAFETY: kill(2) on our own child's pid with SIGINT; no memory is involved.
        unsafe {
            libc::kill(pid, libc::SIGINT);
        }
        let _ = self.0.wait();
    }
}

#[test]
fn resex_top_in_tmux_against_a_live_demo() {
    let required = std::env::var("RESEX_REQUIRE_SYSTEM_DEPS").is_ok_and(|v| v == "1");
    if Command::new("tmux").arg("-V").output().is_err() {
        assert!(
            !required,
            "tmux is missing and RESEX_REQUIRE_SYSTEM_DEPS=1: apt-get install tmux"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: tmux is not installed (apt-get install tmux)"
        );
        return;
    }
    let run = tempfile::tempdir().unwrap();
    let resex = env!("CARGO_BIN_EXE_resex");
    let _demo = Demo(
        Command::new(resex)
            .args(["demo", "--headless", "--duration", "60", "--run-dir"])
            .arg(run.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let sock = run.path().join("resexd.sock");
    let start = Instant::now();
    while !Path::new(&sock).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the demo's API socket"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = Tmux {
        server: format!("resex-test-{}", std::process::id()),
    };
    // The exit status goes to a file: tmux 3.3 can mark the pane dead before it has reaped the
    // process and then never fill #{pane_dead_status} (tmux/tmux#4841).
    let status = run.path().join("top.status");
    let cmdline = format!(
        "{resex} top --api {} --interval 200; echo $? > {}",
        sock.display(),
        status.display()
    );
    let out = t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "150",
        "-y",
        "45",
        &cmdline,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t
        .cmd(&["set-option", "-t", "top", "remain-on-exit", "on"])
        .status
        .success());

    let s = t.wait("the dashboard shows the reporting VM, live", |s| {
        s.contains("reporting") && s.contains(" live") && s.contains("MTU/s(m)")
    });
    assert!(s.contains("host: backend local"), "{s}");

    // Sort by name: the header says so and the rows follow.
    t.keys(&["n"]);
    t.wait("sorted by name", |s| s.contains("sort VM asc"));
    // Select the first VM and open its detail pane: four charts.
    t.keys(&["Home", "Enter"]);
    let s = t.wait("the detail pane", |s| {
        s.contains(" latency p99 ") && s.contains(" balance (Resos) ")
    });
    assert!(s.contains(" MTU/s ") && s.contains(" cap % "), "{s}");
    // Help, then any key closes it.
    t.keys(&["?"]);
    t.wait("the help", |s| s.contains("freeze the screen"));
    t.keys(&["x"]);
    t.wait("the help closed", |s| !s.contains("freeze the screen"));
    // Freeze.
    t.keys(&["f"]);
    t.wait("frozen", |s| s.contains("FROZEN"));
    // Quit: the program exits and the terminal is restored (the alternate screen is gone).
    t.keys(&["q"]);
    t.wait("resex top exited and restored the screen", |s| {
        !s.contains("MTU/s(m)")
    });
    let start = Instant::now();
    loop {
        if let Ok(code) = std::fs::read_to_string(&status) {
            if code.ends_with('\n') {
                assert_eq!(code.trim(), "0", "resex top exits with status 0");
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "resex top did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
