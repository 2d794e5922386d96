//! One host core, two drivers: a recorded trace (what three guests wrote into their rings and
//! mailboxes, and their CPU time, over 2.5 s) fed through resexd's driver (the real-time loop's
//! tick, its sampler and registrar messages) and through the lab's driver (the virtual-time
//! interval end) gives the same decisions, interval by interval, under every shipped policy.
#![allow(missing_docs, clippy::cast_possible_truncation)]

use resex_common::{LatencySummary, VmId};
use resex_core::{CoreConfig, CpuSample, HostCore, NamedPolicy, StepOutput, VmInfo};
use resex_daemon::actuator::{Act, Sink};
use resex_daemon::driver::{Driver, Inputs, Sinks};
use resex_daemon::inbox::inbox;
use resex_daemon::registrar::RegEvent;
use resex_daemon::sampler::Sample;
use resex_guestmem::{GuestAddress, GuestMemory, MemError, VecMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::synth::{SynthConfig, SynthGuest, Wr};
use resex_lab::driver::LabDriver;
use resex_mlx5::consts::send_op;
use resex_proto::Registration;
use resex_shim::mailbox::Mailbox;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const MS: u64 = 1_000_000;
const RAM: u64 = 4 << 20;
const SYNTH: u64 = 2 << 20;

/// Guest memory that records every write (the trace's ring contents).
struct Recording {
    mem: VecMemory,
    /// The synthetic guest scatters its rings over all of RAM: it sees the first part only.
    size: AtomicU64,
    log: Mutex<Vec<(u64, Vec<u8>)>>,
}

impl GuestMemory for Recording {
    fn size(&self) -> u64 {
        self.size.load(Ordering::Relaxed)
    }
    fn read(&self, addr: GuestAddress, buf: &mut [u8]) -> Result<(), MemError> {
        self.mem.read(addr, buf)
    }
    fn write(&self, addr: GuestAddress, data: &[u8]) -> Result<(), MemError> {
        self.mem.write(addr, data)?;
        self.log.lock().unwrap().push((addr.0, data.to_vec()));
        Ok(())
    }
}

/// One interval of the trace.
#[derive(Default)]
struct Tick {
    /// Per VM: the writes of the interval, in order.
    writes: Vec<Vec<(u64, Vec<u8>)>>,
    /// Per VM: total CPU time at the interval's end, ns.
    cpu: Vec<u64>,
}

struct Trace {
    /// Before the first interval: the rings' initial contents.
    setup: Vec<Vec<(u64, Vec<u8>)>>,
    docs: Vec<Registration>,
    ticks: Vec<Tick>,
}

fn write(len: u32, signaled: bool) -> Wr {
    Wr {
        opcode: send_op::RDMA_WRITE,
        sges: vec![len],
        inline: false,
        signaled,
    }
}

/// Three guests: a victim that reports its latency every 10 ms (it doubles while the
/// aggressor runs), an aggressor sending 256 KiB writes from 0.5 s on with all its CPU, and a
/// quiet neighbour.
fn record(intervals: u64) -> Trace {
    let mut mems = Vec::new();
    let mut synths = Vec::new();
    let mut mailboxes = Vec::new();
    let mut docs = Vec::new();
    for i in 0..3u64 {
        let rec = Arc::new(Recording {
            mem: VecMemory::new(RAM as usize),
            size: AtomicU64::new(SYNTH),
            log: Mutex::new(Vec::new()),
        });
        let cfg = SynthConfig {
            qps: 1,
            shared_cq: true,
            wqe_cnt: 256,
            cqe_cnt: 256,
            seed: i + 1,
            ..SynthConfig::default()
        };
        let synth = SynthGuest::new(&*rec, &cfg).unwrap();
        rec.size.store(RAM, Ordering::Relaxed);
        let mb = Mailbox::new(rec.clone(), SYNTH + 0x1000, 16, 128).unwrap();
        let mut doc = synth.registration().clone();
        doc.vm = Some(format!("vm{}", i + 1));
        if i == 0 {
            doc.mailbox = Some(mb.registration());
        }
        mems.push(rec);
        synths.push(synth);
        mailboxes.push(mb);
        docs.push(doc);
    }
    let take = |m: &Recording| std::mem::take(&mut *m.log.lock().unwrap());
    let setup = mems.iter().map(|m| take(m)).collect();
    let mut cpu = [0u64; 3];
    let mut ticks = Vec::new();
    for k in 1..=intervals {
        let aggressor = k > 500;
        // Victim: one 64 KiB reply per ms.
        synths[0].post(&*mems[0], 0, &write(65_536, true));
        // Aggressor: four 256 KiB writes per ms, one signalled.
        if aggressor {
            for j in 0..4 {
                synths[1].post(&*mems[1], 0, &write(262_144, j == 3));
            }
        }
        // Quiet: a small write every 10 ms.
        if k % 10 == 0 {
            synths[2].post(&*mems[2], 0, &write(512, true));
        }
        for (s, m) in synths.iter_mut().zip(&mems) {
            s.ring_doorbells(&**m);
            s.complete(&**m, 0, usize::MAX, false);
            s.poll(&**m, 0, usize::MAX, None);
        }
        if k % 10 == 0 {
            let mean = if aggressor { 400_000 } else { 200_000 };
            let s = LatencySummary {
                count: 10,
                mean_ns: mean as f64,
                stddev_ns: 10_000.0,
                min_ns: mean,
                max_ns: mean,
                p50_ns: mean,
                p99_ns: mean,
                p999_ns: mean,
            };
            assert!(mailboxes[0].report(&s, 10 * MS).unwrap());
            // The host drains the mailbox when the trace is replayed; here nobody does, so
            // free the blocks (not recorded: these are the host's writes, not the guest's).
            for b in 0..16 {
                mems[0]
                    .mem
                    .write(GuestAddress(SYNTH + 0x1000 + b * 128), &[0])
                    .unwrap();
            }
        }
        cpu[0] += MS / 5;
        cpu[1] += if aggressor { MS } else { MS / 100 };
        cpu[2] += MS / 50;
        ticks.push(Tick {
            writes: mems.iter().map(|m| take(m)).collect(),
            cpu: cpu.to_vec(),
        });
    }
    Trace { setup, docs, ticks }
}

fn info(i: usize) -> VmInfo {
    VmInfo::new(format!("vm{}", i + 1), 1, RAM)
}

fn replay_memories(t: &Trace) -> Vec<Arc<VecMemory>> {
    t.setup
        .iter()
        .map(|w| {
            let m = Arc::new(VecMemory::new(RAM as usize));
            for (a, b) in w {
                m.write(GuestAddress(*a), b).unwrap();
            }
            m
        })
        .collect()
}

fn apply(mems: &[Arc<VecMemory>], tick: &Tick) {
    for (m, w) in mems.iter().zip(&tick.writes) {
        for (a, b) in w {
            m.write(GuestAddress(*a), b).unwrap();
        }
    }
}

/// What must be equal: per interval, the rows (usage, reports, pricing, caps) and intents.
fn decisions(out: &StepOutput) -> String {
    format!(
        "{} {:?} {:?} {:?}",
        out.interval, out.link_util, out.rows, out.intents
    )
}

struct Recorder(Arc<Mutex<Vec<String>>>);
impl<V: std::fmt::Debug> Sink<V> for Recorder {
    fn act(&self, a: Act<V>) {
        self.0.lock().unwrap().push(format!("{a:?}"));
    }
}

fn through_resexd(t: &Trace, policy: Option<NamedPolicy>) -> (Vec<String>, Vec<String>) {
    let mems = replay_memories(t);
    let (stx, srx) = inbox();
    let (rtx, rrx) = inbox();
    let (_ctx, crx) = inbox();
    let acts = Arc::new(Mutex::new(Vec::new()));
    let mut d = Driver::new(
        HostCore::new(CoreConfig::default()),
        Inputs {
            samples: srx,
            regs: rrx,
            cmds: crx,
        },
        Sinks {
            caps: Box::new(Recorder(acts.clone())),
            tx: Box::new(Recorder(acts.clone())),
        },
        None,
        "test",
    );
    d.set_policy(policy, 0);
    // What the sampler and the registrars would send.
    for (i, m) in mems.iter().enumerate() {
        let id = VmId(i as u32 + 1);
        stx.send(Sample::Added {
            id,
            key: format!("key{i}"),
            info: info(i),
        })
        .unwrap();
        stx.send(Sample::Memory { id, mem: m.clone() }).unwrap();
        let layout = validate(&t.docs[i], RAM, &Limits::default()).unwrap();
        rtx.send(RegEvent::Accepted {
            id,
            doc: Box::new(t.docs[i].clone()),
            layout: Box::new(layout),
        })
        .unwrap();
    }
    stx.send(Sample::Cpu(
        (0..3)
            .map(|i| {
                (
                    VmId(i + 1),
                    CpuSample {
                        total_ns: 0,
                        at_ns: 0,
                    },
                )
            })
            .collect(),
    ))
    .unwrap();
    let mut out = Vec::new();
    for (k, tick) in t.ticks.iter().enumerate() {
        let now = (k as u64 + 1) * MS;
        apply(&mems, tick);
        let batch = tick
            .cpu
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                (
                    VmId(i as u32 + 1),
                    CpuSample {
                        total_ns: c,
                        at_ns: now,
                    },
                )
            })
            .collect();
        stx.send(Sample::Cpu(batch)).unwrap();
        out.push(decisions(d.tick(now).expect("stepped")));
    }
    let acts = acts.lock().unwrap().clone();
    (out, acts)
}

fn through_the_lab(t: &Trace, policy: Option<NamedPolicy>) -> Vec<String> {
    let mems = replay_memories(t);
    let mut d = LabDriver::new(CoreConfig::default(), policy, 0);
    for (i, m) in mems.iter().enumerate() {
        let id = VmId(i as u32 + 1);
        d.add(id, info(i), m.clone(), &t.docs[i]).unwrap();
        d.cpu_sample(
            id,
            CpuSample {
                total_ns: 0,
                at_ns: 0,
            },
        )
        .unwrap();
    }
    let mut out = Vec::new();
    for (k, tick) in t.ticks.iter().enumerate() {
        let now = (k as u64 + 1) * MS;
        apply(&mems, tick);
        let cpu = tick
            .cpu
            .iter()
            .enumerate()
            .map(|(i, &c)| (VmId(i as u32 + 1), c));
        out.push(decisions(d.interval_end(now, cpu).unwrap()));
    }
    out
}

fn policy(name: &str) -> NamedPolicy {
    let path = format!("{}/../../policies/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    (
        name.into(),
        resex_pricing::PolicyConfig::from_toml(&text).unwrap(),
    )
}

#[test]
fn resexd_and_the_lab_decide_the_same_on_the_same_trace() {
    let trace = record(2500);
    // The governor on both levers (the default) caps nobody on a host with no rate lever
    // to serve entitlements with, by design; governor-cpu is the one that caps here.
    for name in ["freemarket", "ioshares", "governor-cpu", "governor"] {
        let (daemon, acts) = through_resexd(&trace, Some(policy(name)));
        let lab = through_the_lab(&trace, Some(policy(name)));
        assert_eq!(daemon.len(), lab.len());
        for (k, (a, b)) in daemon.iter().zip(&lab).enumerate() {
            assert_eq!(a, b, "{name}: interval {} differs", k + 1);
        }
        if name == "governor" {
            assert!(acts.is_empty(), "{acts:?}");
            continue;
        }
        // The trace is one where the policies act: the comparison is not of empty lists.
        assert!(!acts.is_empty(), "{name} set no cap on this trace");
        assert!(
            acts.iter().any(|a| a.contains("key1")),
            "{name} capped the aggressor: {acts:?}"
        );
    }
    // Monitoring only: the same rows too.
    let (daemon, acts) = through_resexd(&trace, None);
    assert_eq!(daemon, through_the_lab(&trace, None));
    assert!(acts.is_empty());
}
