//! NIC: the host's RDMA hardware counters per interval.

use ratatui::{
    Frame,
    layout::Rect,
    style::{Color, Style},
};

use super::{Screen, View, draw_table, empty};
use crate::format;
use crate::tui::columns::Column;

/// The NIC view.
pub struct Nic;

impl View for Nic {
    fn title(&self) -> &'static str {
        "NIC"
    }

    fn rows(&self, screen: &Screen) -> usize {
        crate::report::nic::nic_rows(screen.report).len()
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_nic(frame, screen, area);
    }
}

fn draw_nic(frame: &mut Frame, screen: &Screen, area: Rect) {
    const TITLE: &str = "NIC counters per interval (hw_counters, ethtool -S)";
    if screen.report.nic.is_empty() {
        empty(
            frame,
            area,
            TITLE,
            "No RDMA device is read: this host has none under /sys/class/infiniband, or \
             --rdma-dev none was given.",
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
    for r in crate::report::nic::nic_rows(screen.report) {
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
    draw_table(
        frame,
        area,
        format!(" {TITLE} "),
        vec![port, name, per_s, delta, total, meaning],
        screen.selected,
    );
}
