//! What the driver tells the core about a VM: [`VmInfo`].

/// What the driver tells the core about a VM when it appears (from the backend or the
/// scenario).
#[derive(Debug, Clone, PartialEq)]
pub struct VmInfo {
    /// Name shown to people (the domain's name).
    pub name: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Guest RAM size, bytes: registrations are validated against it.
    pub ram_size: u64,
    /// Weight of its share of the link (1 unless configured).
    pub weight: f64,
    /// Its own SLA threshold (fraction), when configured.
    pub sla_threshold: Option<f64>,
    /// How its caps are enforced, for people.
    pub cap_mechanism: String,
    /// Its rate lever, for people (`None`: the VM has none: no VF, no scheduler).
    pub tx_lever: Option<String>,
    /// What the admin grants it (default: an equal split of the link, the policy's floor).
    pub entitlement: resex_pricing::Entitlement,
}

impl VmInfo {
    /// A VM with weight 1, the policy's SLA and no mechanism named.
    pub fn new(name: impl Into<String>, vcpus: u32, ram_size: u64) -> Self {
        Self {
            name: name.into(),
            vcpus,
            ram_size,
            weight: 1.0,
            sla_threshold: None,
            cap_mechanism: String::new(),
            tx_lever: None,
            entitlement: resex_pricing::Entitlement::default(),
        }
    }

    /// The cap that means "uncapped": 100 x vCPUs.
    pub fn full_cap(&self) -> f64 {
        100.0 * f64::from(self.vcpus.max(1))
    }
}
