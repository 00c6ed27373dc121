//! The lossless-class diagnosis through the kernel path (docs/metrics.md, "Lossless class
//! diagnosis"): the three-port fixtures, each pcapng interface sent at its own time out of one
//! of three veth pairs in one namespace, with `run -i` on the three receiving ends. The pause
//! loop with data stopped is a deadlock with no root; the same loop while data passes is a
//! storm from the first port. (The single-interface lossless fixtures go through
//! veth_replay.rs like every fixture: on this path only their PFC side is fed, and
//! `pfc_before_ecn` / `ecn_at_low_load` are not judged: metrics.md says why.)

use integration_tests::{
    fixture_args, fixtures,
    netns::{Observer, VethNs},
    require_root,
};
use serde_json::Value;

/// The fixture's frames sent on three pairs (interface i of the pcapng out of pair i), at
/// their capture times; `run -i` on the receiving ends with the fixture's arguments. Returns
/// the receiving ends' names and `run`'s final document.
fn through_three_pairs(name: &str) -> ([String; 3], Value) {
    let (_, path, expected) = fixtures()
        .into_iter()
        .find(|f| f.0 == name)
        .unwrap_or_else(|| panic!("fixture {name}"));
    let frames = roce_observer_tools::read_points(&path).expect("fixture reads");
    let ns = VethNs::new().expect("namespace with a veth pair");
    let pairs = ns.three_pairs().expect("two more pairs");
    let ends = pairs.clone().map(|p| p.1);
    let ifaces = ends.join(",");
    let args = fixture_args(&expected);
    let mut run = vec!["-i", &ifaces, "--json", "--interval", "0.2"];
    run.extend(args.iter().map(String::as_str));
    let observer = Observer::start(&ns, &run).expect("observer attaches");
    let t0 = frames.first().map_or(0, |f| f.0);
    let timed: Vec<(u64, &str, &[u8])> = frames
        .iter()
        .map(|(ts, i, bytes)| (ts - t0, pairs[*i as usize].0.as_str(), bytes.as_slice()))
        .collect();
    let late = ns.send_timed(&timed).expect("send the frames");
    eprintln!(
        "{name}: frames sent more than 1 ms late: {late} of {}",
        frames.len()
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let out = observer.stop().expect("observer stops cleanly");
    (
        ends,
        serde_json::from_str(&out).expect("run --json output parses"),
    )
}

fn deadlocks(doc: &Value) -> Vec<&Value> {
    doc["lossless"]
        .as_array()
        .map(|a| a.iter().filter(|f| f["kind"] == "deadlock").collect())
        .unwrap_or_default()
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_pause_loop_with_data_stopped_is_a_deadlock_on_the_kernel_path() {
    require_root();
    let (ends, doc) = through_three_pairs("lossless_deadlock");
    let found = deadlocks(&doc);
    assert_eq!(found.len(), 1, "{}", doc["lossless"]);
    let f = found[0];
    // The cycle in order from the first to pause, as the capture's sw1 -> sw2 -> sw3.
    assert_eq!(f["points"], serde_json::json!(ends), "{f}");
    assert_eq!(f["priority"], 3);
    for m in f["cycle"].as_array().expect("cycle") {
        assert!(m["last_data_ts"].is_null(), "{m}");
        // 12 XOFFs 50 ms apart, 102.4 ms each at 0.125 Gb/s: 652.4 ms, as sent (within
        // 5 ms of sending jitter).
        let ms = m["paused_ms"].as_f64().expect("paused_ms");
        assert!((ms - 652.4).abs() < 5.0, "{m}");
    }
    let o = &doc["pfc_origin"];
    assert_eq!(o["deadlock"], true, "{o}");
    assert!(o["origin"].is_null(), "{o}");
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_pause_loop_while_data_passes_is_a_storm_on_the_kernel_path() {
    require_root();
    let (ends, doc) = through_three_pairs("lossless_deadlock_data_flows");
    assert!(deadlocks(&doc).is_empty(), "{}", doc["lossless"]);
    let o = &doc["pfc_origin"];
    assert_eq!(o["deadlock"], false, "{o}");
    assert_eq!(o["origin"]["iface"], ends[0].as_str(), "{o}");
    assert_eq!(
        (o["reached"].as_u64(), o["hops"].as_u64()),
        (Some(2), Some(2)),
        "{o}"
    );
}
