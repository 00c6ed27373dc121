//! Engine behaviour on hand-built frames: latency matching (with Karn's rule), peer learning,
//! path-MTU learning, PFC time and storms, alerts, the kernel-path entry points and the
//! reporting interval.

use roce_observer_common::{
    Counter, Direction, Event, PfcKey, PfcStats,
    frames::{RoceFrame, pfc_frame},
    run::SignalRun,
};

use super::{Engine, EngineConfig};
use crate::report::{FlowSnapshot, Snapshot};

const A: [u8; 4] = [192, 0, 2, 1];
const B: [u8; 4] = [192, 0, 2, 2];
const US: u64 = 1_000;
const T0: u64 = 1_700_000_000_000_000_000;

#[derive(Clone, Copy)]
struct Pkt {
    src: [u8; 4],
    dst: [u8; 4],
    opcode: u8,
    qp: u32,
    psn: u32,
    ack_req: bool,
    tos: u8,
    pcp: Option<u8>,
    syndrome: u8,
    dma_len: u32,
    payload: usize,
}

fn req(psn: u32) -> Pkt {
    Pkt {
        src: A,
        dst: B,
        opcode: 0x04,
        qp: 0x12,
        psn,
        ack_req: false,
        tos: (26 << 2) | 2,
        pcp: None,
        syndrome: 0,
        dma_len: 0,
        payload: 64,
    }
}

fn ack(psn: u32) -> Pkt {
    Pkt {
        src: B,
        dst: A,
        opcode: 0x11,
        qp: 0x11,
        payload: 0,
        ..req(psn)
    }
}

fn frame(p: Pkt) -> Vec<u8> {
    RoceFrame {
        pcp: p.pcp,
        src_ip: p.src,
        dst_ip: p.dst,
        tos: p.tos,
        ack_req: p.ack_req,
        dma_len: p.dma_len,
        syndrome: p.syndrome,
        payload: p.payload,
        ..RoceFrame::new(p.opcode, p.qp, p.psn)
    }
    .build()
}

fn feed(e: &mut Engine, ts: u64, p: Pkt) {
    let f = frame(p);
    e.ingest_frame(ts, &f, f.len() as u32, 0);
}

fn flow(s: &Snapshot, src: [u8; 4], qp: u32) -> &FlowSnapshot {
    s.flows
        .iter()
        .find(|f| f.src_ip == std::net::IpAddr::from(src) && f.dst_qp == qp)
        .expect("flow present")
}

/// A kernel latency histogram holding one sample of `ns`, answered at `ts`.
fn one_sample(ns: u64, ts: u64) -> roce_observer_common::latency::LatencyHist {
    let mut h = roce_observer_common::latency::LatencyHist::zeroed();
    h.add(ns, u64::MAX, ts);
    h
}

fn kinds(s: &Snapshot) -> Vec<&'static str> {
    s.alerts.iter().map(|a| a.kind).collect()
}

#[test]
fn latency_sample_on_the_request_flow_and_peers_learned() {
    let mut e = Engine::new(EngineConfig::default());
    feed(
        &mut e,
        T0,
        Pkt {
            ack_req: true,
            ..req(100)
        },
    );
    feed(&mut e, T0 + 7 * US, ack(100));
    // A duplicate ACK matches nothing.
    feed(&mut e, T0 + 9 * US, ack(100));
    let s = e.snapshot(e.last_ts());
    let r = flow(&s, A, 0x12);
    assert_eq!(r.rtt_ns.count, 1);
    assert_eq!(r.rtt_ns.p50, Some(7_000));
    assert_eq!(r.peer_qp, Some(0x11));
    let a = flow(&s, B, 0x11);
    assert_eq!(a.rtt_ns.count, 0);
    assert_eq!(a.peer_qp, Some(0x12));
    assert_eq!(s.latency.overall.count, 1);
    assert_eq!(s.latency.pending, 0);
}

/// The capture path counts the records its shared observation sends, by kind: here none in four
/// frames, neither for the two new flows (user space finds them in the flow table) nor for the
/// latency sample (the kernel keeps samples in a histogram per flow); the kernel path counts
/// what it receives.
#[test]
fn events_are_counted_by_kind_on_both_paths() {
    let mut e = Engine::new(EngineConfig::default());
    feed(
        &mut e,
        T0,
        Pkt {
            ack_req: true,
            ..req(100)
        },
    );
    feed(&mut e, T0 + 7 * US, ack(100));
    feed(&mut e, T0 + 8 * US, req(101));
    feed(&mut e, T0 + 9 * US, req(102));
    let s = e.snapshot(e.last_ts());
    assert_eq!(flow(&s, A, 0x12).rtt_ns.count, 1);
    assert_eq!(s.flows.len(), 2);
    let s = s.summary;
    assert_eq!(s.events_by_kind.get("new_flow"), None);
    assert_eq!(s.events_by_kind.get("latency"), None);
    assert_eq!(s.events, 0, "{:?}", s.events_by_kind);
    assert_eq!(s.events_by_kind.values().sum::<u64>(), s.events);
    assert_eq!(s.events_per_packet, 0.0);
    assert_eq!(s.observer, None);

    let mut live = Engine::new(EngineConfig::default());
    let key = *e.flows.keys().next().expect("a flow");
    let run = |start_ns| SignalRun {
        start_ns,
        end_ns: start_ns + US,
        cnp: 1,
        naks: 0,
    };
    for t in [T0, T0 + 2 * US, T0 + 4 * US] {
        live.ingest_event(&Event::signal_run(&key, &run(t)));
    }
    live.update_counter(Direction::Ingress, Counter::TotalPackets, 30);
    let s = live.snapshot(T0 + 6 * US).summary;
    assert_eq!((s.events, s.events_by_kind["signal_run"]), (3, 3));
    assert_eq!(s.events_per_packet, 0.1);
}

/// Kernel path: a flow's latency histogram read on every tick. What it gained since the last
/// read goes to the flow's sketch and the overall one once (a read of an unchanged histogram
/// adds nothing), count, sum, min and max exact, quantiles within the histogram's 1/9, and
/// its samples above the alert threshold raise `high_latency` with the kernel's times.
#[test]
fn kernel_latency_histograms_merge_their_growth_once() {
    use roce_observer_common::latency::LatencyHist;
    let mut live = Engine::new(EngineConfig {
        rtt_alert_ns: Some(30_000),
        ..EngineConfig::default()
    });
    // The request flow as the flow map gives it.
    let mut cap = Engine::new(EngineConfig::default());
    feed(&mut cap, T0, req(100));
    let (&key, entry) = cap.flows.iter().next().expect("the request flow");
    live.update_flow(&key, entry.stats());
    let mut hist = LatencyHist::zeroed();
    for (i, ns) in [7_000, 9_000, 12_000].into_iter().enumerate() {
        hist.add(ns, 30_000, T0 + i as u64);
    }
    live.update_latency(&key, &hist);
    live.update_latency(&key, &hist);
    hist.add(40_000, 30_000, T0 + 10 * US);
    hist.add(35_000, 30_000, T0 + 20 * US);
    live.update_latency(&key, &hist);
    let s = live.snapshot(T0 + 30 * US);
    let rtt = &flow(&s, A, 0x12).rtt_ns;
    assert_eq!((rtt.count, rtt.sum_ns), (5, 103_000));
    assert_eq!((rtt.min, rtt.max), (Some(7_000), Some(40_000)));
    let p50 = rtt.p50.expect("p50") as f64;
    assert!((p50 - 12_000.0).abs() <= 12_000.0 / 9.0, "{rtt:?}");
    assert_eq!(s.latency.overall.count, 5);
    let alert = s
        .alerts
        .iter()
        .find(|a| a.kind == "high_latency")
        .expect("high_latency raised");
    assert_eq!(alert.count, 2);
    assert!(alert.reason.contains("first: 40 us"), "{}", alert.reason);
    assert_eq!(
        (alert.first_ts, alert.last_ts),
        (T0 + 10 * US, T0 + 20 * US)
    );
}

#[test]
fn retransmitted_request_is_not_timestamped() {
    let mut e = Engine::new(EngineConfig::default());
    feed(
        &mut e,
        T0,
        Pkt {
            ack_req: true,
            ..req(5)
        },
    );
    feed(&mut e, T0 + US, ack(5));
    // Resend of 5 (a retransmit): its ACK yields no sample.
    feed(
        &mut e,
        T0 + 2 * US,
        Pkt {
            ack_req: true,
            ..req(5)
        },
    );
    feed(&mut e, T0 + 3 * US, ack(5));
    let s = e.snapshot(e.last_ts());
    assert_eq!(flow(&s, A, 0x12).retransmits, 1);
    assert_eq!(flow(&s, A, 0x12).rtt_ns.count, 1);
    assert_eq!(flow(&s, A, 0x12).rtt_ns.max, Some(1_000));
}

#[test]
fn pmtu_is_learned_from_read_responses_unless_given() {
    let read = |psn| Pkt {
        opcode: 0x0c,
        dma_len: 4096,
        payload: 0,
        ..req(psn)
    };
    let resp = |op, psn| Pkt {
        src: B,
        dst: A,
        opcode: op,
        qp: 0x11,
        payload: 1024,
        ..req(psn)
    };
    let run = |cfg: EngineConfig| {
        let mut e = Engine::new(cfg);
        // First READ of 4096 B at PMTU 1024 (4 PSNs): 10..13.
        feed(&mut e, T0, read(10));
        feed(&mut e, T0 + US, resp(0x0d, 10));
        feed(&mut e, T0 + 2 * US, resp(0x0e, 11));
        feed(&mut e, T0 + 3 * US, resp(0x0e, 12));
        feed(&mut e, T0 + 4 * US, resp(0x0f, 13));
        // Second READ at 14, then a SEND at 18.
        feed(&mut e, T0 + 5 * US, read(14));
        feed(&mut e, T0 + 6 * US, req(18));
        e.snapshot(e.last_ts())
    };
    let learned = run(EngineConfig::default());
    assert!(learned.summary.pmtu_learned);
    assert_eq!(learned.summary.pmtu, 1024);
    // The first READ was reserved at 4096 before anything was learned: 11..=13 look skipped
    // (holes, not lost: nothing declared them lost within the capture).
    let f = flow(&learned, A, 0x12);
    assert_eq!((f.psn_gaps, f.psn_holes), (0, 3));
    let explicit = run(EngineConfig {
        pmtu: 1024,
        pmtu_explicit: true,
        ..EngineConfig::default()
    });
    assert!(!explicit.summary.pmtu_learned);
    let f = flow(&explicit, A, 0x12);
    assert_eq!((f.psn_gaps, f.psn_holes), (0, 0));
    let wrong = run(EngineConfig {
        pmtu: 4096,
        pmtu_explicit: true,
        ..EngineConfig::default()
    });
    // Both READs reserved one PSN each: 11..=13 and 15..=17 look skipped.
    assert_eq!(flow(&wrong, A, 0x12).psn_holes, 6);
}

#[test]
fn pfc_entries_time_and_storm() {
    let mut e = Engine::new(EngineConfig::default());
    // Priority 3 refreshed every 300 us for 1.2 s; priority 4 XON only.
    let mut t = T0;
    let end = T0 + 1_200_000 * US;
    while t < end {
        let mut q = [0u16; 8];
        q[3] = 0xffff;
        let f = pfc_frame(1, (1 << 3) | (1 << 4), q);
        e.ingest_frame(t, &f, 60, 0);
        t += 300 * US;
    }
    let s = e.snapshot(e.last_ts());
    assert_eq!(s.summary.pfc_frames, 4000);
    let p3 = s
        .pfc
        .iter()
        .find(|p| p.priority == Some(3))
        .expect("prio 3");
    assert_eq!(p3.pause_frames, 4000);
    assert!(p3.storm);
    assert!(p3.paused_fraction > 0.99);
    assert!((p3.pause_us - 4000.0 * 335.5392).abs() < 1.0);
    let p4 = s
        .pfc
        .iter()
        .find(|p| p.priority == Some(4))
        .expect("prio 4");
    assert_eq!((p4.pause_frames, p4.xon_frames), (0, 4000));
    assert!(!p4.storm);
    assert_eq!(kinds(&s), vec!["pfc_storm"]);
    // Link speed scales the time: 400G is a quarter.
    let mut f = Engine::new(EngineConfig {
        link_gbps: 400.0,
        ..EngineConfig::default()
    });
    let fr = pfc_frame(1, 1 << 3, [0, 0, 0, 0xffff, 0, 0, 0, 0]);
    f.ingest_frame(T0, &fr, 60, 0);
    let s = f.snapshot(T0 + 1_000 * US);
    assert!((s.pfc[0].pause_us - 83.8848).abs() < 0.001);
    assert!((s.pfc[0].paused_us - 83.884).abs() < 0.001);
}

#[test]
fn class_and_ecn_alerts() {
    let mut e = Engine::new(EngineConfig::default());
    // Data on DSCP 0, Not-ECT, on PCP 5: three findings for one flow.
    feed(
        &mut e,
        T0,
        Pkt {
            tos: 0,
            pcp: Some(5),
            ..req(1)
        },
    );
    // CNP on DSCP 46 (not 48).
    feed(
        &mut e,
        T0 + US,
        Pkt {
            src: B,
            dst: A,
            opcode: 0x81,
            qp: 0x11,
            tos: 46 << 2,
            payload: 0,
            ..req(0)
        },
    );
    // CE on C->D with no CNP back.
    feed(
        &mut e,
        T0 + 2 * US,
        Pkt {
            src: [192, 0, 2, 3],
            dst: [192, 0, 2, 4],
            tos: (26 << 2) | 3,
            ..req(1)
        },
    );
    // CE on A->B is answered by the CNP above: no alert for it.
    feed(
        &mut e,
        T0 + 3 * US,
        Pkt {
            tos: (26 << 2) | 3,
            ..req(2)
        },
    );
    let s = e.snapshot(e.last_ts());
    let mut k = kinds(&s);
    k.sort_unstable();
    assert_eq!(
        k,
        vec![
            "ce_without_cnp",
            "cnp",
            "cnp_wrong_dscp",
            "congestion",
            "congestion",
            "non_lossless_class",
            "not_ect"
        ]
    );
    let ce = s
        .alerts
        .iter()
        .find(|a| a.kind == "ce_without_cnp")
        .expect("alert");
    assert_eq!(
        ce.flow.as_ref().map(|f| f.src_ip.to_string()),
        Some("192.0.2.3".into())
    );
    // The clean default class raises nothing.
    let mut clean = Engine::new(EngineConfig::default());
    feed(&mut clean, T0, req(1));
    feed(&mut clean, T0 + US, ack(1));
    assert!(clean.snapshot(T0 + US).alerts.is_empty());
}

#[test]
fn retransmit_burst_and_latency_alerts() {
    let mut e = Engine::new(EngineConfig {
        rtt_alert_ns: Some(50 * US),
        ..EngineConfig::default()
    });
    feed(&mut e, T0, req(100));
    for i in 0..10 {
        feed(&mut e, T0 + (i + 1) * US, req(90 + i as u32));
    }
    feed(
        &mut e,
        T0 + 20 * US,
        Pkt {
            ack_req: true,
            ..req(101)
        },
    );
    feed(&mut e, T0 + 120 * US, ack(101));
    let s = e.snapshot(e.last_ts());
    assert_eq!(flow(&s, A, 0x12).retransmits, 10);
    let mut k = kinds(&s);
    k.sort_unstable();
    assert_eq!(
        k,
        vec!["high_latency", "retransmissions", "retransmit_burst"]
    );
    let retx = s
        .alerts
        .iter()
        .find(|a| a.kind == "retransmissions")
        .expect("alert");
    assert_eq!(retx.count, 10, "the flow's exact count");
}

#[test]
fn kernel_path_replaces_values_and_takes_events() {
    // Run frames through one engine, then hand its flow values to a second engine the way the
    // loader hands over map values: the flow records must be identical.
    let mut cap = Engine::new(EngineConfig::default());
    feed(
        &mut cap,
        T0,
        Pkt {
            ack_req: true,
            ..req(1)
        },
    );
    feed(&mut cap, T0 + 5 * US, ack(1));
    feed(&mut cap, T0 + 6 * US, req(4));
    let mut live = Engine::new(EngineConfig::default());
    live.set_iface_name(0, "if0");
    for (k, v) in &cap.flows {
        live.update_flow(k, v.stats());
        // Twice: values replace, never add.
        live.update_flow(k, v.stats());
    }
    let req_key = *cap
        .flows
        .keys()
        .find(|k| k.dst_qp == 0x12)
        .expect("request flow");
    live.update_latency(&req_key, &one_sample(5_000, T0 + 5 * US));
    for c in Counter::ALL {
        let v = cap.counters[2][c as usize];
        live.update_counter(Direction::Ingress, c, v);
        live.update_counter(Direction::Ingress, c, v);
    }
    let a = cap.snapshot(T0 + 6 * US);
    let b = live.snapshot(T0 + 6 * US);
    assert_eq!(a.flows, b.flows);
    assert_eq!(a.summary.total_packets, b.summary.total_packets);
    assert!(b.summary.by_direction.contains_key("ingress"));

    // PFC values replace too; events feed the pause timeline.
    let key = PfcKey {
        ifindex: 3,
        direction: Direction::Ingress as u8,
        priority: 3,
        src_mac: [2, 0, 0, 0, 1, 1],
    };
    let stats = PfcStats {
        pause_frames: 2,
        xon_frames: 1,
        pause_quanta: 100,
        first_ns: T0,
        last_ns: T0 + US,
    };
    live.update_pfc(&key, &stats);
    live.update_pfc(&key, &stats);
    let mut quanta = [0; 8];
    quanta[3] = 100;
    let pe = Event::pfc(3, Direction::Ingress as u8, key.src_mac, 1 << 3, quanta).at(T0);
    live.ingest_event(&pe);
    let s = live.snapshot(T0 + 1_000 * US);
    let p = s
        .pfc
        .iter()
        .find(|p| p.priority == Some(3))
        .expect("pfc entry");
    assert_eq!((p.pause_frames, p.xon_frames, p.pause_quanta), (2, 1, 100));
    assert!((p.paused_us - 0.512).abs() < 1e-9);
}

#[test]
fn rate_over_the_reporting_interval() {
    let mut e = Engine::new(EngineConfig::default());
    feed(&mut e, T0, req(1));
    let bytes = e.snapshot(T0).flows[0].bytes;
    // One second later, 1 more packet: rate over [T0, T0 + 1 s].
    feed(&mut e, T0 + 1_000_000 * US, req(2));
    let s = e.snapshot(T0 + 1_000_000 * US);
    assert_eq!(s.flows[0].rate_bps, (2 * bytes * 8) as f64);
    // A new interval counts only what came after it.
    e.begin_interval(T0 + 1_000_000 * US);
    feed(&mut e, T0 + 1_500_000 * US, req(3));
    let s = e.snapshot(T0 + 2_000_000 * US);
    assert_eq!(s.flows[0].rate_bps, (bytes * 8) as f64);
}

#[test]
fn tables_are_bounded() {
    let mut e = Engine::new(EngineConfig {
        max_flows: 3,
        pending_sets: 1,
        ..EngineConfig::default()
    });
    for qp in 0..5 {
        feed(
            &mut e,
            T0,
            Pkt {
                qp,
                ack_req: true,
                ..req(qp)
            },
        );
    }
    let s = e.snapshot(T0);
    assert_eq!(s.flows.len(), 3);
    assert_eq!(s.summary.map_full, 2);
    // Three timestamped requests, one set of two: the third pushed out the first.
    assert_eq!(s.summary.pending_full, 1);
    assert_eq!(s.latency.pending, 2);
    assert_eq!(s.summary.roce_packets, 5);
}

/// The table of timestamped requests (roce-observer-common latency.rs, the kernel's too): a
/// full set pushes out its oldest request, counted in `pending_full` while that request could
/// still be answered, silently once it waited past `PENDING_STALE_NS`; the pushed-out request's
/// answer makes no sample, the others' do.
#[test]
fn a_full_set_pushes_out_its_oldest_request() {
    use roce_observer_common::latency::PENDING_STALE_NS;
    let mut e = Engine::new(EngineConfig {
        pending_sets: 1,
        ..EngineConfig::default()
    });
    let timed = |psn| Pkt {
        ack_req: true,
        ..req(psn)
    };
    feed(&mut e, T0, timed(1));
    feed(&mut e, T0 + US, timed(2));
    feed(&mut e, T0 + 2 * US, timed(3));
    // Resent: not timestamped again (Karn's rule), pushes nothing out.
    feed(&mut e, T0 + 3 * US, timed(3));
    feed(&mut e, T0 + 10 * US, ack(1));
    feed(&mut e, T0 + 10 * US, ack(2));
    let s = e.snapshot(e.last_ts());
    assert_eq!(s.summary.pending_full, 1);
    assert_eq!(flow(&s, A, 0x12).rtt_ns.count, 1);
    assert_eq!(flow(&s, A, 0x12).rtt_ns.max, Some(9_000));
    // 3 waits on; 4 takes the free slot; 5, long after, pushes out the stale 3 uncounted.
    feed(&mut e, T0 + 20 * US, timed(4));
    feed(&mut e, T0 + PENDING_STALE_NS + 2 * US, timed(5));
    feed(&mut e, T0 + PENDING_STALE_NS + 3 * US, ack(3));
    feed(&mut e, T0 + PENDING_STALE_NS + 3 * US, ack(4));
    let s = e.snapshot(e.last_ts());
    assert_eq!(s.summary.pending_full, 1);
    assert_eq!(flow(&s, A, 0x12).rtt_ns.count, 2);
    assert_eq!(s.latency.pending, 1);
}

const SEC: u64 = 1_000_000_000;

/// A flow of 192.0.2.1 -> 192.0.2.2 to `qp` on ifindex 3, as the kernel's map keys it.
fn kernel_key(qp: u32) -> roce_observer_common::FlowKey {
    let mut k = roce_observer_common::FlowKey::zeroed();
    k.src_ip[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
    k.dst_ip[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 2]);
    k.dst_qp = qp;
    k.ifindex = 3;
    k
}

/// A flow record of `packets` SEND_ONLY requests of 100 bytes, the last at `last`.
fn kernel_stats(packets: u64, last: u64) -> roce_observer_common::FlowStats {
    let mut s = roce_observer_common::FlowStats::zeroed();
    s.init(T0);
    s.transport = 0;
    s.opcodes[4] = packets;
    s.bytes = packets * 100;
    s.last_ns = last;
    s
}

/// The ECMP section (as JSON) of a new engine that read only `flows`, snapshot at the last
/// flow's last packet.
fn fresh_ecmp(
    flows: &[(
        roce_observer_common::FlowKey,
        roce_observer_common::FlowStats,
    )],
) -> String {
    let mut fresh = Engine::new(EngineConfig::default());
    fresh.set_iface_name(3, "veth0");
    for (key, stats) in flows {
        fresh.update_flow(key, stats);
    }
    let at = flows.iter().map(|(_, s)| s.last_ns).max().unwrap_or(T0);
    serde_json::to_string(&fresh.snapshot(at).ecmp).expect("serializes")
}

/// The ECMP section is given again while no flow's load changed, and computed anew once one
/// did: then it equals the section of an engine that read only the final counters.
#[test]
fn ecmp_section_is_reused_until_a_load_changes() {
    let (a, b) = (kernel_key(0x11), kernel_key(0x22));
    let mut e = Engine::new(EngineConfig::default());
    e.set_iface_name(3, "veth0");
    e.update_flow(&a, &kernel_stats(10, T0 + SEC));
    e.update_flow(&b, &kernel_stats(20, T0 + SEC));
    e.snapshot(T0 + SEC);
    e.begin_interval(T0 + SEC);
    let quiet = e.snapshot(T0 + 2 * SEC);
    e.begin_interval(T0 + 2 * SEC);
    assert_eq!(e.snapshot(T0 + 3 * SEC).ecmp, quiet.ecmp);
    assert_eq!(quiet.ecmp.measured.paths[0].bytes, 3000);

    e.update_flow(&b, &kernel_stats(25, T0 + 4 * SEC));
    let moved = e.snapshot(T0 + 4 * SEC);
    assert_eq!(moved.ecmp.measured.paths[0].bytes, 3500);
    assert_eq!(
        serde_json::to_string(&moved.ecmp).expect("serializes"),
        fresh_ecmp(&[
            (a, kernel_stats(10, T0 + SEC)),
            (b, kernel_stats(25, T0 + 4 * SEC))
        ])
    );
    let again = e.snapshot(T0 + 5 * SEC);
    assert_eq!(again.ecmp, moved.ecmp);

    // The kernel evicted b and counts it afresh: fewer bytes than the engine last read. The
    // section follows the new counters, as for an engine that read only them.
    e.update_flow(&b, &kernel_stats(3, T0 + 6 * SEC));
    let evicted = e.snapshot(T0 + 6 * SEC);
    assert_eq!(evicted.ecmp.measured.paths[0].bytes, 1300);
    assert_eq!(
        serde_json::to_string(&evicted.ecmp).expect("serializes"),
        fresh_ecmp(&[
            (a, kernel_stats(10, T0 + SEC)),
            (b, kernel_stats(3, T0 + 6 * SEC))
        ])
    );
}

/// An interval begins by rebasing only the flows read since the last one began: a flow not
/// read for two intervals has a rate of zero, and its rate once read again is what it sent
/// since its last read (not since the start).
#[test]
fn interval_rates_after_flows_not_read_for_intervals() {
    let (a, b) = (kernel_key(0x11), kernel_key(0x22));
    let mut e = Engine::new(EngineConfig::default());
    e.set_iface_name(3, "veth0");
    e.update_flow(&a, &kernel_stats(10, T0 + SEC));
    e.update_flow(&b, &kernel_stats(20, T0 + SEC));
    e.snapshot(T0 + SEC);
    let rate = |s: &Snapshot, qp: u32| {
        s.flows
            .iter()
            .find(|f| f.dst_qp == qp)
            .expect("flow present")
            .rate_bps
    };
    for i in 1..4 {
        e.begin_interval(T0 + i * SEC);
        // b moves every interval; a not at all.
        e.update_flow(&b, &kernel_stats(20 + i, T0 + (i + 1) * SEC));
        let s = e.snapshot(T0 + (i + 1) * SEC);
        assert_eq!(
            (rate(&s, 0x11), rate(&s, 0x22)),
            (0.0, 800.0),
            "interval {i}"
        );
    }
    e.begin_interval(T0 + 4 * SEC);
    e.update_flow(&a, &kernel_stats(15, T0 + 5 * SEC));
    let s = e.snapshot(T0 + 5 * SEC);
    assert_eq!((rate(&s, 0x11), rate(&s, 0x22)), (4000.0, 0.0));

    // Read more often than there are flows within one interval: every flow is rebased.
    e.begin_interval(T0 + 5 * SEC);
    for p in 16..26 {
        e.update_flow(&a, &kernel_stats(p, T0 + 6 * SEC));
    }
    assert_eq!(rate(&e.snapshot(T0 + 6 * SEC), 0x11), 8000.0);
    e.begin_interval(T0 + 6 * SEC);
    e.update_flow(&b, &kernel_stats(30, T0 + 7 * SEC));
    let s = e.snapshot(T0 + 7 * SEC);
    assert_eq!((rate(&s, 0x11), rate(&s, 0x22)), (0.0, 5600.0));
    e.begin_interval(T0 + 7 * SEC);
    e.update_flow(&a, &kernel_stats(27, T0 + 8 * SEC));
    assert_eq!(rate(&e.snapshot(T0 + 8 * SEC), 0x11), 1600.0);
}

/// Issue 12: between two snapshots an unchanged flow keeps its view (the same shared record,
/// identical content), a flow whose counters or latency samples changed is rebuilt, and the
/// incremental snapshot equals one built from scratch.
#[test]
fn unchanged_flows_keep_their_view_and_changed_ones_are_rebuilt() {
    use std::sync::Arc;

    let (key, stats) = (kernel_key, kernel_stats);
    let (a, b) = (key(0x11), key(0x22));
    let mut e = Engine::new(EngineConfig::default());
    e.set_iface_name(3, "veth0");
    e.update_flow(&a, &stats(10, T0 + SEC));
    e.update_flow(&b, &stats(20, T0 + SEC));
    // The first interval's rates are not zero; the next snapshot has both at zero.
    e.snapshot(T0 + SEC);
    e.begin_interval(T0 + SEC);
    let quiet = e.snapshot(T0 + 2 * SEC);
    e.begin_interval(T0 + 2 * SEC);
    let view = |s: &Snapshot, qp: u32| -> Arc<FlowSnapshot> {
        Arc::clone(
            s.flows
                .iter()
                .find(|f| f.dst_qp == qp)
                .expect("flow present"),
        )
    };
    assert_eq!(view(&quiet, 0x11).rate_bps, 0.0);

    // b sends 5 more packets; a is unchanged.
    e.update_flow(&b, &stats(25, T0 + 3 * SEC));
    let next = e.snapshot(T0 + 3 * SEC);
    assert!(Arc::ptr_eq(&view(&quiet, 0x11), &view(&next, 0x11)));
    let (before, after) = (view(&quiet, 0x22), view(&next, 0x22));
    assert!(!Arc::ptr_eq(&before, &after));
    assert_eq!((before.packets, after.packets), (20, 25));
    assert_eq!(after.rate_bps, 500.0 * 8.0);
    assert_eq!(after.opcodes.0, vec![("RC_SEND_ONLY".to_string(), 25)]);
    // A latency sample changes a's view, though not its counters.
    e.begin_interval(T0 + 3 * SEC);
    e.update_latency(&a, &one_sample(5_000, T0 + 3 * SEC));
    let sampled = e.snapshot(T0 + 4 * SEC);
    assert_eq!(view(&sampled, 0x11).rtt_ns.count, 1);
    assert_eq!(view(&next, 0x11).rtt_ns.count, 0);

    // b loses packets (a PSN gap: a table alert) while a stays as it was.
    e.begin_interval(T0 + 4 * SEC);
    let mut gap = stats(30, T0 + 5 * SEC);
    gap.psn_gaps = 1;
    gap.psn_missing = 2;
    e.update_flow(&b, &gap);
    let sampled = e.snapshot(T0 + 5 * SEC);
    assert!(sampled.alerts.iter().any(|al| al.kind == "packet_loss"));
    assert_eq!(sampled.latency.flows_with_samples, 1);

    // Renaming the interface drops every view: the same snapshot, built from scratch.
    e.set_iface_name(3, "veth0");
    let fresh = e.snapshot(T0 + 5 * SEC);
    assert!(!Arc::ptr_eq(&view(&sampled, 0x22), &view(&fresh, 0x22)));
    assert_eq!(sampled, fresh);
    assert_eq!(
        serde_json::to_string(&sampled).expect("serializes"),
        serde_json::to_string(&fresh).expect("serializes")
    );
}

/// The sections from beside the engine are assembled with its own: NIC counters, QP owners
/// (each flow labelled with its owner), the watched interfaces and the outputs' health; a
/// report without them has none.
#[test]
fn report_assembles_the_sections_from_beside_the_engine() {
    use crate::report::{Beside, NicPortSnapshot, OutputHealth, QpOwner};
    let mut e = Engine::new(EngineConfig::default());
    feed(&mut e, T0, req(1));
    let bare = e.snapshot(T0 + US);
    assert!(bare.nic.is_empty() && bare.qp_owners.is_empty());
    assert!(flow(&bare, A, 0x12).owner.is_none());
    assert_eq!(bare.summary.log_records_lost, None);
    let owner = QpOwner {
        device: "rxe0".into(),
        lqpn: 0x12,
        comm: "ib_write_bw".into(),
        pid: Some(4242),
        ..QpOwner::default()
    };
    let port = NicPortSnapshot {
        device: "rxe0".into(),
        port: 1,
        netdev: Some("veth0".into()),
        interval_s: 1.0,
        rdma: Default::default(),
        pause: Default::default(),
    };
    let s = e.report(
        T0 + US,
        Beside {
            nic: vec![port.clone()],
            qp_owners: vec![owner.clone()],
            interfaces_up: [("veth0".to_string(), true)].into_iter().collect(),
            outputs: OutputHealth {
                log_records_lost: Some(3),
                prom_file_errors: Some(1),
            },
            observer: None,
        },
    );
    assert_eq!(s.nic, [port]);
    assert_eq!(s.qp_owners, std::slice::from_ref(&owner));
    assert_eq!(flow(&s, A, 0x12).owner.as_deref(), Some(&owner));
    assert_eq!(s.summary.interfaces_up.get("veth0"), Some(&true));
    assert_eq!(s.summary.log_records_lost, Some(3));
    assert_eq!(s.summary.prom_file_errors, Some(1));
    // The engine's own sections are those of the bare report.
    assert_eq!(s.flows.len(), bare.flows.len());
    assert_eq!(s.summary.roce_packets, bare.summary.roce_packets);
}
