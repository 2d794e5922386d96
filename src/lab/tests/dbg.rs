use resex_lab::transport::one::{measure, Setup};
use resex_lab::transport::preset;
use resex_shim::transport::Kind;
#[test]
fn dbg() {
    let s = Setup { bed: preset::HIPOWER, blocks: 3, size: 512, charge_copies: false };
    eprintln!("{:?}", measure(Kind::Hipower, &s, 1, 20).map(|f| f.latency_us));
}
