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

const REQ_VALID: u8 = 1;
const RESP_VALID: u8 = 2;
/// `PsnState::flags`: the request stream has had a gap (from then on its retransmissions
/// are followed as resend runs, observe.rs); kept here, in the line every packet reads.
pub const REQ_GAPPED: u8 = 4;
/// `PsnState::flags`: a resend run is open (`FlowStats::resend_first..resend_last`).
pub const REQ_RESENDING: u8 = 8;

/// Sequence state of both PSN spaces of one flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsnState {
    pub req_expected: u32,
    pub req_highest: u32,
    pub resp_highest: u32,
    pub resp_last: u32,
    pub flags: u8,
    pub _pad: [u8; 3],
}
assert_size!(PsnState, 20);

/// What one packet did to a PSN space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsnVerdict {
    InOrder,
    /// PSNs were skipped: `expected` was due, `got` arrived, `missing` PSNs in between.
    Gap {
        expected: u32,
        got: u32,
        missing: u32,
    },
    /// Not newer than the highest PSN seen: a retransmission (or a resent READ response).
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
            _pad: [0; 3],
        }
    }

    /// Whether a request was seen (`req_expected` and `req_highest` are set).
    #[inline(always)]
    pub const fn has_requests(&self) -> bool {
        self.flags & REQ_VALID != 0
    }

    /// A request consuming `span` PSNs (1, or the READ reservation) arrived with `psn`.
    #[inline(always)]
    pub fn request(&mut self, psn: u32, span: u32) -> PsnVerdict {
        let psn = psn & PSN_MASK;
        let mut verdict = PsnVerdict::InOrder;
        if self.flags & REQ_VALID != 0 {
            if !psn_newer(psn, self.req_highest) {
                return PsnVerdict::Retransmit {
                    highest: self.req_highest,
                    got: psn,
                };
            }
            if psn_newer(psn, self.req_expected) {
                verdict = PsnVerdict::Gap {
                    expected: self.req_expected,
                    got: psn,
                    missing: psn_diff(psn, self.req_expected),
                };
            }
        }
        self.flags |= REQ_VALID;
        self.req_expected = psn_add(psn, span);
        self.req_highest = psn;
        verdict
    }

    /// A READ response packet arrived; `continues` is true for MIDDLE and LAST, which must
    /// follow the previous response packet by exactly one.
    #[inline(always)]
    pub fn read_response(&mut self, psn: u32, continues: bool) -> PsnVerdict {
        let psn = psn & PSN_MASK;
        let mut verdict = PsnVerdict::InOrder;
        if self.flags & RESP_VALID != 0 {
            if !psn_newer(psn, self.resp_highest) {
                return PsnVerdict::Retransmit {
                    highest: self.resp_highest,
                    got: psn,
                };
            }
            let expected = psn_add(self.resp_last, 1);
            if continues && psn != expected {
                verdict = PsnVerdict::Gap {
                    expected,
                    got: psn,
                    missing: psn_diff(psn, expected),
                };
            }
        }
        self.flags |= RESP_VALID;
        self.resp_highest = psn;
        self.resp_last = psn;
        verdict
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
    fn requests_in_order_across_wrap_have_no_gap() {
        let mut s = PsnState::zeroed();
        for psn in [PSN_MASK - 1, PSN_MASK, 0, 1] {
            assert_eq!(s.request(psn, 1), PsnVerdict::InOrder);
        }
    }

    #[test]
    fn gap_counts_missing_psns() {
        let mut s = PsnState::zeroed();
        s.request(100, 1);
        s.request(101, 1);
        assert_eq!(
            s.request(105, 1),
            PsnVerdict::Gap {
                expected: 102,
                got: 105,
                missing: 3
            }
        );
        assert_eq!(s.request(106, 1), PsnVerdict::InOrder);
    }

    #[test]
    fn read_reservation_is_not_a_gap() {
        let mut s = PsnState::zeroed();
        s.request(10, read_span(12288, 4096));
        assert_eq!(s.request(13, 1), PsnVerdict::InOrder);
        // A wrong (larger) path MTU would reserve 1 PSN and report a false gap.
        let mut t = PsnState::zeroed();
        t.request(10, read_span(8192, 8192));
        assert!(matches!(
            t.request(13, 1),
            PsnVerdict::Gap { missing: 2, .. }
        ));
    }

    #[test]
    fn go_back_n_counts_retransmits_not_gaps() {
        let mut s = PsnState::zeroed();
        for psn in 10..20 {
            assert_eq!(s.request(psn, 1), PsnVerdict::InOrder);
        }
        let mut resent = 0;
        for psn in 13..20 {
            if let PsnVerdict::Retransmit { .. } = s.request(psn, 1) {
                resent += 1;
            }
        }
        assert_eq!(resent, 7);
        assert_eq!(s.request(20, 1), PsnVerdict::InOrder);
    }

    #[test]
    fn read_responses() {
        let mut s = PsnState::zeroed();
        assert_eq!(s.read_response(50, false), PsnVerdict::InOrder);
        assert_eq!(s.read_response(51, true), PsnVerdict::InOrder);
        // Between responses the PSN may jump freely.
        assert_eq!(s.read_response(60, false), PsnVerdict::InOrder);
        assert_eq!(
            s.read_response(63, true),
            PsnVerdict::Gap {
                expected: 61,
                got: 63,
                missing: 2
            }
        );
        assert!(matches!(
            s.read_response(51, false),
            PsnVerdict::Retransmit { .. }
        ));
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
