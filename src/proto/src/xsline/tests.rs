use super::*;

const BASE: &str = "/local/domain/7/data/resex/t";
const SHORT: Duration = Duration::from_millis(60);

fn ends(store: &Arc<MemStore>, side: Side, timeout: Duration) -> (XsReader, XsWriter) {
    open(store.clone(), BASE, side, timeout, 16 * 1024)
}

fn line(r: &mut XsReader) -> io::Result<String> {
    let mut s = String::new();
    r.read_line(&mut s)?;
    Ok(s)
}

#[test]
fn lines_cross_both_ways_whole_and_in_order_with_long_ones_cut_between_characters() {
    let store = Arc::new(MemStore::default());
    let (mut hr, mut hw) = ends(&store, Side::Host, Duration::from_secs(10));
    let (mut gr, mut gw) = ends(&store, Side::Guest, Duration::from_secs(10));
    // 3 messages' worth, with a 3-byte character straddling every cut.
    let long: String = "ab€".repeat(CHUNK * 3 / 5);
    let want: Vec<String> = vec!["hello".into(), long.clone(), String::new(), "last".into()];
    let w = want.clone();
    let guest = std::thread::spawn(move || {
        let mut got = Vec::new();
        for _ in 0..w.len() {
            got.push(line(&mut gr).unwrap());
        }
        for l in &got {
            gw.write_all(format!("echo {}", l).as_bytes()).unwrap();
        }
        got
    });
    for l in &want {
        hw.write_all(format!("{l}\n").as_bytes()).unwrap();
    }
    // (Each echo waits for this end's receipt of the one before.)
    for l in &want {
        assert_eq!(line(&mut hr).unwrap(), format!("echo {l}\n"));
    }
    let got = guest.join().unwrap();
    assert_eq!(
        got,
        want.iter().map(|l| format!("{l}\n")).collect::<Vec<_>>()
    );
    // Never more than one message per direction stored: the four keys are all there is.
    assert_eq!(store.len(), 4);
}

#[test]
fn a_writer_waits_for_the_receipt_and_gives_up_when_nobody_reads() {
    let store = Arc::new(MemStore::default());
    let (_hr, mut hw) = ends(&store, Side::Host, SHORT);
    hw.write_all(b"one\n").unwrap();
    let e = hw.write_all(b"two\n").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    let v = store.read(&format!("{BASE}/h2g")).unwrap().unwrap();
    assert!(v.ends_with(" 1 .one"), "{v}");
    // A reader comes: it takes "one"; the writer's "two" goes now.
    let (mut gr, _gw) = ends(&store, Side::Guest, SHORT);
    assert_eq!(line(&mut gr).unwrap(), "one\n");
    hw.write_all(b"three\n").unwrap();
    assert_eq!(line(&mut gr).unwrap(), "three\n");
}

#[test]
fn a_restarted_reader_skips_the_line_it_receipted_and_takes_one_it_did_not() {
    let store = Arc::new(MemStore::default());
    let (_hr, mut hw) = ends(&store, Side::Host, SHORT);
    let (mut gr, _) = ends(&store, Side::Guest, SHORT);
    hw.write_all(b"seen\n").unwrap();
    assert_eq!(line(&mut gr).unwrap(), "seen\n");
    let (mut again, _) = ends(&store, Side::Guest, SHORT);
    let e = line(&mut again).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    hw.write_all(b"new\n").unwrap();
    assert_eq!(line(&mut again).unwrap(), "new\n");
}

#[test]
fn a_new_writer_drops_what_an_old_one_left_half_sent() {
    let store = Arc::new(MemStore::default());
    let (mut gr, _) = ends(&store, Side::Guest, SHORT);
    // An old writer died after the first of two messages of a line.
    store
        .write(&format!("{BASE}/h2g"), &format!("{:x} 1 +half of", 0xdead))
        .unwrap();
    assert_eq!(line(&mut gr).unwrap_err().kind(), io::ErrorKind::TimedOut);
    let (_, mut hw) = ends(&store, Side::Host, SHORT);
    hw.write_all(b"whole\n").unwrap();
    assert_eq!(line(&mut gr).unwrap(), "whole\n");
}

#[test]
fn hostile_values_are_reported_once_and_an_overlong_line_is_dropped_whole() {
    let store = Arc::new(MemStore::default());
    let (mut hr, _) = open(store.clone(), BASE, Side::Host, SHORT, 3000);
    let key = format!("{BASE}/g2h");
    for bad in [
        "",
        "zz 1 .x",
        "1 2",
        "1 x .y",
        "1 2 ?z",
        "ffffffffffffffffff 1 .x",
    ] {
        store.write(&key, bad).unwrap();
        let e = line(&mut hr).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{bad:?}: {e}");
        // The same value again is not news.
        assert_eq!(
            line(&mut hr).unwrap_err().kind(),
            io::ErrorKind::TimedOut,
            "{bad:?}"
        );
        store.write(&key, "1 1 .reset").unwrap();
        assert_eq!(line(&mut hr).unwrap(), "reset\n");
    }
    // A guest that sends 4 messages of 2 KiB as one line, bound 3000: one error, then nothing
    // of that line, and the next line whole.
    let (_, mut gw) = ends(&store, Side::Guest, Duration::from_secs(10));
    let t = std::thread::spawn(move || {
        gw.write_all(format!("{}\nafter\n", "x".repeat(4 * CHUNK)).as_bytes())
    });
    let e = line(&mut hr).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    hr.set_timeout(Duration::from_secs(10));
    assert_eq!(line(&mut hr).unwrap(), "after\n");
    t.join().unwrap().unwrap();
}

#[test]
fn messages_and_receipts_parse_exactly() {
    let m = parse_message("ab 12 +x y").unwrap();
    assert_eq!((m.epoch, m.seq, m.more, m.data), (0xab, 12, true, "x y"));
    let m = parse_message("1 1 .").unwrap();
    assert_eq!((m.more, m.data), (false, ""));
    assert_eq!(parse_ack("ab 12"), Some((0xab, 12)));
    assert_eq!(parse_ack("ab"), None);
    assert_eq!(parse_ack("ab -1"), None);
    assert_ne!(new_epoch(), new_epoch());
}
