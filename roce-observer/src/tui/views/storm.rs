//! Storm: the PFC storm origin (`pfc_origin` in the report).

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Style},
    text::Line,
    widgets::Paragraph,
};

use super::{Screen, View, after, draw_table, empty, titled};
use crate::tui::columns::Column;
use crate::{format, report::PfcRef};

/// The Storm view.
pub struct Storm;

impl View for Storm {
    fn title(&self) -> &'static str {
        "Storm"
    }

    fn rows(&self, screen: &Screen) -> usize {
        screen
            .report
            .pfc_origin
            .as_ref()
            .map_or(0, |o| o.sources.len())
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_storm(frame, screen, area);
    }
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

fn draw_storm(frame: &mut Frame, screen: &Screen, area: Rect) {
    let Some(o) = &screen.report.pfc_origin else {
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
                // A deadlock is a closed loop: no member is its root.
                _ if o.origin.is_none() => "in the cycle".into(),
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
    draw_table(
        frame,
        table,
        " pause sources by first XOFF, and who paused whom ".into(),
        vec![order, source, point, prio, xoff, fraction, by, storm],
        screen.selected,
    );
}
