//! Switch mirrors: where the mirrored Ethernet frame starts inside ERSPAN type I, II, III (with
//! or without the platform subheader), transparent Ethernet bridging over GRE (0x6558) or
//! VXLAN, behind an outer Ethernet header with up to two VLAN tags and IPv4 or IPv6.
//!
//! This is the first of the two passes of `parse::parse_mirrored`: it reads only the outer
//! headers and returns an offset, so its state is gone before the mirrored frame's header chain
//! is parsed (both on the 512-byte BPF stack would not fit).

use crate::{
    Counter,
    headers::*,
    parse::{PacketView, is_vlan},
};

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

/// Find the mirrored frame. Anything that is not GRE or UDP to `ports.vxlan` (and a frame cut
/// before its GRE or UDP header) is [`Outer::Plain`], left to the main parse, which counts it
/// exactly as without mirrors.
#[inline(always)]
pub fn outer<P: PacketView>(p: &P, ports: Ports) -> Outer {
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
    match proto {
        IPPROTO_GRE => gre(p, l4),
        IPPROTO_UDP => vxlan(p, l4, ports),
        _ => Outer::Plain,
    }
}

/// GRE carrying a mirrored frame: ERSPAN type I (no header), II (8 bytes), III (12 bytes, plus
/// 8 when the platform-specific subheader is present), or transparent Ethernet bridging.
#[inline(always)]
fn gre<P: PacketView>(p: &P, off: usize) -> Outer {
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
    match gre.protocol() {
        GRE_PROTO_TEB => Outer::Mirrored(inner),
        // Type II sets the sequence flag and has a header; type I has neither.
        GRE_PROTO_ERSPAN_I_II if gre.sequence_present() => match p.load::<ErspanIIHdr>(inner) {
            Some(_) => Outer::Mirrored(inner + ErspanIIHdr::LEN),
            None => Outer::Bad(Counter::Malformed),
        },
        GRE_PROTO_ERSPAN_I_II => Outer::Mirrored(inner),
        GRE_PROTO_ERSPAN_III => match p.load::<ErspanIIIHdr>(inner) {
            Some(h) if h.has_platform_subheader() => {
                Outer::Mirrored(inner + ErspanIIIHdr::LEN + ERSPAN_PLATFORM_LEN)
            }
            Some(_) => Outer::Mirrored(inner + ErspanIIIHdr::LEN),
            None => Outer::Bad(Counter::Malformed),
        },
        _ => Outer::Bad(Counter::NonRoce),
    }
}

/// VXLAN: the mirrored Ethernet frame follows the 8-byte header. RoCE on the same port wins.
#[inline(always)]
fn vxlan<P: PacketView>(p: &P, off: usize, ports: Ports) -> Outer {
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
    Outer::Mirrored(off + UdpHdr::LEN + VxlanHdr::LEN)
}

#[cfg(test)]
mod tests {
    extern crate alloc;
    use alloc::vec::Vec;

    use super::*;
    use crate::{
        frames::RoceFrame,
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

    #[test]
    fn vxlan_behind_two_tags_is_unwrapped() {
        let inner = RoceFrame::new(0x04, 0x12, 7).build();
        let f = vxlan_mirror(&inner, 0x08, 0);
        assert_eq!(
            outer(&Bytes(&f), Ports::default()),
            Outer::Mirrored(f.len() - inner.len())
        );
        match parse_mirrored(&Bytes(&f), Ports::default()) {
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
            parse_mirrored(&Bytes(&f), other),
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
                outer(&Bytes(&f), Ports::default()),
                Outer::Bad(Counter::NonRoce)
            );
        }
        // VXLAN-GPE carrying Ethernet is a mirror.
        let f = vxlan_mirror(&inner, 0x0c, 3);
        assert!(matches!(
            outer(&Bytes(&f), Ports::default()),
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
            let got = parse_mirrored(&Bytes(&f[..cut]), Ports::default());
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
