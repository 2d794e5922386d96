//! Links in the fluid model: each link (and, with strict priority, each class on it) has a
//! queue fed by the rates its flows offer and drained at the link's rate (higher classes
//! first). A queue that reaches the buffer pauses its senders (PFC): they get the share of the
//! rate left for their class, in proportion to what they offer. Below the buffer every sender
//! gets its full rate and the excess waits in the queue. Marking is RED on the queue: nothing
//! below `kmin`, rising linearly to `pmax` at `kmax`, every packet beyond.
//!
//! Work per step is in the links touched (offered to or still queued), never all links.

use crate::spec::NetSpec;

/// One link.
#[derive(Debug, Clone)]
pub struct Link {
    /// Name (`h1.tx`, `t1.up`, a named link).
    pub name: String,
    /// Rate, bytes/s.
    pub cap: f64,
    /// Serves strict-priority classes.
    pub prio: bool,
    /// Index of its utilisation record, if recorded.
    pub record: Option<usize>,
}

/// Every link's queues and this step's offers.
#[derive(Debug, Clone)]
pub struct Net {
    /// The links.
    pub links: Vec<Link>,
    classes: usize,
    kmin: f64,
    kmax: f64,
    pmax: f64,
    buffer: f64,
    queue: Vec<f64>,
    offered: Vec<f64>,
    scale: Vec<f64>,
    mark: Vec<f64>,
    live: Vec<u32>,
    is_live: Vec<bool>,
}

impl Net {
    /// Links with `classes` priority classes (1: none) and `[net]`'s queue settings.
    #[must_use]
    pub fn new(links: Vec<Link>, classes: usize, net: &NetSpec) -> Self {
        let classes = classes.max(1);
        let n = links.len() * classes;
        Self {
            kmin: net.kmin_kb * 1e3,
            kmax: (net.kmax_kb * 1e3).max(net.kmin_kb * 1e3 + 1.0),
            pmax: net.pmax.clamp(0.0, 1.0),
            buffer: (net.buffer_kb * 1e3).max(1.0),
            queue: vec![0.0; n],
            offered: vec![0.0; n],
            scale: vec![1.0; n],
            mark: vec![0.0; n],
            is_live: vec![false; links.len()],
            live: Vec::new(),
            links,
            classes,
        }
    }

    /// The queue slots a flow of `class` on `path` uses (one per link), for the per-step calls.
    #[must_use]
    pub fn slots(&self, path: &[u32], class: u8) -> Vec<u32> {
        path.iter()
            .map(|&l| u32::try_from(self.slot(l, class)).unwrap_or(u32::MAX))
            .collect()
    }

    #[inline]
    fn slot(&self, link: u32, class: u8) -> usize {
        let l = link as usize;
        if self.links[l].prio {
            l * self.classes + (class as usize).min(self.classes - 1)
        } else {
            l * self.classes
        }
    }

    /// A flow on `path` of `class` offers `rate` (bytes/s) this step.
    pub fn offer(&mut self, path: &[u32], class: u8, rate: f64) {
        let slots = self.slots(path, class);
        self.offer_slots(&slots, rate);
    }

    /// [`Net::offer`] by the flow's [`Net::slots`].
    #[inline]
    pub fn offer_slots(&mut self, slots: &[u32], rate: f64) {
        for &s in slots {
            self.offered[s as usize] += rate;
            let l = s as usize / self.classes;
            if !self.is_live[l] {
                self.is_live[l] = true;
                self.live.push(s / u32::try_from(self.classes).unwrap_or(1));
            }
        }
    }

    /// [`Net::share`] and [`Net::marking`] in one pass, by the flow's [`Net::slots`].
    #[inline]
    #[must_use]
    pub fn share_and_marking(&self, slots: &[u32]) -> (f64, f64) {
        let (mut share, mut mark) = (1.0f64, 0.0f64);
        for &s in slots {
            share = share.min(self.scale[s as usize]);
            mark = mark.max(self.mark[s as usize]);
        }
        (share, mark)
    }

    /// Serves `h_ns` of the offers: queues move, shares and marking probabilities are set for
    /// [`Net::share`] and [`Net::marking`]; the offers are cleared. Returns, for recorded
    /// links, nothing: utilisation is recorded by the caller from the flows' shares.
    pub fn serve(&mut self, h_ns: u64) {
        let h = h_ns as f64 / 1e9;
        let c = self.classes;
        let mut keep = 0;
        for i in 0..self.live.len() {
            let id = self.live[i];
            let l = id as usize;
            let link_classes = if self.links[l].prio { c } else { 1 };
            let mut avail = self.links[l].cap;
            let mut queued = false;
            for k in 0..link_classes {
                let s = l * c + k;
                let a = self.offered[s];
                let q0 = self.queue[s];
                let grow = (a - avail) * h;
                let mut q = q0 + grow;
                self.scale[s] = 1.0;
                if q >= self.buffer {
                    q = self.buffer;
                    if a > avail {
                        self.scale[s] = (avail / a).clamp(0.0, 1.0);
                    }
                }
                let q = q.max(0.0);
                // What the class took of the rate: its arrivals and the drain of its queue.
                let used = ((q0 - q) / h + a * self.scale[s]).clamp(0.0, avail);
                avail -= used;
                self.queue[s] = q;
                self.mark[s] = self.red(q);
                self.offered[s] = 0.0;
                queued |= q > 0.0;
            }
            if queued {
                self.live[keep] = id;
                keep += 1;
            } else {
                self.is_live[l] = false;
            }
        }
        self.live.truncate(keep);
    }

    fn red(&self, q: f64) -> f64 {
        if q <= self.kmin {
            0.0
        } else if q >= self.kmax {
            1.0
        } else {
            self.pmax * (q - self.kmin) / (self.kmax - self.kmin)
        }
    }

    /// The fraction of its offer a flow on `path` of `class` got this step.
    #[must_use]
    pub fn share(&self, path: &[u32], class: u8) -> f64 {
        path.iter()
            .map(|&l| self.scale[self.slot(l, class)])
            .fold(1.0, f64::min)
    }

    /// The highest marking probability on `path` for `class`.
    #[must_use]
    pub fn marking(&self, path: &[u32], class: u8) -> f64 {
        path.iter()
            .map(|&l| self.mark[self.slot(l, class)])
            .fold(0.0, f64::max)
    }

    /// Bytes queued at `link` (all classes).
    #[must_use]
    pub fn queued(&self, link: u32) -> f64 {
        let l = link as usize;
        self.queue[l * self.classes..(l + 1) * self.classes]
            .iter()
            .sum()
    }

    /// Links with something queued or offered since the last serve.
    #[must_use]
    pub fn busy(&self) -> bool {
        !self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_links(prio: bool) -> Net {
        let l = |n: &str| Link {
            name: n.into(),
            cap: 1e9,
            prio,
            record: None,
        };
        Net::new(vec![l("a"), l("b")], 2, &NetSpec::default())
    }

    #[test]
    fn overload_queues_marks_then_pauses() {
        let mut n = two_links(false);
        // 2x the rate for 10 µs: 10 KB queued, above kmin: marked.
        n.offer(&[0], 0, 1e9);
        n.offer(&[0], 0, 1e9);
        n.serve(10_000);
        assert!((n.queued(0) - 10_000.0).abs() < 1e-6);
        assert!(n.marking(&[0, 1], 0) > 0.0);
        assert_eq!(n.share(&[0], 0), 1.0);
        // Long enough to fill the buffer: the senders are paused to half each.
        n.offer(&[0], 0, 1e9);
        n.offer(&[0], 0, 1e9);
        n.serve(10_000_000);
        assert!((n.share(&[0], 0) - 0.5).abs() < 1e-9);
        assert_eq!(n.marking(&[0], 0), 1.0);
        // Nothing offered: the queue drains and the link goes quiet.
        n.serve(10_000_000);
        assert_eq!(n.queued(0), 0.0);
        assert!(!n.busy());
    }

    #[test]
    fn strict_priority_serves_class_zero_first() {
        let mut n = two_links(true);
        for _ in 0..100 {
            n.offer(&[0], 0, 1e9);
            n.offer(&[0], 1, 1e9);
            n.serve(100_000);
        }
        // Class 0 fits exactly; class 1 has nothing left and is paused.
        assert_eq!(n.share(&[0], 0), 1.0);
        assert_eq!(n.share(&[0], 1), 0.0);
        assert!(n.queued(0) >= NetSpec::default().buffer_kb * 1e3 - 1.0);
    }
}
