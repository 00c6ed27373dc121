//! What happens to one frame: the shared parser and the shared per-packet observation
//! (roce-observer-common/src/observe.rs, which the engine runs on captured frames too), here on
//! the BPF maps of maps.rs. Counters and per-flow state (latency samples included, in a
//! histogram per request flow) go to maps; events go to the ring buffer only for rare things
//! (PFC, PAUSE, finished signal run, sixteen finished data runs, request gap or
//! finished resend run, the last two limited per flow), without a wakeup each.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_get_smp_processor_id, bpf_ktime_get_coarse_ns, bpf_ktime_get_ns, bpf_tail_call},
    maps::{HashMap, PerCpuArray, ProgramArray},
};
use roce_observer_common::{
    Counter, Event, FlowKey, FlowStats,
    flow::{Compact, FlowKey4, FlowKey6, POINT_MIRROR},
    latency::PendingSet,
    lossless::{LosslessKey, LosslessState},
    mirror::{MAX_MIRROR_SESSIONS, MirrorKey, MirrorPoint, MirrorStats, Ports},
    observe::{Entry, Flows, LosslessConfig, Stage, Tables, slot_quanta},
    parse::{Frame, PacketView, parse_mirrored},
    pfc::PfcLinkKey,
    run::{DataRun, RunAdded, RunBatch},
};

use crate::maps::Pending;
use crate::maps::{
    EVENTS, EVENTS_BYTES, FLOWS4, FLOWS6, LATENCY4, LATENCY6, LOSSLESS, LOSSLESS_ECT, MIRRORS, PFC,
    RUN_BATCHES, SCRATCH, SESSIONS, STAMPS, SessionCache, ZERO_BATCH, ZERO_FLOW, ZERO_LATENCY,
    ZERO_LOSSLESS, ZERO_PFC, count,
};

const BPF_NOEXIST: u64 = 1;

/// UDP destination port of RoCEv2; set by the loader.
#[unsafe(no_mangle)]
static ROCE_PORT: u16 = roce_observer_common::ROCE_V2_PORT;
/// UDP destination port of VXLAN mirrors; set by the loader.
#[unsafe(no_mangle)]
static VXLAN_PORT: u16 = roce_observer_common::headers::VXLAN_PORT;
/// Path MTU for READ PSN reservations; set by the loader.
#[unsafe(no_mangle)]
static PMTU: u32 = roce_observer_common::DEFAULT_PMTU;
/// Reorder window in PSNs (sequence.rs); set by the loader.
#[unsafe(no_mangle)]
static REORDER_WINDOW: u32 = roce_observer_common::sequence::DEFAULT_REORDER_WINDOW;
/// Burst rule of the retransmission and NAK alerts; set by the loader.
#[unsafe(no_mangle)]
static BURST_COUNT: u32 = roce_observer_common::BURST_COUNT;
#[unsafe(no_mangle)]
static BURST_WINDOW_NS: u64 = roce_observer_common::BURST_WINDOW_NS;
/// Latency samples above this count toward the `high_latency` alert (`LatencyHist::over`;
/// `u64::MAX`: no alert); set by the loader.
#[unsafe(no_mangle)]
static RTT_ALERT_NS: u64 = u64::MAX;

/// `bpf_ringbuf_submit` flags and `bpf_ringbuf_query` selector (uapi/linux/bpf.h; 5.8).
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;
/// Ring-buffer bytes of a record of `T`: an 8-byte record header, then `T` rounded up to 8.
const fn record_bytes<T>() -> u64 {
    8 + (core::mem::size_of::<T>() as u64).next_multiple_of(8)
}
/// 0 on kernels without `bpf_ktime_get_coarse_ns` (before 5.11); set by the loader. A constant
/// in the frozen .rodata, so the verifier drops the branch not taken, helper call included.
#[unsafe(no_mangle)]
static COARSE_CLOCK: u8 = 1;
/// Benchmarks only: how much of a RoCE packet's work to do (0 = all, 1 = flow lookup only,
/// 2 = no latency matching; `Tables::stage`); set by the loader. Frozen .rodata like
/// COARSE_CLOCK: with 0 the verifier drops the early exits.
#[unsafe(no_mangle)]
static STAGE: u8 = 0;
/// 0 with `run --no-steps`: no activity runs, and data packets read the coarse clock; set by
/// the loader. Frozen .rodata: the verifier drops the branch not taken.
#[unsafe(no_mangle)]
static RUNS: u8 = 1;

/// Lossless class (roce-observer-common/src/lossless.rs), set by the loader: LOSSLESS_ON 0
/// keeps no state (benchmarks); the lossless DSCP and PCP; LOSSLESS_LOAD 1 when loads are
/// judged (a link speed is known); the link speed in kb/s (pause ends); the monotonic clock's
/// offset from the epoch modulo the load interval. Frozen .rodata: with LOSSLESS_ON or
/// LOSSLESS_LOAD 0 the verifier drops that work.
#[unsafe(no_mangle)]
static LOSSLESS_ON: u8 = 1;
#[unsafe(no_mangle)]
static LOSSLESS_DSCP: u8 = 26;
#[unsafe(no_mangle)]
static LOSSLESS_PCP: u8 = 3;
#[unsafe(no_mangle)]
static LOSSLESS_LOAD: u8 = 0;
#[unsafe(no_mangle)]
static LINK_KBPS: u64 = 100_000_000;
#[unsafe(no_mangle)]
static LOAD_PHASE_NS: u64 = 0;

#[inline(always)]
fn global<T: Copy>(v: &'static T) -> T {
    // SAFETY: a read of an initialised static; volatile so that the loader's override (made in
    // .rodata before load) is read instead of the compile-time constant.
    unsafe { core::ptr::read_volatile(v) }
}

#[inline(always)]
fn precise_now() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// The main programs' observation of one frame. `ctx` is the program's context, and `slot` of
/// `programs` its scoreboard program, for the packets that need it.
#[inline(always)]
pub fn observe<P: PacketView>(
    p: &P,
    ctx: *mut c_void,
    programs: &'static ProgramArray,
    slot: u32,
    ifindex: u32,
    direction: u8,
) {
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        // A per-CPU array lookup of index 0 does not fail; the verifier wants the check.
        count(Counter::MapFull, direction);
        return;
    };
    // SAFETY: a per-CPU array value, valid and only used by this CPU for this program run.
    let scratch = unsafe { &mut *scratch };
    let mut flows = FlowMap {
        key4: &mut scratch.key4,
        key6: &mut scratch.key6,
        pending: &mut scratch.pending,
    };
    let mut maps = Maps::<false> {
        session: &mut scratch.session,
        lat4: &mut scratch.lat4,
        lat6: &mut scratch.lat6,
        ctx,
        programs: Some(programs),
        slot,
    };
    roce_observer_common::observe::observe(
        p,
        &mut flows,
        &mut maps,
        &mut scratch.shared,
        ifindex,
        direction,
    );
    crate::changes::flush(&mut scratch.pending);
}

/// The scoreboard programs' part: the packet the main program parsed into this CPU's scratch
/// memory (a tail call runs on the same CPU, with the scratch as it was left), from its flow
/// lookup on, with the PSN scoreboard.
#[inline(always)]
pub fn scoreboard() {
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: as in `observe`: this CPU's scratch, which the main program filled.
    let scratch = unsafe { &mut *scratch };
    let mut flows = FlowMap {
        key4: &mut scratch.key4,
        key6: &mut scratch.key6,
        pending: &mut scratch.pending,
    };
    let mut maps = Maps::<true> {
        session: &mut scratch.session,
        lat4: &mut scratch.lat4,
        lat6: &mut scratch.lat6,
        ctx: core::ptr::null_mut(),
        programs: None,
        slot: 0,
    };
    roce_observer_common::observe::observe_scoreboard(&mut flows, &mut maps, &mut scratch.shared);
    // The main program's flow too: its tail call did not return to flush it.
    crate::changes::flush(&mut scratch.pending);
}

/// The flow maps `FLOWS4` and `FLOWS6`, keyed by the compact keys built in scratch memory;
/// `pending` notes the flows handed out that are to be listed as changed (changes.rs).
struct FlowMap<'a> {
    key4: &'a mut FlowKey4,
    key6: &'a mut FlowKey6,
    pending: &'a mut Pending,
}

impl Flows for FlowMap<'_> {
    /// The entry, listed as changed in this epoch (changes.rs): the packet changes it.
    #[inline(always)]
    fn entry(&mut self, key: &FlowKey, point: u32) -> Entry<'_> {
        let mut entry = match key.compact(point, self.key4, self.key6) {
            Compact::V4 => entry_in(&FLOWS4, self.key4, key),
            Compact::V6 => entry_in(&FLOWS6, self.key6, key),
        };
        if let Entry::Found(stats) | Entry::New(stats) = &mut entry {
            crate::changes::mark(stats, key, point, self.pending);
        }
        entry
    }

    /// The entry, listed as `entry`'s: the packet may change it (a request flow learns its
    /// peer, a NAK's request flow its losses).
    #[inline(always)]
    fn get(&mut self, key: &FlowKey, point: u32) -> Option<&mut FlowStats> {
        let stats = match key.compact(point, self.key4, self.key6) {
            Compact::V4 => FLOWS4.get_ptr_mut(&*self.key4),
            Compact::V6 => FLOWS6.get_ptr_mut(&*self.key6),
        }?;
        // SAFETY: a map value pointer from a successful lookup, as in `entry_in`.
        let stats = unsafe { &mut *stats };
        crate::changes::mark(stats, key, point, self.pending);
        Some(stats)
    }
}

/// The entry of compact key `k` (of flow `key`) in `map`, inserted when absent.
#[inline(always)]
fn entry_in<K>(map: &'static HashMap<K, FlowStats>, k: &K, key: &FlowKey) -> Entry<'static> {
    if let Some(stats) = map.get_ptr_mut(k) {
        // SAFETY: a map value pointer from a successful lookup; the entry stays valid for
        // the program's run (hash map values are RCU-freed).
        return Entry::Found(unsafe { &mut *stats });
    }
    let Some(zero) = ZERO_FLOW.get_ptr(0) else {
        return Entry::Full;
    };
    // SAFETY: `zero` points at a live per-CPU array value of the right type.
    // By reference: a value would be an 848-byte copy on the 512-byte BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let inserted = map.insert(k, unsafe { &*zero }, BPF_NOEXIST);
    // Another CPU may have created it in between (EEXIST): then it is there to look up.
    match map.get_ptr_mut(k) {
        // SAFETY (both arms): a map value pointer from a successful lookup, as above.
        Some(stats) if inserted.is_ok() => Entry::New(unsafe { &mut *stats }),
        Some(stats) => Entry::Found(unsafe { &mut *stats }),
        None => {
            crate::diag::flow_table_full(key);
            Entry::Full
        }
    }
}

/// The other maps, the clocks and the ring buffer; `session` is this CPU's last mirror session,
/// `lat4` and `lat6` the compact keys of a latency sample's request flow (scratch memory).
/// `SCOREBOARD`: the scoreboard program (`Tables::SCOREBOARD`); the main programs hand their
/// out-of-order packets to it through `ctx` and `slot`.
struct Maps<'a, const SCOREBOARD: bool> {
    session: &'a mut SessionCache,
    lat4: &'a mut FlowKey4,
    lat6: &'a mut FlowKey6,
    ctx: *mut c_void,
    programs: Option<&'static ProgramArray>,
    slot: u32,
}

/// The value of `k` in `map`, made from `zero` (an all-zero value) when absent; `None` when the
/// map has no room. (A latency histogram, a lossless entry, a batch of finished runs.)
#[inline(always)]
fn value_in<K, V>(
    map: &'static HashMap<K, V>,
    zero: &'static PerCpuArray<V>,
    k: &K,
) -> Option<&'static mut V> {
    if let Some(v) = map.get_ptr_mut(k) {
        // SAFETY: a map value pointer from a successful lookup, valid for the program's run.
        return Some(unsafe { &mut *v });
    }
    let zero = zero.get_ptr(0)?;
    // SAFETY: `zero` points at a live per-CPU array value of the right type. By reference: a
    // value would be a copy on the BPF stack (432 bytes for a histogram, 768 for a batch). Another CPU may make
    // it in between (EEXIST): then it is there to look up.
    #[allow(clippy::needless_borrows_for_generic_args)]
    let _ = map.insert(k, unsafe { &*zero }, BPF_NOEXIST);
    // SAFETY: as above.
    map.get_ptr_mut(k).map(|v| unsafe { &mut *v })
}

/// Whether two mirror keys are equal, compared as eleven 32-bit words.
#[inline(always)]
fn same_key(a: &MirrorKey, b: &MirrorKey) -> bool {
    const WORDS: usize = core::mem::size_of::<MirrorKey>() / 4;
    let (a, b) = (
        core::ptr::from_ref(a).cast::<u32>(),
        core::ptr::from_ref(b).cast::<u32>(),
    );
    let mut i = 0;
    while i < WORDS {
        // SAFETY: word i of two live MirrorKeys (44 bytes, 4-byte aligned, no padding).
        if unsafe { *a.add(i) != *b.add(i) } {
            return false;
        }
        i += 1;
    }
    true
}

/// `*to = *from`, word by word (a struct copy would be a call to the byte-wise memcpy).
#[inline(always)]
fn copy_key(to: &mut MirrorKey, from: &MirrorKey) {
    const WORDS: usize = core::mem::size_of::<MirrorKey>() / 4;
    let (to, from) = (
        core::ptr::from_mut(to).cast::<u32>(),
        core::ptr::from_ref(from).cast::<u32>(),
    );
    let mut i = 0;
    while i < WORDS {
        // SAFETY: word i of two live MirrorKeys, as in `same_key`; `to` is writable.
        unsafe { *to.add(i) = *from.add(i) };
        i += 1;
    }
}

/// Put the SESSIONS slot of the session `key` in `cache.slot`, made when absent (see
/// SESSIONS); false when MIRRORS or this CPU's range of slots has no room. The slot is kept in
/// the cache's map memory throughout, not in a variable: values held across helper calls are
/// spilled to the stack, and on some paths the 5.10 verifier then saw them read unwritten.
#[inline(always)]
fn session_slot(cache: &mut SessionCache, key: &MirrorKey) -> bool {
    // SAFETY: the value is read at once, during the program's run.
    if let Some(slot) = unsafe { MIRRORS.get(key) } {
        cache.slot = *slot;
        return true;
    }
    // SAFETY: helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    cache.slot = cpu
        .wrapping_mul(MAX_MIRROR_SESSIONS)
        .wrapping_add(cache.made);
    let Some(stats) = SESSIONS.get_ptr_mut(cache.slot) else {
        return false;
    };
    // SAFETY: an array value pointer from a successful lookup; the slot is in this CPU's
    // range and not yet any session's, so nothing else writes it.
    unsafe { (*stats).point = POINT_MIRROR | cache.slot };
    if MIRRORS.insert(key, &cache.slot, BPF_NOEXIST).is_ok() {
        cache.made += 1;
        return true;
    }
    // Another CPU made it in between (EEXIST): its slot; or MIRRORS is full.
    // SAFETY: as above.
    match unsafe { MIRRORS.get(key) } {
        Some(slot) => {
            cache.slot = *slot;
            true
        }
        None => false,
    }
}

impl<const SCOREBOARD: bool> Tables for Maps<'_, SCOREBOARD> {
    const SCOREBOARD: bool = SCOREBOARD;

    #[inline(always)]
    fn to_scoreboard(&mut self) {
        let Some(programs) = self.programs else {
            return;
        };
        // SAFETY: `ctx` is the running program's context; `programs` a program array. On
        // success the helper does not return.
        unsafe {
            bpf_tail_call(
                self.ctx,
                core::ptr::from_ref(programs).cast_mut().cast(),
                self.slot,
            );
        }
    }

    #[inline(always)]
    fn parse<P: PacketView>(&mut self, p: &P, point: &mut MirrorPoint) -> Frame {
        let ports = Ports {
            roce: global(&ROCE_PORT),
            vxlan: global(&VXLAN_PORT),
        };
        let frame = parse_mirrored(p, ports, point);
        crate::diag::frame(&frame);
        frame
    }

    #[inline(always)]
    fn pmtu(&self) -> u32 {
        global(&PMTU)
    }

    #[inline(always)]
    fn reorder_window(&self) -> u32 {
        global(&REORDER_WINDOW)
    }

    #[inline(always)]
    fn burst_rule(&self) -> (u32, u64) {
        (global(&BURST_COUNT), global(&BURST_WINDOW_NS))
    }

    #[inline(always)]
    fn coarse_ns(&self) -> u64 {
        if global(&COARSE_CLOCK) == 0 {
            return precise_now();
        }
        // SAFETY: helper without arguments.
        unsafe { bpf_ktime_get_coarse_ns() }
    }

    #[inline(always)]
    fn precise_ns(&self) -> u64 {
        precise_now()
    }

    #[inline(always)]
    fn stage(&self) -> Stage {
        match global(&STAGE) {
            1 => Stage::Lookup,
            2 => Stage::Account,
            _ => Stage::All,
        }
    }

    #[inline(always)]
    fn runs(&self) -> bool {
        global(&RUNS) != 0
    }

    #[inline(always)]
    fn count(&mut self, counter: Counter, direction: u8) {
        count(counter, direction);
    }

    #[inline(always)]
    fn lossless_config(&self) -> LosslessConfig {
        LosslessConfig {
            on: global(&LOSSLESS_ON) != 0,
            dscp: global(&LOSSLESS_DSCP),
            pcp: global(&LOSSLESS_PCP),
            load: global(&LOSSLESS_LOAD) != 0,
            link_kbps: global(&LINK_KBPS),
            phase_ns: global(&LOAD_PHASE_NS),
        }
    }

    #[inline(always)]
    fn lossless(&mut self, key: &LosslessKey) -> Option<&'static mut LosslessState> {
        value_in(&LOSSLESS, &ZERO_LOSSLESS, key)
    }

    /// Counted in this CPU's cache; its count for the last key goes to that key's entry
    /// first when the key changes (an atomic add: another CPU may add to it too).
    #[inline(always)]
    fn lossless_ect(&mut self, key: &LosslessKey) {
        let Some(cache) = LOSSLESS_ECT.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: a per-CPU array value, only used by this CPU during this program run.
        let cache = unsafe { &mut *cache };
        if cache.key.ifindex != key.ifindex || cache.key.priority != key.priority {
            if cache.pending != 0 {
                match value_in(&LOSSLESS, &ZERO_LOSSLESS, &cache.key) {
                    Some(st) => roce_observer_common::atomic::add(&mut st.ect_data, cache.pending),
                    None => count(Counter::MapFull, 0),
                }
            }
            cache.key.ifindex = key.ifindex;
            cache.key.priority = key.priority;
            cache.pending = 0;
        }
        cache.pending += 1;
    }

    #[inline(always)]
    fn pending_set(&mut self, index: u32) -> Option<&mut PendingSet> {
        // SAFETY: an element of a shared array; other CPUs may write it at the same time
        // (PendingSet::take says what that can do).
        STAMPS.get_ptr_mut(index).map(|set| unsafe { &mut *set })
    }

    #[inline(always)]
    fn latency_sample(&mut self, flow: &FlowKey, point: u32, rtt_ns: u64, now: u64) {
        let hist = match flow.compact(point, self.lat4, self.lat6) {
            Compact::V4 => value_in(&LATENCY4, &ZERO_LATENCY, self.lat4),
            Compact::V6 => value_in(&LATENCY6, &ZERO_LATENCY, self.lat6),
        };
        match hist {
            Some(hist) => hist.add(rtt_ns, global(&RTT_ALERT_NS), now),
            None => count(Counter::MapFull, flow.direction),
        }
    }

    #[inline(always)]
    fn pfc(&mut self, link: &PfcLinkKey, slots: u16, quanta: &[u16; 8], now: u64) -> bool {
        let entry = match PFC.get_ptr_mut(link) {
            Some(e) => e,
            None => {
                let Some(zero) = ZERO_PFC.get_ptr(0) else {
                    return false;
                };
                // SAFETY: `zero` points at a live per-CPU array value of the right type.
                // By reference: a value would be a 360-byte copy on the BPF stack.
                #[allow(clippy::needless_borrows_for_generic_args)]
                let _ = PFC.insert(link, unsafe { &*zero }, BPF_NOEXIST);
                match PFC.get_ptr_mut(link) {
                    Some(e) => e,
                    None => return false,
                }
            }
        };
        // SAFETY: a map value pointer from a successful lookup, valid for the program's run.
        let entry = unsafe { &mut *entry };
        let mut slot = 0;
        while slot < entry.slots.len() {
            if slots & (1 << slot) != 0 {
                entry.slots[slot].account(slot_quanta(quanta, slot), now);
            }
            slot += 1;
        }
        true
    }

    /// This CPU's last session when it is `key`'s (no hash lookup: a monitor host's receive
    /// queue usually carries one session or a few), else MIRRORS, then the cache holds `key`.
    #[inline(always)]
    fn mirror(&mut self, key: &MirrorKey) -> Option<&mut MirrorStats> {
        let cache = &mut *self.session;
        if cache.valid == 0 || !same_key(&cache.key, key) {
            // The slot is rewritten before the key: invalid until both match.
            cache.valid = 0;
            if !session_slot(cache, key) {
                return None;
            }
            copy_key(&mut cache.key, key);
            cache.valid = 1;
        }
        // SAFETY: an array value pointer from a successful lookup, valid for the program's
        // run (array values are never freed while the map lives).
        SESSIONS.get_ptr_mut(cache.slot).map(|e| unsafe { &mut *e })
    }

    #[inline(always)]
    fn session_point(&mut self, key: &MirrorKey) -> Option<u32> {
        // SAFETY: the value is read at once, during the program's run.
        (unsafe { MIRRORS.get(key) }).map(|slot| POINT_MIRROR | *slot)
    }

    /// Filled in place in the reserved ring-buffer slot. Submitted without waking the reader,
    /// which drains on its report tick; the submit that fills the ring past half wakes it, so
    /// a burst of events is read early instead of lost. A wakeup per event cost microseconds
    /// (a reader that keeps up is woken on every submit).
    #[inline(always)]
    fn emit(&mut self, direction: u8, ts_ns: u64, fill: impl FnOnce(&mut Event)) -> bool {
        match EVENTS.reserve::<Event>(0) {
            Some(mut entry) => {
                let ev = entry.as_mut_ptr();
                // SAFETY: `ev` points at a reserved, writable ring-buffer slot of
                // size_of::<Event>(), 8-byte aligned; zeroed first, so it is a valid Event
                // before `fill`.
                unsafe {
                    zero_words(ev);
                    (*ev).ts_ns = ts_ns;
                    fill(&mut *ev);
                }
                // Only the event that takes the ring past half wakes the reader: past half,
                // a wakeup per event is an interrupt per event (irq_work, a self-IPI; a VM
                // exit in a guest), which made a burst of PFC frames cost microseconds each.
                let avail = EVENTS.query(BPF_RB_AVAIL_DATA);
                let half = EVENTS_BYTES / 2;
                let wake = if (half..half + record_bytes::<Event>()).contains(&avail) {
                    BPF_RB_FORCE_WAKEUP
                } else {
                    BPF_RB_NO_WAKEUP
                };
                entry.submit(wake);
                true
            }
            None => {
                count(Counter::RingbufFull, direction);
                crate::diag::ring_buffer_full();
                false
            }
        }
    }

    /// The record of a full batch is copied from the map value by the kernel
    /// (`bpf_ringbuf_output`): no stores of this program's own, which the verifier would walk
    /// once per state that reaches this path.
    #[inline(always)]
    fn add_run(&mut self, key: &FlowKey, run: &DataRun) -> RunAdded {
        let Some(batch) = value_in(&RUN_BATCHES, &ZERO_BATCH, key) else {
            return RunAdded::NoRoom;
        };
        batch.add(key, run, |batch| emit_runs(key.direction, batch))
    }
}

/// Send the full batch `batch` as one record for a packet seen in `direction`; false when the
/// ring buffer is full (counted in `ringbuf_full`). Woken as `Tables::emit` wakes: the record
/// that takes the ring past half (checked before the copy here).
#[inline(always)]
fn emit_runs(direction: u8, batch: &RunBatch) -> bool {
    let avail = EVENTS.query(BPF_RB_AVAIL_DATA);
    let half = EVENTS_BYTES / 2;
    let rec = record_bytes::<RunBatch>();
    let wake = if (half.saturating_sub(rec)..half).contains(&avail) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    if EVENTS.output::<RunBatch>(batch, wake).is_ok() {
        return true;
    }
    count(Counter::RingbufFull, direction);
    crate::diag::ring_buffer_full();
    false
}

/// Zero `*p` with 8-byte stores. `core::ptr::write_bytes` becomes a call to the BPF object's
/// `memset`, which stores one byte per loop iteration (five instructions a byte: 520 for an
/// event); volatile stores stay stores, unrolled.
///
/// # Safety
/// `p` is valid for writes of `T` and 8-byte aligned.
#[inline(always)]
unsafe fn zero_words<T>(p: *mut T) {
    const { assert!(core::mem::size_of::<T>().is_multiple_of(8) && core::mem::align_of::<T>() >= 8) };
    let words = p.cast::<u64>();
    let mut i = 0;
    while i < core::mem::size_of::<T>() / 8 {
        // SAFETY: word i of *p, within it (the caller's contract).
        unsafe { core::ptr::write_volatile(words.add(i), 0) };
        i += 1;
    }
}
