//! Two observation points of one flow (pcapng interfaces 1 and 2, as TC egress before a lossy
//! link and the capture after it would be): the PSNs dropped between them are known exactly.

use roce_observer_common::frames::RoceFrame;

use super::*;
use crate::engine::{EngineConfig, snapshot::PathPair};

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
    let e = replay(&psns, &dropped, &[1010]);
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
    assert_eq!(down.psn_missing, 5);
}

#[test]
fn many_psns_and_a_wrap_are_judged_through_the_ring() {
    // 3 rings' worth of PSNs across the 24-bit wrap.
    let start = PSN_MASK - 5000;
    let psns: Vec<u32> = (0..3 * RING).map(|k| (start + k) & PSN_MASK).collect();
    let dropped: Vec<u32> = psns.iter().copied().skip(7).step_by(997).collect();
    assert!(dropped.iter().any(|&p| p < start) && dropped.iter().any(|&p| p > start));
    let e = replay(&psns, &dropped, &[]);
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

/// dumpcap writes each interface's packets in batches: here all of the upstream point's come
/// first in the file, then the downstream point's. With both interfaces declared (as a pcapng
/// does before its packets), the comparison does not depend on that order.
#[test]
fn a_point_whose_packets_come_later_in_the_file_is_compared_with_all_of_the_first() {
    let mut e = Engine::new(EngineConfig::default());
    e.set_iface_name(UP, "up");
    e.set_iface_name(DOWN, "down");
    let dropped = [17u32, 100, 101, 250];
    for psn in 0..300u32 {
        send(&mut e, UP, psn, u64::from(psn) * 1000);
    }
    for psn in (0..300u32).filter(|p| !dropped.contains(p)) {
        send(&mut e, DOWN, psn, u64::from(psn) * 1000 + 500);
    }
    let paths = e.snapshot(T0 + 1_000_000_000).paths;
    let lost = pair(&paths, "up", "down");
    assert_eq!(lost.missing_psns, dropped);
    assert_eq!(lost.both, 296);
}

/// Without declared interfaces (interface names are how a capture declares its points), a
/// flow's ring starts when a second point sees it: memory for multi-point flows only, and the
/// PSNs before that are not compared.
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
    assert_eq!(lost.both, 98, "PSN 0 came before the second point");
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
