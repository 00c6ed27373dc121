//! Steps: training steps and stragglers (`steps` in the report).

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::Style,
    text::Line,
    widgets::{Paragraph, Table},
};

use super::{Screen, View, draw_table, empty, titled, warn};
use crate::tui::columns::{self, Column};
use crate::{format, report::StepsSnapshot};

/// The Steps view.
pub struct Steps;

impl View for Steps {
    fn title(&self) -> &'static str {
        "Steps"
    }

    fn rows(&self, screen: &Screen) -> usize {
        screen
            .report
            .steps
            .as_ref()
            .map_or(0, |s| s.stragglers.len())
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_steps(frame, screen, area);
    }
}

fn draw_steps(frame: &mut Frame, screen: &Screen, area: Rect) {
    let Some(st) = &screen.report.steps else {
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
                crate::report::steps::steps_window(st),
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
    draw_stragglers(frame, screen, st, stragglers);
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

fn draw_stragglers(frame: &mut Frame, screen: &Screen, st: &StepsSnapshot, area: Rect) {
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
    let title = if st.stragglers.is_empty() {
        " stragglers: none (no flow ends its steps last most often) "
    } else {
        " stragglers (evidence in their late steps) "
    };
    draw_table(
        frame,
        area,
        title.into(),
        vec![flow, late, lag, ce, cnp, retx, naks, pause, point],
        screen.selected,
    );
}
