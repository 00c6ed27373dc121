//! What happens to one frame: the shared parser and the shared per-packet observation
//! (roce-observer-common/src/observe.rs, which the engine runs on captured frames too), here on
//! the BPF maps of maps.rs. Counters and per-flow state go to maps; events go to the ring
//! buffer only for rare things (new flow, PFC, PAUSE, latency sample), without a wakeup each.

use aya_ebpf::helpers::{bpf_ktime_get_coarse_ns, bpf_ktime_get_ns};
use roce_observer_common::{
    Counter, Event, FlowKey, FlowStats, PfcKey, PfcStats,
    latency::{PendingKey, PendingValue},
    mirror::Ports,
    observe::{Entry, Flows, Stored, Tables},
    parse::{Frame, PacketView, parse_mirrored},
};

use crate::maps::{EVENTS, EVENTS_BYTES, FLOWS, PENDING, PFC, ZERO_FLOW, count};

const BPF_NOEXIST: u64 = 1;
const EEXIST: i32 = 17;

/// UDP destination port of RoCEv2; set by the loader.
#[unsafe(no_mangle)]
static ROCE_PORT: u16 = roce_observer_common::ROCE_V2_PORT;
/// UDP destination port of VXLAN mirrors; set by the loader.
#[unsafe(no_mangle)]
static VXLAN_PORT: u16 = roce_observer_common::headers::VXLAN_PORT;
/// Path MTU for READ PSN reservations; set by the loader.
#[unsafe(no_mangle)]
static PMTU: u32 = roce_observer_common::DEFAULT_PMTU;
/// Burst rule of the retransmission and NAK alerts; set by the loader.
#[unsafe(no_mangle)]
static BURST_COUNT: u32 = roce_observer_common::BURST_COUNT;
#[unsafe(no_mangle)]
static BURST_WINDOW_NS: u64 = roce_observer_common::BURST_WINDOW_NS;

/// `bpf_ringbuf_submit` flags and `bpf_ringbuf_query` selector (uapi/linux/bpf.h; 5.8).
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;
/// 0 on kernels without `bpf_ktime_get_coarse_ns` (before 5.11); set by the loader. A constant
/// in the frozen .rodata, so the verifier drops the branch not taken, helper call included.
#[unsafe(no_mangle)]
static COARSE_CLOCK: u8 = 1;

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

#[inline(always)]
pub fn observe<P: PacketView>(p: &P, ifindex: u32, direction: u8) {
    roce_observer_common::observe::observe(p, &mut FlowMap, &mut Maps, ifindex, direction);
}

/// The flow map `FLOWS`.
struct FlowMap;

impl Flows for FlowMap {
    #[inline(always)]
    fn entry(&mut self, key: &FlowKey) -> Entry<'_> {
        if let Some(stats) = FLOWS.get_ptr_mut(key) {
            // SAFETY: a map value pointer from a successful lookup; the entry stays valid for
            // the program's run (hash map values are RCU-freed).
            return Entry::Found(unsafe { &mut *stats });
        }
        let Some(zero) = ZERO_FLOW.get_ptr(0) else {
            return Entry::Full;
        };
        // SAFETY: `zero` points at a live per-CPU array value of the right type.
        let inserted = FLOWS.insert(key, unsafe { &*zero }, BPF_NOEXIST);
        // Another CPU may have created it in between (EEXIST): then it is there to look up.
        match FLOWS.get_ptr_mut(key) {
            // SAFETY (both arms): a map value pointer from a successful lookup, as above.
            Some(stats) if inserted.is_ok() => Entry::New(unsafe { &mut *stats }),
            Some(stats) => Entry::Found(unsafe { &mut *stats }),
            None => {
                crate::diag::flow_table_full(key);
                Entry::Full
            }
        }
    }

    #[inline(always)]
    fn get(&mut self, key: &FlowKey) -> Option<&mut FlowStats> {
        // SAFETY: a map value pointer from a successful lookup, as in `entry`.
        FLOWS.get_ptr_mut(key).map(|stats| unsafe { &mut *stats })
    }
}

/// The other maps, the clocks and the ring buffer.
struct Maps;

impl Tables for Maps {
    #[inline(always)]
    fn parse<P: PacketView>(&mut self, p: &P) -> Frame {
        let ports = Ports {
            roce: global(&ROCE_PORT),
            vxlan: global(&VXLAN_PORT),
        };
        let frame = parse_mirrored(p, ports);
        crate::diag::frame(&frame);
        frame
    }

    #[inline(always)]
    fn pmtu(&self) -> u32 {
        global(&PMTU)
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
    fn count(&mut self, counter: Counter, direction: u8) {
        count(counter, direction);
    }

    #[inline(always)]
    fn pending_insert(&mut self, key: &PendingKey, value: &PendingValue) -> Stored {
        match PENDING.insert(key, value, BPF_NOEXIST) {
            Ok(()) => Stored::Added,
            Err(err) if err == -EEXIST => Stored::Present,
            Err(_) => Stored::Full,
        }
    }

    #[inline(always)]
    fn pending_take(&mut self, key: &PendingKey) -> Option<PendingValue> {
        // SAFETY: the value is copied out before the entry is removed.
        let request = (unsafe { PENDING.get(key) }).copied()?;
        // Another CPU may have taken it first: then that CPU reports the sample.
        PENDING.remove(key).ok()?;
        Some(request)
    }

    #[inline(always)]
    fn pfc(&mut self, key: &PfcKey) -> Option<&mut PfcStats> {
        let entry = match PFC.get_ptr_mut(key) {
            Some(e) => Some(e),
            None => {
                let _ = PFC.insert(key, &PfcStats::default(), BPF_NOEXIST);
                PFC.get_ptr_mut(key)
            }
        };
        // SAFETY: a map value pointer from a successful lookup, valid for the program's run.
        entry.map(|e| unsafe { &mut *e })
    }

    /// Filled in place in the reserved ring-buffer slot. Submitted without waking the reader,
    /// which drains on its report tick; once the ring is half full the submit wakes it, so a
    /// burst of events is read early instead of lost. A wakeup per event cost microseconds
    /// (issue 12: a reader that keeps up is woken on every submit).
    #[inline(always)]
    fn emit(&mut self, direction: u8, fill: impl FnOnce(&mut Event)) {
        match EVENTS.reserve::<Event>(0) {
            Some(mut entry) => {
                let ev = entry.as_mut_ptr();
                // SAFETY: `ev` points at a reserved, writable ring-buffer slot of
                // size_of::<Event>(); zeroed first, so it is a valid Event before `fill`.
                unsafe {
                    core::ptr::write_bytes(ev, 0, 1);
                    (*ev).ts_ns = precise_now();
                    fill(&mut *ev);
                }
                let wake = if EVENTS.query(BPF_RB_AVAIL_DATA) >= EVENTS_BYTES / 2 {
                    BPF_RB_FORCE_WAKEUP
                } else {
                    BPF_RB_NO_WAKEUP
                };
                entry.submit(wake);
            }
            None => {
                count(Counter::RingbufFull, direction);
                crate::diag::ring_buffer_full();
            }
        }
    }
}
