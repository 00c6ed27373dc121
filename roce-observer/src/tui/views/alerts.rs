//! Alerts: grouped by kind, problems first (crate::severity); advice once per host pair or point.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Style},
    widgets::{Block, Borders, Paragraph, Table, Wrap},
};

use super::{HIGHLIGHT, MARK, View, table_state, window};
use crate::format;
use crate::tui::{
    app::App,
    columns::{self, Column},
};

/// The Alerts view.
pub struct Alerts;

impl View for Alerts {
    fn title(&self) -> &'static str {
        "Alerts"
    }

    fn rows(&self, app: &App) -> usize {
        alert_rows(app).len()
    }

    fn draw(&self, frame: &mut Frame, app: &App, area: Rect) {
        draw_alerts(frame, app, area);
    }
}

/// The Alerts view's rows: alert groups by kind, worst first (crate::severity), each group's
/// lines under it; advice is one line per host pair or observation point.
pub(super) fn alert_rows(app: &App) -> Vec<AlertRow<'_>> {
    let mut rows = Vec::new();
    for g in crate::severity::group_alerts(&app.snapshot.alerts) {
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

fn draw_alerts(frame: &mut Frame, app: &App, area: Rect) {
    let plain = Style::new();
    let rows = alert_rows(app);
    let mut mark = Column::new(" ", 0);
    let mut kind = Column::new("kind", 0);
    let mut count = Column::new("count", 1);
    let mut subject = Column::new("subject", 0);
    // The selected line's reason is shown in full, wrapped, below the table: the column claims
    // little, so that kind, count and subject fit at 80 columns.
    let mut reason = Column::new("reason", 2).fill_at_least(12);
    let shown = window(
        app.selected,
        rows.len(),
        usize::from(area.height.saturating_sub(7)),
    );
    let selected = app.selected.saturating_sub(shown.start);
    for r in &rows[shown] {
        let heading = r.reason.is_none();
        mark.push(
            if r.severity.is_problem() && heading {
                MARK
            } else {
                ""
            }
            .into(),
            Style::new().fg(Color::Red).bold(),
        );
        let style = if heading { Style::new().bold() } else { plain };
        kind.push(
            if heading {
                r.kind.into()
            } else {
                String::new()
            },
            style,
        );
        count.push(format::count(r.count), style);
        subject.push(r.subject.clone(), style);
        reason.push(r.reason.cloned().unwrap_or_default(), plain);
    }
    let (header, table_rows, widths) =
        columns::table(vec![mark, kind, count, subject, reason], area.width);
    let table = Table::new(table_rows, widths)
        .header(header)
        .block(
            Block::new()
                .borders(Borders::TOP)
                .title(" diagnostics by kind, problems first "),
        )
        .row_highlight_style(HIGHLIGHT);
    let [list, full] = Layout::vertical([Constraint::Min(3), Constraint::Length(5)]).areas(area);
    frame.render_stateful_widget(table, list, &mut table_state(selected));
    // The selected line's reason in full, wrapped (never cut).
    if let Some(r) = rows.get(app.selected) {
        let text = match r.reason {
            Some(reason) => format::terminal_owned(reason.clone()),
            None => format!(
                "{} {} ({}): select a line below for its reason",
                r.subject,
                r.kind,
                format::plural(r.count, "occurrence", "occurrences")
            ),
        };
        frame.render_widget(
            Paragraph::new(text)
                .block(
                    Block::new()
                        .borders(Borders::TOP)
                        .title(format!(" {} ", r.kind)),
                )
                .wrap(Wrap { trim: true }),
            full,
        );
    }
}
