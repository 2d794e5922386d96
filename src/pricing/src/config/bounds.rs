//! How a policy file is refused: [`ConfigError`], and the range check every section uses.

use thiserror::Error;

/// A policy file that cannot be used.
#[derive(Debug, Error, PartialEq)]
pub enum ConfigError {
    /// Not TOML, an unknown key, or a value of the wrong type.
    #[error("{0}")]
    Parse(String),
    /// A value outside its allowed range.
    #[error("`{key}` = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        /// Dotted path of the key.
        key: &'static str,
        /// The value given.
        value: String,
        /// The allowed range, for people.
        allowed: &'static str,
    },
    /// Keys that do not fit together.
    #[error("{0}")]
    Inconsistent(String),
}

pub(crate) fn check<T: PartialOrd + std::fmt::Display + Copy>(
    key: &'static str,
    value: T,
    ok: bool,
    allowed: &'static str,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            key,
            value: value.to_string(),
            allowed,
        })
    }
}

pub(crate) fn finite_in(v: f64, lo: f64, hi: f64) -> bool {
    v.is_finite() && v >= lo && v <= hi
}
