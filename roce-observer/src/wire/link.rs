//! Link-layer headers of captures that are not Ethernet: Linux "cooked" captures (LINUX_SLL,
//! 16 bytes, and LINUX_SLL2, 20 bytes, what `tcpdump -i any` writes) and bare IP (RAW,
//! IPV4, IPV6). Each header is read field by field with its length checked, and turned into
//! what the shared parser needs to run on the rest of the frame as it runs on Ethernet
//! (roce_observer_common::parse): an Ethernet header to read in front of the network layer
//! (no destination MAC, the source MAC when the header has one, the protocol as EtherType),
//! the direction the packet type gives, and SLL2's interface index.
//!
//! Field layouts: <https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL.html> and
//! `LINKTYPE_LINUX_SLL2.html`; all multi-byte fields are big-endian.

use pcap_parser::Linktype;
use roce_observer_common::{
    Direction,
    headers::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, EthHdr},
};

/// How the frames of one capture interface begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkType {
    Ethernet,
    /// LINUX_SLL (113): `tcpdump -i any` with libpcap before 1.10.
    Sll,
    /// LINUX_SLL2 (276): `tcpdump -i any` with libpcap 1.10 and later.
    Sll2,
    /// RAW (101): IPv4 or IPv6, told apart by the version nibble.
    Raw,
    /// IPV4 (228).
    Ipv4,
    /// IPV6 (229).
    Ipv6,
}

impl LinkType {
    /// The link type's name, as pcap's list of link types spells it.
    pub fn name(self) -> &'static str {
        match self {
            LinkType::Ethernet => "ETHERNET",
            LinkType::Sll => "LINUX_SLL",
            LinkType::Sll2 => "LINUX_SLL2",
            LinkType::Raw => "RAW",
            LinkType::Ipv4 => "IPV4",
            LinkType::Ipv6 => "IPV6",
        }
    }

    /// What the observer cannot see in frames of this link type, for the reports; `None` for
    /// Ethernet.
    pub fn unseen(self) -> Option<&'static str> {
        match self {
            LinkType::Ethernet => None,
            LinkType::Sll => Some(
                "no destination MACs and no interface (one point, directions from the packet \
                 type)",
            ),
            // libpcap puts a VLAN tag the kernel stripped back only for Ethernet and
            // LINUX_SLL (pcap-linux.c, set_vlan_offset).
            LinkType::Sll2 => Some(
                "no destination MACs, and no VLAN tags the kernel stripped (no PCP: libpcap \
                 does not put them back in LINUX_SLL2)",
            ),
            LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => {
                Some("IP only: no MAC addresses, VLAN tags, PFC or PAUSE frames, and no direction")
            }
        }
    }

    /// The link types the reader understands; `None` for the others (refused or skipped).
    pub fn from_linktype(lt: Linktype) -> Option<LinkType> {
        Some(match lt.0 {
            1 => LinkType::Ethernet,
            113 => LinkType::Sll,
            276 => LinkType::Sll2,
            101 => LinkType::Raw,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            _ => return None,
        })
    }
}

/// LINUX_SLL header: packet type (2), ARPHRD type (2), address length (2), address (8,
/// zero-padded), protocol (2).
#[derive(Clone, Copy)]
pub struct SllHdr(pub [u8; 16]);

impl SllHdr {
    pub const LEN: usize = 16;

    pub fn packet_type(&self) -> u16 {
        u16::from_be_bytes([self.0[0], self.0[1]])
    }
    pub fn arphrd(&self) -> u16 {
        u16::from_be_bytes([self.0[2], self.0[3]])
    }
    pub fn addr_len(&self) -> u16 {
        u16::from_be_bytes([self.0[4], self.0[5]])
    }
    pub fn addr(&self) -> [u8; 8] {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.0[6..14]);
        a
    }
    /// An EtherType for Ethernet-like devices (values below 0x0600 name 802.2/802.3 frames).
    pub fn protocol(&self) -> u16 {
        u16::from_be_bytes([self.0[14], self.0[15]])
    }
}

/// LINUX_SLL2 header: protocol (2), reserved (2), interface index (4), ARPHRD type (2),
/// packet type (1), address length (1), address (8, zero-padded).
#[derive(Clone, Copy)]
pub struct Sll2Hdr(pub [u8; 20]);

impl Sll2Hdr {
    pub const LEN: usize = 20;

    pub fn protocol(&self) -> u16 {
        u16::from_be_bytes([self.0[0], self.0[1]])
    }
    pub fn ifindex(&self) -> u32 {
        u32::from_be_bytes([self.0[4], self.0[5], self.0[6], self.0[7]])
    }
    pub fn arphrd(&self) -> u16 {
        u16::from_be_bytes([self.0[8], self.0[9]])
    }
    pub fn packet_type(&self) -> u8 {
        self.0[10]
    }
    pub fn addr_len(&self) -> u8 {
        self.0[11]
    }
    pub fn addr(&self) -> [u8; 8] {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.0[12..20]);
        a
    }
}

/// ARPHRD types whose 6-byte address is an Ethernet MAC.
const ARPHRD_ETHER: u16 = 1;
const ARPHRD_LOOPBACK: u16 = 772;
/// The SLL packet type of a packet the host sent; 0-3 (to us, broadcast, multicast, to
/// another host) were received.
const PACKET_OUTGOING: u16 = 4;

/// What a link header said about its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cooked {
    /// The Ethernet header the shared parser reads in front of the network layer.
    pub head: [u8; EthHdr::LEN],
    /// Length of the link header: the network layer starts there.
    pub len: usize,
    /// Received or sent, from the packet type; `Capture` when the header does not say.
    pub direction: Direction,
    /// SLL2's interface index (the kernel's ifindex of the interface the packet was seen on).
    pub ifindex: Option<u32>,
}

fn direction(packet_type: u16) -> Direction {
    match packet_type {
        PACKET_OUTGOING => Direction::Egress,
        0..=3 => Direction::Ingress,
        // Not written by libpcap: say nothing rather than guess.
        _ => Direction::Capture,
    }
}

/// The source MAC, when the header's address is one.
fn mac(arphrd: u16, addr_len: u16, addr: [u8; 8]) -> [u8; 6] {
    if (arphrd == ARPHRD_ETHER || arphrd == ARPHRD_LOOPBACK) && addr_len == 6 {
        [addr[0], addr[1], addr[2], addr[3], addr[4], addr[5]]
    } else {
        [0; 6]
    }
}

fn ethernet(src_mac: [u8; 6], ethertype: u16) -> [u8; EthHdr::LEN] {
    let mut h = [0u8; EthHdr::LEN];
    // Destination MAC: not in any of these headers, left zero.
    h[6..12].copy_from_slice(&src_mac);
    h[12..14].copy_from_slice(&ethertype.to_be_bytes());
    h
}

/// Read the link header of a `link` frame. `None` when the frame is too short for its header
/// (or, for RAW, does not start with an IPv4 or IPv6 version nibble): a malformed frame.
/// Ethernet frames are not cooked: the caller parses them as they are.
pub fn cook(link: LinkType, data: &[u8]) -> Option<Cooked> {
    match link {
        LinkType::Ethernet => None,
        LinkType::Sll => {
            let h = SllHdr(data.get(..SllHdr::LEN)?.try_into().ok()?);
            // With -i any, libpcap puts a VLAN tag the kernel took off back in front of the
            // protocol field (so the protocol reads 0x8100 and the tag follows): the shared
            // parser reads it as it reads a tag on Ethernet.
            Some(Cooked {
                head: ethernet(mac(h.arphrd(), h.addr_len(), h.addr()), h.protocol()),
                len: SllHdr::LEN,
                direction: direction(h.packet_type()),
                ifindex: None,
            })
        }
        LinkType::Sll2 => {
            let h = Sll2Hdr(data.get(..Sll2Hdr::LEN)?.try_into().ok()?);
            Some(Cooked {
                head: ethernet(
                    mac(h.arphrd(), u16::from(h.addr_len()), h.addr()),
                    h.protocol(),
                ),
                len: Sll2Hdr::LEN,
                direction: direction(u16::from(h.packet_type())),
                ifindex: Some(h.ifindex()),
            })
        }
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => {
            let ethertype = match (link, data.first()? >> 4) {
                (LinkType::Ipv4, _) => ETHERTYPE_IPV4,
                (LinkType::Ipv6, _) => ETHERTYPE_IPV6,
                (_, 4) => ETHERTYPE_IPV4,
                (_, 6) => ETHERTYPE_IPV6,
                _ => return None,
            };
            Some(Cooked {
                head: ethernet([0; 6], ethertype),
                len: 0,
                direction: Direction::Capture,
                ifindex: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sll(packet_type: u16, protocol: u16) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&packet_type.to_be_bytes());
        h.extend_from_slice(&1u16.to_be_bytes());
        h.extend_from_slice(&6u16.to_be_bytes());
        h.extend_from_slice(&[2, 0, 0, 0, 0, 7, 0, 0]);
        h.extend_from_slice(&protocol.to_be_bytes());
        h
    }

    fn sll2(ifindex: u32, packet_type: u8, protocol: u16) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend_from_slice(&protocol.to_be_bytes());
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(&ifindex.to_be_bytes());
        h.extend_from_slice(&1u16.to_be_bytes());
        h.push(packet_type);
        h.push(6);
        h.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0, 0]);
        h
    }

    #[test]
    fn sll_fields_are_read_at_their_offsets() {
        let c = cook(LinkType::Sll, &sll(4, 0x86DD)).expect("whole header");
        assert_eq!(c.len, 16);
        assert_eq!(c.direction, Direction::Egress);
        assert_eq!(c.ifindex, None);
        assert_eq!(&c.head[..6], &[0; 6], "no destination MAC");
        assert_eq!(&c.head[6..12], &[2, 0, 0, 0, 0, 7]);
        assert_eq!(&c.head[12..], &[0x86, 0xDD]);
        let c = cook(LinkType::Sll, &sll(0, 0x0800)).expect("whole header");
        assert_eq!(c.direction, Direction::Ingress);
        assert_eq!(
            cook(LinkType::Sll, &sll(9, 0x0800)).map(|c| c.direction),
            Some(Direction::Capture)
        );
    }

    #[test]
    fn sll2_fields_are_read_at_their_offsets() {
        let c = cook(LinkType::Sll2, &sll2(0x0102_0304, 4, 0x0800)).expect("whole header");
        assert_eq!(c.len, 20);
        assert_eq!(c.ifindex, Some(0x0102_0304));
        assert_eq!(c.direction, Direction::Egress);
        assert_eq!(&c.head[6..12], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(&c.head[12..], &[0x08, 0x00]);
        let c = cook(LinkType::Sll2, &sll2(3, 0, 0x8808)).expect("whole header");
        assert_eq!(c.direction, Direction::Ingress);
        assert_eq!(&c.head[12..], &[0x88, 0x08]);
    }

    #[test]
    fn a_short_link_header_is_malformed() {
        for n in 0..16 {
            assert_eq!(cook(LinkType::Sll, &sll(0, 0x0800)[..n]), None, "{n} bytes");
        }
        for n in 0..20 {
            assert_eq!(
                cook(LinkType::Sll2, &sll2(1, 0, 0x0800)[..n]),
                None,
                "{n} bytes"
            );
        }
        assert_eq!(cook(LinkType::Raw, &[]), None);
        assert_eq!(cook(LinkType::Raw, &[0x50]), None, "not IPv4 or IPv6");
    }

    #[test]
    fn a_mac_only_when_the_address_is_one() {
        let mut h = sll(0, 0x0800);
        h[5] = 8; // address length 8: not a MAC
        assert_eq!(
            &cook(LinkType::Sll, &h).expect("whole").head[6..12],
            &[0; 6]
        );
        let mut h = sll(0, 0x0800);
        h[3] = 0xFF; // ARPHRD_VOID-like: not Ethernet
        assert_eq!(
            &cook(LinkType::Sll, &h).expect("whole").head[6..12],
            &[0; 6]
        );
    }

    #[test]
    fn raw_ip_is_told_apart_by_its_version() {
        let v4 = cook(LinkType::Raw, &[0x45]).expect("IPv4");
        assert_eq!((v4.len, &v4.head[12..]), (0, &[0x08, 0x00][..]));
        let v6 = cook(LinkType::Raw, &[0x60]).expect("IPv6");
        assert_eq!(&v6.head[12..], &[0x86, 0xDD]);
        assert_eq!(
            &cook(LinkType::Ipv6, &[0x60]).expect("IPv6").head[12..],
            &[0x86, 0xDD]
        );
    }
}
