//! A bounded history of what the snapshots showed, one sample per report interval, for the
//! charts: per flow (throughput, CE marks, CNPs, retransmissions, latency p99), per PFC
//! priority (time paused) and in total (RoCE throughput). Kept in the UI state, not in the
//! engine: the snapshot stays the one output contract, and the history is what this UI saw.

use std::{
    collections::{HashMap, VecDeque},
    net::IpAddr,
};

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
}

/// A flow's identity across snapshots (as the snapshot names it).
pub type FlowId = (IpAddr, IpAddr, u32, String, &'static str);

pub fn flow_id(f: &FlowSnapshot) -> FlowId {
    (f.src_ip, f.dst_ip, f.dst_qp, f.iface.clone(), f.direction)
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

/// Everything the charts draw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub flows: HashMap<FlowId, FlowHistory>,
    /// Time paused per interval, in microseconds, per PFC priority (or link, for PAUSE).
    pub pfc_paused_us: HashMap<PfcId, Series>,
    /// Total RoCE throughput, bits/s, per interval.
    pub total_bps: Series,
}

impl History {
    /// One report interval's snapshot. The [`MAX_FLOWS`] flows with the most bytes are
    /// tracked; flows that left the snapshot are forgotten.
    pub fn record(&mut self, snap: &Snapshot) {
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

/// `values` as a line of block characters, scaled to their maximum (a text sparkline for
/// table cells and header lines; the detail pane uses ratatui's Sparkline).
pub fn bars(values: &[u64]) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|v| {
            if max == 0 || *v == 0 {
                ' '
            } else {
                let level = (*v as u128 * 7 / max as u128) as usize;
                LEVELS[level.min(7)]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn bars_scale_to_the_maximum_and_leave_zero_blank() {
        assert_eq!(bars(&[0, 1, 7, 14]), " ▁▄█");
        assert_eq!(bars(&[0, 0]), "  ");
        assert_eq!(bars(&[]), "");
    }
}
