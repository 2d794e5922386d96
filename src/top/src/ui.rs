//! Drawing: a pure function of the app state and the frame's size.

use crate::app::{App, Conn};
use crate::batch::host_line;
use crate::columns::{si, us, Column, ALL};
use crate::history::Point;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, Paragraph, Row, Table,
    TableState, Wrap,
};
use ratatui::Frame;

/// Draws the whole screen.
pub fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    let detail = app.detail && app.selected_vm().is_some() && area.height >= 20;
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_head(f, app, head);
    if detail {
        let [table, pane] =
            Layout::vertical([Constraint::Percentage(40), Constraint::Percentage(60)]).areas(body);
        draw_table(f, app, table);
        draw_detail(f, app, pane);
    } else {
        draw_table(f, app, body);
    }
    draw_foot(f, app, foot);
    if app.help {
        draw_help(f, area);
    }
}

fn draw_head(f: &mut Frame, app: &App, area: Rect) {
    let (state, style) = match &app.conn {
        Conn::Connecting => ("connecting".to_owned(), Style::new().fg(Color::Yellow)),
        Conn::Live if app.frozen => ("FROZEN".to_owned(), Style::new().fg(Color::Cyan).bold()),
        Conn::Live => ("live".to_owned(), Style::new().fg(Color::Green)),
        Conn::Lost(why) => (
            format!("DAEMON LOST, reconnecting: {why}"),
            Style::new().fg(Color::Red).bold(),
        ),
    };
    let title = Line::from(vec![
        Span::raw("resex top ").bold(),
        Span::raw(format!("{} ", app.socket)).dim(),
        Span::styled(state, style),
    ]);
    let host = app
        .snap
        .as_ref()
        .map_or_else(|| "waiting for the first snapshot".to_owned(), host_line);
    let mut status = format!(
        "sort {} {}",
        app.sort.header(),
        if app.ascending { "asc" } else { "desc" }
    );
    if app.editing_filter || !app.filter.is_empty() {
        status.push_str(&format!(
            "  filter /{}{}",
            app.filter,
            if app.editing_filter { "_" } else { "" }
        ));
    }
    let p = Paragraph::new(vec![title, Line::raw(host), Line::raw(status).dim()]);
    f.render_widget(p, area);
}

/// The columns that fit in `width`, dropping the least important first.
pub fn fitting_columns(width: u16) -> Vec<Column> {
    let mut cols: Vec<Column> = ALL.to_vec();
    let total = |c: &[Column]| -> u16 { c.iter().map(|c| c.width() + 1).sum() };
    for level in (1..=3).rev() {
        if total(&cols) <= width {
            break;
        }
        cols.retain(|c| c.priority() < level);
    }
    cols
}

fn draw_table(f: &mut Frame, app: &App, area: Rect) {
    let cols = fitting_columns(area.width.saturating_sub(2));
    let header = Row::new(cols.iter().map(|c| {
        let mut s = Style::new().bold();
        if *c == app.sort {
            s = s.fg(Color::Yellow).add_modifier(Modifier::UNDERLINED);
        }
        Cell::from(format!("{}({})", c.header(), c.key())).style(s)
    }));
    let rows = app.rows();
    let body = rows.iter().map(|v| {
        let style = if v.state == "rejected" || v.last_error.is_some() {
            Style::new().fg(Color::Red)
        } else if v.cap_pct.is_some() {
            Style::new().fg(Color::Yellow)
        } else {
            Style::new()
        };
        Row::new(cols.iter().map(|c| Cell::from(c.cell(v)))).style(style)
    });
    let widths: Vec<Constraint> = cols.iter().map(|c| Constraint::Length(c.width())).collect();
    let table = Table::new(body, widths)
        .header(header)
        .block(
            Block::new()
                .borders(Borders::TOP)
                .title(format!(" VMs ({}) ", rows.len())),
        )
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut st = TableState::default().with_selected(
        app.selected
            .as_deref()
            .and_then(|n| rows.iter().position(|v| v.name == n)),
    );
    f.render_stateful_widget(table, area, &mut st);
}

fn chart<'a>(title: &'a str, data: &'a [(f64, f64)], fmt: fn(f64) -> String) -> Chart<'a> {
    let (x0, x1) = data
        .first()
        .zip(data.last())
        .map_or((0.0, 1.0), |(a, b)| (a.0, b.0.max(a.0 + 1.0)));
    let ymax = data.iter().map(|p| p.1).fold(0.0_f64, f64::max).max(1e-9) * 1.1;
    let ds = Dataset::default()
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(Style::new().fg(Color::Cyan))
        .data(data);
    Chart::new(vec![ds])
        .block(Block::bordered().title(title))
        .x_axis(
            Axis::default()
                .bounds([x0, x1])
                .labels([format!("-{:.0}s", x1 - x0), "now".to_owned()]),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, ymax])
                .labels(["0".to_owned(), fmt(ymax)]),
        )
}

/// The chart series of a history: (seconds, value) with missing values left out.
pub fn series(h: &[Point], f: impl Fn(&Point) -> Option<f64>) -> Vec<(f64, f64)> {
    h.iter().filter_map(|p| f(p).map(|v| (p.t, v))).collect()
}

fn draw_detail(f: &mut Frame, app: &App, area: Rect) {
    let Some(v) = app.selected_vm() else { return };
    let h: Vec<Point> = app
        .history
        .of(&v.name)
        .map(|d| d.iter().copied().collect())
        .unwrap_or_default();
    let [info, charts] = Layout::vertical([Constraint::Length(5), Constraint::Min(4)]).areas(area);
    let text = vec![
        Line::from(vec![
            Span::raw(format!("{} ", v.name)).bold(),
            Span::raw(format!(
                "id {}  {} vCPU  {} QPs  cap {} by {} ({})  reason: {}",
                v.id.0,
                v.vcpus,
                v.qps,
                v.cap_pct.map_or("none".into(), |c| format!("{c:.0}%")),
                v.cap_mechanism,
                app.snap.as_ref().map_or("", |s| s.host.policy.as_str()),
                v.cap_reason.as_deref().unwrap_or("-")
            )),
        ]),
        Line::raw(format!(
            "totals: {} MTUs, {} bytes, {} WQEs, {} reports ({} refused), errors {}, overruns {}, anomalies {}, interferer {}",
            v.mtus_total,
            si(v.tx_bytes_total as f64),
            v.wqes_total,
            v.reports,
            v.bad_reports,
            v.errors,
            v.overruns,
            v.anomalies,
            v.interferer.as_deref().unwrap_or("-"),
        )),
        Line::raw(match &v.tx_lever {
            None => "transmit: no rate lever".to_owned(),
            Some(lever) => format!(
                "transmit {}/s (share {}, max {}) by {lever}  reason: {}",
                si(v.bytes_per_s * 8.0),
                v.tx_share_bps.map_or("-".into(), |b| si(b as f64)),
                v.tx_max_bps.map_or("-".into(), |b| si(b as f64)),
                v.tx_reason.as_deref().unwrap_or("-")
            ),
        }),
        Line::raw(crate::grant::line(v)),
        Line::raw(crate::late::line(v).unwrap_or_default()).fg(Color::Yellow),
        Line::raw(crate::period::line(v).unwrap_or_default()),
        Line::raw(v.last_error.as_deref().map_or(String::new(), |e| format!("last error: {e}")))
            .fg(Color::Red),
    ];
    f.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), info);
    let mtus = series(&h, |p| Some(p.mtus));
    let p99 = series(&h, |p| p.p99_us);
    let cap = series(&h, |p| Some(p.cap.unwrap_or(100.0 * f64::from(v.vcpus))));
    let bal = series(&h, |p| p.balance);
    let [top, bottom] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(charts);
    let [a, b] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(top);
    let [c, d] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(bottom);
    f.render_widget(chart(" MTU/s ", &mtus, si), a);
    f.render_widget(chart(" latency p99 ", &p99, us), b);
    f.render_widget(chart(" cap % ", &cap, |x| format!("{x:.0}")), c);
    f.render_widget(chart(" balance (Resos) ", &bal, si), d);
}

fn draw_foot(f: &mut Frame, app: &App, area: Rect) {
    let keys = if app.editing_filter {
        "type a name filter, Enter keep, Esc clear"
    } else {
        "q quit  ? help  ↑↓ select  Enter detail  / filter  f freeze  column keys sort (again: reverse)"
    };
    f.render_widget(Paragraph::new(keys).dim(), area);
}

/// The help text.
pub fn help_lines() -> Vec<String> {
    let mut l = vec![
        "resex top: each VM's CPU, cap, Resos, RDMA traffic and reported latency".to_owned(),
        String::new(),
        "q / Ctrl-C  quit".to_owned(),
        "?           this help (any key closes it)".to_owned(),
        "Up/Down j/k select a VM; PgUp/PgDn/Home/End".to_owned(),
        "Enter       detail pane with charts (MTU/s, p99, cap, balance)".to_owned(),
        "/           filter by name; Esc clears".to_owned(),
        "f / space   freeze the screen".to_owned(),
        String::new(),
        "sort keys (press again to reverse):".to_owned(),
    ];
    for c in ALL {
        l.push(format!("  {}  {}", c.key(), c.header()));
    }
    l
}

fn draw_help(f: &mut Frame, area: Rect) {
    let lines = help_lines();
    let h = u16::try_from(lines.len() + 2)
        .unwrap_or(u16::MAX)
        .min(area.height);
    let w = 70.min(area.width);
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    f.render_widget(Clear, r);
    let p = Paragraph::new(lines.into_iter().map(Line::raw).collect::<Vec<_>>())
        .block(Block::bordered().title(" help "));
    f.render_widget(p, r);
}
