//! cargo-fuzz target `monitor`: the body is [`resex_fuzz::monitor::run`], which `cargo test` also
//! replays over `fuzz/corpus/monitor/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| resex_fuzz::monitor::run(data));
