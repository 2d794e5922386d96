//! The DRUM problem of one host, solved by `resex-drum`'s ADMM: the applications are the
//! host's active VMs.
//!
//! The per-host step ([`resex_drum::Solver::host_step`], which moves x and z) and the
//! coordinator step ([`resex_drum::Coordinator`], which moves u) stay two calls that exchange a
//! [`HostReport`] and a [`resex_drum::Broadcast`]: today the host is its own coordinator; in a
//! fleet the report goes to a coordinator that merges every host's. Everything that persists
//! between periods is [`DrumHostState`] (serde), so a host can be checkpointed or moved.
//!
//! Each period the VM set may change: VMs that stay keep their x and z as the warm start (u
//! restarts at 0 with a new set, whose size fixes the problem's); when it does not change, the
//! new `a_j` and weights are written into the solver in place and nothing is allocated.

use crate::types::VmId;
use resex_drum::{
    Coordinator, DrumError, HostReport, HostScratch, HostState, Model, Parallel, Params, Selection,
    Solver, StepRule, Stopping, Summary,
};
use serde::{Deserialize, Serialize};

/// One active VM as the problem sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct VmInput {
    /// The VM.
    pub vm: VmId,
    /// CPU (CPUs) per unit of link rate (fraction of the link): `z = a x` at the optimum.
    pub a: f64,
    /// The weight of its WQE-rate utility.
    pub weight: f64,
}

/// The problem's shape: what does not come from measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Fairness exponent.
    pub alpha: f64,
    /// Top k (clipped to the number of VMs).
    pub k: usize,
    /// Weight of the latency utility.
    pub beta: f64,
    /// ADMM penalty.
    pub rho: f64,
    /// `sum_j x_j <=` this (fraction of the link).
    pub x_capacity: f64,
    /// `sum_j z_j <=` this (CPUs).
    pub z_capacity: f64,
}

/// What persists between periods (serde).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrumHostState {
    /// The applications, in order: x_j, z_j and u_j are VM `vms[j]`'s.
    pub vms: Vec<VmId>,
    /// The shape the solver was built for.
    pub shape: Shape,
    /// The per-host step's state (x, z, the top-k set, prices).
    pub host: HostState,
    /// The coordinator's state (u).
    pub coordinator: Coordinator,
}

/// One host's DRUM solve, with its buffers.
#[derive(Debug, Default)]
pub struct DrumHost {
    solver: Option<Solver>,
    state: Option<DrumHostState>,
    scratch: Option<HostScratch>,
    report: Option<HostReport>,
    a: Vec<f64>,
    w: Vec<f64>,
    last: Option<Summary>,
}

impl DrumHost {
    /// The state after the last solve.
    pub fn state(&self) -> Option<&DrumHostState> {
        self.state.as_ref()
    }

    /// The last iteration's summary (objective, residuals).
    pub fn last(&self) -> Option<&Summary> {
        self.last.as_ref()
    }

    /// Runs up to `iterations` ADMM iterations (fewer when the stopping rule holds) for these
    /// VMs, warm-started from the last solve.
    pub fn solve(
        &mut self,
        vms: &[VmInput],
        shape: Shape,
        iterations: u32,
    ) -> Result<&DrumHostState, DrumError> {
        self.a.clear();
        self.a.extend(vms.iter().map(|v| v.a));
        self.w.clear();
        self.w.extend(vms.iter().map(|v| v.weight));
        let same = self
            .state
            .as_ref()
            .is_some_and(|s| s.shape == shape && s.vms.iter().eq(vms.iter().map(|v| &v.vm)));
        if !same {
            self.rebuild(vms, shape)?;
        }
        let solver = self
            .solver
            .as_mut()
            .ok_or(DrumError::Missing { got: 0, want: 1 })?;
        solver.update(&self.a, &self.w)?;
        let (Some(st), Some(sc), Some(report)) = (
            self.state.as_mut(),
            self.scratch.as_mut(),
            self.report.as_mut(),
        ) else {
            return Err(DrumError::Missing { got: 0, want: 1 });
        };
        for _ in 0..iterations {
            // The per-host step ...
            report.reset(st.host.iteration + 1);
            let b = st.coordinator.broadcast();
            solver.host_step(&mut st.host, b, sc, Parallel::Serial, report)?;
            // ... and the coordinator's.
            st.coordinator.absorb(report)?;
            let s = st.coordinator.finish()?;
            self.last = Some(s);
            if s.stop {
                break;
            }
        }
        Ok(st)
    }

    /// A new problem for a new VM set (or shape); x and z carried over for the VMs that stay.
    fn rebuild(&mut self, vms: &[VmInput], shape: Shape) -> Result<(), DrumError> {
        let m = vms.len();
        let params = Params {
            apps: m,
            k: shape.k.clamp(1, m.max(1)),
            alpha: shape.alpha,
            beta: shape.beta,
            x_capacity: shape.x_capacity,
            z_capacity: shape.z_capacity,
            rho: shape.rho,
            selection: Selection::Rates,
        };
        let model = Model::new(params, self.a.clone())?;
        let mut host = HostState::new(m);
        if let Some(old) = &self.state {
            for (j, v) in vms.iter().enumerate() {
                if let Some(i) = old.vms.iter().position(|o| *o == v.vm) {
                    host.x[j] = old.host.x[i];
                    host.z[j] = old.host.z[i];
                }
            }
        }
        let stopping = Stopping {
            primal: 1e-4,
            objective: 1e-6,
        };
        self.state = Some(DrumHostState {
            vms: vms.iter().map(|v| v.vm).collect(),
            shape,
            host,
            coordinator: Coordinator::new(m, 1, StepRule::Constant(shape.rho), stopping)?,
        });
        self.solver = Some(Solver::new(model));
        self.scratch = Some(HostScratch::new(m, params.k));
        self.report = Some(HostReport::empty(m, 1));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            alpha: 0.5,
            k: 8,
            beta: 1e-9,
            rho: 1.0,
            x_capacity: 1.0,
            z_capacity: 100.0,
        }
    }

    fn vm(id: u32, a: f64, weight: f64) -> VmInput {
        VmInput {
            vm: VmId(id),
            a,
            weight,
        }
    }

    #[test]
    fn two_vms_weighted_two_to_one_get_four_fifths_and_one_fifth() {
        // x_j ~ w_j^2 at the optimum of 2 w1 sqrt(x1) + 2 w2 sqrt(x2), x1 + x2 <= 1.
        let mut h = DrumHost::default();
        let vms = [vm(3, 1.0, 2.0), vm(9, 5.0, 1.0)];
        let mut st = h.solve(&vms, shape(), 300).unwrap().clone();
        for _ in 0..3 {
            st = h.solve(&vms, shape(), 100).unwrap().clone();
        }
        assert_eq!(st.vms, [VmId(3), VmId(9)]);
        assert!((st.host.x[0] - 0.8).abs() < 1e-3, "{:?}", st.host.x);
        assert!((st.host.x[1] - 0.2).abs() < 1e-3, "{:?}", st.host.x);
        assert!((st.host.z[1] - 1.0).abs() < 5e-3, "{:?}", st.host.z);
    }

    #[test]
    fn a_vm_that_stays_keeps_its_warm_start_when_another_joins() {
        let mut h = DrumHost::default();
        h.solve(&[vm(1, 1.0, 1.0)], shape(), 50).unwrap();
        let x1 = h.state().unwrap().host.x[0];
        // Zero iterations: the rebuilt problem as it starts.
        let st = h
            .solve(&[vm(0, 1.0, 1.0), vm(1, 1.0, 1.0)], shape(), 0)
            .unwrap();
        assert_eq!(st.vms, [VmId(0), VmId(1)]);
        assert!(x1 > 0.9, "{x1}");
        assert_eq!(st.host.x, [0.0, x1]);
        assert_eq!(st.host.iteration, 0);
    }

    #[test]
    fn the_state_round_trips_through_json() {
        let mut h = DrumHost::default();
        let st = h
            .solve(&[vm(1, 2.0, 1.0), vm(2, 0.5, 3.0)], shape(), 4)
            .unwrap();
        let text = serde_json::to_string(st).unwrap();
        let back: DrumHostState = serde_json::from_str(&text).unwrap();
        // serde_json's default float parsing may miss by an ulp: the numbers to an ulp.
        assert_eq!((&back.vms, &back.shape), (&st.vms, &st.shape));
        assert_eq!((back.host.iteration, &back.host.top), (4, &st.host.top));
        let (b, s) = (
            &back.coordinator.broadcast().u,
            &st.coordinator.broadcast().u,
        );
        for (p, q) in back
            .host
            .x
            .iter()
            .chain(&back.host.z)
            .chain(b)
            .zip(st.host.x.iter().chain(&st.host.z).chain(s))
        {
            assert!((p - q).abs() <= f64::EPSILON * q.abs(), "{p} {q}");
        }
    }
}
