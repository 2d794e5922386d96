//! cargo-fuzz target `mailbox`: the body is [`resex_fuzz::mailbox::run`], which `cargo test` also
//! replays over `fuzz/corpus/mailbox/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| resex_fuzz::mailbox::run(data));
