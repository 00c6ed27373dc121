//! The PSN rule (docs/metrics.md, "Reordering and loss"): what one request or READ-response
//! packet says about its flow's sequence, on a fabric that may reorder (adaptive routing, packet
//! spraying) as well as lose. Shared by the kernel and the capture path.
//!
//! A skipped PSN opens a *hole*; the first copy of that PSN closes it. A first copy older than
//! the highest PSN seen is *reordered* (RFC 4737's Type-P-Reordered), at distance highest - PSN.
//! A hole is *lost* when the responder NAKs its PSN, when it falls out of the reorder window
//! (`window` PSNs below the newest), or when the copy that closes it turns out to start a
//! go-back-N resend run (the next request repeats the following PSN). Every copy after a PSN's
//! first, and a first copy that closes a lost hole, is a *retransmission*; a lost PSN that turns
//! up twice was not lost, and the counts are corrected.
//!
//! State per space is a scoreboard of at most [`MAX_REORDER_WINDOW`] PSNs from `base` (the oldest
//! PSN not yet resolved): `seen` (a copy arrived), and for requests `lost` (declared lost) and
//! `flag` (lost: declared by a NAK; seen: its first copy arrived reordered); for READ responses
//! `soft` (skipped between two responses: not a hole, see `read_response`). A flow whose
//! requests arrive in order keeps no window (`REQ_WINDOW` clear: `base` is `req_expected`) and
//! pays one flag test per packet.
//!
//! Counters are atomic adds (`atomic::add`); the window itself is plain state, like the rest of
//! `PsnState`: two CPUs on one flow at once may misjudge a packet (docs/metrics.md, "Several
//! CPUs").

use crate::{
    FlowStats,
    atomic::add,
    flow::Reorder,
    psn::{
        PSN_MASK, PsnVerdict, REQ_CLEAN, REQ_GAPPED, REQ_LOST_BELOW, REQ_RUN, REQ_TENTATIVE,
        REQ_VALID, REQ_WINDOW, RESP_LOST_BELOW, RESP_VALID, RESP_WINDOW, psn_add, psn_diff,
        psn_newer,
    },
};

/// The largest reorder window: one 64-bit word of scoreboard per space.
pub const MAX_REORDER_WINDOW: u32 = 64;

/// How far below the window a NAK'd PSN is still known to have had a copy here
/// (`Reorder::req_clean`): 2^22 PSNs, well inside the 2^23 of serial arithmetic.
const CLEAN_MAX: u32 = 1 << 22;
/// The default reorder window (`--reorder-window`).
pub const DEFAULT_REORDER_WINDOW: u32 = 64;
/// Buckets of the reorder distance histogram: 1, 2-3, 4-7, 8-15, 16-31, 32 and more.
pub const DISTANCE_BUCKETS: usize = 6;
/// JSON names of the buckets.
pub const DISTANCE_NAMES: [&str; DISTANCE_BUCKETS] = ["1", "2-3", "4-7", "8-15", "16-31", "32+"];

/// What one packet did to its PSN space: the verdict on the packet itself, and the PSNs it
/// caused to be declared lost (`lost_count` 0: none), for the path events. When the PSNs
/// declared lost by one packet are not one run, `lost_first..+lost_count` is the first run and
/// `lost_split` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub verdict: PsnVerdict,
    pub lost_first: u32,
    pub lost_count: u32,
    pub lost_split: bool,
}

impl Step {
    const fn of(verdict: PsnVerdict) -> Step {
        Step {
            verdict,
            lost_first: 0,
            lost_count: 0,
            lost_split: false,
        }
    }

    /// Note PSNs `first..first+count` declared lost by this packet.
    #[inline(always)]
    fn lost(&mut self, first: u32, count: u32, split: bool) {
        if count == 0 {
            return;
        }
        if self.lost_count == 0 {
            self.lost_first = first;
            self.lost_count = count;
            self.lost_split |= split;
        } else if psn_add(self.lost_first, self.lost_count) == first && !split {
            self.lost_count += count;
        } else {
            self.lost_split = true;
        }
    }
}

/// Bits `off..off+n` of a 64-bit word (those that fit).
#[inline(always)]
fn bits(off: u32, n: u32) -> u64 {
    if off >= 64 || n == 0 {
        return 0;
    }
    let n = if n > 64 - off { 64 - off } else { n };
    let m = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    m << off
}

/// Bits `0..n`.
#[inline(always)]
fn low(n: u32) -> u64 {
    bits(0, n)
}

/// Maximal runs of set bits in `mask`, where `below` is the bit under bit 0.
#[inline(always)]
fn runs(mask: u64, below: bool) -> u64 {
    let starts = mask & !((mask << 1) | u64::from(below));
    u64::from(starts.count_ones())
}

/// `v >> k`, 0 for k >= 64.
#[inline(always)]
fn shr(v: u64, k: u32) -> u64 {
    if k >= 64 { 0 } else { v >> k }
}

/// Histogram bucket of a reorder distance (>= 1).
#[inline(always)]
pub const fn bucket(distance: u32) -> usize {
    if distance < 2 {
        0
    } else if distance < 4 {
        1
    } else if distance < 8 {
        2
    } else if distance < 16 {
        3
    } else if distance < 32 {
        4
    } else {
        5
    }
}

/// The first set bit of a non-zero `mask` and whether the set bits are one run.
#[inline(always)]
fn first_run(mask: u64) -> (u32, u32, bool) {
    let first = mask.trailing_zeros();
    let m = mask >> first;
    let len = (!m).trailing_zeros();
    (first, len, m.count_ones() != len)
}

/// Count one reordered first copy at `distance`.
#[inline(always)]
fn count_reordered(r: &mut Reorder, distance: u32, n: u64) {
    add(&mut r.reordered, n);
    if let Some(c) = r.distance.get_mut(bucket(distance)) {
        add(c, n);
    }
    // A plain max: two CPUs may lose a larger value, never make one up.
    if u64::from(distance) > r.distance_max {
        r.distance_max = u64::from(distance);
    }
}

/// A request consuming `span` PSNs (1, or a READ's reservation) arrived with `psn`; `window`
/// is the reorder window (1..=[`MAX_REORDER_WINDOW`]).
///
/// `scoreboard` false (the kernel's main programs, a constant there, see `observe::Tables::SCOREBOARD`): only the
/// in-order case is handled; [`needs_scoreboard`] sent every other packet elsewhere.
#[inline(always)]
pub fn request(s: &mut FlowStats, psn: u32, span: u32, window: u32, scoreboard: bool) -> Step {
    let psn = psn & PSN_MASK;
    let flags = s.psn.flags;
    if flags & REQ_VALID == 0 {
        s.psn.flags = flags | REQ_VALID;
        s.psn.req_expected = psn_add(psn, span);
        s.psn.req_highest = psn;
        return Step::of(PsnVerdict::InOrder);
    }
    // The common packet: the next PSN of a flow with nothing out of order.
    if flags & (REQ_WINDOW | REQ_TENTATIVE | REQ_RUN) == 0 && psn == s.psn.req_expected {
        s.psn.req_expected = psn_add(psn, span);
        s.psn.req_highest = psn;
        return Step::of(PsnVerdict::InOrder);
    }
    if !scoreboard {
        return Step::of(PsnVerdict::InOrder);
    }
    request_window(s, psn, span, window)
}

/// The scoreboard's part of [`request`].
#[inline(always)]
fn request_window(s: &mut FlowStats, psn: u32, span: u32, window: u32) -> Step {
    let window = if window == 0 || window > MAX_REORDER_WINDOW {
        MAX_REORDER_WINDOW
    } else {
        window
    };
    let mut step = Step::of(PsnVerdict::InOrder);
    if s.psn.flags & REQ_WINDOW == 0 {
        s.reorder.req_base = s.psn.req_expected;
        s.reorder.req_seen = 0;
        s.reorder.req_lost = 0;
        s.reorder.req_flag = 0;
        s.reorder.req_sure = 0;
        s.psn.flags |= REQ_WINDOW;
        s.psn.flags2 &= !REQ_LOST_BELOW;
        if s.psn.flags2 & REQ_CLEAN == 0 {
            // Every request before this one arrived in order.
            s.reorder.req_clean = s.psn.req_expected;
            s.psn.flags2 |= REQ_CLEAN;
        }
    }
    let expected = s.psn.req_expected;
    let highest = s.psn.req_highest;
    let base = s.reorder.req_base;
    let new = !psn_newer(expected, psn);
    let below_base = !new && psn_newer(base, psn);
    let off = psn_diff(psn, base);
    let bit = if new || below_base { 0 } else { bits(off, 1) };
    let duplicate = below_base || s.reorder.req_seen & bit != 0;
    let closes_open =
        !new && !below_base && s.reorder.req_seen & bit == 0 && s.reorder.req_lost & bit == 0;

    // A pending first copy (or run of them) is decided by this packet: the start of a go-back-N
    // resend run if this one repeats the PSN after it, reordering otherwise (unless this one
    // continues the run: then the run waits for the next).
    if s.psn.flags & REQ_TENTATIVE != 0 {
        let next = s.reorder.tent_next;
        if closes_open && psn == next {
            // Extended below.
        } else if duplicate && psn == next {
            tentative_lost(s, &mut step);
        } else {
            tentative_reordered(s);
        }
    }

    let flags = s.psn.flags;
    if new {
        step.verdict = if psn == expected {
            PsnVerdict::InOrder
        } else {
            PsnVerdict::Gap {
                expected,
                got: psn,
                skipped: psn_diff(psn, expected),
            }
        };
        let p = psn_diff(psn, base);
        let top = p.saturating_add(span);
        if top > window {
            slide_requests(s, top - window, p, &mut step);
        }
        let base = s.reorder.req_base;
        s.reorder.req_seen |= bits(psn_diff(psn, base), span);
        s.psn.req_expected = psn_add(psn, span);
        s.psn.req_highest = psn;
        s.psn.flags &= !REQ_RUN;
    } else if duplicate {
        let highest_now = s.psn.req_highest;
        step.verdict = PsnVerdict::Retransmit {
            highest: highest_now,
            got: psn,
        };
        if s.reorder.req_lost & bit != 0 && s.reorder.req_sure & bit == 0 && s.reorder.reordered > 0
        {
            // The second copy of a PSN declared lost, whose first copy was not known to be a
            // resend, on a flow that reorders (a first copy of another PSN arrived late and
            // was not lost: on a path that keeps order, a late copy is a resend): it was not
            // lost, the first copy was reordered. Of its two copies, one is a retransmission:
            // the count stands.
            correct(s, psn, bit);
        } else {
            add(&mut s.req_retransmits, 1);
        }
        continue_run(s, psn, span, true);
    } else if s.reorder.req_lost & bit != 0 {
        // The first copy of a PSN already declared lost: a retransmission (it stays lost
        // unless a second copy turns up).
        step.verdict = PsnVerdict::Retransmit { highest, got: psn };
        s.reorder.req_seen |= bits(off, span);
        note_closer(&mut s.reorder, psn, highest);
        add(&mut s.req_retransmits, 1);
        continue_run(s, psn, span, false);
    } else if flags & REQ_RUN != 0 && psn == s.reorder.run_next {
        // Closes an open hole, continuing a resend run: lost, and this copy is resent.
        step.verdict = PsnVerdict::Retransmit { highest, got: psn };
        let mask = bits(off, span) & !s.reorder.req_seen;
        declare_lost(s, mask, &mut step);
        s.reorder.req_seen |= bits(off, span);
        note_closer(&mut s.reorder, psn, highest);
        s.reorder.req_flag &= !mask;
        add(&mut s.req_retransmits, 1);
        continue_run(s, psn, span, false);
    } else {
        // Closes an open hole: reordered, decided by the next request.
        let distance = psn_diff(highest, psn);
        step.verdict = PsnVerdict::Reordered { distance };
        let mask = bits(off, span);
        s.reorder.req_seen |= mask;
        s.reorder.req_flag |= mask;
        if s.psn.flags & REQ_TENTATIVE != 0 {
            s.reorder.tent_next = psn_add(psn, span);
            s.reorder.tent_count += 1;
        } else {
            s.psn.flags |= REQ_TENTATIVE;
            s.reorder.tent_first = psn;
            s.reorder.tent_next = psn_add(psn, span);
            s.reorder.tent_count = 1;
            s.reorder.tent_highest = highest;
            s.reorder.tent_naks = 0;
        }
        s.psn.flags &= !REQ_RUN;
    }
    advance_requests(s);
    step
}

/// A retransmission of `psn` (`span` PSNs): it starts a resend run, or continues the one in
/// progress when it is the PSN after it. A `duplicate` (a PSN seen before) that continues a
/// run shows that the run is a resend: the lost PSNs its copies closed were resent, not
/// reordered, and a later copy of one (another resend round) does not correct it.
#[inline(always)]
fn continue_run(s: &mut FlowStats, psn: u32, span: u32, duplicate: bool) {
    let r = &mut s.reorder;
    let continues = s.psn.flags & REQ_RUN != 0 && psn == r.run_next;
    if !continues {
        r.run_start = psn;
    } else if duplicate && !psn_newer(r.req_base, r.run_start) {
        r.req_sure |= bits(
            psn_diff(r.run_start, r.req_base),
            psn_diff(psn, r.run_start),
        );
    }
    s.psn.flags |= REQ_RUN;
    r.run_next = psn_add(psn, span);
}

/// Declare the open holes of `mask` (window bits) lost: `psn_missing`, and `psn_gaps` as the
/// change in maximal runs of lost PSNs.
#[inline(always)]
fn declare_lost(s: &mut FlowStats, mask: u64, step: &mut Step) {
    if mask == 0 {
        return;
    }
    let below = s.psn.flags2 & REQ_LOST_BELOW != 0;
    let before = runs(s.reorder.req_lost, below);
    s.reorder.req_lost |= mask;
    let after = runs(s.reorder.req_lost, below);
    add(&mut s.psn_missing, u64::from(mask.count_ones()));
    add(&mut s.psn_gaps, after.wrapping_sub(before));
    s.psn.flags |= REQ_GAPPED;
    let (first, len, split) = first_run(mask);
    step.lost(psn_add(s.reorder.req_base, first), len, split);
}

/// The pending run of first copies started a go-back-N resend run: its holes were lost, its
/// copies were retransmissions.
#[inline(always)]
fn tentative_lost(s: &mut FlowStats, step: &mut Step) {
    s.psn.flags &= !REQ_TENTATIVE;
    let base = s.reorder.req_base;
    let first = s.reorder.tent_first;
    let n = psn_diff(s.reorder.tent_next, first);
    add(&mut s.req_retransmits, u64::from(s.reorder.tent_count));
    if psn_newer(base, first) {
        // Out of the window already (a window smaller than the run): counted without the
        // scoreboard.
        add(&mut s.psn_missing, u64::from(n));
        add(&mut s.psn_gaps, 1);
        s.psn.flags |= REQ_GAPPED;
        step.lost(first, n, false);
        return;
    }
    let mask = bits(psn_diff(first, base), n);
    // Seen, so `declare_lost` would not take them as holes: mark them lost directly. The
    // duplicate that decides them continues their run: they were resent.
    s.reorder.req_flag &= !mask;
    declare_lost(s, mask, step);
    s.reorder.req_sure |= mask;
    s.reorder.run_start = first;
    s.reorder.run_next = s.reorder.tent_next;
    s.psn.flags |= REQ_RUN;
}

/// The pending run of first copies was reordering.
#[inline(always)]
fn tentative_reordered(s: &mut FlowStats) {
    s.psn.flags &= !REQ_TENTATIVE;
    let r = &mut s.reorder;
    // The copies' PSNs follow one another from `tent_first` (a READ request in the run is taken
    // as one PSN), each older than the highest PSN seen before the run: their distances are
    // the consecutive numbers `lo..=hi`, counted per bucket without a loop over the copies.
    let count = r.tent_count;
    let hi = psn_diff(r.tent_highest, r.tent_first);
    let lo = if count > hi { 1 } else { hi + 1 - count };
    let mut b = 0;
    while b < DISTANCE_BUCKETS {
        let (from, to) = BUCKET_RANGES[b];
        let a = if lo > from { lo } else { from };
        let z = if hi < to { hi } else { to };
        if a <= z {
            add(&mut r.distance[b], u64::from(z - a + 1));
        }
        b += 1;
    }
    add(&mut r.reordered, u64::from(count));
    if u64::from(hi) > r.distance_max {
        r.distance_max = u64::from(hi);
    }
    add(&mut r.naks, u64::from(r.tent_naks));
}

/// Distances of each histogram bucket, inclusive.
const BUCKET_RANGES: [(u32, u32); DISTANCE_BUCKETS] =
    [(1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, u32::MAX)];

/// The second copy of lost PSN `psn` (window bit `bit`): it was not lost.
#[inline(always)]
fn correct(s: &mut FlowStats, psn: u32, bit: u64) {
    let below = s.psn.flags2 & REQ_LOST_BELOW != 0;
    let before = runs(s.reorder.req_lost, below);
    s.reorder.req_lost &= !bit;
    let after = runs(s.reorder.req_lost, below);
    add(&mut s.psn_missing, u64::MAX);
    add(&mut s.psn_gaps, after.wrapping_sub(before));
    let r = &mut s.reorder;
    let distance = closer_distance(r, psn);
    count_reordered(r, if distance == 0 { 1 } else { distance }, 1);
    if r.req_flag & bit != 0 {
        // It had been declared lost by a NAK: the NAK was caused by reordering.
        r.req_flag &= !bit;
        add(&mut r.naks, 1);
    }
}

/// Note that the first copy of `psn` closed a lost hole while `highest` was the highest PSN
/// seen (`Reorder::closer_highest`). Only such a copy can be corrected to reordered later: the
/// copies a resend run decides lost are known resends (`req_sure`) and never are. (A resend
/// that starts inside an earlier READ request's reservation reads the byte of its own PSN,
/// which that request did not write: its distance is then approximate.)
#[inline(always)]
fn note_closer(r: &mut Reorder, psn: u32, highest: u32) {
    let word = &mut r.closer_highest[((psn & 63) >> 3) as usize];
    let shift = 8 * (psn & 7);
    *word = (*word & !(0xff << shift)) | (u64::from(highest & 0xff) << shift);
}

/// The distance `psn` had when its first copy closed a lost hole (`note_closer`).
#[inline(always)]
fn closer_distance(r: &Reorder, psn: u32) -> u32 {
    let word = r.closer_highest[((psn & 63) >> 3) as usize];
    let highest = (word >> (8 * (psn & 7))) as u32 & 0xff;
    highest.wrapping_sub(psn) & 0xff
}

/// The window moves up by `k` PSNs for a new request at offset `p`: what falls out unresolved
/// is lost (holes below `p`; the window bits, then any skipped PSNs beyond the 64 bits).
#[inline(always)]
fn slide_requests(s: &mut FlowStats, k: u32, p: u32, step: &mut Step) {
    let base = s.reorder.req_base;
    let inside = if k < 64 { k } else { 64 };
    let limit = if p < inside { p } else { inside };
    let mask = low(limit) & !s.reorder.req_seen & !s.reorder.req_lost;
    declare_lost(s, mask, step);
    // PSNs that fall out with no copy seen end the run of PSNs that all had one.
    let unseen = low(inside) & !s.reorder.req_seen;
    // Skipped PSNs that never fit in the window: bits 64..min(k, p).
    let beyond_end = if k < p { k } else { p };
    let mut below = s.reorder.req_lost & bits(k.wrapping_sub(1), 1) != 0;
    if beyond_end > 64 {
        let n = beyond_end - 64;
        add(&mut s.psn_missing, u64::from(n));
        if s.reorder.req_lost & (1 << 63) == 0 {
            add(&mut s.psn_gaps, 1);
        }
        s.psn.flags |= REQ_GAPPED;
        step.lost(psn_add(base, 64), n, false);
        below = beyond_end == k;
    } else if k > 64 {
        below = false;
    }
    if below {
        s.psn.flags2 |= REQ_LOST_BELOW;
    } else {
        s.psn.flags2 &= !REQ_LOST_BELOW;
    }
    if beyond_end > 64 {
        s.reorder.req_clean = psn_add(base, beyond_end);
    } else if unseen != 0 {
        s.reorder.req_clean = psn_add(base, 64 - unseen.leading_zeros());
    }
    // A pending run that falls out is decided now: reordering (no resend seen).
    if s.psn.flags & REQ_TENTATIVE != 0 && psn_diff(s.reorder.tent_first, base) < k {
        tentative_reordered(s);
    }
    let r = &mut s.reorder;
    r.req_seen = shr(r.req_seen, k);
    r.req_lost = shr(r.req_lost, k);
    r.req_flag = shr(r.req_flag, k);
    r.req_sure = shr(r.req_sure, k);
    r.req_base = psn_add(base, k);
}

/// Move `base` past the PSNs at the bottom that are resolved for good (seen in order, not
/// lost, not in a pending run); drop the window when nothing is left in it. PSNs whose first
/// copy arrived reordered stay until they fall out of the window: the responder's NAK for one
/// comes a round trip later, and is then known to be caused by reordering.
#[inline(always)]
fn advance_requests(s: &mut FlowStats) {
    let r = &mut s.reorder;
    let e = psn_diff(s.psn.req_expected, r.req_base);
    let mut plain = r.req_seen & !r.req_lost & !r.req_flag & low(e);
    if s.psn.flags & REQ_TENTATIVE != 0 {
        plain &= low(psn_diff(r.tent_first, r.req_base));
    }
    let k = (!plain).trailing_zeros();
    if k == 0 {
        return;
    }
    r.req_seen = shr(r.req_seen, k);
    r.req_lost = shr(r.req_lost, k);
    r.req_flag = shr(r.req_flag, k);
    r.req_sure = shr(r.req_sure, k);
    r.req_base = psn_add(r.req_base, k);
    s.psn.flags2 &= !REQ_LOST_BELOW;
    if r.req_base == s.psn.req_expected && s.psn.flags & REQ_TENTATIVE == 0 {
        s.psn.flags &= !REQ_WINDOW;
    }
}

/// A PSN sequence-error NAK answered request PSN `psn` of flow `s` (the NAK's request flow):
/// an open hole there is declared lost; a PSN whose first copy arrived reordered makes it a
/// NAK caused by reordering. Returns what was declared lost (path events).
#[inline(always)]
pub fn nak(s: &mut FlowStats, psn: u32) -> Step {
    let psn = psn & PSN_MASK;
    let mut step = Step::of(PsnVerdict::InOrder);
    // With no window open, everything up to the expected PSN is resolved.
    let base = if s.psn.flags & REQ_WINDOW != 0 {
        s.reorder.req_base
    } else {
        s.psn.req_expected
    };
    let e = psn_diff(s.psn.req_expected, base);
    let off = psn_diff(psn, base);
    if off >= e {
        // Below the window: a PSN that had a copy here, on a flow that reorders, was NAKed
        // because that copy (or a resend of it) arrived out of order.
        let below = psn_diff(base, psn);
        let clean = psn_diff(base, s.reorder.req_clean);
        let clean = if clean > CLEAN_MAX { CLEAN_MAX } else { clean };
        if s.psn.flags2 & REQ_CLEAN != 0 && s.reorder.reordered > 0 && below != 0 && below <= clean
        {
            add(&mut s.reorder.naks, 1);
        }
        return step;
    }
    let bit = bits(off, 1);
    let r = &s.reorder;
    if r.req_seen & bit == 0 {
        if r.req_lost & bit == 0 {
            declare_lost(s, bit, &mut step);
            s.reorder.req_flag |= bit;
        }
        return step;
    }
    let pending = s.psn.flags & REQ_TENTATIVE != 0
        && psn_diff(psn, r.tent_first) < psn_diff(r.tent_next, r.tent_first);
    if pending {
        // Its first copy closed a hole and awaits the decision: counted if that is reordering.
        s.reorder.tent_naks += 1;
        s.reorder.req_flag &= !bit;
    } else if r.req_flag & bit != 0 && r.req_lost & bit == 0 {
        // Its first copy arrived reordered (one NAK per such PSN counts even before the flow's
        // first reordering is decided; later ones as below).
        add(&mut s.reorder.naks, 1);
        s.reorder.req_flag &= !bit;
    } else if s.reorder.reordered > 0 {
        // A copy of it arrived here before the NAK, on a flow that reorders: the responder saw
        // it out of order (a reordered resend, in a go-back-N round).
        add(&mut s.reorder.naks, 1);
    }
    step
}

/// A READ response packet arrived; `continues` is true for MIDDLE and LAST, which must follow
/// the previous response packet by exactly one. PSNs skipped before a MIDDLE or LAST are holes;
/// PSNs skipped before a FIRST or ONLY are not (other requests' PSNs, acknowledged without a
/// response), but a first copy of one that arrives later is still reordered.
#[inline(always)]
pub fn read_response(
    s: &mut FlowStats,
    psn: u32,
    continues: bool,
    window: u32,
    scoreboard: bool,
) -> Step {
    let psn = psn & PSN_MASK;
    let flags = s.psn.flags;
    if flags & RESP_VALID == 0 {
        s.psn.flags = flags | RESP_VALID;
        s.psn.resp_highest = psn;
        s.psn.resp_last = psn;
        return Step::of(PsnVerdict::InOrder);
    }
    let next = psn_add(s.psn.resp_highest, 1);
    if flags & RESP_WINDOW == 0 && psn == next {
        s.psn.resp_highest = psn;
        s.psn.resp_last = psn;
        return Step::of(PsnVerdict::InOrder);
    }
    if !scoreboard {
        return Step::of(PsnVerdict::InOrder);
    }
    response_window(s, psn, continues, window)
}

/// Whether `pkt` needs more of its flow's sequence state than the in-order case: a request or
/// READ response that is not the next PSN of a flow with nothing out of order, or a PSN
/// sequence-error NAK. The kernel hands these to its scoreboard program.
#[inline(always)]
pub fn needs_scoreboard(s: &FlowStats, pkt: &crate::RocePacket) -> bool {
    use crate::opcode::{self, PsnSpace};
    let transport = opcode::transport(pkt.opcode);
    if transport == opcode::TRANSPORT_CNP
        || (s.transport != crate::flow::TRANSPORT_UNSET && s.transport != transport)
    {
        return false;
    }
    let flags = s.psn.flags;
    let psn = pkt.psn & PSN_MASK;
    match opcode::psn_space(pkt.opcode) {
        PsnSpace::Request => {
            flags & REQ_VALID != 0
                && (flags & (REQ_WINDOW | REQ_TENTATIVE | REQ_RUN) != 0
                    || psn != s.psn.req_expected)
        }
        PsnSpace::ReadResponse => {
            flags & RESP_VALID != 0
                && (flags & RESP_WINDOW != 0 || psn != psn_add(s.psn.resp_highest, 1))
        }
        PsnSpace::Ack => {
            crate::flow::nak_class(pkt.syndrome) == Some(crate::flow::nak::PSN_SEQ_ERR)
        }
        PsnSpace::None => false,
    }
}

#[inline(always)]
fn response_window(s: &mut FlowStats, psn: u32, continues: bool, window: u32) -> Step {
    let window = if window == 0 || window > MAX_REORDER_WINDOW {
        MAX_REORDER_WINDOW
    } else {
        window
    };
    let mut step = Step::of(PsnVerdict::InOrder);
    let highest = s.psn.resp_highest;
    let next = psn_add(highest, 1);
    if s.psn.flags & RESP_WINDOW == 0 {
        s.reorder.resp_base = next;
        s.reorder.resp_seen = 0;
        s.reorder.resp_soft = 0;
        s.psn.flags |= RESP_WINDOW;
        s.psn.flags2 &= !RESP_LOST_BELOW;
    }
    let base = s.reorder.resp_base;
    if psn_newer(psn, highest) {
        let skipped = psn_diff(psn, next);
        let n = psn_diff(next, base);
        let p = psn_diff(psn, base);
        if skipped != 0 {
            if continues {
                step.verdict = PsnVerdict::Gap {
                    expected: next,
                    got: psn,
                    skipped,
                };
            } else {
                s.reorder.resp_soft |= bits(n, skipped);
            }
        }
        let top = p.saturating_add(1);
        if top > window {
            slide_responses(s, top - window, n, p, continues, &mut step);
        }
        let base = s.reorder.resp_base;
        s.reorder.resp_seen |= bits(psn_diff(psn, base), 1);
        s.psn.resp_highest = psn;
        s.psn.resp_last = psn;
    } else {
        let below_base = psn_newer(base, psn);
        let bit = if below_base {
            0
        } else {
            bits(psn_diff(psn, base), 1)
        };
        if below_base || s.reorder.resp_seen & bit != 0 {
            step.verdict = PsnVerdict::Retransmit { highest, got: psn };
            add(&mut s.resp_retransmits, 1);
        } else {
            let distance = psn_diff(highest, psn);
            step.verdict = PsnVerdict::Reordered { distance };
            s.reorder.resp_seen |= bit;
            count_reordered(&mut s.reorder, distance, 1);
        }
        s.psn.resp_last = psn;
    }
    // Past the bottom PSNs that arrived; soft ones stay until they arrive or fall out.
    let r = &mut s.reorder;
    let e = psn_diff(psn_add(s.psn.resp_highest, 1), r.resp_base);
    let k = (!(r.resp_seen & low(e))).trailing_zeros();
    if k > 0 {
        r.resp_seen = shr(r.resp_seen, k);
        r.resp_soft = shr(r.resp_soft, k);
        r.resp_base = psn_add(r.resp_base, k);
        s.psn.flags2 &= !RESP_LOST_BELOW;
        if r.resp_base == psn_add(s.psn.resp_highest, 1) {
            s.psn.flags &= !RESP_WINDOW;
        }
    }
    step
}

/// The response window moves up by `k` for a new response at offset `p` (skipped PSNs from
/// offset `n`, holes if `continues`): holes that fall out are lost.
#[inline(always)]
fn slide_responses(s: &mut FlowStats, k: u32, n: u32, p: u32, continues: bool, step: &mut Step) {
    let base = s.reorder.resp_base;
    let inside = if k < 64 { k } else { 64 };
    let limit = if p < inside { p } else { inside };
    let mask = low(limit) & !s.reorder.resp_seen & !s.reorder.resp_soft;
    let mut below = s.psn.flags2 & RESP_LOST_BELOW != 0;
    if mask != 0 {
        add(&mut s.psn_missing, u64::from(mask.count_ones()));
        add(&mut s.psn_gaps, runs(mask, below));
        let (first, len, split) = first_run(mask);
        step.lost(psn_add(base, first), len, split);
    }
    below = mask & bits(k.wrapping_sub(1), 1) != 0;
    let beyond_end = if k < p { k } else { p };
    if continues && beyond_end > 64 {
        let start = if n > 64 { n } else { 64 };
        if beyond_end > start {
            let count = beyond_end - start;
            add(&mut s.psn_missing, u64::from(count));
            if start > 64 || mask & (1 << 63) == 0 {
                add(&mut s.psn_gaps, 1);
            }
            step.lost(psn_add(base, start), count, false);
            below = beyond_end == k;
        }
    } else if k > 64 {
        below = false;
    }
    if below {
        s.psn.flags2 |= RESP_LOST_BELOW;
    } else {
        s.psn.flags2 &= !RESP_LOST_BELOW;
    }
    let r = &mut s.reorder;
    r.resp_seen = shr(r.resp_seen, k);
    r.resp_soft = shr(r.resp_soft, k);
    r.resp_base = psn_add(base, k);
}

/// Holes still open in both spaces (neither closed nor declared lost).
pub fn open_holes(s: &FlowStats) -> u64 {
    let r = &s.reorder;
    let mut n = 0;
    if s.psn.flags & REQ_WINDOW != 0 {
        let e = psn_diff(s.psn.req_expected, r.req_base);
        n += u64::from((low(e) & !r.req_seen & !r.req_lost).count_ones());
    }
    if s.psn.flags & RESP_WINDOW != 0 {
        let e = psn_diff(psn_add(s.psn.resp_highest, 1), r.resp_base);
        n += u64::from((low(e) & !r.resp_seen & !r.resp_soft).count_ones());
    }
    n
}

/// The request holes still open, as runs (first PSN, how many), oldest first.
pub fn open_request_holes(s: &FlowStats) -> impl Iterator<Item = (u32, u32)> {
    let r = &s.reorder;
    let (base, mut open) = if s.psn.flags & REQ_WINDOW != 0 {
        let e = psn_diff(s.psn.req_expected, r.req_base);
        (r.req_base, low(e) & !r.req_seen & !r.req_lost)
    } else {
        (0, 0)
    };
    core::iter::from_fn(move || {
        if open == 0 {
            return None;
        }
        let (first, len, _) = first_run(open);
        open &= !bits(first, len);
        Some((psn_add(base, first), len))
    })
}

/// Reordering as a reader of the record reports it: the counters, with a pending run of first
/// copies (not yet decided by a next request) taken as the reordering it is unless a resend
/// follows. Returns (reordered, distance histogram, largest distance, NAKs caused by
/// reordering).
pub fn reordering(s: &FlowStats) -> (u64, [u64; DISTANCE_BUCKETS], u64, u64) {
    let mut r = s.reorder;
    if s.psn.flags & REQ_TENTATIVE != 0 {
        let mut copy = *s;
        tentative_reordered(&mut copy);
        r = copy.reorder;
    }
    (r.reordered, r.distance, r.distance_max, r.naks)
}

#[cfg(test)]
mod tests;
