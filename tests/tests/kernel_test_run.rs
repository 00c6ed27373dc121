//! Layer 1: every fixture frame through the kernel programs with BPF_PROG_TEST_RUN (XDP and
//! TC separately, fresh maps each), then the maps read back through the same engine and JSON
//! document as `run`, compared with the fixture's expected output. Also checks that both
//! programs always pass the packet on.

use integration_tests::{
    compare::{View, compare},
    kernel_fixtures, read_frames, require_root,
};
use roce_observer::{
    engine::{Engine, EngineConfig},
    run::refresh,
    source::kernel::{KernelOptions, KernelSource},
};

const XDP_PASS: u32 = 2;
const TC_ACT_PIPE: u32 = 3;
/// BPF_PROG_TEST_RUN gives the packet the loopback device of the caller's namespace.
const TEST_RUN_IFINDEX: u32 = 1;
/// BPF_PROG_TEST_RUN for skb programs refuses some runt frames (seen: a 26-byte one) and frames
/// over about PAGE_SIZE minus
/// head/tailroom (XDP takes those as multi-buffer). Fixtures with frames outside
/// this range are checked on TC by the veth replay test instead.
const SKB_TEST_RUN_MIN: usize = 60;
const SKB_TEST_RUN_MAX: usize = 3500;

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn every_fixture_through_xdp_and_tc_test_run() {
    require_root();
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut skipped = 0;
    for (name, pcap, expected) in kernel_fixtures() {
        let frames = read_frames(&pcap).expect("fixture pcap reads");
        let pmtu = expected["pmtu"].as_u64().unwrap_or(4096) as u32;
        for (direction, verdict) in [("ingress", XDP_PASS), ("egress", TC_ACT_PIPE)] {
            let skb_ok = frames
                .iter()
                .all(|f| (SKB_TEST_RUN_MIN..=SKB_TEST_RUN_MAX).contains(&f.len()));
            if direction == "egress" && !skb_ok {
                eprintln!("{name}: TC test-run skipped (frame sizes the skb test-run refuses)");
                skipped += 1;
                continue;
            }
            let mut src = KernelSource::load(&KernelOptions {
                pmtu,
                ..KernelOptions::default()
            })
            .expect("BPF programs load (run as root)");
            for frame in &frames {
                let got = if direction == "ingress" {
                    src.test_run_xdp(frame)
                } else {
                    src.test_run_tc(frame)
                }
                .unwrap_or_else(|e| {
                    panic!("{name} {direction} frame of {} bytes: {e:?}", frame.len())
                });
                assert_eq!(
                    got, verdict,
                    "{name}: the program must pass every packet on"
                );
            }
            let mut engine = Engine::new(EngineConfig {
                pmtu,
                pmtu_explicit: true,
                ..EngineConfig::default()
            });
            engine.set_iface_name(TEST_RUN_IFINDEX, "lo");
            refresh(&mut src, &mut engine).expect("maps read");
            let doc = serde_json::to_value(engine.snapshot(0)).expect("snapshot serializes");
            let view = View {
                iface: Some("lo"),
                direction,
                exact_rtt: false,
            };
            for diff in compare(&expected, &doc, &view) {
                failures.push(format!("{name} ({direction}): {diff}"));
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "no fixture was checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "kernel test-run: {checked} fixture runs matched their expected output \
         ({skipped} TC runs left to the veth replay test)"
    );
}

/// The kernel programs unwrap switch mirrors (the erspan fixture's own expectations are checked
/// above): its mirrored frames are RoCE, PFC, ARP to them, and only IP-in-GRE stays non-RoCE.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn erspan_frames_are_unwrapped_in_the_kernel() {
    require_root();
    let pcap = integration_tests::fixtures_dir().join("erspan.pcap");
    let frames = read_frames(&pcap).expect("erspan fixture reads");
    let mut src = KernelSource::load(&KernelOptions::default()).expect("BPF programs load");
    for frame in &frames {
        assert_eq!(src.test_run_xdp(frame).expect("test run"), XDP_PASS);
    }
    let counters = src.read_counters().expect("counters")[0];
    use roce_observer_common::Counter;
    assert_eq!(
        counters[Counter::TotalPackets as usize],
        frames.len() as u64
    );
    // Six mirrored RoCE frames and one plain one; the mirrored ARP and the IP-in-GRE are
    // non-RoCE, the cut ERSPAN header malformed, the mirrored PFC frame a PFC frame.
    assert_eq!(counters[Counter::RocePackets as usize], 7);
    assert_eq!(counters[Counter::NonRoce as usize], 2);
    assert_eq!(counters[Counter::Malformed as usize], 1);
    assert_eq!(counters[Counter::PfcFrames as usize], 1);
    // One flow per observation point: A->B plain, and inside ERSPAN I, II, III and GRE
    // bridging; B->A inside ERSPAN II.
    let flows = src.read_flows().expect("flows");
    assert_eq!(flows.len(), 6);
    // The sessions that unwrapped frames: ERSPAN II and III (session 7), ERSPAN I, GRE.
    let mut sessions: Vec<(u8, u32, u64)> = src
        .read_mirrors()
        .expect("mirror sessions")
        .into_iter()
        .map(|(k, m)| (k.encap, k.id, m.frames))
        .collect();
    sessions.sort_unstable();
    assert_eq!(sessions, [(1, 0, 1), (2, 7, 4), (3, 7, 2), (4, 0, 1)]);
}

/// The VXLAN port is a load-time setting: with another port, the mirrors fixture's VXLAN
/// frames on 4789 are plain UDP (non-RoCE) and only its GRE mirrors are unwrapped.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn vxlan_port_is_configurable() {
    require_root();
    let pcap = integration_tests::fixtures_dir().join("mirrors.pcap");
    let frames = read_frames(&pcap).expect("mirrors fixture reads");
    let src = KernelSource::load(&KernelOptions {
        vxlan_port: 8472,
        ..KernelOptions::default()
    })
    .expect("BPF programs load");
    for frame in &frames {
        assert_eq!(src.test_run_tc(frame).expect("test run"), TC_ACT_PIPE);
    }
    let counters = src.read_counters().expect("counters")[1];
    use roce_observer_common::Counter;
    // Three VXLAN RoCE frames and the VXLAN-GPE frame are plain UDP now; the ERSPAN II, III
    // and GRE bridging mirrors are RoCE; the unknown GRE protocol and the mirror of a mirror
    // (ERSPAN II around VXLAN) stay non-RoCE.
    assert_eq!(counters[Counter::RocePackets as usize], 3);
    assert_eq!(counters[Counter::NonRoce as usize], 6);
}

/// `run --kernel-log`: with it, new flows past a tiny flow table are logged, and the
/// first frame of its header combination; without it the same frames log nothing, and the
/// verifier has removed the logging code (a smaller translated program).
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn kernel_log_tells_of_a_full_flow_table_only_when_on() {
    use roce_observer_common::frames::RoceFrame;
    require_root();
    let mut sizes = Vec::new();
    for on in [false, true] {
        let mut src = KernelSource::load(&KernelOptions {
            max_flows: 2,
            kernel_log: on,
            ..KernelOptions::default()
        })
        .expect("BPF programs load (run as root)");
        for qp in 0..4 {
            let frame = RoceFrame::new(0x04, 0x100 + qp, 1).build();
            assert_eq!(src.test_run_xdp(&frame).expect("test run"), XDP_PASS);
        }
        let full = src.read_counters().expect("counters")[0]
            [roce_observer_common::Counter::MapFull as usize];
        assert_eq!(full, 2, "two of four flows do not fit");
        let lines = src.take_kernel_log();
        if on {
            // Occurrences 1 and 2 on the CPU that ran them (powers of two are logged).
            let full: Vec<&String> = lines
                .iter()
                .filter(|l| {
                    l.starts_with("flow table full: ::ffff:192.0.2.1 -> ::ffff:192.0.2.2 QP")
                })
                .collect();
            assert_eq!(full.len(), 2, "{lines:?}");
            assert!(
                full[0].contains("QP 258 not tracked (occurrence 1"),
                "{lines:?}"
            );
            assert!(
                lines
                    .iter()
                    .any(|l| l
                        == "first frame of its kind on a CPU: RoCE IPv4 untagged RC (kind 32)"),
                "{lines:?}"
            );
        } else {
            assert_eq!(lines, Vec::<String>::new());
        }
        sizes.push(src.xdp_translated_bytes().expect("program info"));
    }
    assert!(
        sizes[0] < sizes[1],
        "off, the verifier removes the logging code: {sizes:?} bytes"
    );
}

/// The kernel keeps IPv4 flows and the others in two maps (FLOWS4, FLOWS6), each of
/// --max-flows entries (docs/metrics.md): with room for two, three IPv4 and three IPv6 flows
/// leave one of each out (`map_full`), and the four kept read back as their own FlowKeys.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn each_flow_map_holds_max_flows() {
    use roce_observer_common::{Counter, frames::RoceFrame};
    require_root();
    let mut src = KernelSource::load(&KernelOptions {
        max_flows: 2,
        ..KernelOptions::default()
    })
    .expect("BPF programs load (run as root)");
    for qp in 0..3 {
        let v4 = RoceFrame::new(0x04, 0x100 + qp, 1).build();
        assert_eq!(src.test_run_xdp(&v4).expect("test run"), XDP_PASS);
        assert_eq!(
            src.test_run_xdp(&integration_tests::ipv6_roce_frame(0x200 + qp, 1))
                .expect("test run"),
            XDP_PASS
        );
    }
    let counters = src.read_counters().expect("counters")[0];
    assert_eq!(counters[Counter::RocePackets as usize], 6);
    assert_eq!(
        counters[Counter::MapFull as usize],
        2,
        "one flow of each family is out"
    );
    let mut got: Vec<(String, u32, u32, u64)> = src
        .read_flows()
        .expect("flows")
        .into_iter()
        .map(|(k, v)| {
            let src = std::net::Ipv6Addr::from(k.src_ip);
            let shown = src
                .to_ipv4_mapped()
                .map_or(src.to_string(), |v4| v4.to_string());
            (shown, k.dst_qp, k.ifindex, v.packets())
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("192.0.2.1".to_string(), 0x100, TEST_RUN_IFINDEX, 1),
            ("192.0.2.1".to_string(), 0x101, TEST_RUN_IFINDEX, 1),
            ("2001:db8::1".to_string(), 0x200, TEST_RUN_IFINDEX, 1),
            ("2001:db8::1".to_string(), 0x201, TEST_RUN_IFINDEX, 1),
        ]
    );
}

/// A mirrored flow is named by its mirror session (docs/metrics.md, "Mirror sessions"): with
/// the session table full (1,024 sessions), a frame of one more session is counted in
/// `map_full` and accounted to no flow; the 1,024 sessions and their flows stay exact.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_frame_of_a_session_past_the_table_is_counted_not_accounted() {
    use roce_observer_common::{
        Counter,
        frames::{Mirror, RoceFrame, mirrored},
        mirror::MAX_MIRROR_SESSIONS,
    };
    require_root();
    let src = KernelSource::load(&KernelOptions::default()).expect("BPF programs load");
    let plain = RoceFrame::new(0x04, 0x100, 1).build();
    for vni in 0..=MAX_MIRROR_SESSIONS {
        let frame = mirrored(&plain, Mirror::Vxlan { vni: 5000 + vni });
        assert_eq!(src.test_run_xdp(&frame).expect("test run"), XDP_PASS);
    }
    // The first session again: still there, counted on.
    let again = mirrored(&plain, Mirror::Vxlan { vni: 5000 });
    assert_eq!(src.test_run_xdp(&again).expect("test run"), XDP_PASS);
    let counters = src.read_counters().expect("counters")[0];
    assert_eq!(
        counters[Counter::RocePackets as usize],
        u64::from(MAX_MIRROR_SESSIONS) + 2
    );
    assert_eq!(counters[Counter::MapFull as usize], 1);
    let sessions = src.read_mirrors().expect("mirror sessions");
    assert_eq!(sessions.len(), MAX_MIRROR_SESSIONS as usize);
    let first = sessions
        .iter()
        .find(|(k, _)| k.id == 5000)
        .expect("the first session");
    assert_eq!(first.1.frames, 2);
    assert!(
        sessions
            .iter()
            .all(|(k, _)| k.id < 5000 + MAX_MIRROR_SESSIONS)
    );
    let mut src = src;
    let flows = src.read_flows().expect("flows");
    assert_eq!(flows.len(), MAX_MIRROR_SESSIONS as usize);
    let packets: u64 = flows.iter().map(|(_, v)| v.packets()).sum();
    assert_eq!(packets, u64::from(MAX_MIRROR_SESSIONS) + 1);
    assert!(
        flows
            .iter()
            .all(|(k, _)| k.mirror_id >= 5000 && k.mirror_id < 5000 + MAX_MIRROR_SESSIONS)
    );
}

/// Latency on the kernel path: the samples of a fixture land in the request flows' histograms
/// (no ring-buffer record each), and the loader's alert threshold reaches the programs: with
/// `rtt_alert_ns` 0 every sample counts toward `high_latency`, without it none does (the
/// engine raises what the kernel counted).
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn latency_samples_and_their_alert_threshold_reach_the_kernel_histograms() {
    require_root();
    let pcap = integration_tests::fixtures_dir().join("rc_send_write_read.pcap");
    let frames = read_frames(&pcap).expect("fixture reads");
    for alert in [Some(0), None] {
        let mut src = KernelSource::load(&KernelOptions {
            rtt_alert_ns: alert,
            ..KernelOptions::default()
        })
        .expect("BPF programs load (run as root)");
        for frame in &frames {
            assert_eq!(src.test_run_xdp(frame).expect("test run"), XDP_PASS);
        }
        let mut engine = Engine::new(EngineConfig {
            rtt_alert_ns: Some(0),
            ..EngineConfig::default()
        });
        refresh(&mut src, &mut engine).expect("maps read");
        let doc = serde_json::to_value(engine.snapshot(0)).expect("snapshot serializes");
        let samples = doc["latency"]["overall"]["count"].as_u64().expect("count");
        assert_eq!(samples, 12, "{}", doc["latency"]);
        assert_eq!(doc["summary"]["events"], 0, "{}", doc["summary"]);
        let alerted: u64 = doc["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .filter(|a| a["kind"] == "high_latency")
            .filter_map(|a| a["count"].as_u64())
            .sum();
        assert_eq!(
            alerted,
            if alert.is_some() { samples } else { 0 },
            "{alert:?}"
        );
    }
}

/// The table of timestamped requests on the kernel path (roce-observer-common latency.rs, the
/// `STAMPS` array): a request and its ACK through the XDP program make one sample; three
/// requests whose key and PSN fall in one set of two push out the oldest, counted in
/// `pending_full`, whose ACK then makes no sample while the other two's do.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_request_and_its_answer_make_a_sample_and_a_full_set_counts_its_eviction() {
    use roce_observer_common::{
        Counter,
        frames::RoceFrame,
        headers::ipv4_mapped,
        latency::{PENDING_SETS, PendingKey, pending_set_index},
    };
    require_root();
    let request = |qp, psn| {
        RoceFrame {
            ack_req: true,
            ..RoceFrame::new(0x04, qp, psn)
        }
        .build()
    };
    let answer = |psn| {
        let f = RoceFrame::new(0x11, 0x99, psn);
        RoceFrame {
            src_ip: f.dst_ip,
            dst_ip: f.src_ip,
            ..f
        }
        .build()
    };
    // The key the programs build for a request of RoceFrame's 192.0.2.1 -> 192.0.2.2 at the
    // test run's interface; the PSNs of three requests that share its set.
    let mut key = PendingKey::zeroed();
    key.requester = ipv4_mapped([192, 0, 2, 1]);
    key.responder = ipv4_mapped([192, 0, 2, 2]);
    key.ifindex = TEST_RUN_IFINDEX;
    let fp = key.fingerprint();
    let set = pending_set_index(fp, 1000, PENDING_SETS);
    let same_set: Vec<u32> = (1000..)
        .filter(|&psn| pending_set_index(fp, psn, PENDING_SETS) == set)
        .take(3)
        .collect();
    assert_ne!(pending_set_index(fp, 10, PENDING_SETS), set);

    let mut src = KernelSource::load(&KernelOptions::default()).expect("BPF programs load");
    let run = |frame: Vec<u8>| assert_eq!(src.test_run_xdp(&frame).expect("run"), XDP_PASS);
    run(request(0x10, 10));
    run(answer(10));
    // Three flows (the key holds no QP), one set: the third request pushes out the first.
    for (i, &psn) in same_set.iter().enumerate() {
        run(request(0x20 + i as u32, psn));
    }
    for &psn in &same_set {
        run(answer(psn));
    }
    let counters = src.read_counters().expect("counters")[0];
    assert_eq!(counters[Counter::PendingFull as usize], 1);
    let mut engine = Engine::new(EngineConfig::default());
    refresh(&mut src, &mut engine).expect("maps read");
    let doc = serde_json::to_value(engine.snapshot(0)).expect("snapshot serializes");
    assert_eq!(doc["latency"]["overall"]["count"], 3, "{}", doc["latency"]);
    let sampled: Vec<u64> = doc["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .filter(|f| f["rtt_ns"]["count"].as_u64() > Some(0))
        .filter_map(|f| f["dst_qp"].as_u64())
        .collect();
    assert_eq!(sampled.len(), 3, "{sampled:?}");
    assert!(
        !sampled.contains(&0x20),
        "the pushed-out request: {sampled:?}"
    );
}

/// The benchmark's floors (roce-observer-ebpf/src/floor.rs), which `cargo xtask bench` states
/// the observer's cost against: the XDP and TC hash floors count every RoCE frame in its flow
/// (source IP, destination IP, UDP source port, destination QP) and nothing else. A floor that
/// skipped its work would make every ratio in the bench look better than it is.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn the_bench_floors_count_each_roce_frame_in_its_flow() {
    use roce_observer::source::kernel::BenchProgram;
    use roce_observer_common::frames::RoceFrame;
    require_root();
    let mut src = KernelSource::load(&KernelOptions {
        floor_entries: 64,
        ..KernelOptions::default()
    })
    .expect("BPF programs load (run as root)");
    let roce = |qp| RoceFrame::new(0x04, qp, 0x10).build();
    let other_port = RoceFrame {
        udp_dport: 12345,
        ..RoceFrame::new(0x04, 0x11, 0x10)
    }
    .build();
    // 3 + 2 RoCE frames of two flows and 4 of another UDP port, through each hash floor.
    for program in [BenchProgram::FloorHash, BenchProgram::TcFloorHash] {
        src.bench(program, &roce(0x11), 3).expect("test run");
        src.bench(program, &roce(0x12), 2).expect("test run");
        src.bench(program, &other_port, 4).expect("test run");
    }
    let (hashed, _) = src.floor_counts().expect("floor maps read");
    assert_eq!(hashed, 2 * (3 + 2));
    drop(src);
    // The XDP hash floor with each of the observer's parts (the bench's rows beside the
    // floor), and with all of them: the same count, in the record-sized table with RECORD.
    use roce_observer_common::floor::{CLOCK, PARSER, RECORD};
    for parts in [CLOCK, RECORD, PARSER, CLOCK | RECORD | PARSER] {
        let mut src = KernelSource::load(&KernelOptions {
            floor_entries: 64,
            floor_parts: parts,
            ..KernelOptions::default()
        })
        .expect("BPF programs load (run as root)");
        src.bench(BenchProgram::FloorHash, &roce(0x11), 3)
            .expect("test run");
        src.bench(BenchProgram::FloorHash, &roce(0x12), 2)
            .expect("test run");
        src.bench(BenchProgram::FloorHash, &other_port, 4)
            .expect("test run");
        let (hashed, _) = src.floor_counts().expect("floor maps read");
        assert_eq!(hashed, 3 + 2, "parts {parts:#x}");
    }
}
