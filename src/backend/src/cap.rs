//! Cap mechanisms for a process (the embedded host's guests): cgroup v2 `cpu.max`, cgroup v1
//! `cpu.cfs_period_us`/`cpu.cfs_quota_us`, each with a 10 ms period, and, where no cgroup is
//! writable, a SIGSTOP/SIGCONT duty cycle with the same period.

// Percentages become whole microseconds and milli-percent: bounded, rounding intended.
#![allow(clippy::cast_possible_truncation)]

use crate::{BackendError, SavedError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The enforcement period, us (short, for latency-sensitive work).
pub const PERIOD_US: u64 = 10_000;
/// The kernel's smallest CFS quota, us.
pub const MIN_QUOTA_US: u64 = 1_000;

/// How a domain's cap is enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapHandle {
    /// A cgroup v2 directory (`cpu.max`).
    CgroupV2(PathBuf),
    /// A cgroup v1 `cpu` directory (`cpu.cfs_period_us`, `cpu.cfs_quota_us`).
    CgroupV1(PathBuf),
    /// A process stopped and continued by signals.
    Sigstop(u32),
}

fn read(p: &Path) -> Result<String, BackendError> {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_owned())
        .map_err(|e| BackendError::io(format!("reading {}", p.display()), e))
}

/// A cgroup file's number.
fn number<T: std::str::FromStr>(text: &str, file: &'static str) -> Result<T, BackendError> {
    text.parse().map_err(|_| BackendError::Unparsable {
        file: file.into(),
        text: text.to_owned(),
        expected: "a number",
    })
}

fn write(p: &Path, v: &str) -> Result<(), BackendError> {
    std::fs::write(p, v)
        .map_err(|e| BackendError::io(format!("writing `{v}` to {}", p.display()), e))
}

fn quota_us(pct: f64) -> u64 {
    ((pct / 100.0 * PERIOD_US as f64).round() as u64).max(MIN_QUOTA_US)
}

impl CapHandle {
    /// For people.
    pub fn describe(&self) -> String {
        match self {
            CapHandle::CgroupV2(d) => format!("cgroup v2 {}/cpu.max, period 10 ms", d.display()),
            CapHandle::CgroupV1(d) => {
                format!("cgroup v1 {}/cpu.cfs_quota_us, period 10 ms", d.display())
            }
            CapHandle::Sigstop(pid) => {
                format!(
                    "SIGSTOP/SIGCONT duty cycle on pid {pid}, period 10 ms (no writable cgroup)"
                )
            }
        }
    }

    /// The present setting, exactly.
    pub fn save(&self) -> Result<Value, BackendError> {
        Ok(match self {
            CapHandle::CgroupV2(d) => json!({ "cpu.max": read(&d.join("cpu.max"))? }),
            CapHandle::CgroupV1(d) => json!({
                "cfs_period_us": read(&d.join("cpu.cfs_period_us"))?,
                "cfs_quota_us": read(&d.join("cpu.cfs_quota_us"))?,
            }),
            CapHandle::Sigstop(pid) => json!({ "sigstop_cap_pct": duty().cap(*pid) }),
        })
    }

    /// The cap in force, percent (None: uncapped).
    pub fn current(&self) -> Result<Option<f64>, BackendError> {
        match self {
            CapHandle::CgroupV2(d) => {
                let v = read(&d.join("cpu.max"))?;
                let mut it = v.split_whitespace();
                match (it.next(), it.next().and_then(|p| p.parse::<f64>().ok())) {
                    (Some("max"), _) | (None, _) => Ok(None),
                    (Some(q), Some(p)) => Ok(q.parse::<f64>().ok().map(|q| 100.0 * q / p)),
                    _ => Err(BackendError::Unparsable {
                        file: "cpu.max".into(),
                        text: v.clone(),
                        expected: "a quota and a period",
                    }),
                }
            }
            CapHandle::CgroupV1(d) => {
                let q: i64 = number(&read(&d.join("cpu.cfs_quota_us"))?, "cpu.cfs_quota_us")?;
                let p: f64 = number(&read(&d.join("cpu.cfs_period_us"))?, "cpu.cfs_period_us")?;
                Ok((q > 0).then(|| 100.0 * q as f64 / p))
            }
            CapHandle::Sigstop(pid) => Ok(duty().cap(*pid)),
        }
    }

    /// Sets or lifts the cap.
    pub fn set(&self, pct: Option<f64>) -> Result<(), BackendError> {
        match self {
            CapHandle::CgroupV2(d) => {
                let v = match pct {
                    Some(p) => format!("{} {PERIOD_US}", quota_us(p)),
                    None => format!("max {PERIOD_US}"),
                };
                write(&d.join("cpu.max"), &v)
            }
            CapHandle::CgroupV1(d) => {
                // Lift the quota first: a quota above a shortened period is refused.
                write(&d.join("cpu.cfs_quota_us"), "-1")?;
                write(&d.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                if let Some(p) = pct {
                    write(&d.join("cpu.cfs_quota_us"), &quota_us(p).to_string())?;
                }
                Ok(())
            }
            CapHandle::Sigstop(pid) => {
                duty().set(*pid, pct);
                Ok(())
            }
        }
    }

    /// Puts back a saved setting.
    pub fn restore(&self, saved: &Value) -> Result<(), BackendError> {
        let field = |key: &'static str| {
            saved.get(key).and_then(Value::as_str).ok_or_else(|| {
                BackendError::from(SavedError::NoKey {
                    key,
                    saved: saved.clone(),
                })
            })
        };
        match self {
            CapHandle::CgroupV2(d) => write(&d.join("cpu.max"), field("cpu.max")?),
            CapHandle::CgroupV1(d) => {
                write(&d.join("cpu.cfs_quota_us"), "-1")?;
                write(&d.join("cpu.cfs_period_us"), field("cfs_period_us")?)?;
                write(&d.join("cpu.cfs_quota_us"), field("cfs_quota_us")?)
            }
            CapHandle::Sigstop(pid) => {
                let pct = saved.get("sigstop_cap_pct").and_then(Value::as_f64);
                duty().set(*pid, pct);
                if pct.is_none() {
                    // Whatever a crashed daemon left, the process runs again.
                    signal(*pid, libc::SIGCONT);
                }
                Ok(())
            }
        }
    }
}

/// Sends `sig` to process `pid` (never to pid 0 or 1); true when it was delivered.
pub fn signal(pid: u32, sig: i32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 1 {
        return false;
    }
    // SAFETY: kill(2) takes plain integers and has no memory effects on this process.
    unsafe { libc::kill(p, sig) == 0 }
}

/// The duty cycler: one thread per capped process, stopping it for the part of each 10 ms
/// period beyond its cap. Lifting the cap continues the process and ends the thread.
#[derive(Default)]
struct Duty {
    caps: Mutex<HashMap<u32, Arc<AtomicU64>>>,
}

const UNCAPPED: u64 = u64::MAX;

fn duty() -> &'static Duty {
    static D: OnceLock<Duty> = OnceLock::new();
    D.get_or_init(Duty::default)
}

impl Duty {
    fn cap(&self, pid: u32) -> Option<f64> {
        let m = self.caps.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&pid)
            .map(|c| c.load(Ordering::Acquire))
            .filter(|&c| c != UNCAPPED)
            .map(|c| c as f64 / 1000.0)
    }

    fn set(&self, pid: u32, pct: Option<f64>) {
        let mut m = self.caps.lock().unwrap_or_else(|p| p.into_inner());
        let v = pct.map_or(UNCAPPED, |p| (p.clamp(1.0, 100.0) * 1000.0) as u64);
        if let Some(c) = m.get(&pid) {
            c.store(v, Ordering::Release);
            if v == UNCAPPED {
                m.remove(&pid);
            }
            return;
        }
        if v == UNCAPPED {
            return;
        }
        let c = Arc::new(AtomicU64::new(v));
        m.insert(pid, c.clone());
        std::thread::Builder::new()
            .name(format!("duty-{pid}"))
            .spawn(move || {
                let period = Duration::from_micros(PERIOD_US);
                loop {
                    let v = c.load(Ordering::Acquire);
                    if !signal(pid, libc::SIGCONT) || v == UNCAPPED {
                        signal(pid, libc::SIGCONT);
                        return;
                    }
                    let on = period.mul_f64((v as f64 / 100_000.0).min(1.0));
                    std::thread::sleep(on);
                    if on < period {
                        signal(pid, libc::SIGSTOP);
                        std::thread::sleep(period - on);
                    }
                }
            })
            .map(drop)
            .unwrap_or_else(|e| tracing::error!("cannot start the duty cycle for pid {pid}: {e}"));
    }
}

/// Lifts every duty-cycle cap this process set (continuing the processes): for shutdown.
pub fn release_all_duty_cycles() {
    let pids: Vec<u32> = duty()
        .caps
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .copied()
        .collect();
    for pid in pids {
        duty().set(pid, None);
        signal(pid, libc::SIGCONT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_v1() -> (tempfile::TempDir, CapHandle) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::write(d.path().join("cpu.cfs_quota_us"), "-1\n").unwrap();
        let h = CapHandle::CgroupV1(d.path().into());
        (d, h)
    }

    #[test]
    fn cgroup_v1_sets_saves_and_restores_exactly() {
        let (d, h) = fake_v1();
        let saved = h.save().unwrap();
        assert_eq!(h.current().unwrap(), None);
        h.set(Some(25.0)).unwrap();
        assert_eq!(h.current().unwrap(), Some(25.0));
        h.set(Some(1.0)).unwrap();
        assert_eq!(
            h.current().unwrap(),
            Some(10.0),
            "the kernel's 1 ms minimum quota"
        );
        h.restore(&saved).unwrap();
        assert_eq!(h.save().unwrap(), saved);
        assert!(matches!(
            h.restore(&json!({})),
            Err(BackendError::Saved(SavedError::NoKey {
                key: "cfs_period_us",
                ..
            }))
        ));
        std::fs::write(d.path().join("cpu.cfs_quota_us"), "lots\n").unwrap();
        let e = h.current().unwrap_err();
        assert_eq!(e.to_string(), "cpu.cfs_quota_us: `lots` is not a number");
        assert!(matches!(
            e,
            BackendError::Unparsable {
                expected: "a number",
                ..
            }
        ));
    }

    #[test]
    fn cgroup_v2_writes_cpu_max() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cpu.max"), "max 100000\n").unwrap();
        let h = CapHandle::CgroupV2(d.path().into());
        let saved = h.save().unwrap();
        h.set(Some(50.0)).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("cpu.max")).unwrap(),
            "5000 10000"
        );
        assert_eq!(h.current().unwrap(), Some(50.0));
        h.restore(&saved).unwrap();
        assert_eq!(h.current().unwrap(), None);
    }

    #[test]
    fn the_duty_cycle_really_throttles_a_process() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let cpu = crate::cpu::CpuSource::Proc(pid);
        let h = CapHandle::Sigstop(pid);
        let saved = h.save().unwrap();
        h.set(Some(20.0)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let a = cpu.read_ns().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let used = cpu.read_ns().unwrap() - a;
        h.restore(&saved).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let b = cpu.read_ns().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let free = cpu.read_ns().unwrap() - b;
        child.kill().unwrap();
        child.wait().unwrap();
        // Capped at 20% it gets well under half a CPU; restored it runs (on a shared machine the
        // uncapped figure is not checked for a level, only that it is running again).
        assert!(
            used < 250_000_000,
            "capped at 20% it used {used} ns in 500 ms"
        );
        assert!(free > 0, "restored, it runs");
    }
}
