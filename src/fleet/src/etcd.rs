//! The fleet on etcd (feature `etcd`): [`Fleet`], the fleet as an admin reads and writes it,
//! and [`Member`], a host in the fleet (its lease, its summaries, the coordinator's election).

pub use crate::client::{unix_ms, Fleet, MAX_BYTES, MAX_KEYS, PAGE};
pub use crate::member::{Member, MemberState, OnAlloc};
