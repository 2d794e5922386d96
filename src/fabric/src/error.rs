//! Why a fabric cannot be built or run.

/// A fabric scenario that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The TOML does not parse or has unknown fields.
    #[error("fabric scenario: {0}")]
    Parse(#[from] toml::de::Error),
    /// A name used but never defined (a host, a link).
    #[error("{what} {name:?} is not defined (known: {known})")]
    Unknown {
        /// What kind of thing.
        what: &'static str,
        /// The name used.
        name: String,
        /// The names defined.
        known: String,
    },
    /// A name defined twice.
    #[error("{what} {name:?} is defined twice")]
    Duplicate {
        /// What kind of thing.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A value out of its range.
    #[error("{0}")]
    Invalid(String),
}
