//! The software HCA's control path carried over a byte stream (JSON lines), so a guest process
//! (or a VM, through a virtio-serial port) can reach the host's softhca. [`RemoteHca`] is the
//! guest's end and implements [`HcaControl`]; [`serve`] is the host's end over any
//! `HcaControl`. One request, one answer, in order.

use crate::channel::{read_msg, write_msg, LineError, MAX_LINE};
use crate::doorbell::Doorbell;
pub use crate::hca::Answer;
use crate::hca::{ControlError, CreateCq, CreateQp, HcaControl, MrKeys, QpAddr, RegMr};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::sync::Mutex;

/// A control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// [`HcaControl::create_cq`].
    CreateCq {
        /// The request.
        req: CreateCq,
    },
    /// [`HcaControl::create_qp`].
    CreateQp {
        /// The request.
        req: CreateQp,
    },
    /// [`HcaControl::connect_qp`].
    ConnectQp {
        /// Local QP.
        qpn: u32,
        /// Remote QP.
        remote: QpAddr,
    },
    /// [`HcaControl::destroy_qp`].
    DestroyQp {
        /// The QP.
        qpn: u32,
    },
    /// [`HcaControl::reg_mr`].
    RegMr {
        /// The request.
        req: RegMr,
    },
    /// [`HcaControl::dereg_mr`].
    DeregMr {
        /// Its local key.
        lkey: u32,
    },
    /// Turns this connection into the guest's doorbell ([`HcaControl::doorbell`]): after the
    /// answer (`done`) the guest writes only rings (any bytes) on it, and the host reads them.
    Doorbell,
}

/// The answer line.
pub type Response = Result<Answer, ControlError>;

/// Runs `req` against `ctl`.
pub fn execute(ctl: &dyn HcaControl, req: &Request) -> Response {
    match req {
        Request::CreateCq { req } => ctl.create_cq(req).map(Answer::Number),
        Request::CreateQp { req } => ctl.create_qp(req).map(Answer::Number),
        Request::ConnectQp { qpn, remote } => ctl.connect_qp(*qpn, *remote).map(|()| Answer::Done),
        Request::DestroyQp { qpn } => ctl.destroy_qp(*qpn).map(|()| Answer::Done),
        Request::RegMr { req } => ctl.reg_mr(req).map(Answer::Keys),
        Request::DeregMr { lkey } => ctl.dereg_mr(*lkey).map(|()| Answer::Done),
        Request::Doorbell => Err(ControlError::Unavailable(
            "this channel cannot carry a doorbell: the device polls".into(),
        )),
    }
}

/// How a served connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// The guest closed it after this many requests.
    Ended(u64),
    /// It became the guest's doorbell (after this many requests, the doorbell request
    /// included): the caller hands the stream to the device.
    Doorbell(u64),
}

/// Serves requests from `r` until end of stream; a malformed line is answered with an
/// `Invalid` error and serving goes on. With `doorbells`, a [`Request::Doorbell`] is answered
/// `done` and ends serving ([`Served::Doorbell`]: the caller owns the stream and gives it to the
/// device); without, it is refused and serving goes on.
pub fn serve(
    ctl: &dyn HcaControl,
    r: &mut dyn BufRead,
    w: &mut dyn Write,
    doorbells: bool,
) -> Result<Served, LineError> {
    let mut n = 0;
    loop {
        let resp: Response = match read_msg::<Request>(r, MAX_LINE) {
            Ok(None) => return Ok(Served::Ended(n)),
            Ok(Some(Request::Doorbell)) if doorbells => {
                write_msg(w, &Response::Ok(Answer::Done))?;
                return Ok(Served::Doorbell(n + 1));
            }
            Ok(Some(req)) => execute(ctl, &req),
            Err(LineError::Json(e)) => Err(ControlError::Malformed {
                reason: e.to_string(),
            }),
            Err(e) => return Err(e),
        };
        write_msg(w, &resp)?;
        n += 1;
    }
}

struct Conn {
    r: Box<dyn BufRead + Send>,
    w: Box<dyn Write + Send>,
}

/// The guest's end: an `HcaControl` whose calls travel over a stream.
pub struct RemoteHca {
    conn: Mutex<Conn>,
    /// The Unix socket it was reached at (a doorbell is a second connection to it).
    path: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for RemoteHca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemoteHca")
    }
}

impl RemoteHca {
    /// A client over a reader and a writer of one stream.
    pub fn new(r: Box<dyn BufRead + Send>, w: Box<dyn Write + Send>) -> Self {
        Self {
            conn: Mutex::new(Conn { r, w }),
            path: None,
        }
    }

    /// Connects to a Unix socket.
    pub fn connect_unix(path: &std::path::Path) -> std::io::Result<Self> {
        let s = std::os::unix::net::UnixStream::connect(path)?;
        let r = std::io::BufReader::new(s.try_clone()?);
        let mut hca = Self::new(Box::new(r), Box::new(s));
        hca.path = Some(path.to_owned());
        Ok(hca)
    }

    /// A second connection to the socket, turned into a doorbell.
    fn open_doorbell(path: &std::path::Path) -> Result<Doorbell, ControlError> {
        let gone = |e: &dyn std::fmt::Display| {
            ControlError::Unavailable(format!("doorbell at {}: {e}", path.display()))
        };
        let mut s = std::os::unix::net::UnixStream::connect(path).map_err(|e| gone(&e))?;
        write_msg(&mut s, &Request::Doorbell).map_err(|e| gone(&e))?;
        // The host writes nothing after its answer, so the reader buffers nothing else.
        let mut r = std::io::BufReader::new(s.try_clone().map_err(|e| gone(&e))?);
        match read_msg::<Response>(&mut r, MAX_LINE) {
            Ok(Some(Ok(Answer::Done))) => Doorbell::new(s).map_err(|e| gone(&e)),
            Ok(Some(Ok(a))) => Err(unexpected(a)),
            Ok(Some(Err(e))) => Err(e),
            Ok(None) => Err(gone(&"closed by the host")),
            Err(e) => Err(gone(&e)),
        }
    }

    fn call(&self, req: &Request) -> Response {
        let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let gone =
            |e: &dyn std::fmt::Display| ControlError::Unavailable(format!("control channel: {e}"));
        write_msg(&mut c.w, req).map_err(|e| gone(&e))?;
        match read_msg::<Response>(&mut c.r, MAX_LINE) {
            Ok(Some(resp)) => resp,
            Ok(None) => Err(gone(&"closed by the host")),
            Err(e) => Err(gone(&e)),
        }
    }
}

fn unexpected(a: Answer) -> ControlError {
    ControlError::UnexpectedAnswer(a)
}

impl HcaControl for RemoteHca {
    fn create_cq(&self, req: &CreateCq) -> Result<u32, ControlError> {
        match self.call(&Request::CreateCq { req: req.clone() })? {
            Answer::Number(n) => Ok(n),
            a => Err(unexpected(a)),
        }
    }
    fn create_qp(&self, req: &CreateQp) -> Result<u32, ControlError> {
        match self.call(&Request::CreateQp { req: req.clone() })? {
            Answer::Number(n) => Ok(n),
            a => Err(unexpected(a)),
        }
    }
    fn connect_qp(&self, qpn: u32, remote: QpAddr) -> Result<(), ControlError> {
        self.call(&Request::ConnectQp { qpn, remote }).map(drop)
    }
    fn destroy_qp(&self, qpn: u32) -> Result<(), ControlError> {
        self.call(&Request::DestroyQp { qpn }).map(drop)
    }
    fn reg_mr(&self, req: &RegMr) -> Result<MrKeys, ControlError> {
        match self.call(&Request::RegMr { req: req.clone() })? {
            Answer::Keys(k) => Ok(k),
            a => Err(unexpected(a)),
        }
    }
    fn dereg_mr(&self, lkey: u32) -> Result<(), ControlError> {
        self.call(&Request::DeregMr { lkey }).map(drop)
    }
    fn doorbell(&self) -> Result<Doorbell, ControlError> {
        match &self.path {
            Some(p) => Self::open_doorbell(p),
            None => Err(ControlError::Unavailable(
                "this control channel is not a Unix socket: the device polls".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;
    use std::os::unix::net::UnixStream;

    /// Hands out numbers and refuses QP 13.
    struct Fake;
    impl HcaControl for Fake {
        fn create_cq(&self, req: &CreateCq) -> Result<u32, ControlError> {
            Ok(req.cqe_cnt)
        }
        fn create_qp(&self, _: &CreateQp) -> Result<u32, ControlError> {
            Err(ControlError::NoResources("qps".into()))
        }
        fn connect_qp(&self, qpn: u32, _: QpAddr) -> Result<(), ControlError> {
            if qpn == 13 {
                Err(ControlError::NotFound("qp 13".into()))
            } else {
                Ok(())
            }
        }
        fn destroy_qp(&self, _: u32) -> Result<(), ControlError> {
            Ok(())
        }
        fn reg_mr(&self, req: &RegMr) -> Result<MrKeys, ControlError> {
            Ok(MrKeys {
                lkey: req.access,
                rkey: req.access + 1,
            })
        }
        fn dereg_mr(&self, _: u32) -> Result<(), ControlError> {
            Ok(())
        }
    }

    #[test]
    fn calls_cross_a_socket_with_their_errors() {
        let (a, b) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut r = BufReader::new(b.try_clone().unwrap());
            let mut w = b;
            serve(&Fake, &mut r, &mut w, false).unwrap()
        });
        let r = BufReader::new(a.try_clone().unwrap());
        let hca = RemoteHca::new(Box::new(r), Box::new(a));
        let cq = CreateCq {
            ring: crate::hca::RingDesc {
                pages: vec![4096],
                offset: 0,
            },
            cqe_cnt: 64,
            cqe_size: 64,
            dbrec: 8192,
        };
        assert_eq!(hca.create_cq(&cq).unwrap(), 64);
        assert_eq!(
            hca.connect_qp(13, QpAddr::qpn(1)),
            Err(ControlError::NotFound("qp 13".into()))
        );
        assert!(hca.connect_qp(12, QpAddr::qpn(1)).is_ok());
        let k = hca
            .reg_mr(&RegMr {
                iova: 0,
                length: 1,
                pages: vec![0],
                access: 4,
            })
            .unwrap();
        assert_eq!(k, MrKeys { lkey: 4, rkey: 5 });
        drop(hca);
        assert_eq!(server.join().unwrap(), Served::Ended(4));
    }

    #[test]
    fn a_malformed_request_gets_an_error_and_serving_goes_on() {
        let input = b"{\"op\":\"reboot\"}\n{\"op\":\"destroy_qp\",\"qpn\":3}\n";
        let mut out = Vec::new();
        let n = serve(&Fake, &mut BufReader::new(&input[..]), &mut out, false).unwrap();
        assert_eq!(n, Served::Ended(2));
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        let first: Response = serde_json::from_str(lines.next().unwrap()).unwrap();
        let e = first.unwrap_err();
        assert!(matches!(e, ControlError::Malformed { .. }), "{e:?}");
        assert!(e
            .to_string()
            .starts_with("invalid request: malformed request: "));
        assert_eq!(lines.next().unwrap(), r#"{"Ok":"done"}"#);
    }

    #[test]
    fn typed_refusals_cross_the_wire_with_their_text() {
        use crate::hca::{Geometry, Place, QueueKind, RegionError};
        let cases = [
            (
                ControlError::Geometry(Geometry::CqeSize(32)),
                "invalid request: cqe_size 32 is not 64 or 128",
            ),
            (
                ControlError::Region(RegionError::UnknownAccess(0x10)),
                "invalid request: unknown access flags 0x10",
            ),
            (
                ControlError::DoorbellRecord {
                    queue: QueueKind::Qp,
                    addr: 0x1004,
                    ram: 8192,
                },
                "invalid request: QP doorbell record 0x1004 must be 8-byte aligned inside guest \
                 RAM (8192 bytes)",
            ),
            (
                ControlError::Memory {
                    place: Place::RqBuffer,
                    reason: "a ring must have a non-zero size".into(),
                },
                "invalid request: RQ buffer: a ring must have a non-zero size",
            ),
            (
                ControlError::UnexpectedAnswer(Answer::Done),
                "invalid request: unexpected answer Done",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
            let line = serde_json::to_string(&Response::Err(e.clone())).unwrap();
            let back: Response = serde_json::from_str(&line).unwrap();
            assert_eq!(back, Err(e));
        }
    }

    #[test]
    fn a_closed_host_is_unavailable_not_a_panic() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let r = BufReader::new(a.try_clone().unwrap());
        let hca = RemoteHca::new(Box::new(r), Box::new(a));
        assert!(matches!(
            hca.destroy_qp(1),
            Err(ControlError::Unavailable(_))
        ));
    }

    /// Serves one connection of `l` and returns how it ended and the stream.
    fn serve_one(l: &std::os::unix::net::UnixListener, doorbells: bool) -> (Served, UnixStream) {
        let (s, _) = l.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        let served = serve(&Fake, &mut r, &mut w, doorbells).unwrap();
        (served, w)
    }

    #[test]
    fn a_doorbell_is_a_second_connection_that_carries_rings() {
        let dir = std::env::temp_dir().join(format!("resex-bell-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hca.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let hca = RemoteHca::connect_unix(&path).unwrap();
        let control = l.accept().unwrap().0;
        let host = std::thread::spawn(move || serve_one(&l, true));
        let bell = hca.doorbell().unwrap();
        let (served, mut stream) = host.join().unwrap();
        assert_eq!(served, Served::Doorbell(1));
        bell.ring();
        bell.ring();
        let mut buf = [0u8; 8];
        use std::io::Read;
        let mut got = 0;
        while got < 2 {
            got += stream.read(&mut buf).unwrap();
        }
        assert_eq!(got, 2);
        drop(control);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_channel_without_doorbells_refuses_one_and_serves_on() {
        let input = b"{\"op\":\"doorbell\"}\n{\"op\":\"destroy_qp\",\"qpn\":3}\n";
        let mut out = Vec::new();
        let n = serve(&Fake, &mut BufReader::new(&input[..]), &mut out, false).unwrap();
        assert_eq!(n, Served::Ended(2));
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().next().unwrap().contains("polls"), "{text}");
        // A client over a plain stream has no doorbell either.
        let (a, _b) = UnixStream::pair().unwrap();
        let r = BufReader::new(a.try_clone().unwrap());
        let hca = RemoteHca::new(Box::new(r), Box::new(a));
        assert!(matches!(hca.doorbell(), Err(ControlError::Unavailable(_))));
    }
}
