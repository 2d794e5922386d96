//! cargo-fuzz target `rxe`: the body is [`resex_fuzz::rxe::run`], which `cargo test` also
//! replays over `fuzz/corpus/rxe/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| resex_fuzz::rxe::run(data));
