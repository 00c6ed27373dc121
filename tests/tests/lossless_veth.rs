//! The lossless-class diagnosis through the kernel path (docs/metrics.md, "Lossless class
//! diagnosis"): the three-port fixtures, each pcapng interface sent at its own time out of one
//! of three veth pairs in one namespace, with `run -i` on the three receiving ends. The pause
//! loop with data stopped is a deadlock with no root; the same loop while data passes is a
//! storm from the first port. The single-interface fixtures (clean DCQCN, pause first, marks at
//! 20% load) out of one pair, with `run -i` on its receiving end: the kernel programs' episodes
//! and load intervals must give the `pfc_before_ecn` and `ecn_at_low_load` findings and figures
//! that `analyze` gives for the same capture.

use integration_tests::{
    analyze_json, fixture_args, fixtures,
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

/// Where a frame may land after its due time and still be in the load interval the capture
/// put it in: the frames are sent this far past the interval's phase as captured (the
/// fixtures' tightest spacing at an interval edge is 400 us).
const ALIGN_SLACK_NS: u64 = 50_000;
const LOAD_INTERVAL_NS: u64 = 10_000_000;
/// A replay with a frame sent later than this, or in a later load interval than its due time's,
/// is made again: a frame late by a millisecond moves a lead time by a tenth of one over ten
/// episodes.
const LATE_NS: u64 = 1_000_000;

/// The single-interface fixture `name` sent out of one end of a pair at its capture times, its
/// first frame as far into a 10 ms interval of the wall clock as in the capture (plus
/// [`ALIGN_SLACK_NS`]), with `run -i` on the other end. Returns that end's name, `run`'s
/// final document and `analyze`'s of the fixture. A frame sent late could land in the next
/// load interval and make the two differ for a reason that is not the observer's: such a
/// replay (see [`LATE_NS`]) is made again, up to five times in all.
fn through_one_pair(name: &str, extra: &[&str]) -> (String, Value, Value) {
    through_one_pair_from(name, extra, &[None])
}

/// [`through_one_pair`], the frames sent once from each of `cpus` at the same times (more than
/// one: a pair with a queue per sender, CPU i sending on queue i, so that the receiving end's
/// XDP program runs on each sender's CPU at once).
fn through_one_pair_from(
    name: &str,
    extra: &[&str],
    cpus: &[Option<usize>],
) -> (String, Value, Value) {
    let (_, path, expected) = fixtures()
        .into_iter()
        .find(|f| f.0 == name)
        .unwrap_or_else(|| panic!("fixture {name}"));
    let args = fixture_args(&expected);
    let analyzed = analyze_json(&path, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let frames = roce_observer_tools::read_points(&path).expect("fixture reads");
    let t0 = frames.first().map_or(0, |f| f.0);
    let phase = t0 % LOAD_INTERVAL_NS + ALIGN_SLACK_NS;
    let late_after = std::time::Duration::from_nanos(LATE_NS);
    for attempt in 1..=5 {
        let queues = cpus.len() as u32;
        let ns = VethNs::with_queues(queues).expect("namespace with a veth pair");
        if queues > 1 {
            ns.pin_tx_queues(queues).expect("XPS: CPU i -> TX queue i");
        }
        let mut run = vec!["-i", &ns.b, "--json", "--interval", "0.2"];
        run.extend(args.iter().map(String::as_str));
        run.extend(extra);
        let observer = Observer::start(&ns, &run).expect("observer attaches");
        let timed: Vec<(u64, &str, &[u8])> = frames
            .iter()
            .map(|(ts, _, bytes)| (ts - t0, ns.a.as_str(), bytes.as_slice()))
            .collect();
        let late = ns
            .send_timed_on(&timed, Some((LOAD_INTERVAL_NS, phase)), late_after, cpus)
            .expect("send the frames");
        std::thread::sleep(std::time::Duration::from_millis(500));
        let out = observer.stop().expect("observer stops cleanly");
        eprintln!(
            "{name}, replay {attempt}: frames sent late (over {LATE_NS} ns, or in the next interval): {late} of {}",
            frames.len()
        );
        if late == 0 {
            let doc = serde_json::from_str(&out).expect("run --json output parses");
            return (ns.b.clone(), doc, analyzed);
        }
    }
    panic!("{name}: every replay sent frames late: no comparison is possible on this machine now");
}

/// The `pfc_before_ecn` and `ecn_at_low_load` findings of a document.
fn ecn_findings(doc: &Value) -> Vec<Value> {
    doc["lossless"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|f| f["kind"] != "deadlock")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel path's findings against analyze's: the same kinds, priorities and figures (counts
/// exactly; the lead time within `lead_ms`, as sent), at the receiving end `iface` for analyze's
/// `pcap`, over as long a time range (within 1 ms).
fn assert_same_findings(iface: &str, kernel: &Value, analyzed: &Value, lead_ms: f64) {
    let (got, want) = (ecn_findings(kernel), ecn_findings(analyzed));
    assert_eq!(
        got.len(),
        want.len(),
        "kernel path {}\nanalyze {}",
        kernel["lossless"],
        analyzed["lossless"]
    );
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            (&g["kind"], &g["priority"]),
            (&w["kind"], &w["priority"]),
            "{g}\n{w}"
        );
        assert_eq!(g["points"], serde_json::json!([iface]), "{g}");
        let span = |f: &Value| {
            f["end_ts"].as_u64().unwrap_or(0) as i64 - f["start_ts"].as_u64().unwrap_or(0) as i64
        };
        assert!(
            (span(g) - span(w)).abs() < 1_000_000,
            "time range\n{g}\n{w}"
        );
        if let Some(e) = w["episodes"].as_object() {
            for (field, want) in e {
                let got = &g["episodes"][field];
                match field.as_str() {
                    "mean_lead_ms" => {
                        let (a, b) = (got.as_f64(), want.as_f64());
                        assert_eq!(a.is_some(), b.is_some(), "{field}\n{g}\n{w}");
                        if let (Some(a), Some(b)) = (a, b) {
                            assert!((a - b).abs() < lead_ms, "{field}: {a} vs {b}");
                        }
                    }
                    _ => assert_eq!(got, want, "{field}\n{g}\n{w}"),
                }
            }
        }
        if let Some(l) = w["load"].as_object() {
            for (field, want) in l {
                assert_eq!(&g["load"][field], want, "{field}\n{g}\n{w}");
            }
        }
        assert_eq!(g["episodes"].is_null(), w["episodes"].is_null(), "{g}");
        assert_eq!(g["load"].is_null(), w["load"].is_null(), "{g}");
    }
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn pause_first_episodes_are_pfc_before_ecn_on_the_kernel_path_as_in_analyze() {
    require_root();
    // Also with activity runs off, when data packets take the coarse clock and the lossless
    // state reads the precise one itself.
    for extra in [&[][..], &["--no-steps"]] {
        let (iface, doc, analyzed) = through_one_pair("lossless_pause_first", extra);
        // What analyze finds here: two findings (priority 3, pauses lead by 1 ms; priority 5,
        // ECN off), as the fixture says.
        assert_eq!(ecn_findings(&analyzed).len(), 2, "{}", analyzed["lossless"]);
        assert_same_findings(&iface, &doc, &analyzed, 0.3);
    }
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn marks_at_20_percent_load_are_ecn_at_low_load_on_the_kernel_path_as_in_analyze() {
    require_root();
    // A frame sent on time can still be taken late by the receiving end's softirq on a loaded
    // machine (the sender's lateness check cannot see that), which moves it into the next
    // 10 ms load interval: a differing replay is sent again, at most three times in all. A
    // real difference fails every time.
    for attempt in 1..=3 {
        let (iface, doc, analyzed) = through_one_pair("lossless_low_load", &[]);
        assert_eq!(ecn_findings(&analyzed).len(), 1, "{}", analyzed["lossless"]);
        if attempt == 3 {
            assert_same_findings(&iface, &doc, &analyzed, 0.0);
            return;
        }
        let same = std::panic::catch_unwind(|| assert_same_findings(&iface, &doc, &analyzed, 0.0));
        if same.is_ok() {
            return;
        }
        eprintln!("lossless_low_load: replay {attempt} differs from analyze; sent again");
    }
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn clean_dcqcn_has_no_lossless_finding_on_the_kernel_path_as_in_analyze() {
    require_root();
    let (iface, doc, analyzed) = through_one_pair("lossless_clean_dcqcn", &[]);
    assert_same_findings(&iface, &doc, &analyzed, 0.0);
    // Not for want of input: the programs saw its marks and pauses. Ten episodes, the last
    // still open when the run ends (read from the map), and ten marked intervals, each closed
    // by the next data packet: one event each, of 153 frames.
    let kinds = &doc["summary"]["events_by_kind"];
    assert_eq!(kinds["lossless_episode"], 9, "{kinds}");
    assert_eq!(kinds["lossless_load"], 10, "{kinds}");
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn the_lossless_counts_are_exact_when_two_cpus_update_one_point_at_once() {
    require_root();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cpus >= 2,
        "this test needs two CPUs; this machine has {cpus}"
    );
    // The pause-first capture sent twice at the same times, from CPU 0 and CPU 1: both
    // copies' data, marks and pauses reach the same point and priorities at once.
    // The copies' signals fall in the same episodes: ten, each pause first (an episode closed
    // by both CPUs at once is one event less, not one episode more). Moving to the next episode
    // is a plain store (docs/metrics.md, "Lossless class diagnosis": a first time can be lost
    // when both CPUs close one at once), so a replay whose episode figures differ is made again,
    // up to three times; the counts must be exact in every replay.
    let mut differ = Vec::new();
    for attempt in 1..=3 {
        let (_, doc, analyzed) =
            through_one_pair_from("lossless_pause_first", &[], &[Some(0), Some(1)]);
        let (got, want) = (ecn_findings(&doc), ecn_findings(&analyzed));
        assert_eq!(got.len(), want.len(), "{}", doc["lossless"]);
        differ.clear();
        for (g, w) in got.iter().zip(&want) {
            let (ge, we) = (&g["episodes"], &w["episodes"]);
            // Counts are atomic adds or per-CPU counts: exactly twice the capture's.
            for field in ["ce", "cnp", "ect_data"] {
                assert_eq!(
                    ge[field].as_u64(),
                    we[field].as_u64().map(|n| 2 * n),
                    "{field}\n{g}"
                );
            }
            for field in ["episodes", "pfc_first", "pause_without_marks", "with_both"] {
                if ge[field] != we[field] {
                    differ.push(format!("{field}: {} (analyze {})", ge[field], we[field]));
                }
            }
        }
        if differ.is_empty() {
            return;
        }
        eprintln!("replay {attempt}: episode figures differ: {differ:?}");
    }
    panic!("three replays from two CPUs gave other episode figures than analyze: {differ:?}");
}
