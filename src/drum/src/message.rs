//! What a host sends the coordinator and what the coordinator broadcasts: the messages a fleet
//! carries between machines (serde, JSON-friendly).
//!
//! A [`HostReport`] is additive: the reports of several hosts merge into one report of all of
//! them (the sum of their residual vectors and objective parts), so a fleet can aggregate in a
//! tree, and the simulation merges the hosts of a group before the coordinator sees them.

use crate::DrumError;
use serde::{Deserialize, Serialize};

/// The coordinator's broadcast: `u^k`, the dual variable every host uses for iteration k + 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Broadcast {
    /// k: the number of iterations done so far.
    pub iteration: u64,
    /// `u^k`, one per application.
    pub u: Vec<f64>,
    /// The penalty rho of iteration k + 1 when the coordinator adapts it
    /// ([`crate::StepRule::Balanced`]); `None`: every host keeps its own (a fixed rho).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rho: Option<f64>,
}

/// One or more hosts' results for one iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    /// The iteration these results complete (the broadcast's + 1).
    pub iteration: u64,
    /// How many hosts were merged into this report.
    pub hosts: u64,
    /// `sum over hosts of (a_j x_ij - z_ij)`, per application.
    pub residual: Vec<f64>,
    /// `sum over hosts of f~(x_i)`.
    pub utility: f64,
    /// `sum over hosts of g(z_i)`.
    pub latency: f64,
    /// `sum over hosts of ||A x_i - z_i||^2` (the paper's primal residual).
    pub primal_sq: f64,
    /// `sum over hosts of ||z_i||^2` (scales the primal residual).
    pub z_sq: f64,
    /// `sum over hosts of ||stationarity of the previous x_i under this broadcast's u||^2`: the
    /// dual half of the KKT residual, one iteration late (0 in the first iteration).
    pub stationarity_sq: f64,
    /// `sum over hosts of ||A (z_i^{k+1} - z_i^k)||^2`: Boyd's dual residual over rho^2
    /// (the coordinator multiplies by the rho of the iteration).
    #[serde(default)]
    pub dual_sq: f64,
    /// The objective of a feasible schedule recovered from z: `x' = z / a` scaled down to both
    /// capacities, `z' = A x'` (finite: the z-step keeps every rate positive).
    pub recovered: f64,
}

impl HostReport {
    /// An empty report (no hosts) for `apps` applications.
    #[must_use]
    pub fn empty(apps: usize, iteration: u64) -> Self {
        Self {
            iteration,
            hosts: 0,
            residual: vec![0.0; apps],
            utility: 0.0,
            latency: 0.0,
            primal_sq: 0.0,
            z_sq: 0.0,
            stationarity_sq: 0.0,
            dual_sq: 0.0,
            recovered: 0.0,
        }
    }

    /// Empties the report for another iteration, keeping its allocation.
    pub fn reset(&mut self, iteration: u64) {
        self.iteration = iteration;
        self.hosts = 0;
        self.residual.fill(0.0);
        self.utility = 0.0;
        self.latency = 0.0;
        self.primal_sq = 0.0;
        self.z_sq = 0.0;
        self.stationarity_sq = 0.0;
        self.dual_sq = 0.0;
        self.recovered = 0.0;
    }

    /// Adds another report of the same iteration into this one.
    pub fn merge(&mut self, o: &HostReport) -> Result<(), DrumError> {
        if o.residual.len() != self.residual.len() {
            return Err(DrumError::Length {
                what: "host report",
                got: o.residual.len(),
                want: self.residual.len(),
            });
        }
        if o.iteration != self.iteration {
            return Err(DrumError::Iteration {
                what: "host report",
                got: o.iteration,
                want: self.iteration,
            });
        }
        self.hosts += o.hosts;
        for (s, r) in self.residual.iter_mut().zip(&o.residual) {
            *s += r;
        }
        self.utility += o.utility;
        self.latency += o.latency;
        self.primal_sq += o.primal_sq;
        self.z_sq += o.z_sq;
        self.stationarity_sq += o.stationarity_sq;
        self.dual_sq += o.dual_sq;
        self.recovered += o.recovered;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_merge_by_adding() {
        let mut a = HostReport::empty(2, 3);
        a.hosts = 1;
        a.residual = vec![1.0, -2.0];
        a.utility = 5.0;
        let mut b = a.clone();
        b.residual = vec![0.5, 0.5];
        a.merge(&b).unwrap();
        assert_eq!(a.hosts, 2);
        assert_eq!(a.residual, [1.5, -1.5]);
        assert_eq!(a.utility, 10.0);
        b.iteration = 4;
        assert!(matches!(a.merge(&b), Err(DrumError::Iteration { .. })));
        assert!(matches!(
            a.merge(&HostReport::empty(3, 3)),
            Err(DrumError::Length { .. })
        ));
    }

    #[test]
    fn messages_round_trip_through_json() {
        let mut r = HostReport::empty(3, 7);
        r.hosts = 2;
        r.residual = vec![0.25, -1e-300, 3.5e10];
        r.utility = 1.0 / 3.0;
        r.recovered = -12.5;
        let back: HostReport = serde_json_round_trip(&r);
        assert_eq!(back, r);
        let mut b = Broadcast {
            iteration: 6,
            u: vec![0.1, -0.2, 1e-17],
            rho: None,
        };
        assert_eq!(serde_json_round_trip(&b), b);
        // A fixed penalty's broadcast reads as before the penalty was carried.
        assert!(!serde_json::to_string(&b).unwrap().contains("rho"));
        b.rho = Some(0.25);
        assert_eq!(serde_json_round_trip(&b), b);
    }

    fn serde_json_round_trip<T: Serialize + for<'de> Deserialize<'de>>(v: &T) -> T {
        serde_json::from_str(&serde_json::to_string(v).unwrap()).unwrap()
    }
}
