//! CPU time of a process or a cgroup, in ns.

use crate::BackendError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where a domain's CPU time is read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuSource {
    /// A cgroup v1 cpuacct directory (`cpuacct.usage`, ns).
    CgroupV1(PathBuf),
    /// A cgroup v2 directory (`cpu.stat` `usage_usec`).
    CgroupV2(PathBuf),
    /// A process: the sum of its threads' `/proc/PID/task/TID/schedstat` run times.
    Proc(u32),
}

fn read(path: &std::path::Path) -> Result<String, BackendError> {
    std::fs::read_to_string(path)
        .map_err(|e| BackendError::io(format!("reading {}", path.display()), e))
}

impl CpuSource {
    /// Reads the total, ns.
    pub fn read_ns(&self) -> Result<u64, BackendError> {
        match self {
            CpuSource::CgroupV1(dir) => {
                let t = read(&dir.join("cpuacct.usage"))?;
                t.trim().parse().map_err(|_| BackendError::Unparsable {
                    file: "cpuacct.usage".into(),
                    text: t.trim().to_owned(),
                    expected: "a number",
                })
            }
            CpuSource::CgroupV2(dir) => {
                let t = read(&dir.join("cpu.stat"))?;
                t.lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|us| us * 1000)
                    .ok_or(BackendError::MissingKey {
                        file: "cpu.stat",
                        key: "usage_usec",
                    })
            }
            CpuSource::Proc(pid) => {
                let dir = PathBuf::from(format!("/proc/{pid}/task"));
                let tasks = std::fs::read_dir(&dir)
                    .map_err(|e| BackendError::io(format!("reading {}", dir.display()), e))?;
                let mut total = 0u64;
                for t in tasks.flatten() {
                    // A thread may exit between listing and reading: skip it.
                    if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                        total += s
                            .split_whitespace()
                            .next()
                            .and_then(|v| v.parse::<u64>().ok())
                            .unwrap_or(0);
                    }
                }
                Ok(total)
            }
        }
    }

    /// For people.
    pub fn describe(&self) -> String {
        match self {
            CpuSource::CgroupV1(d) => format!("cgroup v1 {}/cpuacct.usage", d.display()),
            CpuSource::CgroupV2(d) => format!("cgroup v2 {}/cpu.stat", d.display()),
            CpuSource::Proc(p) => format!("/proc/{p}/task/*/schedstat"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_cgroup_files() {
        let me = CpuSource::Proc(std::process::id());
        let a = me.read_ns().unwrap();
        // Burn 50 ms of CPU (the kernel updates run times at ticks and switches).
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        assert!(me.read_ns().unwrap() > a);
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cpuacct.usage"), "12345\n").unwrap();
        assert_eq!(
            CpuSource::CgroupV1(d.path().into()).read_ns().unwrap(),
            12345
        );
        std::fs::write(d.path().join("cpu.stat"), "usage_usec 7\nuser_usec 5\n").unwrap();
        assert_eq!(
            CpuSource::CgroupV2(d.path().into()).read_ns().unwrap(),
            7000
        );
        assert!(CpuSource::Proc(u32::MAX).read_ns().is_err());
    }
}
