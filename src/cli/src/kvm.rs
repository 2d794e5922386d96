//! `resex kvm prepare DOMAIN`: adds what resex needs to a libvirt domain's definition (shared
//! file-backed RAM the host can read, and the agent's virtio-serial channel).

use anyhow::Result;
use clap::{Args, Subcommand};

/// `resex kvm ...`
#[derive(Debug, Subcommand)]
pub enum KvmCommand {
    /// Add shared file-backed memory and the org.resex.agent.0 channel to a domain's
    /// definition (takes effect at its next start). Without --define, print the new XML.
    Prepare(PrepareArgs),
}

/// Options of `resex kvm prepare`.
#[derive(Debug, Args)]
pub struct PrepareArgs {
    /// The domain's name.
    pub domain: String,
    /// libvirt URI.
    #[arg(long, default_value = "qemu:///system")]
    pub connect: String,
    /// Define the new XML with libvirt (otherwise it is printed).
    #[arg(long)]
    pub define: bool,
    /// Read the definition from this file instead of libvirt (print the result).
    #[arg(long, value_name = "XML", conflicts_with = "define")]
    pub file: Option<std::path::PathBuf>,
}

pub fn run(c: KvmCommand) -> Result<()> {
    match c {
        KvmCommand::Prepare(a) => prepare(&a),
    }
}

fn print_or_note(domain: &str, out: Option<String>) {
    match out {
        Some(x) => print!("{x}"),
        None => eprintln!("{domain}: already has shared file memory and the agent channel"),
    }
}

fn prepare(a: &PrepareArgs) -> Result<()> {
    if let Some(f) = &a.file {
        let xml = std::fs::read_to_string(f)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", f.display()))?;
        print_or_note(&a.domain, resex_backend::kvm::xml::prepare(&xml)?);
        return Ok(());
    }
    libvirt_prepare(a)
}

#[cfg(feature = "libvirt")]
fn libvirt_prepare(a: &PrepareArgs) -> Result<()> {
    use anyhow::Context;
    let conn = virt::connect::Connect::open(Some(&a.connect))
        .map_err(|e| anyhow::anyhow!("cannot connect to libvirt at {}: {}", a.connect, e))?;
    let d = conn
        .lookup_domain_by_name(&a.domain)
        .map_err(|e| anyhow::anyhow!("domain {}: {e}", a.domain))?;
    // The persistent definition (what the next start uses), not the live one.
    let xml = d
        .xml_desc(virt::sys::VIR_DOMAIN_XML_INACTIVE)
        .context("reading the domain's definition")?;
    let out = resex_backend::kvm::xml::prepare(&xml)?;
    if !a.define {
        print_or_note(&a.domain, out);
        return Ok(());
    }
    match out {
        None => print_or_note(&a.domain, None),
        Some(x) => {
            conn.define_domain_xml(&x).context("defining the new XML")?;
            println!(
                "{}: defined with shared file memory and the org.resex.agent.0 channel; \
                 restart it for them to take effect",
                a.domain
            );
        }
    }
    Ok(())
}

#[cfg(not(feature = "libvirt"))]
fn libvirt_prepare(a: &PrepareArgs) -> Result<()> {
    anyhow::bail!(
        "{}: this resex was built without libvirt: use --file XML (then `virsh define`), or \
         rebuild with `--features libvirt` (Debian: libvirt-dev)",
        a.domain
    )
}
