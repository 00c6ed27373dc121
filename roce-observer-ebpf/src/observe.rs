//! What happens to one frame: parse it with the shared parser, count its class, and update the
//! flow (per-packet accounting shared with `analyze`), PFC and latency state. Events go to the
//! ring buffer only for rare things (new flow, PSN anomaly, NAK, CNP, PFC, latency sample).

use aya_ebpf::helpers::{bpf_ktime_get_coarse_ns, bpf_ktime_get_ns};
use roce_observer_common::{
    Counter, Event, EventKind, FlowKey, FlowStats, PfcKey, PfcStats,
    account::{RocePacket, account, learn_peer},
    headers::PfcBody,
    latency::{PendingKey, PendingValue},
    parse::{Frame, PacketView, parse},
    pfc::PRIORITY_LINK,
    psn::PsnVerdict,
};

use crate::maps::{EVENTS, FLOWS, PENDING, PFC, ZERO_FLOW, count};

const BPF_NOEXIST: u64 = 1;

/// UDP destination port of RoCEv2; set by the loader.
#[unsafe(no_mangle)]
static ROCE_PORT: u16 = roce_observer_common::ROCE_V2_PORT;
/// Path MTU for READ PSN reservations; set by the loader.
#[unsafe(no_mangle)]
static PMTU: u32 = roce_observer_common::DEFAULT_PMTU;

#[inline(always)]
fn global<T: Copy>(v: &'static T) -> T {
    // SAFETY: a read of an initialised static; volatile so that the loader's override (made in
    // .rodata before load) is read instead of the compile-time constant.
    unsafe { core::ptr::read_volatile(v) }
}

#[inline(always)]
fn coarse_now() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_coarse_ns() }
}

#[inline(always)]
fn precise_now() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
pub fn observe<P: PacketView>(p: &P, ifindex: u32, direction: u8) {
    count(Counter::TotalPackets, direction);
    match parse(p, global(&ROCE_PORT)) {
        Frame::Roce {
            src_ip,
            dst_ip,
            pkt,
        } => {
            count(Counter::RocePackets, direction);
            let key = FlowKey {
                src_ip,
                dst_ip,
                dst_qp: pkt.dst_qp,
                ifindex,
                direction,
                _pad: [0; 3],
            };
            on_roce(&key, &pkt);
        }
        Frame::Pfc {
            src_mac,
            class_enable,
            body,
        } => {
            count(Counter::PfcFrames, direction);
            on_pfc(ifindex, direction, src_mac, class_enable, &body);
        }
        Frame::Pause { src_mac, quanta } => {
            count(Counter::Pause8023x, direction);
            on_pause(ifindex, direction, src_mac, quanta);
        }
        Frame::Other(class) => count(class, direction),
    }
}

/// Find or create the flow entry.
#[inline(always)]
fn flow_entry(key: &FlowKey, now: u64) -> Option<*mut FlowStats> {
    if let Some(stats) = FLOWS.get_ptr_mut(key) {
        return Some(stats);
    }
    let zero = ZERO_FLOW.get_ptr(0)?;
    // SAFETY: `zero` points at a live per-CPU array value of the right type.
    let inserted = FLOWS.insert(key, unsafe { &*zero }, BPF_NOEXIST);
    // Another CPU may have created it in between (EEXIST): then it is there to look up.
    let stats = FLOWS.get_ptr_mut(key);
    match stats {
        Some(s) => {
            if inserted.is_ok() {
                // SAFETY: a map value pointer from a successful lookup.
                unsafe { (*s).init(now) };
                emit(EventKind::NewFlow, key, 0, 0, 0, 0);
            }
            Some(s)
        }
        None => {
            count(Counter::MapFull, key.direction);
            None
        }
    }
}

#[inline(always)]
fn on_roce(key: &FlowKey, pkt: &RocePacket) {
    let now = coarse_now();
    let Some(stats) = flow_entry(key, now) else {
        return;
    };
    // SAFETY: a map value pointer from a successful lookup; the entry stays valid for the
    // program's run (hash map values are RCU-freed).
    let stats = unsafe { &mut *stats };
    let out = account(stats, pkt, global(&PMTU), now);
    let d = out.response as u32;
    match out.psn {
        PsnVerdict::InOrder => {}
        PsnVerdict::Gap {
            expected,
            got,
            missing,
        } => emit(
            EventKind::PsnGap,
            key,
            expected as u64,
            got as u64,
            missing,
            d,
        ),
        PsnVerdict::Retransmit { highest, got } => emit(
            EventKind::PsnRetransmit,
            key,
            highest as u64,
            got as u64,
            0,
            d,
        ),
    }
    if out.nak {
        emit(
            EventKind::Nak,
            key,
            pkt.psn as u64,
            0,
            pkt.syndrome as u32,
            0,
        );
    }
    if out.cnp {
        emit(EventKind::Cnp, key, pkt.psn as u64, 0, 0, 0);
    }
    // Karn's rule: a retransmitted request is not timestamped (its answer could belong to
    // either transmission).
    let retransmit = matches!(out.psn, PsnVerdict::Retransmit { .. });
    latency(key, stats, pkt, retransmit);
}

/// Timestamp requests that ask for an answer; match answers to them (docs/metrics.md).
#[inline(always)]
fn latency(key: &FlowKey, stats: &mut FlowStats, pkt: &RocePacket, retransmit: bool) {
    if pkt.wants_timestamp() {
        if retransmit {
            return;
        }
        let pending = PendingKey {
            requester: key.src_ip,
            responder: key.dst_ip,
            ifindex: key.ifindex,
            psn: pkt.psn,
        };
        let value = PendingValue {
            ts_ns: precise_now(),
            dst_qp: key.dst_qp,
            direction: key.direction,
            _pad: [0; 3],
        };
        // Insert-if-absent: a retransmitted request keeps its first timestamp.
        if let Err(err) = PENDING.insert(&pending, &value, BPF_NOEXIST) {
            if err != -17 {
                count(Counter::PendingFull, key.direction);
            }
        }
    } else if pkt.answers_request() {
        let pending = PendingKey {
            requester: key.dst_ip,
            responder: key.src_ip,
            ifindex: key.ifindex,
            psn: pkt.psn,
        };
        // SAFETY: the value is copied out before the entry is removed.
        let Some(request) = (unsafe { PENDING.get(&pending) }).copied() else {
            return;
        };
        if PENDING.remove(&pending).is_err() {
            // Another CPU took it first: that CPU reports the sample.
            return;
        }
        let rtt = precise_now().saturating_sub(request.ts_ns);
        let req_key = FlowKey {
            src_ip: key.dst_ip,
            dst_ip: key.src_ip,
            dst_qp: request.dst_qp,
            ifindex: key.ifindex,
            direction: request.direction,
            _pad: [0; 3],
        };
        learn_peer(stats, request.dst_qp);
        if let Some(req_stats) = FLOWS.get_ptr_mut(&req_key) {
            // SAFETY: a map value pointer from a successful lookup.
            learn_peer(unsafe { &mut *req_stats }, pkt.dst_qp);
        }
        emit(EventKind::Latency, &req_key, rtt, 0, pkt.dst_qp, 0);
    }
}

#[inline(always)]
fn pfc_account(key: &PfcKey, quanta: u16, now: u64) {
    let entry = match PFC.get_ptr_mut(key) {
        Some(e) => Some(e),
        None => {
            let _ = PFC.insert(key, &PfcStats::default(), BPF_NOEXIST);
            PFC.get_ptr_mut(key)
        }
    };
    match entry {
        // SAFETY: a map value pointer from a successful lookup.
        Some(e) => unsafe { (*e).account(quanta, now) },
        None => count(Counter::MapFull, key.direction),
    }
}

#[inline(always)]
fn on_pfc(ifindex: u32, direction: u8, src_mac: [u8; 6], class_enable: u16, body: &PfcBody) {
    let now = coarse_now();
    let mut key = PfcKey {
        ifindex,
        direction,
        priority: 0,
        src_mac,
    };
    let mut quanta = [0u16; 8];
    let mut prio = 0;
    while prio < 8 {
        if class_enable & (1 << prio) != 0 {
            key.priority = prio as u8;
            quanta[prio] = body.quanta(prio);
            pfc_account(&key, quanta[prio], now);
        }
        prio += 1;
    }
    emit_mac(
        EventKind::Pfc,
        ifindex,
        direction,
        src_mac,
        class_enable as u32,
        &quanta,
    );
}

#[inline(always)]
fn on_pause(ifindex: u32, direction: u8, src_mac: [u8; 6], quanta: u16) {
    let key = PfcKey {
        ifindex,
        direction,
        priority: PRIORITY_LINK,
        src_mac,
    };
    pfc_account(&key, quanta, coarse_now());
    let mut q = [0u16; 8];
    q[0] = quanta;
    emit_mac(EventKind::Pause, ifindex, direction, src_mac, 0, &q);
}

/// Reserve and fill one event in place (no 104-byte copy on the stack).
#[inline(always)]
fn reserve(
    kind: EventKind,
    direction: u8,
) -> Option<aya_ebpf::maps::ring_buf::RingBufEntry<Event>> {
    match EVENTS.reserve::<Event>(0) {
        Some(mut entry) => {
            let ev = entry.as_mut_ptr();
            // SAFETY: `ev` points at a reserved, writable ring-buffer slot of size_of::<Event>().
            unsafe {
                core::ptr::write_bytes(ev, 0, 1);
                (*ev).ts_ns = precise_now();
                (*ev).kind = kind as u32;
            }
            Some(entry)
        }
        None => {
            count(Counter::RingbufFull, direction);
            None
        }
    }
}

#[inline(always)]
fn emit(kind: EventKind, flow: &FlowKey, a: u64, b: u64, c: u32, d: u32) {
    if let Some(mut entry) = reserve(kind, flow.direction) {
        let ev = entry.as_mut_ptr();
        // SAFETY: as in `reserve`.
        unsafe {
            (*ev).flow = *flow;
            (*ev).a = a;
            (*ev).b = b;
            (*ev).c = c;
            (*ev).d = d;
        }
        entry.submit(0);
    }
}

#[inline(always)]
fn emit_mac(kind: EventKind, ifindex: u32, direction: u8, mac: [u8; 6], c: u32, quanta: &[u16; 8]) {
    if let Some(mut entry) = reserve(kind, direction) {
        let ev = entry.as_mut_ptr();
        // SAFETY: as in `reserve`.
        unsafe {
            (*ev).flow.ifindex = ifindex;
            (*ev).flow.direction = direction;
            (*ev).mac = mac;
            (*ev).c = c;
            (*ev).quanta = *quanta;
        }
        entry.submit(0);
    }
}
