//! The observer's own cost in its report, on the kernel path: a fixture with latency samples
//! and PFC frames replayed on a veth pair with `run --bpf-stats` attached to both ends. The
//! events received must be what `analyze` counts for the same capture at each attach point
//! (kinds that do not depend on the replay's timing), and each attached program's run count
//! must be the frames its hook saw. And what the programs send, measured through `analyze`
//! (which sends, and counts, exactly the records the programs would for the same frames): at
//! most one ring-buffer record per hundred packets in steady traffic, a retransmission storm
//! and sprayed traffic.

use integration_tests::{
    netns::{Observer, VethNs},
    require_root,
};
use serde_json::Value;

/// Ring-buffer records per packet, in every traffic shape, with latency measured: plain
/// WRITE traffic (one packet in five an ACK that answers a timestamped request), the same
/// frames twice (every request a retransmission), bursts of 8-20 packets per flow with idle
/// gaps over 1 ms between them (a finished activity run per burst: they travel 16 to a record),
/// sprayed WRITEs and READs without and with loss, and churn: 5,000 QPs of four requests each,
/// every flow new. A latency sample is no record (the kernel keeps a histogram per flow), nor is
/// a new flow (user space finds it in the flow table); each loss the path view needs is one.
#[test]
fn ring_buffer_records_are_at_most_one_per_hundred_packets() {
    let dir = std::env::temp_dir().join(format!("roce-event-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // 200 QPs x 200 rounds: 50,000 frames, 400 flows.
    let steady = || roce_observer_tools::steady_frames(200, 200, 1024);
    let steady_pcap = dir.join("steady.pcap");
    roce_observer_tools::write_pcap(&steady_pcap, steady()).expect("steady capture");
    let storm_pcap = dir.join("storm.pcap");
    roce_observer_tools::write_pcap(&storm_pcap, steady().chain(steady())).expect("storm");
    // 100 QPs, each a burst of 8-20 requests every 10 ms (40 bursts): every burst is an
    // activity run of 8 packets or more, finished by the next one.
    let bursty_pcap = dir.join("bursty.pcap");
    roce_observer_tools::write_timed_pcap(
        &bursty_pcap,
        roce_observer_tools::bursty_frames(100, 40, 256, 10_000),
    )
    .expect("bursty capture");
    // 5,000 QPs x 4 rounds: 25,000 frames, 10,000 new flows.
    let churn_pcap = dir.join("churn.pcap");
    roce_observer_tools::write_pcap(
        &churn_pcap,
        roce_observer_tools::steady_frames(5_000, 4, 1024),
    )
    .expect("churn capture");
    let fixtures = integration_tests::fixtures_dir();
    let shapes = [
        ("bursty", bursty_pcap),
        ("churn", churn_pcap),
        ("steady", steady_pcap),
        ("storm", storm_pcap),
        ("spray_no_loss", fixtures.join("spray_no_loss.pcap")),
        (
            "spray_nak_selective",
            fixtures.join("spray_nak_selective.pcap"),
        ),
    ];
    let mut failures = Vec::new();
    for (shape, pcap) in &shapes {
        let doc = integration_tests::analyze_json(pcap, &[]);
        let s = &doc["summary"];
        let n = |v: &Value| {
            v.as_u64()
                .unwrap_or_else(|| panic!("{shape}: a count: {s}"))
        };
        let (events, packets) = (n(&s["events"]), n(&s["total_packets"]));
        let samples = n(&doc["latency"]["overall"]["count"]);
        assert!(samples * 20 > packets, "{shape}: latency measured: {s}");
        eprintln!(
            "{shape}: {events} records for {packets} packets: {}",
            s["events_by_kind"]
        );
        if events * 100 > packets {
            failures.push(format!(
                "{shape}: {events} records for {packets} packets: {}",
                s["events_by_kind"]
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn events_and_program_runs_are_reported_and_agree_with_analyze() {
    require_root();
    let pcap = integration_tests::fixtures_dir().join("mixed_demo.pcap");
    let ns = VethNs::new().expect("namespace with a veth pair");
    let observer = Observer::on_both_ends(&ns, &["--bpf-stats"]).expect("observer attaches");
    ns.replay(&pcap).expect("tcpreplay");
    // Let the receiving veth's softirq finish with the last frames.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = observer.stop().expect("observer stops cleanly");
    let live: Value = serde_json::from_str(&out).expect("run --json output parses");
    let offline = integration_tests::analyze_json(&pcap, &[]);

    let (s, o) = (&live["summary"], &offline["summary"]);
    assert_eq!(s["events_lost"], 0, "{s}");
    // Both ends see every frame of the capture: each kind twice what analyze counts once.
    for kind in ["pfc", "pause", "path"] {
        let want = o["events_by_kind"][kind].as_u64().expect("offline count") * 2;
        assert_eq!(s["events_by_kind"][kind], want, "{kind}: {s}");
    }
    assert!(o["events_by_kind"]["pfc"].as_u64() > Some(0), "{o}");
    // Latency samples travel in the kernel's per-flow histograms, not as records: the same
    // samples at each end as analyze finds once.
    let samples = |doc: &Value| doc["latency"]["overall"]["count"].as_u64();
    assert!(samples(&offline) > Some(0), "{offline}");
    assert_eq!(
        samples(&live),
        samples(&offline).map(|n| n * 2),
        "{}",
        live["latency"]
    );
    let by_kind: u64 = s["events_by_kind"]
        .as_object()
        .expect("events_by_kind")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(s["events"], by_kind);
    let per_packet =
        s["events"].as_f64().expect("events") / s["total_packets"].as_f64().expect("total_packets");
    assert!((s["events_per_packet"].as_f64().expect("per packet") - per_packet).abs() < 1e-12);

    let cost = &s["observer"];
    assert!(cost["rss_bytes"].as_u64() > Some(1 << 20), "{cost}");
    assert!(cost["cpu_seconds"].as_f64() > Some(0.0), "{cost}");
    let kernel = &cost["kernel"];
    assert_eq!(kernel["bpf_stats"], true, "{kernel}");
    assert_eq!(kernel["ringbuf_bytes"], 1 << 20, "{kernel}");
    let fill = kernel["ringbuf_fill"].as_f64().expect("fill");
    assert!((0.0..=1.0).contains(&fill), "{kernel}");
    let programs = kernel["programs"].as_array().expect("programs");
    let hooks: Vec<&str> = programs.iter().filter_map(|p| p["hook"].as_str()).collect();
    assert_eq!(hooks, ["xdp", "tc"], "{kernel}");
    // One program of each hook runs on both interfaces: once per frame of its direction.
    for (p, direction) in programs.iter().zip(["ingress", "egress"]) {
        let frames = &s["by_direction"][direction]["total_packets"];
        assert_eq!(p["run_count"], *frames, "{direction}: {p} {s}");
        let ns = p["ns_per_run"].as_f64().expect("ns per run");
        assert!(ns > 0.0 && ns < 1e6, "{p}");
    }
}

/// The bursty shape on the kernel path, sent into a veth at its own timing (the pauses between
/// bursts are the point) with `run -i` on the receiving end: each burst of 8-20 packets is an
/// activity run finished by the next, and the records that carry the runs (sixteen to one)
/// stay under one per hundred packets, where one event per finished run was one per burst.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn bursty_traffic_on_a_veth_sends_a_record_per_sixteen_runs() {
    require_root();
    let ns = VethNs::new().expect("namespace with a veth pair");
    let frames = roce_observer_tools::bursty_frames(100, 40, 256, 10_000);
    let observer = Observer::start(&ns, &["-i", &ns.b, "--json", "--interval", "0.2"])
        .expect("observer attaches");
    let timed: Vec<(u64, &str, &[u8])> = frames
        .iter()
        .map(|(us, f)| (us * 1_000, ns.a.as_str(), f.as_slice()))
        .collect();
    let late = ns.send_timed(&timed).expect("send the frames");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let out = observer.stop().expect("observer stops cleanly");
    let live: Value = serde_json::from_str(&out).expect("run --json output parses");
    let s = &live["summary"];
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("a count: {s}"));
    let (packets, records) = (n(&s["total_packets"]), n(&s["events_by_kind"]["data_run"]));
    eprintln!(
        "{records} run records for {packets} packets ({late} of {} frames sent more than 1 ms late): {}",
        frames.len(),
        s["events_by_kind"]
    );
    assert!(packets >= frames.len() as u64, "{s}");
    assert_eq!(s["events_lost"], 0, "{s}");
    // Runs were finished and batched (100 flows, 40 bursts each: 2 records a flow when every
    // burst is one run; a late sender splits some, never into more records than that).
    assert!(records > 0 && records <= 200, "{s}");
    assert!(records * 100 <= packets, "{s}");
}
