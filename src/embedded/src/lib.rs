//! The embedded host: a whole RDMA host on any Linux machine, with no hypervisor and no RDMA
//! card. Each guest of a scenario is an OS process with its own guest RAM file under /dev/shm
//! (file offset = guest-physical address) in which it allocates its rings, regions and mailbox;
//! softhca serves every guest on the real clock; each guest is put in cgroups (or under a
//! SIGSTOP duty cycle) for caps and CPU accounting, and is published for
//! `resexd --backend local`. As in the paper's testbed, the monitored guests' BenchEx servers
//! sit on port 0 and their clients on the far side of the link (port 1), as unmonitored
//! processes.
//!
//! - [`cgroup`], per-guest cgroups and the cap mode.
//! - [`error`], [`HostError`]: what stops the host.
//! - [`sockets`], the admin and per-guest control sockets softhca is reached by.
//! - [`host`], [`host::EmbeddedHost`]: start, stage, watch and stop the guests.
//! - [`benchex_local`], `benchex local`: BenchEx's server and clients in one process on an
//!   in-process softhca.

pub mod benchex_local;
pub mod cgroup;
pub mod error;
pub mod host;
pub mod sockets;

pub use host::{EmbeddedHost, GuestCommand, HostConfig, HostError};
