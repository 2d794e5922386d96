//! The block protocols against hostile peers, in virtual time: a peer that writes wrong states,
//! garbage bitmaps and torn blocks into the memory it shares. Every call returns (an error or
//! a value), nothing panics, and each is a bounded number of steps (no call waits).
#![allow(clippy::cast_possible_truncation)]

mod common;

use common::world;
use resex_shim::transport::hipower::{HpReceiver, HpSender};
use resex_shim::transport::status_byte::{Config, SbSender, StatusByteReceiver, DATA, FREE};
use resex_shim::transport::{BlockReceiver, BlockSender};
use resex_softhca::{Clock, LinkConfig};

fn cfg() -> Config {
    Config {
        blocks: 3,
        payload: 256,
        path_mtu: 4096,
        ..Config::default()
    }
}

/// A sender that writes DATA with a torn header (a length beyond the block) and states that
/// are neither free, data nor unavailable: the receiver drops the torn block with an error,
/// frees it, ignores the unknown states, and goes on receiving good blocks.
#[test]
fn status_byte_receiver_survives_torn_blocks_and_wrong_states() {
    let w = world(LinkConfig::hundred_gig(), 16 << 20);
    let mut rx = StatusByteReceiver::new(&w.b.p, &cfg()).unwrap();
    let ep = rx.endpoint();
    let status = |j: u64| resex_guestmem::GuestAddress(ep.status.addr + j);
    let block = |j: u64| resex_guestmem::GuestAddress(ep.blocks.addr + j * ep.block_size);
    use resex_guestmem::GuestMemory;
    // Block 0: a header claiming 4 GiB; block 1: state 7; block 2: state 255.
    w.b.mem
        .write(block(0), &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
    w.b.mem.write(status(0), &[DATA, 7, 255]).unwrap();
    let err = rx.poll_block().unwrap_err();
    assert!(err.to_string().contains("claims"), "{err}");
    assert!(
        matches!(
            err,
            resex_shim::ShimError::Protocol(resex_shim::ProtocolError::Claims {
                block: 0,
                len: u32::MAX
            })
        ),
        "{err:?}"
    );
    assert_eq!(rx.status(0).unwrap(), FREE, "the torn block is freed");
    assert!(
        rx.poll_block().unwrap().is_none(),
        "unknown states are not data"
    );
    // A good block after all that is taken.
    w.b.mem
        .write(block(1), &[3, 0, 0, 0, 0, 0, 0, 2, 9, 9])
        .unwrap();
    w.b.mem.write(status(1), &[DATA]).unwrap();
    let (j, m) = rx.poll_block().unwrap().unwrap();
    assert_eq!((j, m.dev, m.data), (1, 3, vec![9, 9]));
}

/// A receiver whose status bytes are never free, or garbage: the sender keeps answering
/// "not now" (synchronising with back-off), never panics, and sends once a block is free.
#[test]
fn status_byte_sender_waits_on_a_receiver_that_never_frees_and_recovers() {
    let w = world(LinkConfig::hundred_gig(), 16 << 20);
    let mut rx = StatusByteReceiver::new(&w.b.p, &cfg()).unwrap();
    let ep = rx.endpoint();
    let mut tx = SbSender::connect(&w.a.p, &cfg(), ep).unwrap();
    rx.accept(tx.qp()).unwrap();
    use resex_guestmem::GuestMemory;
    let status = resex_guestmem::GuestAddress(ep.status.addr);
    w.b.mem.write(status, &[DATA, 0x80, 0x03]).unwrap();
    let mut sent = 0;
    let mut none = 0;
    for _ in 0..3000 {
        w.clock.advance(1_000);
        w.hca.poll(w.clock.now_ns());
        match tx.try_send(w.clock.now_ns(), 0, &[1, 2, 3]).unwrap() {
            Some(_) => sent += 1,
            None => none += 1,
        }
    }
    assert_eq!(
        sent, 3,
        "the three blocks region 2 believed free at the start"
    );
    assert!(none > 100);
    let syncs = tx.stats().syncs;
    assert!(syncs >= 3, "it synchronised: {syncs}");
    assert!(syncs < 200, "with back-off, not on every call: {syncs}");
    // The receiver frees block 1: the sender finds it.
    w.b.mem
        .write(resex_guestmem::GuestAddress(ep.status.addr + 1), &[FREE])
        .unwrap();
    let mut again = false;
    for _ in 0..300 {
        w.clock.advance(1_000);
        w.hca.poll(w.clock.now_ns());
        again |= tx.try_send(w.clock.now_ns(), 0, &[4]).unwrap().is_some();
        if again {
            break;
        }
    }
    assert!(again, "a freed block is used again");
}

/// HiPower against garbage bitmaps on both sides: the requester never hands out a buffer in
/// flight twice, the responder never takes a buffer past the pool, and bad buffers are errors.
#[test]
fn hipower_survives_garbage_bitmaps_from_both_peers() {
    let w = world(LinkConfig::hundred_gig(), 16 << 20);
    let c = Config {
        blocks: 12,
        ..cfg()
    };
    let mut rx = HpReceiver::new(&w.b.p, &c).unwrap();
    let rep = rx.endpoint();
    let mut tx = HpSender::connect(&w.a.p, &c, rep, Some(50)).unwrap();
    let tep = tx.endpoint();
    rx.accept(tep).unwrap();
    use resex_guestmem::GuestMemory;
    let mut rng = fastrand::Rng::with_seed(3);
    let (mut errors, mut got, mut sent) = (0, 0, 0);
    for _ in 0..4000 {
        // Each side's peer scribbles on the bitmap0 the other reads, and on the buffers.
        if rng.u8(..) < 40 {
            let g: [u8; 2] = [rng.u8(..), rng.u8(..)];
            w.b.mem
                .write(resex_guestmem::GuestAddress(rep.bitmap0.addr), &g)
                .unwrap();
        }
        if rng.u8(..) < 40 {
            let g: [u8; 2] = [rng.u8(..), rng.u8(..)];
            w.a.mem
                .write(resex_guestmem::GuestAddress(tep.bitmap0.addr), &g)
                .unwrap();
            let k = rng.u64(0..12);
            let torn: [u8; 8] = std::array::from_fn(|_| rng.u8(..));
            w.b.mem
                .write(
                    resex_guestmem::GuestAddress(rep.pool.addr + k * rep.block_size),
                    &torn,
                )
                .unwrap();
        }
        w.clock.advance(500);
        w.hca.poll(w.clock.now_ns());
        let now = w.clock.now_ns();
        if tx.try_send(now, 0, &[7; 100]).unwrap().is_some() {
            sent += 1;
        }
        assert!(tx.in_flight() <= 12);
        assert!(tx.pooled() <= 12);
        match rx.try_recv(now) {
            Ok(Some(m)) => {
                assert!(m.data.len() <= 256);
                got += 1;
            }
            Ok(None) => {}
            Err(_) => errors += 1,
        }
    }
    assert!(
        sent > 0 && got > 0,
        "traffic flowed: sent {sent}, got {got}"
    );
    assert!(errors > 0, "torn buffers were refused: {errors}");
}
