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
    // Fig. 11: every message's ACK is timed; the status-byte syncs (one READ every few
    // blocks) are steadier than the window's ACKs, which share the port with the data.
    let (sw, sbd) = (
        &r.sync_dist_us["sliding_window"],
        &r.sync_dist_us["status_byte"],
    );
    assert_eq!(sw.n, r.sync_series_us["sliding_window"].len());
    assert_eq!(sw.n, 60);
    assert!(sbd.n > 0 && sbd.n < sw.n, "{sbd:?}");
    assert!(sbd.min > 0.0 && sw.min > 0.0);
    assert!(sbd.max - sbd.min <= sw.max - sw.min, "{sbd:?} {sw:?}");
    // HiPower's gather: less master CPU per small message than CPWR.
    let g = &r.hipower.gather;
    assert!(g.hipower_cpu[0] < g.cpwr_cpu[0]);
}
