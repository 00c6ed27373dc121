//! The PSN rule on hand-made sequences: each expectation derived from the definitions in
//! docs/metrics.md ("Reordering and loss"), not from the code.

use super::*;
use crate::psn::{PSN_MASK, read_span};

const W: u32 = 64;

/// Requests of span 1 in this order; returns the flow record.
fn requests(psns: &[u32]) -> FlowStats {
    let mut s = FlowStats::zeroed();
    for &p in psns {
        request(&mut s, p, 1, W, true);
    }
    s
}

/// (psn_gaps, psn_missing, req_retransmits, reordered as a reader sees it, open holes).
fn counts(s: &FlowStats) -> (u64, u64, u64, u64, u64) {
    (
        s.psn_gaps,
        s.psn_missing,
        s.req_retransmits,
        reordering(s).0,
        open_holes(s),
    )
}

#[test]
fn in_order_across_the_wrap_is_quiet_and_keeps_no_window() {
    let s = requests(&[PSN_MASK - 1, PSN_MASK, 0, 1, 2]);
    assert_eq!(counts(&s), (0, 0, 0, 0, 0));
    assert_eq!(s.psn.flags & REQ_WINDOW, 0);
}

#[test]
fn a_late_first_copy_is_reordering_not_loss() {
    // 100, 101, 103, 104, 102: 102 arrives two below the highest (104).
    let s = requests(&[100, 101, 103, 104, 102, 105]);
    assert_eq!(counts(&s), (0, 0, 0, 1, 0));
    let (_, hist, max, naks) = reordering(&s);
    assert_eq!((hist, max, naks), ([0, 1, 0, 0, 0, 0], 2, 0));
    // Nothing open; the reordered PSN is remembered (for a NAK caused by it) until it falls
    // out of the window, then the window is gone.
    let mut s = s;
    for p in 106..106 + W {
        request(&mut s, p, 1, W, true);
    }
    assert_eq!(s.psn.flags & REQ_WINDOW, 0);
    assert_eq!(counts(&s), (0, 0, 0, 1, 0));
}

#[test]
fn a_pending_reordered_copy_is_reported_as_reordered() {
    let s = requests(&[1, 3, 2]);
    assert_eq!(s.reorder.reordered, 0, "decided by the next request");
    assert_eq!(counts(&s), (0, 0, 0, 1, 0));
}

#[test]
fn sprayed_round_robin_over_four_paths_counts_every_late_copy() {
    // PSN i sent at i, path i % 4 adds 0, 1, 2, 3 slots: arrival order by (i + i % 4, i).
    let mut order: [u32; 64] = core::array::from_fn(|i| i as u32);
    order.sort_unstable_by_key(|&i| (i + i % 4 * 3, i));
    let mut late = 0;
    let mut highest = None;
    for &p in &order {
        if highest.is_some_and(|h| p < h) {
            late += 1;
        }
        highest = Some(highest.map_or(p, |h: u32| h.max(p)));
    }
    let s = requests(&order);
    assert!(late > 20, "the pattern reorders ({late})");
    assert_eq!(counts(&s), (0, 0, 0, late, 0));
}

#[test]
fn a_hole_that_outlives_the_window_is_lost_and_its_late_copy_is_a_retransmission() {
    let mut s = FlowStats::zeroed();
    request(&mut s, 0, 1, 8, true);
    for p in 2..=8 {
        request(&mut s, p, 1, 8, true);
    }
    // 1 is still within the 8 PSNs below the next expected one (9): open.
    assert_eq!(counts(&s), (0, 0, 0, 0, 1));
    let step = request(&mut s, 9, 1, 8, true);
    assert_eq!((step.lost_first, step.lost_count), (1, 1));
    assert_eq!(counts(&s), (1, 1, 0, 0, 0));
    let late = request(&mut s, 1, 1, 8, true);
    assert!(matches!(late.verdict, PsnVerdict::Retransmit { .. }));
    assert_eq!(counts(&s), (1, 1, 1, 0, 0));
}

#[test]
fn a_jump_beyond_the_window_declares_the_skipped_psns_lost_at_once() {
    let s = requests(&[10, 11, 1000]);
    // 12..=999 skipped: those below 1001 - 64 = 937 fall out at once, 937..=999 stay open.
    assert_eq!(counts(&s), (1, 937 - 12, 0, 0, 999 - 937 + 1));
}

#[test]
fn a_nak_declares_its_hole_lost_and_the_resend_is_a_retransmission() {
    let mut s = requests(&[1, 2, 4, 5]);
    let step = nak(&mut s, 3);
    assert_eq!((step.lost_first, step.lost_count), (3, 1));
    assert_eq!(counts(&s), (1, 1, 0, 0, 0));
    // The selective resend, then new PSNs.
    request(&mut s, 3, 1, W, true);
    request(&mut s, 6, 1, W, true);
    assert_eq!(counts(&s), (1, 1, 1, 0, 0));
    assert_eq!(reordering(&s).3, 0);
}

#[test]
fn go_back_n_after_a_nak_counts_each_lost_psn_once_and_each_copy_resent() {
    // 3 and 4 lost; NAK for 3; go-back-N resends 3..=6.
    let mut s = requests(&[1, 2, 5, 6]);
    nak(&mut s, 3);
    for p in 3..=6 {
        request(&mut s, p, 1, W, true);
    }
    request(&mut s, 7, 1, W, true);
    // One loss event of two PSNs; four copies resent (3 closing a lost hole, 4 continuing the
    // run, 5 and 6 duplicates).
    assert_eq!(counts(&s), (1, 2, 4, 0, 0));
}

#[test]
fn go_back_n_after_a_timeout_without_nak_is_loss() {
    // 3 and 4 lost, no NAK; the sender times out and resends 3..=6.
    let s = requests(&[1, 2, 5, 6, 3, 4, 5, 6, 7]);
    assert_eq!(counts(&s), (1, 2, 4, 0, 0));
}

#[test]
fn reordered_copies_followed_by_new_psns_stay_reordered() {
    // 3 and 4 late together, then new PSNs: no duplicate follows.
    let s = requests(&[1, 2, 5, 6, 3, 4, 7]);
    assert_eq!(counts(&s), (0, 0, 0, 2, 0));
    let (_, hist, max, _) = reordering(&s);
    // Distances 6-3 and 6-4.
    assert_eq!((hist, max), ([0, 2, 0, 0, 0, 0], 3));
}

#[test]
fn a_nak_caused_by_reordering_is_counted_when_the_first_copy_came_first() {
    let mut s = requests(&[1, 3, 2, 4]);
    nak(&mut s, 2);
    assert_eq!(counts(&s), (0, 0, 0, 1, 0));
    assert_eq!(reordering(&s).3, 1);
}

#[test]
fn a_nak_for_a_psn_seen_here_is_caused_by_reordering_only_on_a_flow_that_reorders() {
    // A flow that reorders (3 after 4), then in order far past the window; a go-back-N round
    // resends 10..=12 and its copies arrive 10, 12, 11: the responder NAKs 11, which had copies
    // here (its first, in order, long ago, and the resend).
    let mut s = requests(&[1, 2, 4, 3]);
    for p in 5..200 {
        request(&mut s, p, 1, W, true);
    }
    for p in [10, 12, 11] {
        request(&mut s, p, 1, W, true);
    }
    nak(&mut s, 11);
    assert_eq!(reordering(&s).3, 1);
    // A PSN inside the window that arrived in order: the same.
    nak(&mut s, 198);
    assert_eq!(reordering(&s).3, 2);
    // A flow that never reordered (a sender's own capture, the loss after this point): a NAK
    // for a PSN seen here is not blamed on reordering.
    let mut s = requests(&[1, 2, 3, 4, 5]);
    nak(&mut s, 3);
    assert_eq!(counts(&s), (0, 0, 0, 0, 0));
    assert_eq!(reordering(&s).3, 0);
}

#[test]
fn a_nak_below_a_psn_that_never_arrived_is_not_counted() {
    // Reordering (3 after 4), then 6 never arrives and falls out of the window: below it the
    // observer no longer knows which PSNs had a copy, so a NAK for 5 counts nothing.
    let mut s = requests(&[1, 2, 4, 3, 5, 7]);
    for p in 8..100 {
        request(&mut s, p, 1, W, true);
    }
    assert_eq!(s.psn_missing, 1);
    nak(&mut s, 5);
    assert_eq!(reordering(&s).3, 0);
    // Above it, it does.
    nak(&mut s, 7);
    assert_eq!(reordering(&s).3, 1);
}

#[test]
fn a_lost_psn_that_turns_up_twice_was_not_lost() {
    // A flow that reorders (-1 arrives after 0); NAK for 2 before its late original arrives;
    // then the resend: 2 was reordered, the NAK was caused by reordering, one of the two
    // copies is a retransmission.
    let mut s = requests(&[-2i32 as u32 & PSN_MASK, 0, -1i32 as u32 & PSN_MASK, 1, 3, 4]);
    assert_eq!(counts(&s), (0, 0, 0, 1, 1));
    nak(&mut s, 2);
    assert_eq!(counts(&s), (1, 1, 0, 1, 0));
    request(&mut s, 2, 1, W, true); // the late original: closes a lost hole
    assert_eq!(counts(&s), (1, 1, 1, 1, 0));
    request(&mut s, 2, 1, W, true); // the resend
    request(&mut s, 5, 1, W, true);
    assert_eq!(counts(&s), (0, 0, 1, 2, 0));
    let (_, hist, max, naks) = reordering(&s);
    // -1 at distance 1; 2 at the distance its first copy had: 4 - 2.
    assert_eq!((hist, max, naks), ([1, 1, 0, 0, 0, 0], 2, 1));
    // On a flow that has not reordered, a late copy after a NAK is a resend: the same PSN
    // twice does not undo the loss.
    let mut s = requests(&[1, 3, 4]);
    nak(&mut s, 2);
    for p in [2, 2, 5] {
        request(&mut s, p, 1, W, true);
    }
    assert_eq!(counts(&s), (1, 1, 2, 0, 0));
}

#[test]
fn lost_psns_corrected_to_reordered_keep_the_distances_their_first_copies_had() {
    // A flow that reorders (-1 after 0); 2 and 5 skipped, each NAKed; their late originals
    // arrive while 7 and then 9 are the highest (distances 5 and 4), each closing a lost hole;
    // then both resends: both were reordered, at those distances, whatever the highest is
    // when the resends come (12).
    let mut s = requests(&[
        -2i32 as u32 & PSN_MASK,
        0,
        -1i32 as u32 & PSN_MASK,
        1,
        3,
        4,
        6,
        7,
    ]);
    nak(&mut s, 2);
    nak(&mut s, 5);
    request(&mut s, 2, 1, W, true); // highest 7: distance 5
    for p in [8, 9] {
        request(&mut s, p, 1, W, true);
    }
    request(&mut s, 5, 1, W, true); // highest 9: distance 4
    for p in [10, 11, 12, 2, 5, 13] {
        request(&mut s, p, 1, W, true);
    }
    assert_eq!(counts(&s), (0, 0, 2, 3, 0));
    let (_, hist, max, naks) = reordering(&s);
    // -1 at distance 1; 5 and 4 in the 4-7 bucket (not 10 and 7, the distances from 12).
    assert_eq!((hist, max, naks), ([1, 0, 2, 0, 0, 0], 5, 2));
}

#[test]
fn a_lost_psn_resent_in_two_go_back_n_rounds_stays_lost() {
    // 3 lost; NAK for 3; go-back-N resends 3..=6, then (another NAK or a timeout) 3..=6 again.
    // The first round's copy of 3 went on with duplicates: a resend, so the second round's
    // copy of 3 is another resend, not proof that 3 was only reordered.
    let mut s = requests(&[1, 2, 4, 5, 6]);
    nak(&mut s, 3);
    for p in [3, 4, 5, 6, 3, 4, 5, 6, 7] {
        request(&mut s, p, 1, W, true);
    }
    assert_eq!(counts(&s), (1, 1, 8, 0, 0));
    // The same without a NAK: the first round decides 3 lost by the duplicate after it.
    let s = requests(&[1, 2, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 7]);
    assert_eq!(counts(&s), (1, 1, 8, 0, 0));
}

#[test]
fn a_duplicate_of_a_reordered_psn_is_a_retransmission() {
    let s = requests(&[1, 3, 2, 4, 2, 5]);
    assert_eq!(counts(&s), (0, 0, 1, 1, 0));
}

#[test]
fn reordering_across_the_psn_wrap() {
    let s = requests(&[PSN_MASK - 1, 1, PSN_MASK, 0, 2]);
    // PSN_MASK (distance 2) and 0 (distance 1) arrive after 1.
    assert_eq!(counts(&s), (0, 0, 0, 2, 0));
    let (_, hist, max, _) = reordering(&s);
    assert_eq!((hist, max), ([1, 1, 0, 0, 0, 0], 2));
}

#[test]
fn read_reservations_are_not_holes() {
    let mut s = FlowStats::zeroed();
    request(&mut s, 10, read_span(12288, 4096), W, true);
    request(&mut s, 13, 1, W, true);
    assert_eq!(counts(&s), (0, 0, 0, 0, 0));
    // A READ arriving after the request that follows it: reordered, its PSNs all seen.
    let mut t = FlowStats::zeroed();
    request(&mut t, 9, 1, W, true);
    request(&mut t, 13, 1, W, true);
    request(&mut t, 10, 3, W, true);
    request(&mut t, 14, 1, W, true);
    assert_eq!(counts(&t), (0, 0, 0, 1, 0));
}

#[test]
fn loss_events_are_runs_of_consecutive_lost_psns() {
    let mut s = FlowStats::zeroed();
    for p in [0, 4, 8] {
        request(&mut s, p, 1, 4, true);
    }
    // 1..=3 fell out when 8 arrived (window 4: base 5): one event; 5..=7 still open.
    assert_eq!(counts(&s), (1, 3, 0, 0, 3));
    request(&mut s, 9, 1, 4, true);
    request(&mut s, 12, 1, 4, true);
    // 5..=7 fell out too, right after 4 (seen): a second event; 10, 11 open.
    assert_eq!(counts(&s), (2, 6, 0, 0, 2));
}

#[test]
fn read_responses_sprayed_are_reordered_not_resent() {
    let mut s = FlowStats::zeroed();
    // One response 10..=13 (FIRST 10, MIDDLE 11 12, LAST 13), the next 14..=15; arrival
    // 10, 11, 14 (FIRST of the next), 12, 13, 15.
    for (p, continues) in [
        (10, false),
        (11, true),
        (14, false),
        (12, true),
        (13, true),
        (15, true),
    ] {
        read_response(&mut s, p, continues, W, true);
    }
    assert_eq!((s.resp_retransmits, s.psn_gaps, s.psn_missing), (0, 0, 0));
    assert_eq!(reordering(&s).0, 2);
    assert_eq!(open_holes(&s), 0);
    // A real resend.
    read_response(&mut s, 12, true, W, true);
    assert_eq!(s.resp_retransmits, 1);
}

#[test]
fn a_read_response_hole_is_lost_when_it_falls_out_of_the_window() {
    let mut s = FlowStats::zeroed();
    read_response(&mut s, 0, false, 4, true);
    read_response(&mut s, 2, true, 4, true); // 1 skipped inside a response: a hole
    assert_eq!(open_holes(&s), 1);
    for p in 3..=5 {
        read_response(&mut s, p, true, 4, true);
    }
    assert_eq!((s.psn_gaps, s.psn_missing, open_holes(&s)), (1, 1, 0));
    // PSNs skipped before a FIRST are not holes: nothing is lost when they fall out.
    read_response(&mut s, 20, false, 4, true);
    read_response(&mut s, 30, false, 4, true);
    assert_eq!((s.psn_gaps, s.psn_missing, open_holes(&s)), (1, 1, 0));
}

#[test]
fn distance_buckets() {
    let b: [usize; 9] = [1, 2, 3, 4, 7, 8, 16, 31, 32].map(bucket);
    assert_eq!(b, [0, 1, 1, 2, 2, 3, 4, 4, 5]);
}
