//! Per-guest cgroups: the cap mechanism and CPU accounting the embedded host gives each guest
//! process. cgroup v2 when its `cpu` controller is available, else cgroup v1 `cpu` (and
//! `cpuacct` for accounting), else a SIGSTOP duty cycle and `/proc` accounting.

use resex_backend::cap::CapHandle;
use resex_backend::cpu::CpuSource;
use std::path::{Path, PathBuf};

/// Which cap mechanism to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapMode {
    /// The best one that works here.
    Auto,
    /// cgroup v2 `cpu.max` only.
    CgroupV2,
    /// cgroup v1 CFS quota only.
    CgroupV1,
    /// Signals only.
    Sigstop,
}

impl std::str::FromStr for CapMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(CapMode::Auto),
            "cgroup-v2" => Ok(CapMode::CgroupV2),
            "cgroup-v1" => Ok(CapMode::CgroupV1),
            "sigstop" => Ok(CapMode::Sigstop),
            o => Err(format!(
                "unknown cap mechanism `{o}` (auto, cgroup-v2, cgroup-v1, sigstop)"
            )),
        }
    }
}

/// Mount points of cgroup hierarchies, from /proc/mounts.
#[derive(Debug, Default, Clone)]
pub struct Mounts {
    /// cgroup v2 with a `cpu` controller available.
    pub v2_cpu: Option<PathBuf>,
    /// cgroup v1 hierarchy with `cpu`.
    pub v1_cpu: Option<PathBuf>,
    /// cgroup v1 hierarchy with `cpuacct`.
    pub v1_cpuacct: Option<PathBuf>,
}

impl Mounts {
    /// Reads /proc/mounts.
    pub fn detect() -> Mounts {
        let text = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        Self::parse(&text)
    }

    /// Parses mounts text.
    pub fn parse(text: &str) -> Mounts {
        let mut m = Mounts::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 4 {
                continue;
            }
            let (dir, ty, opts) = (PathBuf::from(f[1]), f[2], f[3]);
            match ty {
                "cgroup2" => {
                    let ctl =
                        std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
                    if ctl.split_whitespace().any(|c| c == "cpu") {
                        m.v2_cpu.get_or_insert(dir);
                    }
                }
                "cgroup" => {
                    let o: Vec<&str> = opts.split(',').collect();
                    if o.contains(&"cpu") {
                        m.v1_cpu.get_or_insert(dir.clone());
                    }
                    if o.contains(&"cpuacct") {
                        m.v1_cpuacct.get_or_insert(dir);
                    }
                }
                _ => {}
            }
        }
        m
    }
}

/// A guest's cgroups, removed when dropped (after its process has exited).
#[derive(Debug)]
pub struct GuestCgroups {
    dirs: Vec<PathBuf>,
    /// The cap handle.
    pub cap: CapHandle,
    /// The CPU source.
    pub cpu: CpuSource,
}

fn make(parent: &Path, group: &str, guest: &str) -> std::io::Result<PathBuf> {
    let d = parent.join(group).join(guest);
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn join(dir: &Path, pid: u32) -> std::io::Result<()> {
    std::fs::write(dir.join("cgroup.procs"), pid.to_string())
}

impl GuestCgroups {
    /// Puts `pid` into cgroups named `group/guest` as `mode` allows; falls back (with the
    /// reason logged) until something works.
    pub fn setup(
        mounts: &Mounts,
        mode: CapMode,
        group: &str,
        guest: &str,
        pid: u32,
    ) -> GuestCgroups {
        let mut dirs = Vec::new();
        let mut cap = None;
        let mut cpu = None;
        if matches!(mode, CapMode::Auto | CapMode::CgroupV2) {
            if let Some(root) = &mounts.v2_cpu {
                let r = (|| -> std::io::Result<PathBuf> {
                    let g = root.join(group);
                    std::fs::create_dir_all(&g)?;
                    // Delegate cpu to our group, then to the guest's.
                    let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
                    std::fs::write(g.join("cgroup.subtree_control"), "+cpu")?;
                    let d = make(root, group, guest)?;
                    join(&d, pid)?;
                    Ok(d)
                })();
                match r {
                    Ok(d) => {
                        cap = Some(CapHandle::CgroupV2(d.clone()));
                        cpu = Some(CpuSource::CgroupV2(d.clone()));
                        dirs.push(d);
                    }
                    Err(e) => tracing::info!("cgroup v2 not usable for {guest}: {e}"),
                }
            }
        }
        if cap.is_none() && matches!(mode, CapMode::Auto | CapMode::CgroupV1) {
            if let Some(root) = &mounts.v1_cpu {
                match make(root, group, guest).and_then(|d| join(&d, pid).map(|()| d)) {
                    Ok(d) => {
                        cap = Some(CapHandle::CgroupV1(d.clone()));
                        dirs.push(d);
                    }
                    Err(e) => tracing::info!("cgroup v1 cpu not usable for {guest}: {e}"),
                }
            }
            if cap.is_some() {
                if let Some(root) = &mounts.v1_cpuacct {
                    if mounts.v1_cpu.as_deref() == Some(root.as_path()) {
                        cpu = Some(CpuSource::CgroupV1(dirs[0].clone()));
                    } else if let Ok(d) =
                        make(root, group, guest).and_then(|d| join(&d, pid).map(|()| d))
                    {
                        cpu = Some(CpuSource::CgroupV1(d.clone()));
                        dirs.push(d);
                    }
                }
            }
        }
        GuestCgroups {
            dirs,
            cap: cap.unwrap_or(CapHandle::Sigstop(pid)),
            cpu: cpu.unwrap_or(CpuSource::Proc(pid)),
        }
    }
}

impl Drop for GuestCgroups {
    fn drop(&mut self) {
        for d in &self.dirs {
            // Empty once the process is gone; the group directory goes when its last guest does.
            let _ = std::fs::remove_dir(d);
            if let Some(parent) = d.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v1_and_v2_mounts() {
        let m = Mounts::parse(
            "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
             cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n\
             cgroup2 /nonexistent/unified cgroup2 rw 0 0\n",
        );
        assert_eq!(m.v1_cpu, Some(PathBuf::from("/sys/fs/cgroup/cpu")));
        assert_eq!(m.v1_cpuacct, Some(PathBuf::from("/sys/fs/cgroup/cpuacct")));
        assert_eq!(m.v2_cpu, None, "no cgroup.controllers listing cpu");
        assert_eq!("sigstop".parse::<CapMode>(), Ok(CapMode::Sigstop));
        assert!("cgroup-v3".parse::<CapMode>().is_err());
    }

    #[test]
    fn sigstop_mode_uses_signals_and_proc() {
        let g = GuestCgroups::setup(&Mounts::default(), CapMode::Sigstop, "t", "g", 42);
        assert_eq!(g.cap, CapHandle::Sigstop(42));
        assert_eq!(g.cpu, CpuSource::Proc(42));
    }
}
