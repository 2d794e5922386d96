//! How a transport waits for the device ([`Polling`]): a word of the scenario format and of
//! BenchEx's options, used by the shim's real-time driver (`resex_shim::transport::realtime`).

/// How a transport waits for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Polling {
    /// Busy-poll (spinning, then yielding) for the whole wait, as RDMA applications do and as
    /// the ResEx paper's BenchEx does: the VM's I/O rate then follows its CPU share, which is
    /// what makes a CPU cap an I/O lever.
    #[default]
    Spin,
    /// Poll hot for a while (the shim's `HOT_POLL`, 200 us), then sleep between polls: many
    /// guests can share a few CPUs, but a CPU cap no longer bounds a VM's I/O as tightly.
    Adaptive,
    /// Poll hot only briefly (the shim's `BATCH_HOT_POLL`, 20 us), then sleep longer between
    /// polls (up to 1 ms): for bulk and periodic jobs whose transfers take milliseconds, where
    /// a wait's microseconds do not matter and a host's wake-ups do (each nap is a timer and a
    /// context switch, which cost most in a small VM).
    Batch,
}

/// A word that is not a [`Polling`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("polling must be spin, adaptive or batch, not {0:?}")]
pub struct PollingError(pub String);

impl std::fmt::Display for Polling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Spin => "spin",
            Self::Adaptive => "adaptive",
            Self::Batch => "batch",
        })
    }
}

impl std::str::FromStr for Polling {
    type Err = PollingError;
    fn from_str(s: &str) -> Result<Self, PollingError> {
        match s {
            "spin" => Ok(Self::Spin),
            "adaptive" => Ok(Self::Adaptive),
            "batch" => Ok(Self::Batch),
            _ => Err(PollingError(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_others_are_refused() {
        for p in [Polling::Spin, Polling::Adaptive, Polling::Batch] {
            assert_eq!(p.to_string().parse::<Polling>(), Ok(p));
        }
        let e = "sleepy".parse::<Polling>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "polling must be spin, adaptive or batch, not \"sleepy\""
        );
    }
}
