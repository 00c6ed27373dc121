//! The staged frame parser shared by the kernel (XDP, TC) and user space (captures):
//! Ethernet -> up to two VLAN tags -> IPv4/IPv6 -> UDP (destination port) -> BTH -> RETH/AETH,
//! or Ethernet -> MAC control (PFC, PAUSE). [`parse_mirrored`] first finds the mirrored frame
//! inside a switch mirror (mirror.rs) and runs this same chain on it, at its offset. Each stage loads one fixed-size header through
//! [`PacketView::load`], which is bounds-checked by the implementation, so a short frame ends
//! the parse with a classification instead of a fault.

pub use crate::packet::PacketView;
use crate::{
    Counter,
    flow::nak_class,
    headers::*,
    mirror::{MirrorPoint, Outer, Ports, encap, outer},
    opcode::{self, PsnSpace},
};

/// The fields of one RoCE packet that the accounting needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RocePacket {
    pub opcode: u8,
    pub psn: u32,
    pub dst_qp: u32,
    pub ack_req: bool,
    /// RETH DMA length, 0 without a RETH.
    pub dma_len: u32,
    /// AETH syndrome, 0 without an AETH.
    pub syndrome: u8,
    pub ecn: u8,
    pub dscp: u8,
    pub pcp: u8,
    pub udp_sport: u16,
    pub frame_len: u32,
}

impl RocePacket {
    pub const fn zeroed() -> RocePacket {
        RocePacket {
            opcode: 0,
            psn: 0,
            dst_qp: 0,
            ack_req: false,
            dma_len: 0,
            syndrome: 0,
            ecn: 0,
            dscp: 0,
            pcp: 0,
            udp_sport: 0,
            frame_len: 0,
        }
    }

    /// Requests timestamped for latency: AckReq set, or a READ request.
    #[inline(always)]
    pub fn wants_timestamp(&self) -> bool {
        opcode::psn_space(self.opcode) == PsnSpace::Request
            && (self.ack_req || opcode::operation(self.opcode) == opcode::RDMA_READ_REQUEST)
    }

    /// Packets that carry a collective's data (training steps, run.rs): requests and READ
    /// responses, and UD. ACKs, NAKs and CNPs answer data and are not data.
    #[inline(always)]
    pub fn carries_data(&self) -> bool {
        matches!(
            opcode::psn_space(self.opcode),
            PsnSpace::Request | PsnSpace::ReadResponse
        ) || opcode::transport(self.opcode) == opcode::TRANSPORT_UD
    }

    /// CNPs and NAKs: the congestion and loss signals a straggler's evidence counts
    /// (training steps, run.rs).
    #[inline(always)]
    pub fn is_signal(&self) -> bool {
        opcode::transport(self.opcode) == opcode::TRANSPORT_CNP
            || (opcode::psn_space(self.opcode) == PsnSpace::Ack
                && nak_class(self.syndrome).is_some())
    }

    /// Responses that answer a timestamped request with the same PSN: ACK/NAK, atomic ACK,
    /// the first packet of a READ response.
    #[inline(always)]
    pub fn answers_request(&self) -> bool {
        match opcode::psn_space(self.opcode) {
            PsnSpace::Ack => true,
            PsnSpace::ReadResponse => matches!(
                opcode::operation(self.opcode),
                opcode::RDMA_READ_RESPONSE_FIRST | opcode::RDMA_READ_RESPONSE_ONLY
            ),
            _ => false,
        }
    }
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

/// Parse one frame. `roce_port` is the RoCEv2 UDP destination port. Mirrors are not unwrapped:
/// their frames are `non_roce`.
#[inline(always)]
pub fn parse<P: PacketView>(p: &P, roce_port: u16) -> Frame {
    parse_at(p, 0, roce_port)
}

/// [`parse`], and a switch mirror (ERSPAN type I, II, III, transparent-Ethernet GRE, VXLAN) is
/// unwrapped and the mirrored frame parsed in its place, once: a mirror of a mirror is
/// `non_roce`. The kernel programs and captures both use this.
///
/// Two passes, so that two header chains are never on the BPF stack at once: a small one over
/// the outer headers (mirror.rs) that only says where the mirrored frame starts (and leaves
/// the mirror session in `point`, which the kernel keeps in a scratch map), then the one chain
/// below at that offset. `point.key.encap` is `NONE` after it unless the frame was unwrapped.
#[inline(always)]
pub fn parse_mirrored<P: PacketView>(p: &P, ports: Ports, point: &mut MirrorPoint) -> Frame {
    point.key.encap = encap::NONE;
    let base = match outer(p, ports, point) {
        Outer::Plain => 0,
        Outer::Mirrored(base) => base,
        Outer::Bad(class) => return Frame::Other(class),
    };
    parse_at(p, base, ports.roce)
}

/// Parse the Ethernet frame that starts at `base`.
#[inline(always)]
fn parse_at<P: PacketView>(p: &P, base: usize, roce_port: u16) -> Frame {
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
        ETHERTYPE_IPV4 => parse_ipv4(p, &l3),
        ETHERTYPE_IPV6 => parse_ipv6(p, &l3),
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
fn parse_ipv4<P: PacketView>(p: &P, l3: &L3) -> Frame {
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
fn parse_ipv6<P: PacketView>(p: &P, l3: &L3) -> Frame {
    let Some(ip) = p.load::<Ipv6Hdr>(l3.off) else {
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
