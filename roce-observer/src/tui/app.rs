//! UI state and its transitions. Pure: no terminal, no I/O, so it is unit-tested directly.

use ratatui::crossterm::event::{KeyCode, KeyModifiers};

use super::{
    flow_table::FlowTable,
    history::History,
    views::{Screen, VIEWS, View},
};
use crate::report::{FlowSnapshot, Snapshot};

/// A view, by its place in [`VIEWS`] (the tab order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tab(usize);

impl Tab {
    /// The home view (flows): the filter and the detail pane act on it.
    pub const FLOWS: Tab = Tab(0);

    /// Every view, in tab order.
    pub fn all() -> Vec<Tab> {
        (0..VIEWS.len()).map(Tab).collect()
    }

    /// The view at `index` in tab order.
    pub fn at(index: usize) -> Option<Tab> {
        (index < VIEWS.len()).then_some(Tab(index))
    }

    /// The view titled `title` (as the tab bar shows it).
    pub fn titled(title: &str) -> Option<Tab> {
        VIEWS.iter().position(|v| v.title() == title).map(Tab)
    }

    pub fn view(self) -> &'static dyn View {
        VIEWS[self.0 % VIEWS.len()]
    }

    pub fn title(self) -> &'static str {
        self.view().title()
    }

    pub fn index(self) -> usize {
        self.0
    }

    fn next(self) -> Tab {
        Tab((self.0 + 1) % VIEWS.len())
    }

    fn prev(self) -> Tab {
        Tab((self.0 + VIEWS.len() - 1) % VIEWS.len())
    }
}

#[derive(Clone, Debug)]
pub enum Action {
    Quit,
    NextTab,
    PrevTab,
    SelectTab(Tab),
    Up,
    Down,
    Top,
    Bottom,
    /// Page up / down by [`App::page`] rows.
    PageUp,
    PageDown,
    CycleSort,
    /// Reverse the sort direction (`S`).
    ReverseSort,
    /// Close what is open: help, then the detail pane, then the filter (Esc); never quits.
    Back,
    /// Write the report on screen (the JSON document) to a file (`w`): the run loop writes it
    /// and reports where with [`App::status`].
    WriteReport,
    ToggleDetail,
    TogglePause,
    ToggleHelp,
    Redraw,
    /// A key press, mapped to an action by the current mode (typing a filter or not).
    Key(KeyCode, KeyModifiers),
    /// Start typing a filter (`/`).
    StartFilter,
    /// One row per QP, or one per observation point (`m`).
    ToggleMerge,
    /// The input ended (a capture read to its end): the last state stays on screen.
    SourceEnded,
    /// A new snapshot from the engine.
    Snapshot(Box<Snapshot>),
}

pub struct App {
    /// What is being watched, for the title ("eth0, eth1" or a file name).
    pub source: String,
    pub tab: Tab,
    /// Rows a page key moves (the table's height, set by the run loop before drawing).
    pub page: usize,
    /// A one-line message for the footer (where a report was written, or why not).
    pub status: Option<String>,
    /// The user asked for the report to be written (`w`); the run loop takes it.
    pub write_requested: bool,
    /// Selected row in the current tab.
    pub selected: usize,
    pub detail: bool,
    pub paused: bool,
    pub help: bool,
    pub quit: bool,
    /// The input has ended: what is on screen is final.
    pub ended: bool,
    /// The snapshot on screen (frozen while paused).
    pub snapshot: Snapshot,
    /// The newest snapshot that arrived while paused, shown on resume.
    held: Option<Box<Snapshot>>,
    /// The Flows view's own state: sort, filter, merged rows, display order.
    pub table: FlowTable,
    /// Keys go to the filter text until Enter or Esc.
    pub typing_filter: bool,
    /// What the snapshots showed over the last intervals (recorded even while paused).
    pub history: History,
}

impl App {
    pub fn new(source: String, snapshot: Snapshot) -> App {
        let mut app = App {
            source,
            tab: Tab::FLOWS,
            page: 10,
            status: None,
            write_requested: false,
            selected: 0,
            detail: false,
            paused: false,
            help: false,
            quit: false,
            ended: false,
            snapshot,
            held: None,
            table: FlowTable::default(),
            typing_filter: false,
            history: History::default(),
        };
        app.history.record(&app.snapshot);
        app.reorder();
        app
    }

    fn rows(&self) -> usize {
        self.tab.view().rows(&self.screen())
    }

    /// What the views read: the report on screen and the state they draw from, not the App.
    pub fn screen(&self) -> Screen<'_> {
        Screen {
            report: &self.snapshot,
            history: &self.history,
            selected: self.selected,
            ended: self.ended,
            detail: self.detail,
            flows: &self.table,
        }
    }

    fn reorder(&mut self) {
        self.table.refresh(&self.snapshot);
        self.clamp();
    }

    fn clamp(&mut self) {
        let rows = self.rows();
        if rows == 0 {
            self.selected = 0;
        } else if self.selected >= rows {
            self.selected = rows - 1;
        }
    }

    /// The flow rows: the snapshot's, or one per QP when merged.
    pub fn flows(&self) -> &[std::sync::Arc<FlowSnapshot>] {
        self.table.rows(&self.snapshot)
    }

    /// The flow under the cursor (Flows tab).
    pub fn selected_flow(&self) -> Option<&FlowSnapshot> {
        self.table.at(&self.snapshot, self.selected)
    }

    pub fn update(&mut self, action: Action) {
        match action {
            Action::Key(code, modifiers) => {
                let ctrl_c =
                    code == KeyCode::Char('c') && modifiers.contains(KeyModifiers::CONTROL);
                if self.typing_filter && !ctrl_c {
                    self.type_filter(code);
                } else if let Some(action) = super::action_for_key(code, modifiers) {
                    self.update(action);
                }
            }
            Action::StartFilter => {
                self.typing_filter = true;
                self.select_tab(Tab::FLOWS);
            }
            Action::Quit => self.quit = true,
            Action::NextTab => self.select_tab(self.tab.next()),
            Action::PrevTab => self.select_tab(self.tab.prev()),
            Action::SelectTab(tab) => self.select_tab(tab),
            Action::Up => self.selected = self.selected.saturating_sub(1),
            Action::Down => {
                self.selected += 1;
                self.clamp();
            }
            Action::PageUp => self.selected = self.selected.saturating_sub(self.page.max(1)),
            Action::PageDown => {
                self.selected += self.page.max(1);
                self.clamp();
            }
            Action::ReverseSort => {
                self.table.ascending = !self.table.ascending;
                self.reorder();
            }
            Action::Back => {
                if self.help {
                    self.help = false;
                } else if self.detail {
                    self.detail = false;
                } else if !self.table.filter.is_empty() {
                    self.table.filter.clear();
                    self.reorder();
                }
            }
            Action::WriteReport => self.write_requested = true,
            Action::Top => self.selected = 0,
            Action::Bottom => self.selected = self.rows().saturating_sub(1),
            Action::CycleSort => {
                self.table.sort = self.table.sort.next();
                self.table.ascending = false;
                self.reorder();
            }
            Action::ToggleDetail => self.detail = !self.detail,
            Action::TogglePause => {
                self.paused = !self.paused;
                if !self.paused
                    && let Some(snapshot) = self.held.take()
                {
                    self.show(*snapshot);
                }
            }
            Action::ToggleHelp => self.help = !self.help,
            Action::ToggleMerge => {
                self.table.merged = !self.table.merged;
                self.reorder();
            }
            Action::Redraw => {}
            Action::SourceEnded => self.ended = true,
            Action::Snapshot(snapshot) => {
                self.history.record(&snapshot);
                if self.paused {
                    self.held = Some(snapshot);
                } else {
                    self.show(*snapshot);
                }
            }
        }
    }

    fn type_filter(&mut self, code: KeyCode) {
        match code {
            KeyCode::Enter => self.typing_filter = false,
            KeyCode::Esc => {
                self.typing_filter = false;
                self.table.filter.clear();
            }
            KeyCode::Backspace => {
                self.table.filter.pop();
            }
            KeyCode::Char(c) => self.table.filter.push(c),
            _ => return,
        }
        self.reorder();
    }

    fn show(&mut self, snapshot: Snapshot) {
        self.snapshot = snapshot;
        self.reorder();
    }

    fn select_tab(&mut self, tab: Tab) {
        if tab != self.tab {
            self.tab = tab;
            self.selected = 0;
        }
    }
}
