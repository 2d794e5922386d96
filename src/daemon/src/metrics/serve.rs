//! The `/metrics` endpoint: a thread answering scrapes with [`super::encode`].

use super::{encode, LoopMetrics};
use resex_api::Snapshot;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint on {addr}: {why}")]
pub struct MetricsError {
    addr: String,
    why: String,
}

/// The running `/metrics` endpoint; stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The address it listens on (with the port the OS chose for port 0).
    pub addr: std::net::SocketAddr,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// prometheus-client writes OpenMetrics text (Prometheus's own scrape format since 2.x).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `/metrics` on `addr` (e.g. `127.0.0.1:9464`), reading snapshots from `snap`.
pub fn serve(
    addr: &str,
    snap: impl Fn() -> Arc<Snapshot> + Send + 'static,
    lm: LoopMetrics,
) -> Result<MetricsServer, MetricsError> {
    let err = |why: String| MetricsError {
        addr: addr.to_owned(),
        why,
    };
    let server = tiny_http::Server::http(addr).map_err(|e| err(e.to_string()))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| err("not an IP address".into()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("resexd-metrics".into())
        .spawn(move || answer_until(&flag, &server, &snap, &lm))
        .map_err(|e| err(e.to_string()))?;
    Ok(MetricsServer {
        stop,
        thread: Some(thread),
        addr: bound,
    })
}

/// Answers requests until `stop` is set (checked at least every 200 ms).
fn answer_until(
    stop: &AtomicBool,
    server: &tiny_http::Server,
    snap: &dyn Fn() -> Arc<Snapshot>,
    lm: &LoopMetrics,
) {
    while !stop.load(Ordering::Acquire) {
        let req = match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("metrics endpoint: {e}");
                continue;
            }
        };
        let path = req.url().split('?').next().unwrap_or("");
        let resp = if path == "/metrics" && *req.method() == tiny_http::Method::Get {
            let body = encode(&snap(), lm);
            tiny_http::Response::from_string(body).with_header(
                tiny_http::Header::from_bytes("Content-Type", CONTENT_TYPE)
                    .expect("a valid header"),
            )
        } else {
            tiny_http::Response::from_string("resexd: metrics are at /metrics\n")
                .with_status_code(404)
        };
        let _ = req.respond(resp);
    }
}
