//! Alerts: grouped by kind, problems first (crate::severity); advice once per host pair or point.

use ratatui::{
    Frame,
    layout::{Alignment, Constraint, Rect},
    style::{Color, Style},
    text::{Line, Text},
    widgets::{Cell, Row, Table},
};

use super::{HIGHLIGHT, MARK, Screen, View, empty, table_state, titled};
use crate::format;

/// The Alerts view.
pub struct Alerts;

impl View for Alerts {
    fn title(&self) -> &'static str {
        "Alerts"
    }

    fn rows(&self, screen: &Screen) -> usize {
        alert_rows(screen).len()
    }

    fn draw(&self, frame: &mut Frame, screen: &Screen, area: Rect) {
        draw_alerts(frame, screen, area);
    }
}

/// The Alerts view's rows: alert groups by kind, worst first (crate::severity), each group's
/// lines under it; advice is one line per host pair or observation point.
pub(super) fn alert_rows<'a>(screen: &Screen<'a>) -> Vec<AlertRow<'a>> {
    let mut rows = Vec::new();
    for g in crate::severity::group_alerts(&screen.report.alerts) {
        rows.push(AlertRow {
            kind: g.kind,
            severity: g.severity,
            count: g.count,
            subject: format::plural(g.alerts as u64, "alert", "alerts"),
            reason: None,
        });
        for e in g.entries {
            rows.push(AlertRow {
                kind: g.kind,
                severity: g.severity,
                count: e.count,
                subject: format!("  {}", e.subject.text()),
                reason: Some(&e.alert.reason),
            });
        }
    }
    rows
}

/// A row of the Alerts view: a group's heading (no reason) or one of its lines.
pub(super) struct AlertRow<'a> {
    kind: &'static str,
    severity: crate::severity::Severity,
    count: u64,
    subject: String,
    reason: Option<&'a String>,
}

const TITLE: &str = "diagnostics by kind, problems first";

/// Room a reason needs beside the subject; with less it goes under the subject.
const REASON_BESIDE: usize = 40;

fn draw_alerts(frame: &mut Frame, screen: &Screen, area: Rect) {
    let rows = alert_rows(screen);
    if rows.is_empty() {
        empty(
            frame,
            area,
            TITLE,
            "No alerts: nothing in this report crossed a rule (docs/metrics.md, \"Alerts\").",
        );
        return;
    }
    let layout = Layout::measure(&rows, usize::from(area.width));
    // Each reason is wrapped in its row, never cut: rows are as high as their text.
    let cells: Vec<RowText> = rows.iter().map(|r| layout.text(r)).collect();
    let heights: Vec<usize> = cells.iter().map(RowText::height).collect();
    // The area less its top border (the title) and the header row.
    let shown = tall_window(
        screen.selected,
        &heights,
        usize::from(area.height.saturating_sub(2)),
    );
    let selected = screen.selected.saturating_sub(shown.start);
    let plain = Style::new();
    let table_rows: Vec<Row> = shown
        .map(|i| {
            let r = &rows[i];
            let heading = r.reason.is_none();
            let style = if heading { Style::new().bold() } else { plain };
            let mark = if r.severity.is_problem() && heading {
                MARK
            } else {
                ""
            };
            let kind = if heading { r.kind } else { "" };
            let mut row = vec![
                Cell::from(mark).style(Style::new().fg(Color::Red).bold()),
                Cell::from(kind).style(style),
                Cell::from(Text::from(format::count(r.count)).alignment(Alignment::Right))
                    .style(style),
            ];
            let text = &cells[i];
            // The subject's first line carries the row's style; the reason is plain.
            let mut subject: Vec<Line> = text
                .subject
                .iter()
                .enumerate()
                .map(|(n, l)| {
                    if n == 0 {
                        Line::styled(l.clone(), style)
                    } else {
                        Line::raw(l.clone())
                    }
                })
                .collect();
            if subject.is_empty() {
                subject.push(Line::raw(""));
            }
            row.push(Cell::from(Text::from(subject)));
            if layout.beside {
                row.push(Cell::from(Text::from_iter(text.reason.iter().cloned())));
            }
            Row::new(row).height(u16::try_from(text.height()).unwrap_or(u16::MAX))
        })
        .collect();
    let mut header = vec!["", "kind", "count", "subject"];
    let mut widths = vec![
        Constraint::Length(1),
        Constraint::Length(layout.kind as u16),
        Constraint::Length(layout.count as u16),
        Constraint::Length(layout.subject as u16),
    ];
    if layout.beside {
        header.push("reason");
        widths.push(Constraint::Fill(1));
    } else {
        header[3] = "subject, reason";
    }
    let table = Table::new(table_rows, widths)
        .header(Row::new(header).style(Style::new().bold()))
        .block(titled(format!(" {TITLE} ")))
        .row_highlight_style(HIGHLIGHT);
    frame.render_stateful_widget(table, area, &mut table_state(selected));
}

/// The Alerts table's column widths at a terminal width: kind, count and subject as wide as
/// their widest value; the reason beside the subject when [`REASON_BESIDE`] columns are left,
/// else under it, in the subject's column.
struct Layout {
    kind: usize,
    count: usize,
    subject: usize,
    /// The reason's own column (beside) or the subject column's width (under).
    reason: usize,
    beside: bool,
}

impl Layout {
    fn measure(rows: &[AlertRow<'_>], width: usize) -> Layout {
        let widest = |f: &dyn Fn(&AlertRow<'_>) -> usize, title: &str| {
            rows.iter().map(f).chain([title.len()]).max().unwrap_or(0)
        };
        let kind = widest(
            &|r| if r.reason.is_none() { r.kind.len() } else { 0 },
            "kind",
        );
        let count = widest(&|r| format::count(r.count).chars().count(), "count");
        let subject = widest(&|r| r.subject.chars().count(), "subject");
        // The mark, then a space between each two columns.
        let fixed = 1 + 1 + kind + 1 + count + 1;
        let left = width.saturating_sub(fixed + subject + 1);
        if left >= REASON_BESIDE {
            return Layout {
                kind,
                count,
                subject,
                reason: left,
                beside: true,
            };
        }
        let subject = width.saturating_sub(fixed).max(1);
        Layout {
            kind,
            count,
            subject,
            reason: subject.saturating_sub(UNDER.len()).max(1),
            beside: false,
        }
    }

    /// A row's text: the subject's lines and the reason's, wrapped to their columns (beside)
    /// or both in the subject's column, the reason indented under the subject (under).
    fn text(&self, r: &AlertRow<'_>) -> RowText {
        let subject = format::terminal(&r.subject).into_owned();
        let reason = r
            .reason
            .map(|t| wrap(&format::terminal(t), self.reason))
            .unwrap_or_default();
        if self.beside {
            return RowText {
                subject: vec![subject],
                reason,
            };
        }
        // A line of a group keeps its indent under the group's heading.
        let body = subject.trim_start();
        let lead = &subject[..subject.len() - body.len()];
        let mut subject: Vec<String> = wrap(body, self.subject.saturating_sub(lead.len()))
            .into_iter()
            .map(|l| format!("{lead}{l}"))
            .collect();
        subject.extend(reason.into_iter().map(|l| format!("{UNDER}{l}")));
        RowText {
            subject,
            reason: Vec::new(),
        }
    }
}

/// The text of one row of the Alerts view, by column.
struct RowText {
    subject: Vec<String>,
    reason: Vec<String>,
}

impl RowText {
    /// Lines the row takes.
    fn height(&self) -> usize {
        self.subject.len().max(self.reason.len()).max(1)
    }
}

/// The indent of a reason under its subject.
const UNDER: &str = "    ";

/// `text` word-wrapped to `width` columns; a word longer than a line is split.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > width {
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.drain(..width).collect());
        }
        let word: String = word.into_iter().collect();
        let used = line.chars().count();
        if used > 0 && used + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// The rows a table `visible` lines high shows of rows `heights` high with `selected` on
/// screen: from the top until the selection would pass the bottom, then with the selection
/// the last row (as [`super::window`], counting each row's height). Rows that would not fit
/// whole are left out.
fn tall_window(selected: usize, heights: &[usize], visible: usize) -> std::ops::Range<usize> {
    let fits = |range: std::ops::Range<usize>| heights[range].iter().sum::<usize>() <= visible;
    let selected = selected.min(heights.len().saturating_sub(1));
    let mut start = 0;
    while start < selected && !fits(start..selected + 1) {
        start += 1;
    }
    let mut end = (selected + 1).min(heights.len());
    while end < heights.len() && fits(start..end + 1) {
        end += 1;
    }
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_every_word_and_splits_only_overlong_ones() {
        assert_eq!(wrap("a bb ccc", 4), ["a bb", "ccc"]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), [""]);
    }

    #[test]
    fn tall_window_counts_row_heights() {
        // Rows 1, 3, 3, 1 high in 5 lines.
        let h = [1, 3, 3, 1];
        assert_eq!(tall_window(0, &h, 5), 0..2);
        assert_eq!(tall_window(1, &h, 5), 0..2);
        assert_eq!(tall_window(2, &h, 5), 2..4, "the selection comes into view");
        assert_eq!(tall_window(3, &h, 5), 2..4);
        // A row higher than the window is still shown.
        assert_eq!(tall_window(1, &[1, 9], 5), 1..2);
    }
}
