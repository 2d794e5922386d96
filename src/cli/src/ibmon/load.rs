//! Opening a guest: its RAM file and its validated registration.

use super::Target;
use anyhow::Context;
use resex_guestmem::{FileMemory, GuestMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::VmMonitor;
use resex_proto::Registration;

/// Maps the RAM file read-only and builds a monitor from the rings document.
pub fn open(t: &Target) -> anyhow::Result<(FileMemory, VmMonitor)> {
    let mem = FileMemory::open_read_only(&t.ram)?;
    let doc =
        std::fs::read(&t.rings).with_context(|| format!("cannot read {}", t.rings.display()))?;
    let reg = Registration::parse(&doc).with_context(|| format!("in {}", t.rings.display()))?;
    let layout = validate(&reg, mem.size(), &Limits::default())
        .with_context(|| format!("{} does not fit {}", t.rings.display(), t.ram.display()))?;
    Ok((mem, VmMonitor::new(layout)))
}
