//! Congestion compatibility of periodic ML training jobs (issue 20, items 3 and 4), after
//! Rajasekaran et al., "Congestion Control in Machine Learning Clusters" (HotNets '22,
//! `../shared/papers/ml-cluster-congestion-compatibility.txt`).
//!
//! A data-parallel training job alternates compute (off the network) and communication
//! (all-reduce) with a steady iteration time. Rolled onto a circle whose perimeter is that
//! iteration time, every iteration's communication falls on the same arc. Jobs sharing a link
//! are *compatible* when the circles can be rotated so that, wherever arcs overlap, the jobs'
//! demands still fit the link.
//!
//! resex sees every VM's transmitted bytes exactly, interval by interval, without help from the
//! guest; this crate turns those counts into the circle and the circle into a verdict:
//!
//! - [`detect`](mod@detect): a VM's period, duty cycle, demand while communicating and the phase of its
//!   communication arc, and its bytes per iteration, from its bytes per interval
//!   (autocorrelation of the on/off signal for arcs, burst timing for the spike trains posted
//!   RDMA WRITEs make); refuses steady senders and what is not periodic.
//! - [`circle`]: jobs as (period, arcs, demand); the unified circle of perimeter the LCM of
//!   the periods, rounded to a quantum so that it stays bounded; the rotations that minimise the
//!   demand above capacity; the compatibility score in [0, 1].
//! - [`error`]: [`DetectError`], [`CircleError`] and [`PlaceError`].
//! - [`place`](mod@place): the placement advisor: which jobs share which link (greedy by
//!   weight, then swaps between links that raise the worse link's score), beside a round-robin
//!   baseline.
//! - [`preset`]: jobs shaped like the paper's (VGG, BERT, DLRM, ResNet): compute and bytes.
//! - [`synth`]: seeded synthetic on/off traces with ground truth (tests, experiments).
//!
//! Pure code: no I/O, no clock, no threads, no unsafe; every loop is bounded by a documented
//! cap, and hostile input (zeros, constants, huge counts, tiny slices) gives an error, never a
//! panic or a NaN. `docs/mlcompat.md` describes the method and what the tests measure.

#![forbid(unsafe_code)]

pub mod circle;
pub mod detect;
pub mod error;
pub mod place;
pub mod preset;
pub mod synth;

pub use circle::{
    compatibility, unify, CircleConfig, CommArc, Compatibility, Job, Search, UnifiedCircle,
};
pub use detect::{detect, DetectConfig, Periodicity};
pub use error::{CircleError, DetectError, PlaceError};
pub use place::{place, Link, LinkPlan, NamedJob, Placement};
