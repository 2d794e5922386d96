//! Job presets shaped like the paper's training jobs (VGG16/19, BERT, DLRM, ResNet50,
//! WideResNet). The paper gives no traces, so each preset states its own figures: the compute
//! phase (forward pass) and the bytes each worker sends per iteration, chosen so that alone on a
//! 50 Gb/s link the iteration time and compute share are close to the paper's (VGG16: 255 ms
//! of which 141 ms compute, Fig. 3; the others from Table 1's fair and unfair iteration times).
//! What differs from a real job: the communication phase here is one bulk transfer per
//! iteration at whatever rate the network gives; real all-reduce overlaps back-propagation.

use crate::circle::Job;
use serde::Serialize;

/// The reference link of the presets: 50 Gb/s, the paper's ConnectX-5 NICs.
pub const REFERENCE_BITS_PER_S: f64 = 50e9;

/// A training job's shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Preset {
    /// Name (`vgg19`, `bert`, ...).
    pub name: &'static str,
    /// Compute (forward pass) per iteration, ns.
    pub compute_ns: u64,
    /// Bytes each worker sends per iteration.
    pub comm_bytes: u64,
    /// Where the figures come from.
    pub basis: &'static str,
}

const MB: u64 = 1_000_000;

/// Every preset.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "vgg16",
        compute_ns: 141_000_000,
        comm_bytes: 712 * MB + 500_000,
        basis: "paper Fig. 3: 255 ms iteration, first 141 ms compute",
    },
    Preset {
        name: "vgg19",
        compute_ns: 150_000_000,
        comm_bytes: 750 * MB,
        basis: "paper Fig. 2: about 270 ms alone (first unfair iteration ends at 0.28 s)",
    },
    Preset {
        name: "bert",
        compute_ns: 100_000_000,
        comm_bytes: 312 * MB + 500_000,
        basis:
            "Table 1: 157 ms beside VGG19 when favoured; 150 ms alone, a third of it on the wire",
    },
    Preset {
        name: "dlrm",
        compute_ns: 600_000_000,
        comm_bytes: 2500 * MB,
        basis: "Table 1: about 1000 ms when two interleave (unfair), 1300 ms fair; 40% on the wire",
    },
    Preset {
        name: "resnet50",
        compute_ns: 125_000_000,
        comm_bytes: 250 * MB,
        basis: "Table 1: 165-167 ms beside VGG16 either way (little on the wire)",
    },
    Preset {
        name: "wideresnet",
        compute_ns: 180_000_000,
        comm_bytes: 600 * MB,
        basis: "Table 1: 273-295 ms, about 96 ms on the wire",
    },
];

/// The preset called `name` (case-insensitive).
#[must_use]
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

/// Every preset's name, for error messages and help.
#[must_use]
pub fn names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

impl Preset {
    /// Time on the wire alone at `bits_per_s`, ns.
    #[must_use]
    pub fn comm_ns(&self, bits_per_s: f64) -> u64 {
        if bits_per_s <= 0.0 || !bits_per_s.is_finite() {
            return u64::MAX;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let ns = (self.comm_bytes as f64 * 8.0 / bits_per_s * 1e9).round() as u64;
        ns
    }

    /// Iteration time alone at `bits_per_s`, ns.
    #[must_use]
    pub fn iteration_ns(&self, bits_per_s: f64) -> u64 {
        self.compute_ns.saturating_add(self.comm_ns(bits_per_s))
    }

    /// The job on the circle of a link of `bits_per_s`: compute first, then one communication
    /// arc at the link's full rate (demand 1).
    #[must_use]
    pub fn job(&self, bits_per_s: f64) -> Job {
        let period = self.iteration_ns(bits_per_s).max(1);
        let start = self.compute_ns as f64 / period as f64;
        Job::single(period, start, 1.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vgg16_is_the_papers_figure_3() {
        let p = preset("VGG16").unwrap();
        let it = p.iteration_ns(REFERENCE_BITS_PER_S);
        assert_eq!(it, 255_000_000);
        let j = p.job(REFERENCE_BITS_PER_S);
        assert!((j.arcs[0].start - 141.0 / 255.0).abs() < 1e-9);
    }

    #[test]
    fn names_are_unique_and_found() {
        let n = names();
        for (i, a) in n.iter().enumerate() {
            assert!(preset(a).is_some());
            assert!(!n[i + 1..].contains(a), "{a} twice");
        }
        assert!(preset("alexnet").is_none());
        assert_eq!(PRESETS[0].comm_ns(0.0), u64::MAX);
    }
}
