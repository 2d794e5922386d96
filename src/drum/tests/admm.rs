//! ADMM end to end: the KKT residual falls (property), alike hosts give n copies of one host,
//! ADMM reaches the certified optimum, and the baseline does not in 60 iterations.

use proptest::prelude::*;
use resex_drum::experiment::{run, Config};
use resex_drum::fleet::AdmmFleet;
use resex_drum::{reference, Model, PaperSetup, Params, Selection, Stopping};

fn model(apps: usize, seed: u64, setup: &PaperSetup) -> Model {
    Model::paper(Params::from_paper(apps, setup).unwrap(), seed).unwrap()
}

/// `sqrt(primal + stationarity)` per iteration (stationarity measured one iteration late).
fn kkt(model: Model, iterations: usize) -> Vec<f64> {
    let mut f = AdmmFleet::new(model, 1, Stopping::default()).unwrap();
    let s: Vec<_> = (0..iterations).map(|_| f.iterate().unwrap()).collect();
    (0..iterations - 1)
        .map(|i| (s[i].primal_residual + s[i + 1].stationarity).sqrt())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn the_kkt_residual_falls(
        apps in 21usize..90,
        seed in any::<u64>(),
        alpha in prop::sample::select(vec![0.5, 0.3, 0.7]),
        beta in 0.5f64..2.0,
        rho in prop::sample::select(vec![0.5, 1.0, 2.0]),
    ) {
        let setup = PaperSetup { alpha, beta, rho, ..PaperSetup::default() };
        let r = kkt(model(apps, seed, &setup), 400);
        let early = r[1];
        let late = r[r.len() - 1];
        prop_assert!(late <= 1e-3 * early, "early {early:e} late {late:e}");
        // And it has not stalled above rounding on the way: every 100 iterations it at least
        // halved, or reached 1e-7 (where rounding of the sums of squares takes over). ADMM's rate
        // is linear with a constant that depends on rho against the instance's curvature.
        for w in r.windows(101).step_by(100) {
            prop_assert!(w[100] <= 0.5 * w[0] || w[100] <= 1e-7, "{:e} -> {:e}", w[0], w[100]);
        }
    }
}

#[test]
fn alike_hosts_are_n_copies_of_one_host() {
    let setup = PaperSetup {
        rho: 1.0,
        ..PaperSetup::default()
    };
    let m = model(60, 5, &setup);
    let mut one = AdmmFleet::new(m.clone(), 1, Stopping::default()).unwrap();
    let mut three = AdmmFleet::new(m, 3, Stopping::default()).unwrap();
    for _ in 0..15 {
        let (a, b) = (one.iterate().unwrap(), three.iterate().unwrap());
        assert!((3.0 * a.objective - b.objective).abs() <= 1e-12 * b.objective.abs());
        let d = (3.0 * a.primal_residual - b.primal_residual).abs();
        assert!(d <= 1e-9 * b.primal_residual + 1e-24, "{d:e}");
    }
    // The same iterates up to rounding (the coordinator divides a sum of three by three).
    let close = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .all(|(p, q)| (p - q).abs() <= 1e-9 * p.abs().max(1e-12))
    };
    let h = one.hosts().next().unwrap();
    for other in three.hosts() {
        assert!(close(&other.x, &h.x) && close(&other.z, &h.z));
        assert_eq!(other.top, h.top);
    }
    assert!(close(one.u(), three.u()));
}

#[test]
fn admm_reaches_the_certified_optimum_and_the_baseline_does_not() {
    let mut cfg = Config::paper(10, 50, 1);
    cfg.setup.rho = 1.0;
    let o = run(&cfg, &mut || 0.0, &mut |_| {}).unwrap();
    let r = reference::solve(&model(50, 1, &cfg.setup));
    assert!((o.reference_objective - 10.0 * r.objective).abs() < 1e-9);
    assert!(o.reference_dual_bound - o.reference_objective <= 1e-9 * o.reference_objective.abs());
    let to = o.admm.iterations_to_995.expect("ADMM settles within 0.5 %");
    assert!(to <= 20, "{to}");
    assert!(o.admm.iterations.is_some());
    let last = o.admm.objective;
    assert!((last - o.reference_objective).abs() <= 1e-6 * o.reference_objective.abs());
    // The baseline's schedule is still off by more than 0.5 % after 60 iterations.
    let dd = *o.dual_decomposition.recovered_trace.last().unwrap();
    assert!((dd - o.reference_objective).abs() > 0.005 * o.reference_objective.abs());
}

#[test]
fn the_exact_selection_also_reaches_the_optimum_at_a_larger_penalty() {
    let setup = PaperSetup {
        rho: 10.0,
        selection: Selection::Exact,
        ..PaperSetup::default()
    };
    let m = model(50, 1, &setup);
    let best = reference::solve(&m).objective;
    let mut f = AdmmFleet::new(m, 1, Stopping::default()).unwrap();
    let mut last = 0.0;
    for _ in 0..80 {
        last = f.iterate().unwrap().objective;
    }
    assert!((last - best).abs() <= 1e-6 * best.abs(), "{last} {best}");
}
