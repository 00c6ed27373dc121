//! Views: each draws part of the [`App`]'s snapshot. No state lives here.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph, Sparkline, Table, TableState, Tabs, Wrap},
};

use super::{
    app::{App, Tab, nak_total},
    columns::{self, Column},
    history::{DEPTH, FlowHistory, bars, bars_to, pfc_id},
};
use crate::{
    engine::snapshot::{FlowSnapshot, QpOwner},
    format,
};

pub(super) const HIGHLIGHT: Style = Style::new().add_modifier(Modifier::REVERSED);

/// Problems carry this symbol as well as a colour, so they stand out without colour too
/// (NO_COLOR, `--color never`, monochrome terminals): before each count that is a problem, and
/// in the first column of a flow that has one (or that an alert names).
pub const MARK: &str = "!";

/// "comm/pid", or the kernel module's name for a kernel QP.
fn owner_label(o: &QpOwner) -> String {
    let comm = format::terminal(&o.comm);
    match o.pid {
        Some(pid) => format!("{comm}/{pid}"),
        None => comm.into_owned(),
    }
}

/// Intervals in the header's throughput trend and the PFC view's pause trend.
const HEADER_TREND: usize = 16;

/// `text`, marked as a problem when `n` is not zero.
fn marked(n: u64, text: String) -> String {
    if n > 0 { format!("{MARK}{text}") } else { text }
}

pub fn draw(frame: &mut Frame, app: &App) {
    let detail_height = if app.detail && app.tab == Tab::Flows {
        12
    } else {
        0
    };
    let [header, tabs, body, detail, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(detail_height),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    draw_header(frame, app, header);
    draw_tabs(frame, app, tabs);
    match app.tab {
        Tab::Flows => draw_flows(frame, app, body),
        Tab::Pfc => draw_pfc(frame, app, body),
        Tab::Ecmp => draw_ecmp(frame, app, body),
        Tab::Alerts => draw_alerts(frame, app, body),
        Tab::Nic => draw_nic(frame, app, body),
        Tab::Mirror => draw_mirror(frame, app, body),
        Tab::Steps => super::diagnosis::draw_steps(frame, app, body),
        Tab::Paths => super::diagnosis::draw_paths(frame, app, body),
        Tab::Storm => super::diagnosis::draw_storm(frame, app, body),
    }
    if detail_height > 0 {
        draw_detail(frame, app, detail);
    }
    draw_footer(frame, app, footer);
    if app.help {
        draw_help(frame);
    }
    if !crate::color::enabled() {
        crate::color::strip(frame.buffer_mut());
    }
}

/// What is watched, as the header names it: in full on a wide terminal, a capture by its file
/// name on a narrow one (the counts beside it matter more than its directory).
fn source_label(source: &str, width: u16) -> String {
    let shown = format::terminal(source);
    if width >= 120 {
        return shown.into_owned();
    }
    let name = std::path::Path::new(&*shown)
        .file_name()
        .map_or(shown.to_string(), |n| n.to_string_lossy().into_owned());
    format::shorten(&name, usize::from(width / 4).max(12))
}

fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    let s = &app.snapshot.summary;
    let lat = &app.snapshot.latency.overall;
    let bad = |n: u64| {
        if n > 0 {
            Style::new().fg(Color::Red)
        } else {
            Style::new()
        }
    };
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
                format!("roce-observer {}", source_label(&app.source, area.width)),
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
    // A capture's clock and frames read so far: a `--realtime` replay shows it advancing
    // before its RoCE starts.
    if s.capture.is_some() || s.roce_packets == 0 {
        first.push((
            Span::raw(format!(
                "at {}  frames {}",
                format::clock(s.interval_end_ts),
                format::count(s.total_packets)
            )),
            5,
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
        first.push((
            Span::styled(
                " capture ended (q to quit) ",
                Style::new().black().on_cyan(),
            ),
            0,
        ));
    }
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
                format::ns(lat.p50),
                format::ns(lat.p99)
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
    frame.render_widget(
        Paragraph::new(vec![
            columns::line(first, area.width),
            columns::line(second, area.width),
        ]),
        area,
    );
}

fn draw_tabs(frame: &mut Frame, app: &App, area: Rect) {
    let full: Vec<String> = Tab::ALL
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
        Tab::ALL
            .iter()
            .zip(full)
            .enumerate()
            .map(|(i, (t, title))| {
                if *t == app.tab {
                    title
                } else {
                    super::digit_for_view(i).map_or_else(|| t.title().to_string(), String::from)
                }
            })
            .collect()
    };
    let selected = Tab::ALL.iter().position(|t| *t == app.tab);
    frame.render_widget(
        Tabs::new(titles)
            .select(selected)
            .highlight_style(Style::new().bold().fg(Color::Cyan)),
        area,
    );
}

pub(super) fn table_state(selected: usize) -> TableState {
    TableState::default().with_selected(Some(selected))
}

/// The rows a table `visible` rows high shows of `rows` with `selected` highlighted, scrolled as
/// ratatui scrolls a fresh [`TableState`]: from the top until the selection passes the last
/// row, then with the selection on the last row. Only these rows are formatted (and measured
/// for column widths): formatting all of them took ~0.9 s per frame at 100,000 flows
/// (kernel-bench's user-space table, `+TUI ms`).
pub(super) fn window(selected: usize, rows: usize, visible: usize) -> std::ops::Range<usize> {
    let visible = visible.max(1);
    let end = (selected + 1).max(visible).min(rows);
    end.saturating_sub(visible)..end
}

fn draw_flows(frame: &mut Frame, app: &App, area: Rect) {
    let warn = |n: u64| {
        if n > 0 {
            Style::new().fg(Color::Yellow)
        } else {
            Style::new()
        }
    };
    let plain = Style::new();
    // Ranks: what stays on a narrow terminal (0 always; higher ranks dropped first). The
    // reasons a row is marked (gaps, NAKs, CNPs, CE) stay longer than its rate.
    let mut mark = Column::new(" ", 0);
    let mut flow = Column::new("source -> destination", 0);
    let mut qp = Column::new("QP", 1);
    let mut peer = Column::new("peer", 9);
    let mut seen = Column::new("seen", 6);
    let mut pkts = Column::new("pkts", 7);
    // After a capture ends there is no current interval: the rate over each flow's active
    // time stands in, labelled (docs/metrics.md, "rate").
    let mut rate = Column::new(if app.ended { "avg rate" } else { "rate" }, 4);
    let mut gaps = Column::new("gaps/miss", 2);
    let mut retx = Column::new("retx", 3);
    let mut nak = Column::new("NAK", 2);
    let mut cnp = Column::new("CNP", 3);
    let mut ce = Column::new("CE", 3);
    let mut p50 = Column::new("p50", 8);
    let mut p99 = Column::new("p99", 5);
    let mut process = Column::new("process", 5);
    // Wide terminals spell the direction out (`ingress`), narrow ones abbreviate it (`in`).
    let full_direction = area.width >= 150;
    // The area less its top border (the title) and the header row.
    let resolution = crate::derived::timestamp_resolution_ns(&app.snapshot);
    let shown = window(
        app.selected,
        app.order.len(),
        usize::from(area.height.saturating_sub(2)),
    );
    let selected = app.selected.saturating_sub(shown.start);
    for i in &app.order[shown] {
        let Some(f) = app.flows().get(*i) else {
            continue;
        };
        let problem = app.problem.get(*i).copied().unwrap_or(false);
        mark.push(
            if problem { MARK } else { "" }.into(),
            Style::new().fg(Color::Red).bold(),
        );
        flow.push(format!("{} -> {}", f.src_ip, f.dst_ip), plain);
        qp.push(format::qp(f.dst_qp), plain);
        peer.push(f.peer_qp.map_or("-".into(), format::qp), plain);
        // The observation point: where it was attached, and for a flow inside switch mirrors
        // which switch mirrored it (one row per mirror source).
        let via = f
            .mirror
            .as_ref()
            .map_or(String::new(), |m| format!(" {}", m.compact()));
        let direction = if full_direction {
            f.direction
        } else {
            &f.direction[..2.min(f.direction.len())]
        };
        seen.push(format!("{}/{direction}{via}", f.iface), plain);
        pkts.push(format::count(f.packets), plain);
        rate.push(
            if app.ended {
                crate::derived::active_bps(f).map_or("-".into(), format::rate)
            } else {
                format::rate(f.rate_bps)
            },
            plain,
        );
        gaps.push(
            marked(f.psn_gaps, format!("{}/{}", f.psn_gaps, f.psn_missing)),
            warn(f.psn_gaps),
        );
        retx.push(
            marked(f.retransmits, f.retransmits.to_string()),
            warn(f.retransmits),
        );
        let naks = nak_total(f);
        nak.push(marked(naks, naks.to_string()), warn(naks));
        cnp.push(marked(f.cnp, f.cnp.to_string()), warn(f.cnp));
        ce.push(marked(f.ecn_ce, f.ecn_ce.to_string()), warn(f.ecn_ce));
        p50.push(format::latency(f.rtt_ns.p50, resolution), plain);
        p99.push(format::latency(f.rtt_ns.p99, resolution), plain);
        process.push(f.owner.as_deref().map_or(String::new(), owner_label), plain);
    }
    let mut all = vec![
        mark, flow, qp, peer, seen, pkts, rate, gaps, retx, nak, cnp, ce, p50, p99,
    ];
    if let Some(title) = app.sort.column()
        && let Some(c) = all.iter_mut().find(|c| c.title == title)
    {
        c.sorted(app.ascending);
    }
    // Owners come from RDMA netlink on hosts with RDMA devices; elsewhere no column.
    if !app.snapshot.qp_owners.is_empty() {
        all.push(process);
    }
    let (header, rows, widths) = columns::table(all, area.width);
    let mut title = format!(
        " flows by {}{} (s/S to change) ",
        app.sort.name(),
        if app.ascending {
            ", smallest first"
        } else {
            ""
        }
    );
    if app.merged {
        title.push_str("one row per QP (m to split) ");
    }
    if !app.filter.is_empty() {
        title.push_str(&format!("matching \"{}\" ", app.filter));
        if app.order.is_empty() {
            title.push_str(&format!("{MARK}no match (esc clears) "));
        }
    }
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(title))
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, area, &mut table_state(selected));
}

/// The selected flow's series over the last intervals, one row each: label, then a sparkline.
fn draw_charts(frame: &mut Frame, app: &App, f: &FlowSnapshot, h: &FlowHistory, area: Rect) {
    let ce_cnp: Vec<u64> =
        h.ce.last(DEPTH)
            .iter()
            .zip(h.cnp.last(DEPTH))
            .map(|(ce, cnp)| ce + cnp)
            .collect();
    // After the input ended the last interval is empty: the flow's average over its active
    // time, labelled, instead of `0 b/s`.
    let rate_label = match (app.ended, crate::derived::active_bps(f)) {
        (true, Some(avg)) => format!("avg {}", format::rate(avg)),
        _ => format!(
            "rate {}",
            format::rate(h.rate_bps.latest().unwrap_or(0) as f64)
        ),
    };
    let rows = [
        (rate_label, h.rate_bps.last(DEPTH), Color::Cyan),
        (
            format!(
                "CE/CNP {}/{}",
                h.ce.latest().unwrap_or(0),
                h.cnp.latest().unwrap_or(0)
            ),
            ce_cnp,
            Color::Yellow,
        ),
        (
            format!("retx {}", h.retransmits.latest().unwrap_or(0)),
            h.retransmits.last(DEPTH),
            Color::Red,
        ),
        (
            format!("p99 {}", format::ns(h.p99_ns.latest().filter(|v| *v > 0))),
            h.p99_ns.last(DEPTH),
            Color::Magenta,
        ),
    ];
    let maxima = [
        |v: u64| format::rate(v as f64),
        |v: u64| v.to_string(),
        |v: u64| v.to_string(),
        |v: u64| format::ns(Some(v)),
    ];
    let areas = Layout::vertical([Constraint::Length(1); 4]).split(area);
    for (((label, values, color), row), max_text) in rows.into_iter().zip(areas.iter()).zip(maxima)
    {
        // The scale: the largest sample shown (a stub first interval excluded), labelled.
        let peak = app.history.peak(&values);
        let scale = format!(" max {}", max_text(peak));
        let [name, chart, max] = Layout::horizontal([
            Constraint::Length(20),
            Constraint::Min(1),
            Constraint::Length(u16::try_from(scale.chars().count()).unwrap_or(12)),
        ])
        .areas(*row);
        // The newest samples that fit (oldest on the left).
        let width = usize::from(chart.width);
        let shown = &values[values.len().saturating_sub(width)..];
        frame.render_widget(Paragraph::new(label), name);
        frame.render_widget(
            Sparkline::default()
                .data(shown.iter().map(|v| (*v).min(peak)))
                .max(peak.max(1))
                .style(Style::new().fg(color)),
            chart,
        );
        frame.render_widget(
            Paragraph::new(scale).style(Style::new().fg(Color::DarkGray)),
            max,
        );
    }
}

fn draw_detail(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::new()
        .borders(Borders::TOP)
        .title(" detail (per interval) ");
    let Some(f) = app.selected_flow() else {
        frame.render_widget(Paragraph::new("no flow selected").block(block), area);
        return;
    };
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [charts, area] = Layout::vertical([Constraint::Length(4), Constraint::Min(0)]).areas(inner);
    if let Some(h) = app.history.of(f, app.merged) {
        draw_charts(frame, app, f, &h, charts);
    }
    let opcodes = f
        .opcodes
        .0
        .iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let n = &f.naks;
    let lines = vec![
        Line::from(format!(
            "{} -> {} QP {} ({}) on {} {}; peer QP {}",
            f.src_ip,
            f.dst_ip,
            format::qp(f.dst_qp),
            f.transport.unwrap_or("CNP only"),
            format::terminal(&f.iface),
            f.direction,
            f.peer_qp.map_or("unknown".into(), format::qp),
        )),
        Line::from(format!(
            "packets {}  bytes {}  DSCP {}  PCP {}  UDP source ports {}",
            f.packets,
            f.bytes,
            f.dscp,
            f.pcp.map_or("untagged".into(), |p| p.to_string()),
            f.udp_src_ports
        )),
        Line::from(format!(
            "lost {} PSNs in {} events  retransmits: requests {}, READ responses {}",
            f.psn_missing, f.psn_gaps, f.req_retransmits, f.resp_retransmits
        )),
        Line::from(format!(
            "reordered {} (at most {} PSNs late; by distance {})  NAKs caused by reordering {}  holes open {}",
            f.reordered,
            f.reorder_distance_max,
            roce_observer_common::sequence::DISTANCE_NAMES
                .iter()
                .zip(f.reorder_distance.buckets())
                .map(|(name, n)| format!("{name}:{n}"))
                .collect::<Vec<_>>()
                .join(" "),
            f.reorder_naks,
            f.psn_holes
        )),
        Line::from(format!(
            "ACKs {}  NAKs: {}",
            f.acks,
            n.by_class()
                .iter()
                .map(|(class, count)| format!("{class} {count}"))
                .collect::<Vec<_>>()
                .join(" ")
        )),
        Line::from(format!(
            "CNPs {}  ECN CE {}  ECT {}  latency n={} min {} p50 {} p90 {} p99 {} p99.9 {} max {}",
            f.cnp,
            f.ecn_ce,
            f.ecn_ect,
            f.rtt_ns.count,
            format::ns(f.rtt_ns.min),
            format::ns(f.rtt_ns.p50),
            format::ns(f.rtt_ns.p90),
            format::ns(f.rtt_ns.p99),
            format::ns(f.rtt_ns.p999),
            format::ns(f.rtt_ns.max),
        )),
        Line::from(format!("opcodes: {opcodes}")),
    ];
    let mut lines = lines;
    if let Some(o) = &f.owner {
        let psn = |p: Option<u32>| p.map_or("-".into(), |v| v.to_string());
        lines.insert(
            1,
            Line::from(format!(
                "owner {} on {}/{} local QP {} ({}); NIC SQ PSN {} RQ PSN {}",
                owner_label(o),
                format::terminal(&o.device),
                o.port.map_or("-".into(), |p| p.to_string()),
                format::qp(o.lqpn),
                if o.gone {
                    "gone"
                } else {
                    o.state.unwrap_or("?")
                },
                psn(o.sq_psn),
                psn(o.rq_psn),
            )),
        );
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), area);
}

fn draw_pfc(frame: &mut Frame, app: &App, area: Rect) {
    let plain = Style::new();
    let mut iface = Column::new("interface", 1);
    let mut mac = Column::new("source MAC", 0);
    let mut prio = Column::new("prio", 0);
    let mut xoff = Column::new("XOFF", 3);
    let mut xon = Column::new("XON", 4);
    let mut quanta = Column::new("quanta", 5);
    let mut paused = Column::new("paused", 2);
    let mut fraction = Column::new("fraction", 1);
    let mut storm = Column::new("storm", 0);
    let mut trend = Column::new("paused per interval", 3);
    for p in &app.snapshot.pfc {
        let series = app.history.pfc_paused_us.get(&pfc_id(p));
        trend.push(
            series.map_or(String::new(), |s| {
                format!(
                    "{:<width$} {}",
                    bars(&s.last(HEADER_TREND)),
                    format::us(s.latest().unwrap_or(0) as f64),
                    width = HEADER_TREND
                )
            }),
            Style::new().fg(Color::Yellow),
        );
        iface.push(format!("{}/{}", p.iface, &p.direction[..2]), plain);
        mac.push(p.src_mac.clone(), plain);
        prio.push(p.priority.map_or("link".into(), |v| v.to_string()), plain);
        xoff.push(p.pause_frames.to_string(), plain);
        xon.push(p.xon_frames.to_string(), plain);
        quanta.push(p.pause_quanta.to_string(), plain);
        paused.push(format::us(p.paused_us), plain);
        fraction.push(format!("{:.1}%", p.paused_fraction * 100.0), plain);
        storm.push(
            if p.storm { "STORM" } else { "" }.into(),
            Style::new().fg(Color::Red).bold(),
        );
    }
    let (header, rows, widths) = columns::table(
        vec![
            iface, mac, prio, xoff, xon, quanta, paused, fraction, trend, storm,
        ],
        area.width,
    );
    let title = format!(
        " PFC / PAUSE per source and priority (quanta at {} Gb/s) ",
        app.snapshot.summary.link_gbps
    );
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(title))
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, area, &mut table_state(app.selected));
}

fn draw_ecmp(frame: &mut Frame, app: &App, area: Rect) {
    let ecmp = &app.snapshot.ecmp;
    let [top, bottom] = Layout::vertical([Constraint::Length(4), Constraint::Min(3)]).areas(area);
    let mut lines = vec![Line::from(format!(
        "measured over {} observation points: max/mean {:.2}, Jain {:.3}",
        ecmp.measured.paths.len(),
        ecmp.measured.imbalance,
        ecmp.measured.jain
    ))];
    match &ecmp.modelled {
        Some(m) => lines.push(Line::from(format!(
            "modelled {} paths ({}, seed {}): max/mean {:.2}, Jain {:.3}, {}",
            m.paths,
            m.hash.name(),
            m.seed,
            m.imbalance,
            m.jain,
            format::plural(
                m.collisions.len() as u64,
                "colliding path",
                "colliding paths"
            )
        ))),
        None => lines.push(Line::from(
            "modelled view off (pass --ecmp-paths N to hash flows onto N uplinks)",
        )),
    }
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::TOP).title(" ECMP ")),
        top,
    );
    let plain = Style::new();
    let mut pair = Column::new("host pair", 0);
    let mut bytes = Column::new("bytes", 2);
    let mut qps = Column::new("QPs", 0);
    let mut sports = Column::new("UDP sports", 0);
    let mut busiest = Column::new("busiest 5-tuple", 1);
    for e in &ecmp.entropy {
        pair.push(format!("{} -> {}", e.src_ip, e.dst_ip), plain);
        bytes.push(format::bytes(e.bytes), plain);
        qps.push(e.qps.to_string(), plain);
        sports.push(e.udp_src_ports.to_string(), plain);
        busiest.push(format!("{:.0}%", e.busiest_tuple_share * 100.0), plain);
    }
    let (header, rows, widths) =
        columns::table(vec![pair, bytes, qps, sports, busiest], bottom.width);
    let table = Table::new(rows, widths)
        .header(header)
        .block(
            Block::new()
                .borders(Borders::TOP)
                .title(" entropy per host pair "),
        )
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, bottom, &mut table_state(app.selected));
}

/// The Alerts view's rows: alert groups by kind, worst first (crate::severity), each group's
/// lines under it; advice is one line per host pair or observation point.
pub(super) fn alert_rows(app: &App) -> Vec<AlertRow<'_>> {
    let mut rows = Vec::new();
    for g in crate::severity::group_alerts(&app.snapshot.alerts) {
        rows.push(AlertRow {
            kind: g.kind,
            severity: g.severity,
            count: g.count,
            subject: format::plural(g.alerts as u64, "alert", "alerts"),
            reason: None,
        });
        for e in g.entries {
            rows.push(AlertRow {
                kind: g.kind,
                severity: g.severity,
                count: e.count,
                subject: format!("  {}", e.subject.text()),
                reason: Some(&e.alert.reason),
            });
        }
    }
    rows
}

/// A row of the Alerts view: a group's heading (no reason) or one of its lines.
pub(super) struct AlertRow<'a> {
    kind: &'static str,
    severity: crate::severity::Severity,
    count: u64,
    subject: String,
    reason: Option<&'a String>,
}

fn draw_alerts(frame: &mut Frame, app: &App, area: Rect) {
    let plain = Style::new();
    let rows = alert_rows(app);
    let mut mark = Column::new(" ", 0);
    let mut kind = Column::new("kind", 0);
    let mut count = Column::new("count", 1);
    let mut subject = Column::new("subject", 0);
    // The selected line's reason is shown in full, wrapped, below the table: the column claims
    // little, so that kind, count and subject fit at 80 columns.
    let mut reason = Column::new("reason", 2).fill_at_least(12);
    let shown = window(
        app.selected,
        rows.len(),
        usize::from(area.height.saturating_sub(7)),
    );
    let selected = app.selected.saturating_sub(shown.start);
    for r in &rows[shown] {
        let heading = r.reason.is_none();
        mark.push(
            if r.severity.is_problem() && heading {
                MARK
            } else {
                ""
            }
            .into(),
            Style::new().fg(Color::Red).bold(),
        );
        let style = if heading { Style::new().bold() } else { plain };
        kind.push(
            if heading {
                r.kind.into()
            } else {
                String::new()
            },
            style,
        );
        count.push(format::count(r.count), style);
        subject.push(r.subject.clone(), style);
        reason.push(r.reason.cloned().unwrap_or_default(), plain);
    }
    let (header, table_rows, widths) =
        columns::table(vec![mark, kind, count, subject, reason], area.width);
    let table = Table::new(table_rows, widths)
        .header(header)
        .block(
            Block::new()
                .borders(Borders::TOP)
                .title(" diagnostics by kind, problems first "),
        )
        .row_highlight_style(HIGHLIGHT);
    let [list, full] = Layout::vertical([Constraint::Min(3), Constraint::Length(5)]).areas(area);
    frame.render_stateful_widget(table, list, &mut table_state(selected));
    // The selected line's reason in full, wrapped (never cut).
    if let Some(r) = rows.get(app.selected) {
        let text = match r.reason {
            Some(reason) => format::terminal_owned(reason.clone()),
            None => format!(
                "{} {} ({}): select a line below for its reason",
                r.subject,
                r.kind,
                format::plural(r.count, "occurrence", "occurrences")
            ),
        };
        frame.render_widget(
            Paragraph::new(text)
                .block(
                    Block::new()
                        .borders(Borders::TOP)
                        .title(format!(" {} ", r.kind)),
                )
                .wrap(Wrap { trim: true }),
            full,
        );
    }
}

fn draw_nic(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::new()
        .borders(Borders::TOP)
        .title(" NIC counters per interval (hw_counters, ethtool -S) ");
    if app.snapshot.nic.is_empty() {
        frame.render_widget(
            Paragraph::new(
                "No RDMA device is read: this host has none under /sys/class/infiniband, or \
                 --rdma-dev none was given.",
            )
            .block(block)
            .wrap(Wrap { trim: true }),
            area,
        );
        return;
    }
    let plain = Style::new();
    let mut port = Column::new("port", 1);
    let mut name = Column::new("counter", 0);
    let mut per_s = Column::new("per s", 0);
    let mut delta = Column::new("interval", 2);
    let mut total = Column::new("total", 3);
    let mut meaning = Column::new("meaning", 4).fill();
    for r in super::app::nic_rows(&app.snapshot) {
        let changed = if r.counter.delta > 0 {
            Style::new().fg(Color::Yellow)
        } else {
            plain
        };
        port.push(r.port, plain);
        name.push(r.name.to_string(), changed);
        per_s.push(format!("{:.1}", r.counter.per_s), changed);
        delta.push(r.counter.delta.to_string(), changed);
        total.push(format::count(r.counter.total), plain);
        meaning.push(r.meaning.to_string(), plain);
    }
    let (header, rows, widths) =
        columns::table(vec![port, name, per_s, delta, total, meaning], area.width);
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, area, &mut table_state(app.selected));
}

fn draw_mirror(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::new().borders(Borders::TOP).title(format!(
        " switch-mirror sessions: frames lost on the mirror path {} ",
        app.snapshot.summary.mirror_seq_lost
    ));
    if app.snapshot.mirror.is_empty() {
        frame.render_widget(
            Paragraph::new(
                "No switch mirror seen: ERSPAN, GRE bridging and VXLAN mirrors are unwrapped and \
                 counted here per session (docs/metrics.md, \"Mirror sessions\").",
            )
            .block(block)
            .wrap(Wrap { trim: true }),
            area,
        );
        return;
    }
    let plain = Style::new();
    let mut source = Column::new("mirror source", 0);
    let mut to = Column::new("to", 2);
    let mut frames = Column::new("frames", 0);
    let mut lost = Column::new("seq lost", 0);
    let mut late = Column::new("late", 1);
    let mut resyncs = Column::new("resyncs", 3);
    let mut seen = Column::new("seen", 4);
    for m in &app.snapshot.mirror {
        let seq = |n: u64| {
            if m.sequenced {
                n.to_string()
            } else {
                "-".into()
            }
        };
        source.push(m.source.label(), plain);
        to.push(m.outer_dst.to_string(), plain);
        frames.push(format::count(m.frames), plain);
        let lost_style = if m.seq_lost > 0 {
            Style::new().fg(Color::Yellow)
        } else {
            plain
        };
        lost.push(marked(m.seq_lost, seq(m.seq_lost)), lost_style);
        late.push(seq(m.seq_late), plain);
        resyncs.push(seq(m.seq_resyncs), plain);
        seen.push(format!("{}/{}", m.iface, &m.direction[..2]), plain);
    }
    let (header, rows, widths) = columns::table(
        vec![source, to, frames, lost, late, resyncs, seen],
        area.width,
    );
    let table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, area, &mut table_state(app.selected));
}

fn draw_footer(frame: &mut Frame, app: &App, area: Rect) {
    let dim = Style::new().fg(Color::DarkGray);
    let line = if app.typing_filter {
        Line::from(vec![
            Span::raw("filter (address, QP, interface): "),
            Span::styled(format!("{}_", app.filter), Style::new().bold()),
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
    let views: Vec<String> = Tab::ALL
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
