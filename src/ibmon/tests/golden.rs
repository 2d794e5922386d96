//! Hand-computed cases: what each opcode counts, selective signalling, and the wraps.

#![allow(clippy::cast_possible_truncation)]

mod common;

use common::Rig;
use resex_ibmon::synth::{SynthConfig, Wr};
use resex_mlx5::consts::send_op;
use resex_mlx5::CqeSize;

fn wr(opcode: u8, sges: &[u32], inline: bool, signaled: bool) -> Wr {
    Wr {
        opcode,
        sges: sges.to_vec(),
        inline,
        signaled,
    }
}

#[test]
fn unsignalled_wqes_count_when_the_next_signalled_one_completes() {
    let mut rig = Rig::new(&SynthConfig {
        path_mtu: 1024,
        ..SynthConfig::default()
    });
    let (m, g) = (&rig.mem, &mut rig.guest);
    // 3000-byte write (3 pkts), 100-byte inline send (1), 10 KiB read (1 req + 10 resp),
    // fetch-and-add (1 + 1), then a signalled 0-byte send (1).
    g.post(
        m,
        0,
        &wr(send_op::RDMA_WRITE, &[1000, 0, 2000], false, false),
    );
    g.post(m, 0, &wr(send_op::SEND, &[60, 40], true, false));
    g.post(m, 0, &wr(send_op::RDMA_READ, &[10240], false, false));
    g.post(m, 0, &wr(send_op::ATOMIC_FA, &[], false, false));
    g.complete(m, 0, 4, false);
    rig.mon.scan(m, 1000);
    assert_eq!(
        rig.mon.counters()[0].wqes,
        0,
        "no CQE yet: nothing is known to have completed"
    );
    rig.guest.post(m, 0, &wr(send_op::SEND, &[], false, true));
    rig.guest.complete(m, 0, 1, false);
    rig.mon.scan(m, 1000);
    let c = rig.mon.counters()[0];
    assert_eq!(c.wqes, 5);
    assert_eq!(c.completions, 1);
    assert_eq!(c.tx_bytes, 3000 + 100);
    assert_eq!(c.tx_packets, 3 + 1 + 1 + 1 + 1);
    assert_eq!(c.rx_read_bytes, 10240);
    assert_eq!(c.rx_read_packets, 10 + 1);
    assert_eq!(c.mtus, 7 + 11);
    assert_eq!((c.errors, c.overruns, c.anomalies), (0, 0, 0));
}

#[test]
fn error_cqe_counts_an_error_and_not_the_failed_wqe() {
    let mut rig = Rig::new(&SynthConfig::default());
    let m = &rig.mem;
    rig.guest
        .post(m, 0, &wr(send_op::SEND, &[500], false, false));
    rig.guest
        .post(m, 0, &wr(send_op::RDMA_WRITE, &[4096], false, true));
    rig.guest.complete(m, 0, 1, false); // the unsignalled send completes
    rig.guest.complete(m, 0, 1, true); // the write fails
    rig.guest.receive(m, 0, 777);
    rig.mon.scan(m, 1000);
    let c = rig.mon.counters()[0];
    assert_eq!(c.errors, 1);
    assert_eq!(c.wqes, 1, "the send before the failure completed");
    assert_eq!(c.tx_bytes, 500);
    assert_eq!(c.completions, 2, "error CQE on the send CQ + receive CQE");
    assert_eq!(c.recv_bytes, 777);
    assert_eq!(rig.mon.counters()[0], rig.guest.truth()[0]);
}

#[test]
fn counts_across_the_16_and_24_bit_index_wraps_with_128_byte_cqes_and_wrapping_wqes() {
    let cfg = SynthConfig {
        wqe_cnt: 8,
        cqe_cnt: 4,
        cqe_size: CqeSize::B128,
        sq_start: 65_533,
        cq_start: (1 << 24) - 2,
        shared_cq: true,
        sq_offset: 3 * 64,
        ..SynthConfig::default()
    };
    let mut rig = Rig::new(&cfg);
    let mut sent = 0u64;
    for i in 0..200u32 {
        // 3-BB WQEs (ctrl + raddr + 9 SGEs = 11 DS) so some wrap the ring end.
        let sges = vec![100 + i; 9];
        sent += 9 * u64::from(100 + i);
        assert!(rig.guest.post(
            &rig.mem,
            0,
            &wr(send_op::RDMA_WRITE, &sges, false, i % 2 == 1)
        ));
        rig.guest.complete(&rig.mem, 0, 1, false);
        rig.mon.scan(&rig.mem, 7);
        let lim = rig.poll_limit(0);
        rig.guest.poll(&rig.mem, 0, 4, Some(lim));
    }
    rig.drain();
    let c = rig.mon.counters()[0];
    assert_eq!(c.wqes, 200);
    assert_eq!(c.tx_bytes, sent);
    assert_eq!(c, rig.guest.truth()[0]);
    assert_eq!(c.anomalies, 0);
}

#[test]
fn attaching_to_a_running_guest_counts_only_new_work_without_anomalies() {
    let cfg = SynthConfig {
        wqe_cnt: 16,
        cqe_cnt: 64,
        ..SynthConfig::default()
    };
    let mut rig = Rig::new(&cfg);
    // 40 signalled sends before the monitor attaches: the SQ wrapped, its old slots reused.
    for _ in 0..40 {
        rig.guest
            .post(&rig.mem, 0, &wr(send_op::SEND, &[100], false, true));
        rig.guest.complete(&rig.mem, 0, 1, false);
        rig.guest.poll(&rig.mem, 0, 1, None);
    }
    rig.mon.skip_to_now(&rig.mem);
    for _ in 0..5 {
        rig.guest
            .post(&rig.mem, 0, &wr(send_op::SEND, &[100], false, true));
        rig.guest.complete(&rig.mem, 0, 1, false);
        rig.mon.scan(&rig.mem, 100);
    }
    let c = rig.mon.counters()[0];
    assert_eq!((c.wqes, c.tx_bytes, c.completions), (5, 500, 5));
    assert_eq!((c.anomalies, c.overruns), (0, 0));
}
