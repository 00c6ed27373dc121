//! Kernel-side diagnostics on rare paths, through aya-log (`run --kernel-log`): the flow table
//! full, the ring buffer full, and a frame of a header combination seen for the first time on a
//! CPU (roce-observer-common/src/frame_kind.rs).
//!
//! Off unless the loader sets `KERNEL_LOG`: a constant in the frozen .rodata (like
//! COARSE_CLOCK), so with it 0 the verifier proves every function below returns at once and
//! drops their code; the loader also sets aya-log's own `AYA_LOG_LEVEL` to 0 then. On, the
//! common path pays one per-CPU array lookup and a bit test per frame; the rare paths log the
//! 1st, 2nd, 4th, 8th, ... occurrence per CPU, so a full table cannot flood the log.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use aya_log_ebpf::{info, warn};
use roce_observer_common::{FlowKey, frame_kind, parse::Frame};

/// 1: log; set by the loader (`KernelOptions::kernel_log`).
#[unsafe(no_mangle)]
static KERNEL_LOG: u8 = 0;

/// Per CPU: the bitmap of frame kinds seen, then how often the flow table and the ring buffer
/// were found full.
#[map]
static DIAG: PerCpuArray<u64> = PerCpuArray::with_max_entries(3, 0);
const KINDS_SEEN: u32 = 0;
const TABLE_FULL: u32 = 1;
const RING_FULL: u32 = 2;

#[inline(always)]
fn on() -> bool {
    // SAFETY: a read of an initialised static; volatile so that the loader's value in .rodata
    // is read instead of the compile-time constant.
    unsafe { core::ptr::read_volatile(&KERNEL_LOG) != 0 }
}

/// One more occurrence in `slot` on this CPU: its number when it is a power of two.
#[inline(always)]
fn due(slot: u32) -> Option<u64> {
    let n = DIAG.get_ptr_mut(slot)?;
    // SAFETY: a per-CPU array value: valid, aligned, written by this CPU only.
    let n = unsafe {
        *n += 1;
        *n
    };
    (n & (n - 1) == 0).then_some(n)
}

/// Every parsed frame: log the first of its kind on this CPU.
#[inline(always)]
pub fn frame(frame: &Frame) {
    if !on() {
        return;
    }
    let kind = frame_kind::kind(frame);
    let Some(seen) = DIAG.get_ptr_mut(KINDS_SEEN) else {
        return;
    };
    let bit = 1u64 << (kind % frame_kind::KINDS);
    // SAFETY: as in `due`.
    unsafe {
        if *seen & bit != 0 {
            return;
        }
        *seen |= bit;
    }
    info!((), target: "frame_kind", "{}", kind);
}

/// A new flow could not be inserted: FLOWS is full.
#[inline(always)]
pub fn flow_table_full(key: &FlowKey) {
    if !on() {
        return;
    }
    if let Some(n) = due(TABLE_FULL) {
        warn!(
            (),
            "flow table full: {:i} -> {:i} QP {} not tracked (occurrence {} on this CPU; raise --max-flows)",
            key.src_ip,
            key.dst_ip,
            key.dst_qp,
            n
        );
    }
}

/// An event could not be reserved: EVENTS is full (the reader is behind).
#[inline(always)]
pub fn ring_buffer_full() {
    if !on() {
        return;
    }
    if let Some(n) = due(RING_FULL) {
        warn!(
            (),
            "event ring buffer full: event lost, counters exact (occurrence {} on this CPU)", n
        );
    }
}
