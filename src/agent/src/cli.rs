//! `resex-agent`: the guest agent running its guest's workload (BenchEx's server) in-process, as
//! each guest of the embedded host does. Also reachable as `resex agent`.

use crate::session::{DocFn, UnixChannel};
use crate::Agent;
use anyhow::{Context, Result};
use benchex::opts::{serve, stop_on_signals, ServerOpts};
use clap::Parser;
use resex_common::LatencyRecorder;
use resex_proto::{Registration, REGISTRATION_VERSION};
use resex_shim::guest::GuestMachine;
use resex_shim::mailbox::{Mailbox, DEFAULT_BLOCKS, DEFAULT_BLOCK_SIZE};
use resex_shim::Provider;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Guest-physical address of the mailbox (below the shim's heap at 1 MiB).
pub const MAILBOX_GPA: u64 = 0x10000;

/// The resex guest agent, serving BenchEx orders and reporting their latency to the host.
#[derive(Debug, Parser)]
#[command(name = "resex-agent", version, about)]
pub struct Cli {
    /// Guest RAM file (file offset = guest-physical address; the embedded host's guests).
    #[arg(long, required_unless_present = "vm")]
    ram: Option<PathBuf>,
    /// Inside a real VM: no RAM file; the shim works in locked memory whose guest-physical pages
    /// come from /proc/self/pagemap (needs root), and --hca / --channel are virtio-serial ports.
    #[arg(long)]
    vm: bool,
    /// With --vm, in a Xen domU: the HCA, the channel and `--listen xs:NAME` are xenstore links
    /// (through /dev/xen/xenbus) instead of virtio-serial ports. Chosen by itself in a domU
    /// with no virtio-serial ports.
    #[arg(long, requires = "vm")]
    xen: bool,
    /// With --vm: MiB of locked memory for the mailbox, rings and buffers.
    #[arg(long, default_value_t = 32)]
    arena_mib: u64,
    /// The software HCA's control socket (with --vm: a virtio-serial port name or path).
    #[arg(long, default_value = "org.resex.hca.0")]
    hca: String,
    /// The agent's control channel: a Unix socket the agent listens on, the host connects (with
    /// --vm: a virtio-serial port name or path).
    #[arg(long, default_value = "org.resex.agent.0")]
    channel: String,
    /// The VM name put in the registration (informational).
    #[arg(long)]
    name: Option<String>,
    /// Milliseconds covered by each latency report.
    #[arg(long, default_value_t = 10)]
    report_ms: u64,
    /// Mailbox blocks.
    #[arg(long, default_value_t = DEFAULT_BLOCKS)]
    mailbox_blocks: u32,
    /// Register the rings but write no latency reports (a guest with no SLA).
    #[arg(long)]
    no_reports: bool,
    /// Meter unmodified applications instead of running a workload: find every soft-RoCE queue
    /// of every process in this VM (`/proc/PID/maps`, `pagemap`, the kernel's RDMA netlink) and
    /// keep the host's registration equal to them. Needs --vm and root; --mtu is the path MTU.
    #[arg(long, requires = "vm", conflicts_with_all = ["listen", "no_reports"])]
    discover: bool,
    /// With --discover: milliseconds between two scans of the processes (a new queue is
    /// registered within about one scan).
    #[arg(long, default_value_t = 50, requires = "discover")]
    scan_ms: u64,
    /// With --discover: where mlx5 applications run with `LD_PRELOAD=libresex_preload.so`
    /// report their QPs.
    #[arg(long, default_value = resex_proto::preload::DEFAULT_SOCKET, requires = "discover")]
    preload_socket: PathBuf,
    /// With --discover: do not listen for the interposer (soft-RoCE discovery only).
    #[arg(long, requires = "discover")]
    no_preload: bool,
    /// BenchEx bootstrap address clients connect to.
    #[arg(long, required_unless_present = "discover")]
    listen: Option<String>,
    #[command(flatten)]
    server: ServerOpts,
    /// Stop after this many seconds (default: until SIGTERM or SIGINT).
    #[arg(long)]
    duration: Option<f64>,
}

/// Runs the agent command line from `args` (the first is the program name).
pub fn main_with<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> Result<()> {
    let cli = Cli::parse_from(args);
    let xen = xen_store(&cli)?;
    let stop = stop_on_signals()?;
    if cli.discover {
        return discover(&cli, xen, &stop);
    }
    let (mem, provider, phys): (_, _, Option<resex_shim::soft::PhysFn>) = if cli.vm {
        let pinned = Arc::new(
            resex_guestmem::PinnedMemory::new(cli.arena_mib.max(4) << 20)
                .context("locking the agent's memory")?,
        );
        let ctl: Arc<dyn resex_proto::hca::HcaControl> = match &xen {
            Some(store) => {
                tracing::info!("waiting for the host's software HCA (resex xen hca) on xenstore");
                let stopped = || stop.load(std::sync::atomic::Ordering::Acquire);
                if !crate::xen::wait_for_hca(&**store, &stopped).context("reading xenstore")? {
                    return Ok(());
                }
                Arc::new(crate::xen::remote_hca(store.clone()))
            }
            None => Arc::new(open_hca_port(&cli.hca)?),
        };
        let mem: Arc<dyn resex_guestmem::GuestMemory> = pinned.clone();
        let phys: resex_shim::soft::PhysFn = {
            let p = pinned.clone();
            Arc::new(move |a| p.gpa(a))
        };
        let size = mem.size();
        let p = resex_shim::SoftProvider::with_phys(mem.clone(), 1 << 20, size, ctl, phys.clone())
            .context("the shim over locked memory")?;
        tracing::info!(
            "vm mode: {}{} MiB locked, guest-physical pages {:#x}..",
            if xen.is_some() { "xen, " } else { "" },
            size >> 20,
            pinned.pages().first().copied().unwrap_or(0)
        );
        (mem, p, Some(phys))
    } else {
        let ram = cli.ram.clone().context("--ram is required without --vm")?;
        let machine = GuestMachine::new(&ram, &cli.hca);
        let (mem, provider) = machine.open().context("opening the guest machine")?;
        (mem, provider, None)
    };
    let provider = Arc::new(provider);
    let mailbox = Mailbox::new(mem, MAILBOX_GPA, cli.mailbox_blocks, DEFAULT_BLOCK_SIZE)
        .context("placing the mailbox")?;
    let mut mbreg = mailbox.registration();
    if let Some(f) = &phys {
        // The mailbox's pages as the host sees them.
        mbreg.pages = mbreg
            .pages
            .iter()
            .map(|&a| f(a).context("the mailbox has no guest-physical page"))
            .collect::<Result<_>>()?;
    }
    let doc: DocFn = {
        let (p, name, mtu) = (provider.clone(), cli.name.clone(), cli.server.mtu);
        Arc::new(move || Registration {
            rings: Vec::new(),
            version: REGISTRATION_VERSION,
            vm: name.clone(),
            path_mtu: mtu,
            qps: p.registrations(),
            mailbox: Some(mbreg.clone()),
        })
    };
    let chan: Box<dyn crate::session::ChannelEnd> = if let Some(store) = &xen {
        Box::new(crate::xen::XenChannel::new(store.clone(), "agent"))
    } else if cli.vm {
        Box::new(crate::vm::PortChannel::new(crate::vm::port(&cli.channel)?))
    } else {
        let path = PathBuf::from(&cli.channel);
        Box::new(
            UnixChannel::bind(&path)
                .with_context(|| format!("binding the channel {}", path.display()))?,
        )
    };
    let recorder = Arc::new(Mutex::new(LatencyRecorder::new()));
    let interval = (!cli.no_reports).then(|| Duration::from_millis(cli.report_ms.max(1)));
    let gate = Arc::new(crate::gate::Gate::default());
    let agent = Agent::start(chan, doc, mailbox, recorder.clone(), interval, gate.clone())?;
    // The workload's QPs are registered with the host before it posts on them.
    let p: Arc<dyn Provider> = Arc::new(crate::gate::RegisterFirst::new(provider, gate));
    let listen = cli.listen.as_deref().context("--listen is required")?;
    let st = serve(p, &cli.server, listen, recorder, stop, cli.duration)?;
    tracing::info!(
        "served {} orders from {} clients; {} reports written, {} dropped",
        st.requests,
        st.clients,
        agent.reports.load(std::sync::atomic::Ordering::Acquire),
        agent.dropped.load(std::sync::atomic::Ordering::Acquire)
    );
    if !cli.vm {
        let _ = std::fs::remove_file(&cli.channel);
    }
    Ok(())
}

/// `--discover`: the soft-RoCE queues of every process, registered, until stopped.
fn discover(
    cli: &Cli,
    xen: Option<Arc<dyn resex_proto::xsline::Store>>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<()> {
    use crate::discover::{rdma_nl, serve};
    let chan: Box<dyn crate::session::ChannelEnd> = match xen {
        Some(store) => Box::new(crate::xen::XenChannel::new(store, "agent")),
        None => Box::new(crate::vm::PortChannel::new(crate::vm::port(&cli.channel)?)),
    };
    if let Err(e) = rdma_nl::resources() {
        tracing::warn!("{e}; queues are still looked for, and registered without QPNs");
    }
    let opts = serve::Options {
        preload: (!cli.no_preload).then(|| cli.preload_socket.clone()),
        ..serve::Options::new(
            Duration::from_millis(cli.scan_ms.max(1)),
            cli.server.mtu,
            cli.name.clone(),
        )
    };
    tracing::info!(
        "discovering soft-RoCE queues every {} ms",
        opts.every.as_millis()
    );
    if let Some(d) = cli.duration {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(d.max(0.0)));
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
    }
    let status = Arc::new(crate::session::ChannelStatus::default());
    let t = serve::run(
        chan,
        &opts,
        Box::new(rdma_nl::resources),
        stop,
        status.clone(),
    )?;
    tracing::info!(
        "discovery stopped: {} scans, {} processes found, {} gone, {} registrations accepted, {:.2} s of CPU",
        t.scans,
        t.found,
        t.gone,
        status.accepted.load(std::sync::atomic::Ordering::Acquire),
        cpu_seconds()
    );
    Ok(())
}

/// This process's CPU time so far, seconds (user and system).
fn cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is a valid value; getrusage fills it for RUSAGE_SELF.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid rusage to write.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut u) } != 0 {
        return 0.0;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// xenstore, when the agent's links are over it (`--xen`, or a Xen domU without virtio-serial
/// ports).
fn xen_store(cli: &Cli) -> Result<Option<Arc<dyn resex_proto::xsline::Store>>> {
    let auto = cli.vm
        && resex_shim::xenbus::available()
        && !std::path::Path::new("/sys/class/virtio-ports").exists();
    if !(cli.xen || auto) {
        return Ok(None);
    }
    let bus = resex_shim::xenbus::XenBus::open().context("opening xenstore")?;
    Ok(Some(Arc::new(bus)))
}

/// The software HCA's control path over the virtio-serial port `name`.
fn open_hca_port(name: &str) -> Result<resex_proto::hca_wire::RemoteHca> {
    let hca = crate::vm::port(name)?;
    tracing::info!("waiting for the host's software HCA on {}", hca.display());
    let f = resex_shim::guest::open_port(&hca, &|| false)
        .with_context(|| format!("opening {}", hca.display()))?
        .context("stopped")?;
    let r = std::io::BufReader::new(f.try_clone()?);
    Ok(resex_proto::hca_wire::RemoteHca::new(
        Box::new(r),
        Box::new(f),
    ))
}
