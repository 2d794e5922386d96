//! What `libresex_preload.so` (an `LD_PRELOAD` interposer in an unmodified mlx5 application)
//! tells the guest agent: one JSON object per line over a Unix stream socket, for each QP the
//! application creates or destroys. Addresses are the application's virtual addresses; the agent
//! (root) turns them into guest-physical ones through the process's pagemap, and takes the
//! process from the socket's peer credentials, never from the message.
//!
//! The socket's path is [`DEFAULT_SOCKET`] unless `RESEX_PRELOAD_SOCKET` names another. A
//! connection that closes (the process exited) ends every QP it reported.

use serde::{Deserialize, Serialize};

/// Where the agent listens for the interposer.
pub const DEFAULT_SOCKET: &str = "/run/resex/preload.sock";
/// The environment variable that names another socket.
pub const SOCKET_ENV: &str = "RESEX_PRELOAD_SOCKET";
/// The longest line the agent reads.
pub const MAX_LINE: usize = 4096;

/// A work queue in the application's memory (`mlx5dv_qp.sq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkQueue {
    /// Its first slot's virtual address.
    pub buf: u64,
    /// Slots (64-byte basic blocks for an mlx5 send queue).
    pub wqe_cnt: u32,
    /// Bytes per slot.
    pub stride: u32,
}

/// A completion queue in the application's memory (`mlx5dv_cq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionQueue {
    /// Its first entry's virtual address.
    pub buf: u64,
    /// Entries.
    pub cqe_cnt: u32,
    /// Bytes per entry (64 or 128).
    pub cqe_size: u32,
    /// Its doorbell record's virtual address.
    pub dbrec: u64,
}

/// One message from the interposer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum PreloadMsg {
    /// The application created a QP on an mlx5 device.
    Created {
        /// Its QPN.
        qpn: u32,
        /// Its send queue.
        sq: WorkQueue,
        /// The QP's doorbell record's virtual address (`dbrec[1]` counts the send queue).
        dbrec: u64,
        /// Its send CQ.
        send_cq: CompletionQueue,
        /// Its receive CQ, when it is another.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        recv_cq: Option<CompletionQueue>,
    },
    /// The application destroyed the QP.
    Destroyed {
        /// Its QPN.
        qpn: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_one_tagged_line_and_unknown_fields_are_refused() {
        let m = PreloadMsg::Created {
            qpn: 0x11,
            sq: WorkQueue {
                buf: 0x7f00_0000_1000,
                wqe_cnt: 256,
                stride: 64,
            },
            dbrec: 0x7f00_0000_9000,
            send_cq: CompletionQueue {
                buf: 0x7f00_0000_a000,
                cqe_cnt: 128,
                cqe_size: 64,
                dbrec: 0x7f00_0000_9040,
            },
            recv_cq: None,
        };
        let line = serde_json::to_string(&m).unwrap();
        assert!(line.starts_with(r#"{"op":"created","qpn":17,"#), "{line}");
        assert!(!line.contains('\n') && !line.contains("recv_cq"));
        assert_eq!(serde_json::from_str::<PreloadMsg>(&line).unwrap(), m);
        let d = serde_json::to_string(&PreloadMsg::Destroyed { qpn: 3 }).unwrap();
        assert_eq!(d, r#"{"op":"destroyed","qpn":3}"#);
        assert!(
            serde_json::from_str::<PreloadMsg>(r#"{"op":"destroyed","qpn":3,"pid":1}"#).is_err()
        );
    }
}
