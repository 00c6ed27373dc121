//! Layer 1 for "where was it lost" on the kernel path: hand-chosen request PSN sequences through
//! the XDP and TC programs with BPF_PROG_TEST_RUN, and the path events they send read back
//! exactly (roce-observer-common/src/observe.rs, `path_events`): one event per request gap (its
//! first missing PSN and count) and one per finished resend run (its first and last PSN; one
//! event with both for a gap that finishes a run), the
//! open run and the first request PSN in the flow record, nothing at all for a stream that is
//! only retransmitted (no gap), and at most `PATH_EVENT_LIMIT` per flow and window, the rest
//! counted in the flow record; a path event lost to a full ring buffer is counted in the flow
//! record too (`path_lost`), and the pairs of its point are then marked incomplete.

use std::time::{Duration, Instant};

use integration_tests::{fill_event_ring, require_root};
use roce_observer::report::PathPair;
use roce_observer::{
    engine::{Engine, EngineConfig},
    run::refresh,
    source::kernel::{KernelOptions, KernelSource},
};
use roce_observer_common::{
    Counter, EventBody, PATH_EVENT_LIMIT,
    frames::RoceFrame,
    psn::{REQ_GAPPED, REQ_RESENDING},
};

fn write(qp: u32, psn: u32) -> Vec<u8> {
    RoceFrame {
        tos: (26 << 2) | 2,
        payload: 256,
        ..RoceFrame::new(0x0a, qp, psn)
    }
    .build()
}

/// The path events of each QP, in order.
/// Every frame through the TC program (`tc`) or the XDP program, in order.
fn run_all(src: &KernelSource, frames: &[Vec<u8>], tc: bool) {
    for f in frames {
        if tc {
            src.test_run_tc(f)
        } else {
            src.test_run_xdp(f)
        }
        .expect("test run");
    }
}

fn path_events(src: &mut KernelSource) -> Vec<(u32, EventBody)> {
    let mut out = Vec::new();
    src.drain_events(|ev| {
        if let Some(body @ EventBody::Path { .. }) = ev.body() {
            out.push((ev.flow.dst_qp, body));
        }
    });
    out
}

fn gap(first: u32, missing: u32) -> EventBody {
    EventBody::Path {
        resend: None,
        gap: Some((first, missing)),
    }
}

fn resend(first: u32, last: u32) -> EventBody {
    EventBody::Path {
        resend: Some((first, last)),
        gap: None,
    }
}

#[test]
#[ignore = "kernel test: needs root (BPF)"]
fn gaps_and_resend_runs_are_sent_exactly() {
    require_root();
    // QP 0x11: 0 1 2 | 5 6 (3 and 4 missing) | 3 4 5 6 resent | 7 8 new | 5 6 resent, back to 4
    // (another go-back) | 10 (9 missing, the run 4 finished) | 7 8 resent (open).
    let lossy = [0, 1, 2, 5, 6, 3, 4, 5, 6, 7, 8, 5, 6, 4, 10, 7, 8];
    // QP 0x22: a stream sent twice (a replay, a timeout storm): every packet of the second pass
    // a retransmission, and no gap, so no path event.
    let replayed: Vec<u32> = (0..10).chain(0..10).collect();
    // QP 0x33: wraps the 24-bit PSN space, 0xffffff and 0 arriving after 1 and 2: reordered,
    // not lost, so no path event.
    let wrap = [0xff_fffd, 0xff_fffe, 1, 2, 0xff_ffff, 0];
    for tc in [false, true] {
        let what = if tc { "tc" } else { "xdp" };
        let mut src = KernelSource::load(&KernelOptions::default()).expect("programs load");
        let mut frames = Vec::new();
        frames.extend(lossy.iter().map(|&p| write(0x11, p)));
        frames.extend(replayed.iter().map(|&p| write(0x22, p)));
        frames.extend(wrap.iter().map(|&p| write(0x33, p)));
        run_all(&src, &frames, tc);
        let events = path_events(&mut src);
        assert_eq!(
            events,
            [
                (0x11, gap(3, 2)),
                (0x11, resend(3, 6)),
                (0x11, resend(5, 6)),
                // 10 skips 9: a hole still within the reorder window at the end, not lost (no
                // gap in the event that finishes the run 4).
                (0x11, resend(4, 4)),
            ],
            "{what}"
        );
        let flows = src.read_flows().expect("flow map");
        let flow = |qp: u32| {
            flows
                .iter()
                .find(|(k, _)| k.dst_qp == qp)
                .map(|(_, s)| *s)
                .unwrap_or_else(|| panic!("{what}: no flow of QP {qp:#x}"))
        };
        let lossy = flow(0x11);
        assert_eq!(lossy.req_first, 0, "{what}");
        assert_ne!(lossy.psn.flags & REQ_RESENDING, 0, "{what}: run 4..5 open");
        assert_eq!(
            (lossy.resend_first, lossy.resend_last, lossy.psn.req_highest),
            (7, 8, 10),
            "{what}"
        );
        assert_eq!(lossy.path_suppressed, 0, "{what}");
        let replayed = flow(0x22);
        assert_eq!(replayed.req_retransmits, 10, "{what}");
        assert_eq!(
            replayed.psn.flags & (REQ_GAPPED | REQ_RESENDING),
            0,
            "{what}"
        );
        let wrap = flow(0x33);
        assert_eq!(wrap.req_first, 0xff_fffd, "{what}");
        assert_eq!(
            roce_observer_common::sequence::reordering(&wrap).0,
            2,
            "{what}"
        );
        assert_eq!((wrap.req_retransmits, wrap.psn_missing), (0, 0), "{what}");
    }
}

#[test]
#[ignore = "kernel test: needs root (BPF)"]
fn path_events_are_limited_per_flow_and_window() {
    require_root();
    let over = 5;
    // Every other PSN missing: one loss event per hole, declared as it falls out of the
    // reorder window (64 PSNs, 32 of these packets, later).
    let psns: Vec<u32> = (0..=PATH_EVENT_LIMIT + over + 32).map(|k| 2 * k).collect();
    let frames: Vec<Vec<u8>> = psns.iter().map(|&p| write(0x44, p)).collect();
    for tc in [false, true] {
        let what = if tc { "tc" } else { "xdp" };
        // The window is 100 ms of the programs' clock: an attempt that took longer (a busy
        // machine) is repeated, at most five times.
        let mut attempt = 0;
        let mut src = loop {
            attempt += 1;
            let src = KernelSource::load(&KernelOptions::default()).expect("programs load");
            let t = Instant::now();
            run_all(&src, &frames, tc);
            if t.elapsed() < Duration::from_millis(50) || attempt == 5 {
                break src;
            }
        };
        let gaps = path_events(&mut src).len() as u32;
        assert_eq!(gaps, PATH_EVENT_LIMIT, "{what}");
        let flows = src.read_flows().expect("flow map");
        let (_, stats) = flows.iter().find(|(k, _)| k.dst_qp == 0x44).expect("flow");
        assert_eq!(stats.psn_gaps, u64::from(PATH_EVENT_LIMIT + over), "{what}");
        assert_eq!(stats.path_suppressed, u64::from(over), "{what}");
    }
}

/// A gap seen at one point whose path event the full ring buffer lost: the flow record counts
/// it (`path_lost`, and `ringbuf_full` the lost events one by one), and user space marks the
/// pair incomplete instead of reporting that nothing was lost between the points. The same
/// frames with the ring drained first are the control: the gap is then named.
#[test]
#[ignore = "kernel test: needs root (BPF)"]
fn a_path_event_lost_to_a_full_ring_marks_the_pairs_incomplete() {
    require_root();
    // PSNs 3 and 4 never reach the ingress point (XDP); the egress point (TC) sees them all.
    // The flow goes on past the reorder window, so the hole is declared lost there.
    let downstream: Vec<Vec<u8>> = [0, 1, 2]
        .into_iter()
        .chain(5..=70)
        .map(|p| write(0x55, p))
        .collect();
    let upstream: Vec<Vec<u8>> = (0..=70).map(|p| write(0x55, p)).collect();
    for ring_full in [false, true] {
        let what = if ring_full { "ring full" } else { "control" };
        // Without activity runs: a run ends (an event) whenever two frames are more than the
        // run gap apart, which a loaded machine makes of any two test runs.
        let mut src = KernelSource::load(&KernelOptions {
            runs: false,
            ..KernelOptions::default()
        })
        .expect("programs load");
        let before = if ring_full {
            fill_event_ring(&src)
        } else {
            [0, 0]
        };
        run_all(&src, &upstream, true);
        run_all(&src, &downstream, false);
        let counters = src.read_counters().expect("counters");
        let lost = [0, 1].map(|d| counters[d][Counter::RingbufFull as usize] - before[d]);
        let flows = src.read_flows().expect("flow map");
        let flow = |direction: u8| {
            flows
                .iter()
                .find(|(k, _)| k.dst_qp == 0x55 && k.direction == direction)
                .map(|(_, s)| *s)
                .unwrap_or_else(|| panic!("{what}: no flow in direction {direction}"))
        };
        let (ingress, egress) = (flow(0), flow(1));
        assert_eq!(
            (ingress.psn_gaps, ingress.path_suppressed),
            (1, 0),
            "{what}"
        );
        assert_eq!((egress.path_lost, egress.path_suppressed), (0, 0), "{what}");
        if ring_full {
            // 3 and 4 fall out of the window one packet apart: two declarations, two events.
            assert_eq!(ingress.path_lost, 2, "{what}: the gap's events");
            // Every lost event is in the global counter: at ingress the gap's two (a new
            // flow sends none).
            assert_eq!(lost, [2, 0], "{what}");
        } else {
            assert_eq!((ingress.path_lost, lost), (0, [0, 0]), "{what}");
        }

        let mut engine = Engine::new(EngineConfig::default());
        engine.set_iface_name(1, "lo");
        refresh(&mut src, &mut engine).expect("maps read");
        let paths = engine.snapshot(0).paths;
        let pair: &PathPair = paths
            .iter()
            .find(|p| {
                p.dst_qp == 0x55
                    && p.upstream.direction == "egress"
                    && p.downstream.direction == "ingress"
            })
            .unwrap_or_else(|| panic!("{what}: no egress -> ingress pair in {paths:?}"));
        if ring_full {
            // The gap is unknown to user space, so nothing is counted missing: a lower bound,
            // and said so.
            assert!(pair.incomplete, "{what}: {pair:?}");
            assert_eq!(pair.missing, 0, "{what}: {pair:?}");
        } else {
            assert!(!pair.incomplete, "{what}: {pair:?}");
            assert_eq!(
                (pair.missing, pair.missing_psns.as_slice()),
                (2, &[3, 4][..]),
                "{what}"
            );
        }
    }
}
