//! Tables that fit any terminal width: every column is as wide as its widest value, and when
//! the columns do not fit, whole columns are dropped, least important first, instead of
//! cutting values (a QP shown as `0x0` or a latency as `51.` reads as a wrong number).
//! The same for the header and footer lines: whole items are dropped, never cut.

use ratatui::{
    layout::Constraint,
    style::Style,
    text::{Line, Span},
    widgets::{Cell, Row},
};

/// Space between two columns (ratatui's default column spacing).
const SPACING: usize = 1;
/// What a fill column claims by default when columns are fitted (it then takes whatever is
/// left).
const FILL_MIN: usize = 24;

/// One column of a table: its title, its cells (text and style), and how important it is.
pub struct Column {
    pub title: std::borrow::Cow<'static, str>,
    /// 0 is never dropped; higher ranks are dropped first when the terminal is narrow.
    pub rank: u8,
    /// Takes the room left over, and is the one cut at the edge when even the columns that are
    /// never dropped do not fit (free text, such as an alert's reason).
    pub fill: bool,
    /// What the fill column claims when columns are fitted.
    fill_min: usize,
    pub cells: Vec<(String, Style)>,
}

impl Column {
    pub fn new(title: &'static str, rank: u8) -> Column {
        Column {
            title: title.into(),
            rank,
            fill: false,
            fill_min: FILL_MIN,
            cells: Vec::new(),
        }
    }

    /// Mark the column the table is sorted by: `▼` largest first, `▲` smallest first.
    pub fn sorted(&mut self, ascending: bool) {
        let arrow = if ascending { '▲' } else { '▼' };
        self.title = format!("{}{arrow}", self.title.trim_end()).into();
    }

    pub fn fill(mut self) -> Column {
        self.fill = true;
        self
    }

    /// A fill column that claims only `min` characters (its text is shown in full elsewhere).
    pub fn fill_at_least(mut self, min: usize) -> Column {
        self.fill = true;
        self.fill_min = min;
        self
    }

    /// A cell; text from captures and other processes is shown with its control characters
    /// escaped (ratatui would drop them silently).
    pub fn push(&mut self, text: String, style: Style) {
        self.cells
            .push((crate::format::terminal_owned(text), style));
    }

    fn width(&self) -> usize {
        self.cells
            .iter()
            .map(|(t, _)| t.chars().count())
            .chain(std::iter::once(self.title.chars().count()))
            .max()
            .unwrap_or(0)
    }
}

/// The columns that fit in `width`, in their order: the widest set obtained by dropping the
/// highest-ranked columns first (among equal ranks, the rightmost).
pub fn fit(columns: &[Column], width: u16) -> Vec<usize> {
    let widths: Vec<(usize, u8)> = columns
        .iter()
        .map(|c| {
            let w = if c.fill {
                c.width().min(c.fill_min)
            } else {
                c.width()
            };
            (w, c.rank)
        })
        .collect();
    keep_by_rank(&widths, SPACING, width)
}

/// Indices of the items (width, rank) kept in `width`, `spacing` apart: the highest rank goes
/// first (among equal ranks, the rightmost); rank 0 is never dropped.
fn keep_by_rank(items: &[(usize, u8)], spacing: usize, width: u16) -> Vec<usize> {
    let mut kept: Vec<usize> = (0..items.len()).collect();
    let total = |kept: &[usize]| -> usize {
        kept.iter().map(|i| items[*i].0).sum::<usize>() + kept.len().saturating_sub(1) * spacing
    };
    while total(&kept) > usize::from(width) {
        let Some(pos) = kept
            .iter()
            .enumerate()
            .filter(|(_, i)| items[**i].1 > 0)
            .max_by_key(|(pos, i)| (items[**i].1, *pos))
            .map(|(pos, _)| pos)
        else {
            break;
        };
        kept.remove(pos);
    }
    kept
}

/// A table's header, rows and widths, with only the columns that fit in `width`.
pub fn table(
    columns: Vec<Column>,
    width: u16,
) -> (Row<'static>, Vec<Row<'static>>, Vec<Constraint>) {
    let kept = fit(&columns, width);
    let rows = columns.first().map_or(0, |c| c.cells.len());
    let header = Row::new(kept.iter().map(|i| Cell::from(columns[*i].title.clone())))
        .style(Style::new().bold());
    let widths = kept
        .iter()
        .map(|i| {
            let w = u16::try_from(columns[*i].width()).unwrap_or(u16::MAX);
            if columns[*i].fill {
                Constraint::Fill(1)
            } else {
                Constraint::Length(w)
            }
        })
        .collect();
    let body = (0..rows)
        .map(|r| {
            Row::new(kept.iter().map(|i| {
                let (text, style) = columns[*i].cells.get(r).cloned().unwrap_or_default();
                Cell::from(text).style(style)
            }))
        })
        .collect();
    (header, body, widths)
}

/// A line of items separated by two spaces, with the highest-ranked items dropped until it fits
/// in `width` (rank 0 items are always kept).
pub fn line(items: Vec<(Span<'static>, u8)>, width: u16) -> Line<'static> {
    let sizes: Vec<(usize, u8)> = items.iter().map(|(s, r)| (s.width(), *r)).collect();
    let mut spans = Vec::with_capacity(items.len() * 2);
    for (n, i) in keep_by_rank(&sizes, 2, width).into_iter().enumerate() {
        if n > 0 {
            spans.push(Span::raw("  "));
        }
        spans.push(items[i].0.clone());
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(title: &'static str, rank: u8, value: &str) -> Column {
        let mut c = Column::new(title, rank);
        c.push(value.into(), Style::new());
        c
    }

    #[test]
    fn everything_fits_when_wide_enough() {
        let cols = [col("a", 0, "xxxx"), col("b", 2, "yy"), col("c", 1, "z")];
        // 4 + 1 + 2 + 1 + 1 = 9
        assert_eq!(fit(&cols, 9), [0, 1, 2]);
    }

    #[test]
    fn highest_rank_goes_first_then_the_next() {
        let cols = [col("a", 0, "xxxx"), col("b", 2, "yy"), col("c", 1, "z")];
        assert_eq!(fit(&cols, 8), [0, 2], "b (rank 2) is dropped first");
        assert_eq!(fit(&cols, 5), [0]);
        assert_eq!(fit(&cols, 2), [0], "rank 0 stays even when it does not fit");
    }

    #[test]
    fn a_column_is_as_wide_as_its_widest_value_or_title() {
        let mut c = col("QP", 1, "0x000101");
        c.push("0x1".into(), Style::new());
        assert_eq!(c.width(), 8);
        assert_eq!(col("retx", 1, "7").width(), 4);
    }

    #[test]
    fn lines_drop_whole_items() {
        let items = vec![
            (Span::raw("title"), 0),
            (Span::raw("flows 10"), 1),
            (Span::raw("malformed 0"), 3),
        ];
        let text = |w| line(items.clone(), w).to_string();
        assert_eq!(text(40), "title  flows 10  malformed 0");
        assert_eq!(text(20), "title  flows 10");
        assert_eq!(text(3), "title");
    }
}
