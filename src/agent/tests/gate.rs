//! Registration before use, against a host on the agent's real Unix channel: a new QP is
//! registered at once (not at the next periodic look), `wait_registered` returns only once the
//! host accepted a document naming it, and nothing waits without a host or forever on one
//! that refuses.

use resex_agent::gate::{Gate, Registered};
use resex_agent::session::{self, ChannelStatus, DocFn, UnixChannel};
use resex_proto::channel::{read_msg, write_msg, GuestMsg, HostMsg, MAX_LINE};
use resex_proto::{CqRegistration, QpRegistration, Registration, SqRegistration};
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

fn qp(qpn: u32) -> QpRegistration {
    QpRegistration {
        qpn,
        sq: SqRegistration {
            pages: vec![0x20000],
            offset: 0,
            wqe_cnt: 64,
            dbrec: 0x30000,
            start: 0,
        },
        send_cq: CqRegistration {
            pages: vec![0x21000],
            offset: 0,
            cqe_cnt: 64,
            cqe_size: 64,
            dbrec: 0x30040,
            start: 0,
        },
        recv_cq: None,
    }
}

/// The agent's channel thread with a document of the QPs in `qps`, polling for changes only
/// every minute (so only a nudge can register a new QP within the test).
fn agent(dir: &std::path::Path, qps: Arc<Mutex<Vec<u32>>>) -> (Arc<Gate>, Arc<AtomicBool>) {
    let chan = UnixChannel::bind(&dir.join("agent.sock")).unwrap();
    let doc: DocFn = Arc::new(move || Registration {
        rings: Vec::new(),
        version: 1,
        vm: None,
        path_mtu: 1024,
        qps: qps.lock().unwrap().iter().map(|&q| qp(q)).collect(),
        mailbox: None,
    });
    let gate = Arc::new(Gate::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (g, s) = (gate.clone(), stop.clone());
    std::thread::spawn(move || {
        let status = Arc::new(ChannelStatus::default());
        session::run(Box::new(chan), doc, status, s, Duration::from_secs(60), g);
    });
    (gate, stop)
}

/// A host that says hello and answers each document (accepting it if `accept`), passing the
/// QPNs of each document it received to `seen`.
fn host(dir: &std::path::Path, accept: bool, seen: mpsc::Sender<Vec<u32>>) {
    let s = UnixStream::connect(dir.join("agent.sock")).unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        write_msg(&mut w, &HostMsg::Hello { version: 1 }).unwrap();
        while let Ok(Some(GuestMsg::Register { registration })) =
            read_msg::<GuestMsg>(&mut r, MAX_LINE)
        {
            let qpns: Vec<u32> = registration.qps.iter().map(|q| q.qpn).collect();
            let n = qpns.len();
            let _ = seen.send(qpns);
            let answer = if accept {
                HostMsg::Accepted {
                    vm: "g".into(),
                    qps: n,
                    mailbox: false,
                }
            } else {
                HostMsg::Rejected { error: "no".into() }
            };
            if write_msg(&mut w, &answer).is_err() {
                return;
            }
        }
    });
}

/// Waits until the agent's session is open (the host's first document arrived).
fn first_doc(seen: &mpsc::Receiver<Vec<u32>>) -> Vec<u32> {
    seen.recv_timeout(Duration::from_secs(20)).unwrap()
}

#[test]
fn a_new_qp_is_registered_at_once_and_waits_for_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let qps = Arc::new(Mutex::new(vec![7]));
    let (gate, _stop) = agent(dir.path(), qps.clone());
    let (tx, seen) = mpsc::channel();
    host(dir.path(), true, tx);
    assert_eq!(first_doc(&seen), vec![7]);
    // The application creates QP 9: it is in the next document, and the wait returns only once
    // the host accepted it (the agent would otherwise look again in a minute).
    qps.lock().unwrap().push(9);
    assert_eq!(
        gate.wait_registered(9, Duration::from_secs(20)),
        Registered::Yes
    );
    assert_eq!(
        seen.try_recv().unwrap(),
        vec![7, 9],
        "sent before the wait ended"
    );
    // An already registered QP does not wait.
    assert_eq!(
        gate.wait_registered(7, Duration::from_secs(20)),
        Registered::Yes
    );
}

#[test]
fn without_a_host_nothing_waits_and_a_refusing_host_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let qps = Arc::new(Mutex::new(vec![7]));
    let (gate, _stop) = agent(dir.path(), qps.clone());
    assert_eq!(
        gate.wait_registered(7, Duration::from_secs(20)),
        Registered::NoHost
    );
    let (tx, seen) = mpsc::channel();
    host(dir.path(), false, tx);
    first_doc(&seen);
    qps.lock().unwrap().push(9);
    assert_eq!(
        gate.wait_registered(9, Duration::from_millis(300)),
        Registered::TimedOut
    );
}
