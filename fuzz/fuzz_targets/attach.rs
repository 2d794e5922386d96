//! cargo-fuzz target `attach`: the body is [`resex_fuzz::attach::run`], which `cargo test` also
//! replays over `fuzz/corpus/attach/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| resex_fuzz::attach::run(data));
