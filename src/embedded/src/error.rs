//! What stops the embedded host: [`HostError`].

/// What stops the host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A file, socket or process could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// Guest memory.
    #[error(transparent)]
    Mem(#[from] resex_guestmem::MemError),
    /// Publishing the domain.
    #[error(transparent)]
    Backend(#[from] resex_backend::BackendError),
    /// A scenario setting only the lab can honour.
    #[error("guest `{0}`: report_scale (a lying guest), benchex.chunk (replies in chunks) and turns (a workload that changes) are lab-only settings; run it with `resex lab run`")]
    LabOnly(String),
    /// A guest died.
    #[error("guest `{name}` exited ({status}); its log: {log}")]
    GuestExited {
        /// Guest.
        name: String,
        /// Exit status.
        status: String,
        /// Its log file.
        log: String,
    },
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HostError {
    let what = what.into();
    move |source| HostError::Io { what, source }
}
