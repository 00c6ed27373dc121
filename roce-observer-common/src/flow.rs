//! Flow key and per-flow statistics: the value type of the kernel's flow map and of the
//! user-space flow table alike.

use crate::{
    MAX_SPORTS, assert_size,
    opcode::{self, PsnSpace},
    psn::PsnState,
    run::{DataRun, SignalRun},
};

/// Where a packet was observed.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// XDP on the interface's receive path.
    Ingress = 0,
    /// TC clsact egress.
    Egress = 1,
    /// Read from a capture file or stream.
    Capture = 2,
}

impl Direction {
    pub const fn from_u8(v: u8) -> Direction {
        match v {
            0 => Direction::Ingress,
            1 => Direction::Egress,
            _ => Direction::Capture,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
            Direction::Capture => "capture",
        }
    }
}

/// (source IP, destination IP, destination QP) at one observation point: the attach point
/// (interface, direction) and, for a frame unwrapped from a switch mirror, the mirror source
/// (encapsulation, outer source address, ERSPAN session ID / VNI / GRE key), so that the same
/// flow mirrored by two switches is two records. The mirror fields are zero for frames that
/// were not mirrored. IPv4 addresses are stored IPv4-mapped (`::ffff:a.b.c.d`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    /// BTH DestQP (24 bits).
    pub dst_qp: u32,
    /// Interface index of the attach point (0 for captures).
    pub ifindex: u32,
    /// A [`Direction`] as u8.
    pub direction: u8,
    /// A `mirror::encap` kind, 0 when the frame was not mirrored.
    pub encap: u8,
    pub _pad: [u8; 2],
    /// ERSPAN session ID, VNI or GRE key (`mirror::encap::id_name`).
    pub mirror_id: u32,
    /// The mirroring switch (outer source address, IPv4-mapped for IPv4).
    pub outer_src: [u8; 16],
}
assert_size!(FlowKey, 64);

impl FlowKey {
    pub const fn zeroed() -> FlowKey {
        FlowKey {
            src_ip: [0; 16],
            dst_ip: [0; 16],
            dst_qp: 0,
            ifindex: 0,
            direction: 0,
            encap: 0,
            _pad: [0; 2],
            mirror_id: 0,
            outer_src: [0; 16],
        }
    }

    /// Whether the packet was unwrapped from a switch mirror.
    pub fn mirrored(&self) -> bool {
        self.encap != 0
    }

    /// The key's 64 bytes, field after field (there is no padding between them).
    #[inline]
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..16].copy_from_slice(&self.src_ip);
        b[16..32].copy_from_slice(&self.dst_ip);
        b[32..36].copy_from_slice(&self.dst_qp.to_ne_bytes());
        b[36..40].copy_from_slice(&self.ifindex.to_ne_bytes());
        b[40] = self.direction;
        b[41] = self.encap;
        b[42..44].copy_from_slice(&self._pad);
        b[44..48].copy_from_slice(&self.mirror_id.to_ne_bytes());
        b[48..64].copy_from_slice(&self.outer_src);
        b
    }
}

/// One write of the whole key: user space looks flows up in several hash maps per packet, and
/// a field-by-field hash (a dozen writes, with the arrays' lengths) cost more than the lookups.
/// The key's own memory is written, not a copy of it: the same 64 bytes as
/// [`FlowKey::to_bytes`] (the key has no padding), so the hash is the same.
impl core::hash::Hash for FlowKey {
    #[inline]
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        // SAFETY: FlowKey is `repr(C)`, 64 bytes (asserted) of byte arrays and integers laid
        // out without padding, so all 64 bytes are initialised and any alignment suits u8.
        let bytes: &[u8; 64] = unsafe { &*(self as *const FlowKey).cast::<[u8; 64]>() };
        state.write(bytes);
    }
}

/// The kernel's flow maps are keyed by a compact form of [`FlowKey`]: hashing and comparing
/// the 64-byte key cost every RoCE packet ~14 ns more than the 44-byte one, and a
/// plain IPv4 flow needs 16 bytes. The interface and the mirror source are one 32-bit
/// observation point: the interface index for a frame that was not mirrored, else
/// [`POINT_MIRROR`] with the number the kernel gave the mirror session (`MirrorStats::point`;
/// user space maps it back through the `MIRRORS` map). Direction and destination QP (24 bits)
/// share a word. Both sides expand the keys into the same [`FlowKey`], so a flow is one record
/// whichever map holds it.
pub const POINT_MIRROR: u32 = 1 << 31;

/// Key of `FLOWS4`: a flow whose two addresses are IPv4 (IPv4-mapped in the [`FlowKey`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey4 {
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    /// Destination QP | direction << 24.
    pub qp_dir: u32,
    /// Interface index, or [`POINT_MIRROR`] | mirror session number.
    pub point: u32,
}
assert_size!(FlowKey4, 16);

/// Key of `FLOWS6`: every other flow (an IPv6 address on either side); fields as
/// [`FlowKey4`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey6 {
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub qp_dir: u32,
    pub point: u32,
}
assert_size!(FlowKey6, 40);

/// Whether `a` is IPv4-mapped. Word compares (three 32-bit loads): the address is 4-byte
/// aligned in every key that holds one.
#[inline(always)]
pub(crate) fn is_mapped(a: &[u8; 16]) -> bool {
    let w = |i: usize| u32::from_ne_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
    w(0) == 0 && w(4) == 0 && w(8) == u32::from_ne_bytes([0, 0, 0xff, 0xff])
}

/// Which compact key a [`FlowKey`] takes (see [`FlowKey::compact`]).
pub enum Compact {
    V4,
    V6,
}

impl FlowKey {
    /// Write the compact key of this flow seen at observation `point` into `k4` or `k6`
    /// (in place: the kernel's are in scratch memory, not on the BPF stack; byte loops, as
    /// copying 16-byte arrays whole failed the 5.10 and 6.1 verifiers), and say which.
    #[inline(always)]
    pub fn compact(&self, point: u32, k4: &mut FlowKey4, k6: &mut FlowKey6) -> Compact {
        let qp_dir = self.qp_dir();
        if is_mapped(&self.src_ip) && is_mapped(&self.dst_ip) {
            let mut i = 0;
            while i < 4 {
                k4.src_ip[i] = self.src_ip[12 + i];
                k4.dst_ip[i] = self.dst_ip[12 + i];
                i += 1;
            }
            k4.qp_dir = qp_dir;
            k4.point = point;
            return Compact::V4;
        }
        let mut i = 0;
        while i < 16 {
            k6.src_ip[i] = self.src_ip[i];
            k6.dst_ip[i] = self.dst_ip[i];
            i += 1;
        }
        k6.qp_dir = qp_dir;
        k6.point = point;
        Compact::V6
    }

    /// The compact keys' `qp_dir`: destination QP | direction << 24.
    #[inline(always)]
    pub fn qp_dir(&self) -> u32 {
        (self.dst_qp & 0x00ff_ffff) | (u32::from(self.direction) << 24)
    }

    /// The flow a compact key names: addresses, QP and direction from the key; interface and
    /// mirror source from `point`, through `session` (the mirror session whose number it
    /// holds). `None` for a mirror point without its session.
    pub fn expand(
        src_ip: [u8; 16],
        dst_ip: [u8; 16],
        qp_dir: u32,
        point: u32,
        session: impl FnOnce(u32) -> Option<crate::mirror::MirrorKey>,
    ) -> Option<FlowKey> {
        let mut key = FlowKey {
            src_ip,
            dst_ip,
            dst_qp: qp_dir & 0x00ff_ffff,
            direction: (qp_dir >> 24) as u8,
            ..FlowKey::zeroed()
        };
        if point & POINT_MIRROR == 0 {
            key.ifindex = point;
        } else {
            let s = session(point)?;
            key.ifindex = s.ifindex;
            key.encap = s.encap;
            key.mirror_id = s.id;
            key.outer_src = s.outer_src;
        }
        Some(key)
    }
}

impl FlowKey4 {
    pub const fn zeroed() -> FlowKey4 {
        FlowKey4 {
            src_ip: [0; 4],
            dst_ip: [0; 4],
            qp_dir: 0,
            point: 0,
        }
    }

    /// [`FlowKey::expand`] of this key.
    pub fn expand(
        &self,
        session: impl FnOnce(u32) -> Option<crate::mirror::MirrorKey>,
    ) -> Option<FlowKey> {
        FlowKey::expand(
            crate::headers::ipv4_mapped(self.src_ip),
            crate::headers::ipv4_mapped(self.dst_ip),
            self.qp_dir,
            self.point,
            session,
        )
    }
}

impl FlowKey6 {
    pub const fn zeroed() -> FlowKey6 {
        FlowKey6 {
            src_ip: [0; 16],
            dst_ip: [0; 16],
            qp_dir: 0,
            point: 0,
        }
    }

    /// [`FlowKey::expand`] of this key.
    pub fn expand(
        &self,
        session: impl FnOnce(u32) -> Option<crate::mirror::MirrorKey>,
    ) -> Option<FlowKey> {
        FlowKey::expand(self.src_ip, self.dst_ip, self.qp_dir, self.point, session)
    }
}

/// `FlowStats::transport` before the first non-CNP packet.
pub const TRANSPORT_UNSET: u8 = 0xff;
/// `FlowStats::pcp` for untagged frames.
pub use crate::headers::PCP_UNTAGGED;
/// `FlowStats::flags` bit: `peer_qp` has been learned.
pub const FLAG_PEER_KNOWN: u8 = 1;

/// Number of NAK classes in [`FlowStats::naks`].
pub const NAK_CLASSES: usize = 6;
/// Index of each NAK class in [`FlowStats::naks`].
pub mod nak {
    pub const PSN_SEQ_ERR: usize = 0;
    pub const RNR: usize = 1;
    pub const INVALID_REQUEST: usize = 2;
    pub const REMOTE_ACCESS: usize = 3;
    pub const REMOTE_OP: usize = 4;
    pub const OTHER: usize = 5;
    /// JSON names, by index.
    pub const NAMES: [&str; super::NAK_CLASSES] = [
        "psn_seq_err",
        "rnr",
        "invalid_request",
        "remote_access",
        "remote_op",
        "other",
    ];
}

/// AETH syndrome class: `None` for an ACK, else the NAK class index ([`nak`]).
#[inline(always)]
pub const fn nak_class(syndrome: u8) -> Option<usize> {
    match (syndrome >> 5) & 0x3 {
        0 => None,
        1 => Some(nak::RNR),
        3 => Some(match syndrome & 0x1f {
            0 => nak::PSN_SEQ_ERR,
            1 => nak::INVALID_REQUEST,
            2 => nak::REMOTE_ACCESS,
            3 => nak::REMOTE_OP,
            _ => nak::OTHER,
        }),
        _ => Some(nak::OTHER),
    }
}

/// A fixed burst window (docs/metrics.md, `retransmit_burst` and `nak_burst`): `count`
/// occurrences since `start_ns`; the `limit`-th within the window completes a burst. Kept in
/// the flow record so that the kernel detects bursts itself, with no event per occurrence.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BurstWindow {
    pub start_ns: u64,
    /// Time of the first and of the latest completed burst.
    pub first_burst_ns: u64,
    pub last_burst_ns: u64,
    /// Occurrences in the current window.
    pub count: u32,
    /// Completed bursts (cumulative).
    pub bursts: u32,
}
assert_size!(BurstWindow, 32);

impl BurstWindow {
    pub const fn zeroed() -> BurstWindow {
        BurstWindow {
            start_ns: 0,
            first_burst_ns: 0,
            last_burst_ns: 0,
            count: 0,
            bursts: 0,
        }
    }

    /// Count one occurrence at `now_ns`; true when it completes a burst (`limit` within
    /// `window_ns` of the window's first occurrence; one burst per window).
    #[inline(always)]
    pub fn add(&mut self, now_ns: u64, limit: u32, window_ns: u64) -> bool {
        if self.count == 0 || now_ns.saturating_sub(self.start_ns) > window_ns {
            self.start_ns = now_ns;
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        if limit == 0 || self.count != limit {
            return false;
        }
        if self.bursts == 0 {
            self.first_burst_ns = now_ns;
        }
        self.bursts += 1;
        self.last_burst_ns = now_ns;
        true
    }
}

/// The PSN scoreboards and reordering counters of one flow (sequence.rs; docs/metrics.md,
/// "Reordering and loss"). Window bit `i` stands for PSN `base + i`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reorder {
    /// Requests: a copy arrived / declared lost / (lost) declared by a NAK, (seen) its first
    /// copy arrived reordered.
    pub req_seen: u64,
    pub req_lost: u64,
    pub req_flag: u64,
    /// Requests: a lost PSN whose copy is known to be a resend (a resend run that went on
    /// with a duplicate): a later copy does not make it reordered.
    pub req_sure: u64,
    /// READ responses: a copy arrived / skipped between two responses (not a hole).
    pub resp_seen: u64,
    pub resp_soft: u64,
    /// The oldest PSN not yet resolved, per space.
    pub req_base: u32,
    pub resp_base: u32,
    /// The PSN that continues the last request retransmission (`psn::REQ_RUN`), and where
    /// that resend run began.
    pub run_next: u32,
    pub run_start: u32,
    /// The run of first copies waiting for a decision (`psn::REQ_TENTATIVE`): its PSNs
    /// `tent_first..tent_next`, its copies, the highest PSN before it, NAKs for it meanwhile.
    pub tent_first: u32,
    pub tent_next: u32,
    pub tent_count: u32,
    pub tent_highest: u32,
    pub tent_naks: u32,
    /// Requests: every PSN from this one up to `req_base` had a copy here
    /// (`psn::REQ_CLEAN`): a NAK for one of them, on a flow that reorders, is caused by
    /// reordering.
    pub req_clean: u32,
    /// First copies that arrived reordered; their distances by bucket
    /// (`sequence::DISTANCE_NAMES`) and the largest.
    pub reordered: u64,
    pub distance: [u64; 6],
    pub distance_max: u64,
    /// PSN sequence-error NAKs for PSNs of this flow that were not lost: caused by reordering.
    pub naks: u64,
    /// For each PSN whose first copy closed a lost hole, the low byte of the highest PSN seen
    /// before that copy: its distance, if a second copy shows it was reordered. Byte `psn % 64`
    /// (the window holds at most 64 PSNs, so no two of its PSNs share a byte).
    pub closer_highest: [u64; 8],
}
assert_size!(Reorder, 224);

impl Reorder {
    pub const fn zeroed() -> Reorder {
        Reorder {
            req_seen: 0,
            req_lost: 0,
            req_flag: 0,
            req_sure: 0,
            resp_seen: 0,
            resp_soft: 0,
            req_base: 0,
            resp_base: 0,
            run_next: 0,
            run_start: 0,
            tent_first: 0,
            tent_next: 0,
            tent_count: 0,
            tent_highest: 0,
            tent_naks: 0,
            reordered: 0,
            distance: [0; 6],
            distance_max: 0,
            naks: 0,
            req_clean: 0,
            closer_highest: [0; 8],
        }
    }
}

/// Per-flow counters and sequence state (see docs/metrics.md for every definition).
///
/// Laid out hot first: every field a data packet touches, but for its opcode count, sits in
/// the first 64 bytes (with the kernel's change epoch, which every packet reads, and the peer QP
/// that a latency match reads next to `flags`); the next 64 hold what a loss storm touches (PSN
/// anomalies and the retransmission burst window); `opcodes` follows (64 bytes per eight
/// opcodes), then what only NAKs, CNPs, Not-ECT or CE packets touch, the first packet's time,
/// then the activity runs
/// (run.rs: what a data packet touches beyond the first 64 bytes, one more line), and last
/// what only gaps and the resends after them touch (path events). The finished data runs are
/// not here: only flows that finish long runs keep them, in a map of their own (run.rs,
/// `RunBatch`).
///
/// Counters that follow from others are not kept (each one kept is an atomic add per packet in
/// the kernel): [`FlowStats::packets`], [`FlowStats::ecn_ect`] and [`FlowStats::acks`]
/// compute them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowStats {
    pub bytes: u64,
    /// Last packet time (kernel: monotonic clock; captures: capture time), ns.
    pub last_ns: u64,
    /// Packets sent Not-ECT (ECN field 0). RoCE with DCQCN marks its data ECT, so the common
    /// packet adds nothing here.
    pub ecn_not_ect: u64,
    /// The report epoch in which the kernel last listed this flow as changed (changes.rs);
    /// 0 on the capture path. In the first line: every packet compares it.
    pub epoch: u32,
    /// The requester/responder QP on the other side, once learned from a latency match.
    pub peer_qp: u32,
    pub psn: PsnState,
    /// Distinct UDP source ports, 0 = empty slot (port 0 is not a valid RoCE source port).
    pub udp_sports: [u16; MAX_SPORTS],
    /// Opcode bits 7-5 of the first non-CNP packet, or [`TRANSPORT_UNSET`].
    pub transport: u8,
    pub dscp: u8,
    /// Outer VLAN priority or [`PCP_UNTAGGED`].
    pub pcp: u8,
    pub flags: u8,
    // Second 64 bytes: what a loss storm touches on every packet.
    /// Loss events (runs of consecutive PSNs declared lost) and the PSNs declared lost
    /// (sequence.rs).
    pub psn_gaps: u64,
    pub psn_missing: u64,
    /// Request and READ-response retransmissions: copies of a PSN after its first, and first
    /// copies of a PSN declared lost.
    pub req_retransmits: u64,
    pub resp_retransmits: u64,
    pub retransmit_bursts: BurstWindow,
    /// Packets per operation (opcode bits 4-0) of the flow's transport (`transport`).
    pub opcodes: [u64; 32],
    pub ecn_ce: u64,
    pub cnp: u64,
    /// Non-CNP packets whose transport differs from `transport`.
    pub other_transport: u64,
    pub naks: [u64; NAK_CLASSES],
    /// Packets whose UDP source port did not fit in `udp_sports`.
    pub udp_sport_overflow: u64,
    pub nak_bursts: BurstWindow,
    /// First packet time, ns (same clock as `last_ns`). Written once, when the entry is made.
    pub first_ns: u64,
    /// The flow's current data run and signal run (run.rs; docs/metrics.md, "Training
    /// steps"). Finished data runs go to the flow's `run::RunBatch` (a map of its own),
    /// finished signal runs travel as events; the open ones are read from here.
    pub run: DataRun,
    pub signals: SignalRun,
    /// Finished data runs too short to be batched (`run::RUN_EVENT_MIN_PACKETS`), those of
    /// batches whose record the full ring buffer lost, and those of flows that found no room
    /// for a batch; and their bytes.
    pub runs_unsent: u64,
    pub run_bytes_unsent: u64,
    /// Where was it lost (observe.rs, `path_events`; docs/metrics.md): the first request PSN
    /// (user space compares points from there), and the resend run in progress: a run of
    /// retransmitted requests, each newer than the last, on a flow whose requests have had a
    /// gap (`psn::REQ_RESENDING` set), from `resend_first` to `resend_last`. A finished run
    /// travels as one event; the open one is read from here.
    pub req_first: u32,
    pub resend_first: u32,
    pub resend_last: u32,
    /// Path events (gaps, finished resend runs) sent in the window that began at
    /// `path_window_ns`, at most `PATH_EVENT_LIMIT`; the ones over the limit are counted in
    /// `path_suppressed` (user space then marks the flow's path view incomplete).
    pub path_events: u32,
    pub path_window_ns: u64,
    pub path_suppressed: u64,
    /// Path events within the limit that were lost because the ring buffer was full (each
    /// also counted in the global `ringbuf_full`); user space marks the flow's path view
    /// incomplete, as for `path_suppressed`.
    pub path_lost: u64,
    /// Reordering and loss (sequence.rs): the scoreboards of both PSN spaces and the
    /// reordering counters. Last: touched only by packets that arrive out of order.
    pub reorder: Reorder,
}
assert_size!(FlowStats, 848);
// The hot part is the first 64 bytes. The kernel's hash map puts the value after its element
// header and the key, 8-byte aligned, so those 64 bytes span one or two cache lines.
const _: () = assert!(core::mem::offset_of!(FlowStats, flags) < 64);
const _: () = assert!(core::mem::offset_of!(FlowStats, epoch) < 64);
const _: () = assert!(core::mem::offset_of!(FlowStats, psn_gaps) == 64);
const _: () = assert!(core::mem::offset_of!(FlowStats, opcodes) == 128);

impl FlowStats {
    pub const fn zeroed() -> FlowStats {
        FlowStats {
            bytes: 0,
            last_ns: 0,
            ecn_not_ect: 0,
            epoch: 0,
            peer_qp: 0,
            psn: PsnState::zeroed(),
            udp_sports: [0; MAX_SPORTS],
            transport: TRANSPORT_UNSET,
            dscp: 0,
            pcp: PCP_UNTAGGED,
            flags: 0,
            psn_gaps: 0,
            psn_missing: 0,
            req_retransmits: 0,
            resp_retransmits: 0,
            retransmit_bursts: BurstWindow::zeroed(),
            opcodes: [0; 32],
            ecn_ce: 0,
            cnp: 0,
            other_transport: 0,
            naks: [0; NAK_CLASSES],
            udp_sport_overflow: 0,
            nak_bursts: BurstWindow::zeroed(),
            first_ns: 0,
            run: DataRun::zeroed(),
            signals: SignalRun::zeroed(),
            runs_unsent: 0,
            run_bytes_unsent: 0,
            req_first: 0,
            resend_first: 0,
            resend_last: 0,
            path_events: 0,
            path_window_ns: 0,
            path_suppressed: 0,
            path_lost: 0,
            reorder: Reorder::zeroed(),
        }
    }

    /// Initialise a freshly inserted (all-zero) entry.
    #[inline(always)]
    pub fn init(&mut self, now_ns: u64) {
        self.transport = TRANSPORT_UNSET;
        self.pcp = PCP_UNTAGGED;
        self.first_ns = now_ns;
    }

    /// Every packet of the flow: each one is counted in exactly one of `cnp`,
    /// `other_transport` and `opcodes` (account.rs).
    pub fn packets(&self) -> u64 {
        let opcodes: u64 = self.opcodes.iter().sum();
        opcodes + self.cnp + self.other_transport
    }

    /// Packets marked ECT(0) or ECT(1): neither Not-ECT nor CE. (Saturating: a map read
    /// racing with the kernel's updates may see `ecn_not_ect` ahead of the opcode counts.)
    pub fn ecn_ect(&self) -> u64 {
        self.packets()
            .saturating_sub(self.ecn_not_ect)
            .saturating_sub(self.ecn_ce)
    }

    /// Positive acknowledgements: the flow's ACKNOWLEDGE and ATOMIC_ACKNOWLEDGE packets that
    /// were not NAKs (`opcodes` counts both kinds, `naks` the NAKs).
    pub fn acks(&self) -> u64 {
        let mut answers = 0;
        for op in [opcode::ACKNOWLEDGE, opcode::ATOMIC_ACKNOWLEDGE] {
            let full = (self.transport << 5) | op;
            if self.transport != TRANSPORT_UNSET && opcode::psn_space(full) == PsnSpace::Ack {
                answers += self.opcodes[op as usize];
            }
        }
        let naks: u64 = self.naks.iter().sum();
        answers.saturating_sub(naks)
    }

    pub fn peer_qp(&self) -> Option<u32> {
        (self.flags & FLAG_PEER_KNOWN != 0).then_some(self.peer_qp)
    }

    /// Number of distinct UDP source ports held exactly.
    pub fn udp_src_ports(&self) -> usize {
        self.udp_sports.iter().filter(|p| **p != 0).count()
    }

    pub fn retransmits(&self) -> u64 {
        self.req_retransmits + self.resp_retransmits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_key_bytes_hold_every_field() {
        let base = FlowKey::zeroed();
        let changed = [
            FlowKey {
                src_ip: [1; 16],
                ..base
            },
            FlowKey {
                dst_ip: [1; 16],
                ..base
            },
            FlowKey { dst_qp: 1, ..base },
            FlowKey { ifindex: 1, ..base },
            FlowKey {
                direction: 1,
                ..base
            },
            FlowKey { encap: 1, ..base },
            FlowKey {
                _pad: [1; 2],
                ..base
            },
            FlowKey {
                mirror_id: 1,
                ..base
            },
            FlowKey {
                outer_src: [1; 16],
                ..base
            },
        ];
        // Each field has bytes of its own: every pair of one-field changes differs.
        for (i, a) in changed.iter().enumerate() {
            assert_ne!(a.to_bytes(), base.to_bytes(), "field {i}");
            for b in &changed[i + 1..] {
                assert_ne!(a.to_bytes(), b.to_bytes());
            }
        }
        let bytes = changed[0].to_bytes();
        assert_eq!(bytes.iter().filter(|b| **b != 0).count(), 16);
    }

    /// The hash writes the key's memory, which must be `to_bytes` exactly (a field moved, or
    /// padding, would change every flow's hash and the order of the maps keyed by it).
    #[test]
    fn flow_key_hash_writes_its_bytes() {
        struct Written([u8; 128], usize);
        impl core::hash::Hasher for Written {
            fn finish(&self) -> u64 {
                0
            }
            fn write(&mut self, bytes: &[u8]) {
                self.0[self.1..self.1 + bytes.len()].copy_from_slice(bytes);
                self.1 += bytes.len();
            }
        }
        let key = FlowKey {
            src_ip: core::array::from_fn(|i| i as u8 + 1),
            dst_ip: core::array::from_fn(|i| i as u8 + 17),
            dst_qp: 0x0123_4567,
            ifindex: 0x89ab_cdef,
            direction: 2,
            encap: 3,
            _pad: [4, 5],
            mirror_id: 0x1357_9bdf,
            outer_src: core::array::from_fn(|i| i as u8 + 33),
        };
        let mut w = Written([0; 128], 0);
        core::hash::Hash::hash(&key, &mut w);
        assert_eq!(&w.0[..w.1], &key.to_bytes()[..]);
    }

    #[test]
    fn burst_window_completes_once_per_window() {
        let mut w = BurstWindow::zeroed();
        // 12 occurrences 10 ns apart, limit 10 within 1000 ns: the 10th completes the burst.
        let fired: [bool; 12] = core::array::from_fn(|i| w.add(100 + i as u64 * 10, 10, 1000));
        assert_eq!(fired.iter().filter(|f| **f).count(), 1);
        assert!(fired[9]);
        assert_eq!((w.bursts, w.first_burst_ns, w.last_burst_ns), (1, 190, 190));
        // A new window after 1000 ns: another burst.
        for i in 0..10 {
            w.add(5_000 + i, 10, 1000);
        }
        assert_eq!(
            (w.bursts, w.first_burst_ns, w.last_burst_ns),
            (2, 190, 5_009)
        );
        // Spread out: never a burst.
        let mut spread = BurstWindow::zeroed();
        assert!((0..100).all(|i| !spread.add(i * 2000, 10, 1000)));
        // Limit 0: never.
        let mut off = BurstWindow::zeroed();
        assert!((0..100).all(|i| !off.add(i, 0, 1000)));
    }

    /// A flow through the kernel's compact key and back is the same FlowKey: IPv4 in the
    /// 16-byte key, IPv6 (or one IPv6 side) in the 40-byte one, the mirror source through the
    /// session's number.
    #[test]
    fn compact_keys_expand_to_the_same_flow() {
        let v4 = crate::headers::ipv4_mapped;
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6[15] = 7;
        let session = crate::mirror::MirrorKey {
            outer_src: v4([198, 51, 100, 9]),
            outer_dst: v4([198, 51, 100, 10]),
            id: 77,
            ifindex: 9,
            encap: crate::mirror::encap::ERSPAN2,
            direction: 1,
            _pad: [0; 2],
        };
        let session_point = POINT_MIRROR | 5;
        let plain = FlowKey {
            src_ip: v4([192, 0, 2, 1]),
            dst_ip: v4([192, 0, 2, 2]),
            dst_qp: 0x00ab_cdef,
            ifindex: 9,
            direction: 1,
            ..FlowKey::zeroed()
        };
        let mirrored = FlowKey {
            encap: session.encap,
            mirror_id: session.id,
            outer_src: session.outer_src,
            ..plain
        };
        let lookup = |p: u32| (p == session_point).then_some(session);
        let cases = [
            (plain, 9, true),
            (mirrored, session_point, true),
            (
                FlowKey {
                    src_ip: v6,
                    direction: 0,
                    ..plain
                },
                9,
                false,
            ),
            (
                FlowKey {
                    dst_ip: v6,
                    ..mirrored
                },
                session_point,
                false,
            ),
        ];
        for (key, point, is_v4) in cases {
            let (mut k4, mut k6) = (FlowKey4::zeroed(), FlowKey6::zeroed());
            let back = match key.compact(point, &mut k4, &mut k6) {
                Compact::V4 => {
                    assert!(is_v4, "{key:?}");
                    k4.expand(lookup)
                }
                Compact::V6 => {
                    assert!(!is_v4, "{key:?}");
                    k6.expand(lookup)
                }
            };
            assert_eq!(back, Some(key));
        }
        // A mirror point whose session is unknown names no flow.
        let (mut k4, mut k6) = (FlowKey4::zeroed(), FlowKey6::zeroed());
        mirrored.compact(POINT_MIRROR | 6, &mut k4, &mut k6);
        assert_eq!(k4.expand(lookup), None);
    }
}
