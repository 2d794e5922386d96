//! Where the real-time demo's logs go: into a file, not between the dashboard's or the table's
//! lines, with the warnings and errors counted so that the end of the run can say how many
//! there were and where to read them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Warnings and errors logged so far.
#[derive(Debug, Default)]
pub struct Counts {
    warnings: AtomicU64,
    errors: AtomicU64,
}

struct Count(Arc<Counts>);

impl<S: Subscriber> Layer<S> for Count {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        match *event.metadata().level() {
            Level::WARN => self.0.warnings.fetch_add(1, Ordering::Relaxed),
            Level::ERROR => self.0.errors.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

/// The demo's log file and its counts.
#[derive(Debug)]
pub struct DemoLog {
    /// The file.
    pub path: PathBuf,
    counts: Arc<Counts>,
}

impl DemoLog {
    /// Sends this process's logs into `path`, truncated first; takes the filter out of
    /// `filter` only when the file could be made.
    pub fn init(path: &Path, filter: &mut Option<EnvFilter>) -> std::io::Result<DemoLog> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        let file = File::create(path)?;
        let filter = filter.take().unwrap_or_else(|| EnvFilter::new("info"));
        let path = path.to_owned();
        let counts = Arc::new(Counts::default());
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file));
        tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .with(Count(counts.clone()))
            .init();
        Ok(DemoLog { path, counts })
    }

    /// One line on what was logged; None when nothing at warning level or above was (and
    /// then, with `remove_if_quiet`, the file goes).
    pub fn summary(&self, remove_if_quiet: bool) -> Option<String> {
        let w = self.counts.warnings.load(Ordering::Relaxed);
        let e = self.counts.errors.load(Ordering::Relaxed);
        if w + e == 0 && remove_if_quiet {
            let _ = std::fs::remove_file(&self.path);
        }
        (w + e > 0).then(|| {
            format!(
                "resex demo: {w} warning{} and {e} error{} logged in {}",
                if w == 1 { "" } else { "s" },
                if e == 1 { "" } else { "s" },
                self.path.display()
            )
        })
    }
}
