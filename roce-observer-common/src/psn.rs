//! PSN sequence tracking, per the rules in docs/metrics.md: 24-bit serial arithmetic and two
//! independent PSN spaces per flow (the sender's requests; its READ responses to the peer).

use crate::assert_size;

pub const PSN_MASK: u32 = 0x00ff_ffff;
const HALF: u32 = 1 << 23;

/// `(a - b) mod 2^24`.
#[inline(always)]
pub const fn psn_diff(a: u32, b: u32) -> u32 {
    a.wrapping_sub(b) & PSN_MASK
}

/// `a` is newer than `b`: `(a - b) mod 2^24` in `1 .. 2^23`.
#[inline(always)]
pub const fn psn_newer(a: u32, b: u32) -> bool {
    let d = psn_diff(a, b);
    d != 0 && d < HALF
}

#[inline(always)]
pub const fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// `PsnState::flags`: a request was seen (`req_expected` and `req_highest` are set).
pub const REQ_VALID: u8 = 1;
/// `PsnState::flags`: a READ response was seen.
pub const RESP_VALID: u8 = 2;
/// `PsnState::flags`: the request stream has had a PSN declared lost (from then on its
/// retransmissions are followed as resend runs, observe.rs); kept here, in the line every
/// packet reads.
pub const REQ_GAPPED: u8 = 4;
/// `PsnState::flags`: a resend run is open (`FlowStats::resend_first..resend_last`).
pub const REQ_RESENDING: u8 = 8;
/// `PsnState::flags`: the request scoreboard is in use (`Reorder::req_base` and its bits;
/// sequence.rs). Clear: every request PSN before `req_expected` is resolved.
pub const REQ_WINDOW: u8 = 16;
/// `PsnState::flags`: a run of first copies that closed holes waits for the next request to
/// say whether it was reordering or the start of a resend run (`Reorder::tent_*`).
pub const REQ_TENTATIVE: u8 = 32;
/// `PsnState::flags`: the last request was a retransmission; `Reorder::run_next` continues it.
pub const REQ_RUN: u8 = 64;
/// `PsnState::flags`: the READ-response scoreboard is in use.
pub const RESP_WINDOW: u8 = 128;
/// `PsnState::flags2`: the request PSN just below `Reorder::req_base` was declared lost (loss
/// events are runs of consecutive lost PSNs).
pub const REQ_LOST_BELOW: u8 = 1;
/// `PsnState::flags2`: likewise for the READ-response PSN below `Reorder::resp_base`.
pub const RESP_LOST_BELOW: u8 = 2;
/// `PsnState::flags2`: `Reorder::req_clean` is set (from the flow's first out-of-order
/// request on).
pub const REQ_CLEAN: u8 = 4;

/// Sequence state of both PSN spaces of one flow: what every packet reads. The scoreboards
/// behind it (`FlowStats::reorder`) are touched only when something arrived out of order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsnState {
    pub req_expected: u32,
    pub req_highest: u32,
    pub resp_highest: u32,
    pub resp_last: u32,
    pub flags: u8,
    pub flags2: u8,
    pub _pad: [u8; 2],
}
assert_size!(PsnState, 20);

/// What one packet did to a PSN space (sequence.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsnVerdict {
    InOrder,
    /// PSNs were skipped: `expected` was due, `got` arrived; the `skipped` PSNs in between are
    /// holes (lost or reordered: decided later).
    Gap {
        expected: u32,
        got: u32,
        skipped: u32,
    },
    /// The first copy of a PSN older than the highest seen, at `distance` below it.
    Reordered {
        distance: u32,
    },
    /// A copy of a PSN seen before, or the first copy of one declared lost.
    Retransmit {
        highest: u32,
        got: u32,
    },
}

impl PsnState {
    pub const fn zeroed() -> PsnState {
        PsnState {
            req_expected: 0,
            req_highest: 0,
            resp_highest: 0,
            resp_last: 0,
            flags: 0,
            flags2: 0,
            _pad: [0; 2],
        }
    }

    /// Whether a request was seen (`req_expected` and `req_highest` are set).
    #[inline(always)]
    pub const fn has_requests(&self) -> bool {
        self.flags & REQ_VALID != 0
    }
}

/// PSNs a READ request reserves: `ceil(dma_len / pmtu)`, at least 1.
#[inline(always)]
pub const fn read_span(dma_len: u32, pmtu: u32) -> u32 {
    if pmtu == 0 {
        return 1;
    }
    let n = dma_len.div_ceil(pmtu);
    if n == 0 { 1 } else { n & PSN_MASK }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_arithmetic_wraps() {
        assert!(psn_newer(0, PSN_MASK));
        assert!(!psn_newer(PSN_MASK, 0));
        assert!(!psn_newer(5, 5));
        assert!(psn_newer(5 + HALF - 1, 5));
        assert!(!psn_newer(5 + HALF, 5));
        assert_eq!(psn_diff(2, PSN_MASK), 3);
    }

    #[test]
    fn read_span_rounds_up() {
        assert_eq!(read_span(0, 4096), 1);
        assert_eq!(read_span(1, 4096), 1);
        assert_eq!(read_span(4096, 4096), 1);
        assert_eq!(read_span(4097, 4096), 2);
        assert_eq!(read_span(8192, 1024), 8);
    }
}
