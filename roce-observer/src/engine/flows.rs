//! The flow table: per-flow counters and PSN state ([`FlowStats`], updated by the shared
//! `account` in the capture path or copied from the kernel's map in the live path), plus the
//! state only user space keeps: the latency sketch and the interval baseline.

use std::{collections::HashMap, sync::Arc};

use roce_observer_common::{
    FlowKey, FlowStats,
    flow::{NAK_CLASSES, PCP_UNTAGGED, TRANSPORT_UNSET, nak},
    latency::LatencyHist,
    opcode,
};

use super::latency::sketch::Sketch;
use crate::report::{FlowSnapshot, LostRuns, NakCounts, OpcodeCounts};
// The address form of the snapshot; re-exported where the flow table's users look for it.
pub use crate::report::{show_ip, store_ip};

/// One flow. `stats`, `rtt` and `lost` change only through [`FlowEntry::stats_mut`],
/// [`FlowEntry::add_rtt_sample`] and [`FlowEntry::add_lost_run`], which drop the flow's cached
/// view: the snapshot rebuilds a flow only when one of them changed (or its rate did), so a
/// report over 100,000 flows of which a few changed costs little more than the few.
#[derive(Debug)]
pub struct FlowEntry {
    stats: FlowStats,
    /// Latency samples of requests sent on this flow (boxed: most flows have none).
    rtt: Option<Box<Sketch>>,
    /// Kernel path: the flow's latency histogram as last read, what the sketch holds (boxed:
    /// only request flows read from the kernel have one).
    rtt_read: Option<Box<LatencyHist>>,
    /// `stats.bytes` at the start of the reporting interval.
    pub base_bytes: u64,
    /// Runs of request PSNs declared lost, from path events (boxed: most flows have none).
    lost: Option<Box<LostRuns>>,
    /// The flow as the last snapshot showed it (see `report.rs`).
    pub(super) view: ViewCache,
    /// The flow's number: its place in the order flows were added to the table (flows are
    /// never taken out of it), a key the analyses may index by instead of hashing the flow's.
    id: u32,
    /// The flow is in the engine's sorted flow order (see `report.rs`), at `slot`.
    pub(super) ordered: bool,
    pub(super) slot: usize,
}

impl Clone for FlowEntry {
    fn clone(&self) -> FlowEntry {
        FlowEntry {
            stats: self.stats,
            rtt: self.rtt.clone(),
            rtt_read: self.rtt_read.clone(),
            base_bytes: self.base_bytes,
            lost: self.lost.clone(),
            view: ViewCache::default(),
            id: self.id,
            ordered: false,
            slot: 0,
        }
    }
}

impl FlowEntry {
    /// A new flow at `now_ns`, the table's `id`th (see [`FlowEntry::id`]).
    pub fn new(now_ns: u64, id: usize) -> FlowEntry {
        let mut stats = FlowStats::zeroed();
        stats.init(now_ns);
        FlowEntry {
            stats,
            rtt: None,
            rtt_read: None,
            base_bytes: 0,
            lost: None,
            view: ViewCache::default(),
            id: u32::try_from(id).unwrap_or(u32::MAX),
            ordered: false,
            slot: 0,
        }
    }

    pub fn stats(&self) -> &FlowStats {
        &self.stats
    }

    /// The flow's number in the engine's table: the same for its key all run long.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The counters, to change them: the cached view is dropped.
    pub fn stats_mut(&mut self) -> &mut FlowStats {
        self.view.clear();
        &mut self.stats
    }

    pub fn rtt(&self) -> Option<&Sketch> {
        self.rtt.as_deref()
    }

    pub fn add_rtt_sample(&mut self, ns: u64) {
        self.view.clear();
        self.rtt.get_or_insert_with(Default::default).insert(ns);
    }

    /// Kernel path: the flow's latency histogram as read now. What it gained since the last
    /// read goes into the sketch, and is returned (`None`: unchanged).
    pub fn read_rtt_hist(&mut self, hist: &LatencyHist) -> Option<HistGrowth> {
        let last = self
            .rtt_read
            .get_or_insert_with(|| Box::new(LatencyHist::zeroed()));
        if **last == *hist {
            return None;
        }
        let grown = HistGrowth {
            buckets: hist.growth(last),
            sum_ns: hist.sum_ns.wrapping_sub(last.sum_ns),
            over: hist.over.wrapping_sub(last.over),
        };
        **last = *hist;
        self.view.clear();
        let (min, max) = (hist.min().unwrap_or(0), hist.max_ns);
        self.rtt.get_or_insert_with(Default::default).merge_hist(
            &grown.buckets,
            grown.sum_ns,
            min,
            max,
        );
        Some(grown)
    }

    pub fn lost_runs(&self) -> Option<&LostRuns> {
        self.lost.as_deref()
    }

    /// A path event declared request PSNs `first..first+count` lost.
    pub fn add_lost_run(&mut self, first: u32, count: u32) {
        self.view.clear();
        self.lost
            .get_or_insert_with(Default::default)
            .push(first, count);
    }
}

/// What a kernel latency histogram gained between two reads.
pub struct HistGrowth {
    pub buckets: [u32; roce_observer_common::latency::HIST_BUCKETS],
    pub sum_ns: u64,
    /// Samples above the alert threshold.
    pub over: u64,
}

/// The last snapshot's view of a flow, shared with that snapshot.
#[derive(Default)]
pub struct ViewCache(Option<Arc<FlowSnapshot>>);

impl ViewCache {
    pub fn clear(&mut self) {
        self.0 = None;
    }

    pub fn take(&mut self) -> Option<Arc<FlowSnapshot>> {
        self.0.take()
    }

    pub fn set(&mut self, view: Arc<FlowSnapshot>) {
        self.0 = Some(view);
    }
}

impl std::fmt::Debug for ViewCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.0.is_some();
        write!(f, "ViewCache({})", if cached { "cached" } else { "empty" })
    }
}

/// A fast hasher with a fixed seed (SipHash was a third of the per-packet cost; FxHash
/// collided badly on flow keys that differ only in a few address and QP bits). Fixed, so runs
/// are reproducible; a capture crafted to collide can only make lookups slower, never wrong.
pub type FastHash = foldhash::fast::FixedState;

/// Flows by key. The entries are boxed: the table itself (keys and pointers, ~72 bytes a flow)
/// then stays in the cache, so a packet's lookup costs one miss, on its flow's record, rather
/// than one on the key and more on the record beside it.
pub type FlowTable = HashMap<FlowKey, Box<FlowEntry>, FastHash>;

/// The entry of `flow`, made at `ts` if absent and the table holds fewer than `max` flows
/// (latency samples and path events can come before a flow's first packet or map read).
pub fn entry_or_new<'a>(
    flows: &'a mut FlowTable,
    max: usize,
    flow: &FlowKey,
    ts: u64,
) -> Option<&'a mut FlowEntry> {
    // One lookup: the entry API when there is room for a new flow (it reserves room only for
    // one it inserts, as `insert` does), a plain one when there is none.
    if flows.len() >= max {
        return flows.get_mut(flow).map(|e| &mut **e);
    }
    let id = flows.len();
    let e = flows
        .entry(*flow)
        .or_insert_with(|| Box::new(FlowEntry::new(ts, id)));
    Some(e)
}

/// Each flow's batch of finished data runs (roce-observer-common run.rs), capture path.
pub type RunBatches = HashMap<FlowKey, roce_observer_common::run::RunBatch, FastHash>;

/// Non-zero opcode counts named `RC_SEND_ONLY`, ..., and `CNP`.
pub fn opcode_counts(s: &FlowStats) -> OpcodeCounts {
    // Exactly as long as needed: the view is kept per flow, so a large table pays for any slack.
    let n = s.opcodes.iter().filter(|n| **n > 0).count()
        * usize::from(s.transport != TRANSPORT_UNSET)
        + usize::from(s.cnp > 0);
    let mut out = Vec::with_capacity(n);
    if s.transport != TRANSPORT_UNSET {
        let t = opcode::transport_name(s.transport);
        for (op, &n) in s.opcodes.iter().enumerate() {
            if n > 0 {
                out.push((format!("{t}_{}", opcode::operation_name(op as u8)), n));
            }
        }
    }
    if s.cnp > 0 {
        out.push(("CNP".to_string(), s.cnp));
    }
    OpcodeCounts(out)
}

pub fn nak_counts(s: &FlowStats) -> NakCounts {
    let n: [u64; NAK_CLASSES] = s.naks;
    NakCounts {
        psn_seq_err: n[nak::PSN_SEQ_ERR],
        rnr: n[nak::RNR],
        invalid_request: n[nak::INVALID_REQUEST],
        remote_access: n[nak::REMOTE_ACCESS],
        remote_op: n[nak::REMOTE_OP],
        other: n[nak::OTHER],
    }
}

pub fn transport(s: &FlowStats) -> Option<&'static str> {
    (s.transport != TRANSPORT_UNSET).then(|| opcode::transport_name(s.transport))
}

pub fn pcp(s: &FlowStats) -> Option<u8> {
    (s.pcp != PCP_UNTAGGED).then_some(s.pcp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_forms() {
        use std::net::IpAddr;
        let v4: IpAddr = "10.0.0.1".parse().expect("literal");
        assert_eq!(show_ip(store_ip(v4)), v4);
        let v6: IpAddr = "fd00::1".parse().expect("literal");
        assert_eq!(show_ip(store_ip(v6)), v6);
        assert_eq!(show_ip(store_ip(v4)).to_string(), "10.0.0.1");
    }

    #[test]
    fn opcode_names() {
        let mut s = FlowStats::zeroed();
        s.transport = 0;
        s.opcodes[4] = 3;
        s.opcodes[0x11] = 1;
        s.cnp = 2;
        let c = opcode_counts(&s);
        assert_eq!(
            c.0,
            vec![
                ("RC_SEND_ONLY".to_string(), 3),
                ("RC_ACKNOWLEDGE".to_string(), 1),
                ("CNP".to_string(), 2)
            ]
        );
        assert_eq!(transport(&s), Some("RC"));
        assert_eq!(pcp(&s), None);
    }
}
