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

/// Parse one frame. `roce_port` is the RoCEv2 UDP destination port.
#[inline(always)]
pub fn parse<P: PacketView>(p: &P, roce_port: u16) -> Frame {
    let malformed = Frame::Other(Counter::Malformed);
    let Some(eth) = p.load::<EthHdr>(0) else {
        return malformed;
    };
    let mut off = EthHdr::LEN;
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
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(p, off, pcp, roce_port),
        ETHERTYPE_IPV6 => parse_ipv6(p, off, pcp, roce_port),
        ETHERTYPE_MAC_CONTROL => parse_mac_control(p, off, eth.src_mac()),
        _ => Frame::Other(Counter::NonRoce),
    }
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
fn parse_ipv4<P: PacketView>(p: &P, off: usize, pcp: u8, roce_port: u16) -> Frame {
    let Some(ip) = p.load::<Ipv4Hdr>(off) else {
        return Frame::Other(Counter::Malformed);
    };
    let ihl = ip.header_len();
    if ip.version() != 4 || ihl < Ipv4Hdr::LEN {
        return Frame::Other(Counter::Malformed);
    }
    if ip.frag_offset() != 0 {
        return Frame::Other(Counter::IpFragments);
    }
    if ip.protocol() != IPPROTO_UDP {
        return Frame::Other(Counter::NonRoce);
    }
    // Options end where the UDP header begins; a frame cut inside them is caught by the UDP
    // load below (it starts after them).
    parse_udp(
        p,
        off + ihl,
        ipv4_mapped(ip.src()),
        ipv4_mapped(ip.dst()),
        ip.tos(),
        pcp,
        roce_port,
    )
}

#[inline(always)]
fn parse_ipv6<P: PacketView>(p: &P, off: usize, pcp: u8, roce_port: u16) -> Frame {
    let Some(ip) = p.load::<Ipv6Hdr>(off) else {
        return Frame::Other(Counter::Malformed);
    };
    if ip.version() != 6 {
        return Frame::Other(Counter::Malformed);
    }
    let nh = ip.next_header();
    if nh != IPPROTO_UDP {
        return Frame::Other(if is_ipv6_extension(nh) {
            Counter::Unsupported
        } else {
            Counter::NonRoce
        });
    }
    parse_udp(
        p,
        off + Ipv6Hdr::LEN,
        ip.src(),
        ip.dst(),
        ip.traffic_class(),
        pcp,
        roce_port,
    )
}

#[inline(always)]
fn parse_udp<P: PacketView>(
    p: &P,
    off: usize,
    src_ip: [u8; 16],
    dst_ip: [u8; 16],
    tos: u8,
    pcp: u8,
    roce_port: u16,
) -> Frame {
    let Some(udp) = p.load::<UdpHdr>(off) else {
        return Frame::Other(Counter::Malformed);
    };
    // Only the destination port identifies RoCEv2; the source port is per-QP ECMP entropy.
    if udp.dst_port() != roce_port {
        return Frame::Other(Counter::NonRoce);
    }
    let bth_off = off + UdpHdr::LEN;
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
    Frame::Roce {
        src_ip,
        dst_ip,
        pkt: RocePacket {
            opcode: op,
            psn: bth.psn(),
            dst_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            dma_len,
            syndrome,
            ecn: tos & 0x3,
            dscp: tos >> 2,
            pcp,
            udp_sport: udp.src_port(),
            frame_len: p.frame_len(),
        },
    }
}
