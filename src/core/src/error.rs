//! What the core refuses: [`CoreError`].

use resex_common::{TxLimit, VmId};
use resex_ibmon::registry::RegistrationError;

/// What the core refuses (nothing is changed).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CoreError {
    /// A VM id given twice.
    #[error("{0} is known already")]
    DuplicateVm(VmId),
    /// An id the core does not know.
    #[error("no VM {0}")]
    UnknownVm(VmId),
    /// A name the core does not know.
    #[error("no VM named `{0}`")]
    UnknownName(String),
    /// A step for an interval that was priced already.
    #[error("interval {got} at {now_ns} ns is not after the last step's {last}")]
    NotAfter {
        /// The time given.
        now_ns: u64,
        /// Its interval.
        got: u64,
        /// The last interval stepped.
        last: u64,
    },
    /// A cap that is not a positive percent.
    #[error("cap {0} must be a positive percent of one CPU")]
    BadCap(f64),
    /// A transmit limit whose share is above its ceiling, or zero.
    #[error("transmit limit {0}: a share must be above 0 and at most the ceiling")]
    BadTx(TxLimit),
    /// The VM has no rate lever.
    #[error(
        "no rate lever for VM {0} (no VF known for it, or one resexd cannot set: its log says why)"
    )]
    NoTxLever(String),
    /// A registration that does not fit the VM (new QPs are validated again on their own).
    #[error(transparent)]
    Registration(#[from] RegistrationError),
}
