//! The kernel's half of the lists of changed flows (roce-observer-common/src/changes.rs): every
//! flow entry the flow maps hand out (`FlowMap::entry`, `FlowMap::get` in observe.rs) is listed
//! once per epoch. Both programs of a packet go through them (the scoreboard program looks its
//! flow up again), and so does every other flow a packet changes (a NAK's or an answer's request
//! flow).
//!
//! Where a flow is handed out, its epoch is compared and, on its first packet of the epoch,
//! stored, and its key noted in this CPU's scratch memory ([`Pending`]); the keys noted are
//! appended to their lists once the frame is done ([`flush`], at the end of every program), at
//! one point where every path of the frame has joined. The verifier then walks the list code a
//! few times, not once for every state that reaches a flow lookup (the scoreboard program's
//! budget could not afford that).

use aya_ebpf::helpers::bpf_get_smp_processor_id;
use roce_observer_common::{
    FlowKey, FlowStats,
    changes::{self, write_listed},
    flow::FlowKey6,
};

use crate::maps::{CHANGE_EPOCH, CHANGE_HEADS, CHANGE_KEYS, FRAME_CHANGES, Pending};

/// Keys per list (`changes::capacity` of the flow table's size); set by the loader. Frozen
/// .rodata.
#[unsafe(no_mangle)]
static CHANGE_CAP: u32 = 64;

/// Note flow `key` at observation `point`, whose entry is `stats`, in `pending` unless it is
/// listed in the current epoch already: one load and one compare on all but a flow's first
/// packet of a tick.
#[inline(always)]
pub fn mark(stats: &mut FlowStats, key: &FlowKey, point: u32, pending: &mut Pending) {
    let Some(epoch) = CHANGE_EPOCH.get_ptr(0) else {
        return;
    };
    // SAFETY: an array value, valid for the program's run; user space writes it between ticks.
    let epoch = unsafe { *epoch };
    if stats.epoch == epoch {
        return;
    }
    // A plain store: two CPUs that both find the old epoch both list the flow (user space
    // reads each flow once).
    stats.epoch = epoch;
    let i = pending.count as usize & (FRAME_CHANGES - 1);
    write_listed(key, point, &mut pending.keys[i]);
    pending.epochs[i] = epoch;
    pending.count += 1;
}

/// Append the flows noted in `pending` to this CPU's lists; a flow that finds no room is
/// recorded as lost for its epoch (user space then reads the whole table).
#[inline(always)]
pub fn flush(pending: &mut Pending) {
    let n = pending.count;
    if n == 0 {
        return;
    }
    pending.count = 0;
    let mut i = 0;
    while i < FRAME_CHANGES {
        // More than FRAME_CHANGES (none of the frame's ways changes so many flows): some were
        // overwritten, so their epochs are read whole.
        if (i as u32) < n
            && (n > FRAME_CHANGES as u32 || !list(&pending.keys[i], pending.epochs[i]))
        {
            lost(pending.epochs[i]);
        }
        i += 1;
    }
}

/// Changes of `epoch` that were not listed: user space reads the whole table for it.
#[inline(always)]
fn lost(epoch: u32) {
    if let Some(lost) = CHANGE_EPOCH.get_ptr_mut(1 + changes::slot(epoch)) {
        // SAFETY: an array value, valid for the program's run.
        unsafe { *lost = epoch };
    }
}

/// Append `key` to this CPU's list for `epoch`, started afresh if it holds an older epoch;
/// false when it is full.
#[inline(always)]
fn list(key: &FlowKey6, epoch: u32) -> bool {
    // SAFETY: helper without arguments.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let l = changes::list(cpu, epoch);
    let Some(head) = CHANGE_HEADS.get_ptr_mut(l) else {
        return false;
    };
    // SAFETY: an array value, written only by this CPU (its own list), whose programs do not
    // interleave.
    let head = unsafe { &mut *head };
    if head.epoch != epoch {
        head.epoch = epoch;
        head.count = 0;
    }
    let n = head.count;
    // SAFETY: a read of an initialised static; volatile so that the loader's value in .rodata
    // is read instead of the compile-time constant.
    let cap = unsafe { core::ptr::read_volatile(&CHANGE_CAP) };
    if n >= cap {
        return false;
    }
    let Some(to) = CHANGE_KEYS.get_ptr_mut(l.wrapping_mul(cap).wrapping_add(n)) else {
        return false;
    };
    const WORDS: usize = core::mem::size_of::<FlowKey6>() / 4;
    let (to, from) = (to.cast::<u32>(), core::ptr::from_ref(key).cast::<u32>());
    let mut w = 0;
    while w < WORDS {
        // SAFETY: word w of two FlowKey6 (40 bytes, 4-byte aligned, no padding): an array
        // value of this CPU's list, and the scratch memory's key.
        unsafe { *to.add(w) = *from.add(w) };
        w += 1;
    }
    // After the key: user space reads a list's keys up to its count.
    head.count = n + 1;
    true
}
