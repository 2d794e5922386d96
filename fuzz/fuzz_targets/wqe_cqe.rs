//! cargo-fuzz target `wqe_cqe`: the body is [`resex_fuzz::wqe_cqe::run`], which `cargo test` also
//! replays over `fuzz/corpus/wqe_cqe/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| resex_fuzz::wqe_cqe::run(data));
