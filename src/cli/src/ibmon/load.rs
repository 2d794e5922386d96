//! Opening a guest: its RAM file, its validated registration and a monitor per ring format.

use super::output::QpCounts;
use super::Target;
use anyhow::Context;
use resex_guestmem::{FileMemory, GuestMemory};
use resex_ibmon::registry::{validate, Limits};
use resex_ibmon::rxe::RxeMonitor;
use resex_ibmon::{MonitorState, VmMonitor};
use resex_proto::Registration;

/// A guest being scanned: the mlx5 QPs of the document's `qps` and its soft-RoCE `rings`.
pub struct Guest {
    /// The RAM file, mapped read-only.
    pub mem: FileMemory,
    /// The mlx5 queue pairs.
    pub mlx5: VmMonitor,
    /// The soft-RoCE queues.
    pub rxe: RxeMonitor,
}

/// Maps the RAM file read-only and builds the monitors from the rings document.
pub fn open(t: &Target) -> anyhow::Result<Guest> {
    let mem = FileMemory::open_read_only(&t.ram)?;
    let doc =
        std::fs::read(&t.rings).with_context(|| format!("cannot read {}", t.rings.display()))?;
    let reg = Registration::parse(&doc).with_context(|| format!("in {}", t.rings.display()))?;
    let mut layout = validate(&reg, mem.size(), &Limits::default())
        .with_context(|| format!("{} does not fit {}", t.rings.display(), t.ram.display()))?;
    let rxe = RxeMonitor::new(std::mem::take(&mut layout.rxe), layout.path_mtu);
    Ok(Guest {
        mem,
        mlx5: VmMonitor::new(layout),
        rxe,
    })
}

impl Guest {
    /// One scan of both formats, each with `budget`; true when either may have more to read.
    pub fn scan(&mut self, budget: u32) -> bool {
        let more = self.mlx5.scan(&self.mem, budget).exhausted;
        self.rxe.scan_delta(&self.mem, budget);
        more || (budget > 0 && self.rxe.walked() == budget)
    }

    /// Cumulative counts: the mlx5 QPs by QPN, then the soft-RoCE ones.
    pub fn rows(&self) -> Vec<QpCounts> {
        let mlx5 = self.mlx5.layout().qps.iter().zip(self.mlx5.counters());
        let mlx5 = mlx5.map(|(q, c)| QpCounts::mlx5(q.qpn, *c));
        let rxe = self.rxe.counters().into_iter();
        mlx5.chain(rxe.map(|c| QpCounts::rxe(c.qpn, c.counts)))
            .collect()
    }

    /// Both formats' cursors.
    pub fn state(&self) -> MonitorState {
        MonitorState {
            rxe: self.rxe.cursors(),
            ..self.mlx5.state()
        }
    }

    /// Puts back cursors saved by [`Self::state`].
    pub fn restore(&mut self, st: &MonitorState) -> anyhow::Result<()> {
        self.mlx5.restore(st)?;
        self.rxe.set_cursors(&st.rxe);
        Ok(())
    }
}
