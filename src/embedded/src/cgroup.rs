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

/// A word that names no cap mechanism.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cap mechanism `{0}` (auto, cgroup-v2, cgroup-v1, sigstop)")]
pub struct UnknownCapMode(pub String);

impl std::str::FromStr for CapMode {
    type Err = UnknownCapMode;
    fn from_str(s: &str) -> Result<Self, UnknownCapMode> {
        match s {
            "auto" => Ok(CapMode::Auto),
            "cgroup-v2" => Ok(CapMode::CgroupV2),
            "cgroup-v1" => Ok(CapMode::CgroupV1),
            "sigstop" => Ok(CapMode::Sigstop),
            o => Err(UnknownCapMode(o.to_owned())),
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

impl Mounts {
    /// Removes the cgroups a host that died without cleaning up left behind: groups named
    /// `resex-<scenario>-<pid>` whose host process no longer runs. Only empty guest groups go
    /// (the kernel refuses to remove a cgroup with processes in it). Returns how many groups.
    pub fn remove_stale(&self) -> usize {
        let roots = [&self.v2_cpu, &self.v1_cpu, &self.v1_cpuacct];
        let mut removed = 0;
        for root in roots.into_iter().flatten() {
            removed += remove_stale_under(root, |pid| Path::new(&format!("/proc/{pid}")).exists());
        }
        removed
    }
}

fn remove_stale_under(root: &Path, alive: impl Fn(u32) -> bool) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("resex-")
            .and_then(|r| r.rsplit_once('-'))
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if alive(pid) || !e.path().is_dir() {
            continue;
        }
        if let Ok(children) = std::fs::read_dir(e.path()) {
            for c in children.flatten() {
                if c.path().is_dir() {
                    let _ = std::fs::remove_dir(c.path());
                }
            }
        }
        match std::fs::remove_dir(e.path()) {
            Ok(()) => {
                tracing::info!(
                    "removed stale cgroup {} (its host is gone)",
                    e.path().display()
                );
                removed += 1;
            }
            Err(err) => tracing::warn!("stale cgroup {} stays: {err}", e.path().display()),
        }
    }
    removed
}

/// softhca's port thread's own cgroup, inside the host's group beside its guests'. A NIC costs
/// the guests no CPU; the software one must not wait behind them either: its nice value ranks
/// it only inside the host process's own group (an autogroup, weight 1024 beside the guests'
/// [`crate::host::GUEST_GROUP_WEIGHT`] x 1024: traced, it waited 20-170 ms to run while the
/// guests' threads held both CPUs), so the thread gets a group that weighs as `weight` nice-0
/// tasks. cgroup v1 only: it places single threads (`tasks`); v2 places threads only inside
/// threaded subtrees, which the guests' process groups are not. Removed when dropped, after
/// the thread has exited.
#[derive(Debug)]
pub struct PortCgroup {
    dir: PathBuf,
}

/// Why softhca's port thread has no cgroup of its own.
#[derive(Debug, thiserror::Error)]
pub enum PortCgroupError {
    /// Not asked for (the default, real-time off, or caps by signals).
    #[error("not asked for")]
    NotAsked,
    /// The thread did not say its id in time.
    #[error("the port thread did not start")]
    NoThread,
    /// No v1 `cpu` hierarchy.
    #[error("no cgroup v1 cpu hierarchy (v2 cannot place one thread of a process)")]
    NoV1,
    /// A cgroup file could not be made or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl PortCgroup {
    /// Moves thread `tid` into `group/softhca-port` of the v1 `cpu` hierarchy, weighing
    /// `weight` nice-0 tasks.
    pub fn setup(
        mounts: &Mounts,
        group: &str,
        tid: i32,
        weight: u32,
    ) -> Result<Self, PortCgroupError> {
        let root = mounts.v1_cpu.as_ref().ok_or(PortCgroupError::NoV1)?;
        let io = |path: PathBuf| move |source| PortCgroupError::Io { path, source };
        let dir = make(root, group, "softhca-port").map_err(io(root.join(group)))?;
        let port = PortCgroup { dir };
        let shares = port.dir.join("cpu.shares");
        std::fs::write(&shares, (1024 * weight).max(2).to_string()).map_err(io(shares.clone()))?;
        let tasks = port.dir.join("tasks");
        std::fs::write(&tasks, tid.to_string()).map_err(io(tasks.clone()))?;
        Ok(port)
    }

    /// [`Self::setup`] for softhca's port thread once it has said its id (a second at most);
    /// logs where it went or why not.
    pub fn for_thread(
        mounts: &Mounts,
        group: &str,
        thread: &resex_softhca::HcaThread,
        weight: u32,
    ) -> Result<Self, PortCgroupError> {
        let tid = thread
            .tid(std::time::Duration::from_secs(1))
            .ok_or(PortCgroupError::NoThread)?;
        let r = Self::setup(mounts, group, tid, weight);
        match &r {
            Ok(g) => tracing::info!(
                "softhca's port thread in {} (weight {weight})",
                g.dir().display()
            ),
            Err(e) => tracing::info!("softhca's port thread keeps the host's cgroup: {e}"),
        }
        r
    }

    /// The group's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PortCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
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

/// Weighs the host's group (all its guests together) as `weight` nice-0 tasks against the
/// rest of the machine: cgroup v2 `cpu.weight` (100 each), v1 `cpu.shares` (1024 each).
fn weigh(group: &Path, v2: bool, weight: u32) {
    let (file, value) = if v2 {
        ("cpu.weight", (100 * weight).clamp(1, 10_000))
    } else {
        ("cpu.shares", (1024 * weight).max(2))
    };
    if let Err(e) = std::fs::write(group.join(file), value.to_string()) {
        tracing::info!("could not weigh {}/{file}: {e}", group.display());
    }
}

impl GuestCgroups {
    /// Puts `pid` into cgroups named `group/guest` as `mode` allows; falls back (with the
    /// reason logged) until something works. With `weight`, `group` (every guest of the host
    /// together) weighs as that many nice-0 tasks against the rest of the machine, so the
    /// guests stand up to a busy host as VMs with their own vCPUs would; each guest keeps the
    /// default weight inside it.
    pub fn setup(
        mounts: &Mounts,
        mode: CapMode,
        group: &str,
        guest: &str,
        pid: u32,
        weight: Option<u32>,
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
                    if let Some(w) = weight {
                        weigh(&g, true, w);
                    }
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
                        if let Some(w) = weight {
                            weigh(&root.join(group), false, w);
                        }
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
    fn stale_groups_of_dead_hosts_go_and_live_ones_stay() {
        let root = tempfile::tempdir().unwrap();
        for g in [
            "resex-pair-111/a",
            "resex-pair-111/b",
            "resex-pair-222/a",
            "other-333/x",
        ] {
            std::fs::create_dir_all(root.path().join(g)).unwrap();
        }
        let n = remove_stale_under(root.path(), |pid| pid == 222);
        assert_eq!(n, 1);
        assert!(!root.path().join("resex-pair-111").exists());
        assert!(root.path().join("resex-pair-222/a").exists());
        assert!(root.path().join("other-333/x").exists());
    }

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
    fn the_port_thread_gets_its_own_weighted_group_or_says_why_not() {
        let none = Mounts::default();
        assert!(matches!(
            PortCgroup::setup(&none, "resex-x-1", 42, 8),
            Err(PortCgroupError::NoV1)
        ));
        // A directory standing in for the v1 cpu hierarchy: the files are written as the
        // kernel's would be.
        let root = tempfile::tempdir().unwrap();
        let m = Mounts {
            v1_cpu: Some(root.path().to_owned()),
            ..Mounts::default()
        };
        let g = PortCgroup::setup(&m, "resex-x-1", 42, 8).unwrap();
        assert_eq!(g.dir(), root.path().join("resex-x-1").join("softhca-port"));
        let read = |f: &str| std::fs::read_to_string(g.dir().join(f)).unwrap();
        assert_eq!(read("cpu.shares"), "8192");
        assert_eq!(read("tasks"), "42");
    }

    #[test]
    fn sigstop_mode_uses_signals_and_proc() {
        let g = GuestCgroups::setup(&Mounts::default(), CapMode::Sigstop, "t", "g", 42, Some(8));
        assert_eq!(g.cap, CapHandle::Sigstop(42));
        assert_eq!(g.cpu, CpuSource::Proc(42));
    }
}
