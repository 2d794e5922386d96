//! A fixed-capacity "k best so far" buffer: the host steps keep one per chunk of applications
//! and merge them, so selecting the top k allocates nothing and does not depend on how the
//! chunks were scheduled (ties go to the smaller index).

/// One candidate: its key (larger is better), its application index, and a value carried along.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cand {
    pub key: f64,
    pub idx: u32,
    pub val: f64,
}

impl Cand {
    fn beats(&self, o: &Cand) -> bool {
        self.key > o.key || (self.key == o.key && self.idx < o.idx)
    }
}

/// The k best candidates offered so far.
#[derive(Debug, Clone)]
pub(crate) struct TopK {
    cap: usize,
    items: Vec<Cand>,
    worst: usize,
}

impl TopK {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            items: Vec::with_capacity(cap),
            worst: 0,
        }
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.worst = 0;
    }

    /// The key a candidate must reach to be kept (minus infinity until full).
    pub fn threshold(&self) -> f64 {
        if self.items.len() < self.cap {
            f64::NEG_INFINITY
        } else {
            self.items[self.worst].key
        }
    }

    pub fn offer(&mut self, c: Cand) {
        if self.items.len() < self.cap {
            self.items.push(c);
            if self.items.len() == self.cap {
                self.find_worst();
            }
        } else if c.beats(&self.items[self.worst]) {
            self.items[self.worst] = c;
            self.find_worst();
        }
    }

    fn find_worst(&mut self) {
        let mut w = 0;
        for (i, c) in self.items.iter().enumerate() {
            if self.items[w].beats(c) {
                w = i;
            }
        }
        self.worst = w;
    }

    pub fn merge(&mut self, other: &TopK) {
        for c in &other.items {
            self.offer(*c);
        }
    }

    /// The candidates sorted by index.
    pub fn sort_by_index(&mut self) -> &[Cand] {
        self.items.sort_unstable_by_key(|c| c.idx);
        self.find_worst();
        &self.items
    }

    pub fn items(&self) -> &[Cand] {
        &self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(key: f64, idx: u32) -> Cand {
        Cand { key, idx, val: 0.0 }
    }

    #[test]
    fn keeps_the_k_best_with_ties_to_the_smaller_index() {
        let mut t = TopK::new(2);
        for (k, i) in [(1.0, 0), (5.0, 1), (3.0, 2), (5.0, 3), (3.0, 4)] {
            t.offer(c(k, i));
        }
        let idx: Vec<u32> = t.sort_by_index().iter().map(|c| c.idx).collect();
        assert_eq!(idx, [1, 3]);
        assert_eq!(t.threshold(), 5.0);
        let mut a = TopK::new(2);
        a.offer(c(4.0, 9));
        a.offer(c(3.0, 2));
        let mut b = TopK::new(2);
        b.offer(c(3.0, 1));
        a.merge(&b);
        let idx: Vec<u32> = a.sort_by_index().iter().map(|c| c.idx).collect();
        assert_eq!(idx, [1, 9]);
    }
}
