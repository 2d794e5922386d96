//! Cost of one latency report in the guest: the recorder's summary plus the mailbox write
//! (the ResEx paper measured about 10 us per report; the target is < 1 us).
#![allow(missing_docs)]

use resex_common::LatencyRecorder;
use resex_guestmem::{FileMemory, GuestAddress, GuestMemory};
use resex_shim::mailbox::Mailbox;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("guest.ram");
    let mem: Arc<dyn GuestMemory> = Arc::new(FileMemory::create(&path, 1 << 20).unwrap());
    let mut mb = Mailbox::new(mem.clone(), 0x10000, 32, 128).unwrap();
    let mut rec = LatencyRecorder::new();
    let n = 200_000u64;
    let (mut write_ns, mut total_ns) = (0u128, 0u128);
    for i in 0..n {
        // Ten requests per interval, as a 1000/s server reporting every 10 ms records.
        for k in 0..10 {
            rec.record(0, 100_000 + (i % 97) * 100 + k * 1000);
        }
        let t0 = Instant::now();
        let s = rec.take_interval();
        let t1 = Instant::now();
        assert!(mb.report(&s, 10_000_000).unwrap());
        let t2 = Instant::now();
        write_ns += (t2 - t1).as_nanos();
        total_ns += (t2 - t0).as_nanos();
        // The host drains: free every block again.
        let j = i % 32;
        mem.write_u8(GuestAddress(0x10000 + j * 128), 0).unwrap();
    }
    println!(
        "report: {:.0} ns per report (summary + mailbox write), of which mailbox write {:.0} ns; {n} reports",
        total_ns as f64 / n as f64,
        write_ns as f64 / n as f64
    );
}
