//! What the kvm backend needs from a libvirt domain's XML, and `resex kvm prepare`'s edit.
//!
//! Read: name, UUID, vCPUs, memory, whether guest RAM is a shared file (`<memoryBacking>` with
//! `<source type='file'/>` and `<access mode='shared'/>`: the host can then map it), and the
//! host path of the registration channel (a virtio-serial `<channel type='unix'>` whose target
//! is named [`AGENT_CHANNEL`]), and the PCI functions passed through to it (`<interface
//! type='hostdev'>` first, then `<hostdev mode='subsystem' type='pci'>`: where its SR-IOV VF is,
//! for the rate lever). Written: the same two pieces, added to a definition that lacks them,
//! leaving everything else byte for byte.

use crate::{BackendError, XmlError};

/// The virtio-serial channel the guest's agent registers on.
pub const AGENT_CHANNEL: &str = "org.resex.agent.0";

/// What the admin must add for the host to read guest RAM.
pub const MEMORY_SNIPPET: &str =
    "<memoryBacking><source type='file'/><access mode='shared'/></memoryBacking>";

/// What the admin must add for the agent's registration channel (inside `<devices>`).
pub const CHANNEL_SNIPPET: &str = "<channel type='unix'><source mode='bind'/>\
<target type='virtio' name='org.resex.agent.0'/></channel>";

/// A domain as its XML describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainXml {
    /// Name.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory, bytes.
    pub memory: u64,
    /// Guest RAM is a shared file the host can map.
    pub shared_file_memory: bool,
    /// The host end of the agent channel (a live domain's XML names it; an inactive one's may
    /// not).
    pub channel_path: Option<String>,
    /// The definition has an agent channel at all.
    pub has_channel: bool,
    /// Every virtio-serial Unix channel: (target name, host path when the XML names one).
    pub channels: Vec<(String, Option<String>)>,
    /// PCI functions passed through (`DDDD:BB:SS.F`): network interfaces (`<interface
    /// type='hostdev'>`) first, then other `<hostdev>`s, each in the order of the XML.
    pub pci_passthrough: Vec<String>,
}

impl DomainXml {
    /// The host path of the virtio-serial channel named `name`.
    pub fn channel(&self, name: &str) -> Option<&str> {
        self.channels
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, p)| p.as_deref())
    }
}

fn child<'a, 'i>(n: roxmltree::Node<'a, 'i>, tag: &str) -> Option<roxmltree::Node<'a, 'i>> {
    n.children().find(|c| c.has_tag_name(tag))
}

fn bytes(n: roxmltree::Node<'_, '_>) -> Result<u64, BackendError> {
    let v: u64 = n
        .text()
        .unwrap_or("")
        .trim()
        .parse()
        .map_err(|_| XmlError::Size {
            tag: n.tag_name().name().to_owned(),
        })?;
    let unit = n.attribute("unit").unwrap_or("KiB");
    let mul: u64 = match unit {
        "b" | "bytes" => 1,
        "KB" => 1000,
        "k" | "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "M" | "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "G" | "GiB" => 1 << 30,
        "TB" => 1_000_000_000_000,
        "T" | "TiB" => 1 << 40,
        other => {
            return Err(XmlError::Unit {
                unit: other.to_owned(),
            }
            .into())
        }
    };
    v.checked_mul(mul).ok_or(XmlError::Overflow.into())
}

fn agent_channel<'a, 'i>(devices: roxmltree::Node<'a, 'i>) -> Option<roxmltree::Node<'a, 'i>> {
    devices.children().find(|c| {
        c.has_tag_name("channel")
            && child(*c, "target").is_some_and(|t| {
                t.attribute("type") == Some("virtio") && t.attribute("name") == Some(AGENT_CHANNEL)
            })
    })
}

fn shared_file(dom: roxmltree::Node<'_, '_>) -> bool {
    child(dom, "memoryBacking").is_some_and(|mb| {
        child(mb, "source").is_some_and(|s| s.attribute("type") == Some("file"))
            && child(mb, "access").is_some_and(|a| a.attribute("mode") == Some("shared"))
    })
}

/// A PCI `<address domain= bus= slot= function=>` as `DDDD:BB:SS.F` (libvirt writes hex with
/// `0x`, and reads decimal too); `None` when a part is missing or out of range.
fn pci_address(a: roxmltree::Node<'_, '_>) -> Option<String> {
    let num = |name: &str, max: u32| -> Option<u32> {
        let v = a.attribute(name)?.trim();
        let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(h) => u32::from_str_radix(h, 16).ok()?,
            None => v.parse().ok()?,
        };
        (n <= max).then_some(n)
    };
    if a.attribute("type").is_some_and(|t| t != "pci") {
        return None;
    }
    let domain = match a.attribute("domain") {
        Some(_) => num("domain", 0xffff)?,
        None => 0,
    };
    Some(format!(
        "{domain:04x}:{:02x}:{:02x}.{:x}",
        num("bus", 0xff)?,
        num("slot", 0x1f)?,
        num("function", 7)?
    ))
}

/// The source PCI addresses of `<devices>`' passthrough functions (see
/// [`DomainXml::pci_passthrough`]).
fn passthrough(devices: roxmltree::Node<'_, '_>) -> Vec<String> {
    let source_addr = |n: roxmltree::Node<'_, '_>| {
        child(n, "source")
            .and_then(|s| child(s, "address"))
            .and_then(pci_address)
    };
    let ifaces = devices
        .children()
        .filter(|c| c.has_tag_name("interface") && c.attribute("type") == Some("hostdev"))
        .filter_map(source_addr);
    let hostdevs = devices
        .children()
        .filter(|c| {
            c.has_tag_name("hostdev")
                && c.attribute("mode").unwrap_or("subsystem") == "subsystem"
                && c.attribute("type") == Some("pci")
        })
        .filter_map(source_addr);
    let mut out: Vec<String> = Vec::new();
    for a in ifaces.chain(hostdevs) {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

impl DomainXml {
    /// Parses a domain's XML (`virsh dumpxml`).
    pub fn parse(xml: &str) -> Result<Self, BackendError> {
        let doc = roxmltree::Document::parse(xml).map_err(XmlError::Parse)?;
        let dom = doc.root_element();
        if !dom.has_tag_name("domain") {
            return Err(XmlError::NotDomain.into());
        }
        let text = |tag: &str| child(dom, tag).and_then(|n| n.text()).map(str::trim);
        let name = text("name").ok_or(XmlError::Missing { tag: "name" })?;
        let vcpus = match text("vcpu") {
            Some(v) => v
                .parse()
                .map_err(|_| XmlError::Vcpus { text: v.to_owned() })?,
            None => 1,
        };
        let memory = match child(dom, "currentMemory").or_else(|| child(dom, "memory")) {
            Some(n) => bytes(n)?,
            None => return Err(XmlError::Missing { tag: "memory" }.into()),
        };
        let channel = child(dom, "devices").and_then(agent_channel);
        Ok(Self {
            name: name.to_owned(),
            uuid: text("uuid").unwrap_or("").to_owned(),
            vcpus,
            memory,
            shared_file_memory: shared_file(dom),
            channel_path: channel
                .and_then(|c| child(c, "source"))
                .and_then(|s| s.attribute("path"))
                .map(str::to_owned),
            has_channel: channel.is_some(),
            channels: child(dom, "devices")
                .map(|d| {
                    d.children()
                        .filter(|c| c.has_tag_name("channel"))
                        .filter_map(|c| {
                            let t = child(c, "target")?;
                            (t.attribute("type") == Some("virtio")).then(|| {
                                (
                                    t.attribute("name").unwrap_or("").to_owned(),
                                    child(c, "source")
                                        .and_then(|s| s.attribute("path"))
                                        .map(str::to_owned),
                                )
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            pci_passthrough: child(dom, "devices").map(passthrough).unwrap_or_default(),
        })
    }
}

/// The definition with shared file memory and the agent channel added where missing (`None`:
/// it has both already). Only insertions: the rest of the text is kept byte for byte.
pub fn prepare(xml: &str) -> Result<Option<String>, BackendError> {
    let doc = roxmltree::Document::parse(xml).map_err(XmlError::Parse)?;
    let dom = doc.root_element();
    if !dom.has_tag_name("domain") {
        return Err(XmlError::NotDomain.into());
    }
    // (byte offset, text to insert), applied from the end.
    let mut edits: Vec<(usize, String)> = Vec::new();
    if !shared_file(dom) {
        if let Some(mb) = child(dom, "memoryBacking") {
            // Keep the admin's other settings (hugepages, locked, ...): replace the source and
            // access elements, add them if absent.
            for tag in ["source", "access"] {
                if let Some(n) = child(mb, tag) {
                    return Err(XmlError::MemoryBacking {
                        tag,
                        element: xml[n.range()].to_owned(),
                    }
                    .into());
                }
            }
            let end = mb.range().end;
            let close = xml[..end]
                .rfind("</memoryBacking>")
                .ok_or(XmlError::Empty {
                    tag: "memoryBacking",
                })?;
            edits.push((
                close,
                "<source type='file'/><access mode='shared'/>".to_owned(),
            ));
        } else {
            // After </memory> or </currentMemory>, whichever comes last.
            let after = ["currentMemory", "memory"]
                .iter()
                .filter_map(|t| child(dom, t))
                .map(|n| n.range().end)
                .max()
                .ok_or(XmlError::Missing { tag: "memory" })?;
            edits.push((after, format!("\n  {MEMORY_SNIPPET}")));
        }
    }
    let devices = child(dom, "devices").ok_or(XmlError::Missing { tag: "devices" })?;
    if agent_channel(devices).is_none() {
        let end = devices.range().end;
        let close = xml[..end]
            .rfind("</devices>")
            .ok_or(XmlError::Empty { tag: "devices" })?;
        edits.push((close, format!("  {CHANNEL_SNIPPET}\n  ")));
    }
    if edits.is_empty() {
        return Ok(None);
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut out = xml.to_owned();
    for (at, text) in edits {
        out.insert_str(at, &text);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BARE: &str = r#"<domain type='qemu'>
  <name>vm1</name>
  <uuid>8a5b0c4e-2f6e-4d0a-9a57-3d0c5c9f3e11</uuid>
  <memory unit='MiB'>128</memory>
  <vcpu placement='static'>2</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
  </devices>
</domain>"#;

    const LIVE: &str = r#"<domain type='qemu' id='1'>
  <name>resex-probe</name>
  <uuid>0d1f4a8e-1111-2222-3333-444455556666</uuid>
  <memory unit='KiB'>131072</memory>
  <currentMemory unit='KiB'>131072</currentMemory>
  <memoryBacking>
    <source type='file'/>
    <access mode='shared'/>
  </memoryBacking>
  <vcpu placement='static'>1</vcpu>
  <devices>
    <channel type='unix'>
      <source mode='bind' path='/var/lib/libvirt/qemu/channel/target/domain-1-resex-probe/org.resex.agent.0'/>
      <target type='virtio' name='org.resex.agent.0' state='disconnected'/>
      <alias name='channel0'/>
    </channel>
  </devices>
</domain>"#;

    #[test]
    fn a_live_domain_is_read() {
        let d = DomainXml::parse(LIVE).unwrap();
        assert_eq!(d.name, "resex-probe");
        assert_eq!(d.vcpus, 1);
        assert_eq!(d.memory, 128 << 20);
        assert!(d.shared_file_memory && d.has_channel);
        assert_eq!(
            d.channel_path.as_deref(),
            Some("/var/lib/libvirt/qemu/channel/target/domain-1-resex-probe/org.resex.agent.0")
        );
        assert_eq!(prepare(LIVE).unwrap(), None, "nothing to add");
        assert_eq!(d.channel(AGENT_CHANNEL), d.channel_path.as_deref());
        assert_eq!(d.channel("org.resex.hca.0"), None);
    }

    #[test]
    fn prepare_adds_the_backing_and_the_channel_and_keeps_the_rest() {
        let d = DomainXml::parse(BARE).unwrap();
        assert!(!d.shared_file_memory && !d.has_channel);
        assert_eq!((d.vcpus, d.memory), (2, 128 << 20));
        let out = prepare(BARE).unwrap().unwrap();
        let p = DomainXml::parse(&out).unwrap();
        assert!(p.shared_file_memory && p.has_channel);
        assert_eq!((p.name, p.vcpus, p.memory), (d.name, d.vcpus, d.memory));
        // Only insertions: removing them gives the original back.
        let back = out
            .replace(&format!("\n  {MEMORY_SNIPPET}"), "")
            .replace(&format!("  {CHANNEL_SNIPPET}\n  "), "");
        assert_eq!(back, BARE);
        assert_eq!(prepare(&out).unwrap(), None, "idempotent");
    }

    #[test]
    fn an_existing_memory_backing_is_completed_or_refused() {
        let with_hp = BARE.replace(
            "<vcpu",
            "<memoryBacking>\n    <hugepages/>\n  </memoryBacking>\n  <vcpu",
        );
        let out = prepare(&with_hp).unwrap().unwrap();
        assert!(out.contains("<hugepages/>"));
        assert!(DomainXml::parse(&out).unwrap().shared_file_memory);
        let anon = BARE.replace(
            "<vcpu",
            "<memoryBacking><source type='anonymous'/></memoryBacking>\n  <vcpu",
        );
        let e = prepare(&anon).unwrap_err().to_string();
        assert!(
            e.contains("<source type='anonymous'/>") && e.contains("by hand"),
            "{e}"
        );
    }

    #[test]
    fn passthrough_vfs_are_read_interfaces_first() {
        let x = LIVE.replace(
            "  </devices>",
            r#"    <hostdev mode='subsystem' type='pci' managed='yes'>
      <driver name='vfio'/>
      <source><address domain='0x0000' bus='0x81' slot='0x00' function='0x4'/></source>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x07' function='0x0'/>
    </hostdev>
    <interface type='hostdev' managed='yes'>
      <mac address='52:54:00:6d:90:02'/>
      <source><address type='pci' domain='0x0000' bus='0x03' slot='0x00' function='0x2'/></source>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x08' function='0x0'/>
    </interface>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0' bus='3' slot='1' function='7'/></source>
    </hostdev>
    <hostdev mode='subsystem' type='usb'>
      <source><vendor id='0x1234'/><product id='0xbeef'/></source>
    </hostdev>
    <hostdev mode='capabilities' type='net'><source><interface>eth0</interface></source></hostdev>
    <interface type='network'><source network='default'/></interface>
    <hostdev mode='subsystem' type='pci'><source><address bus='0x100' slot='0' function='0'/></source></hostdev>
    <hostdev mode='subsystem' type='pci'><source><address bus='0x03' slot='0x00' function='0x8'/></source></hostdev>
    <interface type='hostdev'><source><address type='usb' bus='1' port='2'/></source></interface>
  </devices>"#,
        );
        let d = DomainXml::parse(&x).unwrap();
        assert_eq!(
            d.pci_passthrough,
            ["0000:03:00.2", "0000:81:00.4", "0000:03:01.7"],
            "the interface's VF first; the guest-side address, USB, other kinds and \
             out-of-range addresses are not passthrough functions"
        );
        assert!(DomainXml::parse(LIVE).unwrap().pci_passthrough.is_empty());
    }

    #[test]
    fn hostile_or_broken_xml_is_an_error() {
        for x in [
            "",
            "<domain>",
            "<notdomain/>",
            "<domain><name>x</name></domain>",
            "<domain><name>x</name><memory unit='XB'>1</memory></domain>",
            "<domain><name>x</name><memory>99999999999999999999</memory></domain>",
        ] {
            assert!(DomainXml::parse(x).is_err(), "{x}");
        }
        assert!(prepare("<domain><name>x</name><memory>1</memory></domain>").is_err());
        let cases = [
            ("<notdomain/>", "domain XML: the root is not <domain>"),
            ("<domain><name>x</name></domain>", "domain XML: no <memory>"),
            (
                "<domain><name>x</name><memory unit='XB'>1</memory></domain>",
                "memory unit `XB` is unknown",
            ),
            (
                "<domain><name>x</name><memory>99999999999999999999</memory></domain>",
                "<memory> is not a number",
            ),
        ];
        for (x, text) in cases {
            let e = DomainXml::parse(x).unwrap_err();
            assert!(matches!(e, BackendError::Xml(_)), "{x}: {e:?}");
            assert_eq!(e.to_string(), text, "{x}");
        }
        assert!(matches!(
            DomainXml::parse("<domain><memory>1</memory></domain>"),
            Err(BackendError::Xml(XmlError::Missing { tag: "name" }))
        ));
        assert!(matches!(
            prepare("<domain><name>x</name><memory>1</memory><devices/></domain>"),
            Err(BackendError::Xml(XmlError::Empty { tag: "devices" }))
        ));
    }
}
