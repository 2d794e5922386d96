//! The key layout. Everything lives under one prefix, so a fleet is one `get --prefix` and one
//! etcd can hold several fleets (`prefix` in `[fleet]`):
//!
//! - `PREFIX/hosts/HOST`: the host's [`crate::HostRecord`], under its lease (gone when the
//!   host is);
//! - `PREFIX/summary/HOST`: its [`crate::HostSummary`], under the same lease, rewritten every
//!   publish period;
//! - `PREFIX/election`: etcd's election for the coordinator (the winner's key is
//!   `PREFIX/election/LEASE`, its value the host's name);
//! - `PREFIX/topology`: the shared links (the admin's, [`crate::Topology`]);
//! - `PREFIX/alloc/HOST`: the coordinator's [`crate::Allocation`] for the host, under the
//!   coordinator's lease (gone with it) and valid for a while in any case;
//! - `PREFIX/round`: the coordinator's last [`crate::RoundReport`], under its lease.

/// Path segments of the layout (a prefix must not contain one).
pub const SEGMENTS: [&str; 6] = ["hosts", "summary", "election", "topology", "alloc", "round"];

/// The default prefix.
pub const DEFAULT_PREFIX: &str = "/resex/v1";

/// The longest host name (it is a key component).
pub const MAX_HOST_NAME: usize = 128;

/// A host's record key.
#[must_use]
pub fn host(prefix: &str, name: &str) -> String {
    format!("{prefix}/hosts/{name}")
}

/// All host records.
#[must_use]
pub fn hosts(prefix: &str) -> String {
    format!("{prefix}/hosts/")
}

/// A host's summary key.
#[must_use]
pub fn summary(prefix: &str, name: &str) -> String {
    format!("{prefix}/summary/{name}")
}

/// All summaries.
#[must_use]
pub fn summaries(prefix: &str) -> String {
    format!("{prefix}/summary/")
}

/// The coordinator's election.
#[must_use]
pub fn election(prefix: &str) -> String {
    format!("{prefix}/election")
}

/// The topology.
#[must_use]
pub fn topology(prefix: &str) -> String {
    format!("{prefix}/topology")
}

/// A host's allocation.
#[must_use]
pub fn alloc(prefix: &str, name: &str) -> String {
    format!("{prefix}/alloc/{name}")
}

/// All allocations.
#[must_use]
pub fn allocs(prefix: &str) -> String {
    format!("{prefix}/alloc/")
}

/// The coordinator's last round.
#[must_use]
pub fn round(prefix: &str) -> String {
    format!("{prefix}/round")
}

/// Is `name` usable as a host name: 1..=128 of `[A-Za-z0-9._-]`?
#[must_use]
pub fn valid_host(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_HOST_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_names() {
        assert_eq!(host(DEFAULT_PREFIX, "h1"), "/resex/v1/hosts/h1");
        assert!(host(DEFAULT_PREFIX, "h1").starts_with(&hosts(DEFAULT_PREFIX)));
        assert!(summary(DEFAULT_PREFIX, "h1").starts_with(&summaries(DEFAULT_PREFIX)));
        assert!(valid_host("node-3.rack_1"));
        for bad in ["", "a/b", "a b", "é", &"x".repeat(129)] {
            assert!(!valid_host(bad), "{bad:?}");
        }
    }
}
