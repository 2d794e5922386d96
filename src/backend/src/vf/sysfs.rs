//! An SR-IOV VF's place, from sysfs: its PF (`/sys/bus/pci/devices/VF/physfn`), its index
//! on the PF (the PF's `virtfnN` link that points back at it), the PF's network interface
//! (`net/`), and whether a PCI function is a network VF at all (`class` 0x02xxxx, a
//! `physfn`). The root is a parameter so tests run on a tree of their own.

use crate::BackendError;
use std::path::{Path, PathBuf};

/// Where sysfs is on a real host.
pub const SYSFS: &str = "/sys";

/// A PCI address as sysfs names it: `DDDD:BB:SS.F` (lower-case hex); `BB:SS.F` gets domain
/// `0000`. Anything else is refused (the address becomes a path under sysfs).
pub fn pci_addr(s: &str) -> Result<String, BackendError> {
    let t = s.trim().to_ascii_lowercase();
    let full = if t.matches(':').count() == 1 {
        format!("0000:{t}")
    } else {
        t
    };
    let ok = full.len() == 12
        && full.char_indices().all(|(i, c)| match i {
            4 | 7 => c == ':',
            10 => c == '.',
            11 => ('0'..='7').contains(&c),
            _ => c.is_ascii_hexdigit(),
        });
    if ok {
        Ok(full)
    } else {
        Err(super::VfError::NotPci { text: s.to_owned() }.into())
    }
}

/// A VF as sysfs places it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciVf {
    /// The VF's PCI address.
    pub addr: String,
    /// Its PF's PCI address.
    pub pf: String,
    /// Its index on the PF (`virtfnN`).
    pub index: u32,
    /// The PF's PCI function number (what devlink reports as a port's PF number).
    pub pf_number: u16,
    /// The PF's network interfaces, sorted (empty when it has none).
    pub pf_netdevs: Vec<String>,
}

fn devices(root: &Path) -> PathBuf {
    root.join("bus/pci/devices")
}

fn link_name(p: &Path) -> Option<String> {
    std::fs::read_link(p)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// The network interfaces of a device directory (its `net/` entries, sorted).
pub fn netdevs(dev_dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dev_dir.join("net"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Places the VF at PCI address `vf` under sysfs `root`.
pub fn resolve_pci(root: &Path, vf: &str) -> Result<PciVf, BackendError> {
    let addr = pci_addr(vf)?;
    let dir = devices(root).join(&addr);
    if !dir.exists() {
        return Err(BackendError::Unavailable(format!(
            "VF {addr}: no such PCI device ({} does not exist)",
            dir.display()
        )));
    }
    let pf = link_name(&dir.join("physfn")).ok_or_else(|| {
        BackendError::Unavailable(format!(
            "PCI device {addr} is not an SR-IOV VF (it has no physfn)"
        ))
    })?;
    let pf = pci_addr(&pf)?;
    let pf_dir = devices(root).join(&pf);
    let rd = std::fs::read_dir(&pf_dir)
        .map_err(|e| BackendError::io(format!("VF {addr}: listing its PF {pf}"), e))?;
    let index = rd
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let i: u32 = n.strip_prefix("virtfn")?.parse().ok()?;
            (link_name(&e.path()).as_deref() == Some(addr.as_str())).then_some(i)
        })
        .min()
        .ok_or_else(|| {
            BackendError::Unavailable(format!("VF {addr}: its PF {pf} has no virtfn link to it"))
        })?;
    let pf_number = u16::from(pf.as_bytes()[11] - b'0');
    Ok(PciVf {
        pf_netdevs: netdevs(&pf_dir),
        addr,
        pf,
        index,
        pf_number,
    })
}

/// True when the PCI function at `addr` is an SR-IOV VF of a network controller (PCI class
/// 0x02: Ethernet, InfiniBand, ...).
pub fn is_net_vf(root: &Path, addr: &str) -> bool {
    let Ok(addr) = pci_addr(addr) else {
        return false;
    };
    let dir = devices(root).join(addr);
    let class = std::fs::read_to_string(dir.join("class")).unwrap_or_default();
    dir.join("physfn").exists() && class.trim().to_ascii_lowercase().starts_with("0x02")
}

/// Of a domain's passthrough PCI functions (in the order its definition lists them), the one
/// whose rate the lever sets: the first network VF, else the first address that is not on
/// this host's sysfs at all (a definition may name a VF on a host the daemon cannot see into:
/// it is tried, and says why it fails). `None`: none is a VF.
pub fn pick_vf(root: &Path, addrs: &[String]) -> Option<String> {
    let valid: Vec<String> = addrs.iter().filter_map(|a| pci_addr(a).ok()).collect();
    valid
        .iter()
        .find(|a| is_net_vf(root, a))
        .or_else(|| valid.iter().find(|a| !devices(root).join(a).exists()))
        .cloned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree: PF 0000:03:00.0 (eth PF `ens1f0`, class 0x020000) with VFs 03:00.2
    /// (virtfn0) and 03:00.3 (virtfn1); PF 0000:03:00.1 with VF 03:01.2 (virtfn0, no
    /// netdev); a GPU VF 0000:81:00.4 (class 0x030000); a plain device 0000:00:1f.0.
    pub(crate) fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("bus/pci/devices");
        let mk = |a: &str, class: &str| {
            std::fs::create_dir_all(d.join(a)).unwrap();
            std::fs::write(d.join(a).join("class"), format!("{class}\n")).unwrap();
        };
        let vf = |vf: &str, pf: &str, n: u32| {
            symlink(format!("../{pf}"), d.join(vf).join("physfn")).unwrap();
            symlink(format!("../{vf}"), d.join(pf).join(format!("virtfn{n}"))).unwrap();
        };
        for (a, c) in [
            ("0000:03:00.0", "0x020000"),
            ("0000:03:00.1", "0x020700"),
            ("0000:03:00.2", "0x020000"),
            ("0000:03:00.3", "0x020000"),
            ("0000:03:01.2", "0x020700"),
            ("0000:81:00.0", "0x030000"),
            ("0000:81:00.4", "0x030000"),
            ("0000:00:1f.0", "0x060100"),
        ] {
            mk(a, c);
        }
        vf("0000:03:00.2", "0000:03:00.0", 0);
        vf("0000:03:00.3", "0000:03:00.0", 1);
        vf("0000:03:01.2", "0000:03:00.1", 0);
        vf("0000:81:00.4", "0000:81:00.0", 0);
        std::fs::create_dir_all(d.join("0000:03:00.0/net/ens1f0")).unwrap();
        t
    }

    #[test]
    fn a_vf_resolves_to_its_pf_index_and_netdev() {
        let t = tree();
        let v = resolve_pci(t.path(), "03:00.3").unwrap();
        assert_eq!(
            v,
            PciVf {
                addr: "0000:03:00.3".into(),
                pf: "0000:03:00.0".into(),
                index: 1,
                pf_number: 0,
                pf_netdevs: vec!["ens1f0".into()],
            }
        );
        let v = resolve_pci(t.path(), "0000:03:01.2").unwrap();
        assert_eq!(
            (v.pf.as_str(), v.index, v.pf_number),
            ("0000:03:00.1", 0, 1)
        );
        assert!(v.pf_netdevs.is_empty());
    }

    #[test]
    fn what_is_not_a_vf_says_so() {
        let t = tree();
        let e = resolve_pci(t.path(), "0000:00:1f.0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an SR-IOV VF"), "{e}");
        let e = resolve_pci(t.path(), "0000:09:00.2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such PCI device"), "{e}");
        for bad in ["../../etc", "0000:03:00.8", "0000:03:00.2/x", "", "zz:00.0"] {
            assert!(resolve_pci(t.path(), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_first_network_vf_is_picked() {
        let t = tree();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let p = |v: &[&str]| pick_vf(t.path(), &s(v));
        assert_eq!(
            p(&["0000:81:00.4", "0000:00:1f.0", "0000:03:00.3"]).as_deref(),
            Some("0000:03:00.3"),
            "the GPU VF and the plain device are passed over"
        );
        assert_eq!(p(&["0000:81:00.4", "0000:00:1f.0"]), None);
        assert_eq!(
            p(&["0000:00:1f.0", "0000:44:00.1"]).as_deref(),
            Some("0000:44:00.1"),
            "not on this host: tried"
        );
        assert_eq!(p(&[]), None);
        assert!(is_net_vf(t.path(), "0000:03:01.2") && !is_net_vf(t.path(), "0000:03:00.0"));
    }
}
