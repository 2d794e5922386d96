//! The command lines of a guest's programs: the agent (BenchEx's server as its workload) and
//! BenchEx's clients.

use resex_common::Polling;
use resex_scenario::{GuestSpec, Workload};

/// The agent's arguments for guest `g` (BenchEx's server as its workload).
pub(super) fn agent_args(g: &GuestSpec, channel: &str, bench: &str, report_ms: u64) -> Vec<String> {
    let w = &g.benchex;
    let mut args: Vec<String> = [
        "--channel",
        channel,
        "--name",
        &g.name,
        "--listen",
        bench,
        "--buffer",
        &w.buffer.0.to_string(),
        "--compute",
        &w.compute.to_string(),
        "--polling",
        &w.polling.to_string(),
        "--report-ms",
        &report_ms.to_string(),
    ]
    .map(String::from)
    .into();
    if !g.reports {
        args.push("--no-reports".into());
    }
    args
}

/// How BenchEx's clients poll for a guest that polls with `guest`: adaptively, or in batches
/// when the guest does.
fn client_polling(guest: Polling) -> &'static str {
    match guest {
        Polling::Batch => "batch",
        Polling::Spin | Polling::Adaptive => "adaptive",
    }
}

/// BenchEx's clients' arguments for workload `w`, served at `bench`: a periodic job's pause
/// and burst when it is one, and the Unix time, ms, to start at when `start_unix_ms` is set.
pub(super) fn client_args(w: &Workload, bench: &str, start_unix_ms: Option<u64>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--connect",
        bench,
        "--rate",
        &w.rate.to_string(),
        "--window",
        &w.window.to_string(),
        // The clients stand for machines across the link: they must not take this host's
        // CPUs from the guests, whatever the guests' own polling (and in batches when the
        // guest's job is a bulk one).
        "--polling",
        client_polling(w.polling),
        "--clients",
        &w.clients.to_string(),
        "--count",
        &w.count.to_string(),
        "--duration",
        "0",
    ]
    .map(String::from)
    .into();
    if w.think_ms > 0.0 {
        let think = [
            "--think-ms",
            &w.think_ms.to_string(),
            "--burst",
            &w.burst.to_string(),
        ];
        args.extend(think.map(String::from));
    }
    if let Some(t) = start_unix_ms {
        args.extend(["--start-unix-ms".to_owned(), t.to_string()]);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_scenario::Scenario;
    use std::time::Duration;

    /// `benchex client`'s own options, as the clients' process parses them.
    fn parsed(args: &[String]) -> benchex::client::ClientConfig {
        let machine = ["--ram", "r", "--hca", "h"].map(String::from);
        benchex::cli::client_config(machine.iter().chain(args))
            .unwrap_or_else(|e| panic!("{args:?}: {e:#}"))
    }

    fn workload(extra: &str) -> Workload {
        let text = format!(
            "name = \"t\"\n[[guest]]\nname = \"g\"\n[guest.benchex]\nbuffer = \"64KiB\"\n{extra}"
        );
        Scenario::from_toml(&text).unwrap().guests[0]
            .benchex
            .clone()
    }

    #[test]
    fn client_args_pass_a_periodic_job_and_a_start_time_that_benchex_accepts() {
        let plain = client_args(&workload("rate = 0"), "b.sock", None);
        assert!(!plain
            .iter()
            .any(|a| a == "--think-ms" || a == "--start-unix-ms"));
        let cfg = parsed(&plain);
        assert_eq!((cfg.rate, cfg.think, cfg.burst), (0.0, Duration::ZERO, 1));
        let w = workload("rate = 0\nthink_ms = 20.5\nburst = 4");
        let args = client_args(&w, "b.sock", Some(1_700_000_000_000));
        let cfg = parsed(&args);
        assert_eq!(cfg.think, Duration::from_micros(20_500));
        assert_eq!((cfg.burst, cfg.start_unix_ms), (4, Some(1_700_000_000_000)));
    }

    #[test]
    fn clients_poll_adaptively_or_in_batches_when_the_guest_does() {
        for (guest, clients) in [
            ("spin", Polling::Adaptive),
            ("adaptive", Polling::Adaptive),
            ("batch", Polling::Batch),
        ] {
            let w = workload(&format!("polling = \"{guest}\""));
            assert_eq!(
                parsed(&client_args(&w, "b.sock", None)).polling,
                clients,
                "{guest}"
            );
        }
    }
}
