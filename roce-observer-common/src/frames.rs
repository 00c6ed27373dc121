//! Hand-built test frames (feature `frames`, user space only): one RoCEv2-over-IPv4 builder and
//! one PFC builder, shared by the engine's unit tests, the kernel benchmark and `cargo xtask
//! bench`, so that the wire layout is written once. The extension headers follow from the
//! opcode (the same table the parser uses): XRCETH/RDETH prefixes, DETH for UD, RETH, AETH, and
//! the 16 reserved bytes of a CNP. Checksums are left 0 (the observer does not verify them); the
//! ICRC is 4 bytes of the fill pattern.

extern crate alloc;

use alloc::vec::Vec;

use crate::opcode::{self, OP_CNP, TRANSPORT_UD};

/// One RoCEv2 frame: Ethernet (optionally one 802.1Q tag), IPv4, UDP, BTH, extension headers,
/// payload, ICRC.
#[derive(Debug, Clone, Copy)]
pub struct RoceFrame {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    /// One 802.1Q tag (VLAN 0) with this priority, or untagged.
    pub pcp: Option<u8>,
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    /// IPv4 TOS byte: DSCP << 2 | ECN.
    pub tos: u8,
    pub udp_sport: u16,
    pub udp_dport: u16,
    pub opcode: u8,
    pub dest_qp: u32,
    pub psn: u32,
    pub ack_req: bool,
    /// RETH DMA length (opcodes with a RETH).
    pub dma_len: u32,
    /// AETH syndrome (opcodes with an AETH); the MSN is 1.
    pub syndrome: u8,
    /// Payload bytes after the headers (ICRC not included).
    pub payload: usize,
    /// Byte the payload and the ICRC are filled with.
    pub fill: u8,
}

impl RoceFrame {
    /// A frame 192.0.2.1 -> 192.0.2.2 (02:00:00:00:00:01 -> 02:00:00:00:00:02), UDP 49152 ->
    /// 4791, untagged, TOS 0, no payload: set the rest with struct update syntax.
    pub fn new(opcode: u8, dest_qp: u32, psn: u32) -> Self {
        RoceFrame {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
            pcp: None,
            src_ip: [192, 0, 2, 1],
            dst_ip: [192, 0, 2, 2],
            tos: 0,
            udp_sport: 49152,
            udp_dport: crate::ROCE_V2_PORT,
            opcode,
            dest_qp,
            psn,
            ack_req: false,
            dma_len: 0,
            syndrome: 0,
            payload: 0,
            fill: 0,
        }
    }

    /// Zero-filled bytes right after the BTH: the XRCETH/RDETH prefixes, and the DETH of UD.
    fn prefix_len(&self) -> usize {
        let deth = if opcode::transport(self.opcode) == TRANSPORT_UD {
            8
        } else {
            0
        };
        opcode::ext_prefix_len(self.opcode) + deth
    }

    /// The RETH, AETH or CNP reserved bytes after the prefixes.
    fn header_len(&self) -> usize {
        let op = self.opcode;
        if op == OP_CNP || opcode::has_reth(op) {
            16
        } else if opcode::has_aeth(op) {
            4
        } else {
            0
        }
    }

    /// Bytes between the BTH and the payload, as the opcode defines them.
    pub fn ext_len(&self) -> usize {
        self.prefix_len() + self.header_len()
    }

    /// Append the frame to `out`.
    pub fn build_into(&self, out: &mut Vec<u8>) {
        let op = self.opcode;
        let udp_len = 8 + 12 + self.ext_len() + self.payload + 4;
        out.extend_from_slice(&self.dst_mac);
        out.extend_from_slice(&self.src_mac);
        if let Some(pcp) = self.pcp {
            out.extend_from_slice(&[0x81, 0x00, pcp << 5, 0]);
        }
        out.extend_from_slice(&[0x08, 0x00]);
        // IPv4: no options, DF, TTL 64, UDP; checksum left 0.
        out.extend_from_slice(&[0x45, self.tos]);
        out.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
        out.extend_from_slice(&self.src_ip);
        out.extend_from_slice(&self.dst_ip);
        out.extend_from_slice(&self.udp_sport.to_be_bytes());
        out.extend_from_slice(&self.udp_dport.to_be_bytes());
        out.extend_from_slice(&(udp_len as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        // BTH: opcode, flags 0, P_Key 0xffff, reserved, dest QP, AckReq, PSN.
        out.extend_from_slice(&[op, 0, 0xff, 0xff, 0]);
        out.extend_from_slice(&self.dest_qp.to_be_bytes()[1..]);
        out.push(if self.ack_req { 0x80 } else { 0 });
        out.extend_from_slice(&self.psn.to_be_bytes()[1..]);
        out.resize(out.len() + self.prefix_len(), 0);
        if op == OP_CNP {
            out.resize(out.len() + 16, 0);
        } else if opcode::has_reth(op) {
            // virtual address and R_Key: zeros
            out.resize(out.len() + 12, 0);
            out.extend_from_slice(&self.dma_len.to_be_bytes());
        } else if opcode::has_aeth(op) {
            out.extend_from_slice(&[self.syndrome, 0, 0, 1]);
        }
        out.resize(out.len() + self.payload + 4, self.fill);
    }

    /// The frame as a new vector.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.payload);
        self.build_into(&mut out);
        out
    }
}

/// A PFC frame (MAC control 0x0101) from 02:00:00:00:01:`mac_last` to 01:80:c2:00:00:01,
/// padded to 60 bytes.
pub fn pfc_frame(mac_last: u8, class_enable: u16, quanta: [u16; 8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[1, 0x80, 0xc2, 0, 0, 1, 2, 0, 0, 0, 1, mac_last, 0x88, 0x08]);
    f.extend_from_slice(&[0x01, 0x01]);
    f.extend_from_slice(&class_enable.to_be_bytes());
    for q in quanta {
        f.extend_from_slice(&q.to_be_bytes());
    }
    f.resize(60, 0);
    f
}

/// How [`mirrored`] wraps a frame.
#[derive(Debug, Clone, Copy)]
pub enum Mirror {
    /// ERSPAN type II: GRE 0x88BE with a sequence number, 8-byte ERSPAN header.
    Erspan2 { session: u16, seq: u32 },
    /// ERSPAN type III: GRE 0x22EB, 12-byte ERSPAN header (no platform subheader).
    Erspan3 { session: u16 },
    /// VXLAN on UDP 4789.
    Vxlan { vni: u32 },
}

/// `inner` (a whole Ethernet frame) as a switch at 198.51.100.1 mirrors it to 198.51.100.2:
/// outer Ethernet (untagged), IPv4, then the encapsulation of `how`.
pub fn mirrored(inner: &[u8], how: Mirror) -> Vec<u8> {
    let mut wrap = Vec::with_capacity(24);
    let proto = match how {
        Mirror::Erspan2 { session, seq } => {
            wrap.extend_from_slice(&[0x10, 0, 0x88, 0xbe]);
            wrap.extend_from_slice(&seq.to_be_bytes());
            // Version 1 (type II), VLAN 0, COS 0, session; index 0.
            wrap.extend_from_slice(&(0x1000u16).to_be_bytes());
            wrap.extend_from_slice(&(session & 0x3ff).to_be_bytes());
            wrap.extend_from_slice(&[0; 4]);
            47
        }
        Mirror::Erspan3 { session } => {
            wrap.extend_from_slice(&[0, 0, 0x22, 0xeb]);
            // Version 2 (type III), VLAN 0, session; timestamp; SGT, flags (O clear).
            wrap.extend_from_slice(&(0x2000u16).to_be_bytes());
            wrap.extend_from_slice(&(session & 0x3ff).to_be_bytes());
            wrap.extend_from_slice(&[0; 8]);
            47
        }
        Mirror::Vxlan { vni } => {
            let udp_len = (8 + 8 + inner.len()) as u16;
            wrap.extend_from_slice(&[0xd0, 0x00, 0x12, 0xb5]);
            wrap.extend_from_slice(&udp_len.to_be_bytes());
            wrap.extend_from_slice(&[0, 0, 0x08, 0, 0, 0]);
            wrap.extend_from_slice(&(vni << 8).to_be_bytes());
            17
        }
    };
    let total = (20 + wrap.len() + inner.len()) as u16;
    let mut f = Vec::with_capacity(34 + wrap.len() + inner.len());
    f.extend_from_slice(&[2, 0, 0, 0, 0, 6, 2, 0, 0, 0, 0, 5, 0x08, 0x00]);
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&[198, 51, 100, 1, 198, 51, 100, 2]);
    f.extend_from_slice(&wrap);
    f.extend_from_slice(inner);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        headers::Header,
        parse::{Frame, PacketView, parse},
    };

    /// A slice view that records where the parser found the BTH.
    struct View<'a>(&'a [u8], core::cell::Cell<Option<usize>>);

    impl<'a> View<'a> {
        fn new(bytes: &'a [u8]) -> Self {
            View(bytes, core::cell::Cell::new(None))
        }
    }

    impl PacketView for View<'_> {
        fn frame_len(&self) -> u32 {
            self.0.len() as u32
        }
        fn load<T: Header>(&self, offset: usize) -> Option<T> {
            let bytes = self
                .0
                .get(offset..offset.checked_add(core::mem::size_of::<T>())?)?;
            // SAFETY: `bytes` holds size_of::<T>() bytes; `Header` types are byte arrays, valid
            // for any bit pattern and any alignment.
            Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
        }
        fn bth_at(&self, offset: usize) {
            self.1.set(Some(offset));
        }
    }

    #[test]
    fn mirrored_frames_parse_as_their_inner_frame() {
        let inner = RoceFrame::new(0x04, 0x12, 9).build();
        for how in [
            Mirror::Erspan2 { session: 7, seq: 1 },
            Mirror::Erspan3 { session: 7 },
            Mirror::Vxlan { vni: 5001 },
        ] {
            let f = mirrored(&inner, how);
            match crate::parse::parse_mirrored(
                &View::new(&f),
                Default::default(),
                &mut crate::mirror::MirrorPoint::zeroed(),
            ) {
                Frame::Roce { pkt, .. } => {
                    assert_eq!(
                        (pkt.psn, pkt.frame_len as usize),
                        (9, inner.len()),
                        "{how:?}"
                    )
                }
                _ => panic!("{how:?} not unwrapped"),
            }
            assert!(matches!(
                parse(&View::new(&f), crate::ROCE_V2_PORT),
                Frame::Other(crate::Counter::NonRoce)
            ));
        }
    }

    /// What the shared parser reads back from a built frame.
    fn parsed(f: &RoceFrame) -> crate::RocePacket {
        let bytes = f.build();
        assert_eq!(
            bytes.len(),
            14 + 20 + 8 + 12 + f.ext_len() + f.payload + 4 + if f.pcp.is_some() { 4 } else { 0 }
        );
        match parse(&View::new(&bytes), crate::ROCE_V2_PORT) {
            Frame::Roce { pkt, .. } => pkt,
            _ => panic!("not parsed as RoCE: opcode {:#x}", f.opcode),
        }
    }

    #[test]
    fn the_parser_reads_back_what_was_built() {
        let write = RoceFrame {
            dma_len: 8192,
            ack_req: true,
            tos: (26 << 2) | 2,
            pcp: Some(3),
            payload: 1024,
            ..RoceFrame::new(opcode::RDMA_WRITE_FIRST, 0x12, 0xab_cdef)
        };
        let p = parsed(&write);
        assert_eq!(
            (p.opcode, p.dst_qp, p.psn, p.ack_req),
            (0x06, 0x12, 0xab_cdef, true)
        );
        assert_eq!((p.dma_len, p.dscp, p.ecn, p.pcp), (8192, 26, 2, 3));
        let nak = RoceFrame {
            syndrome: 0x60,
            ..RoceFrame::new(opcode::ACKNOWLEDGE, 0x11, 5)
        };
        assert_eq!(parsed(&nak).syndrome, 0x60);
        // UD SEND_ONLY carries a DETH, CNP 16 reserved bytes
        assert_eq!(RoceFrame::new(0x64, 1, 1).ext_len(), 8);
        assert_eq!(RoceFrame::new(OP_CNP, 1, 1).ext_len(), 16);
        assert_eq!(parsed(&RoceFrame::new(OP_CNP, 1, 1)).opcode, OP_CNP);
    }

    #[test]
    fn pfc_frame_layout() {
        let f = pfc_frame(7, 0x00ff, [0xffff; 8]);
        assert_eq!(f.len(), 60);
        assert_eq!((f[11], &f[12..16]), (7, &[0x88, 0x08, 0x01, 0x01][..]));
        assert!(matches!(
            parse(&View::new(&f), crate::ROCE_V2_PORT),
            Frame::Pfc {
                class_enable: 0x00ff,
                ..
            }
        ));
    }

    #[test]
    fn the_parser_says_where_the_bth_is() {
        for (pcp, at) in [(None, 14 + 20 + 8), (Some(5), 14 + 4 + 20 + 8)] {
            let bytes = RoceFrame {
                pcp,
                ..RoceFrame::new(opcode::ACKNOWLEDGE, 0x11, 0x1234)
            }
            .build();
            let view = View::new(&bytes);
            assert!(matches!(
                parse(&view, crate::ROCE_V2_PORT),
                Frame::Roce { .. }
            ));
            assert_eq!(view.1.get(), Some(at));
            assert_eq!(&bytes[at + 9..at + 12], &[0x00, 0x12, 0x34]);
        }
    }
}
