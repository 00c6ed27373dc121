//! UI state and its transitions. Pure: no terminal, no I/O, so it is unit-tested directly.

use std::{collections::HashMap, net::IpAddr, sync::Arc};

use ratatui::crossterm::event::{KeyCode, KeyModifiers};

use super::{
    history::History,
    views::{VIEWS, View},
};
use crate::{
    engine::snapshot::{FlowSnapshot, MirrorSource, Snapshot},
    severity::Severity,
};

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

/// Flow table ordering: by a column, largest first unless reversed (`S`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Worst severity first (crate::severity, the order of every renderer), then by bytes.
    Problems,
    Bytes,
    Packets,
    Rate,
    Gaps,
    Retransmits,
    Naks,
    Cnp,
    Ce,
    RttP50,
    RttP99,
    Qp,
}

impl SortKey {
    const ORDER: [SortKey; 12] = [
        SortKey::Problems,
        SortKey::Bytes,
        SortKey::Packets,
        SortKey::Rate,
        SortKey::Gaps,
        SortKey::Retransmits,
        SortKey::Naks,
        SortKey::Cnp,
        SortKey::Ce,
        SortKey::RttP50,
        SortKey::RttP99,
        SortKey::Qp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Problems => "problems",
            SortKey::Bytes => "bytes",
            SortKey::Packets => "packets",
            SortKey::Rate => "rate",
            SortKey::Gaps => "PSN gaps",
            SortKey::Retransmits => "retransmits",
            SortKey::Naks => "NAKs",
            SortKey::Cnp => "CNPs",
            SortKey::Ce => "CE marks",
            SortKey::RttP50 => "p50 latency",
            SortKey::RttP99 => "p99 latency",
            SortKey::Qp => "QP",
        }
    }

    /// The flow table's column this key sorts by (its header carries the sort arrow); bytes
    /// have no column of their own and mark none.
    pub fn column(self) -> Option<&'static str> {
        Some(match self {
            SortKey::Problems => " ",
            SortKey::Bytes => return None,
            SortKey::Packets => "pkts",
            SortKey::Rate => "rate",
            SortKey::Gaps => "gaps/miss",
            SortKey::Retransmits => "retx",
            SortKey::Naks => "NAK",
            SortKey::Cnp => "CNP",
            SortKey::Ce => "CE",
            SortKey::RttP50 => "p50",
            SortKey::RttP99 => "p99",
            SortKey::Qp => "QP",
        })
    }

    fn next(self) -> SortKey {
        let i = Self::ORDER.iter().position(|k| *k == self).unwrap_or(0);
        Self::ORDER[(i + 1) % Self::ORDER.len()]
    }

    fn value(self, f: &FlowSnapshot) -> f64 {
        match self {
            SortKey::Problems | SortKey::Bytes => f.bytes as f64,
            SortKey::Packets => f.packets as f64,
            SortKey::Rate => f.rate_bps,
            SortKey::Gaps => f.psn_gaps as f64,
            SortKey::Retransmits => f.retransmits as f64,
            SortKey::Naks => nak_total(f) as f64,
            SortKey::Cnp => f.cnp as f64,
            SortKey::Ce => f.ecn_ce as f64,
            SortKey::RttP50 => f.rtt_ns.p50.unwrap_or(0) as f64,
            SortKey::RttP99 => f.rtt_ns.p99.unwrap_or(0) as f64,
            SortKey::Qp => f64::from(f.dst_qp),
        }
    }
}

/// A flow's identity across the snapshot's flows and alerts.
type FlowId<'a> = (
    IpAddr,
    IpAddr,
    u32,
    &'a str,
    &'static str,
    Option<&'a MirrorSource>,
);

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
    pub sort: SortKey,
    /// Smallest first instead of largest first.
    pub ascending: bool,
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
    /// One row per QP: each flow's observation points merged (`m`).
    pub merged: bool,
    /// The merged rows while `merged` is on.
    merged_flows: Vec<Arc<FlowSnapshot>>,
    /// Flow indices of [`App::flows`] in display order (those the filter lets through).
    pub order: Vec<usize>,
    /// Per flow of [`App::flows`]: whether it has a problem (see [`App::is_problem`]).
    pub problem: Vec<bool>,
    /// Per flow of [`App::flows`]: its severity, raised by the problem alerts that name it.
    pub severity: Vec<Severity>,
    /// Flows shown are those whose addresses, QPs or interface contain this text.
    pub filter: String,
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
            sort: SortKey::Problems,
            ascending: false,
            page: 10,
            status: None,
            write_requested: false,
            severity: Vec::new(),
            selected: 0,
            detail: false,
            paused: false,
            help: false,
            quit: false,
            ended: false,
            snapshot,
            held: None,
            order: Vec::new(),
            problem: Vec::new(),
            filter: String::new(),
            typing_filter: false,
            history: History::default(),
            merged: false,
            merged_flows: Vec::new(),
        };
        app.history.record(&app.snapshot);
        app.reorder();
        app
    }

    fn rows(&self) -> usize {
        self.tab.view().rows(self)
    }

    fn reorder(&mut self) {
        self.merged_flows = if self.merged {
            merge_points(&self.snapshot.flows)
        } else {
            Vec::new()
        };
        let flows: &[Arc<FlowSnapshot>] = if self.merged {
            &self.merged_flows
        } else {
            &self.snapshot.flows
        };
        // Flows an alert names (latency over the threshold among them); a merged row stands
        // for all its observation points.
        let merged = self.merged;
        fn id<'a>(
            merged: bool,
            (src, dst, qp): (IpAddr, IpAddr, u32),
            (iface, dir): (&'a str, &'static str),
            mirror: Option<&'a MirrorSource>,
        ) -> FlowId<'a> {
            if merged {
                (src, dst, qp, "", "", None)
            } else {
                (src, dst, qp, iface, dir, mirror)
            }
        }
        // Only problem alerts raise a flow: advice (not_ect, ...) is about a host pair and
        // marks no flow.
        let mut alerted: HashMap<FlowId<'_>, Severity> = HashMap::new();
        for a in &self.snapshot.alerts {
            let (Some(f), sev) = (a.flow.as_ref(), Severity::of_alert(a.kind)) else {
                continue;
            };
            if !sev.is_problem() {
                continue;
            }
            let e = alerted
                .entry(id(
                    merged,
                    (f.src_ip, f.dst_ip, f.dst_qp),
                    (&f.iface, f.direction),
                    f.mirror.as_ref(),
                ))
                .or_insert(sev);
            *e = (*e).max(sev);
        }
        let severity: Vec<Severity> = flows
            .iter()
            .map(|f| {
                let named = alerted
                    .get(&id(
                        merged,
                        (f.src_ip, f.dst_ip, f.dst_qp),
                        (&f.iface, f.direction),
                        f.mirror.as_ref(),
                    ))
                    .copied()
                    .unwrap_or(Severity::None);
                Severity::of_flow(f).max(named)
            })
            .collect();
        let problem: Vec<bool> = severity.iter().map(|s| s.is_problem()).collect();
        let needle = self.filter.to_lowercase();
        let mut order: Vec<usize> = (0..flows.len())
            .filter(|i| needle.is_empty() || matches_filter(&flows[*i], &needle))
            .collect();
        let key = self.sort;
        let ascending = self.ascending;
        order.sort_by(|a, b| {
            let first = if key == SortKey::Problems {
                severity[*b].cmp(&severity[*a])
            } else {
                std::cmp::Ordering::Equal
            };
            let by = first.then(key.value(&flows[*b]).total_cmp(&key.value(&flows[*a])));
            if ascending { by.reverse() } else { by }.then(a.cmp(b))
        });
        self.order = order;
        self.problem = problem;
        self.severity = severity;
        self.clamp();
    }

    /// A flow that needs a look by its own counters (crate::severity): PSNs lost, NAKs or
    /// retransmissions, CNPs or CE marks. Flows a problem alert names count too (see
    /// `reorder`); reordering alone and configuration advice do not.
    pub fn is_problem(f: &FlowSnapshot) -> bool {
        Severity::of_flow(f).is_problem()
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
    pub fn flows(&self) -> &[Arc<FlowSnapshot>] {
        if self.merged {
            &self.merged_flows
        } else {
            &self.snapshot.flows
        }
    }

    /// The flow under the cursor (Flows tab).
    pub fn selected_flow(&self) -> Option<&FlowSnapshot> {
        self.order
            .get(self.selected)
            .and_then(|i| self.flows().get(*i))
            .map(|f| &**f)
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
                self.ascending = !self.ascending;
                self.reorder();
            }
            Action::Back => {
                if self.help {
                    self.help = false;
                } else if self.detail {
                    self.detail = false;
                } else if !self.filter.is_empty() {
                    self.filter.clear();
                    self.reorder();
                }
            }
            Action::WriteReport => self.write_requested = true,
            Action::Top => self.selected = 0,
            Action::Bottom => self.selected = self.rows().saturating_sub(1),
            Action::CycleSort => {
                self.sort = self.sort.next();
                self.ascending = false;
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
                self.merged = !self.merged;
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
                self.filter.clear();
            }
            KeyCode::Backspace => {
                self.filter.pop();
            }
            KeyCode::Char(c) => self.filter.push(c),
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

/// Whether `needle` (lower case) is part of the flow's addresses, QPs (hex as shown
/// `0x001201`, hex without padding `0x1201` or `1201`, or decimal `4609` as JSON and Prometheus
/// write them), interface, or owning process (command or pid).
fn matches_filter(f: &FlowSnapshot, needle: &str) -> bool {
    let mut fields = vec![
        f.src_ip.to_string(),
        f.dst_ip.to_string(),
        crate::format::qp(f.dst_qp),
        format!("0x{:x}", f.dst_qp),
        f.dst_qp.to_string(),
        f.iface.to_lowercase(),
    ];
    if let Some(peer) = f.peer_qp {
        fields.push(crate::format::qp(peer));
        fields.push(format!("0x{peer:x}"));
        fields.push(peer.to_string());
    }
    // The mirror source, as the seen column and the table write it.
    if let Some(m) = &f.mirror {
        fields.push(m.compact());
        fields.push(m.label());
    }
    if let Some(o) = &f.owner {
        fields.push(o.comm.clone());
        fields.extend(o.pid.map(|p| p.to_string()));
    }
    fields.iter().any(|s| s.to_lowercase().contains(needle))
}

/// One row per (source, destination, QP): a flow seen at several observation points (both ends
/// of a link, ingress and egress) becomes one row whose counters are the largest any point saw
/// (the same packets counted twice are not added), its interface the points joined with '+'.
pub fn merge_points(flows: &[Arc<FlowSnapshot>]) -> Vec<Arc<FlowSnapshot>> {
    let mut out: Vec<Arc<FlowSnapshot>> = Vec::new();
    // The snapshot lists a flow's points next to each other (sorted by src, dst, QP first).
    for f in flows {
        match out.last_mut() {
            Some(m) if (m.src_ip, m.dst_ip, m.dst_qp) == (f.src_ip, f.dst_ip, f.dst_qp) => {
                // The first point's row is the snapshot's, shared: merged into a copy.
                let m = Arc::make_mut(m);
                m.iface = format!("{}+{}", m.iface, f.iface);
                if m.direction != f.direction {
                    m.direction = "all";
                }
                // Several mirror sources merged: no one source names the row.
                if m.mirror != f.mirror {
                    m.mirror = None;
                }
                m.packets = m.packets.max(f.packets);
                m.bytes = m.bytes.max(f.bytes);
                m.rate_bps = m.rate_bps.max(f.rate_bps);
                m.psn_gaps = m.psn_gaps.max(f.psn_gaps);
                m.psn_missing = m.psn_missing.max(f.psn_missing);
                m.retransmits = m.retransmits.max(f.retransmits);
                m.req_retransmits = m.req_retransmits.max(f.req_retransmits);
                m.resp_retransmits = m.resp_retransmits.max(f.resp_retransmits);
                m.cnp = m.cnp.max(f.cnp);
                m.ecn_ce = m.ecn_ce.max(f.ecn_ce);
                m.ecn_ect = m.ecn_ect.max(f.ecn_ect);
                m.acks = m.acks.max(f.acks);
                if nak_total(f) > nak_total(m) {
                    m.naks = f.naks.clone();
                }
                // Latency: the point that saw the most samples.
                if f.rtt_ns.count > m.rtt_ns.count {
                    m.rtt_ns = f.rtt_ns.clone();
                }
                m.peer_qp = m.peer_qp.or(f.peer_qp);
                if m.owner.is_none() {
                    m.owner = f.owner.clone();
                }
                m.first_ts = m.first_ts.min(f.first_ts);
                m.last_ts = m.last_ts.max(f.last_ts);
            }
            _ => out.push(f.clone()),
        }
    }
    out
}

pub use crate::source::hw::{NicRow, nic_rows};
