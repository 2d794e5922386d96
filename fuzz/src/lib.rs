//! Fuzz targets for every boundary where guest bytes reach the host, each a plain function of
//! the input bytes that panics when a property fails. `cargo fuzz` runs them under libFuzzer
//! (`fuzz_targets/`, feature `libfuzzer`); `cargo test` replays the stored corpus through the
//! same functions (`tests/corpus.rs`), so they build and run on stable in CI.
//!
//! - [`wqe_cqe`]: the mlx5 WQE parser and CQE codec on arbitrary bytes.
//! - [`monitor`]: IBMon's scan over guest memory and a layout both taken from the input.
//! - [`attach`]: a host's hold on a VM's rings (`VmRings`): installing registrations, attaching
//!   to fresh or live rings, re-attaching, scanning.
//! - [`registration`]: the registration document, parsed and validated against RAM sizes.
//! - [`mailbox`]: report decoding and the host's mailbox drain over fuzzed memory and layout.
//! - [`channel`]: the agent channel's line framing, both directions.
//! - [`softhca_fetch`]: softhca fetching and executing fuzzed rings.
//! - [`rxe`]: soft-RoCE queue headers, send WQEs and completions on arbitrary bytes.
//!
//! [`input`] reads structure out of the bytes; [`seeds`] makes the corpus's seeds with the
//! project's own writers.

// Every address and size here is inside a guest RAM of at most 64 KiB, by construction.
#![allow(clippy::cast_possible_truncation)]

pub mod attach;
pub mod channel;
pub mod input;
pub mod mailbox;
pub mod monitor;
pub mod registration;
pub mod rxe;
pub mod seeds;
pub mod softhca_fetch;
pub mod wqe_cqe;

/// A target: its name (the `fuzz_targets/` binary and the `corpus/` folder) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target.
pub const TARGETS: [Target; 8] = [
    ("wqe_cqe", wqe_cqe::run),
    ("monitor", monitor::run),
    ("attach", attach::run),
    ("registration", registration::run),
    ("mailbox", mailbox::run),
    ("channel", channel::run),
    ("softhca_fetch", softhca_fetch::run),
    ("rxe", rxe::run),
];
