//! Replays every stored input of every fuzz target (`fuzz/corpus/<target>/`: the seeds made by
//! the project's writers and the regression inputs of what the fuzzer found) through the same
//! functions `cargo fuzz` runs, so the targets stay alive in CI without nightly.

use resex_fuzz::seeds::seeds;
use resex_fuzz::TARGETS;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Fewest stored inputs a target's corpus may have (a missing or emptied folder fails).
const MIN_INPUTS: usize = 10;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `run` on each input; panics naming every input that panicked.
fn replay(target: &str, run: fn(&[u8]), inputs: Vec<(String, Vec<u8>)>) {
    let failed: Vec<String> = inputs
        .iter()
        .filter(|(_, bytes)| catch_unwind(AssertUnwindSafe(|| run(bytes))).is_err())
        .map(|(name, _)| name.clone())
        .collect();
    assert!(failed.is_empty(), "{target}: inputs that fail: {failed:?}");
}

#[test]
fn every_stored_input_of_every_target_passes() {
    for (target, run) in TARGETS {
        let files = corpus(target);
        assert!(
            files.len() >= MIN_INPUTS,
            "{target}: {} stored inputs, expected at least {MIN_INPUTS}",
            files.len()
        );
        let inputs = files
            .iter()
            .map(|p| (p.display().to_string(), std::fs::read(p).expect("readable")))
            .collect();
        replay(target, run, inputs);
    }
}

#[test]
fn the_seeds_as_made_by_the_writers_pass() {
    for (target, run) in TARGETS {
        let made = seeds(target);
        assert!(made.len() >= MIN_INPUTS, "{target}: {} seeds", made.len());
        replay(target, run, made);
    }
}

#[test]
fn a_failing_input_is_reported() {
    // The replay would notice a target that panics (so the tests above can fail).
    let r = catch_unwind(|| replay("t", |_| panic!("boom"), vec![("x".into(), vec![])]));
    assert!(r.is_err());
}
