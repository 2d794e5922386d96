//! A guest process's view of its machine: its RAM (a file whose offset is the guest-physical
//! address, as the embedded host gives every guest) and its software HCA's control channel.
//! [`GuestMachine::open`] turns the two into a [`SoftProvider`].

use crate::soft::SoftProvider;
use crate::ShimError;
use resex_guestmem::{FileMemory, GuestMemory};
use resex_proto::hca::HcaControl;
use resex_proto::hca_wire::RemoteHca;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a guest's memory and device are.
#[derive(Debug, Clone)]
pub struct GuestMachine {
    /// The guest RAM file.
    pub ram: PathBuf,
    /// The softhca control socket.
    pub hca: PathBuf,
    /// First byte of RAM the provider may allocate from (below it: the agent's mailbox).
    pub heap_start: u64,
}

impl GuestMachine {
    /// A machine whose heap starts at 1 MiB.
    pub fn new(ram: impl AsRef<Path>, hca: impl AsRef<Path>) -> Self {
        Self {
            ram: ram.as_ref().to_owned(),
            hca: hca.as_ref().to_owned(),
            heap_start: 1 << 20,
        }
    }

    /// Maps the RAM and connects to the device.
    pub fn open(&self) -> Result<(Arc<dyn GuestMemory>, SoftProvider), ShimError> {
        let mem: Arc<dyn GuestMemory> = Arc::new(FileMemory::open(&self.ram)?);
        let ctl: Arc<dyn HcaControl> =
            Arc::new(RemoteHca::connect_unix(&self.hca).map_err(|e| {
                ShimError::Unavailable(format!(
                    "cannot reach the software HCA at {}: {e}",
                    self.hca.display()
                ))
            })?);
        let size = mem.size();
        let p = SoftProvider::new(mem.clone(), self.heap_start, size, ctl)?;
        Ok((mem, p))
    }
}
