//! What the fleet demo measured: [`FleetReport`] (`resex fleet demo --json`'s output).

use serde::Serialize;

/// What the fleet demo measured.
#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    /// Hosts started.
    pub hosts: usize,
    /// The lease TTL, s.
    pub ttl_s: i64,
    /// The shared uplink's capacity, Mb/s (half the guests' demand alone).
    pub uplink_mbps: f64,
    /// The guests' rate together before the topology was set, Mb/s.
    pub before_mbps: f64,
    /// Their rate under the coordinator's allocation, Mb/s.
    pub allocated_mbps: f64,
    /// The ceilings of one coordinator round, every host's allocation of it, together, Mb/s (at
    /// most the uplink; the ceilings in force, read from the hosts one after the other, may
    /// mix two rounds).
    pub ceilings_mbps: f64,
    /// The coordinator whose host was killed.
    pub killed: String,
    /// Seconds until another host led.
    pub leader_failover_s: f64,
    /// The new coordinator.
    pub new_leader: String,
    /// Seconds from the kill until every surviving host had the new coordinator's allocation.
    pub allocations_resumed_s: f64,
    /// Seconds from etcd's death until every host had lifted the fleet's ceilings.
    pub etcd_loss_fallback_s: f64,
    /// VMs still under a fleet ceiling after the fallback (must be 0).
    pub stale_throttles_after_fallback: usize,
    /// Allocations the hosts applied (one per host per coordinator round that changed it).
    pub allocations: u64,
    /// Coordinator rounds, all coordinators together.
    pub rounds: u64,
    /// The last coordinator's round time (read, solve, write), ms.
    pub round_ms: f64,
}
