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
}

/// Runs the dashboard until the user quits.
pub fn run(opts: &TopOptions) -> Result<(), TopError> {
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
    let result = (|| -> Result<(), TopError> {
        while !app.quit {
            terminal.draw(|f| ui::draw(f, &app))?;
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(e) => app.on(e),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            while let Ok(e) = rx.try_recv() {
                app.on(e);
            }
        }
        Ok(())
    })();
    ratatui::restore();
    stop.store(true, Ordering::Release);
    let _ = keys.join();
    result
}
