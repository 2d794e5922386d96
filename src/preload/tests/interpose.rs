//! The interposer in a real process: an unmodified application linked against libibverbs, run
//! with `LD_PRELOAD`, its `ibv_create_qp` answered by a stand-in below the interposer (there is
//! no RDMA device here) and `mlx5dv_is_supported` by the real libmlx5: the application gets its
//! QP unchanged, and the interposer says in one line that the device is not mlx5.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// `libresex_preload.so`, built with this test: beside its binary (`deps/`, where `cargo test`
/// leaves it) or one level up (where `cargo build` copies it).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let found = [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("libresex_preload.so"))
        .find(|l| l.exists());
    found.unwrap_or_else(|| panic!("libresex_preload.so not built beside {}", deps.display()))
}

#[test]
fn an_application_keeps_its_qp_and_hears_once_that_there_is_no_mlx5_device() {
    let Some(fake) = common::gcc("fake_verbs", "libfake_verbs.so", &["-shared", "-fPIC"]) else {
        return;
    };
    let app = common::gcc("app", "app", &["-libverbs"]).unwrap();
    let run = |preload: &str| {
        let out = Command::new(&app)
            .env("LD_PRELOAD", preload)
            .env("RESEX_PRELOAD_SOCKET", "/nonexistent/preload.sock")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = run(&format!("{} {}", library().display(), fake.display()));
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(stdout, "app: QP 0x11\n");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("resex-preload: QP 0x11 is on fakedev0, not an mlx5 device"),
        "{stderr}"
    );
    // Without the interposer the same application says nothing.
    let (ok, stdout, stderr) = run(&fake.display().to_string());
    assert!(
        ok && stdout == "app: QP 0x11\n" && stderr.is_empty(),
        "{stderr}"
    );
}
