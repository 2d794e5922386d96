//! The VF lever's messages, byte for byte: what it sends is what the kernel accepted, and what
//! it reads is what the kernel answered (datagrams recorded from Linux 6.1 and netdevsim by
//! tools/kvm/netdevsim.sh, in `testdata/`); hostile answers are errors, never panics.

use super::devlink::{self, Attr, Handle, Port, Rate};
use super::legacy::{self, VfRate};
use super::netlink::{ack, unhex, Answers, Msg, NetlinkError};
use super::*;

/// A recorded exchange: (sent, received) datagrams.
fn recorded(name: &str) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let text = match name {
        "family" => include_str!("testdata/family.txt"),
        "port_dump" => include_str!("testdata/port_dump.txt"),
        "rate_get" => include_str!("testdata/rate_get.txt"),
        "rate_set" => include_str!("testdata/rate_set.txt"),
        "rate_set_einval" => include_str!("testdata/rate_set_einval.txt"),
        "getlink" => include_str!("testdata/getlink.txt"),
        "setlink" => include_str!("testdata/setlink.txt"),
        "setlink_eopnotsupp" => include_str!("testdata/setlink_eopnotsupp.txt"),
        other => panic!("no recording {other}"),
    };
    let (mut sent, mut got) = (Vec::new(), Vec::new());
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (dir, hex) = l.split_once(' ').unwrap();
        let b = unhex(hex).unwrap();
        match dir {
            "sent" => sent.push(b),
            "received" => got.push(b),
            _ => panic!("{l}"),
        }
    }
    (sent, got)
}

/// The answers to request `seq`, as the socket gathers them.
fn answers(datagrams: &[Vec<u8>], seq: u32) -> Result<Vec<Msg>, NetlinkError> {
    let mut a = Answers::default();
    for d in datagrams {
        a.take(d, seq)?;
    }
    assert!(a.done, "the recorded answer ends");
    Ok(a.msgs)
}

fn seq_of(datagram: &[u8]) -> u32 {
    u32::from_ne_bytes(datagram[8..12].try_into().unwrap())
}

fn nsim1() -> Handle {
    Handle::parse("netdevsim/netdevsim1").unwrap()
}

/// `nlattr`: length, type, value, padded to 4 (what linux/netlink.h lays out).
fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(u16::try_from(4 + value.len()).unwrap()).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(value);
    v.resize(v.len().div_ceil(4) * 4, 0);
    v
}

#[test]
fn a_rate_set_is_laid_out_as_the_uapi_says() {
    // nlmsghdr (len, type = the family id, flags = REQUEST | ACK, seq, pid 0), genlmsghdr
    // (cmd 75 = DEVLINK_CMD_RATE_SET, version 1), then bus, device, port index and tx_max.
    let mut want = Vec::new();
    want.extend_from_slice(&[75, 1, 0, 0]);
    want.extend(nla(1, b"netdevsim\0"));
    want.extend(nla(2, b"netdevsim1\0"));
    want.extend(nla(3, &128u32.to_ne_bytes()));
    want.extend(nla(167, &250_000_000u64.to_ne_bytes()));
    let mut hdr = Vec::new();
    hdr.extend_from_slice(&(u32::try_from(16 + want.len()).unwrap()).to_ne_bytes());
    hdr.extend_from_slice(&21u16.to_ne_bytes());
    hdr.extend_from_slice(&5u16.to_ne_bytes());
    hdr.extend_from_slice(&6u32.to_ne_bytes());
    hdr.extend_from_slice(&0u32.to_ne_bytes());
    hdr.extend(want);
    let got = devlink::rate_set_request(21, &nsim1(), 128, Attr::TxMax(250_000_000), 6);
    assert_eq!(got, hdr);
}

#[test]
fn requests_are_the_bytes_the_kernel_accepted() {
    let (sent, _) = recorded("family");
    assert_eq!(devlink::family_request(1), sent[0]);
    let (sent, _) = recorded("port_dump");
    assert_eq!(devlink::port_dump_request(21, 2), sent[0]);
    let (sent, _) = recorded("rate_get");
    assert_eq!(devlink::rate_get_request(21, &nsim1(), 128, 3), sent[0]);
    let (sent, _) = recorded("rate_set");
    assert_eq!(
        devlink::rate_set_request(21, &nsim1(), 128, Attr::TxShare(62_500_000), 5),
        sent[0],
        "tx_share 500Mbit"
    );
    assert_eq!(
        devlink::rate_set_request(21, &nsim1(), 128, Attr::TxMax(250_000_000), 6),
        sent[1],
        "tx_max 2Gbit"
    );
    let (sent, _) = recorded("getlink");
    assert_eq!(legacy::get_request("eth1", 1), sent[0]);
    let (sent, _) = recorded("setlink");
    let r = VfRate {
        min: 500,
        max: 2000,
    };
    assert_eq!(legacy::set_request("eth1", 1, r, 1), sent[0]);
}

#[test]
fn the_devlink_family_id_is_read_from_nlctrl() {
    let (sent, got) = recorded("family");
    let msgs = answers(&got, seq_of(&sent[0])).unwrap();
    assert_eq!(devlink::parse_family(&msgs).unwrap(), 21);
    assert!(devlink::parse_family(&[]).is_err());
}

#[test]
fn the_vf_port_is_found_in_a_port_dump() {
    let (sent, got) = recorded("port_dump");
    let ports = devlink::parse_ports(&answers(&got, seq_of(&sent[0])).unwrap()).unwrap();
    let idx: Vec<(String, u32)> = ports.iter().map(|p| (p.dev.clone(), p.index)).collect();
    assert_eq!(
        idx,
        [
            ("netdevsim1".into(), 0),
            ("netdevsim1".into(), 128),
            ("netdevsim1".into(), 129),
            ("netdevsim2".into(), 0)
        ]
    );
    assert_eq!(
        ports[2],
        Port {
            bus: "netdevsim".into(),
            dev: "netdevsim1".into(),
            index: 129,
            flavour: Some(devlink::FLAVOUR_PCI_VF),
            pf: Some(0),
            vf: Some(1),
            external: false,
            netdev: Some("eth3".into()),
        }
    );
    let find = |h: &str, vf, pf| {
        devlink::find_vf_port(&ports, &Handle::parse(h).unwrap(), vf, pf).map(|p| p.index)
    };
    assert_eq!(find("netdevsim/netdevsim1", 0, None), Some(128));
    assert_eq!(find("netdevsim/netdevsim1", 1, Some(0)), Some(129));
    assert_eq!(find("netdevsim/netdevsim1", 2, None), None, "only 2 VFs");
    assert_eq!(
        find("netdevsim/netdevsim2", 0, None),
        None,
        "legacy mode: no VF ports"
    );
}

#[test]
fn of_several_vf_ports_the_local_one_of_the_pf_is_chosen() {
    let port = |index, pf, external| Port {
        bus: "pci".into(),
        dev: "0000:03:00.0".into(),
        index,
        flavour: Some(devlink::FLAVOUR_PCI_VF),
        pf: Some(pf),
        vf: Some(3),
        external,
        netdev: None,
    };
    let ports = [port(1, 0, true), port(2, 1, false), port(3, 0, false)];
    let h = Handle::parse("pci/0000:03:00.0").unwrap();
    let f = |pf| devlink::find_vf_port(&ports, &h, 3, pf).map(|p| p.index);
    assert_eq!(f(Some(0)), Some(3), "PF 0's, not the external host's");
    assert_eq!(f(Some(1)), Some(2));
    assert_eq!(f(None), Some(2), "the first local one");
}

#[test]
fn a_rate_leaf_is_read_in_bytes_per_second() {
    let (sent, got) = recorded("rate_get");
    let r = devlink::parse_rate(&answers(&got, seq_of(&sent[0])).unwrap()).unwrap();
    assert_eq!(
        r,
        Rate {
            tx_share: 12_500_000,
            tx_max: 0
        },
        "devlink's 100Mbit"
    );
    assert!(devlink::parse_rate(&[]).is_err());
}

#[test]
fn acks_end_an_exchange() {
    let (sent, got) = recorded("rate_set");
    assert!(answers(&got[..1], seq_of(&sent[0])).unwrap().is_empty());
    assert!(answers(&got[1..], seq_of(&sent[1])).unwrap().is_empty());
    let (sent, got) = recorded("setlink");
    assert!(answers(&got, seq_of(&sent[0])).unwrap().is_empty());
}

#[test]
fn a_refusal_carries_the_kernels_message() {
    let (sent, got) = recorded("rate_set_einval");
    let e = answers(&got, seq_of(&sent[0])).unwrap_err();
    match &e {
        NetlinkError::Refused { errno, msg } => {
            assert_eq!(*errno, libc::EINVAL);
            assert_eq!(
                msg.as_deref(),
                Some("netdevsim: TX rate value not in link speed units of 1Mbps.")
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "EINVAL (Invalid argument): netdevsim: TX rate value not in link speed units of 1Mbps."
    );
    let (sent, got) = recorded("setlink_eopnotsupp");
    let e = answers(&got, seq_of(&sent[0])).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    assert_eq!(e.to_string(), "EOPNOTSUPP (Operation not supported)");
}

#[test]
fn refusals_become_one_line_naming_the_vf_and_the_attribute() {
    let e = NetlinkError::Refused {
        errno: libc::EINVAL,
        msg: Some("netdevsim: TX rate value not in link speed units of 1Mbps.".into()),
    };
    let nsim = Handle::parse("netdevsim/netdevsim1").unwrap();
    let b = refused(
        "VF 0 of netdevsim/netdevsim1",
        NetlinkOp::RateSet {
            devlink: nsim.clone(),
            port: 128,
            attr: "tx_share",
            bytes_per_sec: 62_562_500,
        },
        e,
    );
    let BackendError::Vf(v) = &b else {
        panic!("{b:?}")
    };
    assert!(
        matches!(
            **v,
            VfError::Refused {
                op: NetlinkOp::RateSet {
                    port: 128,
                    attr: "tx_share",
                    ..
                },
                source: NetlinkError::Refused {
                    errno: libc::EINVAL,
                    ..
                },
                ..
            }
        ),
        "{v:?}"
    );
    let s = b.to_string();
    assert_eq!(
        s,
        "VF 0 of netdevsim/netdevsim1: devlink rate set netdevsim/netdevsim1/128 tx_share \
         62562500 B/s (500.5Mbit) refused: EINVAL (Invalid argument): netdevsim: TX rate value \
         not in link speed units of 1Mbps."
    );
    let n = NetlinkError::Refused {
        errno: libc::EOPNOTSUPP,
        msg: None,
    };
    let u = refused("VF", NetlinkOp::OpenRtnetlink, n);
    assert!(matches!(u, BackendError::Unavailable(_)));
    assert_eq!(
        u.to_string(),
        "VF: opening rtnetlink: EOPNOTSUPP (Operation not supported)"
    );
    // The other texts the lever's refusals put in that line.
    let ops = [
        (
            NetlinkOp::RateSet {
                devlink: nsim.clone(),
                port: 128,
                attr: "tx_max",
                bytes_per_sec: 0,
            },
            "devlink rate set netdevsim/netdevsim1/128 tx_max 0 (none) refused",
        ),
        (
            NetlinkOp::FindRateLeaf {
                devlink: nsim.clone(),
                port: 3,
            },
            "devlink port netdevsim/netdevsim1/3 has no rate leaf",
        ),
        (
            NetlinkOp::RateGet {
                devlink: nsim,
                port: 3,
            },
            "devlink rate get netdevsim/netdevsim1/3",
        ),
        (
            NetlinkOp::SetVfRate {
                pf: "eth1".into(),
                vf: 2,
                min_tx_rate: 1,
                max_tx_rate: 500,
            },
            "IFLA_VF_RATE on eth1 vf 2 min_tx_rate 1 max_tx_rate 500 (Mbit/s) refused",
        ),
        (NetlinkOp::GetLink { pf: "eth1".into() }, "RTM_GETLINK eth1"),
    ];
    for (op, text) in ops {
        assert_eq!(op.to_string(), text);
    }
}

#[test]
fn a_vf_rate_is_read_from_the_pfs_link() {
    let (sent, got) = recorded("getlink");
    let msgs = answers(&got, seq_of(&sent[0])).unwrap();
    assert_eq!(
        legacy::parse_rate(&msgs, 1).unwrap(),
        Ok(VfRate { min: 10, max: 100 })
    );
    assert_eq!(
        legacy::parse_rate(&msgs, 0).unwrap(),
        Ok(VfRate { min: 0, max: 0 })
    );
    assert_eq!(
        legacy::parse_rate(&msgs, 2).unwrap(),
        Err(2),
        "2 VFs listed"
    );
    // netlink-packet-route reads the same answer the same way.
    use netlink_packet_core::Parseable;
    use netlink_packet_route::link::{LinkAttribute, LinkMessage, VfInfo};
    let m = LinkMessage::parse(&msgs[0].payload[..]).unwrap();
    let rates: Vec<(u32, u32, u32)> = m
        .attributes
        .iter()
        .filter_map(|a| match a {
            LinkAttribute::VfInfoList(l) => Some(l),
            _ => None,
        })
        .flatten()
        .flat_map(|i| i.0.iter())
        .filter_map(|v| match v {
            VfInfo::Rate(r) => Some((r.vf_id, r.min_tx_rate, r.max_tx_rate)),
            _ => None,
        })
        .collect();
    assert_eq!(rates, [(0, 0, 0), (1, 10, 100)]);
}

#[test]
fn answers_to_another_request_are_not_ours() {
    let (sent, got) = recorded("rate_get");
    let mut a = Answers::default();
    for d in &got {
        a.take(d, seq_of(&sent[0]) + 1).unwrap();
    }
    assert!(a.msgs.is_empty() && !a.done);
}

/// Every recorded answer cut short at every length, and with each byte set to 0x00, 0xff and
/// 0x7f: parsing is an answer or an error, never a panic.
#[test]
fn hostile_answers_never_panic() {
    let all = [
        "family",
        "port_dump",
        "rate_get",
        "rate_set",
        "rate_set_einval",
        "getlink",
        "setlink",
        "setlink_eopnotsupp",
    ];
    let mut tried = 0;
    for name in all {
        let (sent, got) = recorded(name);
        let seq = seq_of(&sent[0]);
        for d in &got {
            let mut variants: Vec<Vec<u8>> = (0..d.len()).map(|n| d[..n].to_vec()).collect();
            for i in 0..d.len() {
                for v in [0x00, 0xff, 0x7f] {
                    let mut x = d.clone();
                    x[i] = v;
                    variants.push(x);
                }
            }
            for v in variants {
                let mut a = Answers::default();
                let _ = a.take(&v, seq);
                let _ = devlink::parse_family(&a.msgs);
                let _ = devlink::parse_ports(&a.msgs);
                let _ = devlink::parse_rate(&a.msgs);
                let _ = legacy::parse_rate(&a.msgs, 1);
                let _ = ack(v.get(16..).unwrap_or(&[]), 0x300);
                tried += 1;
            }
        }
    }
    assert!(tried > 10_000, "{tried}");
}

#[test]
fn units_convert_to_the_kernels() {
    assert_eq!(bytes_per_sec(None), 0);
    assert_eq!(bytes_per_sec(Some(500_000_000)), 62_500_000);
    assert_eq!(bytes_per_sec(Some(500_500_000)), 62_562_500);
    assert_eq!(bytes_per_sec(Some(12)), 2, "12 bit/s rounds to 2 B/s");
    assert_eq!(bytes_per_sec(Some(1)), 1, "a setting stays a setting");
    assert_eq!(mbit_per_sec(None), Ok(0));
    assert_eq!(mbit_per_sec(Some(2_000_000_000)), Ok(2000));
    assert_eq!(mbit_per_sec(Some(1_499_999)), Ok(1));
    assert_eq!(mbit_per_sec(Some(1_500_000)), Ok(2));
    let e = mbit_per_sec(Some(300_000)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "300kbit is below 1 Mbit/s, the legacy VF rate's unit"
    );
    assert_eq!(
        mbit_per_sec(Some(u64::MAX)),
        Err(LegacyRateError::BeyondRange(u64::MAX))
    );
    assert_eq!(fmt_bits(500_500_000), "500.5Mbit");
    assert_eq!(fmt_bits(2_000_000_000), "2Gbit");
    assert_eq!(fmt_bits(64_000), "64kbit");
    assert_eq!(fmt_bits(999), "999bit");
}

#[test]
fn vfs_resolve_to_a_devlink_instance_and_an_index() {
    let t = sysfs::tests::tree();
    let pci = target(
        &Vf::Pci {
            addr: "0000:03:00.3".into(),
        },
        t.path(),
    )
    .unwrap();
    assert_eq!(
        pci,
        Target {
            label: "VF 0000:03:00.3 (VF 1 of PF 0000:03:00.0)".into(),
            devlink: Handle::parse("pci/0000:03:00.0").unwrap(),
            pf_netdev: Some("ens1f0".into()),
            vf: 1,
            pf_number: Some(0),
        }
    );
    // A named function: its netdev as given, else its instance's first under sysfs.
    let nsim = t.path().join("bus/netdevsim/devices/netdevsim2/net");
    std::fs::create_dir_all(nsim.join("eth1")).unwrap();
    std::fs::create_dir_all(nsim.join("eth7")).unwrap();
    let f = |netdev: Option<&str>| {
        target(
            &Vf::Function {
                devlink: "netdevsim/netdevsim2".into(),
                netdev: netdev.map(str::to_owned),
                vf: 1,
            },
            t.path(),
        )
        .unwrap()
    };
    assert_eq!(f(None).pf_netdev.as_deref(), Some("eth1"));
    assert_eq!(f(Some("eth9")).pf_netdev.as_deref(), Some("eth9"));
    assert_eq!(f(None).label, "VF 1 of netdevsim/netdevsim2");
    for bad in ["netdevsim2", "a/b/c", "../x", "pci/..", "/x"] {
        let v = Vf::Function {
            devlink: bad.into(),
            netdev: None,
            vf: 0,
        };
        let e = target(&v, t.path()).unwrap_err().to_string();
        assert!(e.contains("not a devlink instance"), "{bad}: {e}");
    }
    let soft = Vf::Soft {
        socket: "/x".into(),
        vport: 2,
    };
    match target(&soft, t.path()) {
        Err(BackendError::Vf(v)) => assert!(matches!(*v, VfError::Soft { vport: 2 }), "{v:?}"),
        r => panic!("{r:?}"),
    }
}

#[test]
fn the_lever_names_the_vf_it_cannot_find() {
    let t = sysfs::tests::tree();
    let l = NetlinkLever::with_sysfs(Mechanism::Auto, t.path());
    let gone = Vf::Pci {
        addr: "0000:44:00.1".into(),
    };
    let e = l.describe(&gone).unwrap_err().to_string();
    assert!(
        e.contains("VF 0000:44:00.1") && e.contains("no such PCI device"),
        "{e}"
    );
    let e = l.set(&gone, TxLimit::NONE).unwrap_err().to_string();
    assert!(e.contains("0000:44:00.1"), "{e}");
    let e = l
        .restore(&gone, &serde_json::json!({"lever": "tc", "rate": 1}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not ours"), "{e}");
    assert_eq!(
        (
            NetlinkLever::new(Mechanism::Devlink).kind(),
            NetlinkLever::new(Mechanism::Legacy).kind()
        ),
        ("devlink", "vf-rate")
    );
}

#[test]
fn saved_settings_say_their_mechanism() {
    let d = Saved::Devlink {
        tx_share: 12_500_000,
        tx_max: 0,
    };
    let j = serde_json::to_value(d).unwrap();
    assert_eq!(
        j,
        serde_json::json!({"lever": "devlink", "tx_share": 12_500_000, "tx_max": 0})
    );
    assert_eq!(serde_json::from_value::<Saved>(j).unwrap(), d);
    let l: Saved = serde_json::from_value(
        serde_json::json!({"lever": "vf-rate", "min_tx_rate": 10, "max_tx_rate": 100}),
    )
    .unwrap();
    assert_eq!(
        l,
        Saved::VfRate {
            min_tx_rate: 10,
            max_tx_rate: 100
        }
    );
    assert!(serde_json::from_value::<Saved>(serde_json::json!({"lever": "devlink"})).is_err());
}

#[test]
fn a_dump_that_fails_part_way_is_a_refusal() {
    // NLMSG_DONE carrying -ENOBUFS, after one port.
    let (sent, got) = recorded("port_dump");
    let seq = seq_of(&sent[0]);
    let mut done = got[1].clone();
    done.resize(20, 0);
    done[0] = 20;
    done[16..20].copy_from_slice(&(-libc::ENOBUFS).to_ne_bytes());
    let mut a = Answers::default();
    a.take(&got[0], seq).unwrap();
    let e = a.take(&done, seq).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOBUFS));
}
