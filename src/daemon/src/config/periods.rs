//! `[periods]`: the period detector (ML training jobs' iterations, from each VM's exact
//! transmitted bytes per interval).
//!
//! ```toml
//! [periods]
//! enabled = true      # off: no history is kept and no VM gets a period
//! window = 8192       # intervals of history per VM (8.2 s at 1 ms: four 2 s iterations)
//! every_ms = 2000     # a VM's verdict is redone at most this often
//! per_second = 32     # detections per second at most, over all VMs (each ~1 ms at 8192)
//! ```

use serde::Deserialize;

/// The `[periods]` section.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PeriodsConfig {
    /// Keep histories and detect periods.
    pub enabled: bool,
    /// Intervals of history kept per VM.
    pub window: usize,
    /// A VM is looked at again at most this often, ms.
    pub every_ms: u64,
    /// Detections per second at most, over all VMs.
    pub per_second: u32,
}

impl Default for PeriodsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            window: 8192,
            every_ms: 2000,
            per_second: 32,
        }
    }
}

/// The window's bounds, intervals.
/// (At most 65 536: one detection then takes a few ms, and a VM's history 256 KiB.)
pub const WINDOW: std::ops::RangeInclusive<usize> = 64..=(1 << 16);

impl PeriodsConfig {
    /// Why the section cannot be used, if it cannot.
    pub fn check(&self) -> Result<(), &'static str> {
        if !WINDOW.contains(&self.window) {
            return Err("window must be 64 to 65536 intervals");
        }
        if self.every_ms < 100 {
            return Err("every_ms must be at least 100");
        }
        if !(1..=10_000).contains(&self.per_second) {
            return Err("per_second must be 1 to 10000");
        }
        Ok(())
    }
}
