//! The crate's errors: parameters out of range, messages that do not fit the run.

use thiserror::Error;

/// What can go wrong building or stepping a DRUM solve.
#[derive(Debug, Error, PartialEq)]
pub enum DrumError {
    /// A real parameter out of its range.
    #[error("invalid parameter: {param} must be {range}")]
    OutOfRange {
        /// The parameter (`rho`, `alpha`, `balancing mu`, ...).
        param: &'static str,
        /// Its value.
        value: f64,
        /// Its range, as the message says it (`a positive number`, `in (0, 1)`, ...).
        range: &'static str,
    },
    /// A count out of its range.
    #[error("invalid parameter: {param} must be {range}")]
    Count {
        /// The count (`apps`, `k`, `hosts`, `iterations`, ...).
        param: &'static str,
        /// Its value.
        value: u64,
        /// Its range, as the message says it.
        range: &'static str,
    },
    /// An entry of a per-application vector (`a_j`, `w_j`) that is not a positive number.
    #[error("invalid parameter: {vector}_{index} must be a positive number")]
    NotPositive {
        /// The vector (`a`, `w`).
        vector: &'static str,
        /// The entry.
        index: usize,
        /// Its value.
        value: f64,
    },
    /// A fleet network problem the solver cannot take.
    #[error("invalid parameter: {0}")]
    Network(NetworkError),
    /// The dual-decomposition baseline asked to solve a weighted model.
    #[error("invalid parameter: the dual-decomposition baseline solves the unweighted model")]
    Weighted,
    /// More host reports merged than the run has hosts.
    #[error("invalid parameter: {got} reports for {want} hosts")]
    Reports {
        /// Hosts merged.
        got: u64,
        /// Hosts in the run.
        want: u64,
    },
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

impl From<NetworkError> for DrumError {
    fn from(e: NetworkError) -> Self {
        DrumError::Network(e)
    }
}

/// What is wrong with a fleet network problem ([`crate::network`]).
#[derive(Debug, Clone, Copy, PartialEq, Error)]
pub enum NetworkError {
    /// The fairness exponent outside [0.1, 10].
    #[error("alpha {alpha} must be in [0.1, 10] (w^(1/alpha) overflows below)")]
    Alpha {
        /// The exponent given.
        alpha: f64,
    },
    /// A link capacity that is not a positive number.
    #[error("link capacity {capacity} must be positive")]
    Capacity {
        /// The capacity given, Mb/s.
        capacity: f64,
    },
    /// A host listing a link twice.
    #[error("host {host} lists a link twice")]
    RepeatedLink {
        /// The host's index.
        host: usize,
    },
    /// A host crossing a link that does not exist.
    #[error("host {host} crosses link {link}; there are {links}")]
    UnknownLink {
        /// The host's index.
        host: usize,
        /// The link's index.
        link: usize,
        /// Links in the problem.
        links: usize,
    },
    /// An application weight that is not a positive number.
    #[error("host {host}: weight {weight} must be positive")]
    Weight {
        /// The host's index.
        host: usize,
        /// The weight given.
        weight: f64,
    },
    /// An application demand negative or not finite.
    #[error("host {host}: demand {demand} must be finite and >= 0")]
    Demand {
        /// The host's index.
        host: usize,
        /// The demand given, Mb/s.
        demand: f64,
    },
}
