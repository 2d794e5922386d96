//! The crate's errors: parameters out of range, messages that do not fit the run.

use thiserror::Error;

/// What can go wrong building or stepping a DRUM solve.
#[derive(Debug, Error, PartialEq)]
pub enum DrumError {
    /// A parameter is out of its range; the message names it and the range.
    #[error("invalid parameter: {0}")]
    Invalid(String),
    /// A message (host report, broadcast, host state) has the wrong number of applications.
    #[error("{what} has {got} applications, the model has {want}")]
    Length {
        /// Which message.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The model's number of applications.
        want: usize,
    },
    /// A message belongs to another iteration than the one in progress.
    #[error("{what} is for iteration {got}, iteration {want} is in progress")]
    Iteration {
        /// Which message.
        what: &'static str,
        /// The message's iteration.
        got: u64,
        /// The iteration in progress.
        want: u64,
    },
    /// A broadcast carries another penalty than the host's solver has
    /// ([`crate::Solver::set_rho`] first).
    #[error("the broadcast's penalty rho is {got}, the solver's is {want}")]
    Penalty {
        /// The broadcast's rho.
        got: f64,
        /// The solver's rho.
        want: f64,
    },
    /// The coordinator was asked to broadcast before every host reported.
    #[error("{got} of {want} hosts have reported")]
    Missing {
        /// Hosts merged so far.
        got: u64,
        /// Hosts in the run.
        want: u64,
    },
}
