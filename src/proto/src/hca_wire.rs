//! The software HCA's control path carried over a byte stream (JSON lines), so a guest process
//! (or a VM, through a virtio-serial port) can reach the host's softhca. [`RemoteHca`] is the
//! guest's end and implements [`HcaControl`]; [`serve`] is the host's end over any
//! `HcaControl`. One request, one answer, in order.

use crate::channel::{read_msg, write_msg, LineError, MAX_LINE};
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
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    /// A CQ or QP number.
    Number(u32),
    /// A region's keys.
    Keys(MrKeys),
    /// Done.
    Done,
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
    }
}

/// Serves requests from `r` until end of stream; a malformed line is answered with an
/// `Invalid` error and serving goes on. Returns the number of requests served.
pub fn serve(
    ctl: &dyn HcaControl,
    r: &mut dyn BufRead,
    w: &mut dyn Write,
) -> Result<u64, LineError> {
    let mut n = 0;
    loop {
        let resp: Response = match read_msg::<Request>(r, MAX_LINE) {
            Ok(None) => return Ok(n),
            Ok(Some(req)) => execute(ctl, &req),
            Err(LineError::Json(e)) => {
                Err(ControlError::Invalid(format!("malformed request: {e}")))
            }
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
        }
    }

    /// Connects to a Unix socket.
    pub fn connect_unix(path: &std::path::Path) -> std::io::Result<Self> {
        let s = std::os::unix::net::UnixStream::connect(path)?;
        let r = std::io::BufReader::new(s.try_clone()?);
        Ok(Self::new(Box::new(r), Box::new(s)))
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
    ControlError::Invalid(format!("unexpected answer {a:?}"))
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
            serve(&Fake, &mut r, &mut w).unwrap()
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
        assert_eq!(server.join().unwrap(), 4);
    }

    #[test]
    fn a_malformed_request_gets_an_error_and_serving_goes_on() {
        let input = b"{\"op\":\"reboot\"}\n{\"op\":\"destroy_qp\",\"qpn\":3}\n";
        let mut out = Vec::new();
        let n = serve(&Fake, &mut BufReader::new(&input[..]), &mut out).unwrap();
        assert_eq!(n, 2);
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        assert!(lines.next().unwrap().contains("malformed request"));
        assert_eq!(lines.next().unwrap(), r#"{"Ok":"done"}"#);
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
}
