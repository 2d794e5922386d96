//! A DRUM instance: the parameters and the dependency matrix `A = diag(a_1 .. a_m)`, shared
//! by every host as in the paper (`F(x_i) = A x_i` with one A).
//!
//! The paper draws the a_j "randomly ... in the normal distribution in [1, 10]": we draw from a
//! normal of mean 5.5 and standard deviation 2.25 (so that [1, 10] is plus or minus two standard
//! deviations) and reject draws outside [1, 10], with a seeded generator so that a seed gives
//! the same instance on every machine.

use crate::{DrumError, Params};
use serde::{Deserialize, Serialize};

/// Parameters and the diagonal of A.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// The parameters.
    pub params: Params,
    /// `a_j`, one per application, each > 0.
    pub a: Vec<f64>,
}

impl Model {
    /// A model with the given diagonal; checks the parameters and every a_j.
    pub fn new(params: Params, a: Vec<f64>) -> Result<Self, DrumError> {
        params.check()?;
        if a.len() != params.apps {
            return Err(DrumError::Length {
                what: "A",
                got: a.len(),
                want: params.apps,
            });
        }
        if let Some(j) = a.iter().position(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(DrumError::NotPositive {
                vector: "a",
                index: j,
                value: a[j],
            });
        }
        Ok(Self { params, a })
    }

    /// The paper's draw of A for `params.apps` applications from `seed`.
    pub fn paper(params: Params, seed: u64) -> Result<Self, DrumError> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let a = (0..params.apps)
            .map(|_| truncated_normal(&mut rng))
            .collect();
        Self::new(params, a)
    }
}

/// N(5.5, 2.25^2) restricted to [1, 10] by rejection (Box-Muller).
fn truncated_normal(rng: &mut fastrand::Rng) -> f64 {
    loop {
        let u1 = 1.0 - rng.f64(); // (0, 1]
        let u2 = rng.f64();
        let n = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let v = 5.5 + 2.25 * n;
        if (1.0..=10.0).contains(&v) {
            return v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PaperSetup;

    #[test]
    fn paper_draw_is_in_range_and_seeded() {
        let p = Params::from_paper(500, &PaperSetup::default()).unwrap();
        let m = Model::paper(p, 7).unwrap();
        assert!(m.a.iter().all(|v| (1.0..=10.0).contains(v)));
        assert_eq!(m, Model::paper(p, 7).unwrap());
        assert_ne!(m.a, Model::paper(p, 8).unwrap().a);
        let mean = m.a.iter().sum::<f64>() / 500.0;
        assert!((mean - 5.5).abs() < 0.4, "{mean}");
    }

    #[test]
    fn rejects_a_non_positive_a() {
        let p = Params::from_paper(50, &PaperSetup::default()).unwrap();
        let mut a = vec![1.0; 50];
        a[3] = 0.0;
        let e = Model::new(p, a).unwrap_err();
        assert_eq!(
            e,
            DrumError::NotPositive {
                vector: "a",
                index: 3,
                value: 0.0
            }
        );
        assert_eq!(
            e.to_string(),
            "invalid parameter: a_3 must be a positive number"
        );
    }
}
