//! Running the real `resex` binary from the repository's root, for the CLI tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `resex ARGS` run in the repository's root.
pub fn resex(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_resex"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

/// The standard output of a run that must have succeeded.
pub fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}
