//! One analysis, one type: it owns its state, is fed through the hooks of [`Analysis`], and
//! writes its section of the report. The engine keeps what every analysis may read (the
//! configuration, the interface names, the flow table, the PFC storms, the alert store:
//! [`View`]),
//! the counters and the list of analyses (analyses.rs).
//!
//! Adding an analysis: a file with its type and `impl Analysis`, its field and its line in
//! analyses.rs; its section's field in the report schema (crate::report).

use std::collections::HashMap;

use roce_observer_common::{
    Event, EventBody, FlowKey, FlowStats, PfcKey,
    account::{Outcome, RocePacket},
    run::{DataRun, RunBatch},
};

use super::{
    EngineConfig, alerts::store::Alerts, ecmp::balance::FlowLoad, flows::FlowTable,
    pfc::timeline::Storms,
};
use crate::report::Snapshot;

/// How the capture path feeds an analysis that the two paths feed differently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Feed {
    /// Packet by packet (exact; the capture path sees every packet).
    #[default]
    Packets,
    /// From the events and flow records, as the kernel path feeds it (tests compare the two).
    Events,
}

/// Interface names, by index (pcapng interfaces, or the interfaces a kernel source watches).
#[derive(Clone, Debug, Default)]
pub struct Names(HashMap<u32, String>);

impl Names {
    pub fn set(&mut self, ifindex: u32, name: &str) {
        self.0.insert(ifindex, name.to_string());
    }

    /// The name of `ifindex`, or `if<N>` for an interface without one.
    pub fn name(&self, ifindex: u32) -> String {
        self.0
            .get(&ifindex)
            .cloned()
            .unwrap_or_else(|| format!("if{ifindex}"))
    }

    /// Interface names in order, without building them for known interfaces.
    pub fn order(&self, a: u32, b: u32) -> std::cmp::Ordering {
        match (self.0.get(&a), self.0.get(&b)) {
            (Some(x), Some(y)) => x.cmp(y),
            _ => self.name(a).cmp(&self.name(b)),
        }
    }

    /// How many interfaces have a name.
    pub fn count(&self) -> usize {
        self.0.len()
    }
}

/// What an analysis may read of the engine when it writes its section.
pub struct View<'a> {
    pub cfg: &'a EngineConfig,
    pub names: &'a Names,
    pub flows: &'a FlowTable,
    /// The PFC storms so far (the PFC analysis's).
    pub storms: &'a Storms,
    /// What each flow with packets puts on the ECMP paths, in report order (the flow pass).
    pub loads: &'a [FlowLoad],
    /// Some flow's load differs from the last report's (or the flow pass redid every flow).
    pub loads_changed: bool,
    /// Flows with latency samples.
    pub with_samples: u64,
    /// The alerts raised so far, by any analysis or the engine (the alerts' section).
    pub alerts: &'a Alerts,
    /// Flows with a count a table alert is judged on, in report order (the flow pass).
    pub troubled: &'a [FlowKey],
}

/// The hooks of one analysis; each does nothing unless the analysis needs it.
pub trait Analysis {
    /// Capture path: one RoCE packet as the shared observation accounted it, at `ts`, to the
    /// flow `key`, which is number `flow` in the engine's table (`FlowEntry::id`: the same
    /// for the same key all run long).
    fn packet(
        &mut self,
        _cfg: &EngineConfig,
        _ts: u64,
        _key: &FlowKey,
        _flow: u32,
        _pkt: &RocePacket,
        _out: &Outcome,
    ) {
    }

    /// Either path: one PFC class (or a legacy PAUSE) of a frame at `ts` on `key`, asking for
    /// `quanta` (0: XON), `pause_ns` at the link speed.
    fn pause(
        &mut self,
        _cfg: &EngineConfig,
        _key: &PfcKey,
        _ts: u64,
        _quanta: u16,
        _pause_ns: u64,
    ) {
    }

    /// Either path: one event; `from_capture` when the capture path's shared observation
    /// emitted it (an analysis fed packet by packet there may not need it).
    fn event(&mut self, _ev: &Event, _body: &EventBody, _from_capture: bool) {}

    /// Either path: finished data runs of `flow`, numbered from `first` (one record of
    /// `run::RunBatch`; the kernel's times already in ns since the epoch).
    fn data_runs(&mut self, _flow: &FlowKey, _first: u32, _runs: &[DataRun], _from_capture: bool) {}

    /// Kernel path: a flow record read from the kernel's map that changed since the last read.
    fn flow_read(&mut self, _key: &FlowKey, _stats: &FlowStats) {}

    /// Kernel path: a flow's batch of finished data runs as read from the kernel's map on every
    /// tick, after the flow records (times in ns since the epoch).
    fn runs_read(&mut self, _key: &FlowKey, _batch: &RunBatch) {}

    /// The interface names changed (they are part of what sections show).
    fn renamed(&mut self, _names: &Names) {}

    /// Its section of the report as of `now`. Sections are written in the order of
    /// `Analyses::each` (analyses.rs), after the engine's own: a section may read an earlier one's.
    fn section(&mut self, _view: &View<'_>, _now: u64, _report: &mut Snapshot) {}
}
