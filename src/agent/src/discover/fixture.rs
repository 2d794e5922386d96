//! A `/proc` of our own making, for the discovery's tests and bench (no RDMA device is needed):
//! processes whose `maps` list soft-RoCE queues as uverbs mappings, whose `mem` holds each
//! queue's header at its address, and whose `pagemap` gives page `i` of the address space frame
//! `i + 7`.

use std::os::unix::fs::FileExt;
use std::path::Path;

const PAGE: u64 = 4096;
const HEADER_BYTES: u64 = 384;

/// `/proc/PID` under `root` with `queues` as (start, slots, log2 of the slot size, mmap
/// offset); `maps` is written last, so a reader never sees a queue without its header.
///
/// # Panics
/// When the files cannot be written.
pub fn fake_proc(root: &Path, pid: u32, queues: &[(u64, u32, u32, u64)]) {
    let dir = root.join(pid.to_string());
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut maps =
        String::from("00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/ib_write_bw\n");
    let mem = std::fs::File::create(dir.join("mem")).expect("mem");
    let pagemap = std::fs::File::create(dir.join("pagemap")).expect("pagemap");
    for &(start, slots, log2, pgoff) in queues {
        let bytes = (HEADER_BYTES + (u64::from(slots) << log2)).div_ceil(PAGE) * PAGE;
        maps.push_str(&format!(
            "{start:x}-{:x} rw-s {pgoff:08x} 00:05 1034 /dev/infiniband/uverbs0\n",
            start + bytes
        ));
        let mut h = [0u8; 8];
        h[..4].copy_from_slice(&log2.to_ne_bytes());
        h[4..].copy_from_slice(&(slots - 1).to_ne_bytes());
        mem.write_all_at(&h, start).expect("header");
        for p in start / PAGE..(start + bytes) / PAGE {
            let entry = (1u64 << 63) | (p + 7);
            pagemap
                .write_all_at(&entry.to_le_bytes(), p * 8)
                .expect("pagemap entry");
        }
    }
    maps.push_str("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]\n");
    std::fs::write(dir.join("maps"), maps).expect("maps");
}

/// One QP's queues at `base`: a CQ (8 x 128), its SQ (16 x 512) and RQ (8 x 64), with mmap
/// offsets from `pgoff` on (creation order).
pub fn qp_queues(base: u64, pgoff: u64) -> Vec<(u64, u32, u32, u64)> {
    vec![
        (base, 8, 7, pgoff),
        (base + 0x10_000, 16, 9, pgoff + 0x1000),
        (base + 0x20_000, 8, 6, pgoff + 0x4000),
    ]
}

/// A host on the agent's channel at `sock`: says hello, accepts every registration, and passes
/// each one on with when it arrived. Its thread ends with the session.
///
/// # Panics
/// When `sock` cannot be reached.
pub fn accepting_host(
    sock: &Path,
    seen: std::sync::mpsc::Sender<(resex_proto::Registration, std::time::Instant)>,
) {
    use resex_proto::channel::{read_msg, write_msg, GuestMsg, HostMsg, MAX_LINE};
    let s = std::os::unix::net::UnixStream::connect(sock).expect("the agent's channel");
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(s.try_clone().expect("a second handle"));
        let mut w = s;
        if write_msg(&mut w, &HostMsg::Hello { version: 1 }).is_err() {
            return;
        }
        while let Ok(Some(GuestMsg::Register { registration })) =
            read_msg::<GuestMsg>(&mut r, MAX_LINE)
        {
            let _ = seen.send((registration, std::time::Instant::now()));
            let ok = HostMsg::Accepted {
                vm: "g".into(),
                qps: 0,
                mailbox: false,
            };
            if write_msg(&mut w, &ok).is_err() {
                return;
            }
        }
    });
}
