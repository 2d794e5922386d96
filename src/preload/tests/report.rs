//! Describing and reporting a QP, with a provider of our making and the agent a real Unix
//! socket: what the agent receives, and the one line said when nothing can be reported.

use resex_preload::abi::{IbvContext, IbvQp, Mlx5dvCq, Mlx5dvQp, Mlx5dvWq};
use resex_preload::report::{on_created, say, Mlx5, Outcome, Reporter};
use resex_proto::preload::PreloadMsg;
use std::ffi::c_void;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixListener;

/// A provider that says every QP is (or is not) mlx5 and describes it with fixed addresses.
struct Fake {
    mlx5: bool,
}

fn cq_view(base: u64) -> Mlx5dvCq {
    Mlx5dvCq {
        buf: base as *mut c_void,
        dbrec: (base + 0x8000) as *mut u32,
        cqe_cnt: 256,
        cqe_size: 64,
        cq_uar: std::ptr::null_mut(),
        cqn: 9,
        comp_mask: 0,
    }
}

impl Mlx5 for Fake {
    fn device_name(&self, _: &IbvQp) -> Option<String> {
        Some(if self.mlx5 { "mlx5_0" } else { "rxe0" }.into())
    }
    fn is_mlx5(&self, _: &IbvQp) -> bool {
        self.mlx5
    }
    fn qp(&self, _: &IbvQp) -> Option<Mlx5dvQp> {
        let wq = |buf: u64, n| Mlx5dvWq {
            buf: buf as *mut c_void,
            wqe_cnt: n,
            stride: 64,
        };
        Some(Mlx5dvQp {
            dbrec: 0x7000_0000_9000 as *mut u32,
            sq: wq(0x7000_0000_2000, 128),
            rq: wq(0x7000_0000_1000, 64),
            bf_reg: std::ptr::null_mut(),
            bf_size: 0,
            comp_mask: 0,
            uar_mmap_offset: 0,
            tirn: 0,
            tisn: 0,
            rqn: 0,
            sqn: 0,
            tir_icm_addr: 0,
        })
    }
    fn cq(&self, cq: *mut c_void) -> Option<Mlx5dvCq> {
        Some(cq_view(cq as u64))
    }
}

fn qp(send: usize, recv: usize) -> (Box<IbvContext>, IbvQp) {
    let mut ctx = Box::new(IbvContext {
        device: std::ptr::null_mut(),
    });
    let q = IbvQp {
        context: &raw mut *ctx,
        qp_context: std::ptr::null_mut(),
        pd: std::ptr::null_mut(),
        send_cq: send as *mut c_void,
        recv_cq: recv as *mut c_void,
        srq: std::ptr::null_mut(),
        handle: 0,
        qp_num: 0x11,
        state: 0,
        qp_type: 2,
    };
    (ctx, q)
}

#[test]
fn an_mlx5_qp_reaches_the_agent_as_one_line_with_both_cqs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("preload.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let r = Reporter::new(path);
    let (_ctx, q) = qp(0x7100_0000_0000, 0x7200_0000_0000);
    let o = on_created(&Fake { mlx5: true }, &r, &q);
    let Outcome::Reported(sent) = &o else {
        panic!("{o:?}");
    };
    assert_eq!(say(&o, 0x11), None);
    let (s, _) = listener.accept().unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let got: PreloadMsg = serde_json::from_str(&line).unwrap();
    assert_eq!(&got, sent);
    let PreloadMsg::Created {
        qpn,
        sq,
        dbrec,
        send_cq,
        recv_cq,
    } = got
    else {
        panic!("{got:?}");
    };
    assert_eq!(
        (qpn, sq.buf, sq.wqe_cnt, sq.stride),
        (0x11, 0x7000_0000_2000, 128, 64)
    );
    assert_eq!(dbrec, 0x7000_0000_9000);
    assert_eq!(
        (send_cq.buf, send_cq.dbrec),
        (0x7100_0000_0000, 0x7100_0000_8000)
    );
    assert_eq!(recv_cq.map(|c| c.buf), Some(0x7200_0000_0000));
    // One CQ for both directions is reported once.
    let (_ctx, q) = qp(0x7100_0000_0000, 0x7100_0000_0000);
    let Outcome::Reported(PreloadMsg::Created { recv_cq, .. }) =
        on_created(&Fake { mlx5: true }, &r, &q)
    else {
        panic!("not reported");
    };
    assert_eq!(recv_cq, None);
}

#[test]
fn without_mlx5_or_an_agent_one_line_says_why_and_it_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let r = Reporter::new(dir.path().join("nobody.sock"));
    let (_ctx, q) = qp(0x1000, 0x1000);
    let o = on_created(&Fake { mlx5: false }, &r, &q);
    assert_eq!(o, Outcome::NotMlx5(Some("rxe0".into())));
    let line = say(&o, 0x11).unwrap();
    assert!(
        line.starts_with("resex-preload: QP 0x11 is on rxe0, not an mlx5 device")
            && line.contains("resex-agent --discover")
            && !line.contains('\n'),
        "{line}"
    );
    let o = on_created(&Fake { mlx5: true }, &r, &q);
    let Outcome::NoAgent(e) = &o else {
        panic!("{o:?}");
    };
    assert!(e.contains("nobody.sock"), "{e}");
    assert!(r.first_word());
    assert!(!r.first_word(), "a process says it once");
}

#[test]
fn an_agent_that_went_away_is_an_error_not_a_signal() {
    // SIGPIPE at its default (as in a C application): a write to a closed socket would end
    // the process; the reporter's must come back as an error.
    // SAFETY: restoring the default disposition of SIGPIPE in this test process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("preload.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let r = Reporter::new(path.clone());
    let (_ctx, q) = qp(0x1000, 0x1000);
    assert!(matches!(
        on_created(&Fake { mlx5: true }, &r, &q),
        Outcome::Reported(_)
    ));
    // The agent closes the connection and goes away.
    let (s, _) = listener.accept().unwrap();
    drop(s);
    drop(listener);
    std::fs::remove_file(&path).unwrap();
    for _ in 0..3 {
        let o = on_created(&Fake { mlx5: true }, &r, &q);
        assert!(matches!(o, Outcome::NoAgent(_)), "{o:?}");
    }
}
