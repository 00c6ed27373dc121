//! The snapshot: what the renderers read. The engine's own sections (the flows, built by the
//! incremental flow pass; the counters in the summary), then each analysis's
//! section in the order of `Analyses::each`.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Arc,
};

use roce_observer_common::{Counter, Direction, EventKind, FlowKey, FlowStats};

use super::{
    DIRECTIONS, Engine,
    analysis::{Names, View},
    dir_index,
    ecmp::balance::FlowLoad,
    flows::{self, FastHash, FlowEntry, FlowTable},
    latency::rtt_summary,
};
use crate::report::{
    Beside, EcmpSnapshot, FlowSnapshot, LatencySnapshot, MirrorSource, ObserverCost, OutputHealth,
    PsnTrail, RttSummary, SCHEMA_VERSION, Snapshot, Summary, ViewStamp, owners, show_ip,
};

/// The last snapshot's per-flow results, by each flow's place in the snapshot order (`slot`).
#[derive(Default)]
pub(super) struct Shown {
    /// Every flow key, in snapshot order.
    keys: Vec<FlowKey>,
    views: Vec<Option<Arc<FlowSnapshot>>>,
    loads: Vec<Option<FlowLoad>>,
    /// Whether the flow has latency samples.
    sampled: Vec<bool>,
    /// Flows that may raise a table alert (counts only grow: once in, they stay).
    alerting: BTreeSet<usize>,
    /// Flows whose last view had a rate other than zero.
    rated: Vec<usize>,
    /// The results stand for every flow as of the last snapshot, apart from `dirty` ones.
    pub(super) valid: bool,
    last_interval_empty: bool,
}

/// What [`Engine::flow_pass`] gathers for the snapshot.
struct FlowPass {
    flows: Vec<Arc<FlowSnapshot>>,
    /// Flows with a count a table alert is judged on (the alerts' functions filter further).
    troubled: Vec<FlowKey>,
    ecmp: Vec<FlowLoad>,
    /// Some flow's load differs from the last pass's (every one does in a full pass).
    loads_changed: bool,
    with_samples: u64,
}

/// `events` per packet of `packets` (0 without packets).
fn per_packet(events: u64, packets: u64) -> f64 {
    if packets == 0 {
        0.0
    } else {
        events as f64 / packets as f64
    }
}

/// The latency summary of every flow without samples (one, shared).
static NO_SAMPLES: std::sync::LazyLock<Arc<RttSummary>> =
    std::sync::LazyLock::new(|| Arc::new(RttSummary::default()));

/// A flow on which `ce_without_cnp`, `flow_problems` or `bursts` may raise an alert.
fn may_alert(s: &FlowStats) -> bool {
    s.psn_gaps > 0
        || s.req_retransmits > 0
        || s.resp_retransmits > 0
        || s.naks.iter().any(|n| *n > 0)
        || s.ecn_ce > 0
        || s.cnp > 0
        || s.retransmit_bursts.bursts > 0
        || s.nak_bursts.bursts > 0
        || s.reorder.reordered > 0
        || s.reorder.naks > 0
        || s.psn.flags & roce_observer_common::psn::REQ_TENTATIVE != 0
}

/// The reporting interval of a summary: its start and end (ns since the epoch) and length (s).
struct SummaryTimes {
    start: u64,
    end: u64,
    interval_s: f64,
}

impl Engine {
    /// Everything the engine knows, as of `now_ns` (the end of the reporting interval), with
    /// nothing from beside it (no NIC counters, QP owners, interfaces or output health).
    pub fn snapshot(&mut self, now_ns: u64) -> Snapshot {
        self.report(now_ns, Beside::default())
    }

    /// The report as of `now_ns`: the engine's sections, then each analysis's
    /// ([`super::analysis::Analysis::section`]), and those from beside it; flows are labelled
    /// with their QP owners. Takes `&mut self` for what the last report left to reuse (the
    /// flows' views, the steps analysis).
    pub fn report(&mut self, now_ns: u64, beside: Beside) -> Snapshot {
        let Beside {
            nic,
            qp_owners,
            interfaces_up,
            outputs,
            observer,
        } = beside;
        let start = self.interval_start.or(self.first_ns).unwrap_or(now_ns);
        let interval_ns = now_ns.saturating_sub(start);
        let interval_s = interval_ns as f64 / 1e9;

        let mut shown = std::mem::take(&mut self.shown);
        let dirty = std::mem::take(&mut self.dirty);
        let pass = self.flow_pass(&mut shown, &dirty, interval_ns, interval_s);
        let mut flows = pass.flows;
        owners::label_flows(&qp_owners, &mut flows);

        let summary = self.summary(
            SummaryTimes {
                start,
                end: now_ns,
                interval_s,
            },
            flows.len() as u64,
            observer,
            outputs,
            interfaces_up,
        );
        let mut snap = Snapshot {
            schema_version: SCHEMA_VERSION,
            summary,
            flows,
            // The analyses' sections, below.
            pfc: Vec::new(),
            latency: LatencySnapshot::default(),
            mirror: Vec::new(),
            ecmp: EcmpSnapshot::default(),
            alerts: Vec::new(),
            paths: Vec::new(),
            pfc_origin: None,
            lossless: Vec::new(),
            steps: None,
            nic,
            qp_owners,
        };
        self.shown = shown;
        self.dirty = dirty;
        self.dirty.clear();
        let storms = self.analyses.pfc.storms().clone();
        let view = View {
            cfg: &self.cfg,
            names: &self.names,
            flows: &self.flows,
            storms: &storms,
            loads: &pass.ecmp,
            loads_changed: pass.loads_changed,
            with_samples: pass.with_samples,
            alerts: &self.alerts,
            troubled: &pass.troubled,
        };
        for a in self.analyses.each() {
            a.section(&view, now_ns, &mut snap);
        }
        snap
    }

    /// The summary section: the counters, the engine's own figures and what came from beside
    /// it (the sections' figures, `mirror_seq_lost` and `alerts_dropped`, are their analyses').
    fn summary(
        &self,
        t: SummaryTimes,
        flows: u64,
        observer: Option<ObserverCost>,
        outputs: OutputHealth,
        interfaces_up: BTreeMap<String, bool>,
    ) -> Summary {
        let total = |c: Counter| -> u64 { self.counters.iter().map(|d| d[c as usize]).sum() };
        let mut by_direction = BTreeMap::new();
        for d in DIRECTIONS {
            let block = &self.counters[dir_index(d)];
            if block.iter().any(|&v| v > 0) {
                by_direction.insert(
                    d.name(),
                    Counter::ALL
                        .iter()
                        .map(|c| (c.name(), block[*c as usize]))
                        .collect(),
                );
            }
        }

        let ringbuf_full = total(Counter::RingbufFull);
        Summary {
            total_packets: total(Counter::TotalPackets),
            roce_packets: total(Counter::RocePackets),
            pfc_frames: total(Counter::PfcFrames),
            pause_8023x: total(Counter::Pause8023x),
            non_roce: total(Counter::NonRoce),
            malformed: total(Counter::Malformed),
            ip_fragments: total(Counter::IpFragments),
            unsupported: total(Counter::Unsupported),
            map_full: total(Counter::MapFull),
            ringbuf_full,
            pending_full: total(Counter::PendingFull),
            tail_call_failed: total(Counter::TailCallFailed),
            events_lost: ringbuf_full,
            // The mirror sessions' section.
            mirror_seq_lost: 0,
            events: self.events.iter().sum(),
            events_per_packet: per_packet(self.events.iter().sum(), total(Counter::TotalPackets)),
            events_by_kind: EventKind::ALL
                .iter()
                .map(|k| (k.name(), self.events[k.index()]))
                .collect(),
            observer,
            flows,
            pmtu: self.pmtu,
            pmtu_learned: self.pmtu_learned,
            link_gbps: self.cfg.link_gbps,
            roce_port: self.cfg.roce_port,
            vxlan_port: self.cfg.vxlan_port,
            ts_resolution_ns: self.ts_resolution_ns,
            interval_start_ts: t.start,
            interval_end_ts: t.end,
            interval_s: t.interval_s,
            by_direction,
            // The alerts' section.
            alerts_dropped: 0,
            log_records_lost: outputs.log_records_lost,
            prom_file_errors: outputs.prom_file_errors,
            interfaces_up,
            capture_read: self.capture_read,
            capture: self.capture.clone(),
        }
    }

    /// Everything the snapshot needs from each flow: the flows with packets in snapshot order
    /// (source, destination, QP, interface name, direction), the flows that may raise a table
    /// alert, the ECMP loads, the number of flows with latency samples.
    ///
    /// Kept in `shown` between snapshots, by each flow's place in the order (`slot`). A full
    /// pass over the table (each pass over 100,000 flows is a cache miss per flow) only when
    /// flows were added, frames were fed (the capture path changes flows wherever the shared
    /// observation does), names changed, or an interval was empty; otherwise only the flows
    /// noted in `dirty` and those whose last rate was not zero (it becomes zero, or moves with
    /// the interval) are redone. A flow's view is rebuilt only when the flow changed or its
    /// rate did; otherwise the last snapshot's view is shared.
    fn flow_pass(
        &mut self,
        shown: &mut Shown,
        dirty: &[FlowKey],
        interval_ns: u64,
        interval_s: f64,
    ) -> FlowPass {
        let (flows, names, roce_port) = (&mut self.flows, &self.names, self.cfg.roce_port);
        let grown = shown.keys.len() != flows.len();
        if grown {
            order_new_flows(flows, names, shown);
        }
        let full = grown || !shown.valid || interval_ns == 0 || shown.last_interval_empty;
        shown.last_interval_empty = interval_ns == 0;
        let n = shown.keys.len();
        let mut redo = Redo {
            names,
            roce_port,
            interval_ns,
            interval_s,
            points: HashMap::default(),
            loads_changed: full,
        };
        // In snapshot order, so that rebuilt views lie in memory in the order every renderer
        // reads them (a pass over scattered views was a cache miss per flow).
        if full {
            shown.views = vec![None; n];
            shown.loads = vec![None; n];
            shown.sampled = vec![false; n];
            shown.alerting.clear();
            shown.rated.clear();
            let mut all: Vec<(usize, &FlowKey, &mut FlowEntry)> = flows
                .iter_mut()
                .map(|(k, e)| (e.slot, k, &mut **e))
                .collect();
            all.sort_unstable_by_key(|(slot, ..)| *slot);
            for (slot, k, e) in all {
                redo.flow(shown, slot, k, e);
            }
        } else {
            let rated = std::mem::take(&mut shown.rated);
            let mut changed: Vec<(usize, FlowKey)> = dirty
                .iter()
                .filter_map(|k| Some((flows.get(k)?.slot, *k)))
                .chain(
                    rated
                        .into_iter()
                        .filter_map(|slot| Some((slot, *shown.keys.get(slot)?))),
                )
                .collect();
            changed.sort_unstable_by_key(|(slot, _)| *slot);
            changed.dedup_by_key(|(slot, _)| *slot);
            for (slot, k) in changed {
                if let Some(e) = flows.get_mut(&k) {
                    redo.flow(shown, slot, &k, e);
                }
            }
        }
        shown.valid = true;
        FlowPass {
            flows: shown.views.iter().flatten().cloned().collect(),
            troubled: shown
                .alerting
                .iter()
                .filter_map(|slot| shown.keys.get(*slot))
                .filter(|k| flows.contains_key(*k))
                .copied()
                .collect(),
            ecmp: shown.loads.iter().flatten().cloned().collect(),
            loads_changed: redo.loads_changed,
            with_samples: shown.sampled.iter().filter(|s| **s).count() as u64,
        }
    }

    /// The time of the latest frame or event (the natural `now` for a finished capture).
    pub fn last_ts(&self) -> u64 {
        self.last_ns
    }
}

/// Redoing one flow's results in a flow pass: its row (shared with the last report when
/// neither the flow nor its rate changed), its ECMP load, whether it has latency samples and
/// may raise a table alert, and whether its rate is not zero.
struct Redo<'a> {
    names: &'a Names,
    roce_port: u16,
    interval_ns: u64,
    interval_s: f64,
    /// One "iface/direction" string per observation point, shared by its flows.
    points: HashMap<(u32, u8), Arc<str>, FastHash>,
    /// A flow's load changed (or every flow is redone).
    loads_changed: bool,
}

impl Redo<'_> {
    fn flow(&mut self, shown: &mut Shown, slot: usize, k: &FlowKey, e: &mut FlowEntry) {
        if slot >= shown.keys.len() {
            return;
        }
        let s = e.stats();
        shown.sampled[slot] = e.rtt().is_some();
        if may_alert(s) {
            shown.alerting.insert(slot);
        }
        if s.packets() == 0 {
            return;
        }
        // One "iface/direction" string per observation point, shared by its flows.
        let before = shown.loads[slot].take();
        let point = match &before {
            Some(l) => Arc::clone(&l.point),
            None => self
                .points
                .entry((k.ifindex, k.direction))
                .or_insert_with(|| {
                    format!(
                        "{}/{}",
                        self.names.name(k.ifindex),
                        Direction::from_u8(k.direction).name()
                    )
                    .into()
                })
                .clone(),
        };
        let load = FlowLoad::new(k, s, point, self.roce_port);
        self.loads_changed |= before.as_ref() != Some(&load);
        shown.loads[slot] = Some(load);
        let rate = if self.interval_ns > 0 {
            s.bytes.saturating_sub(e.base_bytes) as f64 * 8.0 / self.interval_s
        } else {
            0.0
        };
        let view = match e.view.take() {
            Some(v) if v.rate_bps.to_bits() == rate.to_bits() => v,
            _ => Arc::new(flow_view(self.names, k, e, rate)),
        };
        e.view.set(Arc::clone(&view));
        shown.views[slot] = Some(view);
        if rate != 0.0 {
            shown.rated.push(slot);
        }
    }
}

/// Put the flows not yet in the snapshot order into it (source, destination, QP, interface
/// name, direction, then the mirror identity), and give every flow its place (`slot`).
fn order_new_flows(flows: &mut FlowTable, names: &Names, shown: &mut Shown) {
    // Flows are never removed: the new ones are those not yet in the order.
    let before = shown.keys.len();
    for (k, e) in flows.iter_mut() {
        if !e.ordered {
            e.ordered = true;
            shown.keys.push(*k);
        }
    }
    let cmp = |a: &FlowKey, b: &FlowKey| {
        (a.src_ip, a.dst_ip, a.dst_qp)
            .cmp(&(b.src_ip, b.dst_ip, b.dst_qp))
            .then_with(|| names.order(a.ifindex, b.ifindex))
            .then(a.direction.cmp(&b.direction))
            .then((a.encap, a.outer_src, a.mirror_id).cmp(&(b.encap, b.outer_src, b.mirror_id)))
    };
    if before == 0 {
        shown.keys.sort_unstable_by(cmp);
    } else {
        shown.keys.sort_by(cmp);
    }
    for (slot, k) in shown.keys.iter().enumerate() {
        if let Some(e) = flows.get_mut(k) {
            e.slot = slot;
        }
    }
}

/// The report's row of flow `k`.
fn flow_view(names: &Names, k: &FlowKey, e: &FlowEntry, rate_bps: f64) -> FlowSnapshot {
    let s = e.stats();
    let (reordered, distance, distance_max, reorder_naks) =
        roce_observer_common::sequence::reordering(s);
    FlowSnapshot {
        src_ip: show_ip(k.src_ip),
        dst_ip: show_ip(k.dst_ip),
        dst_qp: k.dst_qp,
        iface: names.name(k.ifindex),
        direction: Direction::from_u8(k.direction).name(),
        mirror: MirrorSource::new(k.encap, k.outer_src, k.mirror_id),
        transport: flows::transport(s),
        packets: s.packets(),
        bytes: s.bytes,
        opcodes: flows::opcode_counts(s),
        other_transport: s.other_transport,
        psn_gaps: s.psn_gaps,
        psn_missing: s.psn_missing,
        retransmits: s.retransmits(),
        req_retransmits: s.req_retransmits,
        resp_retransmits: s.resp_retransmits,
        reordered,
        reorder_distance_max: distance_max,
        reorder_distance: crate::report::ReorderDistance::new(distance),
        reorder_naks,
        psn_holes: roce_observer_common::sequence::open_holes(s),
        acks: s.acks(),
        naks: flows::nak_counts(s),
        cnp: s.cnp,
        ecn_ce: s.ecn_ce,
        ecn_ect: s.ecn_ect(),
        dscp: s.dscp,
        pcp: flows::pcp(s),
        peer_qp: s.peer_qp(),
        udp_src_ports: s.udp_src_ports() as u64,
        udp_src_port_overflow: s.udp_sport_overflow,
        rtt_ns: match e.rtt().filter(|s| s.count() > 0) {
            Some(s) => Arc::new(rtt_summary(Some(s))),
            None => Arc::clone(&NO_SAMPLES),
        },
        first_ts: s.first_ns,
        last_ts: s.last_ns,
        rate_bps,
        owner: None,
        psn_trail: PsnTrail {
            requests: s
                .psn
                .has_requests()
                .then_some((s.req_first, s.psn.req_highest)),
            lost: e.lost_runs().map(|l| Box::new(l.clone())),
            lost_unsent: s.path_suppressed + s.path_lost,
        },
        stamp: ViewStamp::new(),
    }
}
