//! The views, one file each: a view is a type implementing [`View`] (its title, its rows, how it
//! draws), registered once in [`VIEWS`]. The tab bar, the digit keys and the help are made from
//! this list, so adding a view is a new file and one line here.

use ratatui::{
    Frame,
    layout::Rect,
    style::{Color, Modifier, Style},
    widgets::{Block, Borders, Paragraph, Table, TableState, Wrap},
};

use super::{app::App, columns::Column};

pub mod alerts;
pub mod ecmp;
pub mod flows;
pub mod mirror;
pub mod nic;
pub mod paths;
pub mod pfc;
pub mod steps;
pub mod storm;

/// One view of the report.
pub trait View: Sync {
    /// The name in the tab bar and the help.
    fn title(&self) -> &'static str;
    /// Rows the cursor moves over.
    fn rows(&self, app: &App) -> usize;
    fn draw(&self, frame: &mut Frame, app: &App, area: Rect);
    /// Height of a pane drawn below the view (the flow detail), 0 for none.
    fn pane(&self, _app: &App) -> u16 {
        0
    }
    fn draw_pane(&self, _frame: &mut Frame, _app: &App, _area: Rect) {}
}

/// The views in tab order: the first is the home view (the filter and the detail pane act on
/// it); digits select the first ten.
pub static VIEWS: [&dyn View; 9] = [
    &flows::Flows,
    &pfc::Pfc,
    &ecmp::Ecmp,
    &alerts::Alerts,
    &nic::Nic,
    &mirror::Mirror,
    &steps::Steps,
    &paths::Paths,
    &storm::Storm,
];

/// Intervals in the header's throughput trend and the PFC view's pause trend.
pub(super) const HEADER_TREND: usize = 16;

pub(super) const HIGHLIGHT: Style = Style::new().add_modifier(Modifier::REVERSED);

/// Problems carry this symbol as well as a colour, so they stand out without colour too
/// (NO_COLOR, `--color never`, monochrome terminals): before each count that is a problem, and
/// in the first column of a flow that has one (or that a problem alert names).
pub const MARK: &str = "!";

/// `text`, marked as a problem when `n` is not zero.
pub(super) fn marked(n: u64, text: String) -> String {
    if n > 0 { format!("{MARK}{text}") } else { text }
}

pub(super) fn table_state(selected: usize) -> TableState {
    TableState::default().with_selected(Some(selected))
}

/// The rows a table `visible` rows high shows of `rows` with `selected` highlighted, scrolled as
/// ratatui scrolls a fresh [`TableState`]: from the top until the selection passes the last
/// row, then with the selection on the last row. Only these rows are formatted (and measured
/// for column widths): formatting all of them took ~0.9 s per frame at 100,000 flows
/// (kernel-bench's user-space table, `+TUI ms`).
pub(super) fn window(selected: usize, rows: usize, visible: usize) -> std::ops::Range<usize> {
    let visible = visible.max(1);
    let end = (selected + 1).max(visible).min(rows);
    end.saturating_sub(visible)..end
}

pub(super) fn titled(title: String) -> Block<'static> {
    Block::new().borders(Borders::TOP).title(title)
}

/// A view's table, the part every view shares: the columns that fit the width, under a titled
/// top border, with the `selected` row (counted in `columns`' rows) highlighted.
fn draw_table(frame: &mut Frame, area: Rect, title: String, columns: Vec<Column>, selected: usize) {
    let (header, rows, widths) = super::columns::table(columns, area.width);
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .block(titled(title))
            .row_highlight_style(HIGHLIGHT),
        area,
        &mut table_state(selected),
    );
}

/// A view with nothing to show: its title and why.
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
