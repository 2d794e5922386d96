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
    /// The software HCA for a running domain (no RDMA device here): serves the guest's shim
    /// over its virtio-serial channel org.resex.hca.0, executing its rings in the domain's RAM
    /// file, and a second port for host-side peers (benchex clients) on a Unix socket.
    Hca(HcaArgs),
}

/// Options of `resex kvm hca`.
#[derive(Debug, Args)]
pub struct HcaArgs {
    /// The domain's name.
    pub domain: String,
    /// libvirt URI.
    #[arg(long, default_value = "qemu:///system")]
    pub connect: String,
    /// RAM file of the host-side peer (created).
    #[arg(long, default_value = "/dev/shm/resex-kvm-peer.ram")]
    pub peer_ram: std::path::PathBuf,
    /// Its size, MiB.
    #[arg(long, default_value_t = 64)]
    pub peer_ram_mib: u64,
    /// The control socket the host-side peer's shim connects to (benchex client --hca).
    #[arg(long, default_value = "/run/resex-kvm-peer.sock")]
    pub peer_hca: std::path::PathBuf,
    /// At exit, write what the HCA executed for the domain (per-QP and totals) as JSON here.
    #[arg(long)]
    pub stats: Option<std::path::PathBuf>,
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
        KvmCommand::Hca(a) => hca(&a),
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

#[cfg(feature = "libvirt")]
fn hca(a: &HcaArgs) -> Result<()> {
    use anyhow::Context;
    use resex_backend::kvm::{ramfile, xml::DomainXml};
    use resex_guestmem::{FileMemory, GuestMemory};
    use std::io::BufReader;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    const HCA_CHANNEL: &str = "org.resex.hca.0";
    let conn = virt::connect::Connect::open(Some(&a.connect))
        .map_err(|e| anyhow::anyhow!("cannot connect to libvirt at {}: {}", a.connect, e))?;
    let d = conn
        .lookup_domain_by_name(&a.domain)
        .map_err(|e| anyhow::anyhow!("domain {}: {e}", a.domain))?;
    let x = DomainXml::parse(&d.xml_desc(0).context("reading the domain XML")?)?;
    let sock = x.channel(HCA_CHANNEL).map(str::to_owned).with_context(|| {
        format!(
            "domain {} has no running virtio-serial channel {HCA_CHANNEL}: add \
             <channel type='unix'><source mode='bind'/><target type='virtio' \
             name='{HCA_CHANNEL}'/></channel> and start it",
            a.domain
        )
    })?;
    let pid: u32 = std::fs::read_to_string(format!("/run/libvirt/qemu/{}.pid", a.domain))
        .context("reading QEMU's pid file")?
        .trim()
        .parse()
        .context("QEMU's pid file")?;
    let ram_path = ramfile::find(pid, x.memory)?;
    let ram: Arc<dyn GuestMemory> = Arc::new(FileMemory::open(&ram_path)?);
    let vm = crate::vm_hca::VmHca::start(ram, &a.peer_ram, a.peer_ram_mib)?;
    let (guest, peer) = (vm.guest.clone(), vm.peer.clone());
    let stop = benchex::opts::stop_on_signals()?;
    // The guest's shim, over QEMU's end of its port (reconnecting if the session ends).
    let g = guest.clone();
    let (stop_g, name) = (stop.clone(), a.domain.clone());
    let guest_thread = std::thread::spawn(move || {
        while !stop_g.load(Ordering::Acquire) {
            match UnixStream::connect(&sock) {
                Ok(s) => {
                    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                    let Ok(r) = s.try_clone() else { continue };
                    let mut r = BufReader::new(r);
                    let mut w = s;
                    // A VM cannot ring the host's socket: the thread polls its doorbell records.
                    match resex_proto::hca_wire::serve(&g, &mut r, &mut w, false) {
                        Ok(s) => tracing::info!("{name}: HCA session ended: {s:?}"),
                        Err(e) if stop_g.load(Ordering::Acquire) => {
                            tracing::debug!("{name}: {e}")
                        }
                        Err(e) => tracing::debug!("{name}: HCA session: {e}"),
                    }
                }
                Err(e) => tracing::warn!("{name}: connecting to {sock}: {e}"),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    // The host-side peer's shim on a Unix socket.
    let peer_thread =
        resex_embedded::sockets::serve_control("peer", &a.peer_hca, peer.clone(), stop.clone())?;
    println!(
        "resex kvm hca: {} (RAM {}) on port 0 via {HCA_CHANNEL}; peer on port 1 at {}",
        a.domain,
        ram_path.display(),
        a.peer_hca.display()
    );
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = peer_thread.join();
    let _ = guest_thread.join();
    let _ = std::fs::remove_file(&a.peer_hca);
    let _ = std::fs::remove_file(&a.peer_ram);
    crate::vm_hca::report(&a.domain, &guest, a.stats.as_deref())?;
    Ok(())
}

#[cfg(not(feature = "libvirt"))]
fn hca(a: &HcaArgs) -> Result<()> {
    anyhow::bail!(
        "{}: this resex was built without libvirt: rebuild with `--features libvirt` (Debian: \
         libvirt-dev)",
        a.domain
    )
}
