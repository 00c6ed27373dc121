//! ECMP: the measured and modelled path balance, and the entropy per host pair.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::Style,
    text::Line,
    widgets::Paragraph,
};

use super::{Screen, View, draw_table, titled};
use crate::format;
use crate::tui::columns::Column;

/// The ECMP view.
pub struct Ecmp;

impl View for Ecmp {
    fn title(&self) -> &'static str {
        "ECMP"
    }

    fn rows(&self, screen: &Screen) -> usize {
        screen.report.ecmp.entropy.len()
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_ecmp(frame, screen, area);
    }
}

fn draw_ecmp(frame: &mut Frame, screen: &Screen, area: Rect) {
    let ecmp = &screen.report.ecmp;
    let [top, bottom] = Layout::vertical([Constraint::Length(4), Constraint::Min(3)]).areas(area);
    let mut lines = vec![Line::from(format!(
        "measured over {}: max/mean {:.2}, Jain {:.3}",
        format::plural(
            ecmp.measured.paths.len() as u64,
            "observation point",
            "observation points"
        ),
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
    frame.render_widget(Paragraph::new(lines).block(titled(" ECMP ".into())), top);
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
    draw_table(
        frame,
        bottom,
        " entropy per host pair ".into(),
        vec![pair, bytes, qps, sports, busiest],
        screen.selected,
    );
}
