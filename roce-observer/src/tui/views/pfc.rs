//! PFC / PAUSE: per source MAC and priority, with the paused time per interval.

use ratatui::{
    Frame,
    layout::Rect,
    style::{Color, Style},
};

use super::{HEADER_TREND, Screen, View, draw_table};
use crate::format;
use crate::tui::{
    columns::Column,
    history::{bars, pfc_id},
};

/// The PFC view.
pub struct Pfc;

impl View for Pfc {
    fn title(&self) -> &'static str {
        "PFC"
    }

    fn rows(&self, screen: &Screen) -> usize {
        screen.report.pfc.len()
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_pfc(frame, screen, area);
    }
}

fn draw_pfc(frame: &mut Frame, screen: &Screen, area: Rect) {
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
    for p in &screen.report.pfc {
        let series = screen.history.pfc_paused_us.get(&pfc_id(p));
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
    let title = format!(
        " PFC / PAUSE per source and priority (quanta at {} Gb/s) ",
        screen.report.summary.link_gbps
    );
    draw_table(
        frame,
        area,
        title,
        vec![
            iface, mac, prio, xoff, xon, quanta, paused, fraction, trend, storm,
        ],
        screen.selected,
    );
}
