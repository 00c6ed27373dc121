//! Paths: loss between observation points (`paths` in the report).

use ratatui::{Frame, layout::Rect, style::Style};

use super::{Screen, View, draw_table, empty, warn};
use crate::format;
use crate::tui::columns::Column;

/// The Paths view.
pub struct Paths;

impl View for Paths {
    fn title(&self) -> &'static str {
        "Paths"
    }

    fn rows(&self, screen: &Screen) -> usize {
        screen.report.paths.len()
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_paths(frame, screen, area);
    }
}

fn draw_paths(frame: &mut Frame, screen: &Screen, area: Rect) {
    let paths = &screen.report.paths;
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
    draw_table(
        frame,
        area,
        " where was it lost: request PSNs seen upstream, missing downstream (lost) ".into(),
        vec![flow, hop, missing, both, unseen, psns],
        screen.selected,
    );
}
