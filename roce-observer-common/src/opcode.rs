//! BTH opcode classification: transport (bits 7-5), operation (bits 4-0), which extended
//! headers follow the BTH, and which PSN space a packet belongs to.

pub const TRANSPORT_RC: u8 = 0;
pub const TRANSPORT_UC: u8 = 1;
pub const TRANSPORT_RD: u8 = 2;
pub const TRANSPORT_UD: u8 = 3;
pub const TRANSPORT_CNP: u8 = 4;
pub const TRANSPORT_XRC: u8 = 5;

/// RoCEv2 congestion notification packet.
pub const OP_CNP: u8 = 0x81;

// Operations (opcode bits 4-0).
pub const SEND_FIRST: u8 = 0x00;
pub const SEND_MIDDLE: u8 = 0x01;
pub const SEND_LAST: u8 = 0x02;
pub const RDMA_WRITE_FIRST: u8 = 0x06;
pub const RDMA_WRITE_ONLY: u8 = 0x0A;
pub const RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = 0x0B;
pub const RDMA_READ_REQUEST: u8 = 0x0C;
pub const RDMA_READ_RESPONSE_FIRST: u8 = 0x0D;
pub const RDMA_READ_RESPONSE_MIDDLE: u8 = 0x0E;
pub const RDMA_READ_RESPONSE_LAST: u8 = 0x0F;
pub const RDMA_READ_RESPONSE_ONLY: u8 = 0x10;
pub const ACKNOWLEDGE: u8 = 0x11;
pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
pub const COMPARE_SWAP: u8 = 0x13;
pub const FETCH_ADD: u8 = 0x14;

#[inline(always)]
pub const fn transport(opcode: u8) -> u8 {
    opcode >> 5
}

#[inline(always)]
pub const fn operation(opcode: u8) -> u8 {
    opcode & 0x1f
}

/// Which PSN space (if any) a packet's PSN belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsnSpace {
    /// The sender's own request stream.
    Request,
    /// A READ response: the peer's request PSNs, echoed.
    ReadResponse,
    /// ACKNOWLEDGE / ATOMIC_ACKNOWLEDGE: never gaps nor retransmissions.
    Ack,
    /// CNP, UD (PSNs per sending QP, interleaved on one key), reserved opcodes.
    None,
}

#[inline(always)]
pub const fn psn_space(opcode: u8) -> PsnSpace {
    let t = transport(opcode);
    if t == TRANSPORT_CNP || t == TRANSPORT_UD || t > TRANSPORT_XRC {
        return PsnSpace::None;
    }
    match operation(opcode) {
        0x00..=0x0C | 0x13 | 0x14 | 0x16 | 0x17 => PsnSpace::Request,
        0x0D..=0x10 => PsnSpace::ReadResponse,
        0x11 | 0x12 => PsnSpace::Ack,
        _ => PsnSpace::None,
    }
}

/// The operation carries a RETH (virtual address, R_Key, DMA length).
#[inline(always)]
pub const fn has_reth(opcode: u8) -> bool {
    let t = transport(opcode);
    (t == TRANSPORT_RC || t == TRANSPORT_UC || t == TRANSPORT_RD || t == TRANSPORT_XRC)
        && matches!(
            operation(opcode),
            RDMA_WRITE_FIRST | RDMA_WRITE_ONLY | RDMA_WRITE_ONLY_WITH_IMMEDIATE | RDMA_READ_REQUEST
        )
}

/// The operation carries an AETH (syndrome, MSN).
#[inline(always)]
pub const fn has_aeth(opcode: u8) -> bool {
    let t = transport(opcode);
    (t == TRANSPORT_RC || t == TRANSPORT_RD || t == TRANSPORT_XRC)
        && matches!(
            operation(opcode),
            RDMA_READ_RESPONSE_FIRST
                | RDMA_READ_RESPONSE_LAST
                | RDMA_READ_RESPONSE_ONLY
                | ACKNOWLEDGE
                | ATOMIC_ACKNOWLEDGE
        )
}

/// Bytes of transport-specific headers between the BTH and the RETH/AETH:
/// XRCETH (4) on XRC requests; RDETH (4) and, on requests, DETH (8) on RD.
#[inline(always)]
pub const fn ext_prefix_len(opcode: u8) -> usize {
    let request = matches!(psn_space(opcode), PsnSpace::Request);
    match transport(opcode) {
        TRANSPORT_XRC if request => 4,
        TRANSPORT_RD if request => 12,
        TRANSPORT_RD => 4,
        _ => 0,
    }
}

const TRANSPORT_NAMES: [&str; 8] = ["RC", "UC", "RD", "UD", "CNP", "XRC", "T6", "T7"];

const OPERATION_NAMES: [&str; 32] = [
    "SEND_FIRST",
    "SEND_MIDDLE",
    "SEND_LAST",
    "SEND_LAST_WITH_IMMEDIATE",
    "SEND_ONLY",
    "SEND_ONLY_WITH_IMMEDIATE",
    "RDMA_WRITE_FIRST",
    "RDMA_WRITE_MIDDLE",
    "RDMA_WRITE_LAST",
    "RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "RDMA_WRITE_ONLY",
    "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "RDMA_READ_REQUEST",
    "RDMA_READ_RESPONSE_FIRST",
    "RDMA_READ_RESPONSE_MIDDLE",
    "RDMA_READ_RESPONSE_LAST",
    "RDMA_READ_RESPONSE_ONLY",
    "ACKNOWLEDGE",
    "ATOMIC_ACKNOWLEDGE",
    "COMPARE_SWAP",
    "FETCH_ADD",
    "OP_15",
    "SEND_LAST_WITH_INVALIDATE",
    "SEND_ONLY_WITH_INVALIDATE",
    "OP_18",
    "OP_19",
    "OP_1A",
    "OP_1B",
    "OP_1C",
    "OP_1D",
    "OP_1E",
    "OP_1F",
];

/// Transport prefix (`RC`, `UC`, `RD`, `UD`, `CNP`, `XRC`).
pub const fn transport_name(transport: u8) -> &'static str {
    TRANSPORT_NAMES[(transport & 7) as usize]
}

/// Operation name without the transport prefix (`SEND_ONLY`, ...).
pub const fn operation_name(operation: u8) -> &'static str {
    OPERATION_NAMES[(operation & 0x1f) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(psn_space(0x04), PsnSpace::Request);
        assert_eq!(psn_space(0x0C), PsnSpace::Request);
        assert_eq!(psn_space(0x0E), PsnSpace::ReadResponse);
        assert_eq!(psn_space(0x11), PsnSpace::Ack);
        assert_eq!(psn_space(OP_CNP), PsnSpace::None);
        assert_eq!(psn_space(0x64), PsnSpace::None);
        assert_eq!(psn_space(0x2A), PsnSpace::Request);
        assert!(has_reth(0x0C) && has_reth(0x2A) && !has_reth(0x07));
        assert!(has_aeth(0x11) && has_aeth(0x0D) && !has_aeth(0x0E) && !has_aeth(0x31));
        assert_eq!(ext_prefix_len(0xAC), 4);
        assert_eq!(ext_prefix_len(0xB1), 0);
        assert_eq!(transport_name(transport(OP_CNP)), "CNP");
        assert_eq!(operation_name(0x0D), "RDMA_READ_RESPONSE_FIRST");
    }
}
