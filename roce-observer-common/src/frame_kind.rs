//! Kinds of frames by header combination, for the kernel's "first frame of its kind"
//! diagnostic (`run --kernel-log`): the kernel programs compute a 6-bit kind from the parsed
//! frame and keep a 64-bit per-CPU bitmap of kinds seen; user space turns the kind back into
//! words. One definition, so the two sides cannot disagree.
//!
//! Kinds 0..32 are the frame classes that are not RoCE (`Counter` values: PFC, PAUSE, not
//! RoCE, malformed, IP fragment, unsupported); kinds 32..64 are RoCE frames as
//! `32 | ipv6 << 4 | vlan_tagged << 3 | transport` (the BTH opcode's top three bits: RC, UC,
//! RD, UD, CNP, XRC).

use crate::{Counter, headers::PCP_UNTAGGED, opcode, parse::Frame};

/// Number of kinds (bits of the bitmap).
pub const KINDS: u32 = 64;
const ROCE: u32 = 32;
const IPV6: u32 = 16;
const TAGGED: u32 = 8;

/// The kind of a parsed frame, below [`KINDS`].
#[inline(always)]
pub fn kind(frame: &Frame) -> u32 {
    match frame {
        Frame::Roce { src_ip, pkt, .. } => {
            let v4 = src_ip[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
            // A volatile read stays inside this arm. A plain one, LLVM hoisted above the
            // match: a read of a stack slot that the other kinds of frames never write, which
            // the 5.10 verifier refuses ("invalid read from stack").
            // SAFETY: a read of a field of a live, initialised `Frame`.
            let pcp = unsafe { core::ptr::read_volatile(&pkt.pcp) };
            ROCE | if v4 { 0 } else { IPV6 }
                | if pcp == PCP_UNTAGGED { 0 } else { TAGGED }
                | u32::from(opcode::transport(pkt.opcode))
        }
        Frame::Pfc { .. } => Counter::PfcFrames as u32,
        Frame::Pause { .. } => Counter::Pause8023x as u32,
        Frame::Other(class) => *class as u32 % ROCE,
    }
}

/// What a kind means, e.g. "RoCE IPv4 VLAN-tagged RC (kind 40)" or "pfc_frames (kind 2)".
pub struct Described(pub u32);

impl core::fmt::Display for Described {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let kind = self.0;
        if kind >= KINDS {
            return write!(f, "unknown (kind {kind})");
        }
        if kind & ROCE == 0 {
            let class = Counter::ALL
                .iter()
                .find(|c| **c as u32 == kind)
                .map_or("unknown", |c| c.name());
            return write!(f, "{class} (kind {kind})");
        }
        write!(
            f,
            "RoCE {} {} {} (kind {kind})",
            if kind & IPV6 != 0 { "IPv6" } else { "IPv4" },
            if kind & TAGGED != 0 {
                "VLAN-tagged"
            } else {
                "untagged"
            },
            opcode::transport_name((kind & 7) as u8)
        )
    }
}
