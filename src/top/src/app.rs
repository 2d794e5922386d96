//! The dashboard's one state, changed only by snapshots, connection news and keys.

use crate::columns::Column;
use crate::history::History;
use crate::{Snapshot, VmSnap};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// The connection to the daemon as the dashboard shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum Conn {
    /// Not yet connected.
    Connecting,
    /// Snapshots arrive.
    Live,
    /// The daemon went away (why); the collector keeps trying.
    Lost(String),
}

/// What feeds the app.
#[derive(Debug)]
pub enum Event {
    /// A new snapshot.
    Snapshot(Box<Snapshot>),
    /// The connection was lost (or could not be made).
    Lost(String),
    /// A key.
    Key(KeyEvent),
}

/// The dashboard's state.
#[derive(Debug)]
pub struct App {
    /// The socket shown in the title.
    pub socket: String,
    /// The snapshot on screen.
    pub snap: Option<Snapshot>,
    /// Per-VM history for the charts.
    pub history: History,
    /// Connection state.
    pub conn: Conn,
    /// Sort column.
    pub sort: Column,
    /// Sort ascending (numbers default to descending, names to ascending).
    pub ascending: bool,
    /// Only VMs whose name contains this.
    pub filter: String,
    /// The filter is being typed.
    pub editing_filter: bool,
    /// The selected VM (by name: rows move as they sort).
    pub selected: Option<String>,
    /// The detail pane is open.
    pub detail: bool,
    /// Updates are ignored (the screen holds still).
    pub frozen: bool,
    /// The help overlay is open.
    pub help: bool,
    /// The user asked to quit.
    pub quit: bool,
}

impl App {
    /// A dashboard for `socket`, keeping `points` history points per VM.
    pub fn new(socket: impl Into<String>, points: usize) -> Self {
        Self {
            socket: socket.into(),
            snap: None,
            history: History::new(points),
            conn: Conn::Connecting,
            sort: Column::Mtus,
            ascending: false,
            filter: String::new(),
            editing_filter: false,
            selected: None,
            detail: false,
            frozen: false,
            help: false,
            quit: false,
        }
    }

    /// Applies one event.
    pub fn on(&mut self, e: Event) {
        match e {
            Event::Snapshot(s) => {
                self.conn = Conn::Live;
                if !self.frozen {
                    self.history.push(&s);
                    self.snap = Some(*s);
                    if self.selected.is_none() {
                        self.selected = self.rows().first().map(|v| v.name.clone());
                    }
                }
            }
            Event::Lost(why) => self.conn = Conn::Lost(why),
            Event::Key(k) => self.on_key(k),
        }
    }

    /// The VMs to show: filtered, sorted.
    pub fn rows(&self) -> Vec<&VmSnap> {
        let Some(s) = &self.snap else {
            return Vec::new();
        };
        let f = self.filter.to_lowercase();
        let mut v: Vec<&VmSnap> = s
            .vms
            .iter()
            .filter(|v| f.is_empty() || v.name.to_lowercase().contains(&f))
            .collect();
        v.sort_by(|a, b| {
            let o = self.sort.compare(a, b);
            if self.ascending {
                o
            } else {
                o.reverse()
            }
        });
        v
    }

    /// The selected VM's row, if it is shown.
    pub fn selected_vm(&self) -> Option<&VmSnap> {
        let name = self.selected.as_deref()?;
        self.rows().into_iter().find(|v| v.name == name)
    }

    fn move_selection(&mut self, by: isize) {
        let rows = self.rows();
        if rows.is_empty() {
            return;
        }
        let cur = self
            .selected
            .as_deref()
            .and_then(|n| rows.iter().position(|v| v.name == n));
        let next = match cur {
            None => 0,
            Some(i) => i.saturating_add_signed(by).min(rows.len() - 1),
        };
        self.selected = Some(rows[next].name.clone());
    }

    fn on_key(&mut self, k: KeyEvent) {
        if k.kind == KeyEventKind::Release {
            return;
        }
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            self.quit = true;
            return;
        }
        if self.editing_filter {
            match k.code {
                KeyCode::Enter => self.editing_filter = false,
                KeyCode::Esc => {
                    self.editing_filter = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if self.filter.len() < 64 => self.filter.push(c),
                _ => {}
            }
            return;
        }
        if self.help {
            // Any key closes the help; q still quits.
            self.help = false;
            if k.code == KeyCode::Char('q') {
                self.quit = true;
            }
            return;
        }
        match k.code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Char('?') | KeyCode::F(1) => self.help = true,
            KeyCode::Char('/') => self.editing_filter = true,
            KeyCode::Char('f') | KeyCode::Char(' ') => self.frozen = !self.frozen,
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home => self.move_selection(isize::MIN / 2),
            KeyCode::End => self.move_selection(isize::MAX / 2),
            KeyCode::Enter => self.detail = !self.detail,
            KeyCode::Esc => {
                if self.detail {
                    self.detail = false;
                } else {
                    self.filter.clear();
                }
            }
            KeyCode::Char(c) => {
                if let Some(col) = Column::by_key(c) {
                    if col == self.sort {
                        self.ascending = !self.ascending;
                    } else {
                        self.sort = col;
                        self.ascending = matches!(col, Column::Name | Column::State);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: KeyCode) -> Event {
        Event::Key(KeyEvent::new(c, KeyModifiers::NONE))
    }

    fn snap() -> Snapshot {
        let vm = |n: &str, m: f64| VmSnap {
            name: n.into(),
            mtus_per_s: m,
            ..Default::default()
        };
        Snapshot {
            uptime_ms: 1000,
            vms: vec![vm("alpha", 10.0), vm("beta", 30.0), vm("gamma", 20.0)],
            ..Default::default()
        }
    }

    fn names(a: &App) -> Vec<String> {
        a.rows().iter().map(|v| v.name.clone()).collect()
    }

    #[test]
    fn sorts_filters_selects_freezes_and_quits() {
        let mut a = App::new("sock", 10);
        a.on(Event::Snapshot(Box::new(snap())));
        assert_eq!(names(&a), ["beta", "gamma", "alpha"], "MTU/s, descending");
        assert_eq!(a.selected.as_deref(), Some("beta"));
        a.on(key(KeyCode::Char('n')));
        assert_eq!(names(&a), ["alpha", "beta", "gamma"]);
        a.on(key(KeyCode::Char('n')));
        assert_eq!(names(&a), ["gamma", "beta", "alpha"], "same key reverses");
        a.on(key(KeyCode::Down));
        assert_eq!(a.selected.as_deref(), Some("alpha"));
        a.on(key(KeyCode::Char('/')));
        for c in "am".chars() {
            a.on(key(KeyCode::Char(c)));
        }
        a.on(key(KeyCode::Enter));
        assert_eq!(names(&a), ["gamma"]);
        a.on(key(KeyCode::Esc));
        assert_eq!(names(&a).len(), 3);
        a.on(key(KeyCode::Char('f')));
        let mut s = snap();
        s.vms.clear();
        a.on(Event::Snapshot(Box::new(s)));
        assert_eq!(names(&a).len(), 3, "frozen");
        a.on(key(KeyCode::Char('?')));
        assert!(a.help);
        a.on(key(KeyCode::Char('x')));
        assert!(!a.help && !a.quit);
        a.on(Event::Lost("gone".into()));
        assert_eq!(a.conn, Conn::Lost("gone".into()));
        a.on(key(KeyCode::Char('q')));
        assert!(a.quit);
    }
}
