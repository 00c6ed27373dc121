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
    history::{DEPTH, FlowHistory, bars, pfc_id},
};
use crate::{engine::snapshot::QpOwner, format};

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
    let mut first = vec![
        (
            Span::styled(
                format!("roce-observer {}", format::terminal(&app.source)),
                Style::new().bold(),
            ),
            0,
        ),
        (Span::raw(format!("flows {}", s.flows)), 1),
        (
            Span::raw(format!("RoCE {}", format::count(s.roce_packets))),
            2,
        ),
        (Span::raw(format!("PFC {}", format::count(s.pfc_frames))), 3),
        (
            Span::raw(format!("PAUSE {}", format::count(s.pause_8023x))),
            4,
        ),
        (
            Span::styled(
                format!(
                    "{} {}",
                    bars(&app.history.total_bps.last(HEADER_TREND)),
                    format::rate(app.history.total_bps.latest().unwrap_or(0) as f64)
                ),
                Style::new().fg(Color::Cyan),
            ),
            3,
        ),
    ];
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
    let mut second = vec![
        (
            Span::styled(
                format!(
                    "alerts {}",
                    marked(
                        app.snapshot.alerts.len() as u64,
                        app.snapshot.alerts.len().to_string()
                    )
                ),
                if app.snapshot.alerts.is_empty() {
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
        .map(|(i, t)| format!("{} {}", i + 1, t.title()))
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
                    (i + 1).to_string()
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
    // Ranks: what stays on a narrow terminal (0 always; higher ranks dropped first).
    let mut mark = Column::new(" ", 0);
    let mut flow = Column::new("source -> destination", 0);
    let mut qp = Column::new("QP", 1);
    let mut peer = Column::new("peer", 10);
    let mut seen = Column::new("seen", 7);
    let mut pkts = Column::new("pkts", 8);
    let mut rate = Column::new("rate", 2);
    let mut gaps = Column::new("gaps/miss", 3);
    let mut retx = Column::new("retx", 4);
    let mut nak = Column::new("NAK", 4);
    let mut cnp = Column::new("CNP", 5);
    let mut ce = Column::new("CE", 5);
    let mut p50 = Column::new("p50", 9);
    let mut p99 = Column::new("p99", 6);
    let mut process = Column::new("process", 5);
    // The area less its top border (the title) and the header row.
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
        seen.push(
            format!(
                "{}/{}{via}",
                f.iface,
                &f.direction[..2.min(f.direction.len())]
            ),
            plain,
        );
        pkts.push(format::count(f.packets), plain);
        rate.push(format::rate(f.rate_bps), plain);
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
        p50.push(format::ns(f.rtt_ns.p50), plain);
        p99.push(format::ns(f.rtt_ns.p99), plain);
        process.push(f.owner.as_deref().map_or(String::new(), owner_label), plain);
    }
    let mut all = vec![
        mark, flow, qp, peer, seen, pkts, rate, gaps, retx, nak, cnp, ce, p50, p99,
    ];
    // Owners come from RDMA netlink on hosts with RDMA devices; elsewhere no column.
    if !app.snapshot.qp_owners.is_empty() {
        all.push(process);
    }
    let (header, rows, widths) = columns::table(all, area.width);
    let mut title = format!(" flows by {} (s to change) ", app.sort.name());
    if app.merged {
        title.push_str("one row per QP (m to split) ");
    }
    if !app.filter.is_empty() {
        title.push_str(&format!("matching \"{}\" ", app.filter));
    }
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(title))
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, area, &mut table_state(selected));
}

/// The selected flow's series over the last intervals, one row each: label, then a sparkline.
fn draw_charts(frame: &mut Frame, h: &FlowHistory, area: Rect) {
    let ce_cnp: Vec<u64> =
        h.ce.last(DEPTH)
            .iter()
            .zip(h.cnp.last(DEPTH))
            .map(|(ce, cnp)| ce + cnp)
            .collect();
    let rows = [
        (
            format!(
                "rate {}",
                format::rate(h.rate_bps.latest().unwrap_or(0) as f64)
            ),
            h.rate_bps.last(DEPTH),
            Color::Cyan,
        ),
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
    let areas = Layout::vertical([Constraint::Length(1); 4]).split(area);
    for ((label, values, color), row) in rows.into_iter().zip(areas.iter()) {
        let [name, chart] =
            Layout::horizontal([Constraint::Length(20), Constraint::Min(1)]).areas(*row);
        // The newest samples that fit (oldest on the left).
        let width = usize::from(chart.width);
        let shown = &values[values.len().saturating_sub(width)..];
        frame.render_widget(Paragraph::new(label), name);
        frame.render_widget(
            Sparkline::default()
                .data(shown.iter().copied())
                .style(Style::new().fg(color)),
            chart,
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
        draw_charts(frame, &h, charts);
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
            "modelled {} paths ({:?}, seed {}): max/mean {:.2}, Jain {:.3}, {} colliding paths",
            m.paths,
            m.hash,
            m.seed,
            m.imbalance,
            m.jain,
            m.collisions.len()
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
        bytes.push(format::count(e.bytes), plain);
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

fn draw_alerts(frame: &mut Frame, app: &App, area: Rect) {
    let plain = Style::new();
    let mut kind = Column::new("kind", 0);
    let mut count = Column::new("count", 1);
    let mut subject = Column::new("subject", 0);
    // The selected alert's reason is shown in full below the table: the column claims little,
    // so that kind, count and subject fit at 80 columns.
    let mut reason = Column::new("reason", 0).fill_at_least(12);
    for a in &app.snapshot.alerts {
        kind.push(a.kind.into(), plain);
        count.push(a.count.to_string(), plain);
        let about = match (&a.flow, &a.pfc) {
            // With the observation point: the same QP seen at two points has two alerts.
            (Some(f), _) => format!(
                "{} -> {} {} {}/{}",
                f.src_ip,
                f.dst_ip,
                format::qp(f.dst_qp),
                f.iface,
                &f.direction[..2.min(f.direction.len())]
            ),
            (None, Some(p)) => format!(
                "{} prio {}",
                p.src_mac,
                p.priority.map_or("link".into(), |v| v.to_string())
            ),
            (None, None) => String::new(),
        };
        subject.push(about, plain);
        reason.push(a.reason.clone(), plain);
    }
    let (header, rows, widths) = columns::table(vec![kind, count, subject, reason], area.width);
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(" diagnostics "))
        .row_highlight_style(HIGHLIGHT);
    // The selected alert's reason in full, wrapped (the table cuts it at the edge).
    let [list, full] = Layout::vertical([Constraint::Min(3), Constraint::Length(4)]).areas(area);
    frame.render_stateful_widget(table, list, &mut table_state(app.selected));
    if let Some(a) = app.snapshot.alerts.get(app.selected) {
        frame.render_widget(
            Paragraph::new(format::terminal_owned(a.reason.clone()))
                .block(
                    Block::new()
                        .borders(Borders::TOP)
                        .title(format!(" {} ", a.kind)),
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
    } else {
        let keys = [
            ("q quit", 0),
            ("? help", 0),
            ("s sort", 1),
            ("/ filter", 1),
            ("enter detail", 2),
            ("tab/1-9 views", 2),
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

fn draw_help(frame: &mut Frame) {
    let area = frame.area();
    let w = area.width.min(64);
    let h = area.height.min(20);
    let popup = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    let text = vec![
        Line::from("Flows: one row per (source IP, destination IP, destination QP)"),
        Line::from("seen on one interface and direction (in = XDP, eg = TC egress),"),
        Line::from("and for switch mirrors from one mirror source (seen column)."),
        Line::from("gaps/miss: loss events and PSNs lost; retx: retransmissions;"),
        Line::from("NAK: all NAK classes; CE: ECN congestion marks; p50/p99:"),
        Line::from("request -> answer latency seen at this observation point."),
        Line::from(""),
        Line::from("! marks a problem (and colour, unless NO_COLOR/--color never):"),
        Line::from("a count, and in the first column a flow with gaps, retx, NAKs,"),
        Line::from("CNPs, CE marks or an alert; sort \"problems\" lists them first."),
        Line::from(""),
        Line::from("q/Esc quit   tab, 1-9 switch view   j/k or arrows move"),
        Line::from("s cycle sort   enter/d detail   p/space pause   ? help"),
        Line::from("/ filter by address, QP or interface (esc clears)"),
        Line::from("m one row per QP: observation points merged, largest counts"),
        Line::from(""),
        Line::from("Every metric is defined in docs/metrics.md."),
    ];
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(text).block(Block::bordered().title(" help ")),
        popup,
    );
}
