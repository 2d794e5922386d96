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
    /// A period that is not a whole number of another.
    #[error("`{key}` ({value}) must be a multiple of `{of_key}` ({of})")]
    NotAMultiple {
        /// Dotted path of the key.
        key: &'static str,
        /// Its value.
        value: u64,
        /// The key it must be a multiple of.
        of_key: &'static str,
        /// That key's value.
        of: u64,
    },
    /// The actuation period does not fit the ledger's interval and epoch.
    #[error(
        "`caps.actuation_period_ms` ({period}) must be a multiple of `ledger.interval_ms` \
         ({interval}) and divide `ledger.epoch_ms` ({epoch})"
    )]
    ActuationPeriod {
        /// `caps.actuation_period_ms`.
        period: u64,
        /// `ledger.interval_ms`.
        interval: u64,
        /// `ledger.epoch_ms`.
        epoch: u64,
    },
    /// A policy's section in a file whose policy is another.
    #[error("{article} `[{section}]` section needs `policy = \"{section}\"`")]
    SectionWithoutPolicy {
        /// The section (and the policy it belongs to).
        section: &'static str,
        /// "a" or "an", for the message.
        article: &'static str,
    },
    /// A value that must not exceed another's.
    #[error("`{key}` ({value}) must not exceed `{limit_key}` ({limit})")]
    Exceeds {
        /// Dotted path of the key.
        key: &'static str,
        /// Its value.
        value: f64,
        /// The key it must not exceed.
        limit_key: &'static str,
        /// That key's value.
        limit: f64,
    },
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
