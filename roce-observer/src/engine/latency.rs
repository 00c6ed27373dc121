//! Latency (docs/metrics.md, "Latency"): requests are timestamped and matched to their answers
//! by the shared observation (`roce_observer_common::observe`, Karn's rule included); here is
//! the engine's side of it, the [`Latency`] analysis: the table of timestamped
//! requests, the samples overall (quantile sketches, `sketch`; each flow's are kept with the
//! flow), the high-latency alert and the summaries.

pub mod sketch;

use roce_observer_common::{
    FlowKey,
    latency::{LatencyHist, PendingSet},
};

use super::{
    EngineConfig,
    alerts::Alerts,
    analysis::{Analysis, View},
    flows::HistGrowth,
};
use crate::report::{LatencySnapshot, RttSummary, Snapshot};
use sketch::Sketch;

/// Timestamped requests waiting for their answer: the same set-associative table as the
/// kernel's `STAMPS` array (`latency::PendingSet`, whose logic `observe` runs on both sides), so
/// that a capture keeps, pushes out and matches the same requests as a live run.
#[derive(Debug)]
pub struct Pending {
    sets: Vec<PendingSet>,
}

impl Pending {
    /// A table of `sets` sets (a power of two; the kernel's `PENDING_SETS` but in tests).
    /// Zeroed by the allocator: its 2 MiB take memory only as sets are written (the live path
    /// writes none), where filling it with empty sets would make all of it resident at once.
    pub fn new(sets: u32) -> Pending {
        assert!(sets.is_power_of_two(), "pending sets: {sets}");
        let n = sets as usize;
        let layout = std::alloc::Layout::array::<PendingSet>(n).expect("pending table size");
        // SAFETY: an all-zero PendingSet is a valid one (integers only: every slot empty); the
        // memory comes from the global allocator with the layout a Vec of `n` sets frees.
        let sets = unsafe {
            let ptr = std::alloc::alloc_zeroed(layout).cast::<PendingSet>();
            if ptr.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Vec::from_raw_parts(ptr, n, n)
        };
        Pending { sets }
    }

    pub fn sets(&self) -> u32 {
        self.sets.len() as u32
    }

    pub fn set(&mut self, index: u32) -> Option<&mut PendingSet> {
        self.sets.get_mut(index as usize)
    }

    /// Requests still waiting for their answer (a walk of the table, done once a report).
    pub fn waiting(&self) -> usize {
        self.sets.iter().map(PendingSet::waiting).sum()
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
    /// Requests wait for their answer in a table of `pending_sets` sets.
    pub fn new(pending_sets: u32) -> Latency {
        Latency {
            pending: Pending::new(pending_sets),
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
