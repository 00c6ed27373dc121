//! The whole per-packet observation, run by the kernel programs on every frame and by the engine
//! on every captured frame: count the frame's class, account a RoCE packet to its flow, turn
//! retransmissions and NAKs into bursts, keep the flow's activity runs (training steps; sixteen
//! finished data runs are one record, a finished signal run one event), time requests and match their answers (Karn's rule, peer QPs;
//! a sample goes to the request flow's histogram, `Tables::latency_sample`, not to an event),
//! account PFC and PAUSE frames per priority, count the frames and sequence gaps of each
//! switch-mirror session, and send the rare path events of request gaps and resend runs (where
//! was it lost; docs/metrics.md).
//!
//! The tables it works on are behind two small traits, implemented once by the BPF maps
//! (roce-observer-ebpf/src/observe.rs) and once by the engine's hash maps
//! (roce-observer/src/engine/capture.rs). Everything here is `#[inline(always)]`, loops are
//! bounded and no large value is copied or kept across a helper call (the flow key, latency keys
//! and mirror session live in `Scratch`): it must pass the BPF verifier within 512 bytes of stack
//! (the TC program uses 424, XDP 320). Mind the shape when changing it: passing the parsed `Frame` into
//! `observe` as an argument, instead of matching on `Tables::parse` here, cost enough stack to
//! overflow it.

use crate::{
    Counter, Event, FlowKey, FlowStats,
    account::{Outcome, RocePacket, account, learn_peer, touch},
    headers::PfcBody,
    latency::{PENDING_SETS, PendingKey, PendingSet, PendingValue, pending_set_index},
    lossless::{LOAD_INTERVAL_NS, LosslessKey, LosslessState, pause_ns, priority_of},
    mirror::{MirrorKey, MirrorPoint, MirrorStats, encap},
    parse::{Frame, PacketView},
    pfc::{PfcLinkKey, SLOT_LINK},
    psn::{PSN_MASK, PsnVerdict, REQ_GAPPED, REQ_RESENDING, psn_newer},
    run::{DataRun, RUN_BATCH, RunAdded},
};

/// Per-frame working space that `observe` uses instead of the 512-byte BPF stack: the kernel's
/// is a per-CPU map value (`SCRATCH`), the engine's a local. With the 64-byte flow key and the
/// mirror session on the stack the TC program overflowed it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scratch {
    /// The frame's mirror session (parse's first pass writes it).
    pub point: MirrorPoint,
    /// The flow key of a RoCE frame, built here.
    pub key: FlowKey,
    /// Latency matching: the pending request's key, and the flow of a matched request with
    /// its observation point ([`NO_POINT`] when its mirror session is unknown).
    pub pending: PendingKey,
    pub request_flow: FlowKey,
    pub request_point: u32,
    /// The flow's observation point (`Flows`): kept here, not in a variable, since a value
    /// held across helper calls is spilled to the stack, where on some paths the 5.10
    /// verifier saw it read unwritten.
    pub flow_point: u32,
    /// The RoCE packet's fields, as parsed. Kept here rather than on the stack so that every
    /// way through the parser (VLAN tags, IPv4/IPv6, each kind of mirror) reaches the flow's
    /// accounting in one verifier state: values on the stack differ from path to path, those in
    /// scratch memory are not tracked, and the verifier then checks the accounting once, not
    /// once per parse path.
    pub pkt: RocePacket,
    /// The lossless-class state's key (`Tables::lossless`).
    pub lossless: LosslessKey,
}

impl Scratch {
    pub const fn zeroed() -> Scratch {
        Scratch {
            point: MirrorPoint::zeroed(),
            key: FlowKey::zeroed(),
            pending: PendingKey::zeroed(),
            request_flow: FlowKey::zeroed(),
            request_point: 0,
            flow_point: 0,
            pkt: RocePacket::zeroed(),
            lossless: LosslessKey {
                ifindex: 0,
                priority: 0,
                _pad: [0; 3],
            },
        }
    }
}

/// `Scratch::request_point` of a request whose mirror session is not (or no longer) known.
/// No observation point takes it: an interface index, or `POINT_MIRROR` with a session number
/// far below 2^31 - 1.
pub const NO_POINT: u32 = u32::MAX;

/// A flow's entry as [`Flows::entry`] finds or makes it.
pub enum Entry<'a> {
    Found(&'a mut FlowStats),
    /// Inserted just now, all zero: `observe` initialises it.
    New(&'a mut FlowStats),
    /// Absent, and the table has no room: the packet is counted in `map_full`.
    Full,
}

/// The flow table. Kept apart from [`Tables`] because a flow's entry stays borrowed while the
/// other tables are used (matching an answer to its request updates both).
///
/// `point` is the flow's observation point as the kernel's compact keys hold it
/// (`flow::POINT_MIRROR`): the interface index, or the mirror session's number. The kernel keys
/// its maps by it; the engine, keyed by the whole [`FlowKey`], ignores it.
pub trait Flows {
    /// The entry of `key`, inserted when absent.
    fn entry(&mut self, key: &FlowKey, point: u32) -> Entry<'_>;
    /// The entry of `key` if present (never inserts).
    fn get(&mut self, key: &FlowKey, point: u32) -> Option<&mut FlowStats>;
}

/// What an insert of a timestamped request did (`latency::PendingSet::insert`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Into an empty slot.
    Added,
    /// The same request was there already and was kept (with its first timestamp).
    Present,
    /// In place of a request that waited past `latency::PENDING_STALE_NS`: not counted.
    Replaced,
    /// In place of a younger request, pushed out before its answer: counted in `pending_full`.
    Evicted,
}

/// Everything else `observe` reads and writes: the parser and path MTU in use, timestamped
/// requests, PFC entries, counters, events and the clocks.
pub trait Tables {
    /// Parse one frame with `parse::parse_mirrored` (both sides unwrap switch mirrors), which
    /// leaves the mirror session in `point`; the engine also learns the path MTU from what it
    /// parsed.
    fn parse<P: PacketView>(&mut self, p: &P, point: &mut MirrorPoint) -> Frame;
    /// Path MTU for READ PSN reservations.
    fn pmtu(&self) -> u32;
    /// Reorder window in PSNs (sequence.rs; 1..=`sequence::MAX_REORDER_WINDOW`).
    fn reorder_window(&self) -> u32;
    /// Whether this side runs the PSN scoreboard (sequence.rs) in `observe` itself. The
    /// kernel's main programs do not: a packet that needs it (`sequence::needs_scoreboard`:
    /// out of order, resent, a sequence-error NAK) is handed, with its parse in scratch memory,
    /// to a second program that runs [`observe_scoreboard`]. The verifier then checks the
    /// scoreboard once, from one state, instead of once for every way through the parser
    /// (which took it past its limit on 5.10).
    const SCOREBOARD: bool = true;
    /// Hand the packet to the scoreboard program (kernel: a tail call, which does not return
    /// when it works). Returns only when it could not; `observe` then counts the packet in
    /// `tail_call_failed`.
    #[inline(always)]
    fn to_scoreboard(&mut self) {}
    /// Burst rule of the `retransmit_burst` and `nak_burst` alerts: this many occurrences
    /// within this many ns on one flow (0 occurrences: never).
    fn burst_rule(&self) -> (u32, u64);
    /// Time of an ACK (a RoCE packet that is neither data nor a CNP or NAK): flow first/last
    /// times, burst windows, new-flow events (kernel: the coarse monotonic clock, a few ms of
    /// resolution). Read once per such packet.
    fn coarse_ns(&self) -> u64;
    /// Time of a data packet, CNP or NAK (their activity runs need sub-millisecond times; the
    /// same reading timestamps a request), latency samples, PFC and PAUSE frames (kernel: the
    /// precise monotonic clock). Read once per such packet, and for a sample made on an ACK
    /// or a PFC/PAUSE frame.
    fn precise_ns(&self) -> u64;
    /// One more `counter` in `direction`.
    fn count(&mut self, counter: Counter, direction: u8);
    /// Sets of the table of timestamped requests (a power of two): [`PENDING_SETS`], in the
    /// kernel and in the engine alike (the engine's own tests make it smaller).
    #[inline(always)]
    fn pending_sets(&self) -> u32 {
        PENDING_SETS
    }
    /// Set `index` (below `pending_sets`) of the table of timestamped requests; `observe`
    /// inserts, matches and pushes out requests there (`latency::PendingSet`), the same way on
    /// both sides. The kernel's is an element of a BPF array, which the verifier inlines.
    fn pending_set(&mut self, index: u32) -> Option<&mut PendingSet>;
    /// One latency sample of `rtt_ns` on the request flow `flow` at observation `point`,
    /// answered at `now` (the precise clock). The kernel adds it to the flow's
    /// `LatencyHist` in its latency map, made when absent (no room: counted in `map_full`),
    /// which user space reads on its tick: no event per sample. The engine adds it to the
    /// flow's sketch as it is.
    fn latency_sample(&mut self, flow: &FlowKey, point: u32, rtt_ns: u64, now: u64);
    /// Account one PFC or PAUSE frame from `link`: `PfcStats::account` on every slot set in
    /// `slots` (bit p: PFC priority p with `quanta[p]`; bit `SLOT_LINK`: a legacy PAUSE with
    /// `quanta[0]`). False when the table has no room for `link` (nothing accounted). The
    /// kernel keeps all slots of a link in one map entry: one lookup per frame.
    fn pfc(&mut self, link: &PfcLinkKey, slots: u16, quanta: &[u16; 8], now: u64) -> bool;
    /// The mirror session of `key`, inserted when absent; `None` when the table has no room.
    fn mirror(&mut self, key: &MirrorKey) -> Option<&mut MirrorStats>;
    /// The number (`MirrorStats::point`) of the mirror session `key` if present (never
    /// inserts).
    fn session_point(&mut self, key: &MirrorKey) -> Option<u32>;
    /// Emit one event for a packet seen in `direction` at `ts_ns` (the packet time): a record
    /// that is all zero but for the event time, filled in place by `fill` (one of the
    /// `Event::set_*` writers; the kernel fills its ring-buffer slot, with no copy on the BPF
    /// stack). True when the event was sent; false when it was lost (the kernel's ring buffer
    /// was full), which is counted in `ringbuf_full`: the caller then keeps in the flow record
    /// what the event would have carried (`path_lost`, the unsent runs).
    fn emit(&mut self, direction: u8, ts_ns: u64, fill: impl FnOnce(&mut Event)) -> bool;
    /// Add the finished data run `run` of flow `key` to the flow's batch of finished runs
    /// ([`crate::run::RunBatch::add`]), made when absent: the kernel's `RUN_BATCHES` map, not preallocated, so that
    /// only flows with long runs pay for one. The record of a batch the run fills is sent as
    /// it is (the kernel copies it from the map value with one helper call); lost, it is
    /// counted in `ringbuf_full` as for `emit`.
    fn add_run(&mut self, key: &FlowKey, run: &DataRun) -> RunAdded;
    /// Called after a RoCE packet was accounted to its flow: a hook for checks that only one
    /// side runs (the engine's traffic-class alerts). The kernel does nothing here.
    #[inline(always)]
    fn accounted(&mut self, _key: &FlowKey, _pkt: &RocePacket, _out: &Outcome) {}
    /// Benchmarks only (`kernel-bench`, which times the work part by part): how much of a RoCE
    /// packet's work to do. [`Stage::All`] everywhere else.
    #[inline(always)]
    fn stage(&self) -> Stage {
        Stage::All
    }
    /// Whether to keep activity runs (training steps). The kernel's `run --no-steps` turns
    /// them off to save the precise clock on every data packet; the engine always keeps them.
    #[inline(always)]
    fn runs(&self) -> bool {
        true
    }
    /// Lossless class (lossless.rs): the state of `key`, made when absent; `None` when the
    /// table has no room (counted in `map_full`) or this side keeps none. The kernel keeps it;
    /// the engine's lossless analysis takes every packet itself.
    #[inline(always)]
    fn lossless(&mut self, _key: &LosslessKey) -> Option<&'static mut LosslessState> {
        None
    }
    /// Lossless class: one more ECT data packet of `key` that nothing else is kept of (the
    /// kernel: in this CPU's `EctCache`).
    #[inline(always)]
    fn lossless_ect(&mut self, _key: &LosslessKey) {}
    /// What the lossless state needs to know (`LosslessConfig::OFF`: keep none).
    #[inline(always)]
    fn lossless_config(&self) -> LosslessConfig {
        LosslessConfig::OFF
    }
}

/// The lossless-class settings of [`Tables::lossless_config`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LosslessConfig {
    /// Keep lossless state at all.
    pub on: bool,
    /// The lossless DSCP and PCP (`--lossless-dscp`, `--lossless-pcp`).
    pub dscp: u8,
    pub pcp: u8,
    /// Keep load intervals (a link speed is known: `ecn_at_low_load` is judged).
    pub load: bool,
    /// Link speed, kb/s, for the time an XOFF pauses.
    pub link_kbps: u64,
    /// The monotonic clock's offset from the Unix epoch modulo `LOAD_INTERVAL_NS`: load
    /// intervals are aligned to the epoch, as the capture path's.
    pub phase_ns: u64,
}

impl LosslessConfig {
    pub const OFF: LosslessConfig = LosslessConfig {
        on: false,
        dscp: 0,
        pcp: 0,
        load: false,
        link_kbps: 0,
        phase_ns: 0,
    };
}

/// How far [`observe`] goes with a RoCE packet (see [`Tables::stage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Find or create the flow entry, then stop.
    Lookup,
    /// Also account the packet to its flow and keep its burst windows; no latency matching.
    Account,
    /// Everything.
    All,
}

/// Observe one frame seen on `ifindex` in `direction` (a `Direction` as u8), working in
/// `scratch`.
#[inline(always)]
pub fn observe<P: PacketView, F: Flows, T: Tables>(
    p: &P,
    flows: &mut F,
    t: &mut T,
    scratch: &mut Scratch,
    ifindex: u32,
    direction: u8,
) {
    let frame = t.parse(p, &mut scratch.point);
    let mirrored = scratch.point.key.encap != encap::NONE;
    // One count per frame, in its class (the total is their sum, Counter::fill_total).
    match frame {
        Frame::Roce {
            src_ip,
            dst_ip,
            pkt,
        } => {
            // The key is written before any helper call: values held across a call are spilled
            // to the stack one byte per 8-byte slot, which overflowed it.
            let key = &mut scratch.key;
            key.src_ip = src_ip;
            key.dst_ip = dst_ip;
            key.dst_qp = pkt.dst_qp;
            key.ifindex = ifindex;
            key.direction = direction;
            key.encap = scratch.point.key.encap;
            if mirrored {
                key.mirror_id = scratch.point.key.id;
                key.outer_src = scratch.point.key.outer_src;
            } else {
                key.mirror_id = 0;
                crate::headers::zero16(&mut key.outer_src);
            }
            t.count(Counter::RocePackets, direction);
            // The session first: its number is part of the flow's key in the kernel. Looked
            // up once per frame, here.
            scratch.flow_point = ifindex;
            if mirrored {
                match on_mirror(t, &mut scratch.point, ifindex, direction) {
                    Some(point) => scratch.flow_point = point,
                    // No room for the session: counted in `map_full`; the flow cannot be named.
                    None => return,
                }
            }
            scratch.pkt = pkt;
            on_roce(flows, t, scratch);
            return;
        }
        Frame::Pfc {
            src_mac,
            class_enable,
            body,
        } => {
            t.count(Counter::PfcFrames, direction);
            let now = on_pfc(t, ifindex, direction, src_mac, class_enable, &body);
            let lossless = t.lossless_config();
            if lossless.on {
                lossless_xoffs(
                    t,
                    &mut scratch.lossless,
                    &lossless,
                    ifindex,
                    direction,
                    class_enable,
                    &body,
                    now,
                );
            }
        }
        Frame::Pause { src_mac, quanta } => {
            t.count(Counter::Pause8023x, direction);
            on_pause(t, ifindex, direction, src_mac, quanta);
        }
        Frame::Other(class) => t.count(class, direction),
    }
    // Any other mirrored frame: its session is in scratch memory, so it is counted last, at
    // no stack cost.
    if mirrored {
        on_mirror(t, &mut scratch.point, ifindex, direction);
    }
}

/// One frame of a mirror session: counted, and its GRE sequence number checked for gaps.
/// Returns the session's number, or `None` (counted in `map_full`) when there is no room for
/// it.
#[inline(always)]
fn on_mirror<T: Tables>(
    t: &mut T,
    point: &mut MirrorPoint,
    ifindex: u32,
    direction: u8,
) -> Option<u32> {
    point.key.ifindex = ifindex;
    point.key.direction = direction;
    match t.mirror(&point.key) {
        Some(session) => {
            session.count(point.seq, point.seq_present != 0);
            Some(session.point)
        }
        None => {
            t.count(Counter::MapFull, direction);
            None
        }
    }
}

/// The kernel's scoreboard program: the rest of `observe` for a RoCE packet that the main
/// program parsed into `scratch` and handed over (`Tables::to_scoreboard`).
#[inline(always)]
pub fn observe_scoreboard<F: Flows, T: Tables>(flows: &mut F, t: &mut T, scratch: &mut Scratch) {
    on_roce(flows, t, scratch);
}

#[inline(always)]
fn on_roce<F: Flows, T: Tables>(flows: &mut F, t: &mut T, s: &mut Scratch) {
    let key = &s.key;
    let pkt = &s.pkt;
    // The packet time. Data packets, CNPs and NAKs take the precise clock: their activity
    // runs are cut at 1 ms gaps (run.rs), finer than the coarse clock's tick (4 ms at
    // HZ=250); the same reading then timestamps a request or an answer, so such a packet reads
    // one clock either way. ACKs take the coarse clock, and the precise one only for a sample
    // that is made (reading it costs ~15 ns more in a VM).
    let runs = t.runs();
    let data = runs && pkt.carries_data();
    let precise = runs && (data || pkt.is_signal());
    let now = if precise {
        t.precise_ns()
    } else {
        t.coarse_ns()
    };
    // Lossless class: in the kernel's main programs only, before a packet may be handed to
    // the scoreboard program (which then need not be verified with it), and before the flow
    // lookup (it needs no flow). The engine's lossless analysis takes every packet itself.
    if !T::SCOREBOARD {
        let lossless = t.lossless_config();
        let cnp = crate::opcode::transport(pkt.opcode) == crate::opcode::TRANSPORT_CNP;
        if lossless.on && (cnp || pkt.carries_data()) {
            lossless_packet(
                t,
                &mut s.lossless,
                &lossless,
                key,
                pkt,
                cnp,
                precise.then_some(now),
            );
        }
    }
    let stats = match flows.entry(key, s.flow_point) {
        Entry::Found(stats) => stats,
        // No event: user space finds a new flow on its next read of the flow table, so a
        // burst of new queue pairs sends nothing through the ring buffer.
        Entry::New(stats) => {
            stats.init(now);
            stats
        }
        Entry::Full => {
            t.count(Counter::MapFull, key.direction);
            return;
        }
    };
    let stage = t.stage();
    if stage == Stage::Lookup {
        return;
    }
    if !T::SCOREBOARD && crate::sequence::needs_scoreboard(stats, pkt) {
        t.to_scoreboard();
        t.count(Counter::TailCallFailed, key.direction);
        return;
    }
    if data {
        // The data run sits in the record's last cache line: start loading it now, in
        // parallel with the accounting's lines (account::touch).
        touch(&stats.run.end_ns);
    }
    let mut out = account(stats, pkt, t.pmtu(), t.reorder_window(), now, T::SCOREBOARD);
    // Anomalies are counted in the flow record, never sent one event each: in a go-back-N storm
    // every packet is a retransmission. Bursts are detected here, on the flow's own windows, so
    // that both sides raise the same alerts from the flow record (docs/metrics.md, "Events").
    let (limit, window_ns) = t.burst_rule();
    if matches!(out.psn, PsnVerdict::Retransmit { .. }) {
        out.retransmit_burst = stats.retransmit_bursts.add(now, limit, window_ns);
    }
    if out.nak {
        out.nak_burst = stats.nak_bursts.add(now, limit, window_ns);
    }
    // Activity runs for training steps (run.rs): data packets, and CNPs and NAKs apart.
    if data {
        data_run(t, key, stats, pkt, &out, now);
    } else if runs && (out.cnp || out.nak) {
        signal_run(t, key, stats, out.cnp, now);
    }
    if out.request {
        path_events(t, key, stats, pkt, &out, now);
    }
    t.accounted(key, pkt, &out);
    if stage == Stage::Account {
        return;
    }
    // A PSN sequence-error NAK says which request PSN the responder expected: the request
    // flow (this one's reverse, towards the peer QP learned from a latency match) judges it.
    // Rare, so the flow is looked up again afterwards rather than kept across the lookup.
    let stats = if T::SCOREBOARD && out.nak_seq {
        if let Some(peer) = stats.peer_qp() {
            on_nak(
                flows,
                t,
                key,
                &mut s.request_flow,
                s.flow_point,
                peer,
                pkt.psn,
                now,
            );
        }
        match flows.get(key, s.flow_point) {
            Some(stats) => stats,
            None => return,
        }
    } else {
        stats
    };

    // Latency (docs/metrics.md, "Latency"): timestamp requests that ask for an answer, match
    // answers to them.
    if pkt.wants_timestamp() {
        // Karn's rule: a retransmitted request is not timestamped (its answer could belong to
        // either transmission).
        if matches!(out.psn, PsnVerdict::Retransmit { .. }) {
            return;
        }
        let pending = &mut s.pending;
        pending.fill(key, key.src_ip, key.dst_ip, pkt.psn);
        let fingerprint = pending.fingerprint();
        let index = pending_set_index(fingerprint, pkt.psn, t.pending_sets());
        let value = PendingValue {
            // A request is a data packet: `now` is the precise clock already, unless runs
            // are off.
            ts_ns: if precise { now } else { t.precise_ns() },
            dst_qp: key.dst_qp,
            direction: key.direction,
            _pad: [0, 0, 0],
        };
        let Some(set) = t.pending_set(index) else {
            return;
        };
        if set.insert(fingerprint, pkt.psn, &value) == Stored::Evicted {
            t.count(Counter::PendingFull, key.direction);
        }
    } else if pkt.answers_request() {
        let pending = &mut s.pending;
        pending.fill(key, key.dst_ip, key.src_ip, pkt.psn);
        let fingerprint = pending.fingerprint();
        let index = pending_set_index(fingerprint, pkt.psn, t.pending_sets());
        let Some(request) = t
            .pending_set(index)
            .and_then(|set| set.take(fingerprint, pkt.psn))
        else {
            return;
        };
        // A READ response or a NAK has the precise time already; an ACK reads it here.
        let answered = if precise { now } else { t.precise_ns() };
        let rtt = answered.saturating_sub(request.ts_ns);
        // Seen at the same mirror source as the answer (the pending key includes it).
        let request_flow = &mut s.request_flow;
        *request_flow = *key;
        request_flow.src_ip = key.dst_ip;
        request_flow.dst_ip = key.src_ip;
        request_flow.dst_qp = request.dst_qp;
        request_flow.direction = request.direction;
        // The request flow's point: this one, unless the request was mirrored to the other
        // direction, which is another session. Kept in scratch memory, not a variable, as
        // `flow_point` is.
        s.request_point = s.flow_point;
        if request.direction != key.direction && key.encap != encap::NONE {
            s.point.key.direction = request.direction;
            s.request_point = t.session_point(&s.point.key).unwrap_or(NO_POINT);
            s.point.key.direction = key.direction;
        }
        // The request's destination QP is the responder's QP (this flow's peer); the answer's
        // destination QP is the requester's. Both flows learn it on their first match; later
        // matches of the same pair skip the second flow lookup (a cache miss per answer).
        if stats.peer_qp() != Some(request.dst_qp) {
            learn_peer(stats, request.dst_qp);
            if s.request_point != NO_POINT
                && let Some(request_stats) = flows.get(request_flow, s.request_point)
            {
                learn_peer(request_stats, pkt.dst_qp);
            }
        }
        if s.request_point != NO_POINT {
            t.latency_sample(request_flow, s.request_point, rtt, answered);
        }
    }
}

/// A data packet at `now`: the flow's data run takes it; the run it finishes (a gap above
/// `RUN_GAP_NS`) goes to the flow's batch of finished runs if long enough, else is counted in
/// the flow record. A batch that the run fills is sent as one record, copied from its map value
/// (no copy of the runs on the BPF stack): at most one record per
/// `RUN_BATCH * RUN_EVENT_MIN_PACKETS` data packets. The runs of a batch whose record is lost to
/// a full ring buffer, and a run whose flow finds no room for a batch (counted in `map_full`),
/// are counted in the flow record as short runs are, so that their bytes still reach the step
/// series (untimed) instead of vanishing.
#[inline(always)]
fn data_run<T: Tables>(
    t: &mut T,
    key: &FlowKey,
    stats: &mut FlowStats,
    pkt: &RocePacket,
    out: &Outcome,
    now: u64,
) {
    if stats.run.ends_before(now) {
        // Plain adds and stores, like the run itself (with sparse traffic this is every data
        // packet; two CPUs finishing a run of one flow at once may lose one update).
        let (runs, bytes) = if !stats.run.sent() {
            (1, stats.run.bytes)
        } else {
            match t.add_run(key, &stats.run) {
                RunAdded::Kept | RunAdded::Sent => (0, 0),
                RunAdded::Lost { bytes } => (RUN_BATCH as u64, bytes),
                RunAdded::NoRoom => {
                    t.count(Counter::MapFull, key.direction);
                    (1, stats.run.bytes)
                }
            }
        };
        stats.runs_unsent += runs;
        stats.run_bytes_unsent += bytes;
    }
    let retransmit = matches!(out.psn, PsnVerdict::Retransmit { .. });
    stats.run.add(now, pkt.frame_len, pkt.ecn == 3, retransmit);
}

/// A CNP (`cnp`) or NAK at `now`: the flow's signal run takes it; the run it finishes is sent.
/// Signals are rare next to data (a NIC sends a CNP per QP at most every few microseconds,
/// and one run holds all those less than 1 ms apart), so every signal run is sent.
#[inline(always)]
fn signal_run<T: Tables>(t: &mut T, key: &FlowKey, stats: &mut FlowStats, cnp: bool, now: u64) {
    if stats.signals.ends_before(now) {
        let run = &stats.signals;
        t.emit(key.direction, run.start_ns, |ev| {
            ev.set_signal_run(key, run)
        });
    }
    stats.signals.add(now, cnp);
}

/// Where was it lost (docs/metrics.md): a request gap is one event, and so is a finished resend
/// run (retransmitted requests, each newer than the last, on a flow that has had a gap; a gap
/// that finishes a run is one event with both), so that user space can tell per observation
/// point which PSNs it never saw. Never an event per
/// packet: a retransmission on a flow that never had a gap (a replayed or duplicated stream, a
/// timeout storm) and an in-order request cost one flag test each, and each flow sends at most
/// `PATH_EVENT_LIMIT` per window (the others are counted in `path_suppressed`, and the ones
/// lost to a full ring buffer in `path_lost`: either marks the flow's path view incomplete).
#[inline(always)]
fn path_events<T: Tables>(
    t: &mut T,
    key: &FlowKey,
    stats: &mut FlowStats,
    pkt: &RocePacket,
    out: &Outcome,
    now: u64,
) {
    let flags = stats.psn.flags;
    let retransmit = matches!(out.psn, PsnVerdict::Retransmit { .. });
    let psn = pkt.psn & PSN_MASK;
    if retransmit {
        if flags & REQ_GAPPED == 0 {
            return;
        }
        if flags & REQ_RESENDING != 0 && psn_newer(psn, stats.resend_last) {
            stats.resend_last = psn;
            return;
        }
    }
    // A new PSN (in order or after a gap), or a retransmission going back again (go-back-N
    // after another NAK or timeout), finishes the open resend run. (A retransmission has no
    // gap: `gap_missing` is 0.)
    let finished = flags & REQ_RESENDING != 0;
    let gap = out.gap_missing != 0;
    // One event, and one event site, for both (each inlined site costs the programs hundreds
    // of instructions). Sent before the run is restarted below and filled from the flow record
    // and the outcome in place: values carried across the ring-buffer helpers were spilled to
    // stack slots that the 5.10 verifier found unwritten on some path ("invalid read from
    // stack").
    if (finished || gap) && path_event_allowed(stats, now) {
        let record = &*stats;
        let sent = t.emit(key.direction, now, |ev| {
            ev.set_path(
                key,
                finished,
                (record.resend_first, record.resend_last),
                out.gap_first,
                out.gap_missing,
            )
        });
        if !sent {
            // An atomic add: every CPU that loses one of the flow's events counts it (a lost
            // gap must never leave the view looking complete).
            crate::atomic::add(&mut stats.path_lost, 1);
        }
    }
    if out.lost_split {
        // More PSNs were declared lost than one event carries: the view is incomplete.
        stats.path_suppressed += 1;
    }
    if retransmit {
        stats.psn.flags |= REQ_RESENDING;
        // A resend run that a later packet showed to have started earlier (its first copy
        // closed a hole and looked reordered) starts at the PSNs declared lost.
        stats.resend_first = if gap { out.gap_first } else { psn };
        stats.resend_last = psn;
    } else if finished || gap {
        stats.psn.flags &= !REQ_RESENDING;
    }
}

/// A PSN sequence-error NAK for request PSN `psn`, seen on flow `key` whose peer QP is `peer`:
/// the request flow is `key` reversed towards `peer`, at the same point, in the same direction
/// (a capture, a mirror) or, on a host's own interface, the other one (requests leave by TC
/// egress, NAKs come in by XDP ingress). What the NAK declares lost is a path event of the
/// request flow.
#[inline(always)]
#[expect(
    clippy::too_many_arguments,
    reason = "the scratch fields apart, for the borrows"
)]
fn on_nak<F: Flows, T: Tables>(
    flows: &mut F,
    t: &mut T,
    key: &FlowKey,
    request_flow: &mut FlowKey,
    point: u32,
    peer: u32,
    psn: u32,
    now: u64,
) {
    *request_flow = *key;
    request_flow.src_ip = key.dst_ip;
    request_flow.dst_ip = key.src_ip;
    request_flow.dst_qp = peer;
    if flows.get(request_flow, point).is_none() {
        if key.encap != encap::NONE || key.direction >= 2 {
            return;
        }
        request_flow.direction = key.direction ^ 1;
    }
    let Some(stats) = flows.get(request_flow, point) else {
        return;
    };
    let step = crate::sequence::nak(stats, psn);
    if step.lost_count == 0 {
        return;
    }
    if path_event_allowed(stats, now) {
        let record_flow = &*request_flow;
        let sent = t.emit(record_flow.direction, now, |ev| {
            ev.set_path(record_flow, false, (0, 0), step.lost_first, step.lost_count)
        });
        if !sent {
            crate::atomic::add(&mut stats.path_lost, 1);
        }
    }
}

/// Take one of the flow's path events in the window at `now`, or count it suppressed. Plain
/// adds: two CPUs on one flow may let one event more through.
#[inline(always)]
fn path_event_allowed(stats: &mut FlowStats, now: u64) -> bool {
    if stats.path_events == 0
        || now.saturating_sub(stats.path_window_ns) > crate::PATH_EVENT_WINDOW_NS
    {
        stats.path_window_ns = now;
        stats.path_events = 0;
    }
    if stats.path_events >= crate::PATH_EVENT_LIMIT {
        stats.path_suppressed += 1;
        return false;
    }
    stats.path_events += 1;
    true
}

/// The quanta of `slot` in a `Tables::pfc` call.
#[inline(always)]
pub fn slot_quanta(quanta: &[u16; 8], slot: usize) -> u16 {
    quanta[slot & 7]
}

/// One PFC frame: accounted and sent; returns its time.
#[inline(always)]
fn on_pfc<T: Tables>(
    t: &mut T,
    ifindex: u32,
    direction: u8,
    src_mac: [u8; 6],
    class_enable: u16,
    body: &PfcBody,
) -> u64 {
    // The precise clock: the pause timeline is built from these event times (microseconds
    // matter), and PFC frames are rare next to data packets.
    let now = t.precise_ns();
    let link = PfcLinkKey {
        ifindex,
        direction,
        _pad: 0,
        src_mac,
    };
    // Quanta of the enabled priorities only (no work for the others); 0 elsewhere. Built
    // element by element: a zeroed array first would be a call to the BPF object's byte-wise
    // memset.
    let quanta: [u16; 8] = core::array::from_fn(|prio| {
        if class_enable & (1 << prio) != 0 {
            body.quanta(prio)
        } else {
            0
        }
    });
    if !t.pfc(&link, class_enable & 0xff, &quanta, now) {
        t.count(Counter::MapFull, direction);
    }
    t.emit(direction, now, |ev| {
        ev.set_pfc(ifindex, direction, src_mac, class_enable, &quanta)
    });
    now
}

/// Lossless class: a CNP (`cnp`), or a data packet, on the flow `key`, at `now` (the precise
/// clock; read here when the caller has not, with runs off, and only for what needs a time). A
/// CNP is a congestion signal on the lossless priority; data counts toward its priority's load
/// and ECT count, and marked CE is a congestion signal there. Non-ECT data costs nothing unless
/// loads are kept, other ECT data a per-CPU count. A closed episode or marked interval is one
/// event.
#[inline(always)]
fn lossless_packet<T: Tables>(
    t: &mut T,
    lkey: &mut LosslessKey,
    cfg: &LosslessConfig,
    key: &FlowKey,
    pkt: &RocePacket,
    cnp: bool,
    now: Option<u64>,
) {
    if !cnp && pkt.ecn == 0 && !cfg.load {
        return;
    }
    lkey.ifindex = key.ifindex;
    lkey.priority = if cnp {
        cfg.pcp & 7
    } else {
        priority_of(pkt.pcp, pkt.dscp, cfg.dscp, cfg.pcp)
    };
    let ce = pkt.ecn == 3;
    if !cnp && !ce && !cfg.load {
        t.lossless_ect(lkey);
        return;
    }
    let now = match now {
        Some(now) => now,
        None => t.precise_ns(),
    };
    let Some(st) = t.lossless(lkey) else {
        t.count(Counter::MapFull, key.direction);
        return;
    };
    let direction = key.direction;
    let lkey = &*lkey;
    if cnp {
        crate::atomic::add(&mut st.cnp, 1);
        st.signal(now, false, now, |st| {
            t.emit(direction, st.ep_start, |ev| {
                ev.set_lossless_episode(lkey, st)
            })
        });
        return;
    }
    if pkt.ecn != 0 {
        crate::atomic::add(&mut st.ect_data, 1);
    }
    if ce {
        crate::atomic::add(&mut st.ce, 1);
        st.signal(now, false, now, |st| {
            t.emit(direction, st.ep_start, |ev| {
                ev.set_lossless_episode(lkey, st)
            })
        });
    }
    if cfg.load {
        let phase = cfg.phase_ns;
        st.load(now, phase, u64::from(pkt.frame_len), ce, |st| {
            let start = (st.load_slot - 1)
                .wrapping_mul(LOAD_INTERVAL_NS)
                .wrapping_sub(phase);
            t.emit(direction, start, |ev| ev.set_lossless_load(lkey, st))
        });
    }
}

/// Lossless class: the XOFFs of one PFC frame at `now`, a congestion signal each on its
/// priority until its pause ends (XONs are none).
#[inline(always)]
#[expect(
    clippy::too_many_arguments,
    reason = "the frame's fields apart, for the stack"
)]
fn lossless_xoffs<T: Tables>(
    t: &mut T,
    lkey: &mut LosslessKey,
    cfg: &LosslessConfig,
    ifindex: u32,
    direction: u8,
    class_enable: u16,
    body: &PfcBody,
    now: u64,
) {
    let mut prio = 0;
    while prio < 8 {
        let quanta = if class_enable & (1 << prio) != 0 {
            body.quanta(prio)
        } else {
            0
        };
        if quanta != 0 {
            lkey.ifindex = ifindex;
            lkey.priority = prio as u8;
            match t.lossless(lkey) {
                Some(st) => {
                    let until = now.saturating_add(pause_ns(quanta, cfg.link_kbps));
                    let k = &*lkey;
                    st.signal(now, true, until, |st| {
                        t.emit(direction, st.ep_start, |ev| ev.set_lossless_episode(k, st))
                    });
                }
                None => t.count(Counter::MapFull, direction),
            }
        }
        prio += 1;
    }
}

#[inline(always)]
fn on_pause<T: Tables>(t: &mut T, ifindex: u32, direction: u8, src_mac: [u8; 6], quanta: u16) {
    let link = PfcLinkKey {
        ifindex,
        direction,
        _pad: 0,
        src_mac,
    };
    // The precise clock: the pause timeline is built from these event times (microseconds
    // matter), and PFC frames are rare next to data packets.
    let now = t.precise_ns();
    let slot_quanta: [u16; 8] = core::array::from_fn(|i| if i == 0 { quanta } else { 0 });
    if !t.pfc(&link, 1 << SLOT_LINK, &slot_quanta, now) {
        t.count(Counter::MapFull, direction);
    }
    t.emit(direction, now, |ev| {
        ev.set_pause(ifindex, direction, src_mac, quanta)
    });
}
