//! The observer's own cost in its report, on the kernel path: a fixture with latency samples
//! and PFC frames replayed on a veth pair with `run --bpf-stats` attached to both ends. The
//! events received must be what `analyze` counts for the same capture at each attach point
//! (kinds that do not depend on the replay's timing), and each attached program's run count
//! must be the frames its hook saw.

use integration_tests::{
    netns::{Observer, VethNs},
    require_root,
};

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
    let live: serde_json::Value = serde_json::from_str(&out).expect("run --json output parses");
    let analyzed = std::process::Command::new(integration_tests::observer_bin())
        .args(["analyze", "--json"])
        .arg(&pcap)
        .output()
        .expect("analyze runs");
    assert!(analyzed.status.success(), "analyze failed");
    let offline: serde_json::Value =
        serde_json::from_slice(&analyzed.stdout).expect("analyze --json output parses");

    let (s, o) = (&live["summary"], &offline["summary"]);
    assert_eq!(s["events_lost"], 0, "{s}");
    // Both ends see every frame of the capture: each kind twice what analyze counts once.
    for kind in ["new_flow", "latency", "pfc", "pause", "path"] {
        let want = o["events_by_kind"][kind].as_u64().expect("offline count") * 2;
        assert_eq!(s["events_by_kind"][kind], want, "{kind}: {s}");
    }
    assert!(o["events_by_kind"]["latency"].as_u64() > Some(0), "{o}");
    assert!(o["events_by_kind"]["pfc"].as_u64() > Some(0), "{o}");
    let by_kind: u64 = s["events_by_kind"]
        .as_object()
        .expect("events_by_kind")
        .values()
        .filter_map(serde_json::Value::as_u64)
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
