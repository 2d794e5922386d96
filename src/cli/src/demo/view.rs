//! The real-time run on the terminal ([`Terminal`]): on a terminal `resex top`'s dashboard
//! (quitting it ends the demo; warnings wait until it closes), elsewhere a plain table every
//! second, nothing but warnings with `--headless`.

use resex_api::Snapshot;
use resex_demo::live::LiveView;
use resex_top::term::{Ended, TopOptions};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the terminal shows of a real-time run.
pub struct Terminal {
    headless: bool,
    /// `resex top`'s dashboard runs (not headless, stdout a terminal).
    dashboard: bool,
    /// Set when the dashboard is quit: the demo stops.
    stop: Arc<AtomicBool>,
    /// Set when the run is over: the dashboard closes.
    done: Arc<AtomicBool>,
    top: Option<JoinHandle<Result<Ended, resex_top::term::TopError>>>,
    /// Warnings said once the dashboard has closed (a line would tear its screen).
    deferred: Vec<String>,
    last_print: Instant,
}

impl Terminal {
    /// The view for `--headless` or not; `stop` ends the run.
    pub fn new(headless: bool, stop: Arc<AtomicBool>) -> Self {
        Self {
            headless,
            dashboard: !headless && std::io::stdout().is_terminal(),
            stop,
            done: Arc::new(AtomicBool::new(false)),
            top: None,
            deferred: Vec::new(),
            last_print: Instant::now(),
        }
    }

    fn live_table(&self) -> bool {
        !self.headless && !self.dashboard
    }

    fn spawn_dashboard(&mut self, socket: &Path) {
        let opts = TopOptions {
            socket: socket.to_owned(),
            interval: Duration::from_millis(250),
            points: 4 * 600,
            until: Some(self.done.clone()),
        };
        let stop = self.stop.clone();
        self.top = Some(std::thread::spawn(move || {
            let r = resex_top::term::run(&opts);
            // Quitting the dashboard ends the demo.
            if !matches!(r, Ok(Ended::Done)) {
                stop.store(true, Ordering::Release);
            }
            r
        }));
    }
}

impl LiveView for Terminal {
    fn warn(&mut self, line: String) {
        if self.top.is_some() {
            self.deferred.push(line);
        } else {
            eprintln!("{line}");
        }
    }

    fn started(&mut self, host_id: &str, api_socket: &Path) {
        if !self.headless {
            println!(
                "resex demo: embedded host {host_id}, daemon API {}",
                api_socket.display()
            );
        }
        if self.dashboard {
            self.spawn_dashboard(api_socket);
        }
    }

    fn phase(&mut self, name: &str, secs: f64) {
        if self.live_table() {
            println!("phase {name}: {secs:.0} s");
        }
        self.last_print = Instant::now();
    }

    fn snapshot(&mut self, s: &Snapshot) {
        if self.live_table() && self.last_print.elapsed() >= Duration::from_secs(1) {
            self.last_print = Instant::now();
            print!("{}", row(s));
        }
    }

    fn finished(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(t) = self.top.take() {
            match t.join() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => eprintln!("resex demo: the dashboard failed: {e}"),
                Err(_) => eprintln!("resex demo: the dashboard panicked"),
            }
        }
        for w in self.deferred.drain(..) {
            eprintln!("{w}");
        }
    }
}

/// The live table's lines: one per VM.
fn row(s: &Snapshot) -> String {
    let mut out = String::new();
    for v in &s.vms {
        out.push_str(&format!(
            "  {:<12} cpu {:>5.1}%  cap {:>6}  MTU/s {:>8.0}  MB/s {:>7.1}  lat mean {:>8}  p99 {:>8}  rate {:>6}  bal {:>10}\n",
            v.name,
            v.cpu_pct,
            v.cap_pct.map_or("-".into(), |c| format!("{c:.0}%")),
            v.mtus_per_s,
            v.bytes_per_s / 1e6,
            v.lat_mean_us.map_or("-".into(), |x| format!("{x:.1}us")),
            v.lat_p99_us.map_or("-".into(), |x| format!("{x:.1}us")),
            v.rate.map_or("-".into(), |x| format!("{x:.2}")),
            v.balance.map_or("-".into(), |x| format!("{x:.0}")),
        ));
    }
    out
}
