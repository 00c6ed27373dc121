//! Views: each draws part of the [`App`]'s snapshot. No state lives here.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState, Tabs, Wrap},
};

use super::app::{App, Tab, nak_total};
use crate::format;

const HIGHLIGHT: Style = Style::new().add_modifier(Modifier::REVERSED);

pub fn draw(frame: &mut Frame, app: &App) {
    let detail_height = if app.detail && app.tab == Tab::Flows {
        9
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
    }
    if detail_height > 0 {
        draw_detail(frame, app, detail);
    }
    draw_footer(frame, app, footer);
    if app.help {
        draw_help(frame);
    }
}

fn draw_header(frame: &mut Frame, app: &App, area: Rect) {
    let s = &app.snapshot.summary;
    let lat = &app.snapshot.latency.overall;
    let mut first = vec![
        Span::styled("roce-observer ", Style::new().bold()),
        Span::raw(format!("{}  ", app.source)),
        Span::raw(format!("flows {}  ", s.flows)),
        Span::raw(format!("RoCE {}  ", format::count(s.roce_packets))),
        Span::raw(format!("PFC {}  ", format::count(s.pfc_frames))),
        Span::raw(format!("PAUSE {}  ", format::count(s.pause_8023x))),
    ];
    if app.paused {
        first.push(Span::styled(" PAUSED ", Style::new().black().on_yellow()));
    }
    if app.ended {
        first.push(Span::styled(
            " capture ended (q to quit) ",
            Style::new().black().on_cyan(),
        ));
    }
    let bad = Style::new().fg(Color::Red);
    let second = vec![
        Span::raw(format!("pmtu {}  ", s.pmtu)),
        Span::raw(format!(
            "latency p50 {} p99 {}  ",
            format::ns(lat.p50),
            format::ns(lat.p99)
        )),
        Span::styled(
            format!("malformed {}  ", s.malformed),
            if s.malformed > 0 { bad } else { Style::new() },
        ),
        Span::styled(
            format!("events lost {}  ", s.events_lost),
            if s.events_lost > 0 { bad } else { Style::new() },
        ),
        Span::styled(
            format!("map full {}  ", s.map_full),
            if s.map_full > 0 { bad } else { Style::new() },
        ),
        Span::styled(
            format!("alerts {}", app.snapshot.alerts.len()),
            if app.snapshot.alerts.is_empty() {
                Style::new()
            } else {
                Style::new().fg(Color::Yellow)
            },
        ),
    ];
    frame.render_widget(
        Paragraph::new(vec![Line::from(first), Line::from(second)]),
        area,
    );
}

fn draw_tabs(frame: &mut Frame, app: &App, area: Rect) {
    let titles = Tab::ALL
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{} {}", i + 1, t.title()));
    let selected = Tab::ALL.iter().position(|t| *t == app.tab);
    frame.render_widget(
        Tabs::new(titles)
            .select(selected)
            .highlight_style(Style::new().bold().fg(Color::Cyan)),
        area,
    );
}

fn table_state(selected: usize) -> TableState {
    TableState::default().with_selected(Some(selected))
}

fn draw_flows(frame: &mut Frame, app: &App, area: Rect) {
    let header = Row::new([
        "source -> destination",
        "QP",
        "peer",
        "seen",
        "pkts",
        "rate",
        "gaps/miss",
        "retx",
        "NAK",
        "CNP",
        "CE",
        "p50",
        "p99",
    ])
    .style(Style::new().bold());
    let rows = app
        .order
        .iter()
        .filter_map(|i| app.snapshot.flows.get(*i))
        .map(|f| {
            let naks = nak_total(f);
            let warn = |n: u64| {
                if n > 0 {
                    Style::new().fg(Color::Yellow)
                } else {
                    Style::new()
                }
            };
            Row::new([
                Cell::from(format!("{} -> {}", f.src_ip, f.dst_ip)),
                Cell::from(format::qp(f.dst_qp)),
                Cell::from(f.peer_qp.map_or("-".into(), format::qp)),
                Cell::from(format!("{}/{}", f.iface, &f.direction[..2])),
                Cell::from(format::count(f.packets)),
                Cell::from(format::rate(f.rate_bps)),
                Cell::from(format!("{}/{}", f.psn_gaps, f.psn_missing)).style(warn(f.psn_gaps)),
                Cell::from(f.retransmits.to_string()).style(warn(f.retransmits)),
                Cell::from(naks.to_string()).style(warn(naks)),
                Cell::from(f.cnp.to_string()).style(warn(f.cnp)),
                Cell::from(f.ecn_ce.to_string()).style(warn(f.ecn_ce)),
                Cell::from(format::ns(f.rtt_ns.p50)),
                Cell::from(format::ns(f.rtt_ns.p99)),
            ])
        });
    let widths = [
        Constraint::Min(30),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(10),
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(4),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(9),
    ];
    let title = format!(" flows by {} (s to change) ", app.sort.name());
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(title))
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, area, &mut table_state(app.selected));
}

fn draw_detail(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::new().borders(Borders::TOP).title(" detail ");
    let Some(f) = app.selected_flow() else {
        frame.render_widget(Paragraph::new("no flow selected").block(block), area);
        return;
    };
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
            f.iface,
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
            "PSN gaps {} (missing {})  retransmits: requests {}, READ responses {}",
            f.psn_gaps, f.psn_missing, f.req_retransmits, f.resp_retransmits
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
    frame.render_widget(
        Paragraph::new(lines).block(block).wrap(Wrap { trim: true }),
        area,
    );
}

fn draw_pfc(frame: &mut Frame, app: &App, area: Rect) {
    let header = Row::new([
        "interface",
        "source MAC",
        "prio",
        "XOFF",
        "XON",
        "quanta",
        "paused",
        "fraction",
        "storm",
    ])
    .style(Style::new().bold());
    let rows = app.snapshot.pfc.iter().map(|p| {
        Row::new([
            Cell::from(format!("{}/{}", p.iface, &p.direction[..2])),
            Cell::from(p.src_mac.clone()),
            Cell::from(p.priority.map_or("link".into(), |v| v.to_string())),
            Cell::from(p.pause_frames.to_string()),
            Cell::from(p.xon_frames.to_string()),
            Cell::from(p.pause_quanta.to_string()),
            Cell::from(format::us(p.paused_us)),
            Cell::from(format!("{:.1}%", p.paused_fraction * 100.0)),
            Cell::from(if p.storm { "STORM" } else { "" })
                .style(Style::new().fg(Color::Red).bold()),
        ])
    });
    let widths = [
        Constraint::Length(12),
        Constraint::Length(18),
        Constraint::Length(5),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(10),
        Constraint::Length(12),
        Constraint::Length(9),
        Constraint::Length(6),
    ];
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
    let header = Row::new(["host pair", "bytes", "QPs", "UDP sports", "busiest 5-tuple"])
        .style(Style::new().bold());
    let rows = ecmp.entropy.iter().map(|e| {
        Row::new([
            Cell::from(format!("{} -> {}", e.src_ip, e.dst_ip)),
            Cell::from(format::count(e.bytes)),
            Cell::from(e.qps.to_string()),
            Cell::from(e.udp_src_ports.to_string()),
            Cell::from(format!("{:.0}%", e.busiest_tuple_share * 100.0)),
        ])
    });
    let widths = [
        Constraint::Min(30),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(11),
        Constraint::Length(16),
    ];
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
    let header = Row::new(["kind", "count", "reason"]).style(Style::new().bold());
    let rows = app.snapshot.alerts.iter().map(|a| {
        Row::new([
            Cell::from(a.kind),
            Cell::from(a.count.to_string()),
            Cell::from(a.reason.clone()),
        ])
    });
    let widths = [
        Constraint::Length(24),
        Constraint::Length(7),
        Constraint::Min(40),
    ];
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::new().borders(Borders::TOP).title(" diagnostics "))
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, area, &mut table_state(app.selected));
}

fn draw_footer(frame: &mut Frame, app: &App, area: Rect) {
    let _ = app;
    frame.render_widget(
        Paragraph::new("q quit  tab/1-4 views  j/k move  s sort  enter detail  p pause  ? help")
            .style(Style::new().fg(Color::DarkGray)),
        area,
    );
}

fn draw_help(frame: &mut Frame) {
    let area = frame.area();
    let w = area.width.min(64);
    let h = area.height.min(14);
    let popup = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    let text = vec![
        Line::from("Flows: one row per (source IP, destination IP, destination QP)"),
        Line::from("seen on one interface and direction (in = XDP, eg = TC egress)."),
        Line::from("gaps/miss: PSN gaps and PSNs skipped; retx: retransmissions;"),
        Line::from("NAK: all NAK classes; CE: ECN congestion marks; p50/p99:"),
        Line::from("request -> answer latency seen at this observation point."),
        Line::from(""),
        Line::from("q/Esc quit   tab, 1-4 switch view   j/k or arrows move"),
        Line::from("s cycle sort   enter/d detail   p/space pause   ? help"),
        Line::from(""),
        Line::from("Every metric is defined in docs/metrics.md."),
    ];
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(text).block(Block::bordered().title(" help ")),
        popup,
    );
}
