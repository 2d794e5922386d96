//! The dashboard drawn on ratatui's test backend: what an admin sees for a given state.

use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use resex_top::app::{App, Event};
use resex_top::{HostSnap, Snapshot, VmSnap};

fn snap(t: u64, victim_p99: f64) -> Snapshot {
    Snapshot {
        uptime_ms: t,
        host: HostSnap {
            backend: "local".into(),
            policy: "ioshares".into(),
            interval_ms: 1,
            link_util: 0.42,
            tick_late_p99_us: 38.0,
            ..Default::default()
        },
        vms: vec![
            VmSnap {
                id: resex_api::VmId(1),
                name: "reporting".into(),
                state: "registered".into(),
                vcpus: 1,
                cpu_pct: 12.0,
                mtus_per_s: 66_000.0,
                bytes_per_s: 65.5e6,
                lat_p50_us: Some(150.0),
                lat_p99_us: Some(victim_p99),
                balance: Some(5000.0),
                ..Default::default()
            },
            VmSnap {
                id: resex_api::VmId(2),
                name: "interfering".into(),
                state: "registered".into(),
                vcpus: 1,
                cpu_pct: 23.0,
                cap_pct: Some(17.0),
                cap_reason: Some("ioshares over its share".into()),
                cap_mechanism: "cgroup-v1".into(),
                mtus_per_s: 250_000.0,
                bytes_per_s: 256e6,
                overruns: 2,
                anomalies: 1,
                ..Default::default()
            },
        ],
    }
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| resex_top::ui::draw(f, app)).unwrap();
    let buf = t.backend().buffer().clone();
    let mut s = String::new();
    for y in 0..h {
        for x in 0..w {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}

fn key(app: &mut App, c: KeyCode) {
    app.on(Event::Key(KeyEvent::new(c, KeyModifiers::NONE)));
}

#[test]
fn table_host_line_sorting_and_faults() {
    let mut app = App::new("/run/resex/resexd.sock", 100);
    let s0 = screen(&app, 140, 30);
    assert!(s0.contains("connecting"), "{s0}");
    app.on(Event::Snapshot(Box::new(snap(1000, 300.0))));
    let s = screen(&app, 140, 30);
    assert!(
        s.contains("policy ioshares") && s.contains("link 42%"),
        "{s}"
    );
    for h in [
        "VM(n)",
        "CPU%(c)",
        "CAP%(a)",
        "MTU/s(m)",
        "P99(9)",
        "FAULTS(e)",
    ] {
        assert!(s.contains(h), "header {h} missing:\n{s}");
    }
    let (i, r) = (s.find("interfering").unwrap(), s.find("reporting").unwrap());
    assert!(i < r, "sorted by MTU/s, busiest first:\n{s}");
    assert!(s.contains("17 iosha"), "cap and who set it:\n{s}");
    assert!(s.contains("300us") && s.contains("250k"), "{s}");
    let line = s.lines().find(|l| l.contains("interfering")).unwrap();
    assert!(
        line.trim_end().ends_with('3'),
        "2 overruns + 1 anomaly: {line}"
    );
    key(&mut app, KeyCode::Char('9'));
    let s = screen(&app, 140, 30);
    assert!(
        s.find("reporting").unwrap() < s.find("interfering").unwrap(),
        "by p99:\n{s}"
    );
}

#[test]
fn detail_pane_charts_the_selected_vms_history() {
    let mut app = App::new("sock", 100);
    for k in 1..=20u64 {
        app.on(Event::Snapshot(Box::new(snap(k * 500, 100.0 * k as f64))));
    }
    key(&mut app, KeyCode::Down); // interfering -> reporting
    key(&mut app, KeyCode::Enter);
    let s = screen(&app, 140, 40);
    for t in [" MTU/s ", " latency p99 ", " cap % ", " balance (Resos) "] {
        assert!(s.contains(t), "chart {t} missing:\n{s}");
    }
    assert!(s.contains("reporting id 1"), "{s}");
    assert!(s.contains("-10s"), "the x axis spans the history:\n{s}");
    assert!(
        s.contains("2200us"),
        "p99 axis top is 1.1 x the maximum (2000 us):\n{s}"
    );
    assert!(
        s.contains('⣀')
            || s.contains('⠉')
            || s.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)),
        "a braille line is drawn"
    );
}

#[test]
fn narrow_terminal_keeps_the_important_columns() {
    let mut app = App::new("sock", 10);
    app.on(Event::Snapshot(Box::new(snap(1000, 300.0))));
    let s = screen(&app, 64, 20);
    assert!(
        s.contains("VM(n)") && s.contains("P99(9)") && s.contains("CAP%(a)"),
        "{s}"
    );
    assert!(!s.contains("ALLOT(o)") && !s.contains("WQE/s(w)"), "{s}");
}

#[test]
fn help_overlay_and_a_lost_daemon_are_shown() {
    let mut app = App::new("sock", 10);
    app.on(Event::Snapshot(Box::new(snap(1000, 300.0))));
    key(&mut app, KeyCode::Char('?'));
    let s = screen(&app, 100, 40);
    assert!(s.contains("help") && s.contains("freeze the screen"), "{s}");
    key(&mut app, KeyCode::Char('x'));
    app.on(Event::Lost("the daemon closed the connection".into()));
    let s = screen(&app, 100, 30);
    assert!(s.contains("DAEMON LOST"), "{s}");
    assert!(
        s.contains("reporting"),
        "the last snapshot stays on screen:\n{s}"
    );
}
