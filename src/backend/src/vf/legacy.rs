//! The legacy per-VF rate (`ip link set PF vf N min_tx_rate M max_tx_rate X`): rtnetlink's
//! `IFLA_VF_RATE` (a VF index, a minimum and a maximum in Mbit/s, 0 for none) in
//! `IFLA_VFINFO_LIST` / `IFLA_VF_INFO`, set with `RTM_SETLINK` on the PF's netdev and read
//! back with `RTM_GETLINK` asking for VF details (`IFLA_EXT_MASK` = `RTEXT_FILTER_VF`).
//! Requests are built with netlink-packet-route; the answer is walked for the one attribute
//! needed (a kernel newer than the crate cannot make the rest of the link fail to parse).

use super::netlink::{frame, Conn, Msg, NetlinkError};
use netlink_packet_core::{NlaBuffer, NlasIterator, NLM_F_ACK};
use netlink_packet_route::link::{
    LinkAttribute, LinkExtentMask, LinkMessage, LinkVfInfo, VfInfo, VfInfoRate,
};
use netlink_packet_route::RouteNetlinkMessage;

/// `RTM_NEWLINK`: the kind of `RTM_GETLINK`'s answer.
const RTM_NEWLINK: u16 = 16;
/// The `ifinfomsg` header before the attributes.
const IFINFOMSG_LEN: usize = 16;
const IFLA_VFINFO_LIST: u16 = 22;
const IFLA_VF_INFO: u16 = 1;
const IFLA_VF_RATE: u16 = 6;

/// A VF's legacy rate, Mbit/s (0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VfRate {
    /// `min_tx_rate`.
    pub min: u32,
    /// `max_tx_rate`.
    pub max: u32,
}

fn link(pf: &str) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(pf.to_owned()));
    m
}

/// `RTM_GETLINK` for the PF `pf` (by name), with its VFs' details.
pub fn get_request(pf: &str, seq: u32) -> Vec<u8> {
    let mut m = link(pf);
    m.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::Vf]));
    frame(RouteNetlinkMessage::GetLink(m), NLM_F_ACK, seq)
}

/// `RTM_SETLINK` of VF `vf`'s rate on the PF `pf`.
pub fn set_request(pf: &str, vf: u32, r: VfRate, seq: u32) -> Vec<u8> {
    let mut m = link(pf);
    m.attributes
        .push(LinkAttribute::VfInfoList(vec![LinkVfInfo(vec![
            VfInfo::Rate(VfInfoRate::new(vf, r.min, r.max)),
        ])]));
    frame(RouteNetlinkMessage::SetLink(m), NLM_F_ACK, seq)
}

/// VF `vf`'s rate in `RTM_GETLINK`'s answer; `Ok(Err(n))`: the link lists `n` VFs and not
/// this one (or its driver reports no rate).
pub fn parse_rate(msgs: &[Msg], vf: u32) -> Result<Result<VfRate, usize>, NetlinkError> {
    let m = msgs
        .iter()
        .find(|m| m.kind == RTM_NEWLINK)
        .ok_or_else(|| NetlinkError::Malformed("no link in the answer".into()))?;
    let attrs = m.payload.get(IFINFOMSG_LEN..).ok_or_else(|| {
        NetlinkError::Malformed(format!("a link message of {} bytes", m.payload.len()))
    })?;
    let bad = |e: netlink_packet_core::DecodeError| NetlinkError::Malformed(e.to_string());
    let mut listed = 0;
    for a in NlasIterator::new(attrs) {
        let a = a.map_err(bad)?;
        if a.kind() != IFLA_VFINFO_LIST {
            continue;
        }
        for info in NlasIterator::new(a.value()) {
            let info = info.map_err(bad)?;
            if info.kind() != IFLA_VF_INFO {
                continue;
            }
            listed += 1;
            if let Some(r) = vf_rate(info)? {
                if r.vf_id == vf {
                    return Ok(Ok(VfRate {
                        min: r.min_tx_rate,
                        max: r.max_tx_rate,
                    }));
                }
            }
        }
    }
    Ok(Err(listed))
}

fn vf_rate(info: NlaBuffer<&[u8]>) -> Result<Option<VfInfoRate>, NetlinkError> {
    for n in NlasIterator::new(info.value()) {
        let n = n.map_err(|e| NetlinkError::Malformed(e.to_string()))?;
        if n.kind() == IFLA_VF_RATE {
            return VfInfoRate::parse(n.value())
                .map(Some)
                .map_err(|e| NetlinkError::Malformed(format!("IFLA_VF_RATE: {e}")));
        }
    }
    Ok(None)
}

/// An rtnetlink socket.
pub struct Socket {
    conn: Conn,
}

impl Socket {
    /// Opens one.
    pub fn open() -> Result<Self, NetlinkError> {
        Ok(Self {
            conn: Conn::open(netlink_sys::protocols::NETLINK_ROUTE)?,
        })
    }

    /// VF `vf`'s rate on `pf` (`Err(n)` inside: the PF lists `n` VFs, not this one).
    pub fn rate(&mut self, pf: &str, vf: u32) -> Result<Result<VfRate, usize>, NetlinkError> {
        parse_rate(&self.conn.request(|s| get_request(pf, s))?, vf)
    }

    /// Sets VF `vf`'s rate on `pf`.
    pub fn set(&mut self, pf: &str, vf: u32, r: VfRate) -> Result<(), NetlinkError> {
        self.conn.request(|s| set_request(pf, vf, r, s)).map(drop)
    }
}
