//! Real-time helpers for the host's time-critical threads (softhca's port, resexd's loop): ask
//! for `SCHED_FIFO` at a modest priority, fall back to a raised nice value, and say which one
//! the thread got, so that a caller can tell its user once when neither was allowed. Also the
//! process's peak resident memory, which the benchmarks and the lab report.

use std::fmt;

/// The priority a thread got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Priority {
    /// `SCHED_FIFO` at this priority.
    Fifo(i32),
    /// `SCHED_OTHER` at this nice value.
    Nice(i32),
    /// As started: raising it was refused (why).
    Normal(String),
}

impl Priority {
    /// Whether the thread runs above normal priority.
    pub fn raised(&self) -> bool {
        !matches!(self, Priority::Normal(_))
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Priority::Fifo(p) => write!(f, "SCHED_FIFO priority {p}"),
            Priority::Nice(n) => write!(f, "nice {n}"),
            Priority::Normal(why) => write!(f, "normal priority ({why})"),
        }
    }
}

/// Raises the calling thread: `SCHED_FIFO` at `fifo` (when given), else nice `nice`, else
/// nothing (and says why). Linux applies both per thread.
///
/// `SCHED_FIFO` suits a thread that blocks for real between bursts of work (a 1 ms control
/// loop). It does not suit one that rests for microseconds: the kernel gives real-time threads
/// no timer slack, and a sleep of a few microseconds then expires before the thread is switched
/// out, so the thread spins, the kernel's real-time throttling stops it after 950 ms of every
/// second, and every normal thread on its CPU starves meanwhile. Such a thread asks for a nice
/// value only.
pub fn raise_priority(fifo: Option<i32>, nice: i32) -> Priority {
    let mut fifo_err = None;
    if let Some(fifo) = fifo {
        let p = libc::sched_param {
            sched_priority: fifo,
        };
        // SAFETY: sched_setscheduler on the calling thread (0) with an initialised parameter.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0 {
            return Priority::Fifo(fifo);
        }
        fifo_err = Some(std::io::Error::last_os_error());
    }
    // SAFETY: gettid takes no argument; setpriority with PRIO_PROCESS and a thread id changes
    // that thread's nice value only (Linux).
    let r = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if r == 0 {
        return Priority::Nice(nice);
    }
    let nice_err = std::io::Error::last_os_error();
    Priority::Normal(match fifo_err {
        Some(e) => format!("SCHED_FIFO: {e}; nice {nice}: {nice_err}"),
        None => format!("nice {nice}: {nice_err}"),
    })
}

/// The calling thread's kernel id (for [`thread_cpu_ns`]).
pub fn thread_id() -> i32 {
    // SAFETY: gettid takes no argument and cannot fail.
    unsafe { libc::gettid() }
}

/// CPU time a thread of this process has used so far, ns (`/proc/self/task/TID/schedstat`'s
/// first field); `None` when the thread is gone or `/proc` has no answer.
pub fn thread_cpu_ns(tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Waits until one of `fds` can be read (or was hung up on) or `timeout` has passed, with the
/// thread's timer slack (so a wait of microseconds is one; an empty set is a plain sleep).
/// Sets each entry's `revents`; returns how many are ready (0: the timeout). An interrupted wait
/// returns 0 too: the caller polls and waits again.
pub fn wait_readable(
    fds: &mut [libc::pollfd],
    timeout: std::time::Duration,
) -> std::io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(i32::try_from(timeout.subsec_nanos()).unwrap_or(0)),
    };
    for f in fds.iter_mut() {
        f.events = libc::POLLIN;
        f.revents = 0;
    }
    let n = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
    // SAFETY: `fds` is a valid, exclusively borrowed array of `n` pollfd entries and `ts` a valid
    // timespec, both alive for the call; a null signal mask leaves the thread's as it is.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), n, &ts, std::ptr::null()) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(usize::try_from(r).unwrap_or(0))
}

/// Sets the calling thread's timer slack (how late the kernel may wake its sleeps), ns.
pub fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and changes only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0);
    }
}

/// Peak resident memory of this process so far (`VmHWM`), MiB; `None` where `/proc` has no
/// answer.
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_priority_says_what_it_got() {
        // Root here gets SCHED_FIFO; elsewhere the answer must still name what happened.
        let got = std::thread::spawn(|| raise_priority(Some(1), -1))
            .join()
            .unwrap();
        match &got {
            Priority::Fifo(1) | Priority::Nice(-1) => assert!(got.raised()),
            Priority::Normal(why) => {
                assert!(why.contains("SCHED_FIFO"), "{why}");
                assert!(!got.raised());
            }
            other => panic!("{other:?}"),
        }
        assert!(!got.to_string().is_empty());
    }

    #[test]
    fn a_refused_raise_falls_back_and_explains() {
        // Priority 1000 is out of SCHED_FIFO's range (1..=99) even for root: the fallback runs.
        let got = std::thread::spawn(|| raise_priority(Some(1000), 0))
            .join()
            .unwrap();
        match &got {
            Priority::Nice(0) => {}
            Priority::Normal(why) => assert!(why.contains("Invalid argument"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_nice_only_raise_never_asks_for_fifo() {
        let got = std::thread::spawn(|| raise_priority(None, -2))
            .join()
            .unwrap();
        match &got {
            Priority::Nice(-2) => {}
            Priority::Normal(why) => assert!(!why.contains("SCHED_FIFO"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_wait_returns_on_data_or_after_its_timeout() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut fds = [libc::pollfd {
            fd: b.as_raw_fd(),
            events: 0,
            revents: 0,
        }];
        assert_eq!(
            wait_readable(&mut fds, std::time::Duration::from_millis(1)).unwrap(),
            0
        );
        a.write_all(&[1]).unwrap();
        assert_eq!(
            wait_readable(&mut fds, std::time::Duration::from_secs(5)).unwrap(),
            1
        );
        assert_ne!(fds[0].revents & libc::POLLIN, 0);
        drop(a);
        assert_eq!(
            wait_readable(&mut fds, std::time::Duration::from_secs(5)).unwrap(),
            1
        );
        // An empty set sleeps.
        assert_eq!(
            wait_readable(&mut [], std::time::Duration::from_micros(50)).unwrap(),
            0
        );
    }

    #[test]
    fn a_thread_sees_its_own_cpu_time_grow() {
        let tid = thread_id();
        let before = thread_cpu_ns(tid).unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        // The kernel adds a running thread's time when it is switched out.
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert!(thread_cpu_ns(tid).unwrap() > before);
        assert_eq!(thread_cpu_ns(-1), None);
    }
}
