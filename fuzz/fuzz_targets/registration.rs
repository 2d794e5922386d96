//! cargo-fuzz target `registration`: the body is [`resex_fuzz::registration::run`], which `cargo test` also
//! replays over `fuzz/corpus/registration/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| resex_fuzz::registration::run(data));
