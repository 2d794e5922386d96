//! The typed cases of [`crate::BackendError`]: a saved setting that is not ours, a domain's XML
//! that cannot be used.

use crate::xen::Scheduler;
use serde_json::Value;

/// A saved cap or transmit setting that cannot be put back.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    /// A saved cgroup cap without one of its keys.
    #[error("saved cap has no `{key}`: {saved}")]
    NoKey {
        /// The key.
        key: &'static str,
        /// The setting.
        saved: Value,
    },
    /// A saved transmit limit that does not parse.
    #[error("saved transmit limit {saved}: {source}")]
    TxLimit {
        /// The setting.
        saved: Value,
        /// Why.
        source: serde_json::Error,
    },
    /// A saved libvirt cap that is not `{global_period, global_quota}`.
    #[error("saved libvirt cap `{saved}` is not ours")]
    Libvirt {
        /// The setting.
        saved: Value,
    },
    /// A saved VF rate that is neither lever's.
    #[error("saved VF rate {saved} is not ours: {source}")]
    VfRate {
        /// The setting.
        saved: Value,
        /// Why.
        source: serde_json::Error,
    },
    /// A saved Xen cap that does not parse.
    #[error("saved xen cap `{saved}`: {source}")]
    Xen {
        /// The setting.
        saved: Value,
        /// Why.
        source: serde_json::Error,
    },
    /// A Xen domain now in a cpupool of another scheduler than the saved setting's.
    #[error("domain moved from {from:?} to {to:?}: its saved setting no longer applies")]
    Moved {
        /// The saved setting's scheduler.
        from: Scheduler,
        /// The domain's scheduler now.
        to: Scheduler,
    },
}

/// A domain's XML (libvirt) that cannot be read or prepared.
#[derive(Debug, thiserror::Error)]
pub enum XmlError {
    /// Not XML.
    #[error("domain XML: {0}")]
    Parse(#[from] roxmltree::Error),
    /// The root element is not `<domain>`.
    #[error("domain XML: the root is not <domain>")]
    NotDomain,
    /// A required element is missing.
    #[error("domain XML: no <{tag}>")]
    Missing {
        /// The element.
        tag: &'static str,
    },
    /// `<vcpu>` is not a number.
    #[error("domain XML: <vcpu> `{text}` is not a number")]
    Vcpus {
        /// Its text.
        text: String,
    },
    /// A memory size that is not a number.
    #[error("<{tag}> is not a number")]
    Size {
        /// The element (`memory`, `currentMemory`).
        tag: String,
    },
    /// A memory unit libvirt does not have.
    #[error("memory unit `{unit}` is unknown")]
    Unit {
        /// The unit.
        unit: String,
    },
    /// A memory size past 2^64 bytes.
    #[error("memory size overflows")]
    Overflow,
    /// `<memoryBacking>` with a `<source>` or `<access>` of its own: left to the admin.
    #[error(
        "<memoryBacking> already has a <{tag}> ({element}); set <source type='file'/> and \
         <access mode='shared'/> by hand"
    )]
    MemoryBacking {
        /// `source` or `access`.
        tag: &'static str,
        /// The element as written.
        element: String,
    },
    /// An element written empty (`<x/>`) that must be given children.
    #[error("domain XML: <{tag}/> is empty{}", empty_hint(tag))]
    Empty {
        /// The element (`memoryBacking`, `devices`).
        tag: &'static str,
    },
}

fn empty_hint(tag: &str) -> &'static str {
    if tag == "memoryBacking" {
        ": remove it first"
    } else {
        ""
    }
}
