//! The virtual-time driver of the shim's transports: guests on softhca (one link port each)
//! under a [`VirtualClock`], and actors (one per guest thread) that call the transports' state
//! machines. Each step's operations take effect at its start; its CPU cost (the work it did,
//! priced by the testbed's [`CpuModel`]) keeps its thread busy until the step ends. A thread
//! that cannot go on waits (busy-polling, in the model) until something changes: a completion
//! or landing in softhca, or another thread's progress, and then polls once more; that poll is
//! charged too. Deterministic: no wall clock, no hash order, ties broken by actor index.

use super::preset::{CpuModel, Testbed};
use resex_guestmem::{GuestMemory, VecMemory};
use resex_shim::transport::Work;
use resex_shim::{ShimError, SoftProvider};
use resex_softhca::{PortId, SoftHca, VirtualClock};
use std::sync::Arc;

/// What went wrong in a run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A transport or the device failed.
    #[error("{0}")]
    Shim(#[from] ShimError),
    /// Every thread waits and nothing is in flight: the protocol is stuck.
    #[error("stuck at {at_ns} ns: every thread waits and the device is idle")]
    Stuck {
        /// When.
        at_ns: u64,
    },
    /// An experiment failed.
    #[error("{what}: {source}")]
    In {
        /// Which experiment.
        what: String,
        /// What went wrong.
        source: Box<SimError>,
    },
    /// Fig. 11 was asked of a transport it does not compare.
    #[error("Fig. 11 compares status-byte and the sliding window, not {kind}")]
    NotCompared {
        /// The transport asked for.
        kind: resex_shim::transport::Kind,
    },
    /// The run passed its step budget or its time limit.
    #[error("gave up after {steps} steps at {at_ns} ns")]
    Budget {
        /// Steps taken.
        steps: u64,
        /// When.
        at_ns: u64,
    },
}

/// Names the experiment a result came from.
pub fn context<T>(r: Result<T, SimError>, what: impl FnOnce() -> String) -> Result<T, SimError> {
    r.map_err(|e| SimError::In {
        what: what(),
        source: Box::new(e),
    })
}

/// Guests on one softhca in virtual time.
pub struct World {
    /// The HCA.
    pub hca: SoftHca,
    /// Its clock.
    pub clock: Arc<VirtualClock>,
    /// One provider per guest (guest `k` on port `k`).
    pub guests: Vec<SoftProvider>,
    /// The CPU model.
    pub cpu: CpuModel,
    /// Whether copies are charged.
    pub charge_copies: bool,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "World({} guests)", self.guests.len())
    }
}

impl World {
    /// `n` guests of `ram` bytes each on a testbed.
    pub fn new(bed: &Testbed, n: u16, ram: u64, charge_copies: bool) -> Result<Self, SimError> {
        let hca = SoftHca::new(bed.link(), n);
        let mut guests = Vec::new();
        for k in 0..n {
            let size = usize::try_from(ram).unwrap_or(usize::MAX);
            let mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(size));
            let port = hca.add_guest(mem.clone(), PortId(k));
            guests.push(SoftProvider::new(mem, 1 << 20, ram, Arc::new(port))?);
        }
        Ok(Self {
            hca,
            clock: Arc::new(VirtualClock::new()),
            guests,
            cpu: bed.cpu,
            charge_copies,
        })
    }
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Went on (shared state may have changed: waiting threads look again).
    Progress,
    /// Cannot go on until something changes.
    Wait,
    /// Cannot go on until something changes or this time (ns) comes, busy-polling.
    WaitUntil(u64),
    /// Nothing to do before this time (ns).
    SleepUntil(u64),
    /// Finished.
    Done,
}

/// A guest thread.
pub trait Actor {
    /// One step at `now`: the step and the work it did.
    fn step(&mut self, now: u64) -> Result<(Step, Work), SimError>;
}

/// What a thread spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ThreadCpu {
    /// CPU time of its operations (one poll per wake-up while waiting), ns.
    pub work_ns: u64,
    /// Time it was running or busy-polling (not asleep, not finished), ns.
    pub busy_ns: u64,
    /// When it finished, ns.
    pub done_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready(u64),
    /// Since when, and until when at the latest.
    Waiting(u64, u64),
    Sleeping(u64),
    Done,
}

/// Steps at most (a bound on any run; far above what the experiments need).
const MAX_STEPS: u64 = 200_000_000;

/// Runs `actors` from time `start` until all are done; returns each thread's CPU.
pub fn run(
    world: &World,
    actors: &mut [&mut dyn Actor],
    start: u64,
) -> Result<Vec<ThreadCpu>, SimError> {
    let mut st: Vec<State> = vec![State::Ready(start); actors.len()];
    let mut cpu = vec![ThreadCpu::default(); actors.len()];
    let mut last = start;
    for steps in 0..MAX_STEPS {
        let next_actor = st
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match *s {
                State::Ready(t) | State::Sleeping(t) => Some((t, i)),
                State::Waiting(_, until) if until != u64::MAX => Some((until, i)),
                _ => None,
            })
            .min();
        if st.iter().all(|s| *s == State::Done) {
            return Ok(cpu);
        }
        // softhca's due time is a lower bound that may lie in the past (a stalled CQ): never
        // step back, always move on.
        let due = world.hca.next_due_ns().map(|d| d.max(last + 1));
        let (now, actor) = match (next_actor, due) {
            (Some((t, i)), Some(d)) if t <= d => (t, Some(i)),
            (Some((t, i)), None) => (t, Some(i)),
            (_, Some(d)) => (d, None),
            (None, None) => return Err(SimError::Stuck { at_ns: last }),
        };
        let now = now.max(last);
        last = now;
        world.clock.set(now);
        world.hca.poll(now);
        let Some(i) = actor else {
            // A device event: every waiting thread looks again now.
            wake(&mut st, &mut cpu, now);
            continue;
        };
        if let State::Waiting(since, _) = st[i] {
            cpu[i].busy_ns += now.saturating_sub(since);
        }
        let (step, work) = actors[i].step(now)?;
        // What the step posted is fetched now (its doorbell rang during the step).
        world.hca.poll(now);
        let cost = world.cpu.cost(&work, world.charge_copies);
        let end = now + cost;
        cpu[i].work_ns += cost;
        cpu[i].busy_ns += cost;
        st[i] = match step {
            Step::Progress => {
                wake(&mut st, &mut cpu, end);
                State::Ready(end)
            }
            Step::Wait => State::Waiting(end, u64::MAX),
            Step::WaitUntil(t) => State::Waiting(end, t.max(end)),
            Step::SleepUntil(t) => State::Sleeping(t.max(end)),
            Step::Done => {
                cpu[i].done_ns = end;
                // Finishing is news too (a receiver may wait for its sender to be done).
                wake(&mut st, &mut cpu, end);
                State::Done
            }
        };
        if steps + 1 == MAX_STEPS {
            return Err(SimError::Budget {
                steps: MAX_STEPS,
                at_ns: now,
            });
        }
    }
    Err(SimError::Budget {
        steps: MAX_STEPS,
        at_ns: last,
    })
}

/// Makes waiting threads ready at `t` (or when their last step ends), counting their polling
/// time as busy.
fn wake(st: &mut [State], cpu: &mut [ThreadCpu], t: u64) {
    for (s, c) in st.iter_mut().zip(cpu.iter_mut()) {
        if let State::Waiting(since, _) = *s {
            let at = t.max(since);
            c.busy_ns += at - since;
            *s = State::Ready(at);
        }
    }
}
