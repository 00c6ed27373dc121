//! The staged frame parser shared by the kernel (XDP, TC) and user space (captures):
//! Ethernet -> up to two VLAN tags -> IPv4/IPv6 -> UDP (destination port) -> BTH -> RETH/AETH,
//! or Ethernet -> MAC control (PFC, PAUSE). Each stage loads one fixed-size header through
//! [`PacketView::load`], which is bounds-checked by the implementation, so a short frame ends
//! the parse with a classification instead of a fault.

use crate::{Counter, account::RocePacket, flow::PCP_UNTAGGED, headers::*, opcode};

/// Read access to one frame.
pub trait PacketView {
    /// Length of the frame as it was on the wire (for byte counters).
    fn frame_len(&self) -> u32;
    /// Copy a `T` from `offset`, or `None` when the frame ends before `offset + size_of::<T>()`.
    fn load<T: Header>(&self, offset: usize) -> Option<T>;
    /// Told where the BTH starts, just before the parser reads it. The default does nothing
    /// (and compiles away in the kernel programs); a view that rewrites RoCE frames records it
    /// (roce-replay shifts PSNs) instead of walking the headers a second time.
    #[inline(always)]
    fn bth_at(&self, _offset: usize) {}
}

/// What a frame is, after parsing.
#[derive(Clone, Copy)]
pub enum Frame {
    Roce {
        /// IPv4-mapped for IPv4.
        src_ip: [u8; 16],
        dst_ip: [u8; 16],
        pkt: RocePacket,
    },
    Pfc {
        src_mac: [u8; 6],
        class_enable: u16,
        body: PfcBody,
    },
    Pause {
        src_mac: [u8; 6],
        quanta: u16,
    },
    /// Not RoCE or PFC: `NonRoce`, `Malformed`, `IpFragments` or `Unsupported`.
    Other(Counter),
}

#[inline(always)]
fn is_vlan(ethertype: u16) -> bool {
    ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ
}

/// IPv4-mapped IPv6 form of an IPv4 address.
#[inline(always)]
pub fn ipv4_mapped(a: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
    ]
}

/// Parse one frame. `roce_port` is the RoCEv2 UDP destination port. GRE is not unwrapped:
/// ERSPAN mirror traffic counts as `non_roce` (the kernel programs use this; a second parse
/// chain for the mirrored frame does not fit the 512-byte BPF stack yet).
#[inline(always)]
pub fn parse<P: PacketView>(p: &P, roce_port: u16) -> Frame {
    parse_l2::<P, false>(p, 0, roce_port)
}

/// [`parse`], and a frame mirrored inside ERSPAN (type I, II, III) or transparent-Ethernet GRE
/// is unwrapped and parsed in its place (once). Captures from an ERSPAN destination use this.
#[inline(always)]
pub fn parse_mirrored<P: PacketView>(p: &P, roce_port: u16) -> Frame {
    parse_l2::<P, true>(p, 0, roce_port)
}

/// Parse an Ethernet frame starting at `base`. With `UNWRAP` (the captured frame of
/// [`parse_mirrored`]), a GRE-mirrored frame inside is parsed instead; the mirrored frame
/// itself is never unwrapped again.
#[inline(always)]
fn parse_l2<P: PacketView, const UNWRAP: bool>(p: &P, base: usize, roce_port: u16) -> Frame {
    let malformed = Frame::Other(Counter::Malformed);
    let Some(eth) = p.load::<EthHdr>(base) else {
        return malformed;
    };
    let mut off = base + EthHdr::LEN;
    let mut ethertype = eth.ethertype();
    let mut pcp = PCP_UNTAGGED;
    // Up to two tags (802.1Q, or QinQ); the outer tag's PCP selects the PFC priority.
    if is_vlan(ethertype) {
        let Some(tag) = p.load::<VlanHdr>(off) else {
            return malformed;
        };
        pcp = tag.pcp();
        ethertype = tag.ethertype();
        off += VlanHdr::LEN;
        if is_vlan(ethertype) {
            let Some(inner) = p.load::<VlanHdr>(off) else {
                return malformed;
            };
            ethertype = inner.ethertype();
            off += VlanHdr::LEN;
            if is_vlan(ethertype) {
                return Frame::Other(Counter::Unsupported);
            }
        }
    }
    let l3 = L3 {
        off,
        base,
        pcp,
        roce_port,
    };
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4::<P, UNWRAP>(p, &l3),
        ETHERTYPE_IPV6 => parse_ipv6::<P, UNWRAP>(p, &l3),
        ETHERTYPE_MAC_CONTROL => parse_mac_control(p, off, eth.src_mac()),
        _ => Frame::Other(Counter::NonRoce),
    }
}

/// Where the network header starts and what the layers below it said.
struct L3 {
    off: usize,
    /// Start of the (possibly mirrored) Ethernet frame.
    base: usize,
    pcp: u8,
    roce_port: u16,
}

/// GRE carrying a mirrored frame: ERSPAN type I (no header), II (8 bytes), III (12 bytes, plus
/// 8 when the platform-specific subheader is present), or transparent Ethernet bridging.
#[inline(always)]
fn parse_gre<P: PacketView>(p: &P, off: usize, roce_port: u16) -> Frame {
    let Some(gre) = p.load::<GreHdr>(off) else {
        return Frame::Other(Counter::Malformed);
    };
    if gre.version() != 0 {
        return Frame::Other(Counter::NonRoce);
    }
    let mut inner = off + gre.header_len();
    match gre.protocol() {
        GRE_PROTO_TEB => {}
        // Type II sets the sequence flag and has a header; type I has neither.
        GRE_PROTO_ERSPAN_I_II if gre.sequence_present() => {
            if p.load::<ErspanIIHdr>(inner).is_none() {
                return Frame::Other(Counter::Malformed);
            }
            inner += ErspanIIHdr::LEN;
        }
        GRE_PROTO_ERSPAN_I_II => {}
        GRE_PROTO_ERSPAN_III => {
            let Some(h) = p.load::<ErspanIIIHdr>(inner) else {
                return Frame::Other(Counter::Malformed);
            };
            inner += ErspanIIIHdr::LEN + if h.has_platform_subheader() { 8 } else { 0 };
        }
        _ => return Frame::Other(Counter::NonRoce),
    }
    parse_l2::<P, false>(p, inner, roce_port)
}
#[inline(always)]
fn parse_mac_control<P: PacketView>(p: &P, off: usize, src_mac: [u8; 6]) -> Frame {
    let Some(op) = p.load::<MacControlOp>(off) else {
        return Frame::Other(Counter::Malformed);
    };
    match op.opcode() {
        MAC_CONTROL_PFC => match p.load::<PfcBody>(off) {
            Some(body) => Frame::Pfc {
                src_mac,
                class_enable: body.class_enable(),
                body,
            },
            None => Frame::Other(Counter::Malformed),
        },
        MAC_CONTROL_PAUSE => match p.load::<PauseBody>(off) {
            Some(body) => Frame::Pause {
                src_mac,
                quanta: body.quanta(),
            },
            None => Frame::Other(Counter::Malformed),
        },
        _ => Frame::Other(Counter::NonRoce),
    }
}

#[inline(always)]
fn parse_ipv4<P: PacketView, const UNWRAP: bool>(p: &P, l3: &L3) -> Frame {
    let Some(ip) = p.load::<Ipv4Hdr>(l3.off) else {
        return Frame::Other(Counter::Malformed);
    };
    let ihl = ip.header_len();
    if ip.version() != 4 || ihl < Ipv4Hdr::LEN {
        return Frame::Other(Counter::Malformed);
    }
    if ip.frag_offset() != 0 {
        return Frame::Other(Counter::IpFragments);
    }
    if UNWRAP && ip.protocol() == IPPROTO_GRE {
        return parse_gre(p, l3.off + ihl, l3.roce_port);
    }
    if ip.protocol() != IPPROTO_UDP {
        return Frame::Other(Counter::NonRoce);
    }
    // Options end where the UDP header begins; a frame cut inside them is caught by the UDP
    // load below (it starts after them).
    let ips = Ips {
        src: ipv4_mapped(ip.src()),
        dst: ipv4_mapped(ip.dst()),
        tos: ip.tos(),
    };
    parse_udp(p, l3.off + ihl, &ips, l3)
}

#[inline(always)]
fn parse_ipv6<P: PacketView, const UNWRAP: bool>(p: &P, l3: &L3) -> Frame {
    let Some(ip) = p.load::<Ipv6Hdr>(l3.off) else {
        return Frame::Other(Counter::Malformed);
    };
    if ip.version() != 6 {
        return Frame::Other(Counter::Malformed);
    }
    let nh = ip.next_header();
    if UNWRAP && nh == IPPROTO_GRE {
        return parse_gre(p, l3.off + Ipv6Hdr::LEN, l3.roce_port);
    }
    if nh != IPPROTO_UDP {
        return Frame::Other(if is_ipv6_extension(nh) {
            Counter::Unsupported
        } else {
            Counter::NonRoce
        });
    }
    let ips = Ips {
        src: ip.src(),
        dst: ip.dst(),
        tos: ip.traffic_class(),
    };
    parse_udp(p, l3.off + Ipv6Hdr::LEN, &ips, l3)
}

/// Addresses and traffic class of the IP header.
struct Ips {
    src: [u8; 16],
    dst: [u8; 16],
    tos: u8,
}

#[inline(always)]
fn parse_udp<P: PacketView>(p: &P, off: usize, ips: &Ips, l3: &L3) -> Frame {
    let Some(udp) = p.load::<UdpHdr>(off) else {
        return Frame::Other(Counter::Malformed);
    };
    // Only the destination port identifies RoCEv2; the source port is per-QP ECMP entropy.
    if udp.dst_port() != l3.roce_port {
        return Frame::Other(Counter::NonRoce);
    }
    let bth_off = off + UdpHdr::LEN;
    p.bth_at(bth_off);
    let Some(bth) = p.load::<Bth>(bth_off) else {
        return Frame::Other(Counter::Malformed);
    };
    let op = bth.opcode();
    let ext = bth_off + Bth::LEN + opcode::ext_prefix_len(op);
    let mut dma_len = 0;
    let mut syndrome = 0;
    if opcode::has_reth(op) {
        match p.load::<Reth>(ext) {
            Some(reth) => dma_len = reth.dma_len(),
            None => return Frame::Other(Counter::Malformed),
        }
    } else if opcode::has_aeth(op) {
        match p.load::<Aeth>(ext) {
            Some(aeth) => syndrome = aeth.syndrome(),
            None => return Frame::Other(Counter::Malformed),
        }
    }
    let tos = ips.tos;
    Frame::Roce {
        src_ip: ips.src,
        dst_ip: ips.dst,
        pkt: RocePacket {
            opcode: op,
            psn: bth.psn(),
            dst_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            dma_len,
            syndrome,
            ecn: tos & 0x3,
            dscp: tos >> 2,
            pcp: l3.pcp,
            udp_sport: udp.src_port(),
            // The RoCE frame itself: for a mirrored frame, without the ERSPAN/GRE wrapping.
            frame_len: p.frame_len().saturating_sub(l3.base as u32),
        },
    }
}
