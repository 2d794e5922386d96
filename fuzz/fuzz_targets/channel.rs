//! cargo-fuzz target `channel`: the body is [`resex_fuzz::channel::run`], which `cargo test` also
//! replays over `fuzz/corpus/channel/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| resex_fuzz::channel::run(data));
