//! `resex top --fleet`: one row per live host of the fleet (from etcd, through a fetch function
//! the caller gives: the etcd client is the CLI's), and a drill into one host's VMs as its last
//! summary shows them, with the fleet's ceilings on them. Keys: up/down (or j/k) choose a host,
//! Enter drills in, Esc or Backspace goes back, q quits. The state and the drawing are pure; the
//! loop is [`run`].

use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEvent, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use resex_fleet::{Allocation, FleetStatus, HostSummary, RoundReport};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// What one refresh reads from etcd.
#[derive(Debug, Clone, Default)]
pub struct FleetFrame {
    /// Hosts, leader, leases.
    pub status: FleetStatus,
    /// Every host's last summary.
    pub summaries: Vec<HostSummary>,
    /// Every host's allocation.
    pub allocations: Vec<Allocation>,
    /// The coordinator's last round.
    pub round: Option<RoundReport>,
}

/// The fleet dashboard's state.
#[derive(Debug, Default)]
pub struct FleetApp {
    /// Where etcd is (the title).
    pub endpoints: String,
    /// The last frame.
    pub frame: Option<FleetFrame>,
    /// Why the last refresh failed, if it did.
    pub lost: Option<String>,
    /// The chosen host's row.
    pub selected: usize,
    /// The host drilled into.
    pub drill: Option<String>,
    /// Quit.
    pub quit: bool,
}

/// An input to the app.
#[derive(Debug)]
pub enum FleetEvent {
    /// A refresh.
    Frame(Box<FleetFrame>),
    /// A refresh failed.
    Lost(String),
    /// A key.
    Key(KeyEvent),
}

impl FleetApp {
    /// A dashboard for `endpoints`.
    #[must_use]
    pub fn new(endpoints: String) -> Self {
        Self {
            endpoints,
            ..Self::default()
        }
    }

    fn hosts(&self) -> usize {
        self.frame.as_ref().map_or(0, |f| f.status.hosts.len())
    }

    /// Applies an event.
    pub fn on(&mut self, e: FleetEvent) {
        match e {
            FleetEvent::Frame(f) => {
                self.frame = Some(*f);
                self.lost = None;
                self.selected = self.selected.min(self.hosts().saturating_sub(1));
            }
            FleetEvent::Lost(why) => self.lost = Some(why),
            FleetEvent::Key(k) if k.kind != KeyEventKind::Release => match k.code {
                KeyCode::Char('q') => self.quit = true,
                KeyCode::Down | KeyCode::Char('j') if self.drill.is_none() => {
                    self.selected = (self.selected + 1).min(self.hosts().saturating_sub(1));
                }
                KeyCode::Up | KeyCode::Char('k') if self.drill.is_none() => {
                    self.selected = self.selected.saturating_sub(1);
                }
                KeyCode::Enter => {
                    self.drill = self
                        .frame
                        .as_ref()
                        .and_then(|f| f.status.hosts.get(self.selected))
                        .map(|h| h.host.clone());
                }
                KeyCode::Esc | KeyCode::Backspace => self.drill = None,
                _ => {}
            },
            FleetEvent::Key(_) => {}
        }
    }
}

/// The most links shown in the head.
const LINK_LINES: usize = 6;

fn ceilings_of<'a>(f: &'a FleetFrame, host: &str) -> Option<&'a Allocation> {
    f.allocations.iter().find(|a| a.host == host)
}

/// Draws the dashboard.
pub fn draw(fr: &mut Frame, app: &FleetApp) {
    let lines = head_lines(app);
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(u16::try_from(lines.len()).unwrap_or(u16::MAX)),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(fr.area());
    fr.render_widget(Paragraph::new(lines), head);
    let help = match &app.drill {
        Some(_) => "Esc back  q quit",
        None => "up/down choose  Enter drill into a host  q quit",
    };
    fr.render_widget(Paragraph::new(help).dim(), foot);
    let Some(f) = &app.frame else { return };
    match &app.drill {
        None => {
            let mut st = TableState::default().with_selected(Some(app.selected));
            fr.render_stateful_widget(hosts_table(f), body, &mut st);
        }
        Some(host) => match f.summaries.iter().find(|s| &s.host == host) {
            Some(s) => fr.render_widget(host_table(s, ceilings_of(f, host)), body),
            None => fr.render_widget(
                Paragraph::new(format!("{host}: no summary (gone from the fleet?)")),
                body,
            ),
        },
    }
}

/// The head lines: endpoints and state, hosts and coordinator, the last round, and one line
/// per link that periodic jobs cross (at most [`LINK_LINES`]).
fn head_lines(app: &FleetApp) -> Vec<Line<'static>> {
    let state = match &app.lost {
        Some(why) => format!("ETCD LOST, retrying: {why}"),
        None if app.frame.is_some() => "live".into(),
        None => "connecting".into(),
    };
    let (leader, round) = app.frame.as_ref().map_or_else(
        || ("-".to_owned(), String::new()),
        |f| {
            let leader = f.status.leader.clone().unwrap_or_else(|| "none".into());
            (leader, round_line(f))
        },
    );
    let mut lines = vec![
        Line::from(format!("resex top --fleet  {}  {state}", app.endpoints)).bold(),
        Line::raw(format!("{} hosts, coordinator {leader}", app.hosts())),
        Line::raw(round).dim(),
    ];
    let links = app.frame.as_ref().and_then(|f| f.round.as_ref());
    lines.extend(
        links
            .iter()
            .flat_map(|r| &r.links)
            .take(LINK_LINES)
            .map(|l| Line::raw(format!("link {}", l.line()))),
    );
    lines
}

/// The last allocation round, for people.
fn round_line(f: &FleetFrame) -> String {
    f.round.as_ref().map_or_else(
        || "no allocation round".into(),
        |r| {
            format!(
                "round {}: {} congested links, {} ceilings, worst link {:.0}%",
                r.round,
                r.congested,
                r.allocations,
                r.max_overload * 100.0
            )
        },
    )
}

/// A bold header row.
fn header<const N: usize>(names: [&'static str; N]) -> Row<'static> {
    Row::new(names.map(Cell::from)).style(Style::new().add_modifier(Modifier::BOLD))
}

/// The fleet's hosts, one row each.
fn hosts_table(f: &FleetFrame) -> Table<'static> {
    let rows = f.status.hosts.iter().map(|h| {
        let lease = match (h.lease_ttl_left_s, h.lease_granted_s) {
            (Some(l), Some(g)) => format!("{l}/{g}"),
            _ => "-".into(),
        };
        let ceil = ceilings_of(f, &h.host).map_or(0, |a| a.vms.len());
        let name = if h.leader {
            format!("{} *", h.host)
        } else {
            h.host.clone()
        };
        Row::new(vec![
            Cell::from(name),
            Cell::from(h.vms.to_string()),
            Cell::from(format!("{:.1}", h.tx_mbps)),
            Cell::from(format!("{:.0}%", h.link_util * 100.0)),
            Cell::from(lease),
            Cell::from(ceil.to_string()),
            Cell::from(h.metrics.clone().unwrap_or_else(|| "-".into())),
        ])
    });
    let widths = [22, 5, 9, 5, 8, 9].map(Constraint::Length);
    Table::new(rows, widths.into_iter().chain([Constraint::Min(10)]))
        .header(header([
            "host", "VMs", "tx Mb/s", "link", "lease s", "ceilings", "metrics",
        ]))
        .block(
            Block::new()
                .borders(Borders::TOP)
                .title("hosts (* coordinator)"),
        )
        .row_highlight_style(Style::new().bg(Color::Blue))
}

/// One host's VMs, with the fleet's ceilings for them.
fn host_table(s: &HostSummary, alloc: Option<&Allocation>) -> Table<'static> {
    let opt = |v: Option<f64>, unit: &str| v.map_or("-".into(), |x| format!("{x:.0}{unit}"));
    let rows = s.vms.iter().map(|v| {
        let fleet = alloc
            .and_then(|a| a.vms.iter().find(|x| x.vm == v.name))
            .map(|x| x.max_mbps);
        Row::new(vec![
            Cell::from(v.name.clone()),
            Cell::from(format!("{:.1}", v.tx_mbps)),
            Cell::from(format!("{:.0}%", v.cpu_pct)),
            Cell::from(opt(v.cap_pct, "%")),
            Cell::from(opt(v.tx_max_mbps, "")),
            Cell::from(opt(fleet, "")),
            Cell::from(opt(v.lat_p99_us, "")),
        ])
    });
    let widths = [20, 9, 6, 6, 8, 14].map(Constraint::Length);
    Table::new(rows, widths.into_iter().chain([Constraint::Min(8)]))
        .header(header([
            "VM",
            "tx Mb/s",
            "CPU",
            "cap",
            "ceiling",
            "fleet ceiling",
            "p99 us",
        ]))
        .block(Block::new().borders(Borders::TOP).title(format!(
            "{}: {} VMs, policy {}, link {:.0}%",
            s.host,
            s.vms.len(),
            s.policy,
            s.link_util * 100.0
        )))
}

/// Why the fleet dashboard could not run.
#[derive(Debug, thiserror::Error)]
pub enum FleetTopError {
    /// Not on a terminal.
    #[error("resex top --fleet needs a terminal; for scripts use `resex fleet status --json`")]
    NotATerminal,
    /// The terminal failed.
    #[error("terminal: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs the dashboard: `fetch` is called every `interval` on a thread of its own; its error is
/// shown as the reason the fleet is lost until a fetch succeeds again.
pub fn run<E: std::fmt::Display>(
    endpoints: String,
    interval: Duration,
    mut fetch: impl FnMut() -> Result<FleetFrame, E> + Send + 'static,
) -> Result<(), FleetTopError> {
    if !std::io::stdout().is_terminal() {
        return Err(FleetTopError::NotATerminal);
    }
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let collector = {
        let (tx, stop) = (tx.clone(), stop.clone());
        std::thread::Builder::new()
            .name("top-fleet".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let e = match fetch() {
                        Ok(f) => FleetEvent::Frame(Box::new(f)),
                        Err(e) => FleetEvent::Lost(e.to_string()),
                    };
                    if tx.send(e).is_err() {
                        return;
                    }
                    std::thread::sleep(interval);
                }
            })?
    };
    let keys = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("top-keys".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    if let Ok(true) = event::poll(Duration::from_millis(100)) {
                        match event::read() {
                            Ok(TermEvent::Key(k)) => {
                                if tx.send(FleetEvent::Key(k)).is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                            Err(_) => return,
                        }
                    }
                }
            })?
    };
    let mut terminal = ratatui::init();
    let mut app = FleetApp::new(endpoints);
    let result = (|| -> Result<(), FleetTopError> {
        while !app.quit {
            terminal.draw(|f| draw(f, &app))?;
            if !crate::term::pump(&rx, |e| app.on(e)) {
                break;
            }
        }
        Ok(())
    })();
    stop.store(true, Ordering::Release);
    let _ = keys.join();
    ratatui::restore();
    // The collector may be inside a slow fetch: it ends on its own.
    drop(collector);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::KeyModifiers;
    use resex_fleet::record::VmSummary;
    use resex_fleet::HostStatus;

    fn host(name: &str, leader: bool) -> HostStatus {
        HostStatus {
            host: name.into(),
            pid: 1,
            metrics: Some("127.0.0.1:9464".into()),
            backend: "kvm".into(),
            leader,
            lease: 7,
            lease_ttl_left_s: Some(4),
            lease_granted_s: Some(5),
            up_s: 10.0,
            summary_age_ms: Some(100),
            vms: 1,
            tx_mbps: 420.0,
            link_util: 0.5,
            policy: "governor".into(),
        }
    }

    fn frame() -> FleetFrame {
        let status = FleetStatus {
            hosts: vec![host("node-1", true), host("node-2", false)],
            leader: Some("node-1".into()),
            ..FleetStatus::default()
        };
        FleetFrame {
            status,
            summaries: vec![HostSummary {
                host: "node-2".into(),
                at_unix_ms: 0,
                policy: "governor".into(),
                link_util: 0.5,
                vms: vec![VmSummary {
                    name: "db-7".into(),
                    tx_mbps: 420.0,
                    cpu_pct: 80.0,
                    cap_pct: Some(50.0),
                    tx_share_mbps: None,
                    tx_max_mbps: Some(300.0),
                    lat_p99_us: Some(95.0),
                    intf_pct: None,
                    entitled_mbps: None,
                    period: None,
                }],
            }],
            allocations: vec![Allocation {
                host: "node-2".into(),
                coordinator: "node-1".into(),
                round: 3,
                at_unix_ms: 0,
                valid_ms: 5000,
                vms: vec![resex_fleet::alloc::VmAlloc {
                    vm: "db-7".into(),
                    max_mbps: 300.0,
                }],
                adaptive: Vec::new(),
            }],
            round: Some(RoundReport {
                round: 3,
                hosts: 2,
                vms: 2,
                congested: 1,
                allocations: 1,
                iterations: 4,
                converged: true,
                max_overload: 1.0,
                schedules: 0,
                links_left_out: 0,
                links: vec![resex_fleet::LinkCompat {
                    link: "tor1-up".into(),
                    jobs: ["job-a", "job-b"]
                        .iter()
                        .zip(["node-1", "node-2"])
                        .zip([0.0, 100.0])
                        .map(|((vm, host), shift)| resex_fleet::LinkJob {
                            host: host.into(),
                            vm: (*vm).into(),
                            period_ms: 200.0,
                            shift_ms: Some(shift),
                        })
                        .collect(),
                    jobs_left_out: 0,
                    score: Some(1.0),
                    score_as_given: Some(0.5),
                    why_not: None,
                }],
            }),
        }
    }

    fn screen(app: &FleetApp) -> String {
        let mut t = ratatui::Terminal::new(TestBackend::new(100, 16)).unwrap();
        t.draw(|f| draw(f, app)).unwrap();
        let b = t.backend().buffer();
        (0..b.area.height)
            .map(|y| {
                (0..b.area.width)
                    .map(|x| b[(x, y)].symbol().to_string())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn key(c: KeyCode) -> FleetEvent {
        FleetEvent::Key(KeyEvent::new(c, KeyModifiers::NONE))
    }

    #[test]
    fn one_row_per_host_then_a_drill_into_one() {
        let mut app = FleetApp::new("http://etcd:2379".into());
        assert!(screen(&app).contains("connecting"));
        app.on(FleetEvent::Frame(Box::new(frame())));
        let s = screen(&app);
        assert!(s.contains("2 hosts, coordinator node-1"), "{s}");
        assert!(s.contains("node-1 *") && s.contains("node-2"), "{s}");
        assert!(s.contains("round 3: 1 congested links, 1 ceilings"), "{s}");
        assert!(
            s.contains(
                "link tor1-up: compatibility 1.00 rotated, 0.50 as they run; 2 periodic jobs"
            ),
            "{s}"
        );
        app.on(key(KeyCode::Down));
        app.on(key(KeyCode::Down));
        assert_eq!(app.selected, 1, "stops at the last host");
        app.on(key(KeyCode::Enter));
        assert_eq!(app.drill.as_deref(), Some("node-2"));
        let s = screen(&app);
        assert!(s.contains("node-2: 1 VMs, policy governor"), "{s}");
        assert!(s.contains("db-7") && s.contains("300"), "{s}");
        app.on(FleetEvent::Lost("connection refused".into()));
        assert!(screen(&app).contains("ETCD LOST"));
        app.on(key(KeyCode::Esc));
        assert!(app.drill.is_none());
        // A host that left: drilling shows why there is nothing.
        app.on(key(KeyCode::Up));
        app.on(key(KeyCode::Enter));
        assert!(screen(&app).contains("node-1: no summary"));
        app.on(key(KeyCode::Char('q')));
        assert!(app.quit);
    }
}
