//! The capture path: one captured frame through the shared per-packet observation
//! (`roce_observer_common::observe`, exactly what the kernel programs run), here on the
//! engine's own tables. Engine-only extras, hooked into its table trait: the path MTU is learned from READ responses, and the traffic-class
//! checks run on what each packet added.

use roce_observer_common::{
    Counter, Direction, Event, FlowKey, FlowStats,
    account::{Outcome, RocePacket},
    flow::PCP_UNTAGGED,
    latency::PendingSet,
    mirror::{MirrorKey, MirrorPoint, MirrorStats, Ports},
    observe::{Entry, Flows, Tables, observe, slot_quanta},
    opcode,
    parse::{Frame, PacketView, parse_mirrored},
    pfc::{PfcLinkKey, SLOT_LINK},
    run::{DataRun, RunAdded, RunBatch},
};

use super::{
    Counters, Engine, PMTUS,
    alerts::Added,
    dir_index,
    flows::{self, FlowEntry, FlowTable},
    latency::Pending,
    mirrors::Mirrors,
    pfc::PfcAnalysis,
};
use crate::wire::{CookedView, Link, SliceView, capture::CapturedFrame};

impl Engine {
    /// Capture path: one frame as the capture reader gives it (an Ethernet frame, or the
    /// network layer of a cooked or raw-IP one, with the direction its link header gave).
    pub fn ingest(&mut self, f: &CapturedFrame<'_>) {
        match f.link {
            Link::Ethernet => self.observe_frame(
                f.ts_ns,
                &SliceView::new(f.data, f.orig_len),
                f.iface,
                f.direction,
            ),
            Link::Cooked(head) => self.observe_frame(
                f.ts_ns,
                &CookedView::new(head, f.data, f.orig_len),
                f.iface,
                f.direction,
            ),
            // No bytes: the parser's first load fails and the frame is counted malformed.
            Link::Malformed => self.observe_frame(
                f.ts_ns,
                &SliceView::new(&[], f.orig_len),
                f.iface,
                f.direction,
            ),
        }
    }

    /// Capture path: one captured Ethernet frame. `ts_ns` = capture time (ns since the epoch),
    /// `orig_len` = length on the wire, `ifindex` = capture interface (0 for pcap).
    pub fn ingest_frame(&mut self, ts_ns: u64, data: &[u8], orig_len: u32, ifindex: u32) {
        let view = SliceView::new(data, orig_len);
        self.observe_frame(ts_ns, &view, ifindex, Direction::Capture);
    }

    fn observe_frame<V: PacketView>(
        &mut self,
        ts_ns: u64,
        view: &V,
        ifindex: u32,
        direction: Direction,
    ) {
        // Frames change flows through the shared observation code, not flow by flow: the
        // next snapshot looks at every flow, and the next interval rebases every flow.
        self.shown.valid = false;
        self.unbased = None;
        self.seen(ts_ns);
        let mut events = std::mem::take(&mut self.event_buf);
        let mut tables = CaptureTables {
            now: ts_ns,
            ports: Ports {
                roce: self.cfg.roce_port,
                vxlan: self.cfg.vxlan_port,
            },
            burst_rule: (
                u32::try_from(self.cfg.burst_count).unwrap_or(u32::MAX),
                self.cfg.burst_window_ns,
            ),
            reorder_window: self.cfg.reorder_window,
            pmtu: PmtuLearner {
                pmtu: &mut self.pmtu,
                learned: &mut self.pmtu_learned,
                explicit: self.cfg.pmtu_explicit,
            },
            counters: &mut self.counters,
            pending: self.analyses.latency.pending(),
            pfc: &mut self.analyses.pfc,
            mirrors: &mut self.analyses.mirrors,
            events: &mut events,
            batches: &mut self.run_batches,
            max_batches: self.cfg.max_flows,
            runs: None,
            packet: None,
            #[cfg(debug_assertions)]
            accounted_key: None,
            sample: None,
        };
        let mut flows = CaptureFlows {
            table: &mut self.flows,
            max: self.cfg.max_flows,
            now: ts_ns,
            accounted: 0,
        };
        observe(
            view,
            &mut flows,
            &mut tables,
            &mut self.scratch,
            ifindex,
            direction as u8,
        );
        #[cfg(debug_assertions)]
        if let Some(key) = tables.accounted_key {
            debug_assert_eq!(key, self.scratch.key, "a packet accounted to another key");
        }
        let (sample, runs, packet) = (tables.sample, tables.runs, tables.packet);
        if let Some((pkt, out)) = &packet {
            // The packet was accounted to the flow of the scratch's key.
            let key = &self.scratch.key;
            self.alerts
                .classes(key, Added::packet(pkt, out), ts_ns, &self.cfg);
            let flow = flows.accounted;
            self.analyses.packet(&self.cfg, ts_ns, key, flow, pkt, out);
        }
        for ev in events.drain(..) {
            self.on_event(&ev, &[], true);
        }
        if let Some(rec) = runs {
            self.on_event(&rec.head, &rec.runs, true);
        }
        self.event_buf = events;
        if let Some((key, ts, ns)) = sample {
            // Not noted in `dirty`: the frame already made the next snapshot redo every flow.
            if let Some(e) = flows::entry_or_new(&mut self.flows, self.cfg.max_flows, &key, ts) {
                e.add_rtt_sample(ns);
            }
            let cfg = &self.cfg;
            self.analyses
                .latency
                .sample(&mut self.alerts, cfg, &key, ts, ns);
        }
    }
}

/// The path MTU in use, learned from READ responses unless the user gave it.
struct PmtuLearner<'a> {
    pmtu: &'a mut u32,
    learned: &'a mut bool,
    explicit: bool,
}

impl PmtuLearner<'_> {
    /// Learn from a READ response FIRST/MIDDLE (always full PMTU-sized): the largest valid
    /// PMTU not above the payload (frame minus the smallest possible headers, so extra tags or
    /// IP options never make it smaller than the real one).
    fn learn(&mut self, src_ip: &[u8; 16], pkt: &RocePacket) {
        if self.explicit {
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
            && (!*self.learned || m > *self.pmtu)
        {
            *self.pmtu = m;
            *self.learned = true;
        }
    }
}

/// The flow table, bounded by `max_flows` as the kernel's map is by its size.
struct CaptureFlows<'a> {
    table: &'a mut FlowTable,
    max: usize,
    now: u64,
    /// The number ([`FlowEntry::id`]) of the flow the packet was accounted to: the entry
    /// `observe` asked for last (once per RoCE packet, before it is accounted).
    accounted: u32,
}

impl Flows for CaptureFlows<'_> {
    fn entry(&mut self, key: &FlowKey, _point: u32) -> Entry<'_> {
        let full = self.table.len() >= self.max;
        let id = self.table.len();
        let e = match self.table.entry(*key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if full => return Entry::Full,
            std::collections::hash_map::Entry::Vacant(e) => {
                let e = e.insert(Box::new(FlowEntry::new(self.now, id)));
                self.accounted = e.id();
                return Entry::New(e.stats_mut());
            }
        };
        self.accounted = e.id();
        Entry::Found(e.stats_mut())
    }

    fn get(&mut self, key: &FlowKey, _point: u32) -> Option<&mut FlowStats> {
        self.table.get_mut(key).map(|e| e.stats_mut())
    }
}

/// The engine's other tables; events are collected and handled once `observe` has returned
/// (handling them needs the whole engine).
struct CaptureTables<'a> {
    /// Capture time of the frame: every clock of the kernel reads this.
    now: u64,
    ports: Ports,
    /// The kernel's `BURST_COUNT` and `BURST_WINDOW_NS`.
    burst_rule: (u32, u64),
    reorder_window: u32,
    pmtu: PmtuLearner<'a>,
    counters: &'a mut Counters,
    pending: &'a mut Pending,
    pfc: &'a mut PfcAnalysis,
    mirrors: &'a mut Mirrors,
    events: &'a mut Vec<Event>,
    /// Each flow's batch of finished data runs, at most `max_batches` (as the kernel's map).
    batches: &'a mut super::flows::RunBatches,
    max_batches: usize,
    /// The frame's record of finished data runs (a data packet finishes at most one run, so
    /// fills at most one batch). Boxed: made once per batch, it is not copied with the rest
    /// of the tables on every frame.
    runs: Option<Box<RunBatch>>,
    /// A RoCE packet as accounted (to the flow of the scratch's key, `Scratch::key`), for the
    /// class checks and the analyses' packet hook.
    packet: Option<(RocePacket, Outcome)>,
    /// Debug builds: the key `accounted` was given, to check it is the scratch's.
    #[cfg(debug_assertions)]
    accounted_key: Option<FlowKey>,
    /// The latency sample the packet made (at most one: it answered one request): the
    /// request's flow, the time, the latency.
    sample: Option<(FlowKey, u64, u64)>,
}

impl Tables for CaptureTables<'_> {
    fn parse<P: PacketView>(&mut self, p: &P, point: &mut MirrorPoint) -> Frame {
        let frame = parse_mirrored(p, self.ports, point);
        if let Frame::Roce { src_ip, pkt, .. } = &frame {
            self.pmtu.learn(src_ip, pkt);
        }
        frame
    }

    fn pmtu(&self) -> u32 {
        *self.pmtu.pmtu
    }

    fn burst_rule(&self) -> (u32, u64) {
        self.burst_rule
    }

    fn reorder_window(&self) -> u32 {
        self.reorder_window
    }

    fn coarse_ns(&self) -> u64 {
        self.now
    }

    fn precise_ns(&self) -> u64 {
        self.now
    }

    fn count(&mut self, counter: Counter, direction: u8) {
        let block = &mut self.counters[dir_index(Direction::from_u8(direction))];
        block[counter as usize] += 1;
        // The kernel leaves the total to its reader (maps.rs); here it is kept as we go.
        if counter.is_frame_class() {
            block[Counter::TotalPackets as usize] += 1;
        }
    }

    fn pending_sets(&self) -> u32 {
        self.pending.sets()
    }

    fn pending_set(&mut self, index: u32) -> Option<&mut PendingSet> {
        self.pending.set(index)
    }

    fn latency_sample(&mut self, flow: &FlowKey, _point: u32, rtt_ns: u64, now: u64) {
        self.sample = Some((*flow, now, rtt_ns));
    }

    fn pfc(&mut self, link: &PfcLinkKey, slots: u16, quanta: &[u16; 8], now: u64) -> bool {
        // One entry per priority here, as in the snapshot (the kernel keeps one per link).
        for slot in 0..=SLOT_LINK {
            if slots & (1 << slot) != 0 {
                let key = link.priority_key(slot);
                self.pfc.account(key, slot_quanta(quanta, slot), now);
            }
        }
        true
    }

    fn mirror(&mut self, key: &MirrorKey) -> Option<&mut MirrorStats> {
        self.mirrors.session(key)
    }

    fn session_point(&mut self, key: &MirrorKey) -> Option<u32> {
        self.mirrors.point(key)
    }

    /// Never lost: the engine keeps every event of the frame.
    fn emit(&mut self, _direction: u8, ts_ns: u64, fill: impl FnOnce(&mut Event)) -> bool {
        self.events.push(Event::filled(fill).at(ts_ns));
        true
    }

    /// A full batch's record is never lost, as events.
    fn add_run(&mut self, key: &FlowKey, run: &DataRun) -> RunAdded {
        let full = self.batches.len() >= self.max_batches;
        let batch = match self.batches.entry(*key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(_) if full => return RunAdded::NoRoom,
            std::collections::hash_map::Entry::Vacant(e) => e.insert(RunBatch::zeroed()),
        };
        let record = &mut self.runs;
        batch.add(key, run, |full| {
            *record = Some(Box::new(*full));
            true
        })
    }

    fn accounted(&mut self, key: &FlowKey, pkt: &RocePacket, out: &Outcome) {
        // `observe` accounts a packet to the flow of its scratch key, which the engine reads
        // once it returns (checked in debug builds).
        #[cfg(debug_assertions)]
        {
            self.accounted_key = Some(*key);
        }
        #[cfg(not(debug_assertions))]
        let _ = key;
        self.packet = Some((*pkt, *out));
    }
}
