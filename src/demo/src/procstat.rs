//! `/proc/stat`: the machine's CPU-time counters and its run queue, and `/proc/pressure/cpu`:
//! how long runnable tasks waited for a CPU; what the demo's health reads to say why a phase
//! was overloaded (CPU steal, busy CPUs, runnable threads, CPU pressure).

/// The CPU-time counters of `/proc/stat`'s `cpu` line, in ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// All time.
    pub total: u64,
    /// Idle and I/O wait.
    pub idle: u64,
    /// Stolen by the hypervisor.
    pub steal: u64,
}

/// Parses `/proc/stat`: the aggregate CPU times and `procs_running` (None: not this format).
pub fn parse_proc_stat(text: &str) -> Option<(CpuTimes, u32)> {
    let mut cpu = None;
    let mut running = None;
    for line in text.lines() {
        let mut f = line.split_ascii_whitespace();
        match f.next() {
            Some("cpu") => {
                let v: Vec<u64> = f.map_while(|x| x.parse().ok()).collect();
                // user nice system idle iowait irq softirq steal (guest, guest_nice are in user).
                if v.len() < 8 {
                    return None;
                }
                cpu = Some(CpuTimes {
                    total: v[..8].iter().sum(),
                    idle: v[3] + v[4],
                    steal: v[7],
                });
            }
            Some("procs_running") => running = f.next().and_then(|x| x.parse().ok()),
            _ => {}
        }
    }
    Some((cpu?, running?))
}

/// This machine's `/proc/stat` now (None where it cannot be read or parsed).
pub fn proc_stat() -> Option<(CpuTimes, u32)> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Parses `/proc/pressure/cpu`: the microseconds in which some runnable task waited for a CPU
/// (its `some` line's `total`; None: not this format).
pub fn parse_cpu_pressure(text: &str) -> Option<u64> {
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_ascii_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// This machine's CPU pressure total now, us (None where the kernel has no PSI).
pub fn cpu_pressure_us() -> Option<u64> {
    parse_cpu_pressure(&std::fs::read_to_string("/proc/pressure/cpu").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 800 20 1 2 22 0 0\n\
                        cpu0 50 2 25 400 10 1 1 11 0 0\n\
                        intr 1 2 3\nctxt 99\nprocs_running 3\nprocs_blocked 0\n";

    #[test]
    fn proc_stat_gives_totals_steal_and_the_run_queue() {
        let (c, r) = parse_proc_stat(STAT).unwrap();
        assert_eq!(
            c,
            CpuTimes {
                total: 1000,
                idle: 820,
                steal: 22
            }
        );
        assert_eq!(r, 3);
        assert_eq!(parse_proc_stat("cpu 1 2 3\nprocs_running 1\n"), None);
        assert_eq!(parse_proc_stat("garbage"), None);
    }

    #[test]
    fn cpu_pressure_is_the_some_lines_total() {
        let psi = "some avg10=1.50 avg60=0.28 avg300=2.41 total=1752389444\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=7\n";
        assert_eq!(parse_cpu_pressure(psi), Some(1_752_389_444));
        assert_eq!(parse_cpu_pressure("full total=7\n"), None);
        assert_eq!(parse_cpu_pressure("some avg10=1 total=x\n"), None);
    }
}
