//! Utility weights (what a resex policy gives classes of VMs), against hand-computed optima.

use resex_drum::{
    Coordinator, HostReport, HostScratch, HostState, Model, Parallel, Params, Selection, Solver,
    StepRule, Stopping,
};

fn params(apps: usize, x_capacity: f64, z_capacity: f64) -> Params {
    Params {
        apps,
        k: apps,
        alpha: 0.5,
        beta: 1e-9,
        x_capacity,
        z_capacity,
        rho: 1.0,
        selection: Selection::Rates,
    }
}

/// `iterations` of ADMM on one host (its own coordinator).
fn solve(solver: &Solver, iterations: u64) -> HostState {
    let m = solver.model().params.apps;
    let mut st = HostState::new(m);
    let mut sc = HostScratch::new(m, solver.model().params.k);
    let mut c = Coordinator::new(m, 1, StepRule::Constant(1.0), Stopping::default()).unwrap();
    for k in 1..=iterations {
        let mut r = HostReport::empty(m, k);
        solver
            .host_step(&mut st, c.broadcast(), &mut sc, Parallel::Serial, &mut r)
            .unwrap();
        c.absorb(&r).unwrap();
        c.finish().unwrap();
    }
    st
}

#[test]
fn weights_two_to_one_split_the_x_capacity_four_to_one() {
    // max 2 w1 sqrt(x1) + 2 w2 sqrt(x2), x1 + x2 <= 1 (the latency term is negligible at
    // beta = 1e-9, the z capacity slack): w_j / sqrt(x_j) = lambda, so x_j ~ w_j^2:
    // w = (2, 1) gives x = (0.8, 0.2).
    let mut solver = Solver::new(Model::new(params(2, 1.0, 100.0), vec![1.0, 2.0]).unwrap());
    solver.update(&[1.0, 2.0], &[2.0, 1.0]).unwrap();
    assert!(solver.is_weighted());
    let st = solve(&solver, 300);
    assert!((st.x[0] - 0.8).abs() < 1e-3, "{:?}", st.x);
    assert!((st.x[1] - 0.2).abs() < 1e-3, "{:?}", st.x);
    // z = A x at convergence.
    assert!(
        (st.z[0] - 0.8).abs() < 1e-3 && (st.z[1] - 0.4).abs() < 1e-3,
        "{:?}",
        st.z
    );
}

#[test]
fn equal_weights_split_equally_and_the_z_capacity_can_bind() {
    // w = (1, 1), a = (1, 4): x = (0.5, 0.5), z = (0.5, 2.0) while C is slack. With C = 1.5
    // both capacities bind: x1 + x2 = 1, x1 + 4 x2 = 1.5, so x = (5/6, 1/6); the prices of
    // 1/sqrt(x_j) = lambda + a_j mu, 1.0954 = lambda + mu and 2.4495 = lambda + 4 mu, are
    // mu = 0.451, lambda = 0.644, both >= 0: it is the optimum.
    let mut solver = Solver::new(Model::new(params(2, 1.0, 100.0), vec![1.0, 4.0]).unwrap());
    let st = solve(&solver, 300);
    assert!(
        (st.x[0] - 0.5).abs() < 1e-3 && (st.x[1] - 0.5).abs() < 1e-3,
        "{:?}",
        st.x
    );
    solver = Solver::new(Model::new(params(2, 1.0, 1.5), vec![1.0, 4.0]).unwrap());
    let st = solve(&solver, 1000);
    assert!((st.x[0] - 5.0 / 6.0).abs() < 2e-3, "{:?}", st.x);
    assert!((st.x[1] - 1.0 / 6.0).abs() < 2e-3, "{:?}", st.x);
}

#[test]
fn update_refuses_bad_numbers_and_lengths() {
    let mut solver = Solver::new(Model::new(params(2, 1.0, 1.0), vec![1.0, 1.0]).unwrap());
    assert!(solver.update(&[1.0], &[1.0, 1.0]).is_err());
    assert!(solver.update(&[1.0, 0.0], &[1.0, 1.0]).is_err());
    assert!(solver.update(&[1.0, 1.0], &[1.0, f64::NAN]).is_err());
    assert!(!solver.is_weighted());
}
