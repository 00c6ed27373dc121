//! A bounded history of what the snapshots showed, one sample per report interval, for the
//! charts: per flow (throughput, CE marks, CNPs, retransmissions, latency p99), per PFC
//! priority (time paused) and in total (RoCE throughput). Kept in the UI state, not in the
//! engine: the snapshot stays the one output contract, and the history is what this UI saw.

use std::collections::{HashMap, VecDeque};

use crate::engine::snapshot::{FlowSnapshot, PfcSnapshot, Snapshot};

/// Samples kept per series (two minutes at the default one-second interval).
pub const DEPTH: usize = 120;
/// Flows whose history is kept (those with the most bytes), so that the history stays small
/// whatever the flow table holds: 1,000 x 5 series x 120 samples x 8 bytes.
pub const MAX_FLOWS: usize = 1000;

/// One series, oldest first, at most [`DEPTH`] samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series(VecDeque<u64>);

impl Series {
    fn push(&mut self, v: u64) {
        if self.0.len() == DEPTH {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    /// The newest `n` samples, oldest first.
    pub fn last(&self, n: usize) -> Vec<u64> {
        self.0
            .iter()
            .skip(self.0.len().saturating_sub(n))
            .copied()
            .collect()
    }

    pub fn latest(&self) -> Option<u64> {
        self.0.back().copied()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sample by sample the larger of this series and `other`, aligned at the newest sample
    /// (every series is pushed at the same reports; a shorter one started later).
    fn max_with(&mut self, other: &Series) {
        while self.0.len() < other.0.len() {
            self.0.push_front(0);
        }
        let offset = self.0.len() - other.0.len();
        for (mine, theirs) in self.0.iter_mut().skip(offset).zip(&other.0) {
            *mine = (*mine).max(*theirs);
        }
    }
}

/// A flow's identity across snapshots (as the snapshot names it).
pub use crate::engine::snapshot::FlowId;

pub fn flow_id(f: &FlowSnapshot) -> FlowId {
    f.id()
}

/// A PFC entry's identity across snapshots.
pub type PfcId = (String, &'static str, String, Option<u8>);

pub fn pfc_id(p: &PfcSnapshot) -> PfcId {
    (p.iface.clone(), p.direction, p.src_mac.clone(), p.priority)
}

/// One flow's series. Counters are turned into per-interval increments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowHistory {
    /// bits/s over each interval.
    pub rate_bps: Series,
    pub ce: Series,
    pub cnp: Series,
    pub retransmits: Series,
    /// ns; 0 when the flow had no latency sample yet.
    pub p99_ns: Series,
    /// The cumulative counters of the previous sample: (CE, CNP, retransmissions).
    last: Option<(u64, u64, u64)>,
}

impl FlowHistory {
    fn record(&mut self, f: &FlowSnapshot) {
        let now = (f.ecn_ce, f.cnp, f.retransmits);
        // A flow's first sample counts everything it had (its counters started in this run).
        let (ce0, cnp0, retx0) = self.last.unwrap_or((0, 0, 0));
        self.rate_bps.push(f.rate_bps.max(0.0) as u64);
        self.ce.push(now.0.saturating_sub(ce0));
        self.cnp.push(now.1.saturating_sub(cnp0));
        self.retransmits.push(now.2.saturating_sub(retx0));
        self.p99_ns.push(f.rtt_ns.p99.unwrap_or(0));
        self.last = Some(now);
    }
}

impl FlowHistory {
    /// The series of one flow seen at several points, as the merged row counts it (`m`): per
    /// interval the largest any point saw, since the points count the same packets (summing
    /// would show twice the throughput of one flow seen at both ends of a link).
    fn max_with(&mut self, other: &FlowHistory) {
        self.rate_bps.max_with(&other.rate_bps);
        self.ce.max_with(&other.ce);
        self.cnp.max_with(&other.cnp);
        self.retransmits.max_with(&other.retransmits);
        self.p99_ns.max_with(&other.p99_ns);
    }
}

/// Everything the charts draw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub flows: HashMap<FlowId, FlowHistory>,
    /// Time paused per interval, in microseconds, per PFC priority (or link, for PAUSE).
    pub pfc_paused_us: HashMap<PfcId, Series>,
    /// Total RoCE throughput, bits/s, per interval.
    pub total_bps: Series,
    /// Snapshots recorded so far.
    recorded: usize,
    /// The first report's interval and whether it was a stub (shorter than half the second's:
    /// a run's first report often covers milliseconds, and its rate would set every scale).
    first_interval_s: f64,
    stub: bool,
}

impl History {
    /// One report interval's snapshot. The [`MAX_FLOWS`] flows with the most bytes are
    /// tracked; flows that left the snapshot are forgotten.
    pub fn record(&mut self, snap: &Snapshot) {
        self.recorded += 1;
        match self.recorded {
            1 => self.first_interval_s = snap.summary.interval_s,
            2 => self.stub = self.first_interval_s < snap.summary.interval_s / 2.0,
            _ => {}
        }
        self.total_bps
            .push(snap.flows.iter().map(|f| f.rate_bps.max(0.0) as u64).sum());
        let mut order: Vec<&FlowSnapshot> = snap.flows.iter().map(|f| &**f).collect();
        if order.len() > MAX_FLOWS {
            order.sort_by_key(|f| std::cmp::Reverse(f.bytes));
            order.truncate(MAX_FLOWS);
        }
        let mut seen = HashMap::with_capacity(order.len());
        for f in order {
            let id = flow_id(f);
            let mut h = self.flows.remove(&id).unwrap_or_default();
            h.record(f);
            seen.insert(id, h);
        }
        self.flows = seen;
        let interval_us = snap.summary.interval_s * 1e6;
        let mut pfc = HashMap::with_capacity(snap.pfc.len());
        for p in &snap.pfc {
            let id = pfc_id(p);
            let mut s = self.pfc_paused_us.remove(&id).unwrap_or_default();
            s.push((p.paused_fraction * interval_us).max(0.0).round() as u64);
            pfc.insert(id, s);
        }
        self.pfc_paused_us = pfc;
    }
}

impl History {
    /// The largest of `values` (a series' newest samples) that a scale should reach: the
    /// stub first interval, when it is among them, does not count (every series gains one
    /// sample per report, so it is the sample `recorded - 1` before the newest).
    pub fn peak(&self, values: &[u64]) -> u64 {
        let stub =
            (self.stub && self.recorded <= values.len()).then(|| values.len() - self.recorded);
        values
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != stub)
            .map(|(_, v)| *v)
            .max()
            .unwrap_or(0)
    }

    /// The history of a row: its own, or for a merged row (one per source, destination and QP)
    /// the points' histories combined as [`FlowHistory::max_with`] says.
    pub fn of(&self, f: &FlowSnapshot, merged: bool) -> Option<std::borrow::Cow<'_, FlowHistory>> {
        use std::borrow::Cow;
        if !merged {
            return self.flows.get(&flow_id(f)).map(Cow::Borrowed);
        }
        let mut out: Option<FlowHistory> = None;
        for (id, h) in &self.flows {
            if (id.0, id.1, id.2) == (f.src_ip, f.dst_ip, f.dst_qp) {
                match out.as_mut() {
                    Some(o) => o.max_with(h),
                    None => out = Some(h.clone()),
                }
            }
        }
        out.map(Cow::Owned)
    }
}

/// `values` as a line of block characters, scaled to their maximum (a text sparkline for
/// table cells and header lines; the detail pane uses ratatui's Sparkline).
pub fn bars(values: &[u64]) -> String {
    bars_to(values, values.iter().copied().max().unwrap_or(0))
}

/// [`bars`] scaled to `max`; values above it are drawn full.
pub fn bars_to(values: &[u64], max: u64) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    values
        .iter()
        .map(|v| {
            if max == 0 || *v == 0 {
                ' '
            } else {
                let level = (u128::from((*v).min(max)) * 7 / u128::from(max)) as usize;
                LEVELS[level.min(7)]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stub first interval (2 ms at a high rate before one-second reports) does not set the
    /// scale; a first interval as long as the others does.
    #[test]
    fn a_stub_first_interval_does_not_set_the_scale() {
        let mut snap = crate::sink::metrics::tests::fixture_snapshot(&["psn_gap"]);
        let mut h = History::default();
        for (interval_s, bps) in [(0.002, 1_900_000.0), (1.0, 600_000.0), (1.0, 500_000.0)] {
            snap.summary.interval_s = interval_s;
            let n = snap.flows.len() as f64;
            for f in &mut snap.flows {
                std::sync::Arc::make_mut(f).rate_bps = bps / n;
            }
            h.record(&snap);
        }
        let values = h.total_bps.last(16);
        assert_eq!(values.len(), 3);
        let peak = h.peak(&values);
        assert!((599_000..=600_000).contains(&peak), "{peak} {values:?}");
        let mut even = History::default();
        snap.summary.interval_s = 1.0;
        even.record(&snap);
        even.record(&snap);
        let values = even.total_bps.last(16);
        assert_eq!(
            even.peak(&values),
            values[0],
            "no stub: every sample counts"
        );
    }

    #[test]
    fn series_keep_the_newest_depth_samples() {
        let mut s = Series::default();
        for v in 0..(DEPTH as u64 + 10) {
            s.push(v);
        }
        assert_eq!(s.len(), DEPTH);
        assert_eq!(s.latest(), Some(DEPTH as u64 + 9));
        assert_eq!(
            s.last(3),
            [DEPTH as u64 + 7, DEPTH as u64 + 8, DEPTH as u64 + 9]
        );
    }

    /// A merged row's series are the points' series, per interval the largest, aligned at
    /// the newest sample; a single row's are its own.
    #[test]
    fn merged_rows_combine_the_points_histories() {
        let series = |v: &[u64]| {
            let mut s = Series::default();
            for x in v {
                s.push(*x);
            }
            s
        };
        let mut a = series(&[5, 1, 7]);
        a.max_with(&series(&[3, 9]));
        assert_eq!(a.last(DEPTH), [5, 3, 9]);
        let mut b = series(&[4]);
        b.max_with(&series(&[1, 2, 3]));
        assert_eq!(b.last(DEPTH), [1, 2, 4]);
    }

    #[test]
    fn bars_scale_to_the_maximum_and_leave_zero_blank() {
        assert_eq!(bars(&[0, 1, 7, 14]), " ▁▄█");
        assert_eq!(bars(&[0, 0]), "  ");
        assert_eq!(bars(&[]), "");
    }
}
