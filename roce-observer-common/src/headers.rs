//! Wire headers as byte arrays with `LEN` and big-endian getters, so that they can be loaded
//! from any offset (no alignment) in the kernel and in user space alike.

macro_rules! be16 {
    ($b:expr, $i:expr) => {
        u16::from_be_bytes([$b[$i], $b[$i + 1]])
    };
}
macro_rules! be24 {
    ($b:expr, $i:expr) => {
        u32::from_be_bytes([0, $b[$i], $b[$i + 1], $b[$i + 2]])
    };
}
macro_rules! be32 {
    ($b:expr, $i:expr) => {
        u32::from_be_bytes([$b[$i], $b[$i + 1], $b[$i + 2], $b[$i + 3]])
    };
}

/// A wire header that [`crate::packet::PacketView::load`] may copy from any offset of a frame.
///
/// # Safety
/// Implement only for `#[repr(C)]` types made of `u8` arrays: any bit pattern is a valid value
/// and alignment is 1, so an unaligned copy of raw packet bytes is always a valid `Self`.
pub unsafe trait Header: Copy {}

macro_rules! byte_headers {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: a #[repr(C)] newtype over a u8 array (see the trait's contract).
            unsafe impl Header for $t {}
        )*
    };
}

byte_headers!(
    EthHdr,
    VlanHdr,
    Ipv4Hdr,
    Ipv6Hdr,
    UdpHdr,
    Bth,
    Reth,
    Aeth,
    PfcBody,
    PauseBody,
    MacControlOp,
    GreHdr,
    ErspanIIHdr,
    ErspanIIIHdr,
    Word32,
    VxlanHdr,
);

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
pub const MAC_CONTROL_PAUSE: u16 = 0x0001;
pub const MAC_CONTROL_PFC: u16 = 0x0101;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_GRE: u8 = 47;
/// GRE payload types that carry a mirrored Ethernet frame.
pub const GRE_PROTO_ERSPAN_I_II: u16 = 0x88BE;
pub const GRE_PROTO_ERSPAN_III: u16 = 0x22EB;
pub const GRE_PROTO_TEB: u16 = 0x6558;
/// IANA UDP port of VXLAN (RFC 7348); the observer's `--vxlan-port` changes it.
pub const VXLAN_PORT: u16 = 4789;

/// Ethernet II header.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EthHdr(pub [u8; 14]);
impl EthHdr {
    pub const LEN: usize = 14;
    #[inline(always)]
    pub fn src_mac(&self) -> [u8; 6] {
        [
            self.0[6], self.0[7], self.0[8], self.0[9], self.0[10], self.0[11],
        ]
    }
    #[inline(always)]
    pub fn ethertype(&self) -> u16 {
        be16!(self.0, 12)
    }
}

/// 802.1Q / 802.1ad tag (TCI + inner EtherType), after the outer EtherType.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VlanHdr(pub [u8; 4]);
impl VlanHdr {
    pub const LEN: usize = 4;
    #[inline(always)]
    pub fn pcp(&self) -> u8 {
        self.0[0] >> 5
    }
    #[inline(always)]
    pub fn ethertype(&self) -> u16 {
        be16!(self.0, 2)
    }
}

/// IPv4 header without options.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Ipv4Hdr(pub [u8; 20]);
impl Ipv4Hdr {
    pub const LEN: usize = 20;
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.0[0] >> 4
    }
    /// Header length in bytes (IHL x 4).
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        ((self.0[0] & 0x0f) as usize) * 4
    }
    #[inline(always)]
    pub fn tos(&self) -> u8 {
        self.0[1]
    }
    /// Fragment offset in 8-byte units.
    #[inline(always)]
    pub fn frag_offset(&self) -> u16 {
        be16!(self.0, 6) & 0x1fff
    }
    #[inline(always)]
    pub fn protocol(&self) -> u8 {
        self.0[9]
    }
    #[inline(always)]
    pub fn src(&self) -> [u8; 4] {
        [self.0[12], self.0[13], self.0[14], self.0[15]]
    }
    #[inline(always)]
    pub fn dst(&self) -> [u8; 4] {
        [self.0[16], self.0[17], self.0[18], self.0[19]]
    }
}

/// IPv6 fixed header.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Ipv6Hdr(pub [u8; 40]);
impl Ipv6Hdr {
    pub const LEN: usize = 40;
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.0[0] >> 4
    }
    #[inline(always)]
    pub fn traffic_class(&self) -> u8 {
        (self.0[0] << 4) | (self.0[1] >> 4)
    }
    #[inline(always)]
    pub fn next_header(&self) -> u8 {
        self.0[6]
    }
    #[inline(always)]
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.0[8..24]);
        a
    }
    #[inline(always)]
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.0[24..40]);
        a
    }
}

/// IPv6 next-header values that are extension headers (not parsed: counted as unsupported).
#[inline(always)]
pub const fn is_ipv6_extension(nh: u8) -> bool {
    matches!(nh, 0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254)
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct UdpHdr(pub [u8; 8]);
impl UdpHdr {
    pub const LEN: usize = 8;
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        be16!(self.0, 0)
    }
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        be16!(self.0, 2)
    }
}

/// InfiniBand Base Transport Header (12 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Bth(pub [u8; 12]);
impl Bth {
    pub const LEN: usize = 12;
    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    #[inline(always)]
    pub fn solicited(&self) -> bool {
        self.0[1] & 0x80 != 0
    }
    #[inline(always)]
    pub fn pad_count(&self) -> u8 {
        (self.0[1] >> 4) & 0x3
    }
    #[inline(always)]
    pub fn pkey(&self) -> u16 {
        be16!(self.0, 2)
    }
    #[inline(always)]
    pub fn fecn(&self) -> bool {
        self.0[4] & 0x80 != 0
    }
    #[inline(always)]
    pub fn becn(&self) -> bool {
        self.0[4] & 0x40 != 0
    }
    #[inline(always)]
    pub fn dest_qp(&self) -> u32 {
        be24!(self.0, 5)
    }
    #[inline(always)]
    pub fn ack_req(&self) -> bool {
        self.0[8] & 0x80 != 0
    }
    #[inline(always)]
    pub fn psn(&self) -> u32 {
        be24!(self.0, 9)
    }
}

/// RDMA Extended Transport Header (16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Reth(pub [u8; 16]);
impl Reth {
    pub const LEN: usize = 16;
    #[inline(always)]
    pub fn rkey(&self) -> u32 {
        be32!(self.0, 8)
    }
    #[inline(always)]
    pub fn dma_len(&self) -> u32 {
        be32!(self.0, 12)
    }
}

/// ACK Extended Transport Header (4 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Aeth(pub [u8; 4]);
impl Aeth {
    pub const LEN: usize = 4;
    #[inline(always)]
    pub fn syndrome(&self) -> u8 {
        self.0[0]
    }
    #[inline(always)]
    pub fn msn(&self) -> u32 {
        be24!(self.0, 1)
    }
}

/// PFC body after the EtherType: opcode, class-enable vector, eight pause times.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PfcBody(pub [u8; 20]);
impl PfcBody {
    pub const LEN: usize = 20;
    #[inline(always)]
    pub fn class_enable(&self) -> u16 {
        be16!(self.0, 2)
    }
    #[inline(always)]
    pub fn quanta(&self, priority: usize) -> u16 {
        let i = 4 + (priority & 7) * 2;
        u16::from_be_bytes([self.0[i], self.0[i + 1]])
    }
}

/// Legacy PAUSE body after the EtherType: opcode, pause time.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PauseBody(pub [u8; 4]);
impl PauseBody {
    pub const LEN: usize = 4;
    #[inline(always)]
    pub fn quanta(&self) -> u16 {
        be16!(self.0, 2)
    }
}

/// GRE base header (RFC 2784/2890): flags and version, protocol type. Optional checksum, key
/// and sequence words follow when their flags are set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GreHdr(pub [u8; 4]);
impl GreHdr {
    pub const LEN: usize = 4;
    /// Bytes of GRE header, optional words included.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        let f = self.0[0];
        4 + 4 * (((f >> 7) & 1) + ((f >> 5) & 1) + ((f >> 4) & 1)) as usize
    }
    #[inline(always)]
    pub fn sequence_present(&self) -> bool {
        self.0[0] & 0x10 != 0
    }
    #[inline(always)]
    pub fn key_present(&self) -> bool {
        self.0[0] & 0x20 != 0
    }
    /// Bytes of the optional checksum word (it comes first, then the key, then the sequence).
    #[inline(always)]
    pub fn checksum_len(&self) -> usize {
        4 * ((self.0[0] >> 7) & 1) as usize
    }
    #[inline(always)]
    pub fn version(&self) -> u8 {
        self.0[1] & 0x07
    }
    #[inline(always)]
    pub fn protocol(&self) -> u16 {
        be16!(self.0, 2)
    }
}

/// One big-endian 32-bit word (a GRE optional word).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Word32(pub [u8; 4]);
impl Word32 {
    #[inline(always)]
    pub fn get(&self) -> u32 {
        be32!(self.0, 0)
    }
}

/// ERSPAN type II header (8 bytes); type I has none.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ErspanIIHdr(pub [u8; 8]);
impl ErspanIIHdr {
    pub const LEN: usize = 8;
    /// The 10-bit session ID.
    #[inline(always)]
    pub fn session_id(&self) -> u32 {
        (be16!(self.0, 2) & 0x3ff) as u32
    }
}

/// ERSPAN type III header (12 bytes); an 8-byte platform-specific subheader follows when the
/// O flag (last bit) is set.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ErspanIIIHdr(pub [u8; 12]);
impl ErspanIIIHdr {
    pub const LEN: usize = 12;
    /// The 10-bit session ID.
    #[inline(always)]
    pub fn session_id(&self) -> u32 {
        (be16!(self.0, 2) & 0x3ff) as u32
    }
    #[inline(always)]
    pub fn has_platform_subheader(&self) -> bool {
        self.0[11] & 1 != 0
    }
}

/// Length of the ERSPAN type III platform-specific subheader.
pub const ERSPAN_PLATFORM_LEN: usize = 8;

/// VXLAN header (RFC 7348, 8 bytes): flags, VNI. With the VXLAN-GPE P flag (0x04) the fourth
/// byte names the inner protocol, 3 being Ethernet.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VxlanHdr(pub [u8; 8]);
impl VxlanHdr {
    pub const LEN: usize = 8;
    /// The I flag: the VNI is valid.
    #[inline(always)]
    pub fn vni_valid(&self) -> bool {
        self.0[0] & 0x08 != 0
    }
    /// Whether the inner frame is Ethernet: always on plain VXLAN; on VXLAN-GPE only when the
    /// next-protocol byte says so.
    #[inline(always)]
    pub fn carries_ethernet(&self) -> bool {
        self.0[0] & 0x04 == 0 || self.0[3] == 3
    }
    /// The 24-bit VXLAN network identifier.
    #[inline(always)]
    pub fn vni(&self) -> u32 {
        be32!(self.0, 4) >> 8
    }
}

/// MAC control opcode (first two bytes after the EtherType).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MacControlOp(pub [u8; 2]);
impl MacControlOp {
    #[inline(always)]
    pub fn opcode(&self) -> u16 {
        be16!(self.0, 0)
    }
}

/// Outer VLAN priority of an untagged frame (`FlowStats::pcp`).
pub const PCP_UNTAGGED: u8 = 0xff;

/// Whether `ethertype` is an 802.1Q or 802.1ad tag.
#[inline(always)]
pub fn is_vlan(ethertype: u16) -> bool {
    ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ
}

/// IPv4-mapped IPv6 form of an IPv4 address.
#[inline(always)]
pub fn ipv4_mapped(a: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
    ]
}

/// `*a = [0; 16]`, one store a byte in the BPF programs (a plain zero assignment becomes a
/// call to the object's byte-wise `memset` there).
#[inline(always)]
pub fn zero16(a: &mut [u8; 16]) {
    #[cfg(target_arch = "bpf")]
    {
        let p = a.as_mut_ptr();
        let mut i = 0;
        while i < 16 {
            // SAFETY: byte i of `a`; volatile so that the stores are not merged into a memset.
            unsafe { core::ptr::write_volatile(p.add(i), 0) };
            i += 1;
        }
    }
    #[cfg(not(target_arch = "bpf"))]
    {
        *a = [0; 16];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bth_layout_is_pinned() {
        assert_eq!(core::mem::size_of::<Bth>(), Bth::LEN);
        // RC RDMA_READ_REQUEST, SE, P_Key 0xffff, BECN, QP 0x123456, AckReq, PSN 0xabcdef.
        let b = Bth([
            0x0c, 0x80, 0xff, 0xff, 0x40, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef,
        ]);
        assert_eq!(b.opcode(), 0x0c);
        assert!(b.solicited());
        assert_eq!(b.pkey(), 0xffff);
        assert!(b.becn() && !b.fecn());
        assert_eq!(b.dest_qp(), 0x123456);
        assert!(b.ack_req());
        assert_eq!(b.psn(), 0xabcdef);
    }

    #[test]
    fn ext_headers() {
        let r = Reth([0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 7, 0, 0, 0x30, 0]);
        assert_eq!(r.rkey(), 7);
        assert_eq!(r.dma_len(), 12288);
        let a = Aeth([0x60, 0, 1, 2]);
        assert_eq!(a.syndrome(), 0x60);
        assert_eq!(a.msn(), 0x102);
        let v = VlanHdr([0x60, 0x05, 0x08, 0x00]);
        assert_eq!(v.pcp(), 3);
        assert_eq!(v.ethertype(), ETHERTYPE_IPV4);
        let mut p = [0u8; 20];
        p[2] = 0x00;
        p[3] = 0x09;
        p[4] = 0xff;
        p[5] = 0xff;
        p[4 + 3 * 2 + 1] = 7;
        let pfc = PfcBody(p);
        assert_eq!(pfc.class_enable(), 9);
        assert_eq!(pfc.quanta(0), 0xffff);
        assert_eq!(pfc.quanta(3), 7);
    }
}
