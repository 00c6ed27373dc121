//! Flows: one row per flow (or per QP when merged), problems first, and the selected flow's detail pane.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Style},
    text::Line,
    widgets::{Block, Borders, Paragraph, Sparkline, Wrap},
};

use super::{MARK, Screen, View, draw_table, empty, marked, window};
use crate::tui::{
    columns::Column,
    flow_table::nak_total,
    history::{DEPTH, FlowHistory},
};
use crate::{
    format,
    report::{FlowSnapshot, QpOwner},
};

/// The Flows view.
pub struct Flows;

impl View for Flows {
    fn title(&self) -> &'static str {
        "Flows"
    }

    fn rows(&self, screen: &Screen) -> usize {
        screen.flows.order.len()
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_flows(frame, screen, area);
    }

    fn pane(&self, screen: &Screen) -> u16 {
        if screen.detail { 12 } else { 0 }
    }

    fn draw_pane(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_detail(frame, screen, area);
    }
}

/// "comm/pid", or the kernel module's name for a kernel QP.
fn owner_label(o: &QpOwner) -> String {
    let comm = format::terminal(&o.comm);
    match o.pid {
        Some(pid) => format!("{comm}/{pid}"),
        None => comm.into_owned(),
    }
}

/// What the flow table says while the report holds no flow: what was read instead and what to
/// try (the advice `analyze` prints, crate::report::hint), or that nothing was read yet.
fn no_flows(screen: &Screen) -> String {
    let s = &screen.report.summary;
    if s.total_packets == 0 && !screen.ended {
        return "No RoCE flow yet: no frame read so far.".into();
    }
    match crate::report::hint::no_roce(s) {
        // A replay or an interface may still bring RoCE: the advice is about what came so far.
        Some(hint) if !screen.ended => format!("So far {hint}"),
        Some(hint) => hint,
        None => "No RoCE flow yet.".into(),
    }
}

fn draw_flows(frame: &mut Frame, screen: &Screen, area: Rect) {
    if screen.report.flows.is_empty() {
        empty(frame, area, "flows", &no_flows(screen));
        return;
    }
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
    let mut rate = Column::new(if screen.ended { "avg rate" } else { "rate" }, 4);
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
    let resolution = screen.report.summary.ts_resolution_ns;
    let shown = window(
        screen.selected,
        screen.flows.order.len(),
        usize::from(area.height.saturating_sub(2)),
    );
    let selected = screen.selected.saturating_sub(shown.start);
    for i in &screen.flows.order[shown] {
        let Some(f) = screen.flow_rows().get(*i) else {
            continue;
        };
        let problem = screen.flows.problem.get(*i).copied().unwrap_or(false);
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
            if screen.ended {
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
    if let Some(title) = screen.flows.sort.column()
        && let Some(c) = all.iter_mut().find(|c| c.title == title)
    {
        c.sorted(screen.flows.ascending);
    }
    // Owners come from RDMA netlink on hosts with RDMA devices; elsewhere no column.
    if !screen.report.qp_owners.is_empty() {
        all.push(process);
    }
    let mut title = format!(
        " flows by {}{} (s/S to change) ",
        screen.flows.sort.name(),
        if screen.flows.ascending {
            ", smallest first"
        } else {
            ""
        }
    );
    if screen.flows.merged {
        title.push_str("one row per QP (m to split) ");
    }
    if !screen.flows.filter.is_empty() {
        title.push_str(&format!("matching \"{}\" ", screen.flows.filter));
        if screen.flows.order.is_empty() {
            title.push_str(&format!("{MARK}no match (esc clears) "));
        }
    }
    draw_table(frame, area, title, all, selected);
}

/// The selected flow's series over the last intervals, one row each: label, then a sparkline.
fn draw_charts(frame: &mut Frame, screen: &Screen, f: &FlowSnapshot, h: &FlowHistory, area: Rect) {
    let ce_cnp: Vec<u64> =
        h.ce.last(DEPTH)
            .iter()
            .zip(h.cnp.last(DEPTH))
            .map(|(ce, cnp)| ce + cnp)
            .collect();
    // After the input ended the last interval is empty: the flow's average over its active
    // time, labelled, instead of `0 b/s`.
    let rate_label = match (screen.ended, crate::derived::active_bps(f)) {
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
        let peak = screen.history.peak(&values);
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

fn draw_detail(frame: &mut Frame, screen: &Screen, area: Rect) {
    let block = Block::new()
        .borders(Borders::TOP)
        .title(" detail (per interval) ");
    let Some(f) = screen.selected_flow() else {
        frame.render_widget(Paragraph::new("no flow selected").block(block), area);
        return;
    };
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [charts, area] = Layout::vertical([Constraint::Length(4), Constraint::Min(0)]).areas(inner);
    let lat = |v| format::latency(v, screen.report.summary.ts_resolution_ns);
    if let Some(h) = screen.history.of(f, screen.flows.merged) {
        draw_charts(frame, screen, f, &h, charts);
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
            "lost {} in {}  retransmits: requests {}, READ responses {}",
            format::plural(f.psn_missing, "PSN", "PSNs"),
            format::plural(f.psn_gaps, "event", "events"),
            f.req_retransmits,
            f.resp_retransmits
        )),
        Line::from(format!(
            "reordered {} (at most {} late; by distance {})  NAKs caused by reordering {}  holes open {}",
            f.reordered,
            format::plural(f.reorder_distance_max, "PSN", "PSNs"),
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
            lat(f.rtt_ns.min),
            lat(f.rtt_ns.p50),
            lat(f.rtt_ns.p90),
            lat(f.rtt_ns.p99),
            lat(f.rtt_ns.p999),
            lat(f.rtt_ns.max),
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
