//! What a transport's calls cost the guest's CPU, counted by operation (never timed): the
//! real-time driver ignores it, the lab's virtual-time driver prices it with a CPU model, so CPU
//! per message is a measured figure there, the same code either way.

/// Operations a transport performed since the counter was last taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Work {
    /// Post calls (each rings one doorbell).
    pub posts: u64,
    /// Work requests written (send and receive).
    pub wqes: u64,
    /// CQ polls.
    pub polls: u64,
    /// Completions consumed.
    pub cqes: u64,
    /// Payload bytes the CPU copied (filling a block, taking one out).
    pub copied: u64,
    /// Status bytes or bitmap bytes the CPU inspected or wrote.
    pub scanned: u64,
}

impl Work {
    /// One post call of `wqes` work requests.
    pub fn post(&mut self, wqes: usize) {
        self.posts += 1;
        self.wqes += wqes as u64;
    }

    /// One CQ poll that returned `cqes` completions.
    pub fn poll(&mut self, cqes: usize) {
        self.polls += 1;
        self.cqes += cqes as u64;
    }

    /// `n` payload bytes copied.
    pub fn copy(&mut self, n: u64) {
        self.copied += n;
    }

    /// `n` status or bitmap bytes touched.
    pub fn scan(&mut self, n: u64) {
        self.scanned += n;
    }

    /// Adds `o`.
    pub fn add(&mut self, o: &Work) {
        self.posts += o.posts;
        self.wqes += o.wqes;
        self.polls += o.polls;
        self.cqes += o.cqes;
        self.copied += o.copied;
        self.scanned += o.scanned;
    }

    /// Returns the counts and resets them.
    pub fn take(&mut self) -> Work {
        std::mem::take(self)
    }
}
