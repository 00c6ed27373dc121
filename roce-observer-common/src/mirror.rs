//! Switch mirrors: where the mirrored Ethernet frame starts inside ERSPAN type I, II, III (with
//! or without the platform subheader), transparent Ethernet bridging over GRE (0x6558) or
//! VXLAN, behind an outer Ethernet header with up to two VLAN tags and IPv4 or IPv6.
//!
//! This is the first of the two passes of `parse::parse_mirrored`: it reads only the outer
//! headers and returns an offset, so its state is gone before the mirrored frame's header chain
//! is parsed (both on the 512-byte BPF stack would not fit).

use crate::{Counter, headers::*, packet::PacketView};

/// The UDP destination ports the parser recognises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    /// RoCEv2.
    pub roce: u16,
    /// VXLAN mirrors.
    pub vxlan: u16,
}

impl Default for Ports {
    fn default() -> Ports {
        Ports {
            roce: crate::ROCE_V2_PORT,
            vxlan: VXLAN_PORT,
        }
    }
}

/// What the outer headers say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outer {
    /// Not a mirror (or not one we can tell: the main parse classifies it).
    Plain,
    /// A mirror; the mirrored Ethernet frame starts at this offset.
    Mirrored(usize),
    /// A mirror that cannot be unwrapped: `Malformed` (outer mirror header cut short) or
    /// `NonRoce` (GRE carrying something else, VXLAN not carrying Ethernet).
    Bad(Counter),
}

/// How a frame was mirrored: `FlowKey::encap` and `MirrorKey::encap` (0: not mirrored).
pub mod encap {
    pub const NONE: u8 = 0;
    /// ERSPAN type I: GRE 0x88BE without a sequence number or ERSPAN header.
    pub const ERSPAN1: u8 = 1;
    pub const ERSPAN2: u8 = 2;
    pub const ERSPAN3: u8 = 3;
    /// Transparent Ethernet bridging over GRE (0x6558).
    pub const GRE: u8 = 4;
    pub const VXLAN: u8 = 5;

    /// JSON, table and log name.
    pub const fn name(v: u8) -> Option<&'static str> {
        Some(match v {
            ERSPAN1 => "erspan1",
            ERSPAN2 => "erspan2",
            ERSPAN3 => "erspan3",
            GRE => "gre",
            VXLAN => "vxlan",
            _ => return None,
        })
    }

    /// What the 32-bit mirror ID of this encapsulation is: the ERSPAN session ID, the VNI, or
    /// (ERSPAN I and GRE bridging, which have neither) the GRE key, 0 without one.
    pub const fn id_name(v: u8) -> &'static str {
        match v {
            ERSPAN2 | ERSPAN3 => "session_id",
            VXLAN => "vni",
            _ => "gre_key",
        }
    }
}

/// One mirror session as seen at one attach point: the key of the kernel's `MIRRORS` map and
/// of the engine's mirror table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MirrorKey {
    /// The mirroring switch (IPv4-mapped for IPv4).
    pub outer_src: [u8; 16],
    /// The mirror destination.
    pub outer_dst: [u8; 16],
    /// ERSPAN session ID, VNI or GRE key ([`encap::id_name`]).
    pub id: u32,
    pub ifindex: u32,
    /// An [`encap`] kind, never `NONE` in a stored key.
    pub encap: u8,
    /// A `Direction` as u8.
    pub direction: u8,
    pub _pad: [u8; 2],
}
crate::assert_size!(MirrorKey, 44);

impl MirrorKey {
    pub const fn zeroed() -> MirrorKey {
        MirrorKey {
            outer_src: [0; 16],
            outer_dst: [0; 16],
            id: 0,
            ifindex: 0,
            encap: encap::NONE,
            direction: 0,
            _pad: [0; 2],
        }
    }
}

/// What the outer pass leaves for the rest of the observation: the frame's mirror session and
/// sequence number. The kernel keeps it in a per-CPU scratch map (`MIRROR_POINT`), not on the
/// 512-byte stack; `key.encap` is `NONE` unless the frame was unwrapped.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MirrorPoint {
    pub key: MirrorKey,
    /// GRE sequence number (when `seq_present`).
    pub seq: u32,
    pub seq_present: u8,
    pub _pad: [u8; 3],
}
crate::assert_size!(MirrorPoint, 52);

impl MirrorPoint {
    pub const fn zeroed() -> MirrorPoint {
        MirrorPoint {
            key: MirrorKey::zeroed(),
            seq: 0,
            seq_present: 0,
            _pad: [0; 3],
        }
    }
}

/// Most mirror sessions either side keeps (the kernel's `MIRRORS` map size; the engine's
/// bound); one more is counted in `map_full`.
pub const MAX_MIRROR_SESSIONS: u32 = 1024;

/// A jump of the sequence number by this much or more, forwards or backwards, is taken for a
/// restart of the session's numbering (switch reboot, session reconfigured), not for loss.
pub const SEQ_RESYNC: u32 = 1 << 16;

/// `MirrorStats::flags` bit: a sequence number has been seen (`next_seq` is valid).
pub const SEQ_SEEN: u32 = 1;

/// Per-session counters (docs/metrics.md, "Mirror sessions").
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Frames unwrapped.
    pub frames: u64,
    /// Sequence numbers skipped (frames lost on the mirror path).
    pub seq_lost: u64,
    /// Frames whose sequence number was not newer than the highest seen (reordered or
    /// duplicated); a reordered frame was counted in `seq_lost` when the gap was seen.
    pub seq_late: u64,
    /// Jumps of [`SEQ_RESYNC`] or more: the numbering restarted from there.
    pub seq_resyncs: u64,
    /// The sequence number expected next.
    pub next_seq: u32,
    pub flags: u32,
    /// Kernel only: the session's number in the flow maps' keys (`flow::POINT_MIRROR` | its
    /// slot in the `SESSIONS` map, set when the session is made); 0 in the engine and in what
    /// `read_mirrors` hands over.
    pub point: u32,
    pub _pad: u32,
}
crate::assert_size!(MirrorStats, 48);

impl MirrorStats {
    /// Count one frame with its GRE sequence number, if it has one. RFC 1982 serial
    /// arithmetic, so the 32-bit numbers wrap: a number up to `SEQ_RESYNC` ahead of the one
    /// expected is newer (the numbers in between are lost), one up to `SEQ_RESYNC` behind is
    /// late. Counters are atomic adds (one session may be seen on several CPUs); `next_seq` is
    /// a plain store, as a flow's PSN state (docs/metrics.md, "Several CPUs").
    #[inline(always)]
    pub fn count(&mut self, seq: u32, seq_present: bool) {
        crate::atomic::add(&mut self.frames, 1);
        if !seq_present {
            return;
        }
        let ahead = seq.wrapping_sub(self.next_seq);
        let behind = self.next_seq.wrapping_sub(seq);
        if self.flags & SEQ_SEEN == 0 {
            self.flags = SEQ_SEEN;
        } else if ahead < SEQ_RESYNC {
            // In order (ahead 0) is the common case: no atomic add of nothing.
            if ahead != 0 {
                crate::atomic::add(&mut self.seq_lost, ahead as u64);
            }
        } else if behind <= SEQ_RESYNC {
            crate::atomic::add(&mut self.seq_late, 1);
            return;
        } else {
            crate::atomic::add(&mut self.seq_resyncs, 1);
        }
        self.next_seq = seq.wrapping_add(1);
    }
}

/// Find the mirrored frame. Anything that is not GRE or UDP to `ports.vxlan` (and a frame cut
/// before its GRE or UDP header) is [`Outer::Plain`], left to the main parse, which counts it
/// exactly as without mirrors. For [`Outer::Mirrored`] the session and sequence number are in
/// `point` (its ID may be overwritten otherwise, `key.encap` is then left as it was).
#[inline(always)]
pub fn outer<P: PacketView>(p: &P, ports: Ports, point: &mut MirrorPoint) -> Outer {
    let Some(eth) = p.load::<EthHdr>(0) else {
        return Outer::Plain;
    };
    let mut off = EthHdr::LEN;
    let mut ethertype = eth.ethertype();
    // Up to two outer tags (more is `unsupported`, left to the main parse).
    let mut tags = 0;
    while tags < 2 && is_vlan(ethertype) {
        let Some(tag) = p.load::<VlanHdr>(off) else {
            return Outer::Plain;
        };
        ethertype = tag.ethertype();
        off += VlanHdr::LEN;
        tags += 1;
    }
    let (proto, l4) = match ethertype {
        ETHERTYPE_IPV4 => {
            let Some(ip) = p.load::<Ipv4Hdr>(off) else {
                return Outer::Plain;
            };
            // Later fragments have no GRE/UDP header (the main parse counts them).
            if ip.version() != 4 || ip.header_len() < Ipv4Hdr::LEN || ip.frag_offset() != 0 {
                return Outer::Plain;
            }
            (ip.protocol(), off + ip.header_len())
        }
        ETHERTYPE_IPV6 => {
            let Some(ip) = p.load::<Ipv6Hdr>(off) else {
                return Outer::Plain;
            };
            if ip.version() != 6 {
                return Outer::Plain;
            }
            (ip.next_header(), off + Ipv6Hdr::LEN)
        }
        _ => return Outer::Plain,
    };
    let out = match proto {
        IPPROTO_GRE => gre(p, l4, point),
        IPPROTO_UDP => vxlan(p, l4, ports, point),
        _ => return Outer::Plain,
    };
    // The session's addresses, only for a mirror: plain frames (most of them) skip the stores.
    if let Outer::Mirrored(_) = out {
        addresses(p, off, ethertype == ETHERTYPE_IPV6, point);
    }
    out
}

/// The outer source and destination of the IP header at `off` (read again: keeping them from
/// the first read would cost every plain frame their stores).
#[inline(always)]
fn addresses<P: PacketView>(p: &P, off: usize, v6: bool, point: &mut MirrorPoint) {
    if v6 {
        if let Some(ip) = p.load::<Ipv6Hdr>(off) {
            point.key.outer_src = ip.src();
            point.key.outer_dst = ip.dst();
        }
    } else if let Some(ip) = p.load::<Ipv4Hdr>(off) {
        point.key.outer_src = ipv4_mapped(ip.src());
        point.key.outer_dst = ipv4_mapped(ip.dst());
    }
}

/// GRE carrying a mirrored frame: ERSPAN type I (no header), II (8 bytes), III (12 bytes, plus
/// 8 when the platform-specific subheader is present), or transparent Ethernet bridging. The
/// GRE sequence number, when present, is the session's (any encapsulation).
#[inline(always)]
fn gre<P: PacketView>(p: &P, off: usize, point: &mut MirrorPoint) -> Outer {
    let Some(gre) = p.load::<GreHdr>(off) else {
        return Outer::Bad(Counter::Malformed);
    };
    if gre.version() != 0 {
        return Outer::Bad(Counter::NonRoce);
    }
    // The optional checksum, key and sequence words must be there too.
    let inner = off + gre.header_len();
    if gre.header_len() > GreHdr::LEN && p.load::<Word32>(inner - 4).is_none() {
        return Outer::Bad(Counter::Malformed);
    }
    // Checksum, key, sequence number, in this order; each read at its own offset from the
    // start (a read relative to the end of the header is refused by the verifier).
    let key_at = off + GreHdr::LEN + gre.checksum_len();
    let key_len = if gre.key_present() { 4 } else { 0 };
    point.key.id = 0;
    if gre.key_present() {
        match p.load::<Word32>(key_at) {
            Some(key) => point.key.id = key.get(),
            None => return Outer::Bad(Counter::Malformed),
        }
    }
    point.seq_present = 0;
    if gre.sequence_present() {
        match p.load::<Word32>(key_at + key_len) {
            Some(seq) => point.seq = seq.get(),
            None => return Outer::Bad(Counter::Malformed),
        }
        point.seq_present = 1;
    }
    let (kind, base) = match gre.protocol() {
        GRE_PROTO_TEB => (encap::GRE, inner),
        // Type II sets the sequence flag and has a header; type I has neither.
        GRE_PROTO_ERSPAN_I_II if gre.sequence_present() => match p.load::<ErspanIIHdr>(inner) {
            Some(h) => {
                point.key.id = h.session_id();
                (encap::ERSPAN2, inner + ErspanIIHdr::LEN)
            }
            None => return Outer::Bad(Counter::Malformed),
        },
        GRE_PROTO_ERSPAN_I_II => (encap::ERSPAN1, inner),
        GRE_PROTO_ERSPAN_III => match p.load::<ErspanIIIHdr>(inner) {
            Some(h) => {
                point.key.id = h.session_id();
                let sub = if h.has_platform_subheader() {
                    ERSPAN_PLATFORM_LEN
                } else {
                    0
                };
                (encap::ERSPAN3, inner + ErspanIIIHdr::LEN + sub)
            }
            None => return Outer::Bad(Counter::Malformed),
        },
        _ => return Outer::Bad(Counter::NonRoce),
    };
    point.key.encap = kind;
    Outer::Mirrored(base)
}

/// VXLAN: the mirrored Ethernet frame follows the 8-byte header. RoCE on the same port wins.
#[inline(always)]
fn vxlan<P: PacketView>(p: &P, off: usize, ports: Ports, point: &mut MirrorPoint) -> Outer {
    let Some(udp) = p.load::<UdpHdr>(off) else {
        return Outer::Plain;
    };
    if udp.dst_port() != ports.vxlan || udp.dst_port() == ports.roce {
        return Outer::Plain;
    }
    let Some(vx) = p.load::<VxlanHdr>(off + UdpHdr::LEN) else {
        return Outer::Bad(Counter::Malformed);
    };
    if !vx.vni_valid() || !vx.carries_ethernet() {
        return Outer::Bad(Counter::NonRoce);
    }
    point.key.id = vx.vni();
    point.seq_present = 0;
    point.key.encap = encap::VXLAN;
    Outer::Mirrored(off + UdpHdr::LEN + VxlanHdr::LEN)
}

#[cfg(test)]
mod tests {
    extern crate alloc;
    use alloc::vec::Vec;

    use super::*;
    use crate::{
        frames::{Mirror, RoceFrame, mirrored},
        parse::{Frame, parse_mirrored},
    };

    struct Bytes<'a>(&'a [u8]);

    impl PacketView for Bytes<'_> {
        fn frame_len(&self) -> u32 {
            self.0.len() as u32
        }
        fn load<T: Header>(&self, offset: usize) -> Option<T> {
            let b = self
                .0
                .get(offset..offset.checked_add(core::mem::size_of::<T>())?)?;
            // SAFETY: `b` holds size_of::<T>() bytes; headers are byte arrays.
            Some(unsafe { core::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
        }
    }

    /// `inner` inside an IPv4 VXLAN mirror (VNI 5001) behind two outer VLAN tags.
    fn vxlan_mirror(inner: &[u8], flags: u8, next: u8) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&[2, 0, 0, 0, 0, 6, 2, 0, 0, 0, 0, 5, 0x88, 0xa8]);
        f.extend_from_slice(&[0, 10, 0x81, 0x00, 0, 20, 0x08, 0x00]);
        let total = (20 + 8 + 8 + inner.len()) as u16;
        f.extend_from_slice(&[
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            17,
        ]);
        f.extend_from_slice(&[0, 0, 198, 51, 100, 1, 198, 51, 100, 2]);
        f.extend_from_slice(&[0xd0, 0, 0x12, 0xb5, 0, 0, 0, 0]);
        f.extend_from_slice(&[flags, 0, 0, next, 0, 0x13, 0x89, 0]);
        f.extend_from_slice(inner);
        f
    }

    /// `seqs` through one session: (frames, seq_lost, seq_late, seq_resyncs).
    fn counted(seqs: &[u32]) -> (u64, u64, u64, u64) {
        let mut m = MirrorStats::default();
        for &s in seqs {
            m.count(s, true);
        }
        (m.frames, m.seq_lost, m.seq_late, m.seq_resyncs)
    }

    #[test]
    fn sequence_gaps_are_counted_across_the_wrap() {
        assert_eq!(counted(&[5, 6, 7]), (3, 0, 0, 0));
        assert_eq!(counted(&[5, 7, 10]), (3, 3, 0, 0));
        // 0xffffffff and 0 lost across the wrap; then in order again.
        assert_eq!(counted(&[0xffff_fffe, 1, 2]), (3, 2, 0, 0));
        assert_eq!(counted(&[u32::MAX, 0, 1]), (3, 0, 0, 0));
        // A late frame (reordered) and a duplicate: counted late, the gap stays counted.
        assert_eq!(counted(&[1, 3, 2, 4, 4]), (5, 1, 2, 0));
        // A restart of the numbering (either way) is a resync, not 2^32 - 1000 lost frames.
        assert_eq!(counted(&[100_000, 100_001, 1, 2]), (4, 0, 0, 1));
        // Within the window backwards it is late: a short restart looks like reordering.
        assert_eq!(counted(&[1000, 1001, 1]), (3, 0, 1, 0));
        assert_eq!(counted(&[1, 2, 1 << 20, (1 << 20) + 1]), (4, 0, 0, 1));
        // The largest gap still counted as loss, across the wrap.
        assert_eq!(
            counted(&[u32::MAX - 10, SEQ_RESYNC - 11]),
            (2, SEQ_RESYNC as u64 - 1, 0, 0)
        );
        // Frames without a sequence number are only counted.
        let mut m = MirrorStats::default();
        m.count(9, false);
        m.count(20, false);
        assert_eq!((m.frames, m.seq_lost, m.flags), (2, 0, 0));
    }

    #[test]
    fn the_outer_pass_names_the_session() {
        let inner = RoceFrame::new(0x04, 0x12, 7).build();
        let mut point = MirrorPoint::zeroed();
        let f = vxlan_mirror(&inner, 0x08, 0);
        assert!(matches!(
            parse_mirrored(&Bytes(&f), Ports::default(), &mut point),
            Frame::Roce { .. }
        ));
        assert_eq!((point.key.encap, point.key.id), (encap::VXLAN, 5001));
        assert_eq!(point.key.outer_src[12..], [198, 51, 100, 1]);
        assert_eq!(point.key.outer_dst[12..], [198, 51, 100, 2]);
        assert_eq!(point.seq_present, 0);
        for (how, kind, id, seq) in [
            (
                Mirror::Erspan2 {
                    session: 9,
                    seq: 77,
                },
                encap::ERSPAN2,
                9,
                Some(77),
            ),
            (Mirror::Erspan3 { session: 11 }, encap::ERSPAN3, 11, None),
        ] {
            let f = mirrored(&inner, how);
            parse_mirrored(&Bytes(&f), Ports::default(), &mut point);
            assert_eq!((point.key.encap, point.key.id), (kind, id), "{how:?}");
            assert_eq!(
                (point.seq_present != 0).then_some(point.seq),
                seq,
                "{how:?}"
            );
        }
        // A plain frame leaves no mirror behind.
        parse_mirrored(&Bytes(&inner), Ports::default(), &mut point);
        assert_eq!(point.key.encap, encap::NONE);
    }

    #[test]
    fn vxlan_behind_two_tags_is_unwrapped() {
        let inner = RoceFrame::new(0x04, 0x12, 7).build();
        let f = vxlan_mirror(&inner, 0x08, 0);
        assert_eq!(
            outer(&Bytes(&f), Ports::default(), &mut MirrorPoint::zeroed()),
            Outer::Mirrored(f.len() - inner.len())
        );
        match parse_mirrored(&Bytes(&f), Ports::default(), &mut MirrorPoint::zeroed()) {
            Frame::Roce { pkt, .. } => {
                assert_eq!((pkt.psn, pkt.dst_qp), (7, 0x12));
                assert_eq!(pkt.frame_len as usize, inner.len());
            }
            _ => panic!("mirrored RoCE frame not found"),
        }
        // Another VXLAN port: plain UDP.
        let other = Ports {
            vxlan: 8472,
            ..Ports::default()
        };
        assert!(matches!(
            parse_mirrored(&Bytes(&f), other, &mut MirrorPoint::zeroed()),
            Frame::Other(Counter::NonRoce)
        ));
    }

    #[test]
    fn vxlan_not_carrying_ethernet_is_non_roce() {
        let inner = RoceFrame::new(0x04, 0x12, 7).build();
        // VXLAN-GPE, next protocol IPv4; and the I flag missing.
        for (flags, next) in [(0x0c, 1), (0x00, 0)] {
            let f = vxlan_mirror(&inner, flags, next);
            assert_eq!(
                outer(&Bytes(&f), Ports::default(), &mut MirrorPoint::zeroed()),
                Outer::Bad(Counter::NonRoce)
            );
        }
        // VXLAN-GPE carrying Ethernet is a mirror.
        let f = vxlan_mirror(&inner, 0x0c, 3);
        assert!(matches!(
            outer(&Bytes(&f), Ports::default(), &mut MirrorPoint::zeroed()),
            Outer::Mirrored(_)
        ));
    }

    #[test]
    fn a_mirror_cut_anywhere_is_classified_never_read_past_its_end() {
        let inner = RoceFrame::new(0x04, 0x12, 7).build();
        let f = vxlan_mirror(&inner, 0x08, 0);
        // The inner frame has no payload: its BTH ends where its 4-byte ICRC begins.
        let bth_end = f.len() - 4;
        for cut in 0..f.len() {
            let got = parse_mirrored(
                &Bytes(&f[..cut]),
                Ports::default(),
                &mut MirrorPoint::zeroed(),
            );
            // Cut inside the outer Ethernet/VLAN/IP/UDP headers: the main parse classifies it
            // (malformed); inside the VXLAN header or the mirrored frame's headers: malformed.
            // With a whole BTH it is RoCE (the ICRC is not needed).
            if cut < bth_end {
                assert!(
                    matches!(got, Frame::Other(Counter::Malformed)),
                    "cut at {cut}"
                );
            } else {
                assert!(matches!(got, Frame::Roce { .. }), "cut at {cut}");
            }
        }
    }
}
