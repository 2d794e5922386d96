use super::*;
use resex_proto::xsline::{self, MemStore, Side};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

type Map = Arc<MemStore>;

/// xenstored for domain 3, as the kernel's device shows it: relative paths are under
/// `/local/domain/3`, `/denied...` is refused, a node of 2048 bytes or more is refused as
/// xenstored's default quota does, and a watch event comes before every fifth reply.
fn fake_xenstored(map: Map, mut s: UnixStream) {
    let mut n = 0;
    loop {
        let mut h = [0u8; 16];
        if s.read_exact(&mut h).is_err() {
            return;
        }
        let w = |i: usize| u32::from_ne_bytes(h[i..i + 4].try_into().unwrap());
        let mut body = vec![0u8; w(12) as usize];
        s.read_exact(&mut body).unwrap();
        let nul = body.iter().position(|&b| b == 0).unwrap();
        let mut path = String::from_utf8(body[..nul].to_vec()).unwrap();
        if !path.starts_with('/') {
            path = format!("/local/domain/3/{path}");
        }
        let (ty, reply): (u32, Vec<u8>) = if path.starts_with("/denied") {
            (XS_ERROR, b"EACCES\0".to_vec())
        } else if w(0) == XS_WRITE && body.len() - nul - 1 + 32 >= 2048 {
            // xenstored's default quota on a guest's node (value, permissions, children).
            (XS_ERROR, b"ENOSPC\0".to_vec())
        } else if w(0) == XS_READ {
            match map.read(&path).unwrap() {
                Some(v) => (XS_READ, v.as_bytes().to_vec()),
                None => (XS_ERROR, b"ENOENT\0".to_vec()),
            }
        } else {
            let v = String::from_utf8(body[nul + 1..].to_vec()).unwrap();
            map.write(&path, &v).unwrap();
            (XS_WRITE, b"OK\0".to_vec())
        };
        n += 1;
        if n % 5 == 0 {
            send(&mut s, XS_WATCH_EVENT, 0, b"some/path\0token\0");
        }
        send(&mut s, ty, w(4), &reply);
    }
}

fn send(s: &mut UnixStream, ty: u32, id: u32, body: &[u8]) {
    let mut m = Vec::new();
    for v in [ty, id, 0, body.len() as u32] {
        m.extend_from_slice(&v.to_ne_bytes());
    }
    m.extend_from_slice(body);
    s.write_all(&m).unwrap();
}

fn bus(map: &Map) -> XenBus<UnixStream> {
    let (a, b) = UnixStream::pair().unwrap();
    let m = map.clone();
    std::thread::spawn(move || fake_xenstored(m, b));
    XenBus::new(a)
}

#[test]
fn reads_and_writes_go_to_the_domains_home_and_errors_are_named() {
    let map = Map::default();
    let b = bus(&map);
    assert_eq!(b.read("data/x").unwrap(), None);
    b.write("data/x", "1 2 .hi").unwrap();
    assert_eq!(
        map.read("/local/domain/3/data/x").unwrap().as_deref(),
        Some("1 2 .hi")
    );
    for _ in 0..12 {
        assert_eq!(b.read("data/x").unwrap().as_deref(), Some("1 2 .hi"));
    }
    let e = b.write("/denied/y", "v").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("EACCES"), "{e}");
    let e = b.write("data/big", &"v".repeat(2048)).unwrap_err();
    assert!(e.to_string().contains("ENOSPC"), "{e}");
    let e = b.write(&"p".repeat(PAYLOAD_MAX), "v").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn a_reply_over_the_payload_bound_is_refused() {
    let (a, mut b) = UnixStream::pair().unwrap();
    std::thread::spawn(move || {
        let mut h = [0u8; 16];
        b.read_exact(&mut h).unwrap();
        let mut body = vec![0u8; u32::from_ne_bytes(h[12..16].try_into().unwrap()) as usize];
        b.read_exact(&mut body).unwrap();
        let mut m = Vec::new();
        for v in [XS_READ, 1, 0, u32::MAX] {
            m.extend_from_slice(&v.to_ne_bytes());
        }
        let _ = b.write_all(&m);
    });
    let e = XenBus::new(a).read("data/x").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
}

#[test]
fn a_line_link_runs_between_the_guests_xenbus_and_the_hosts_absolute_paths() {
    let map = Map::default();
    let t = Duration::from_secs(10);
    let (mut gr, mut gw) = xsline::open(Arc::new(bus(&map)), "data/resex/t", Side::Guest, t, 16384);
    let (mut hr, mut hw) = xsline::open(
        map.clone(),
        "/local/domain/3/data/resex/t",
        Side::Host,
        t,
        16384,
    );
    // A guest's line longer than xenstored lets one node be.
    let long = "r".repeat(5000);
    let guest = std::thread::spawn(move || {
        let mut l = String::new();
        io::BufRead::read_line(&mut gr, &mut l).unwrap();
        gw.write_all(format!("got {l}").as_bytes()).unwrap();
    });
    hw.write_all(format!("{long}\n").as_bytes()).unwrap();
    let mut l = String::new();
    io::BufRead::read_line(&mut hr, &mut l).unwrap();
    assert_eq!(l, format!("got {long}\n"));
    guest.join().unwrap();
}
