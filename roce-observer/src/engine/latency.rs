//! Latency (docs/metrics.md, "Latency"): requests are timestamped and matched to their answers
//! by the shared observation (`roce_observer_common::observe`, Karn's rule included); here is
//! the engine's side of it, the [`Latency`] analysis: the bounded table of timestamped
//! requests, the samples overall (quantile sketches, `sketch`; each flow's are kept with the
//! flow), the high-latency alert and the summaries.

pub mod sketch;

use std::collections::{HashMap, hash_map::Entry};

use roce_observer_common::{
    FlowKey,
    latency::{LatencyHist, PendingKey, PendingValue},
    observe::Stored,
};

use super::{
    EngineConfig,
    alerts::Alerts,
    analysis::{Analysis, View},
    flows::{FastHash, HistGrowth},
};
use crate::report::{LatencySnapshot, RttSummary, Snapshot};
use sketch::Sketch;

/// Timestamped requests waiting for their answer, bounded like the kernel's map (past `max`,
/// new timestamps are counted in `pending_full`).
#[derive(Debug)]
pub struct Pending {
    map: HashMap<PendingKey, PendingValue, FastHash>,
    max: usize,
}

impl Pending {
    pub fn new(max: usize) -> Pending {
        Pending {
            map: HashMap::default(),
            max,
        }
    }

    /// Insert unless present: a retransmitted request keeps its first timestamp.
    pub fn insert_if_absent(&mut self, key: &PendingKey, value: &PendingValue) -> Stored {
        // One lookup: the entry API when there is room (it reserves room only for a key it
        // then inserts), a plain one when there is none.
        if self.map.len() >= self.max {
            return if self.map.contains_key(key) {
                Stored::Present
            } else {
                Stored::Full
            };
        }
        match self.map.entry(*key) {
            Entry::Occupied(_) => Stored::Present,
            Entry::Vacant(e) => {
                e.insert(*value);
                Stored::Added
            }
        }
    }

    pub fn take(&mut self, key: &PendingKey) -> Option<PendingValue> {
        self.map.remove(key)
    }

    /// Requests still waiting for their answer.
    pub fn waiting(&self) -> usize {
        self.map.len()
    }
}

/// The latency analysis: the requests waiting for their answer and the samples of every flow
/// together (each flow's own samples are kept with the flow, flows.rs). Its section is the
/// report's `latency`.
pub struct Latency {
    pending: Pending,
    overall: Sketch,
}

impl Latency {
    /// At most `max_pending` requests wait for their answer.
    pub fn new(max_pending: usize) -> Latency {
        Latency {
            pending: Pending::new(max_pending),
            overall: Sketch::new(),
        }
    }

    /// Capture path: the table of timestamped requests the shared observation fills and empties.
    pub fn pending(&mut self) -> &mut Pending {
        &mut self.pending
    }

    /// Capture path: a latency sample of `ns` on the request's flow `flow` at `ts`, already
    /// added to the flow's own sketch; one above `--rtt-alert-us` raises an alert.
    pub fn sample(
        &mut self,
        alerts: &mut Alerts,
        cfg: &EngineConfig,
        flow: &FlowKey,
        ts: u64,
        ns: u64,
    ) {
        self.overall.insert(ns);
        if let Some(threshold) = cfg.rtt_alert_ns
            && ns > threshold
        {
            alerts.high_latency(flow, (ts, ts), ns, 1, threshold);
        }
    }

    /// Kernel path: what the latency histogram `hist` of request flow `flow` gained since the
    /// last read (`grown`, already added to the flow's own sketch). The kernel counted its
    /// samples above the alert threshold against the same `rtt_alert_ns`.
    pub fn read(
        &mut self,
        alerts: &mut Alerts,
        cfg: &EngineConfig,
        flow: &FlowKey,
        hist: &LatencyHist,
        grown: &HistGrowth,
    ) {
        let (min, max) = (hist.min().unwrap_or(0), hist.max_ns);
        self.overall
            .merge_hist(&grown.buckets, grown.sum_ns, min, max);
        if let Some(threshold) = cfg.rtt_alert_ns
            && grown.over > 0
        {
            let span = (hist.over_first_ts, hist.over_last_ts);
            alerts.high_latency(flow, span, hist.over_first_ns, grown.over, threshold);
        }
    }
}

impl Analysis for Latency {
    fn section(&mut self, view: &View<'_>, _now: u64, report: &mut Snapshot) {
        report.latency = LatencySnapshot {
            observed_at: "latency seen at the observation point (request to the first answer from the peer), not at either host",
            overall: rtt_summary(Some(&self.overall)),
            flows_with_samples: view.with_samples,
            pending: self.pending.waiting() as u64,
            relative_accuracy: sketch::ALPHA,
        };
    }
}

/// Quantiles of `s` (all null without samples).
pub fn rtt_summary(s: Option<&Sketch>) -> RttSummary {
    let Some(s) = s.filter(|s| s.count() > 0) else {
        return RttSummary::default();
    };
    RttSummary {
        count: s.count(),
        min: s.min(),
        p50: s.quantile(0.5),
        p90: s.quantile(0.9),
        p99: s.quantile(0.99),
        p999: s.quantile(0.999),
        max: s.max(),
        mean: s.mean(),
        buckets: s.classic_buckets(),
        sum_ns: s.sum(),
    }
}
