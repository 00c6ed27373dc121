//! Mirrors: switch-mirror sessions, their frames and mirror-path loss.

use ratatui::{
    Frame,
    layout::Rect,
    style::{Color, Style},
};

use super::{Screen, View, draw_table, empty, marked};
use crate::format;
use crate::tui::columns::Column;

/// The Mirrors view.
pub struct Mirror;

impl View for Mirror {
    fn title(&self) -> &'static str {
        "Mirrors"
    }

    fn rows(&self, screen: &Screen) -> usize {
        screen.report.mirror.len()
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_mirror(frame, screen, area);
    }
}

fn draw_mirror(frame: &mut Frame, screen: &Screen, area: Rect) {
    let title = format!(
        "switch-mirror sessions: frames lost on the mirror path {}",
        screen.report.summary.mirror_seq_lost
    );
    if screen.report.mirror.is_empty() {
        empty(
            frame,
            area,
            &title,
            "No switch mirror seen: ERSPAN, GRE bridging and VXLAN mirrors are unwrapped and \
             counted here per session (docs/metrics.md, \"Mirror sessions\").",
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
    for m in &screen.report.mirror {
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
    draw_table(
        frame,
        area,
        format!(" {title} "),
        vec![source, to, frames, lost, late, resyncs, seen],
        screen.selected,
    );
}
