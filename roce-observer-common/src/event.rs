//! Ring-buffer records: rare events (a PFC or PAUSE frame, a finished signal run,
//! sixteen finished data runs of a flow (run.rs, `RunBatch`: an event with the runs after it),
//! a request PSN gap or the resend run after one, rate-limited per flow), never one per
//! data packet, per anomaly nor per latency sample (those are kept in a per-flow histogram,
//! latency.rs). Counters stay exact
//! in the maps when the ring buffer is full; a lost event is counted in
//! `Counter::RingbufFull`.

use crate::{
    FlowKey, assert_size,
    lossless::{LosslessKey, LosslessState},
    run::SignalRun,
};

#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    // 1 was one event per flow entry created: user space finds new flows on its read of the
    // flow table, so a burst of new queue pairs costs no event each. The number stays unused.
    // 2-5 were one event per PSN gap, retransmission, NAK and CNP: those are counted (and
    // their bursts detected) in the flow record only, so that a loss storm costs no event per
    // packet (docs/metrics.md, "Events"). The numbers stay unused.
    /// PFC frame: `mac` = source, `c` = class-enable vector, `quanta` per priority.
    Pfc = 6,
    /// Legacy PAUSE: `mac` = source, `quanta[0]` = pause time.
    Pause = 7,
    // 8 was one event per latency sample: samples are kept per flow in the kernel
    // (`latency::LatencyHist`) and read on the report tick. The number stays unused.
    /// The head of a `run::RunBatch` record: finished data runs of `flow` (run.rs), the first
    /// starting at the event time; `c` = the first run's number, `d` = how many runs follow
    /// the head in the record (`a` = the run number after them, `b` = their bytes).
    DataRun = 9,
    /// A finished signal run of `flow` starting at the event time: `a` = duration (ns),
    /// `c` = CNPs, `d` = NAKs.
    SignalRun = 10,
    /// Where was it lost (observe.rs, `path_events`), what one request packet of `flow` did: a
    /// gap in its request PSNs, `c` = the first missing PSN, `d` = how many are missing (0: no
    /// gap); and/or it finished a resend run (retransmitted requests, each newer than the last,
    /// after the flow had a gap), `a` = bit 32 set and the run's first PSN, `b` = its last. One
    /// kind for both, so that the programs have one event site for them.
    Path = 11,
    /// Lossless class (lossless.rs): a closed congestion episode of point `flow.ifindex` and
    /// priority `c`, starting at the event time: `a` = its first CE mark or CNP, `b` = its
    /// first XOFF (0: none), `quanta[0..4]` = its last signal or pause end (16 bits each,
    /// low first).
    LosslessEpisode = 12,
    /// Lossless class: a closed load interval with CE marks of point `flow.ifindex` and
    /// priority `c`, starting at the event time: `a` = data bytes, `b` = CE-marked packets.
    LosslessLoad = 13,
}

/// `Event::a` of a [`EventKind::Path`] event: a finished resend run is in `a` and `b`.
pub const PATH_RESEND: u64 = 1 << 32;

impl EventKind {
    /// Every kind, in the order of [`EventKind::index`].
    pub const ALL: [EventKind; 7] = [
        EventKind::Pfc,
        EventKind::Pause,
        EventKind::DataRun,
        EventKind::SignalRun,
        EventKind::Path,
        EventKind::LosslessEpisode,
        EventKind::LosslessLoad,
    ];

    /// Position in [`EventKind::ALL`] (dense, for per-kind counts).
    pub const fn index(self) -> usize {
        match self {
            EventKind::Pfc => 0,
            EventKind::Pause => 1,
            EventKind::DataRun => 2,
            EventKind::SignalRun => 3,
            EventKind::Path => 4,
            EventKind::LosslessEpisode => 5,
            EventKind::LosslessLoad => 6,
        }
    }

    /// The kind's name in reports (`summary.events_by_kind`, docs/metrics.md).
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Pfc => "pfc",
            EventKind::Pause => "pause",
            EventKind::DataRun => "data_run",
            EventKind::SignalRun => "signal_run",
            EventKind::Path => "path",
            EventKind::LosslessEpisode => "lossless_episode",
            EventKind::LosslessLoad => "lossless_load",
        }
    }

    pub const fn from_u32(v: u32) -> Option<EventKind> {
        Some(match v {
            6 => EventKind::Pfc,
            7 => EventKind::Pause,
            9 => EventKind::DataRun,
            10 => EventKind::SignalRun,
            11 => EventKind::Path,
            12 => EventKind::LosslessEpisode,
            13 => EventKind::LosslessLoad,
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
    pub _pad0: u32,
    pub flow: FlowKey,
    pub a: u64,
    pub b: u64,
    pub c: u32,
    pub d: u32,
    pub mac: [u8; 6],
    pub _pad: [u8; 2],
    pub quanta: [u16; 8],
}
assert_size!(Event, 128);

/// An event's payload, decoded by kind (see [`Event::body`]). User-side view only: the record
/// itself stays plain integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventBody {
    /// One PFC frame; `quanta[p]` is meaningful for the priorities enabled in `class_enable`.
    Pfc {
        src_mac: [u8; 6],
        class_enable: u16,
        quanta: [u16; 8],
    },
    Pause {
        src_mac: [u8; 6],
        quanta: u16,
    },
    /// Finished data runs of the event's flow, numbered `first..first + count`; the runs
    /// themselves follow the head in the record (`run::RunBatch`).
    DataRuns {
        first: u32,
        count: u32,
    },
    /// A finished run of CNPs and NAKs on the event's flow, from the event time.
    SignalRun {
        duration_ns: u64,
        cnp: u32,
        naks: u32,
    },
    /// On the event's flow, a request packet finished the resend run `resend` (first and last
    /// PSN, by serial order), and/or skipped `gap.1` request PSNs from `gap.0` on.
    Path {
        resend: Option<(u32, u32)>,
        gap: Option<(u32, u32)>,
    },
    /// A closed congestion episode of point `ifindex` and `priority` from the event time (its
    /// first signal) to `last`; its first CE mark or CNP and first XOFF (`None`: none).
    LosslessEpisode {
        ifindex: u32,
        priority: u8,
        last: u64,
        first_mark: Option<u64>,
        first_xoff: Option<u64>,
    },
    /// A closed load interval with CE marks, from the event time.
    LosslessLoad {
        ifindex: u32,
        priority: u8,
        bytes: u64,
        ce: u64,
    },
}

impl Event {
    pub const fn zeroed() -> Event {
        Event {
            ts_ns: 0,
            kind: 0,
            _pad0: 0,
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

    /// Make this (all-zero) record a flow event.
    #[inline(always)]
    fn set_flow(&mut self, kind: EventKind, flow: &FlowKey, a: u64, b: u64, c: u32, d: u32) {
        self.kind = kind as u32;
        self.flow = *flow;
        self.a = a;
        self.b = b;
        self.c = c;
        self.d = d;
    }

    /// Make this (all-zero) record a MAC-control event: of the flow, only the interface and
    /// direction are set.
    #[inline(always)]
    fn set_link(&mut self, kind: EventKind, ifindex: u32, direction: u8, mac: [u8; 6], c: u32) {
        self.kind = kind as u32;
        self.flow.ifindex = ifindex;
        self.flow.direction = direction;
        self.mac = mac;
        self.c = c;
    }

    // In-place writers, for a record that is all zero but for `ts_ns`: the kernel fills its
    // ring-buffer slot with these, so no 128-byte `Event` is built on the 512-byte BPF stack
    // (the TC program already uses 424 bytes of it).

    /// A finished signal run of `flow` (event time: `run.start_ns`).
    #[inline(always)]
    pub fn set_signal_run(&mut self, flow: &FlowKey, run: &SignalRun) {
        self.set_flow(
            EventKind::SignalRun,
            flow,
            run.end_ns.saturating_sub(run.start_ns),
            0,
            run.cnp,
            run.naks,
        );
    }

    /// A path event of `flow`: a finished resend run `run` (`resend`: there is one; first and
    /// last PSN) and a gap of `gap_missing` PSNs from `gap_first` (0 missing: none).
    #[inline(always)]
    pub fn set_path(
        &mut self,
        flow: &FlowKey,
        resend: bool,
        run: (u32, u32),
        gap_first: u32,
        gap_missing: u32,
    ) {
        let a = if resend {
            PATH_RESEND | run.0 as u64
        } else {
            0
        };
        self.set_flow(
            EventKind::Path,
            flow,
            a,
            run.1 as u64,
            gap_first,
            gap_missing,
        );
    }

    #[inline(always)]
    pub fn set_pfc(
        &mut self,
        ifindex: u32,
        direction: u8,
        src_mac: [u8; 6],
        class_enable: u16,
        quanta: &[u16; 8],
    ) {
        self.set_link(
            EventKind::Pfc,
            ifindex,
            direction,
            src_mac,
            class_enable as u32,
        );
        self.quanta = *quanta;
    }

    #[inline(always)]
    pub fn set_pause(&mut self, ifindex: u32, direction: u8, src_mac: [u8; 6], quanta: u16) {
        self.set_link(EventKind::Pause, ifindex, direction, src_mac, 0);
        self.quanta[0] = quanta;
    }

    /// A closed congestion episode of `key` (the caller sets the event time to its start).
    /// Read field by field from the state (in the kernel, the map's value).
    #[inline(always)]
    pub fn set_lossless_episode(&mut self, key: &LosslessKey, st: &LosslessState) {
        self.kind = EventKind::LosslessEpisode as u32;
        self.flow.ifindex = key.ifindex;
        self.c = key.priority as u32;
        self.a = st.ep_first_mark;
        self.b = st.ep_first_xoff;
        self.set_episode_last(st.ep_last);
    }

    /// A lossless episode's last signal, in `quanta[0..4]`.
    #[inline(always)]
    fn set_episode_last(&mut self, last: u64) {
        self.quanta[0] = last as u16;
        self.quanta[1] = (last >> 16) as u16;
        self.quanta[2] = (last >> 32) as u16;
        self.quanta[3] = (last >> 48) as u16;
    }

    const fn episode_last(&self) -> u64 {
        let q = &self.quanta;
        q[0] as u64 | (q[1] as u64) << 16 | (q[2] as u64) << 32 | (q[3] as u64) << 48
    }

    /// A closed load interval of `key` with CE marks (the caller sets the event time to its
    /// start).
    #[inline(always)]
    pub fn set_lossless_load(&mut self, key: &LosslessKey, st: &LosslessState) {
        self.kind = EventKind::LosslessLoad as u32;
        self.flow.ifindex = key.ifindex;
        self.c = key.priority as u32;
        self.a = st.load_bytes;
        self.b = st.load_ce;
    }

    /// User space: a lossless episode's kernel times (besides `ts_ns`) plus `offset`, as
    /// `ts_ns` is shifted (0 stays none); other kinds are left as they are.
    pub fn lossless_to_epoch(&mut self, offset: u64) {
        if self.kind != EventKind::LosslessEpisode as u32 {
            return;
        }
        for t in [&mut self.a, &mut self.b] {
            if *t != 0 {
                *t = t.saturating_add(offset);
            }
        }
        self.set_episode_last(self.episode_last().saturating_add(offset));
    }

    // The same as values (user space, tests); `ts_ns` is 0, see [`Event::at`].

    pub fn signal_run(flow: &FlowKey, run: &SignalRun) -> Event {
        Event::filled(|e| e.set_signal_run(flow, run)).at(run.start_ns)
    }

    pub fn path(flow: &FlowKey, resend: Option<(u32, u32)>, gap: Option<(u32, u32)>) -> Event {
        let (g0, g1) = gap.unwrap_or((0, 0));
        Event::filled(|e| e.set_path(flow, resend.is_some(), resend.unwrap_or((0, 0)), g0, g1))
    }

    pub fn pfc(
        ifindex: u32,
        direction: u8,
        src_mac: [u8; 6],
        class_enable: u16,
        quanta: [u16; 8],
    ) -> Event {
        Event::filled(|e| e.set_pfc(ifindex, direction, src_mac, class_enable, &quanta))
    }

    pub fn pause(ifindex: u32, direction: u8, src_mac: [u8; 6], quanta: u16) -> Event {
        Event::filled(|e| e.set_pause(ifindex, direction, src_mac, quanta))
    }

    /// An all-zero record filled by `fill` (one of the `set_*` writers).
    pub fn filled(fill: impl FnOnce(&mut Event)) -> Event {
        let mut ev = Event::zeroed();
        fill(&mut ev);
        ev
    }

    /// This event at `ts_ns`.
    #[inline(always)]
    pub const fn at(mut self, ts_ns: u64) -> Event {
        self.ts_ns = ts_ns;
        self
    }

    pub const fn kind(&self) -> Option<EventKind> {
        EventKind::from_u32(self.kind)
    }

    /// The payload by kind, or `None` for an unknown kind (a newer kernel program).
    pub const fn body(&self) -> Option<EventBody> {
        let Some(kind) = self.kind() else {
            return None;
        };
        Some(match kind {
            EventKind::Pfc => EventBody::Pfc {
                src_mac: self.mac,
                class_enable: self.c as u16,
                quanta: self.quanta,
            },
            EventKind::Pause => EventBody::Pause {
                src_mac: self.mac,
                quanta: self.quanta[0],
            },
            EventKind::DataRun => EventBody::DataRuns {
                first: self.c,
                count: self.d,
            },
            EventKind::SignalRun => EventBody::SignalRun {
                duration_ns: self.a,
                cnp: self.c,
                naks: self.d,
            },
            EventKind::Path => EventBody::Path {
                resend: if self.a & PATH_RESEND != 0 {
                    Some((self.a as u32, self.b as u32))
                } else {
                    None
                },
                gap: if self.d != 0 {
                    Some((self.c, self.d))
                } else {
                    None
                },
            },
            EventKind::LosslessEpisode => EventBody::LosslessEpisode {
                ifindex: self.flow.ifindex,
                priority: self.c as u8,
                last: self.episode_last(),
                first_mark: if self.a != 0 { Some(self.a) } else { None },
                first_xoff: if self.b != 0 { Some(self.b) } else { None },
            },
            EventKind::LosslessLoad => EventBody::LosslessLoad {
                ifindex: self.flow.ifindex,
                priority: self.c as u8,
                bytes: self.a,
                ce: self.b,
            },
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_index_is_its_place_in_all_and_round_trips() {
        for (i, kind) in EventKind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), i);
            assert_eq!(EventKind::from_u32(kind as u32), Some(kind));
        }
        for (i, a) in EventKind::ALL.iter().enumerate() {
            for b in &EventKind::ALL[i + 1..] {
                assert_ne!(a.name(), b.name());
            }
        }
    }

    #[test]
    fn constructors_round_trip_through_body() {
        let flow = FlowKey {
            dst_qp: 0x11,
            ifindex: 3,
            direction: 1,
            encap: crate::mirror::encap::ERSPAN2,
            mirror_id: 7,
            outer_src: [9; 16],
            ..FlowKey::zeroed()
        };
        let mac = [2, 0, 0, 0, 0, 1];
        let mut quanta = [0u16; 8];
        quanta[3] = 0xffff;
        let signals = SignalRun {
            start_ns: 100,
            end_ns: 900,
            cnp: 4,
            naks: 1,
        };
        let cases = [
            (
                Event::pfc(3, 1, mac, 1 << 3, quanta),
                EventBody::Pfc {
                    src_mac: mac,
                    class_enable: 1 << 3,
                    quanta,
                },
            ),
            (
                Event::pause(3, 1, mac, 77),
                EventBody::Pause {
                    src_mac: mac,
                    quanta: 77,
                },
            ),
            (
                Event {
                    kind: EventKind::DataRun as u32,
                    c: 0xffff_fff0,
                    d: 16,
                    ..Event::signal_run(&flow, &signals)
                },
                EventBody::DataRuns {
                    first: 0xffff_fff0,
                    count: 16,
                },
            ),
            (
                Event::signal_run(&flow, &signals),
                EventBody::SignalRun {
                    duration_ns: 800,
                    cnp: 4,
                    naks: 1,
                },
            ),
            (
                Event::path(&flow, None, Some((0xff_fffe, 3))),
                EventBody::Path {
                    resend: None,
                    gap: Some((0xff_fffe, 3)),
                },
            ),
            (
                Event::path(&flow, Some((0, 9)), None),
                EventBody::Path {
                    resend: Some((0, 9)),
                    gap: None,
                },
            ),
            (
                Event::path(&flow, Some((7, 9)), Some((12, 1))),
                EventBody::Path {
                    resend: Some((7, 9)),
                    gap: Some((12, 1)),
                },
            ),
        ];
        for (ev, body) in cases {
            assert_eq!(ev.body(), Some(body));
            let bytes = layout_bytes(&ev);
            assert_eq!(Event::from_bytes(&bytes), Some(ev));
        }
        // Run events carry their start as the event time.
        assert_eq!(Event::signal_run(&flow, &signals).ts_ns, 100);
        let link = Event::pause(3, 1, mac, 77);
        assert_eq!((link.flow.ifindex, link.flow.direction), (3, 1));
        assert_eq!(Event::signal_run(&flow, &signals).at(42).ts_ns, 42);
        let unknown = Event {
            kind: 99,
            ..Event::zeroed()
        };
        assert_eq!(unknown.body(), None);
    }

    /// A run record written byte by byte at the offsets user space reads (pins the layout of
    /// the two run kinds' heads independently of the struct; run.rs pins the runs after it).
    #[test]
    fn run_records_decode_from_their_byte_layout() {
        let mut b = [0u8; 128];
        b[0..8].copy_from_slice(&5_000u64.to_ne_bytes());
        b[8..12].copy_from_slice(&9u32.to_ne_bytes());
        b[48..52].copy_from_slice(&0x11u32.to_ne_bytes());
        b[80..88].copy_from_slice(&1_234_567u64.to_ne_bytes());
        b[88..96].copy_from_slice(&(1u64 << 33).to_ne_bytes());
        b[96..100].copy_from_slice(&7u32.to_ne_bytes());
        b[100..104].copy_from_slice(&2u32.to_ne_bytes());
        b[112..114].copy_from_slice(&0x0001u16.to_ne_bytes());
        b[114..116].copy_from_slice(&0x0002u16.to_ne_bytes());
        let ev = Event::from_bytes(&b).expect("128 bytes");
        assert_eq!((ev.ts_ns, ev.flow.dst_qp), (5_000, 0x11));
        assert_eq!(ev.body(), Some(EventBody::DataRuns { first: 7, count: 2 }));
        b[8..12].copy_from_slice(&10u32.to_ne_bytes());
        assert_eq!(
            Event::from_bytes(&b).and_then(|e| e.body()),
            Some(EventBody::SignalRun {
                duration_ns: 1_234_567,
                cnp: 7,
                naks: 2,
            })
        );
    }

    /// The record's bytes in the kernel's layout, built field by field.
    fn layout_bytes(ev: &Event) -> [u8; 128] {
        let mut b = [0u8; 128];
        b[0..8].copy_from_slice(&ev.ts_ns.to_ne_bytes());
        b[8..12].copy_from_slice(&ev.kind.to_ne_bytes());
        b[16..32].copy_from_slice(&ev.flow.src_ip);
        b[32..48].copy_from_slice(&ev.flow.dst_ip);
        b[48..52].copy_from_slice(&ev.flow.dst_qp.to_ne_bytes());
        b[52..56].copy_from_slice(&ev.flow.ifindex.to_ne_bytes());
        b[56] = ev.flow.direction;
        b[57] = ev.flow.encap;
        b[60..64].copy_from_slice(&ev.flow.mirror_id.to_ne_bytes());
        b[64..80].copy_from_slice(&ev.flow.outer_src);
        b[80..88].copy_from_slice(&ev.a.to_ne_bytes());
        b[88..96].copy_from_slice(&ev.b.to_ne_bytes());
        b[96..100].copy_from_slice(&ev.c.to_ne_bytes());
        b[100..104].copy_from_slice(&ev.d.to_ne_bytes());
        b[104..110].copy_from_slice(&ev.mac);
        for (i, q) in ev.quanta.iter().enumerate() {
            b[112 + 2 * i..114 + 2 * i].copy_from_slice(&q.to_ne_bytes());
        }
        b
    }

    #[test]
    fn lossless_records_round_trip_through_body() {
        let key = LosslessKey {
            ifindex: 4,
            priority: 5,
            _pad: [0; 3],
        };
        let st = LosslessState {
            ep_start: 10,
            ep_last: 0x0123_4567_89ab_cdef,
            ep_first_mark: 0,
            ep_first_xoff: 10,
            load_bytes: 2_500,
            load_ce: 3,
            ..LosslessState::zeroed()
        };
        let ep = Event::filled(|e| e.set_lossless_episode(&key, &st)).at(10);
        let body = EventBody::LosslessEpisode {
            ifindex: 4,
            priority: 5,
            last: 0x0123_4567_89ab_cdef,
            first_mark: None,
            first_xoff: Some(10),
        };
        assert_eq!(ep.body(), Some(body));
        assert_eq!(Event::from_bytes(&layout_bytes(&ep)), Some(ep));
        let load = Event::filled(|e| e.set_lossless_load(&key, &st));
        let body = EventBody::LosslessLoad {
            ifindex: 4,
            priority: 5,
            bytes: 2_500,
            ce: 3,
        };
        assert_eq!(load.body(), Some(body));
    }
}
