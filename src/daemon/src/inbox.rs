//! What other threads hand the real-time loop: a queue whose receiving side never waits.
//!
//! The loop runs under `SCHED_FIFO`; the threads that feed it (the sampler, the registrars, the
//! admin's API, the periods detector) do not. A `std::sync::mpsc` receiver spins, yielding,
//! while a sender that has reserved a slot has not yet written it; a sender preempted in that
//! window on the loop's CPU cannot run again while the loop spins there (a real-time thread's
//! `sched_yield` yields only to real-time threads), so the loop stood still until the kernel's
//! real-time throttling or a migration let the sender finish: the embedded host's 1.1-1.5 s
//! freezes (`docs/guide.md`, "Freezes"). Here a sender pushes under a mutex it holds for one
//! push; the loop only ever *tries* that mutex, and when a sender holds it, takes what waits at
//! its next tick instead. (The loop's own sends on std channels, to the actuators and an
//! admin's reply, are safe: a std sender spins only on another sender, and the loop is their
//! only one.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

struct Shared<T> {
    queue: Mutex<Vec<T>>,
    /// The receiving side is gone: sends fail, as an mpsc sender's do. Set and read under
    /// the queue's lock.
    closed: AtomicBool,
}

impl<T> Shared<T> {
    /// The queue, waiting for it (senders, and the receiver's drop). A panic while pushing
    /// leaves a valid Vec: the poison is not the queue's.
    fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue, if nobody holds it right now (never waits).
    fn try_lock(&self) -> Option<MutexGuard<'_, Vec<T>>> {
        match self.queue.try_lock() {
            Ok(q) => Some(q),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// The sending side (any thread; cloned freely).
pub struct Post<T>(Arc<Shared<T>>);

/// The receiving side (the loop).
pub struct Inbox<T>(Arc<Shared<T>>);

/// A new queue.
#[must_use]
pub fn inbox<T>() -> (Post<T>, Inbox<T>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Vec::new()),
        closed: AtomicBool::new(false),
    });
    (Post(shared.clone()), Inbox(shared))
}

impl<T> std::fmt::Debug for Post<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Post").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Inbox<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").finish_non_exhaustive()
    }
}

impl<T> Clone for Post<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

/// Why [`Post::try_send`] gave an item back.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySend<T> {
    /// `cap` items wait already.
    Full(T),
    /// The receiver holds the queue right now (taking what waits).
    Busy(T),
    /// The receiving side is gone.
    Closed(T),
}

impl<T> Post<T> {
    /// Queues `v`; gives it back when the receiving side is gone.
    pub fn send(&self, v: T) -> Result<(), T> {
        let mut q = self.0.lock();
        if self.0.closed() {
            return Err(v);
        }
        q.push(v);
        Ok(())
    }

    /// Queues `v` unless `cap` items wait already; never waits (for the loop's own sends).
    pub fn try_send(&self, v: T, cap: usize) -> Result<(), TrySend<T>> {
        let Some(mut q) = self.0.try_lock() else {
            return Err(TrySend::Busy(v));
        };
        if self.0.closed() {
            return Err(TrySend::Closed(v));
        }
        if q.len() >= cap {
            return Err(TrySend::Full(v));
        }
        q.push(v);
        Ok(())
    }
}

#[cfg(test)]
impl<T> Post<T> {
    /// Holds the queue, as a sender preempted in the middle of a push would.
    pub(crate) fn hold(&self) -> MutexGuard<'_, Vec<T>> {
        self.0.lock()
    }
}

impl<T> Inbox<T> {
    /// Every sending side is gone (nothing more can arrive).
    #[must_use]
    pub fn senders_gone(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    /// Everything queued, oldest first; nothing when a sender holds the queue right now (it
    /// is there at the next call).
    #[must_use]
    pub fn take(&mut self) -> Vec<T> {
        self.take_ready().unwrap_or_default()
    }

    /// Everything queued, oldest first, or `None` when a sender holds the queue right now.
    #[must_use]
    pub fn take_ready(&mut self) -> Option<Vec<T>> {
        self.0.try_lock().map(|mut q| std::mem::take(&mut *q))
    }

    /// The newest item queued, if any and no sender holds the queue right now.
    pub fn try_pop(&mut self) -> Option<T> {
        self.0.try_lock()?.pop()
    }
}

impl<T> Drop for Inbox<T> {
    /// What waits goes with the receiver (an admin's reply channel among it: the asker learns
    /// at once), and later sends fail.
    fn drop(&mut self) {
        let mut q = self.0.lock();
        self.0.closed.store(true, Ordering::Release);
        q.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_arrive_in_order_and_a_held_queue_defers_them() {
        let (post, mut inbox) = inbox();
        for i in 0..3 {
            post.send(i).unwrap();
        }
        assert_eq!(inbox.take(), vec![0, 1, 2]);
        assert!(inbox.take().is_empty());
        post.send(7).unwrap();
        // A sender holding the queue (as one preempted mid-push would): the receiver does not
        // wait and loses nothing.
        let held = post.0.queue.lock().unwrap();
        assert!(inbox.take().is_empty());
        assert_eq!(inbox.try_pop(), None);
        drop(held);
        assert_eq!(inbox.try_pop(), Some(7));
    }

    #[test]
    fn a_bounded_send_never_waits() {
        let (post, mut inbox) = inbox();
        assert_eq!(post.try_send(1, 2), Ok(()));
        assert_eq!(post.try_send(2, 2), Ok(()));
        assert_eq!(post.try_send(3, 2), Err(TrySend::Full(3)));
        assert_eq!(inbox.take(), vec![1, 2]);
        let held = post.0.queue.lock().unwrap();
        assert_eq!(post.try_send(4, 2), Err(TrySend::Busy(4)));
        assert_eq!(inbox.take_ready(), None);
        drop(held);
        assert_eq!(inbox.take_ready(), Some(vec![]));
        drop(inbox);
        assert_eq!(post.try_send(5, 2), Err(TrySend::Closed(5)));
    }

    #[test]
    fn senders_fail_once_the_inbox_is_gone_and_what_waited_goes() {
        let (post, receiver) = inbox::<Arc<()>>();
        let waiting = Arc::new(());
        post.send(waiting.clone()).unwrap();
        assert_eq!(Arc::strong_count(&waiting), 2);
        drop(receiver);
        assert_eq!(Arc::strong_count(&waiting), 1);
        let (post, inbox) = inbox::<u32>();
        let other = post.clone();
        drop(inbox);
        assert_eq!(post.send(1), Err(1));
        assert_eq!(other.send(2), Err(2));
    }

    #[test]
    fn many_threads_post_and_every_item_arrives_once() {
        let (post, mut inbox) = inbox();
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let p = post.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u32 {
                        p.send(t * 1000 + i).unwrap();
                    }
                })
            })
            .collect();
        let mut got = Vec::new();
        // Taking while they post (a take may find the queue held: nothing is lost).
        for _ in 0..100 {
            got.extend(inbox.take());
            std::thread::yield_now();
        }
        for t in threads {
            t.join().unwrap();
        }
        assert!(!inbox.senders_gone());
        drop(post);
        assert!(inbox.senders_gone());
        got.extend(inbox.take());
        got.sort_unstable();
        assert_eq!(got, (0..4000).collect::<Vec<_>>());
    }
}
