//! Latency (docs/metrics.md, "Latency"): requests are timestamped and matched to their answers
//! by the shared observation (`roce_observer_common::observe`, Karn's rule included); here are
//! the engine's side of it: the bounded table of timestamped requests, the samples per flow
//! and overall (quantile sketches, `sketch`), the high-latency alert and the summaries.

pub mod sketch;

use std::collections::HashMap;

use roce_observer_common::{
    FlowKey,
    latency::{PendingKey, PendingValue},
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
    /// A latency sample of `ns` on the request's flow `flow` at `ts` (from either path).
    pub(super) fn on_latency(&mut self, flow: &FlowKey, ts: u64, ns: u64) {
        if !self.flows.contains_key(flow) && self.flows.len() < self.cfg.max_flows {
            self.flows.insert(*flow, FlowEntry::new(ts));
        }
        if let Some(e) = self.flows.get_mut(flow) {
            e.add_rtt_sample(ns);
            self.dirty.push(*flow);
        }
        self.rtt_overall.insert(ns);
        if let Some(threshold) = self.cfg.rtt_alert_ns {
            self.alerts.high_latency(flow, ts, ns, threshold);
        }
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
