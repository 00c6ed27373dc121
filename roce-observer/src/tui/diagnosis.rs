//! The diagnosis views: training steps and stragglers, path loss between observation points,
//! and the PFC storm origin. They draw the snapshot's `steps`, `paths` and `pfc_origin`
//! (docs/metrics.md defines every number); a view without data says why it can be empty.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Style},
    text::Line,
    widgets::{Block, Borders, Paragraph, Table, Wrap},
};

use super::{
    app::App,
    columns::{self, Column},
    view::{HIGHLIGHT, MARK, table_state},
};
use crate::{
    engine::snapshot::{PfcRef, StepsSnapshot},
    format,
};

fn titled(title: String) -> Block<'static> {
    Block::new().borders(Borders::TOP).title(title)
}

fn empty(frame: &mut Frame, area: Rect, title: &str, why: &str) {
    frame.render_widget(
        Paragraph::new(why.to_string())
            .block(titled(format!(" {title} ")))
            .wrap(Wrap { trim: true }),
        area,
    );
}

/// `text` marked as a problem (MARK and red) when `n` is not zero.
fn warn(n: u64, text: String) -> (String, Style) {
    if n > 0 {
        (format!("{MARK}{text}"), Style::new().fg(Color::Red))
    } else {
        (text, Style::new())
    }
}

/// Milliseconds after `origin` (a step start, a first XOFF), e.g. "+12.40 ms".
fn after(ts: u64, origin: u64) -> String {
    format!("+{:.2} ms", ts.saturating_sub(origin) as f64 / 1e6)
}

pub fn draw_steps(frame: &mut Frame, app: &App, area: Rect) {
    let Some(st) = &app.snapshot.steps else {
        empty(
            frame,
            area,
            "training steps",
            "No training steps: the traffic is not periodic (or there are too few steps yet: \
             at least 5 are needed, and the kernel path sees a flow's last burst once it is \
             read at a report).",
        );
        return;
    };
    let recent_rows = (st.recent.len() as u16).min(10);
    let [summary, rest] = Layout::vertical([Constraint::Length(3), Constraint::Min(3)]).areas(area);
    // Recent steps beside the stragglers when there is room, else above them.
    let wide = area.width >= 120;
    let (recent, stragglers) = if wide {
        let [s, r] = Layout::horizontal([Constraint::Min(60), Constraint::Length(44)]).areas(rest);
        (r, s)
    } else {
        let [r, s] = Layout::vertical([
            Constraint::Length(recent_rows.min(6) + 2),
            Constraint::Min(3),
        ])
        .areas(rest);
        (r, s)
    };
    frame.render_widget(
        Paragraph::new(vec![
            Line::from(format!(
                "period {:.2} ms   {} steps in {}   communicating {:.0}% of a step",
                st.period_ms,
                st.count,
                crate::sink::table::steps_window(st),
                st.comm_fraction * 100.0
            )),
            Line::from(format!(
                "confidence {:.2}   stragglers {}",
                st.confidence,
                st.stragglers.len()
            )),
        ])
        .block(titled(" training steps ".into())),
        summary,
    );
    draw_recent(frame, st, recent, !wide);
    draw_stragglers(frame, app, st, stragglers);
}

/// The last steps, newest first (the narrow layout keeps the newest that fit).
fn draw_recent(frame: &mut Frame, st: &StepsSnapshot, area: Rect, narrow: bool) {
    let plain = Style::new();
    let mut start = Column::new("start", 0);
    let mut gap = Column::new("after previous", 1);
    let mut dur = Column::new("comm", 0);
    let newest_first: Vec<_> = st.recent.iter().rev().collect();
    for (i, s) in newest_first.iter().enumerate() {
        start.push(format::clock(s.start), plain);
        gap.push(
            newest_first.get(i + 1).map_or(String::new(), |p| {
                format!("{:.2} ms", s.start.saturating_sub(p.start) as f64 / 1e6)
            }),
            plain,
        );
        dur.push(format!("{:.2} ms", s.duration_ms), plain);
    }
    let columns = if narrow {
        vec![start, dur, gap]
    } else {
        vec![start, gap, dur]
    };
    let (header, rows, widths) = columns::table(columns, area.width);
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(titled(" recent steps ".into())),
        area,
    );
}

fn draw_stragglers(frame: &mut Frame, app: &App, st: &StepsSnapshot, area: Rect) {
    let plain = Style::new();
    let mut flow = Column::new("flow", 0);
    let mut point = Column::new("at", 3);
    let mut late = Column::new("last in", 0);
    let mut lag = Column::new("mean lag", 0);
    let mut ce = Column::new("CE", 1);
    let mut cnp = Column::new("CNP", 1);
    let mut retx = Column::new("retx", 2);
    let mut naks = Column::new("NAK", 2);
    let mut pause = Column::new("pause", 2);
    for g in &st.stragglers {
        flow.push(
            format!("{} > {} {}", g.src_ip, g.dst_ip, format::qp(g.dst_qp)),
            plain,
        );
        point.push(format!("{}/{}", g.iface, &g.direction[..2]), plain);
        late.push(format!("{}/{} steps", g.late_steps, g.steps), plain);
        lag.push(format!("{:.2} ms", g.mean_lag_ms), plain);
        let e = &g.evidence;
        for (col, n) in [
            (&mut ce, e.ce),
            (&mut cnp, e.cnp),
            (&mut retx, e.retransmits),
            (&mut naks, e.naks),
        ] {
            let (text, style) = warn(n, n.to_string());
            col.push(text, style);
        }
        let (text, style) = warn(e.pause_us.ceil() as u64, format::us(e.pause_us));
        pause.push(text, style);
    }
    let (header, rows, widths) = columns::table(
        vec![flow, late, lag, ce, cnp, retx, naks, pause, point],
        area.width,
    );
    let title = if st.stragglers.is_empty() {
        " stragglers: none (no flow ends its steps last most often) "
    } else {
        " stragglers (evidence in their late steps) "
    };
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .block(titled(title.into()))
            .row_highlight_style(HIGHLIGHT),
        area,
        &mut table_state(app.selected),
    );
}

pub fn draw_paths(frame: &mut Frame, app: &App, area: Rect) {
    let paths = &app.snapshot.paths;
    if paths.is_empty() {
        empty(
            frame,
            area,
            "where was it lost",
            "No flow is seen at two observation points (interfaces and directions, or \
             switch mirror sources) with request PSNs to compare.",
        );
        return;
    }
    let plain = Style::new();
    let mut flow = Column::new("flow", 0);
    let mut hop = Column::new("points (up > down)", 0);
    let mut both = Column::new("both", 2);
    let mut missing = Column::new("lost", 0);
    let mut unseen = Column::new("retx unseen", 3);
    let mut psns = Column::new("first lost PSNs", 1).fill();
    for p in paths {
        flow.push(
            format!("{} > {} {}", p.src_ip, p.dst_ip, format::qp(p.dst_qp)),
            plain,
        );
        hop.push(
            format!(
                "{}/{} > {}/{}",
                p.upstream.iface,
                &p.upstream.direction[..2],
                p.downstream.iface,
                &p.downstream.direction[..2]
            ),
            plain,
        );
        both.push(format::count(p.both), plain);
        // Kernel path: events were suppressed for this pair, its counts are lower bounds.
        let lost = if p.incomplete {
            format!("{}+", p.missing)
        } else {
            p.missing.to_string()
        };
        let (text, style) = warn(p.missing, lost);
        missing.push(text, style);
        let (text, style) = warn(
            p.downstream_retransmits_unseen,
            p.downstream_retransmits_unseen.to_string(),
        );
        unseen.push(text, style);
        psns.push(
            p.missing_psns
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" "),
            plain,
        );
    }
    let (header, rows, widths) =
        columns::table(vec![flow, hop, missing, both, unseen, psns], area.width);
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .block(titled(
                " where was it lost: request PSNs seen upstream, missing downstream (lost) ".into(),
            ))
            .row_highlight_style(HIGHLIGHT),
        area,
        &mut table_state(app.selected),
    );
}

fn source_label(r: &PfcRef) -> String {
    format!(
        "{} {}/{} prio {}",
        r.src_mac,
        format::terminal(&r.iface),
        &r.direction[..2],
        r.priority.map_or("link".into(), |p| p.to_string())
    )
}

pub fn draw_storm(frame: &mut Frame, app: &App, area: Rect) {
    let Some(o) = &app.snapshot.pfc_origin else {
        empty(
            frame,
            area,
            "PFC storm origin",
            "No PFC storm: no pause source was paused for most of a storm window \
             (--storm-threshold, --storm-window-ms).",
        );
        return;
    };
    let [summary, table] =
        Layout::vertical([Constraint::Length(3), Constraint::Min(3)]).areas(area);
    frame.render_widget(
        Paragraph::new(vec![
            Line::from(match (&o.origin, o.origin_index) {
                (Some(origin), Some(index)) => format!(
                    "origin #{} {}: reached {} in {} hop{}",
                    index + 1,
                    source_label(origin),
                    o.reached,
                    o.hops,
                    if o.hops == 1 { "" } else { "s" }
                ),
                _ => "no origin: the pauses form a PFC deadlock cycle (Alerts: deadlock)".into(),
            }),
            Line::from(format!(
                "onset {}   {} sources within {:.2} ms   window {:.0} ms",
                format::clock(o.storm_onset_ts),
                o.sources.len(),
                o.spread_ms,
                o.window_end_ts.saturating_sub(o.window_start_ts) as f64 / 1e6
            )),
        ])
        .block(titled(" PFC storm origin ".into())),
        summary,
    );
    let plain = Style::new();
    let first = o.sources.first().map_or(0, |s| s.first_xoff_ts);
    let mut order = Column::new("#", 0);
    let mut source = Column::new("source MAC", 0);
    let mut point = Column::new("at", 0);
    let mut prio = Column::new("prio", 1);
    let mut xoff = Column::new("first XOFF", 0);
    let mut fraction = Column::new("paused", 0);
    let mut storm = Column::new("storm", 2);
    let mut by = Column::new("paused by", 0);
    for (i, s) in o.sources.iter().enumerate() {
        by.push(
            match (s.paused_by, s.evidence, s.hop_ms) {
                (Some(p), Some(ev), Some(ms)) => format!("#{} +{ms:.2} ms {ev}", p + 1),
                _ => "root".into(),
            },
            plain,
        );
        order.push((i + 1).to_string(), plain);
        source.push(s.source.src_mac.clone(), plain);
        point.push(
            format!("{}/{}", s.source.iface, &s.source.direction[..2]),
            plain,
        );
        prio.push(
            s.source.priority.map_or("link".into(), |p| p.to_string()),
            plain,
        );
        xoff.push(after(s.first_xoff_ts, first), plain);
        fraction.push(format!("{:.1}%", s.paused_fraction * 100.0), plain);
        storm.push(
            if s.storm { "STORM" } else { "" }.into(),
            Style::new().fg(Color::Red).bold(),
        );
    }
    let (header, rows, widths) = columns::table(
        vec![order, source, point, prio, xoff, fraction, by, storm],
        table.width,
    );
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .block(titled(
                " pause sources by first XOFF, and who paused whom ".into(),
            ))
            .row_highlight_style(HIGHLIGHT),
        table,
        &mut table_state(app.selected),
    );
}
