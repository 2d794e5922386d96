//! cargo-fuzz target `softhca_fetch`: the body is [`resex_fuzz::softhca_fetch::run`], which `cargo test` also
//! replays over `fuzz/corpus/softhca_fetch/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| resex_fuzz::softhca_fetch::run(data));
