//! The transport lab: the same bytes for one seed, and the papers' directions on the quick run.

use resex_lab::transport::{run, Config};

fn quick() -> resex_lab::transport::Results {
    let cfg = Config {
        quick: true,
        ..Config::default()
    };
    run(&cfg, &mut |_, _, _| {}).unwrap()
}

#[test]
fn one_seed_gives_the_same_bytes_and_the_papers_directions() {
    let a = serde_json::to_string(&quick()).unwrap();
    let r = quick();
    assert_eq!(a, serde_json::to_string(&r).unwrap(), "deterministic");
    // Fig. 18: holding a block stops the window, not the status byte.
    assert!(r.hold.drop_pct["sliding_window"] > 90.0);
    assert!(r.hold.drop_pct["status_byte"] < 20.0);
    // Fig. 10: the status-byte sync grows with blocks (one READ of all of them).
    let sb = &r.sync_us["status_byte"];
    assert!(sb.last().unwrap() > sb.first().unwrap());
    // Fig. 15: the window's ACK thread costs the sender side a second busy CPU.
    assert!(r.tx_busy_pct["sliding_window"][0] > 1.5 * r.tx_busy_pct["status_byte"][0]);
    // HiPower's gather: less master CPU per small message than CPWR.
    let g = &r.hipower.gather;
    assert!(g.hipower_cpu[0] < g.cpwr_cpu[0]);
}
