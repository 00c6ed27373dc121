//! UI state and its transitions. Pure: no terminal, no I/O, so it is unit-tested directly.

use crate::engine::snapshot::{FlowSnapshot, Snapshot};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    Flows,
    Pfc,
    Ecmp,
    Alerts,
}

impl Tab {
    pub const ALL: [Tab; 4] = [Tab::Flows, Tab::Pfc, Tab::Ecmp, Tab::Alerts];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Flows => "Flows",
            Tab::Pfc => "PFC",
            Tab::Ecmp => "ECMP",
            Tab::Alerts => "Alerts",
        }
    }

    fn index(self) -> usize {
        Tab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }
}

/// Flow table ordering (largest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Bytes,
    Rate,
    Gaps,
    Retransmits,
    Naks,
    Cnp,
    RttP99,
}

impl SortKey {
    const ORDER: [SortKey; 7] = [
        SortKey::Bytes,
        SortKey::Rate,
        SortKey::Gaps,
        SortKey::Retransmits,
        SortKey::Naks,
        SortKey::Cnp,
        SortKey::RttP99,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Bytes => "bytes",
            SortKey::Rate => "rate",
            SortKey::Gaps => "PSN gaps",
            SortKey::Retransmits => "retransmits",
            SortKey::Naks => "NAKs",
            SortKey::Cnp => "CNPs",
            SortKey::RttP99 => "p99 latency",
        }
    }

    fn next(self) -> SortKey {
        let i = Self::ORDER.iter().position(|k| *k == self).unwrap_or(0);
        Self::ORDER[(i + 1) % Self::ORDER.len()]
    }

    fn value(self, f: &FlowSnapshot) -> f64 {
        match self {
            SortKey::Bytes => f.bytes as f64,
            SortKey::Rate => f.rate_bps,
            SortKey::Gaps => f.psn_gaps as f64,
            SortKey::Retransmits => f.retransmits as f64,
            SortKey::Naks => nak_total(f) as f64,
            SortKey::Cnp => f.cnp as f64,
            SortKey::RttP99 => f.rtt_ns.p99.unwrap_or(0) as f64,
        }
    }
}

pub fn nak_total(f: &FlowSnapshot) -> u64 {
    f.naks.total()
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
    CycleSort,
    ToggleDetail,
    TogglePause,
    ToggleHelp,
    Redraw,
    /// The input ended (a capture read to its end): the last state stays on screen.
    SourceEnded,
    /// A new snapshot from the engine.
    Snapshot(Box<Snapshot>),
}

pub struct App {
    /// What is being watched, for the title ("eth0, eth1" or a file name).
    pub source: String,
    pub tab: Tab,
    pub sort: SortKey,
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
    /// Flow indices of `snapshot.flows` in display order.
    pub order: Vec<usize>,
}

impl App {
    pub fn new(source: String, snapshot: Snapshot) -> App {
        let mut app = App {
            source,
            tab: Tab::Flows,
            sort: SortKey::Bytes,
            selected: 0,
            detail: false,
            paused: false,
            help: false,
            quit: false,
            ended: false,
            snapshot,
            held: None,
            order: Vec::new(),
        };
        app.reorder();
        app
    }

    fn rows(&self) -> usize {
        match self.tab {
            Tab::Flows => self.snapshot.flows.len(),
            Tab::Pfc => self.snapshot.pfc.len(),
            Tab::Ecmp => self.snapshot.ecmp.entropy.len(),
            Tab::Alerts => self.snapshot.alerts.len(),
        }
    }

    fn reorder(&mut self) {
        let flows = &self.snapshot.flows;
        let mut order: Vec<usize> = (0..flows.len()).collect();
        let key = self.sort;
        order.sort_by(|a, b| {
            key.value(&flows[*b])
                .total_cmp(&key.value(&flows[*a]))
                .then(a.cmp(b))
        });
        self.order = order;
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

    /// The flow under the cursor (Flows tab).
    pub fn selected_flow(&self) -> Option<&FlowSnapshot> {
        self.order
            .get(self.selected)
            .and_then(|i| self.snapshot.flows.get(*i))
    }

    pub fn update(&mut self, action: Action) {
        match action {
            Action::Quit => self.quit = true,
            Action::NextTab => self.select_tab(Tab::ALL[(self.tab.index() + 1) % Tab::ALL.len()]),
            Action::PrevTab => {
                self.select_tab(Tab::ALL[(self.tab.index() + Tab::ALL.len() - 1) % Tab::ALL.len()])
            }
            Action::SelectTab(tab) => self.select_tab(tab),
            Action::Up => self.selected = self.selected.saturating_sub(1),
            Action::Down => {
                self.selected += 1;
                self.clamp();
            }
            Action::Top => self.selected = 0,
            Action::Bottom => self.selected = self.rows().saturating_sub(1),
            Action::CycleSort => {
                self.sort = self.sort.next();
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
            Action::Redraw => {}
            Action::SourceEnded => self.ended = true,
            Action::Snapshot(snapshot) => {
                if self.paused {
                    self.held = Some(snapshot);
                } else {
                    self.show(*snapshot);
                }
            }
        }
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
