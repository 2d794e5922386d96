//! devlink rate over generic netlink (`devlink port function rate`, Linux 5.14+): a VF's
//! eswitch port is found in a port dump (flavour `PCI_VF`, its PF and VF numbers), its rate
//! leaf (the devlink handle and the port index) is read with `DEVLINK_CMD_RATE_GET` and set
//! with `DEVLINK_CMD_RATE_SET`, one attribute per request (`DEVLINK_ATTR_RATE_TX_SHARE`,
//! `DEVLINK_ATTR_RATE_TX_MAX`) so that a refusal names its attribute. The kernel's unit is
//! bytes per second (what `devlink` shows as bits is these times 8); 0 is no setting.
//!
//! Constants from linux/devlink.h (their values are ABI).

use super::netlink::{frame, Conn, Msg, NetlinkError};
use netlink_packet_core::{
    emit_u16, emit_u32, emit_u64, parse_string, parse_u16, parse_u32, parse_u64, parse_u8,
    DecodeError, DefaultNla, Emitable, Nla, NlaBuffer, NlasIterator, Parseable,
    ParseableParametrized, NLM_F_ACK, NLM_F_DUMP,
};
use netlink_packet_generic::ctrl::nlas::GenlCtrlAttrs;
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::{GenlFamily, GenlHeader, GenlMessage};

/// `DEVLINK_GENL_NAME`.
pub const FAMILY: &str = "devlink";
const VERSION: u8 = 1;

/// `DEVLINK_CMD_PORT_GET`.
pub const CMD_PORT_GET: u8 = 5;
/// `DEVLINK_CMD_RATE_GET`.
pub const CMD_RATE_GET: u8 = 74;
/// `DEVLINK_CMD_RATE_SET`.
pub const CMD_RATE_SET: u8 = 75;

const ATTR_BUS_NAME: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_PORT_INDEX: u16 = 3;
const ATTR_PORT_NETDEV_NAME: u16 = 7;
const ATTR_PORT_FLAVOUR: u16 = 77;
const ATTR_PORT_PCI_PF_NUMBER: u16 = 127;
const ATTR_PORT_PCI_VF_NUMBER: u16 = 128;
const ATTR_PORT_EXTERNAL: u16 = 149;
const ATTR_PORT_CONTROLLER_NUMBER: u16 = 150;
const ATTR_RATE_TYPE: u16 = 165;
const ATTR_RATE_TX_SHARE: u16 = 166;
const ATTR_RATE_TX_MAX: u16 = 167;
const ATTR_RATE_PARENT_NODE_NAME: u16 = 169;

/// `DEVLINK_PORT_FLAVOUR_PCI_VF`.
pub const FLAVOUR_PCI_VF: u16 = 4;
/// `DEVLINK_RATE_TYPE_LEAF`.
pub const RATE_TYPE_LEAF: u16 = 0;

/// A devlink attribute this lever reads or writes (others are kept raw).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    /// `DEVLINK_ATTR_BUS_NAME` (`pci`, `netdevsim`).
    BusName(String),
    /// `DEVLINK_ATTR_DEV_NAME` (`0000:03:00.0`, `netdevsim1`).
    DevName(String),
    /// `DEVLINK_ATTR_PORT_INDEX`.
    PortIndex(u32),
    /// `DEVLINK_ATTR_PORT_NETDEV_NAME`.
    NetdevName(String),
    /// `DEVLINK_ATTR_PORT_FLAVOUR`.
    Flavour(u16),
    /// `DEVLINK_ATTR_PORT_PCI_PF_NUMBER`.
    PfNumber(u16),
    /// `DEVLINK_ATTR_PORT_PCI_VF_NUMBER`.
    VfNumber(u16),
    /// `DEVLINK_ATTR_PORT_EXTERNAL` (a port of another host's PCI controller).
    External(bool),
    /// `DEVLINK_ATTR_PORT_CONTROLLER_NUMBER`.
    Controller(u32),
    /// `DEVLINK_ATTR_RATE_TYPE`.
    RateType(u16),
    /// `DEVLINK_ATTR_RATE_TX_SHARE`, bytes per second.
    TxShare(u64),
    /// `DEVLINK_ATTR_RATE_TX_MAX`, bytes per second.
    TxMax(u64),
    /// `DEVLINK_ATTR_RATE_PARENT_NODE_NAME`.
    Parent(String),
    /// Anything else.
    Other(DefaultNla),
}

fn emit_str(buf: &mut [u8], s: &str) {
    buf[..s.len()].copy_from_slice(s.as_bytes());
    buf[s.len()] = 0;
}

impl Nla for Attr {
    fn value_len(&self) -> usize {
        match self {
            Attr::BusName(s) | Attr::DevName(s) | Attr::NetdevName(s) | Attr::Parent(s) => {
                s.len() + 1
            }
            Attr::External(_) => 1,
            Attr::Flavour(_) | Attr::PfNumber(_) | Attr::VfNumber(_) | Attr::RateType(_) => 2,
            Attr::PortIndex(_) | Attr::Controller(_) => 4,
            Attr::TxShare(_) | Attr::TxMax(_) => 8,
            Attr::Other(n) => n.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Attr::BusName(_) => ATTR_BUS_NAME,
            Attr::DevName(_) => ATTR_DEV_NAME,
            Attr::PortIndex(_) => ATTR_PORT_INDEX,
            Attr::NetdevName(_) => ATTR_PORT_NETDEV_NAME,
            Attr::Flavour(_) => ATTR_PORT_FLAVOUR,
            Attr::PfNumber(_) => ATTR_PORT_PCI_PF_NUMBER,
            Attr::VfNumber(_) => ATTR_PORT_PCI_VF_NUMBER,
            Attr::External(_) => ATTR_PORT_EXTERNAL,
            Attr::Controller(_) => ATTR_PORT_CONTROLLER_NUMBER,
            Attr::RateType(_) => ATTR_RATE_TYPE,
            Attr::TxShare(_) => ATTR_RATE_TX_SHARE,
            Attr::TxMax(_) => ATTR_RATE_TX_MAX,
            Attr::Parent(_) => ATTR_RATE_PARENT_NODE_NAME,
            Attr::Other(n) => n.kind(),
        }
    }

    // The sizes are value_len's: emit_* only fail on a buffer shorter than that.
    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Attr::BusName(s) | Attr::DevName(s) | Attr::NetdevName(s) | Attr::Parent(s) => {
                emit_str(buf, s)
            }
            Attr::External(b) => buf[0] = u8::from(*b),
            Attr::Flavour(v) | Attr::PfNumber(v) | Attr::VfNumber(v) | Attr::RateType(v) => {
                let _ = emit_u16(buf, *v);
            }
            Attr::PortIndex(v) | Attr::Controller(v) => {
                let _ = emit_u32(buf, *v);
            }
            Attr::TxShare(v) | Attr::TxMax(v) => {
                let _ = emit_u64(buf, *v);
            }
            Attr::Other(n) => n.emit_value(buf),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>> for Attr {
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let v = buf.value();
        Ok(match buf.kind() {
            ATTR_BUS_NAME => Attr::BusName(parse_string(v)?),
            ATTR_DEV_NAME => Attr::DevName(parse_string(v)?),
            ATTR_PORT_INDEX => Attr::PortIndex(parse_u32(v)?),
            ATTR_PORT_NETDEV_NAME => Attr::NetdevName(parse_string(v)?),
            ATTR_PORT_FLAVOUR => Attr::Flavour(parse_u16(v)?),
            ATTR_PORT_PCI_PF_NUMBER => Attr::PfNumber(parse_u16(v)?),
            ATTR_PORT_PCI_VF_NUMBER => Attr::VfNumber(parse_u16(v)?),
            ATTR_PORT_EXTERNAL => Attr::External(parse_u8(v)? != 0),
            ATTR_PORT_CONTROLLER_NUMBER => Attr::Controller(parse_u32(v)?),
            ATTR_RATE_TYPE => Attr::RateType(parse_u16(v)?),
            ATTR_RATE_TX_SHARE => Attr::TxShare(parse_u64(v)?),
            ATTR_RATE_TX_MAX => Attr::TxMax(parse_u64(v)?),
            ATTR_RATE_PARENT_NODE_NAME => Attr::Parent(parse_string(v)?),
            _ => Attr::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// A devlink message: a command and its attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devlink {
    /// `DEVLINK_CMD_*`.
    pub cmd: u8,
    /// Attributes.
    pub attrs: Vec<Attr>,
}

impl GenlFamily for Devlink {
    fn family_name() -> &'static str {
        FAMILY
    }
    fn command(&self) -> u8 {
        self.cmd
    }
    fn version(&self) -> u8 {
        VERSION
    }
}

impl Emitable for Devlink {
    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }
    fn emit(&self, buf: &mut [u8]) {
        self.attrs.as_slice().emit(buf)
    }
}

impl ParseableParametrized<[u8], GenlHeader> for Devlink {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        let attrs = NlasIterator::new(buf)
            .map(|n| n.and_then(|n| Attr::parse(&n)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            cmd: header.cmd,
            attrs,
        })
    }
}

/// A devlink instance: `bus/device` (`pci/0000:03:00.0`, `netdevsim/netdevsim1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    /// Bus name.
    pub bus: String,
    /// Device name.
    pub dev: String,
}

impl Handle {
    /// Parses `bus/device`; the parts must be plain names (they become sysfs paths too).
    pub fn parse(s: &str) -> Option<Self> {
        let (bus, dev) = s.split_once('/')?;
        let plain = |p: &str| {
            !p.is_empty()
                && p != "."
                && p != ".."
                && p.bytes().all(|c| c.is_ascii_graphic() && c != b'/')
        };
        (plain(bus) && plain(dev)).then(|| Self {
            bus: bus.to_owned(),
            dev: dev.to_owned(),
        })
    }

    fn attrs(&self) -> [Attr; 2] {
        [
            Attr::BusName(self.bus.clone()),
            Attr::DevName(self.dev.clone()),
        ]
    }
}

impl std::fmt::Display for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.bus, self.dev)
    }
}

/// A devlink port as a dump lists it (the fields the lever matches on).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Port {
    /// Bus name.
    pub bus: String,
    /// Device name.
    pub dev: String,
    /// Port index.
    pub index: u32,
    /// Flavour (`DEVLINK_PORT_FLAVOUR_*`).
    pub flavour: Option<u16>,
    /// PCI PF number.
    pub pf: Option<u16>,
    /// PCI VF number.
    pub vf: Option<u16>,
    /// A port of an external controller (another host's).
    pub external: bool,
    /// Its representor netdev.
    pub netdev: Option<String>,
}

/// A rate leaf's setting, bytes per second (0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rate {
    /// `tx_share`.
    pub tx_share: u64,
    /// `tx_max`.
    pub tx_max: u64,
}

/// The request that resolves a family's id (`CTRL_CMD_GETFAMILY`).
pub fn family_request(seq: u32) -> Vec<u8> {
    let ctrl = GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(FAMILY.to_owned())],
    };
    frame(GenlMessage::from_payload(ctrl), NLM_F_ACK, seq)
}

/// The family id in `CTRL_CMD_GETFAMILY`'s answer.
pub fn parse_family(msgs: &[Msg]) -> Result<u16, NetlinkError> {
    for m in msgs {
        let g = GenlMessage::<GenlCtrl>::parse_with_param(&m.payload, m.kind)
            .map_err(|e| NetlinkError::Malformed(format!("nlctrl answer: {e}")))?;
        if let Some(id) = g.payload.nlas.iter().find_map(|a| match a {
            GenlCtrlAttrs::FamilyId(id) => Some(*id),
            _ => None,
        }) {
            return Ok(id);
        }
    }
    Err(NetlinkError::Malformed(
        "nlctrl's answer has no family id".into(),
    ))
}

/// A devlink request as bytes.
pub fn request(family: u16, cmd: u8, attrs: Vec<Attr>, flags: u16, seq: u32) -> Vec<u8> {
    let mut g = GenlMessage::from_payload(Devlink { cmd, attrs });
    g.set_resolved_family_id(family);
    frame(g, flags, seq)
}

/// The port dump request (every instance's ports: kernels before 6.3 do not filter a dump).
pub fn port_dump_request(family: u16, seq: u32) -> Vec<u8> {
    request(family, CMD_PORT_GET, vec![], NLM_F_DUMP, seq)
}

/// A rate leaf's `RATE_GET`.
pub fn rate_get_request(family: u16, h: &Handle, port: u32, seq: u32) -> Vec<u8> {
    let mut a = h.attrs().to_vec();
    a.push(Attr::PortIndex(port));
    request(family, CMD_RATE_GET, a, NLM_F_ACK, seq)
}

/// A rate leaf's `RATE_SET` of one attribute ([`Attr::TxShare`] or [`Attr::TxMax`]).
pub fn rate_set_request(family: u16, h: &Handle, port: u32, attr: Attr, seq: u32) -> Vec<u8> {
    let mut a = h.attrs().to_vec();
    a.push(Attr::PortIndex(port));
    a.push(attr);
    request(family, CMD_RATE_SET, a, NLM_F_ACK, seq)
}

fn parse_devlink(m: &Msg) -> Result<Devlink, NetlinkError> {
    GenlMessage::<Devlink>::parse_with_param(&m.payload, m.kind)
        .map(|g| g.payload)
        .map_err(|e| NetlinkError::Malformed(format!("devlink answer: {e}")))
}

/// The ports in a dump's answers (every message is one port; the kernel's command in them is
/// `DEVLINK_CMD_NEW`, not `PORT_NEW`, and is not looked at).
pub fn parse_ports(msgs: &[Msg]) -> Result<Vec<Port>, NetlinkError> {
    let mut out = Vec::new();
    for m in msgs {
        let d = parse_devlink(m)?;
        let mut p = Port::default();
        let mut has_index = false;
        for a in d.attrs {
            match a {
                Attr::BusName(s) => p.bus = s,
                Attr::DevName(s) => p.dev = s,
                Attr::PortIndex(i) => {
                    p.index = i;
                    has_index = true;
                }
                Attr::Flavour(f) => p.flavour = Some(f),
                Attr::PfNumber(n) => p.pf = Some(n),
                Attr::VfNumber(n) => p.vf = Some(n),
                Attr::External(e) => p.external = e,
                Attr::NetdevName(n) => p.netdev = Some(n),
                _ => {}
            }
        }
        if has_index {
            out.push(p);
        }
    }
    Ok(out)
}

/// The setting in a `RATE_GET` answer (its one message).
pub fn parse_rate(msgs: &[Msg]) -> Result<Rate, NetlinkError> {
    let d = msgs
        .first()
        .map(parse_devlink)
        .transpose()?
        .ok_or_else(|| NetlinkError::Malformed("no rate in the answer".into()))?;
    let mut r = Rate::default();
    for a in d.attrs {
        match a {
            Attr::TxShare(v) => r.tx_share = v,
            Attr::TxMax(v) => r.tx_max = v,
            _ => {}
        }
    }
    Ok(r)
}

/// The VF's eswitch port on instance `h`: flavour `PCI_VF`, VF number `vf`, on this host's
/// controller; of several (one per PF on a multi-PF instance), the one of PF `pf` when known.
pub fn find_vf_port<'a>(
    ports: &'a [Port],
    h: &Handle,
    vf: u32,
    pf: Option<u16>,
) -> Option<&'a Port> {
    let mut c = ports.iter().filter(|p| {
        p.bus == h.bus
            && p.dev == h.dev
            && p.flavour == Some(FLAVOUR_PCI_VF)
            && p.vf.map(u32::from) == Some(vf)
            && !p.external
    });
    let first = c.clone().next();
    match pf {
        Some(n) => c.find(|p| p.pf == Some(n)).or(first),
        None => first,
    }
}

/// A devlink socket: generic netlink with the family resolved.
pub struct Socket {
    conn: Conn,
    family: u16,
}

impl Socket {
    /// Opens one (`ENOENT`: this kernel has no devlink).
    pub fn open() -> Result<Self, NetlinkError> {
        let mut conn = Conn::open(netlink_sys::protocols::NETLINK_GENERIC)?;
        let family = parse_family(&conn.request(family_request)?)?;
        Ok(Self { conn, family })
    }

    /// Every devlink port of the host.
    pub fn ports(&mut self) -> Result<Vec<Port>, NetlinkError> {
        let f = self.family;
        parse_ports(&self.conn.request(|s| port_dump_request(f, s))?)
    }

    /// A leaf's setting.
    pub fn rate(&mut self, h: &Handle, port: u32) -> Result<Rate, NetlinkError> {
        let f = self.family;
        parse_rate(&self.conn.request(|s| rate_get_request(f, h, port, s))?)
    }

    /// Sets one attribute of a leaf.
    pub fn set(&mut self, h: &Handle, port: u32, attr: Attr) -> Result<(), NetlinkError> {
        let f = self.family;
        self.conn
            .request(|s| rate_set_request(f, h, port, attr, s))
            .map(drop)
    }
}
