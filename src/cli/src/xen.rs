//! `resex xen peek DOMAIN ADDR`: reads a Xen domain's memory the way resexd's xen backend does
//! (foreign mappings; a PV domain's pseudo-physical addresses through its p2m), to check that an
//! address a guest registered is the page the host reads.
//!
//! `resex xen hca DOMAIN`: the software HCA for a domU (the twin of `resex kvm hca`): executes
//! the rings of the agent's shim in the domain's memory (foreign mappings), serves its control
//! path over the xenstore link `data/resex/hca`, and relays BenchEx's bootstrap.
//!
//! Both need a build with `--features xen` and a Xen dom0.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

/// `resex xen ...`
#[derive(Debug, Subcommand)]
pub enum XenCommand {
    /// Print LEN bytes of a domain's memory at guest address ADDR (hex dump), read as resexd's
    /// xen backend reads guest rings.
    Peek(PeekArgs),
    /// The software HCA for a running domU (no RDMA device here): serves the shim of the
    /// domain's agent (`resex-agent --vm --xen`) over the xenstore link data/resex/hca,
    /// executing its rings in the domain's memory, and a second port for host-side peers
    /// (benchex clients) on a Unix socket.
    Hca(crate::xen_hca::HcaArgs),
}

/// Options of `resex xen peek`.
#[derive(Debug, Args)]
pub struct PeekArgs {
    /// The domain's name (as `xl list` shows it).
    pub domain: String,
    /// Guest address (pseudo-physical for a PV guest, as its /proc/self/pagemap gives), e.g.
    /// 0x1234000.
    #[arg(value_parser = parse_addr)]
    pub addr: u64,
    /// Bytes to read (at most 4096).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub len: u64,
    /// Print the bytes as text (up to the first NUL) instead of a hex dump.
    #[arg(long)]
    pub text: bool,
}

/// Why `--addr` was refused.
#[derive(Debug, thiserror::Error)]
#[error("`{text}` is not an address (decimal or 0x hex): {source}")]
pub struct AddrError {
    text: String,
    source: std::num::ParseIntError,
}

fn parse_addr(s: &str) -> Result<u64, AddrError> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|source| AddrError {
        text: s.to_owned(),
        source,
    })
}

pub fn run(c: XenCommand) -> Result<()> {
    match c {
        XenCommand::Peek(a) => peek(&a),
        XenCommand::Hca(a) => crate::xen_hca::run(&a),
    }
}

#[cfg(not(feature = "xen"))]
fn peek(_: &PeekArgs) -> Result<()> {
    bail!("`resex xen` is not in this build: rebuild with `--features xen` (Debian: libxen-dev, libclang-dev)")
}

#[cfg(feature = "xen")]
fn peek(a: &PeekArgs) -> Result<()> {
    use resex_backend::Hypervisor;
    use resex_guestmem::GuestAddress;
    let xen = resex_backend::xen::XenBackend::new(resex_backend::xen::RealXen::open()?);
    let Some(d) = xen.domains()?.into_iter().find(|d| d.name == a.domain) else {
        bail!("no running domain named `{}` (xl list)", a.domain);
    };
    let mem = xen.memory(&d.key)?;
    let len = usize::try_from(a.len)?;
    let mut buf = vec![0u8; len];
    mem.read(GuestAddress(a.addr), &mut buf)?;
    if a.text {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(len);
        println!("{}", String::from_utf8_lossy(&buf[..end]));
    } else {
        print!("{}", hexdump(a.addr, &buf));
    }
    Ok(())
}

/// `xxd`-like lines: address, 16 bytes in hex, the printable ones.
#[cfg_attr(not(feature = "xen"), allow(dead_code))]
fn hexdump(addr: u64, buf: &[u8]) -> String {
    let mut out = String::new();
    for (i, row) in buf.chunks(16).enumerate() {
        let hex: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
        let text: String = row
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        out += &format!(
            "{:#012x}: {:<47}  {text}\n",
            addr + 16 * i as u64,
            hex.join(" ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_in_hex_or_decimal_and_a_dump() {
        assert_eq!(parse_addr("0x1000").unwrap(), 4096);
        assert_eq!(parse_addr("4096").unwrap(), 4096);
        let e = parse_addr("0xzz").unwrap_err().to_string();
        assert!(e.contains("`0xzz` is not an address"), "{e}");
        let d = hexdump(0x1000, b"resex page\x00\x01");
        assert_eq!(
            d,
            "0x0000001000: 72 65 73 65 78 20 70 61 67 65 00 01              resex page..\n"
        );
    }
}
