//! The `benchex` command line (also `resex benchex`), a host-side tool over the BenchEx
//! library (`src/benchex`, which runs in guests).
//!
//! - [`cli`], the command line: `server`, `client` (each in a guest: RAM file + softhca socket),
//!   `local`.
//! - [`local`], both roles in one process on an in-process softhca (quick figures).

pub mod cli;
pub mod local;
