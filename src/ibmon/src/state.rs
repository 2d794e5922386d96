//! Cursors saved between processes (`resex ibmon scan --state`), matched to the rings they
//! belong to by QPN and doorbell record.

use crate::monitor::VmMonitor;
use crate::sq::SqCursor;
use serde::{Deserialize, Serialize};

/// Version of the state file format.
pub const STATE_VERSION: u32 = 1;

/// The monitor's cursors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorState {
    /// Format version.
    pub version: u32,
    /// One per distinct CQ.
    pub cqs: Vec<CqState>,
    /// One per QP.
    pub qps: Vec<QpState>,
    /// The soft-RoCE rings' cursors, in the registration's order (kept by whoever scans them:
    /// [`crate::rxe::RxeMonitor::cursors`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rxe: Vec<crate::rxe::RxeCursor>,
}

/// A CQ cursor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CqState {
    /// The CQ's doorbell record (its identity).
    pub dbrec: u64,
    /// The monitor's index.
    pub index: u32,
}

/// An SQ cursor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QpState {
    /// QP number.
    pub qpn: u32,
    /// The cursor.
    pub sq: SqCursor,
}

/// A state that does not belong to these rings.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Another format version.
    #[error("state version {0} is not supported (expected {STATE_VERSION})")]
    Version(u32),
    /// The rings differ from those the state was saved for.
    #[error("the saved state does not match the registered rings ({0}); delete the state file to start over")]
    Mismatch(String),
}

impl VmMonitor {
    /// The cursors, to save.
    pub fn state(&self) -> MonitorState {
        MonitorState {
            rxe: Vec::new(),
            version: STATE_VERSION,
            cqs: self
                .layout
                .cqs
                .iter()
                .zip(self.cqs.iter())
                .map(|(c, hot)| CqState {
                    dbrec: c.dbrec.0,
                    index: hot.index,
                })
                .collect(),
            qps: self
                .layout
                .qps
                .iter()
                .zip(self.qps.iter())
                .map(|(q, hot)| QpState {
                    qpn: q.qpn,
                    sq: hot.cur.clone(),
                })
                .collect(),
        }
    }

    /// Restores saved cursors; the state must describe exactly these rings.
    pub fn restore(&mut self, st: &MonitorState) -> Result<(), StateError> {
        if st.version != STATE_VERSION {
            return Err(StateError::Version(st.version));
        }
        let dbrecs: Vec<u64> = self.layout.cqs.iter().map(|c| c.dbrec.0).collect();
        let saved: Vec<u64> = st.cqs.iter().map(|c| c.dbrec).collect();
        if dbrecs != saved {
            return Err(StateError::Mismatch(format!(
                "CQ doorbells {saved:x?}, registered {dbrecs:x?}"
            )));
        }
        let qpns: Vec<u32> = self.layout.qps.iter().map(|q| q.qpn).collect();
        let saved: Vec<u32> = st.qps.iter().map(|q| q.qpn).collect();
        if qpns != saved {
            return Err(StateError::Mismatch(format!(
                "QPNs {saved:?}, registered {qpns:?}"
            )));
        }
        for (hot, c) in self.cqs.iter_mut().zip(&st.cqs) {
            hot.index = c.index & crate::cq::INDEX_MASK;
        }
        for (hot, q) in self.qps.iter_mut().zip(&st.qps) {
            // A saved walk is resumed by the next scan.
            hot.cur = q.sq.clone();
        }
        self.resume = self.qps.iter().any(|q| q.cur.walk.is_some());
        Ok(())
    }
}
