//! Two observation points of one flow (pcapng interfaces 1 and 2, as TC egress before a lossy
//! link and the capture after it would be): the PSNs dropped between them are known exactly.

use roce_observer_common::frames::RoceFrame;

use super::*;
use crate::engine::{Engine, EngineConfig, analysis::Feed};
use crate::report::PathPair;

const T0: u64 = 1_700_000_000_000_000_000;
const UP: u32 = 1;
const DOWN: u32 = 2;

fn send(e: &mut Engine, ifindex: u32, psn: u32, t: u64) {
    let f = RoceFrame {
        tos: (26 << 2) | 2,
        payload: 256,
        ..RoceFrame::new(0x0a, 0x12, psn & PSN_MASK)
    }
    .build();
    e.ingest_frame(T0 + t, &f, f.len() as u32, ifindex);
}

/// Every PSN of `psns` seen upstream; downstream all but `dropped`, then the retransmissions of
/// `resent` at both points.
fn replay(psns: &[u32], dropped: &[u32], resent: &[u32]) -> Engine {
    let mut e = Engine::new(EngineConfig::default());
    e.set_iface_name(UP, "up");
    e.set_iface_name(DOWN, "down");
    let mut t = 0;
    for &psn in psns {
        send(&mut e, UP, psn, t);
        if !dropped.contains(&psn) {
            send(&mut e, DOWN, psn, t + 500);
        }
        t += 1000;
    }
    for &psn in resent {
        send(&mut e, UP, psn, t);
        send(&mut e, DOWN, psn, t + 500);
        t += 1000;
    }
    e
}

fn pair<'a>(paths: &'a [PathPair], up: &str, down: &str) -> &'a PathPair {
    paths
        .iter()
        .find(|p| p.upstream.iface == up && p.downstream.iface == down)
        .unwrap_or_else(|| panic!("no pair {up} -> {down} in {paths:?}"))
}

#[test]
fn drops_between_two_points_are_counted_by_psn() {
    let psns: Vec<u32> = (1000..3000).collect();
    let dropped = [1010, 1500, 1501, 1502, 2998];
    let mut e = replay(&psns, &dropped, &[1010]);
    let paths = e.snapshot(T0 + 10_000_000).paths;
    assert_eq!(paths.len(), 2, "{paths:?}");
    let lost = pair(&paths, "up", "down");
    assert_eq!(lost.missing, 5);
    assert_eq!(lost.missing_psns, dropped.to_vec());
    // Every PSN is compared: the capture declared both interfaces, so the flow's ring starts
    // at its first packet.
    assert_eq!(lost.both, 2000 - 5);
    assert_eq!(
        lost.downstream_retransmits_unseen, 1,
        "1010 resent, never seen first"
    );
    let back = pair(&paths, "down", "up");
    assert_eq!((back.missing, back.both), (0, 1995));
    assert_eq!(back.downstream_retransmits_unseen, 0);
    // The downstream point's own gap counters see the same loss.
    let down = e
        .snapshot(T0 + 10_000_000)
        .flows
        .into_iter()
        .find(|f| f.iface == "down")
        .expect("downstream flow");
    // 2998 is within the reorder window of the flow's last PSN: still a hole, not declared lost.
    assert_eq!((down.psn_missing, down.psn_holes), (4, 1));
}

#[test]
fn many_psns_and_a_wrap_are_judged_through_the_ring() {
    // 3 rings' worth of PSNs across the 24-bit wrap.
    let start = PSN_MASK - 5000;
    let psns: Vec<u32> = (0..3 * RING).map(|k| (start + k) & PSN_MASK).collect();
    let dropped: Vec<u32> = psns.iter().copied().skip(7).step_by(997).collect();
    assert!(dropped.iter().any(|&p| p < start) && dropped.iter().any(|&p| p > start));
    let mut e = replay(&psns, &dropped, &[]);
    let paths = e.snapshot(T0 + 100_000_000).paths;
    let lost = pair(&paths, "up", "down");
    assert_eq!(lost.missing, dropped.len() as u64);
    assert_eq!(
        lost.missing_psns,
        dropped.iter().copied().take(EXAMPLES).collect::<Vec<_>>()
    );
    assert_eq!(lost.both, (psns.len() - dropped.len()) as u64);
}

#[test]
fn a_point_that_stopped_seeing_the_flow_is_not_blamed() {
    // The downstream capture ends at PSN 1499; upstream goes on to 1999.
    let mut e = Engine::new(EngineConfig::default());
    e.set_iface_name(UP, "up");
    e.set_iface_name(DOWN, "down");
    for psn in 1000..2000u32 {
        send(&mut e, UP, psn, psn as u64 * 1000);
        if psn < 1500 {
            send(&mut e, DOWN, psn, psn as u64 * 1000 + 500);
        }
    }
    let paths = e.snapshot(T0 + 10_000_000_000).paths;
    assert_eq!(pair(&paths, "up", "down").missing, 0);
    assert_eq!(pair(&paths, "up", "down").both, 500);
}

#[test]
fn a_flow_seen_at_one_point_has_no_path_view() {
    let mut e = Engine::new(EngineConfig::default());
    for psn in 0..100 {
        send(&mut e, UP, psn, psn as u64);
    }
    assert!(e.snapshot(T0 + 1_000).paths.is_empty());
}

/// dumpcap writes each interface's packets in batches: downstream's resend of a PSN it never
/// saw can come in the file before upstream's first copy. The resend is judged with its PSN,
/// not when it is read, so the order of the file does not matter (as on the kernel path).
#[test]
fn a_resend_read_before_upstreams_first_copy_counts_as_unseen() {
    let psns = 3 * RING;
    let dropped = [17u32, 100, 5000];
    // Each point's packets in time order: every PSN once (downstream without `dropped`);
    // later, 17 resent twice and 5000 once (after a timeout: once the holes outlived the
    // reorder window, so downstream declared them lost), and a go-back-N from 100 to 110 (its
    // first copy closes downstream's hole, the next ones repeat PSNs it saw: lost).
    let resent = |p: u32| -> Vec<u32> {
        match p {
            90 => vec![17, 17],
            110 => (100..=110).collect(),
            5070 => vec![5000],
            _ => Vec::new(),
        }
    };
    let at = |point: u32, offset: u64| {
        let mut out: Vec<(u32, u32, u64)> = Vec::new();
        for p in 0..psns {
            let t = u64::from(p) * 1_000_000 + offset;
            if point == UP || !dropped.contains(&p) {
                out.push((point, p, t));
            }
            for (k, r) in resent(p).into_iter().enumerate() {
                out.push((point, r, t + 1000 * (k as u64 + 1)));
            }
        }
        out
    };
    let (up, down) = (at(UP, 0), at(DOWN, 500));
    let judged = |order: &[(u32, u32, u64)]| {
        let mut e = Engine::new(EngineConfig::default());
        e.set_iface_name(UP, "up");
        e.set_iface_name(DOWN, "down");
        for &(point, psn, t) in order {
            send(&mut e, point, psn, t);
        }
        let paths = e.snapshot(T0 + 100_000_000_000).paths;
        let lost = pair(&paths, "up", "down");
        (
            lost.missing_psns.clone(),
            lost.downstream_retransmits_unseen,
        )
    };
    let mut by_time = [up.clone(), down.clone()].concat();
    by_time.sort_by_key(|e| e.2);
    // Batches of 64 packets per interface, downstream's first.
    let batched: Vec<_> = down
        .chunks(64)
        .zip(up.chunks(64))
        .flat_map(|(d, u)| d.iter().chain(u).copied())
        .collect();
    // 17 twice, 100 and 5000 once: resends of PSNs upstream saw first and downstream never
    // did; 101..110 downstream saw the first time.
    let want = (dropped.to_vec(), 4);
    assert_eq!(judged(&by_time), want, "file in time order");
    assert_eq!(judged(&batched), want, "downstream's batches first");
}

/// Without declared interfaces (interface names are how a capture declares its points), a
/// flow's ring starts when a second point sees it: memory for multi-point flows only. The
/// first point's PSNs before that are compared as far as they were an in-order run (each the
/// one after the last, none resent) up to the second point's arrival.
#[test]
fn without_declared_points_the_ring_starts_at_the_second_point() {
    let mut e = Engine::new(EngineConfig::default());
    for psn in 0..100u32 {
        send(&mut e, UP, psn, u64::from(psn) * 1000);
        if psn != 50 {
            send(&mut e, DOWN, psn, u64::from(psn) * 1000 + 500);
        }
    }
    let paths = e.snapshot(T0 + 1_000_000_000).paths;
    let lost = paths
        .iter()
        .find(|p| p.missing > 0)
        .expect("a pair with a loss");
    assert_eq!(lost.missing_psns, [50]);
    assert_eq!(
        lost.both, 99,
        "PSN 0, before the second point, compared too"
    );
}

/// The first point's history before the second point: only its last in-order run counts
/// (here 30..=39, after a gap at 20 and a resend of 25), the rest is unknown.
#[test]
fn before_the_second_point_only_the_last_in_order_run_is_compared() {
    let mut e = Engine::new(EngineConfig::default());
    let mut t = 0;
    for psn in (10..20).chain(21..30).chain([25]).chain(30..40) {
        send(&mut e, UP, psn, t);
        t += 1000;
    }
    for psn in 40..50u32 {
        send(&mut e, UP, psn, t);
        if psn != 45 {
            send(&mut e, DOWN, psn, t + 500);
        }
        t += 1000;
    }
    let paths = e.snapshot(T0 + 1_000_000_000).paths;
    let lost = paths.iter().find(|p| p.missing > 0).expect("a loss");
    assert_eq!(lost.missing_psns, [45]);
    // Both saw 40..49 but 45; upstream's 30..39 are compared (downstream did not cover them).
    assert_eq!(lost.both, 9);
    let up = e.analyses.paths.loss.flows().next().expect("a ring").1;
    assert_eq!(up.points[0].first_psn(), Some(30));
}

/// Flows that cross one point only cannot take the rings of the flows that cross two: after
/// more single-point flows than there are rings, a flow seen at both points is still judged.
#[test]
fn single_point_flows_leave_rings_for_flows_seen_at_two_points() {
    let mut e = Engine::new(EngineConfig::default());
    e.set_iface_name(UP, "up");
    e.set_iface_name(DOWN, "down");
    for qp in 0..MAX_FLOWS as u32 + 100 {
        let f = RoceFrame::new(0x0a, 0x1000 + qp, 1).build();
        e.ingest_frame(T0 + u64::from(qp), &f, f.len() as u32, UP);
    }
    for psn in 0..20u32 {
        send(&mut e, UP, psn, 1_000_000 + u64::from(psn) * 1000);
        if psn != 7 {
            send(&mut e, DOWN, psn, 1_000_000 + u64::from(psn) * 1000 + 500);
        }
    }
    let snap = e.snapshot(T0 + 1_000_000_000);
    assert_eq!(pair(&snap.paths, "up", "down").missing_psns, [7]);
    assert_eq!(
        snap.paths.len(),
        2,
        "only the flow seen at two points has pairs"
    );
}

/// The same frames the kernel path's way: path events (gaps, finished resend runs) from the
/// shared observation, and the flow records read at the end (first and highest PSN, the open
/// resend run), as `run -i` reads its map (ranges.rs).
fn as_kernel(frames: impl FnOnce(&mut Engine)) -> Vec<PathPair> {
    let mut e = Engine::with_feed(EngineConfig::default(), Feed::Events);
    e.set_iface_name(UP, "up");
    e.set_iface_name(DOWN, "down");
    frames(&mut e);
    e.read_flows_as_kernel();
    assert!(
        e.analyses.paths.loss.flows().next().is_none(),
        "the kernel-path view must not use the ring"
    );
    sorted(e.snapshot(T0 + 100_000_000_000).paths)
}

fn sorted(mut v: Vec<PathPair>) -> Vec<PathPair> {
    v.sort_by(|a, b| (&a.upstream, &a.downstream).cmp(&(&b.upstream, &b.downstream)));
    v
}

/// Every PSN of `psns` upstream, downstream all but `dropped`, then go-back-N from each PSN of
/// `back_to` up to the highest, at both points.
fn go_back(e: &mut Engine, psns: &[u32], dropped: &[u32], back_to: &[u32]) {
    let mut t = 0;
    for &psn in psns {
        send(e, UP, psn, t);
        if !dropped.contains(&psn) {
            send(e, DOWN, psn, t + 500);
        }
        t += 1000;
    }
    let last = *psns.last().expect("psns");
    for &from in back_to {
        for psn in from..=last {
            send(e, UP, psn, t);
            send(e, DOWN, psn, t + 500);
            t += 1000;
        }
    }
}

#[test]
fn kernel_view_equals_the_ring_on_drops_and_go_back_n() {
    let psns: Vec<u32> = (1000..1300).collect();
    let dropped = [1010, 1100, 1101, 1102, 1299];
    // The last run (from 1100) is still open at the end: read from the flow record.
    let back_to = [1250, 1290, 1100];
    let ring = {
        let mut e = Engine::new(EngineConfig::default());
        e.set_iface_name(UP, "up");
        e.set_iface_name(DOWN, "down");
        go_back(&mut e, &psns, &dropped, &back_to);
        sorted(e.snapshot(T0 + 100_000_000_000).paths)
    };
    let kernel = as_kernel(|e| go_back(e, &psns, &dropped, &back_to));
    assert_eq!(kernel, ring);
    let lost = pair(&kernel, "up", "down");
    // 1299, dropped downstream the first time, came as new in the first go-back: not lost.
    assert_eq!(lost.missing_psns, [1010, 1100, 1101, 1102]);
    // 1100..1102 resent once (in the open run from 1100), 1010 never.
    assert_eq!(lost.downstream_retransmits_unseen, 3);
}

#[test]
fn kernel_view_equals_the_ring_across_the_psn_wrap() {
    let start = PSN_MASK - 300;
    let psns: Vec<u32> = (0..600).map(|k| (start + k) & PSN_MASK).collect();
    let dropped: Vec<u32> = psns.iter().copied().skip(3).step_by(97).collect();
    let run = |e: &mut Engine| {
        let mut t = 0;
        for &psn in &psns {
            send(e, UP, psn, t);
            if !dropped.contains(&psn) {
                send(e, DOWN, psn, t + 500);
            }
            t += 1000;
        }
    };
    let ring = {
        let mut e = Engine::new(EngineConfig::default());
        e.set_iface_name(UP, "up");
        e.set_iface_name(DOWN, "down");
        run(&mut e);
        sorted(e.snapshot(T0 + 100_000_000_000).paths)
    };
    let kernel = as_kernel(run);
    assert_eq!(kernel, ring);
    assert_eq!(pair(&kernel, "up", "down").missing_psns, dropped);
}

#[test]
fn kernel_view_does_not_blame_a_point_that_stopped_early() {
    let kernel = as_kernel(|e| {
        for psn in 1000..2000u32 {
            send(e, UP, psn, u64::from(psn) * 1000);
            if psn < 1500 && psn != 1200 {
                send(e, DOWN, psn, u64::from(psn) * 1000 + 500);
            }
        }
    });
    let lost = pair(&kernel, "up", "down");
    assert_eq!((lost.missing, lost.both), (1, 499));
    assert_eq!(lost.missing_psns, [1200]);
}

/// A stream replayed twice at both points (every packet of the second pass a retransmission,
/// no gap): no path event at all, and nothing missing.
#[test]
fn a_replayed_stream_makes_no_path_event() {
    let mut e = Engine::with_feed(EngineConfig::default(), Feed::Events);
    for _ in 0..2 {
        for psn in 0..500u32 {
            send(&mut e, UP, psn, u64::from(psn));
            send(&mut e, DOWN, psn, u64::from(psn) + 1);
        }
    }
    let reads: Vec<_> = e.flows.iter().map(|(k, v)| (*k, *v.stats())).collect();
    for (_, stats) in &reads {
        assert_eq!(stats.req_retransmits, 500);
        assert_eq!((stats.path_events, stats.path_suppressed), (0, 0));
    }
}

/// Past `PATH_EVENT_LIMIT` events in one window a flow's events are counted, not sent, and its
/// path view says it is incomplete (a lower bound).
#[test]
fn over_the_event_limit_the_view_is_marked_incomplete() {
    let limit = roce_observer_common::PATH_EVENT_LIMIT;
    let dropped: Vec<u32> = (0..limit + 10).map(|k| 10 + 2 * k).collect();
    // Past the last drop by more than the reorder window: every hole is declared lost, one
    // path event each.
    let psns: Vec<u32> =
        (0..2 * limit + 40 + roce_observer_common::sequence::MAX_REORDER_WINDOW).collect();
    let kernel = as_kernel(|e| {
        // All within a few microseconds: one window.
        for &psn in &psns {
            send(e, UP, psn, u64::from(psn));
            if !dropped.contains(&psn) {
                send(e, DOWN, psn, u64::from(psn));
            }
        }
    });
    let lost = pair(&kernel, "up", "down");
    assert!(lost.incomplete);
    assert_eq!(lost.missing, u64::from(limit));
    assert!(!pair(&kernel, "down", "up").incomplete || lost.incomplete);
}

/// One capture merged with itself (`mergecap -I none a.pcap a.pcap`): every packet at two
/// points, including the sender's resends of PSNs lost before both. Nothing was lost between
/// them, so no pair may count those resends (it did, 24 on a Soft-RoCE loss capture, when the
/// count was per point instead of per pair).
#[test]
fn a_stream_seen_twice_blames_no_pair_for_loss_before_both() {
    let stream = |e: &mut Engine| {
        let mut t = 0;
        let psns = (0..50u32).filter(|p| ![10, 11, 30].contains(p));
        for psn in psns.chain(10..20).chain(30..35) {
            send(e, UP, psn, t);
            send(e, DOWN, psn, t + 1);
            t += 1000;
        }
    };
    let ring = {
        let mut e = Engine::new(EngineConfig::default());
        e.set_iface_name(UP, "up");
        e.set_iface_name(DOWN, "down");
        stream(&mut e);
        sorted(e.snapshot(T0 + 100_000_000_000).paths)
    };
    for (what, paths) in [("ring", &ring), ("kernel", &as_kernel(stream))] {
        for p in paths {
            assert_eq!(
                (p.missing, p.downstream_retransmits_unseen),
                (0, 0),
                "{what}: {p:?}"
            );
            assert_eq!(p.both, 47, "{what}");
        }
    }
}

/// A path event the kernel could not send (ring buffer full) is counted in the flow record
/// (`path_lost`): the view of that point is then marked incomplete, since a gap it saw may be
/// missing here. The records are those of a stream seen whole at both points, with the count
/// set on the downstream one as the kernel would after losing that point's gap event.
#[test]
fn a_path_event_lost_to_the_ring_marks_the_view_incomplete() {
    for lost in [0, 1] {
        let mut e = Engine::with_feed(EngineConfig::default(), Feed::Events);
        e.set_iface_name(UP, "up");
        e.set_iface_name(DOWN, "down");
        for psn in 0..20u32 {
            send(&mut e, UP, psn, u64::from(psn) * 1000);
            send(&mut e, DOWN, psn, u64::from(psn) * 1000 + 500);
        }
        let reads: Vec<_> = e.flows.iter().map(|(k, v)| (*k, *v.stats())).collect();
        for (k, mut stats) in reads {
            if k.ifindex == DOWN {
                stats.path_lost = lost;
            }
            e.analyses.paths.loss.from_events.flow_read(&k, &stats);
        }
        let paths = e.snapshot(T0 + 100_000_000_000).paths;
        let down = pair(&paths, "up", "down");
        assert_eq!(down.incomplete, lost > 0, "path_lost {lost}: {down:?}");
        assert_eq!(down.missing, 0);
        // The other direction of comparison reads the same point's view.
        assert_eq!(pair(&paths, "down", "up").incomplete, lost > 0);
    }
}

#[test]
fn a_point_announced_after_the_first_packets_is_compared_from_the_first_psn() {
    // An SLL2 capture (`tcpdump -i any`) announces each interface with its first packet: the
    // first point's packets before the second point appears still count.
    let mut e = Engine::new(EngineConfig::default());
    e.set_iface_name(UP, "up");
    send(&mut e, UP, 1000, 0);
    send(&mut e, UP, 1001, 1000);
    e.set_iface_name(DOWN, "down");
    send(&mut e, DOWN, 1000, 1500);
    send(&mut e, DOWN, 1001, 1600);
    let mut t = 2000;
    for psn in 1002..1010 {
        send(&mut e, UP, psn, t);
        if psn != 1005 {
            send(&mut e, DOWN, psn, t + 500);
        }
        t += 1000;
    }
    let paths = e.snapshot(T0 + 10_000_000).paths;
    let lost = pair(&paths, "up", "down");
    assert_eq!(lost.missing_psns, vec![1005]);
    assert_eq!(lost.both, 9, "1000..1009 but 1005");
}
