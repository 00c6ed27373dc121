//! Ring-buffer records: rare events, never one per ordinary data packet. Counters stay exact
//! in the maps when the ring buffer is full; a lost event is counted in
//! `Counter::RingbufFull`.

use crate::{FlowKey, assert_size};

#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A flow entry was created.
    NewFlow = 1,
    /// `a` = expected PSN, `b` = PSN seen, `c` = missing PSNs, `d` = 0 request / 1 response.
    PsnGap = 2,
    /// `a` = highest PSN, `b` = PSN seen, `d` = 0 request / 1 response.
    PsnRetransmit = 3,
    /// `a` = PSN, `c` = AETH syndrome.
    Nak = 4,
    /// `a` = PSN of the CNP.
    Cnp = 5,
    /// PFC frame: `mac` = source, `c` = class-enable vector, `quanta` per priority.
    Pfc = 6,
    /// Legacy PAUSE: `mac` = source, `quanta[0]` = pause time.
    Pause = 7,
    /// Latency sample on `flow` (the request's flow): `a` = nanoseconds, `c` = peer QP.
    Latency = 8,
}

impl EventKind {
    pub const fn from_u32(v: u32) -> Option<EventKind> {
        Some(match v {
            1 => EventKind::NewFlow,
            2 => EventKind::PsnGap,
            3 => EventKind::PsnRetransmit,
            4 => EventKind::Nak,
            5 => EventKind::Cnp,
            6 => EventKind::Pfc,
            7 => EventKind::Pause,
            8 => EventKind::Latency,
            _ => return None,
        })
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Monotonic clock (kernel) or capture time, ns.
    pub ts_ns: u64,
    /// An [`EventKind`] as u32.
    pub kind: u32,
    pub flow: FlowKey,
    pub a: u64,
    pub b: u64,
    pub c: u32,
    pub d: u32,
    pub mac: [u8; 6],
    pub _pad: [u8; 2],
    pub quanta: [u16; 8],
}
assert_size!(Event, 104);

impl Event {
    pub const fn zeroed() -> Event {
        Event {
            ts_ns: 0,
            kind: 0,
            flow: FlowKey::zeroed(),
            a: 0,
            b: 0,
            c: 0,
            d: 0,
            mac: [0; 6],
            _pad: [0; 2],
            quanta: [0; 8],
        }
    }

    /// Decode a ring-buffer record: length-checked, unaligned read (never a transmute).
    pub fn from_bytes(buf: &[u8]) -> Option<Event> {
        if buf.len() < core::mem::size_of::<Event>() {
            return None;
        }
        // SAFETY: the length was checked above; Event is plain old data (integers only, no
        // padding), so every bit pattern is valid, and read_unaligned tolerates any alignment.
        Some(unsafe { core::ptr::read_unaligned(buf.as_ptr().cast::<Event>()) })
    }
}
