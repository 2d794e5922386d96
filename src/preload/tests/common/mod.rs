//! gcc against rdma-core's headers, for the tests that need it.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// rdma-core's direct-verbs header.
pub const HEADER: &str = "/usr/include/infiniband/mlx5dv.h";

/// Compiles `tests/c/NAME.c` with `args` into a temporary directory; `None` when the headers
/// are missing and CI does not require them (`RESEX_REQUIRE_SYSTEM_DEPS=1` makes it a failure).
pub fn gcc(name: &str, out: &str, args: &[&str]) -> Option<PathBuf> {
    let required = std::env::var("RESEX_REQUIRE_SYSTEM_DEPS").is_ok_and(|v| v == "1");
    if !Path::new(HEADER).exists() {
        assert!(
            !required,
            "{HEADER} is missing: apt-get install libibverbs-dev"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {name}: {HEADER} not found. Enable with `apt-get install libibverbs-dev` \
             (CI sets RESEX_REQUIRE_SYSTEM_DEPS=1 and requires it)."
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap().keep();
    let exe = dir.join(out);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let cc = Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(args)
        .output()
        .expect("gcc must be installed");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    Some(exe)
}
