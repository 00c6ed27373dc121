//! Latency (docs/metrics.md, "Latency"): requests are timestamped and matched to their answers
//! by the shared observation (`roce_observer_common::observe`, Karn's rule included); here are
//! the engine's side of it: the bounded table of timestamped requests, the samples per flow
//! and overall (quantile sketches, `sketch`), the high-latency alert and the summaries.

pub mod sketch;

use std::collections::HashMap;

use roce_observer_common::{
    FlowKey,
    latency::{LatencyHist, PendingKey, PendingValue},
    observe::Stored,
};

use super::{Engine, flows::FastHash, flows::FlowEntry};
use crate::report::RttSummary;
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
        if self.map.contains_key(key) {
            Stored::Present
        } else if self.map.len() >= self.max {
            Stored::Full
        } else {
            self.map.insert(*key, *value);
            Stored::Added
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

impl Engine {
    /// Capture path: a latency sample of `ns` on the request's flow `flow` at `ts`.
    pub(super) fn on_latency(&mut self, flow: &FlowKey, ts: u64, ns: u64) {
        if let Some(e) = self.latency_flow(flow, ts) {
            e.add_rtt_sample(ns);
            self.dirty.push(*flow);
        }
        self.rtt_overall.insert(ns);
        if let Some(threshold) = self.cfg.rtt_alert_ns
            && ns > threshold
        {
            self.alerts.high_latency(flow, (ts, ts), ns, 1, threshold);
        }
    }

    /// Kernel path: the latency histogram of request flow `flow` as read now (times in ns since
    /// the epoch; the kernel counted its samples above the alert threshold against the same
    /// `rtt_alert_ns`): what it gained since the last read goes to the flow's sketch and the
    /// overall one.
    pub fn update_latency(&mut self, flow: &FlowKey, hist: &LatencyHist) {
        let now = self.last_ns;
        let Some(e) = self.latency_flow(flow, now) else {
            return;
        };
        let Some(grown) = e.read_rtt_hist(hist) else {
            return;
        };
        self.dirty.push(*flow);
        let (min, max) = (hist.min().unwrap_or(0), hist.max_ns);
        self.rtt_overall
            .merge_hist(&grown.buckets, grown.sum_ns, min, max);
        if let Some(threshold) = self.cfg.rtt_alert_ns
            && grown.over > 0
        {
            let span = (hist.over_first_ts, hist.over_last_ts);
            self.alerts
                .high_latency(flow, span, hist.over_first_ns, grown.over, threshold);
        }
    }

    /// The entry of a flow with latency samples, made if absent (a flow's answers can be
    /// read before its requests) and the table has room.
    fn latency_flow(&mut self, flow: &FlowKey, ts: u64) -> Option<&mut FlowEntry> {
        if !self.flows.contains_key(flow) && self.flows.len() < self.cfg.max_flows {
            self.flows.insert(*flow, FlowEntry::new(ts));
        }
        self.flows.get_mut(flow)
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
