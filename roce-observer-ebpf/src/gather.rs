//! Copying the flows a report tick reads out in one syscall per `GATHER` flows
//! (roce-observer-common/src/changes.rs, "gather"): user space writes the listed keys to
//! `GATHER_KEYS` and their number to `GATHER_FOUND[0]`, then runs this program once with
//! BPF_PROG_TEST_RUN; it copies each flow's entry to `GATHER_FLOWS` and marks it found in
//! `GATHER_FOUND`, all read back through shared mappings. A single lookup syscall per flow
//! cost about 1.8 us in a VM, most of a tick's read.

use roce_observer_common::{
    FlowStats,
    changes::{GATHER, Listed, listed_flow},
    flow::FlowKey4,
};

use crate::maps::{FLOWS4, FLOWS6, GATHER_FLOWS, GATHER_FOUND, GATHER_KEYS};

/// Copy the entries of the keys in `GATHER_KEYS[..GATHER_FOUND[0]]`.
#[inline(always)]
pub fn gather() {
    let Some(n) = GATHER_FOUND.get_ptr(0) else {
        return;
    };
    // SAFETY: an array value, written by user space before the run.
    let n = unsafe { *n };
    let mut i = 0;
    while i < GATHER {
        if i >= n {
            return;
        }
        copy_one(i);
        i += 1;
    }
}

#[inline(always)]
fn copy_one(i: u32) {
    let (Some(key), Some(found), Some(to)) = (
        GATHER_KEYS.get_ptr(i),
        GATHER_FOUND.get_ptr_mut(1 + i),
        GATHER_FLOWS.get_ptr_mut(i),
    ) else {
        return;
    };
    // SAFETY: array values, valid for the program's run; only user space writes the keys.
    let (key, found) = unsafe { (&*key, &mut *found) };
    let from = match listed_flow(key) {
        Listed::V4(k4) => {
            let k4: FlowKey4 = k4;
            FLOWS4.get_ptr(&k4)
        }
        Listed::V6(_) => FLOWS6.get_ptr(key),
    };
    let Some(from) = from else {
        *found = 0;
        return;
    };
    const WORDS: usize = core::mem::size_of::<FlowStats>() / 8;
    let (to, from) = (to.cast::<u64>(), from.cast::<u64>());
    let mut w = 0;
    while w < WORDS {
        // SAFETY: word w of two FlowStats (848 bytes, 8-byte aligned map values).
        unsafe { core::ptr::write_volatile(to.add(w), core::ptr::read_volatile(from.add(w))) };
        w += 1;
    }
    *found = 1;
}
