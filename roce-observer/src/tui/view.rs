//! The frame around the views: header, tab bar, footer and help, drawn around the selected
//! view (tui/views). No state lives here.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Style},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph, Tabs, Wrap},
};

pub use super::views::MARK;
use super::{
    app::{App, Tab},
    columns,
    history::bars_to,
    views::{HEADER_TREND, marked},
};
use crate::format;

pub fn draw(frame: &mut Frame, app: &App) {
    let view = app.tab.view();
    let screen = app.screen();
    let [header, tabs, body, pane, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(view.pane(&screen)),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    draw_header(frame, app, header);
    draw_tabs(frame, app, tabs);
    view.draw(frame, &screen, body);
    if pane.height > 0 {
        view.draw_pane(frame, &screen, pane);
    }
    draw_footer(frame, app, footer);
    if app.help {
        draw_help(frame);
    }
    if !crate::color::enabled() {
        crate::color::strip(frame.buffer_mut());
    }
}

/// What is watched, as the header names it: in full on a wide terminal when it takes at most a
/// third of it, else a capture by its file name (the counts and the replay's progress beside it
/// matter more than its directory).
fn source_label(source: &str, width: u16) -> String {
    let shown = format::terminal(source);
    if width >= 120 && shown.chars().count() <= usize::from(width / 3) {
        return shown.into_owned();
    }
    let name = std::path::Path::new(&*shown)
        .file_name()
        .map_or(shown.to_string(), |n| n.to_string_lossy().into_owned());
    format::shorten(&name, usize::from(width / 4).max(12))
}

/// The header: the traffic and the run's state on the first line, its health and what
/// watching costs on the second. Each item has a rank: higher ranks are dropped first on a
/// narrow terminal.
fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    frame.render_widget(
        Paragraph::new(vec![
            columns::line(header_traffic(app, area.width), area.width),
            columns::line(header_health(app), area.width),
        ]),
        area,
    );
}

/// Red when `n` is not zero.
fn bad(n: u64) -> Style {
    if n > 0 {
        Style::new().fg(Color::Red)
    } else {
        Style::new()
    }
}

/// What is watched and how much passes, the capture's progress, and the banners (paused,
/// interface removed, capture ended).
fn header_traffic(app: &App, width: u16) -> Vec<(Span<'static>, u8)> {
    let s = &app.snapshot.summary;
    // (item, rank): higher ranks are dropped first on a narrow terminal.
    let trend = app.history.total_bps.last(HEADER_TREND);
    let throughput = if app.ended {
        // The last interval of an ended capture is empty: its average over the time RoCE was
        // seen, labelled.
        format!(
            "avg {}",
            format::rate(crate::derived::total_active_bps(&app.snapshot))
        )
    } else {
        format::rate(app.history.total_bps.latest().unwrap_or(0) as f64)
    };
    let mut first = vec![
        (
            Span::styled(
                format!("roce-observer {}", source_label(&app.source, width)),
                Style::new().bold(),
            ),
            0,
        ),
        (Span::raw(format!("flows {}", s.flows)), 1),
        (
            Span::raw(format!("RoCE {}", format::count(s.roce_packets))),
            2,
        ),
        (Span::raw(format!("PFC {}", format::count(s.pfc_frames))), 2),
        (
            Span::raw(format!("PAUSE {}", format::count(s.pause_8023x))),
            4,
        ),
        (
            Span::styled(
                format!("{} {throughput}", bars_to(&trend, app.history.peak(&trend)),),
                Style::new().fg(Color::Cyan),
            ),
            3,
        ),
    ];
    // A capture's clock, frames and share of the file read so far: a `--realtime` replay
    // shows it advancing before its RoCE starts.
    if s.capture.is_some() || s.capture_read.is_some() || s.roce_packets == 0 {
        // Floored: 100% only once the whole file was read.
        let read = s.capture_read.map_or(String::new(), |r| {
            format!(" ({:.0}% read)", (r * 100.0).floor())
        });
        // While a file is replayed its clock and progress outrank every count but the flows.
        let replaying = s.capture_read.is_some() && !app.ended;
        first.push((
            Span::raw(format!("at {}{read}", format::clock(s.interval_end_ts))),
            if replaying { 1 } else { 5 },
        ));
        first.push((
            Span::raw(format!("frames {}", format::count(s.total_packets))),
            if replaying { 3 } else { 5 },
        ));
    }
    if app.paused {
        first.push((
            Span::styled(" PAUSED ", Style::new().black().on_yellow()),
            0,
        ));
    }
    let gone: Vec<String> = s
        .interfaces_up
        .iter()
        .filter(|(_, up)| !**up)
        .map(|(iface, _)| format::terminal_owned(iface.clone()))
        .collect();
    if !gone.is_empty() {
        first.push((
            Span::styled(
                format!(" {MARK}interface removed: {} ", gone.join(", ")),
                Style::new().white().on_red(),
            ),
            0,
        ));
    }
    if app.ended {
        // Narrow, the footer's `q quit` says how to leave: the counts keep their room.
        let banner = if width >= 100 {
            " capture ended (q to quit) "
        } else {
            " capture ended "
        };
        first.push((Span::styled(banner, Style::new().black().on_cyan()), 0));
    }
    first
}

/// Alerts, latency, what was lost or refused, and the observer's own cost.
fn header_health(app: &App) -> Vec<(Span<'static>, u8)> {
    let s = &app.snapshot.summary;
    let lat = &app.snapshot.latency.overall;
    // Problems and advice counted apart: advice alone (every flow Not-ECT) marks nothing.
    let problems = app
        .snapshot
        .alerts
        .iter()
        .filter(|a| crate::severity::Severity::of_alert(a.kind).is_problem())
        .count() as u64;
    let others = app
        .snapshot
        .alerts
        .iter()
        .filter(|a| {
            crate::severity::Severity::of_alert(a.kind) == crate::severity::Severity::Advice
        })
        .count() as u64;
    let alerts_text = if others > 0 {
        format!(
            "alerts {} +{others} advice",
            marked(problems, problems.to_string())
        )
    } else {
        format!("alerts {}", marked(problems, problems.to_string()))
    };
    let mut second = vec![
        (
            Span::styled(
                alerts_text,
                if problems == 0 {
                    Style::new()
                } else {
                    Style::new().fg(Color::Yellow)
                },
            ),
            0,
        ),
        (
            Span::raw(format!(
                "latency p50 {} p99 {}",
                format::latency(lat.p50, s.ts_resolution_ns),
                format::latency(lat.p99, s.ts_resolution_ns)
            )),
            1,
        ),
        (
            Span::styled(
                format!("malformed {}", marked(s.malformed, s.malformed.to_string())),
                bad(s.malformed),
            ),
            2,
        ),
        (
            Span::styled(
                format!(
                    "events lost {}",
                    marked(s.events_lost, s.events_lost.to_string())
                ),
                bad(s.events_lost),
            ),
            2,
        ),
        (
            Span::styled(
                format!("map full {}", marked(s.map_full, s.map_full.to_string())),
                bad(s.map_full),
            ),
            2,
        ),
    ];
    // Only runs with --log-dir have a log to lose records of; lost lines stay on a narrow
    // terminal (the other counters go first).
    if let Some(lost) = s.log_records_lost {
        second.push((
            Span::styled(
                format!("log lost {}", marked(lost, lost.to_string())),
                bad(lost),
            ),
            if lost > 0 { 1 } else { 2 },
        ));
    }
    second.push((Span::raw(format!("pmtu {}", s.pmtu)), 3));
    // What watching costs (live runs), after everything about the traffic.
    if let Some(c) = &s.observer {
        second.push((
            Span::raw(format!(
                "cpu {:.1}% rss {}",
                c.cpu_fraction * 100.0,
                format::bytes(c.rss_bytes)
            )),
            3,
        ));
        second.push((Span::raw(format!("ev/pkt {:.4}", s.events_per_packet)), 4));
        if let Some(k) = &c.kernel {
            second.push((
                Span::raw(format!(
                    "ring {:.0}% {}",
                    k.ringbuf_fill * 100.0,
                    format::program_cost(k)
                )),
                4,
            ));
        }
    }
    second
}

fn draw_tabs(frame: &mut Frame, app: &App, area: Rect) {
    let full: Vec<String> = Tab::all()
        .iter()
        .enumerate()
        .map(|(i, t)| match super::digit_for_view(i) {
            Some(d) => format!("{d} {}", t.title()),
            None => t.title().to_string(),
        })
        .collect();
    // Each tab takes its title plus one space of padding on each side, and a divider between
    // two tabs. When the full titles do not fit, the other tabs show only their key: a cut
    // title would read as a different view.
    let width: usize = full.iter().map(|t| t.chars().count() + 3).sum::<usize>() - 1;
    let titles: Vec<String> = if width <= usize::from(area.width) {
        full
    } else {
        Tab::all()
            .into_iter()
            .zip(full)
            .enumerate()
            .map(|(i, (t, title))| {
                if t == app.tab {
                    title
                } else {
                    super::digit_for_view(i).map_or_else(|| t.title().to_string(), String::from)
                }
            })
            .collect()
    };
    let selected = Some(app.tab.index());
    frame.render_widget(
        Tabs::new(titles)
            .select(selected)
            .highlight_style(Style::new().bold().fg(Color::Cyan)),
        area,
    );
}

fn draw_footer(frame: &mut Frame, app: &App, area: Rect) {
    let dim = Style::new().fg(Color::DarkGray);
    let line = if app.typing_filter {
        Line::from(vec![
            Span::raw("filter (address, QP, interface): "),
            Span::styled(format!("{}_", app.table.filter), Style::new().bold()),
            Span::styled("  enter keep  esc clear", dim),
        ])
    } else if let Some(status) = &app.status {
        Line::from(Span::raw(format::terminal_owned(status.clone())))
    } else {
        let keys = [
            ("q quit", 0),
            ("? help", 0),
            ("s sort", 1),
            ("/ filter", 1),
            ("enter detail", 2),
            ("tab views", 2),
            ("w write report", 3),
            ("j/k move", 3),
            ("p pause", 3),
            ("m merge", 3),
        ];
        columns::line(
            keys.into_iter()
                .map(|(k, rank)| (Span::styled(k, dim), rank))
                .collect(),
            area.width,
        )
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// The key list of the help: one line per key group, written from the same table the footer
/// and `action_for_key` follow.
pub const KEYS: [(&str, &str); 12] = [
    ("q, Ctrl-C", "quit"),
    ("Esc", "close help, detail or filter"),
    (
        "tab, shift-tab, h/l",
        "next / previous view (digits select one)",
    ),
    ("j/k, arrows", "move"),
    ("PgUp/PgDn", "page up / down (also Ctrl-B/Ctrl-F)"),
    ("Home/g, End/G", "first / last row"),
    ("s, S", "next sort column, reverse the order"),
    ("enter/d", "detail of the selected flow"),
    ("p/space", "pause (the history keeps recording)"),
    ("/", "filter by address, QP (0x1201, 4609) or interface"),
    ("m", "one row per QP: observation points merged"),
    (
        "w",
        "write the report (JSON) to a file in the current directory",
    ),
];

fn draw_help(frame: &mut Frame) {
    let area = frame.area();
    let mut text = vec![
        Line::from("Flows: one row per (source IP, destination IP, destination QP)"),
        Line::from("seen on one interface and direction (in = XDP, eg = TC egress)."),
        Line::from("! marks a problem: PSNs lost, NAKs, retransmissions, CNPs, CE"),
        Line::from("marks, or a problem alert; sort \"problems\" lists the worst first."),
        Line::from("Advice (not_ect, ...) is in the Alerts view, once per host pair."),
        Line::from(""),
    ];
    let views: Vec<String> = Tab::all()
        .iter()
        .enumerate()
        .map(|(i, t)| match super::digit_for_view(i) {
            Some(d) => format!("{d} {}", t.title()),
            None => t.title().to_string(),
        })
        .collect();
    text.push(Line::from(format!("views: {}", views.join("  "))));
    let key_width = KEYS
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    for (key, what) in KEYS {
        text.push(Line::from(format!("{key:<key_width$}  {what}")));
    }
    text.push(Line::from(""));
    text.push(Line::from("Every metric is defined in docs/metrics.md."));
    let w = area.width.min(74);
    let h = area
        .height
        .min(u16::try_from(text.len() + 2).unwrap_or(u16::MAX));
    let popup = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(text)
            .block(Block::bordered().title(" help (esc closes) "))
            .wrap(Wrap { trim: false }),
        popup,
    );
}
