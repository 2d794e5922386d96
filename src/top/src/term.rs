//! The interactive loop: a collector thread and a key thread feed one channel; the app state
//! changes only here; the screen is redrawn from it. `ratatui::init` puts the terminal in raw
//! mode on the alternate screen and installs a panic hook that restores it.

use crate::app::{App, Event};
use crate::{collect, ui};
use ratatui::crossterm::event::{self, Event as TermEvent};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Why the dashboard stopped.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// Not on a terminal.
    #[error("resex top needs a terminal; for scripts use `resex top --batch --json|--csv` or `resex status`")]
    NotATerminal,
    /// The terminal failed.
    #[error("terminal: {0}")]
    Io(#[from] std::io::Error),
}

/// Dashboard settings.
#[derive(Debug, Clone)]
pub struct TopOptions {
    /// The daemon's API socket.
    pub socket: PathBuf,
    /// Snapshot interval.
    pub interval: Duration,
    /// History points kept per VM (at `interval`, the charts' span).
    pub points: usize,
    /// Closes the dashboard when set (a program that runs it while it works, like `resex demo`).
    pub until: Option<Arc<AtomicBool>>,
}

/// How the dashboard ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The user quit.
    User,
    /// `until` was set.
    Done,
}

/// Runs the dashboard until the user quits (or `until` is set).
pub fn run(opts: &TopOptions) -> Result<Ended, TopError> {
    if !std::io::stdout().is_terminal() {
        return Err(TopError::NotATerminal);
    }
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let _collector = collect::spawn(opts.socket.clone(), opts.interval, tx.clone(), stop.clone())?;
    let keys = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("top-keys".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match event::poll(Duration::from_millis(100)) {
                        Ok(true) => match event::read() {
                            Ok(TermEvent::Key(k)) => {
                                if tx.send(Event::Key(k)).is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {} // resize and the rest: the next draw adapts
                            Err(_) => return,
                        },
                        Ok(false) => {}
                        Err(_) => return,
                    }
                }
            })?
    };
    let mut terminal = ratatui::init();
    let mut app = App::new(opts.socket.display().to_string(), opts.points);
    let done = || {
        opts.until
            .as_ref()
            .is_some_and(|u| u.load(Ordering::Acquire))
    };
    let result = (|| -> Result<Ended, TopError> {
        while !app.quit && !done() {
            terminal.draw(|f| ui::draw(f, &app))?;
            if !pump(&rx, |e| app.on(e)) {
                break;
            }
        }
        Ok(if app.quit { Ended::User } else { Ended::Done })
    })();
    // The key thread stops first, while the terminal is still raw: a read it started after
    // the restore would wait for a whole line (canonical mode) and hold the exit.
    stop.store(true, Ordering::Release);
    let _ = keys.join();
    ratatui::restore();
    result
}

/// Hands `on` the next event (waiting up to 250 ms, the redraw period), then every event
/// already queued; false when the senders are gone.
pub(crate) fn pump<E>(rx: &mpsc::Receiver<E>, mut on: impl FnMut(E)) -> bool {
    match rx.recv_timeout(Duration::from_millis(250)) {
        Ok(e) => on(e),
        Err(mpsc::RecvTimeoutError::Timeout) => {}
        Err(mpsc::RecvTimeoutError::Disconnected) => return false,
    }
    while let Ok(e) = rx.try_recv() {
        on(e);
    }
    true
}
