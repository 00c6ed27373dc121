//! Kernel-side diagnostics on rare paths, through aya-log (`run --kernel-log`): the flow table
//! full, the ring buffer full, and a frame of a header combination seen for the first time on a
//! CPU (roce-observer-common/src/frame_kind.rs).
//!
//! Off unless the loader sets `KERNEL_LOG`: a constant in the frozen .rodata (like
//! COARSE_CLOCK), so with it 0 the verifier proves every function below returns at once and
//! drops their code; the loader also sets aya-log's own `AYA_LOG_LEVEL` to 0 then. On, the
//! common path pays one per-CPU array lookup and a bit test per frame; the rare paths log the
//! 1st, 2nd, 4th, 8th, ... occurrence per CPU, so a full table cannot flood the log.
//!
//! Where a rare thing happens, it is only noted (per-CPU slots); the program's entry logs what
//! was noted once the frame is done ([`flush`]). The logging code then sits at one point where
//! every path of the frame has joined, instead of inside the parser and the flow lookup, where
//! the verifier would walk it once per parse path: that exceeded 5.10's complexity limit.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use aya_log_ebpf::{info, warn};
use roce_observer_common::{FlowKey, frame_kind, parse::Frame};

/// 1: log; set by the loader (`KernelOptions::kernel_log`).
#[unsafe(no_mangle)]
static KERNEL_LOG: u8 = 0;

/// Per CPU: the bitmap of frame kinds seen; how often the flow table and the ring buffer were
/// found full; and what the frame being processed noted for [`flush`] (a kind + 1, an
/// occurrence of each full table; 0: nothing).
#[map]
static DIAG: PerCpuArray<u64> = PerCpuArray::with_max_entries(6, 0);
const KINDS_SEEN: u32 = 0;
const TABLE_FULL: u32 = 1;
const RING_FULL: u32 = 2;
const NOTED_KIND: u32 = 3;
const NOTED_TABLE_FULL: u32 = 4;
const NOTED_RING_FULL: u32 = 5;

/// Per CPU: the flow that did not fit, for [`flush`].
#[map]
static DIAG_FLOW: PerCpuArray<FlowKey> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn on() -> bool {
    // SAFETY: a read of an initialised static; volatile so that the loader's value in .rodata
    // is read instead of the compile-time constant.
    unsafe { core::ptr::read_volatile(&KERNEL_LOG) != 0 }
}

#[inline(always)]
fn slot(i: u32) -> Option<&'static mut u64> {
    // SAFETY: a per-CPU array value: valid, aligned, used by this CPU only, and only for the
    // frame being processed (programs are not preempted on their CPU).
    DIAG.get_ptr_mut(i).map(|p| unsafe { &mut *p })
}

/// One more occurrence counted in `count`; noted in `noted` when it is the 1st, 2nd, 4th, ...
#[inline(always)]
fn count_and_note(count: u32, noted: u32) -> bool {
    let Some(n) = slot(count) else {
        return false;
    };
    *n += 1;
    let n = *n;
    if n & (n - 1) != 0 {
        return false;
    }
    if let Some(note) = slot(noted) {
        *note = n;
    }
    true
}

/// Every parsed frame: note the first of its kind on this CPU.
#[inline(always)]
pub fn frame(frame: &Frame) {
    if !on() {
        return;
    }
    let kind = frame_kind::kind(frame) % frame_kind::KINDS;
    let (Some(seen), Some(noted)) = (slot(KINDS_SEEN), slot(NOTED_KIND)) else {
        return;
    };
    let bit = 1u64 << kind;
    if *seen & bit == 0 {
        *seen |= bit;
        *noted = u64::from(kind) + 1;
    }
}

/// A new flow could not be inserted: its flow map (FLOWS4 or FLOWS6) is full.
#[inline(always)]
pub fn flow_table_full(key: &FlowKey) {
    if on()
        && count_and_note(TABLE_FULL, NOTED_TABLE_FULL)
        && let Some(k) = DIAG_FLOW.get_ptr_mut(0)
    {
        // SAFETY: a per-CPU array value of the right type, as in `slot`.
        unsafe { *k = *key };
    }
}

/// An event could not be reserved: EVENTS is full (the reader is behind).
#[inline(always)]
pub fn ring_buffer_full() {
    if on() {
        count_and_note(RING_FULL, NOTED_RING_FULL);
    }
}

/// At the end of each frame, in the program's entry: log what the frame noted.
#[inline(always)]
pub fn flush() {
    if !on() {
        return;
    }
    if let Some(noted) = slot(NOTED_KIND)
        && *noted != 0
    {
        let kind = *noted - 1;
        *noted = 0;
        info!((), target: "frame_kind", "{}", kind);
    }
    if let Some(noted) = slot(NOTED_TABLE_FULL)
        && *noted != 0
    {
        let n = *noted;
        *noted = 0;
        if let Some(k) = DIAG_FLOW.get_ptr(0) {
            // SAFETY: as in `flow_table_full`.
            let k = unsafe { &*k };
            warn!(
                (),
                "flow table full: {:i} -> {:i} QP {} not tracked (occurrence {} on this CPU; raise --max-flows)",
                k.src_ip,
                k.dst_ip,
                k.dst_qp,
                n
            );
        }
    }
    if let Some(noted) = slot(NOTED_RING_FULL)
        && *noted != 0
    {
        let n = *noted;
        *noted = 0;
        warn!(
            (),
            "event ring buffer full: event lost, counters exact (occurrence {} on this CPU)", n
        );
    }
}
