//! The analysis engine: one aggregation state fed by either source (captured frames from
//! `analyze`, or the kernel's maps and ring buffer from `run`), read by every renderer through
//! [`Engine::snapshot`].
//!
//! Capture path: each frame goes through the shared parser and per-packet accounting of
//! `roce-observer-common` (exactly what the kernel runs), and the outcome is turned into the
//! same [`Event`]s the kernel emits, which then take the same route as ring-buffer events.
//! Kernel path: [`Engine::update_flow`], [`Engine::update_pfc`] and [`Engine::update_counter`]
//! replace the absolute values read from the maps; [`Engine::ingest_event`] takes ring-buffer
//! records.

pub mod alerts;
pub mod ecmp;
pub mod flows;
pub mod pfc;
pub mod sketch;
pub mod snapshot;

use std::collections::{BTreeMap, HashMap, HashSet};

use roce_observer_common::{
    Counter, Direction, Event, EventKind, FlowKey, FlowStats, PfcKey, PfcStats,
    account::learn_peer,
    account::{RocePacket, account},
    flow::PCP_UNTAGGED,
    latency::{PendingKey, PendingValue},
    opcode,
    parse::{Frame, parse},
    pfc::{PRIORITY_LINK, quanta_to_ns},
    psn::PsnVerdict,
};

use crate::wire::SliceView;
use alerts::{AlertKind, Alerts, Subject};
use ecmp::{EcmpHash, FiveTuple, FlowLoad};
use flows::{FlowEntry, FlowTable, show_ip};
use pfc::PfcEntry;
use sketch::Sketch;
use snapshot::*;

/// Valid RoCE path MTUs, largest first.
const PMTUS: [u32; 5] = [4096, 2048, 1024, 512, 256];

/// Engine settings. The live path fills the same struct from its own options.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Path MTU for READ PSN reservations.
    pub pmtu: u32,
    /// `pmtu` was given by the user: do not learn it from READ responses.
    pub pmtu_explicit: bool,
    /// Link speed for PFC pause time, Gb/s.
    pub link_gbps: f64,
    /// RoCEv2 UDP destination port.
    pub roce_port: u16,
    /// Modelled ECMP: uplinks (0 disables the model), hash, seed.
    pub ecmp_paths: u32,
    pub ecmp_hash: EcmpHash,
    pub ecmp_seed: u32,
    /// The lossless traffic class RoCE data should use.
    pub lossless_dscp: u8,
    pub lossless_pcp: u8,
    /// DSCP CNPs should use.
    pub cnp_dscp: u8,
    /// Latency samples above this raise an alert (None: never).
    pub rtt_alert_ns: Option<u64>,
    /// PFC storm: paused fraction above `storm_threshold` (0..1) over `storm_window_ns`.
    pub storm_threshold: f64,
    pub storm_window_ns: u64,
    /// Retransmission / NAK bursts: `burst_count` within `burst_window_ns` on one flow.
    pub burst_count: u64,
    pub burst_window_ns: u64,
    /// Table sizes: past these, new flows and timestamps are counted in `map_full` and
    /// `pending_full` (as the kernel does when its maps are full).
    pub max_flows: usize,
    pub max_pending: usize,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            pmtu: roce_observer_common::DEFAULT_PMTU,
            pmtu_explicit: false,
            link_gbps: 100.0,
            roce_port: roce_observer_common::ROCE_V2_PORT,
            ecmp_paths: 8,
            ecmp_hash: EcmpHash::Crc32,
            ecmp_seed: 0,
            lossless_dscp: 26,
            lossless_pcp: 3,
            cnp_dscp: 48,
            rtt_alert_ns: None,
            storm_threshold: 0.5,
            storm_window_ns: 1_000_000_000,
            burst_count: 10,
            burst_window_ns: 100_000_000,
            max_flows: 1 << 20,
            max_pending: 1 << 16,
        }
    }
}

/// Directions with their own counter block.
const DIRECTIONS: [Direction; 3] = [Direction::Ingress, Direction::Egress, Direction::Capture];

/// The analysis state.
pub struct Engine {
    cfg: EngineConfig,
    /// Path MTU in use (the configured one, or learned from READ responses).
    pmtu: u32,
    pmtu_learned: bool,
    iface_names: HashMap<u32, String>,
    flows: FlowTable,
    pfc: BTreeMap<PfcKey, PfcEntry>,
    counters: [[u64; Counter::COUNT as usize]; 3],
    pending: HashMap<PendingKey, PendingValue, flows::FastHash>,
    rtt_overall: Sketch,
    alerts: Alerts,
    /// Earliest and latest time seen (frames, events).
    first_ns: Option<u64>,
    last_ns: u64,
    /// Start of the reporting interval (None: the earliest time seen).
    interval_start: Option<u64>,
    capture: Option<CaptureSummary>,
}

/// Counters of one flow before an update, to judge what the update added.
#[derive(Clone, Copy)]
struct Tally {
    packets: u64,
    cnp: u64,
    ect: u64,
    ce: u64,
    dscp: u8,
    pcp: u8,
}

impl Tally {
    fn of(s: &FlowStats) -> Tally {
        Tally {
            packets: s.packets,
            cnp: s.cnp,
            ect: s.ecn_ect,
            ce: s.ecn_ce,
            dscp: s.dscp,
            pcp: s.pcp,
        }
    }
}

fn dir_index(d: Direction) -> usize {
    match d {
        Direction::Ingress => 0,
        Direction::Egress => 1,
        Direction::Capture => 2,
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn show_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Engine {
        let pmtu = if PMTUS.contains(&cfg.pmtu) || cfg.pmtu_explicit {
            cfg.pmtu.max(1)
        } else {
            roce_observer_common::DEFAULT_PMTU
        };
        Engine {
            pmtu,
            pmtu_learned: false,
            iface_names: HashMap::new(),
            flows: FlowTable::default(),
            pfc: BTreeMap::new(),
            counters: [[0; Counter::COUNT as usize]; 3],
            pending: HashMap::default(),
            rtt_overall: Sketch::new(),
            alerts: Alerts::default(),
            first_ns: None,
            last_ns: 0,
            interval_start: None,
            capture: None,
            cfg,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    pub fn set_iface_name(&mut self, ifindex: u32, name: &str) {
        self.iface_names.insert(ifindex, name.to_string());
    }

    /// Attach the capture's own counts (shown in the summary).
    pub fn set_capture_summary(&mut self, c: CaptureSummary) {
        self.capture = Some(c);
    }

    /// Frames counted so far, all directions.
    pub fn frames_seen(&self) -> u64 {
        self.counters
            .iter()
            .map(|d| d[Counter::TotalPackets as usize])
            .sum()
    }

    /// Number of flows in the table.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// Approximate bytes held by the flow table (entries, keys, sketches, hash overhead).
    pub fn flow_table_bytes(&self) -> usize {
        let per_slot = std::mem::size_of::<(FlowKey, FlowEntry)>() + 1;
        self.flows.capacity() * per_slot
            + self
                .flows
                .values()
                .map(|e| {
                    e.footprint()
                        - std::mem::size_of::<FlowKey>()
                        - std::mem::size_of::<FlowEntry>()
                })
                .sum::<usize>()
    }

    fn iface_name(&self, ifindex: u32) -> String {
        self.iface_names
            .get(&ifindex)
            .cloned()
            .unwrap_or_else(|| format!("if{ifindex}"))
    }

    fn seen(&mut self, ts: u64) {
        if self.first_ns.is_none_or(|f| ts < f) {
            self.first_ns = Some(ts);
        }
        self.last_ns = self.last_ns.max(ts);
    }

    fn count(&mut self, d: Direction, c: Counter, n: u64) {
        self.counters[dir_index(d)][c as usize] += n;
    }

    /// Start a new reporting interval at `now_ns`: `rate_bps` and `paused_fraction` cover
    /// `[now_ns, snapshot time]` from here on. Without a call, the interval starts at the
    /// earliest time seen.
    pub fn begin_interval(&mut self, now_ns: u64) {
        self.interval_start = Some(now_ns);
        for e in self.flows.values_mut() {
            e.base_bytes = e.stats.bytes;
        }
        for e in self.pfc.values_mut() {
            e.timeline.mark(now_ns);
        }
    }

    // ---------------------------------------------------------------- capture path

    /// Capture path: one captured frame. `ts_ns` = capture time (ns since the epoch),
    /// `orig_len` = length on the wire, `ifindex` = capture interface (0 for pcap).
    pub fn ingest_frame(&mut self, ts_ns: u64, data: &[u8], orig_len: u32, ifindex: u32) {
        let d = Direction::Capture;
        self.seen(ts_ns);
        self.count(d, Counter::TotalPackets, 1);
        let view = SliceView::new(data, orig_len);
        match parse(&view, self.cfg.roce_port) {
            Frame::Roce {
                src_ip,
                dst_ip,
                pkt,
            } => {
                self.count(d, Counter::RocePackets, 1);
                self.roce_packet(ts_ns, ifindex, src_ip, dst_ip, &pkt);
            }
            Frame::Pfc {
                src_mac,
                class_enable,
                body,
            } => {
                self.count(d, Counter::PfcFrames, 1);
                let mut ev = Event::zeroed();
                ev.ts_ns = ts_ns;
                ev.kind = EventKind::Pfc as u32;
                ev.flow.ifindex = ifindex;
                ev.flow.direction = d as u8;
                ev.mac = src_mac;
                ev.c = u32::from(class_enable);
                for prio in 0..8u8 {
                    if class_enable & (1 << prio) != 0 {
                        ev.quanta[prio as usize] = body.quanta(prio as usize);
                        let key = pfc_key(ifindex, d, prio, src_mac);
                        self.pfc
                            .entry(key)
                            .or_default()
                            .stats
                            .account(body.quanta(prio as usize), ts_ns);
                    }
                }
                self.on_event(&ev);
            }
            Frame::Pause { src_mac, quanta } => {
                self.count(d, Counter::Pause8023x, 1);
                let key = pfc_key(ifindex, d, PRIORITY_LINK, src_mac);
                self.pfc
                    .entry(key)
                    .or_default()
                    .stats
                    .account(quanta, ts_ns);
                let mut ev = Event::zeroed();
                ev.ts_ns = ts_ns;
                ev.kind = EventKind::Pause as u32;
                ev.flow.ifindex = ifindex;
                ev.flow.direction = d as u8;
                ev.mac = src_mac;
                ev.quanta[0] = quanta;
                self.on_event(&ev);
            }
            Frame::Other(c) => self.count(d, c, 1),
        }
    }

    fn roce_packet(
        &mut self,
        ts: u64,
        ifindex: u32,
        src_ip: [u8; 16],
        dst_ip: [u8; 16],
        pkt: &RocePacket,
    ) {
        let d = Direction::Capture;
        self.learn_pmtu(src_ip, pkt);
        let key = FlowKey {
            src_ip,
            dst_ip,
            dst_qp: pkt.dst_qp,
            ifindex,
            direction: d as u8,
            _pad: [0; 3],
        };
        let pmtu = self.pmtu;
        let max_flows = self.cfg.max_flows;
        let flows_len = self.flows.len();
        let (outcome, before, after) = match self.flows.get_mut(&key) {
            Some(e) => {
                let before = Tally::of(&e.stats);
                let out = account(&mut e.stats, pkt, pmtu, ts);
                (out, before, Tally::of(&e.stats))
            }
            None if flows_len >= max_flows => {
                self.count(d, Counter::MapFull, 1);
                return;
            }
            None => {
                let mut e = FlowEntry::new(ts);
                let before = Tally::of(&e.stats);
                let out = account(&mut e.stats, pkt, pmtu, ts);
                let after = Tally::of(&e.stats);
                self.flows.insert(key, e);
                let mut ev = Event::zeroed();
                ev.ts_ns = ts;
                ev.kind = EventKind::NewFlow as u32;
                ev.flow = key;
                self.on_event(&ev);
                (out, before, after)
            }
        };
        self.check_classes(&key, before, after, ts);

        // The outcome as the kernel's events.
        let mut ev = Event::zeroed();
        ev.ts_ns = ts;
        ev.flow = key;
        ev.d = u32::from(outcome.response);
        match outcome.psn {
            PsnVerdict::InOrder => {}
            PsnVerdict::Gap {
                expected,
                got,
                missing,
            } => {
                ev.kind = EventKind::PsnGap as u32;
                ev.a = u64::from(expected);
                ev.b = u64::from(got);
                ev.c = missing;
                self.on_event(&ev);
            }
            PsnVerdict::Retransmit { highest, got } => {
                ev.kind = EventKind::PsnRetransmit as u32;
                ev.a = u64::from(highest);
                ev.b = u64::from(got);
                self.on_event(&ev);
            }
        }
        if outcome.nak {
            ev.kind = EventKind::Nak as u32;
            ev.a = u64::from(pkt.psn);
            ev.b = 0;
            ev.c = u32::from(pkt.syndrome);
            self.on_event(&ev);
        }
        if outcome.cnp {
            ev.kind = EventKind::Cnp as u32;
            ev.a = u64::from(pkt.psn);
            ev.b = 0;
            ev.c = 0;
            self.on_event(&ev);
        }

        // Latency matching (docs/metrics.md, "Latency"). Karn's rule: a retransmitted
        // request is never timestamped (its answer could belong to either transmission).
        let retransmit = matches!(outcome.psn, PsnVerdict::Retransmit { .. });
        if pkt.wants_timestamp() && !retransmit {
            let pk = PendingKey {
                requester: src_ip,
                responder: dst_ip,
                ifindex,
                psn: pkt.psn,
            };
            if !self.pending.contains_key(&pk) {
                if self.pending.len() >= self.cfg.max_pending {
                    self.count(d, Counter::PendingFull, 1);
                } else {
                    self.pending.insert(
                        pk,
                        PendingValue {
                            ts_ns: ts,
                            dst_qp: pkt.dst_qp,
                            direction: d as u8,
                            _pad: [0; 3],
                        },
                    );
                }
            }
        }
        if pkt.answers_request() {
            let pk = PendingKey {
                requester: dst_ip,
                responder: src_ip,
                ifindex,
                psn: pkt.psn,
            };
            if let Some(req) = self.pending.remove(&pk) {
                let req_key = FlowKey {
                    src_ip: dst_ip,
                    dst_ip: src_ip,
                    dst_qp: req.dst_qp,
                    ifindex,
                    direction: req.direction,
                    _pad: [0; 3],
                };
                // The response's destination QP is the requester's QP; the request's
                // destination QP is the responder's.
                if let Some(e) = self.flows.get_mut(&req_key) {
                    learn_peer(&mut e.stats, pkt.dst_qp);
                }
                if let Some(e) = self.flows.get_mut(&key) {
                    learn_peer(&mut e.stats, req.dst_qp);
                }
                let mut ev = Event::zeroed();
                ev.ts_ns = ts;
                ev.kind = EventKind::Latency as u32;
                ev.flow = req_key;
                ev.a = ts.saturating_sub(req.ts_ns);
                ev.c = pkt.dst_qp;
                self.on_event(&ev);
            }
        }
    }

    /// Learn the path MTU from a READ response FIRST/MIDDLE (always full PMTU-sized): the
    /// largest valid PMTU not above the payload (frame minus the smallest possible headers,
    /// so extra tags or IP options never make it smaller than the real one).
    fn learn_pmtu(&mut self, src_ip: [u8; 16], pkt: &RocePacket) {
        if self.cfg.pmtu_explicit {
            return;
        }
        let op = opcode::operation(pkt.opcode);
        if opcode::psn_space(pkt.opcode) != opcode::PsnSpace::ReadResponse
            || !(op == opcode::RDMA_READ_RESPONSE_FIRST || op == opcode::RDMA_READ_RESPONSE_MIDDLE)
        {
            return;
        }
        let v4 = src_ip[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        let overhead = 14
            + if pkt.pcp != PCP_UNTAGGED { 4 } else { 0 }
            + if v4 { 20 } else { 40 }
            + 8
            + 12
            + if opcode::has_aeth(pkt.opcode) { 4 } else { 0 }
            + 4;
        let payload = pkt.frame_len.saturating_sub(overhead);
        if let Some(&m) = PMTUS.iter().find(|&&m| m <= payload)
            && (!self.pmtu_learned || m > self.pmtu)
        {
            self.pmtu = m;
            self.pmtu_learned = true;
        }
    }

    /// Class checks on what an update added to a flow (one packet in the capture path, one
    /// map read's worth in the live path): data outside the lossless class, Not-ECT data,
    /// CNPs off the CNP DSCP. `dscp`/`pcp` are those of the flow's last packet, so a batch
    /// that mixes CNPs and data is not judged on them.
    fn check_classes(&mut self, key: &FlowKey, before: Tally, after: Tally, ts: u64) {
        let packets = after.packets.saturating_sub(before.packets);
        let cnps = after.cnp.saturating_sub(before.cnp);
        if packets == 0 {
            return;
        }
        let data = packets - cnps.min(packets);
        let marked = (after.ect + after.ce).saturating_sub(before.ect + before.ce);
        let cfg = &self.cfg;
        let subject = Subject::Flow(*key);
        if cnps == 0 {
            let pcp_ok = after.pcp == PCP_UNTAGGED || after.pcp == cfg.lossless_pcp;
            if after.dscp != cfg.lossless_dscp || !pcp_ok {
                let (dscp, pcp, ld, lp) =
                    (after.dscp, after.pcp, cfg.lossless_dscp, cfg.lossless_pcp);
                self.alerts.raise(AlertKind::NonLosslessClass, subject, ts, data, || {
                    let pcp = if pcp == PCP_UNTAGGED { "untagged".to_string() } else { format!("PCP {pcp}") };
                    format!(
                        "RoCE data on DSCP {dscp} ({pcp}) outside the lossless class (DSCP {ld}, PCP {lp} when tagged): it may be dropped instead of paused"
                    )
                });
            }
        } else if data == 0 && after.dscp != cfg.cnp_dscp {
            let (dscp, want) = (after.dscp, cfg.cnp_dscp);
            self.alerts.raise(AlertKind::CnpWrongDscp, subject, ts, cnps, || {
                format!("CNPs on DSCP {dscp}, not the CNP DSCP {want}: they may queue behind the data they should slow down")
            });
        }
        // In a mixed batch CNPs could be the marked ones; count conservatively.
        let not_ect = data.saturating_sub(marked);
        if not_ect > 0 {
            self.alerts.raise(AlertKind::NotEct, subject, ts, not_ect, || {
                "RoCE data sent Not-ECT: switches cannot mark it, so ECN congestion control (DCQCN) is off for this flow".to_string()
            });
        }
    }

    // ---------------------------------------------------------------- kernel path

    /// Kernel path: the absolute values of one flow map entry (replace, don't add). `first_ns`
    /// and `last_ns` are expected in ns since the epoch, like event times.
    pub fn update_flow(&mut self, key: &FlowKey, stats: &FlowStats) {
        let ts = stats.last_ns;
        if stats.packets > 0 {
            self.seen(stats.first_ns);
            self.seen(ts);
        }
        let before = match self.flows.get_mut(key) {
            Some(e) => {
                let before = Tally::of(&e.stats);
                e.stats = *stats;
                before
            }
            None => {
                if self.flows.len() >= self.cfg.max_flows {
                    return;
                }
                let mut e = FlowEntry::new(stats.first_ns);
                let before = Tally::of(&e.stats);
                e.stats = *stats;
                self.flows.insert(*key, e);
                before
            }
        };
        self.check_classes(key, before, Tally::of(stats), ts);
    }

    /// Kernel path: the absolute values of one PFC map entry.
    pub fn update_pfc(&mut self, key: &PfcKey, stats: &PfcStats) {
        self.pfc.entry(*key).or_default().stats = *stats;
    }

    /// Kernel path: the absolute value of one counter (summed over CPUs).
    pub fn update_counter(&mut self, direction: Direction, counter: Counter, value: u64) {
        self.counters[dir_index(direction)][counter as usize] = value;
    }

    /// Kernel path: one ring-buffer event (timestamps already converted to ns since the epoch).
    pub fn ingest_event(&mut self, ev: &Event) {
        self.seen(ev.ts_ns);
        self.on_event(ev);
    }

    /// Events from either path.
    fn on_event(&mut self, ev: &Event) {
        let Some(kind) = EventKind::from_u32(ev.kind) else {
            return;
        };
        let ts = ev.ts_ns;
        let cfg = &self.cfg;
        match kind {
            EventKind::NewFlow | EventKind::Cnp | EventKind::PsnGap => {}
            EventKind::PsnRetransmit => {
                let (limit, window) = (cfg.burst_count, cfg.burst_window_ns);
                if let Some(e) = self.flows.get_mut(&ev.flow)
                    && e.retransmit_burst.add(ts, 1, limit, window)
                {
                    self.alerts.raise(AlertKind::RetransmitBurst, Subject::Flow(ev.flow), ts, 1, || {
                            format!("{limit} or more retransmissions within {} ms (loss, or a go-back-N after a NAK or timeout)", window / 1_000_000)
                        });
                }
            }
            EventKind::Nak => {
                let (limit, window) = (cfg.burst_count, cfg.burst_window_ns);
                if let Some(e) = self.flows.get_mut(&ev.flow)
                    && e.nak_burst.add(ts, 1, limit, window)
                {
                    self.alerts
                        .raise(AlertKind::NakBurst, Subject::Flow(ev.flow), ts, 1, || {
                            format!("{limit} or more NAKs within {} ms", window / 1_000_000)
                        });
                }
            }
            EventKind::Pfc => {
                let d = Direction::from_u8(ev.flow.direction);
                for prio in 0..8u8 {
                    if ev.c & (1 << prio) != 0 {
                        let key = pfc_key(ev.flow.ifindex, d, prio, ev.mac);
                        self.pause_timeline(key, ts, ev.quanta[prio as usize]);
                    }
                }
            }
            EventKind::Pause => {
                let d = Direction::from_u8(ev.flow.direction);
                let key = pfc_key(ev.flow.ifindex, d, PRIORITY_LINK, ev.mac);
                self.pause_timeline(key, ts, ev.quanta[0]);
            }
            EventKind::Latency => {
                let sample = ev.a;
                let max_flows = cfg.max_flows;
                let alert = cfg.rtt_alert_ns.filter(|t| sample > *t);
                if !self.flows.contains_key(&ev.flow) && self.flows.len() < max_flows {
                    self.flows.insert(ev.flow, FlowEntry::new(ts));
                }
                if let Some(e) = self.flows.get_mut(&ev.flow) {
                    e.rtt.get_or_insert_with(Default::default).insert(sample);
                }
                self.rtt_overall.insert(sample);
                if let Some(t) = alert {
                    self.alerts.raise(
                        AlertKind::HighLatency,
                        Subject::Flow(ev.flow),
                        ts,
                        1,
                        || {
                            format!(
                                "latency above {} us seen at the observation point (first: {} us)",
                                t / 1000,
                                sample / 1000
                            )
                        },
                    );
                }
            }
        }
    }

    fn pause_timeline(&mut self, key: PfcKey, ts: u64, quanta: u16) {
        let (gbps, thr, win) = (
            self.cfg.link_gbps,
            self.cfg.storm_threshold,
            self.cfg.storm_window_ns,
        );
        let entry = self.pfc.entry(key).or_default();
        if entry.timeline.frame(ts, quanta, gbps, thr, win) {
            self.alerts.raise(AlertKind::PfcStorm, Subject::Pfc(key), ts, 1, || {
                format!(
                    "paused more than {:.0}% of {} ms: a PFC storm (a stuck receiver or a pause loop) stalls every flow on this priority",
                    thr * 100.0,
                    win / 1_000_000
                )
            });
        }
    }

    // ---------------------------------------------------------------- snapshot

    /// Everything the renderers show, as of `now_ns` (the end of the reporting interval).
    pub fn snapshot(&self, now_ns: u64) -> Snapshot {
        let start = self.interval_start.or(self.first_ns).unwrap_or(now_ns);
        let interval_ns = now_ns.saturating_sub(start);
        let interval_s = interval_ns as f64 / 1e9;

        // Sort references (moving whole records made sorting the biggest cost at 100k flows).
        let mut order: Vec<(&FlowKey, &FlowEntry)> = self
            .flows
            .iter()
            .filter(|(_, e)| e.stats.packets > 0)
            .collect();
        order.sort_unstable_by(|(a, _), (b, _)| {
            (a.src_ip, a.dst_ip, a.dst_qp)
                .cmp(&(b.src_ip, b.dst_ip, b.dst_qp))
                .then_with(|| self.iface_name(a.ifindex).cmp(&self.iface_name(b.ifindex)))
                .then(a.direction.cmp(&b.direction))
        });
        let flows: Vec<FlowSnapshot> = order
            .into_iter()
            .map(|(k, e)| {
                let s = &e.stats;
                let rate = if interval_ns > 0 {
                    s.bytes.saturating_sub(e.base_bytes) as f64 * 8.0 / interval_s
                } else {
                    0.0
                };
                FlowSnapshot {
                    src_ip: show_ip(k.src_ip),
                    dst_ip: show_ip(k.dst_ip),
                    dst_qp: k.dst_qp,
                    iface: self.iface_name(k.ifindex),
                    direction: Direction::from_u8(k.direction).name(),
                    transport: flows::transport(s),
                    packets: s.packets,
                    bytes: s.bytes,
                    opcodes: flows::opcode_counts(s),
                    other_transport: s.other_transport,
                    psn_gaps: s.psn_gaps,
                    psn_missing: s.psn_missing,
                    retransmits: s.retransmits(),
                    req_retransmits: s.req_retransmits,
                    resp_retransmits: s.resp_retransmits,
                    acks: s.acks,
                    naks: flows::nak_counts(s),
                    cnp: s.cnp,
                    ecn_ce: s.ecn_ce,
                    ecn_ect: s.ecn_ect,
                    dscp: s.dscp,
                    pcp: flows::pcp(s),
                    peer_qp: s.peer_qp(),
                    udp_src_ports: s.udp_src_ports() as u64,
                    udp_src_port_overflow: s.udp_sport_overflow,
                    rtt_ns: rtt_summary(e.rtt.as_deref()),
                    first_ts: s.first_ns,
                    last_ts: s.last_ns,
                    rate_bps: rate,
                }
            })
            .collect();

        let mut pfc: Vec<PfcSnapshot> = self
            .pfc
            .iter()
            .filter(|(_, e)| {
                e.stats.pause_frames + e.stats.xon_frames > 0 || e.timeline.has_frames()
            })
            .map(|(k, e)| {
                let paused = e.timeline.paused_in_interval(now_ns);
                PfcSnapshot {
                    iface: self.iface_name(k.ifindex),
                    direction: Direction::from_u8(k.direction).name(),
                    src_mac: show_mac(k.src_mac),
                    priority: (k.priority != PRIORITY_LINK).then_some(k.priority),
                    kind: if k.priority == PRIORITY_LINK {
                        "pause"
                    } else {
                        "pfc"
                    },
                    pause_frames: e.stats.pause_frames,
                    xon_frames: e.stats.xon_frames,
                    pause_quanta: e.stats.pause_quanta,
                    pause_us: quanta_to_ns(e.stats.pause_quanta, self.cfg.link_gbps) / 1000.0,
                    paused_us: paused as f64 / 1000.0,
                    paused_fraction: if interval_ns > 0 {
                        (paused as f64 / interval_ns as f64).min(1.0)
                    } else {
                        0.0
                    },
                    storm: e.timeline.storms > 0
                        || e.timeline.storm_at(
                            now_ns,
                            self.cfg.storm_threshold,
                            self.cfg.storm_window_ns,
                        ),
                    storms: e.timeline.storms,
                    first_ts: e.stats.first_ns,
                    last_ts: e.stats.last_ns,
                }
            })
            .collect();
        // By (source MAC, priority) with the legacy PAUSE entry (null) first, then where seen.
        pfc.sort_by(|a, b| {
            (&a.src_mac, a.priority, &a.iface, a.direction).cmp(&(
                &b.src_mac,
                b.priority,
                &b.iface,
                b.direction,
            ))
        });

        // Counters.
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

        // Alerts, plus those judged on the whole table.
        let mut alerts: Vec<AlertSnapshot> =
            self.alerts.iter().map(|a| self.alert_snapshot(a)).collect();
        alerts.extend(self.ce_without_cnp());
        alerts.sort_by(|a, b| {
            (a.first_ts, a.kind, &a.flow, &a.pfc).cmp(&(b.first_ts, b.kind, &b.flow, &b.pfc))
        });

        let ecmp_flows: Vec<FlowLoad> = self
            .flows
            .iter()
            .filter(|(_, e)| e.stats.packets > 0)
            .map(|(k, e)| FlowLoad {
                tuple: FiveTuple {
                    src: show_ip(k.src_ip),
                    dst: show_ip(k.dst_ip),
                    sport: e.stats.udp_sports[0],
                    dport: self.cfg.roce_port,
                },
                dst_qp: k.dst_qp,
                point: format!(
                    "{}/{}",
                    self.iface_name(k.ifindex),
                    Direction::from_u8(k.direction).name()
                ),
                bytes: e.stats.bytes,
                sports: e
                    .stats
                    .udp_sports
                    .iter()
                    .copied()
                    .filter(|p| *p != 0)
                    .collect(),
            })
            .collect();
        let ecmp = ecmp::compute(
            &ecmp_flows,
            self.cfg.ecmp_hash,
            self.cfg.ecmp_paths,
            self.cfg.ecmp_seed,
        );

        let ringbuf_full = total(Counter::RingbufFull);
        Snapshot {
            schema_version: SCHEMA_VERSION,
            summary: Summary {
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
                events_lost: ringbuf_full,
                flows: flows.len() as u64,
                pmtu: self.pmtu,
                pmtu_learned: self.pmtu_learned,
                link_gbps: self.cfg.link_gbps,
                interval_start_ts: start,
                interval_end_ts: now_ns,
                interval_s,
                by_direction,
                alerts_dropped: self.alerts.dropped,
                capture: self.capture.clone(),
            },
            latency: LatencySnapshot {
                observed_at: "latency seen at the observation point (request to the first answer from the peer), not at either host",
                overall: rtt_summary(Some(&self.rtt_overall)),
                flows_with_samples: self.flows.values().filter(|e| e.rtt.is_some()).count() as u64,
                pending: self.pending.len() as u64,
                relative_accuracy: sketch::ALPHA,
            },
            flows,
            pfc,
            ecmp,
            alerts,
        }
    }

    /// The time of the latest frame or event (the natural `now` for a finished capture).
    pub fn last_ts(&self) -> u64 {
        self.last_ns
    }

    fn flow_ref(&self, k: &FlowKey) -> FlowRef {
        FlowRef {
            src_ip: show_ip(k.src_ip),
            dst_ip: show_ip(k.dst_ip),
            dst_qp: k.dst_qp,
            iface: self.iface_name(k.ifindex),
            direction: Direction::from_u8(k.direction).name(),
        }
    }

    fn alert_snapshot(&self, a: &alerts::Alert) -> AlertSnapshot {
        let (flow, pfc) = match &a.subject {
            Subject::Flow(k) => (Some(self.flow_ref(k)), None),
            Subject::Pfc(k) => (
                None,
                Some(PfcRef {
                    iface: self.iface_name(k.ifindex),
                    direction: Direction::from_u8(k.direction).name(),
                    src_mac: show_mac(k.src_mac),
                    priority: (k.priority != PRIORITY_LINK).then_some(k.priority),
                }),
            ),
        };
        AlertSnapshot {
            kind: a.kind.name(),
            reason: a.reason.clone(),
            flow,
            pfc,
            first_ts: a.first_ns,
            last_ts: a.last_ns,
            count: a.count,
        }
    }

    /// Flows with CE marks whose data receiver never sent a CNP back (no CNP at all from the
    /// destination host to the source host).
    fn ce_without_cnp(&self) -> Vec<AlertSnapshot> {
        let with_cnp: HashSet<([u8; 16], [u8; 16])> = self
            .flows
            .iter()
            .filter(|(_, e)| e.stats.cnp > 0)
            .map(|(k, _)| (k.src_ip, k.dst_ip))
            .collect();
        self.flows
            .iter()
            .filter(|(k, e)| e.stats.ecn_ce > 0 && !with_cnp.contains(&(k.dst_ip, k.src_ip)))
            .map(|(k, e)| AlertSnapshot {
                kind: AlertKind::CeWithoutCnp.name(),
                reason: format!(
                    "{} CE-marked packets but no CNP from {} back to {}: the receiver's NIC does not run DCQCN notification, or CNPs take another path",
                    e.stats.ecn_ce,
                    show_ip(k.dst_ip),
                    show_ip(k.src_ip)
                ),
                flow: Some(self.flow_ref(k)),
                pfc: None,
                first_ts: e.stats.first_ns,
                last_ts: e.stats.last_ns,
                count: e.stats.ecn_ce,
            })
            .collect()
    }
}

fn pfc_key(ifindex: u32, d: Direction, priority: u8, src_mac: [u8; 6]) -> PfcKey {
    PfcKey {
        ifindex,
        direction: d as u8,
        priority,
        src_mac,
    }
}

fn rtt_summary(s: Option<&Sketch>) -> RttSummary {
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
    }
}

#[cfg(test)]
mod tests;
