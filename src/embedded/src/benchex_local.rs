//! `benchex local`: BenchEx's server and clients in one process on an in-process softhca on
//! the real clock. The server sits on port 0, the clients on port 1, as in the paper's two
//! machines.

use benchex::boot::Listener;
use benchex::client::{self, ClientConfig};
use benchex::local::LocalResult;
use benchex::server::{self, ServerConfig};
use benchex::BenchError;
use resex_common::LatencyRecorder;
use resex_guestmem::{GuestMemory, VecMemory};
use resex_shim::{Provider, SoftProvider};
use resex_softhca::{Clock, LinkConfig, MonotonicClock, PollOptions, PortCost, PortId, SoftHca};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn provider(hca: &SoftHca, bytes: u64, port: u16) -> Result<Arc<dyn Provider>, BenchError> {
    let mem: Arc<dyn GuestMemory> = Arc::new(VecMemory::new(
        usize::try_from(bytes).map_err(|_| BenchError::Memory { bytes })?,
    ));
    let ctl = hca.add_guest(mem.clone(), PortId(port));
    Ok(Arc::new(SoftProvider::new(
        mem,
        1 << 20,
        bytes,
        Arc::new(ctl),
    )?))
}

/// Runs `clients` clients against one server for the clients' duration, on the link preset
/// `link` (`testbed`: 8 Gb/s, the ResEx testbed; `100g`).
pub fn run(
    link: &str,
    scfg: ServerConfig,
    ccfg: ClientConfig,
    clients: u32,
) -> Result<LocalResult, BenchError> {
    let poll = PollOptions {
        idle_sleep: Duration::from_micros(20),
        ..PollOptions::default()
    };
    run_with(link, scfg, ccfg, clients, poll).map(|(r, _)| r)
}

/// [`run`] with the port thread's options; also returns what the port thread cost while the
/// clients ran.
pub fn run_with(
    link: &str,
    scfg: ServerConfig,
    ccfg: ClientConfig,
    clients: u32,
    poll: PollOptions,
) -> Result<(LocalResult, PortCost), BenchError> {
    let link = LinkConfig::preset(link).ok_or_else(|| BenchError::UnknownLink {
        name: link.to_owned(),
    })?;
    let hca = SoftHca::new(link, 2);
    let per_conn = (scfg.buffer + 4096) * u64::from(scfg.blocks) * 2 + (1 << 20);
    let ram = (1 << 22) + per_conn * u64::from(clients.max(1));
    let sp = provider(&hca, ram, 0)?;
    let cp = provider(&hca, ram, 1)?;
    let port = hca.spawn_with(Arc::new(MonotonicClock::new()) as Arc<dyn Clock>, poll);
    let dir = std::env::temp_dir().join(format!("benchex-local-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let addr = dir.join("server.sock").to_string_lossy().into_owned();
    let listener = Listener::bind(&addr)?;
    let stop = Arc::new(AtomicBool::new(false));
    let rec = Arc::new(Mutex::new(LatencyRecorder::new()));
    let srv = {
        let (stop, rec) = (stop.clone(), rec.clone());
        std::thread::spawn(move || server::run(sp, scfg, listener, rec, stop))
    };
    let start = port.sample();
    let mut handles = Vec::new();
    for _ in 0..clients.max(1) {
        let (cp, addr, stop) = (cp.clone(), addr.clone(), Arc::new(AtomicBool::new(false)));
        handles.push(std::thread::spawn(move || {
            client::run(cp, ccfg, &addr, stop)
        }));
    }
    let mut results = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => first_err = first_err.or(Some(BenchError::Panicked { thread: "client" })),
        }
    }
    let cost = port.sample().since(&start);
    stop.store(true, Ordering::Release);
    let server = srv
        .join()
        .map_err(|_| BenchError::Panicked { thread: "server" })??;
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(e) = first_err {
        return Err(e);
    }
    let server_latency = rec
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take_interval();
    Ok((
        LocalResult {
            transport: scfg.transport,
            server,
            server_latency,
            clients: results,
        },
        cost,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use resex_shim::transport::Polling;
    use std::time::{SystemTime, UNIX_EPOCH};

    /// Runs one client against a 64 KiB server, one run at a time (runs share a socket path).
    fn one_client(ccfg: ClientConfig) -> client::ClientResult {
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let scfg = ServerConfig {
            buffer: 64 << 10,
            polling: Polling::Adaptive,
            ..ServerConfig::default()
        };
        let mut r = run("testbed", scfg, ccfg, 1).unwrap();
        r.clients.pop().unwrap()
    }

    fn closed_loop() -> ClientConfig {
        ClientConfig {
            rate: 0.0,
            window: 2,
            polling: Polling::Adaptive,
            ..ClientConfig::default()
        }
    }

    #[test]
    fn a_periodic_job_runs_iterations_of_its_burst_each_with_its_pause() {
        let r = one_client(ClientConfig {
            think: Duration::from_millis(20),
            burst: 4,
            duration: Some(Duration::from_secs(1)),
            ..closed_loop()
        });
        assert!(r.iterations >= 2, "{r:?}");
        let done = r.iterations * 4;
        assert!(r.received >= done && r.received <= done + 4, "{r:?}");
        assert!(r.sent <= done + 4, "{r:?}");
        assert!(r.iteration_mean_ns >= 20e6, "{r:?}");
    }

    #[test]
    fn a_plain_closed_loop_has_no_iterations() {
        let r = one_client(ClientConfig {
            duration: Some(Duration::from_millis(300)),
            ..closed_loop()
        });
        assert!(r.received > 0, "{r:?}");
        assert_eq!((r.iterations, r.iteration_mean_ns), (0, 0.0), "{r:?}");
    }

    #[test]
    fn a_client_sends_nothing_before_its_start_time() {
        let unix_ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis();
        let start = unix_ms(SystemTime::now()) + 300;
        let r = one_client(ClientConfig {
            count: 5,
            duration: None,
            start_unix_ms: Some(u64::try_from(start).unwrap()),
            ..closed_loop()
        });
        let end = SystemTime::now();
        // `seconds` runs from the first order: it began no earlier than the start (1 ms for
        // the clocks' rounding).
        let first = end - Duration::from_secs_f64(r.seconds);
        assert!(unix_ms(first) + 1 >= start, "{r:?}");
        assert_eq!((r.sent, r.received), (5, 5), "{r:?}");
    }

    #[test]
    fn settings_that_cannot_work_are_refused_by_kind() {
        let e = run("400g", ServerConfig::default(), ClientConfig::default(), 1).unwrap_err();
        assert!(
            matches!(&e, BenchError::UnknownLink { name } if name == "400g"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "unknown link preset `400g` (use testbed or 100g)"
        );
        let hca = SoftHca::new(LinkConfig::preset("testbed").unwrap(), 2);
        let p = provider(&hca, 1 << 22, 0).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("s.sock").to_str().unwrap()).unwrap();
        let small = ServerConfig {
            buffer: 1,
            ..ServerConfig::default()
        };
        let rec = Arc::new(Mutex::new(LatencyRecorder::new()));
        let e = server::run(p, small, listener, rec, Arc::new(AtomicBool::new(false))).unwrap_err();
        assert!(
            matches!(e, BenchError::Buffer { buffer: 1, min } if min > 1),
            "{e:?}"
        );
    }
}
