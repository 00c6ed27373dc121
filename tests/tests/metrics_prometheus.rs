//! `run --metrics` scraped by a real Prometheus server (Debian's `prometheus`): a fixture is
//! replayed on a veth pair in a throwaway namespace with the observer on both ends; Prometheus
//! scrapes the endpoint on the namespace's loopback; the values it stored must equal the
//! observer's own JSON document for the same run. The exposition must also pass
//! `promtool check metrics`, and the example recording rules (docs/prometheus/) must load and
//! produce their series.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use integration_tests::{
    fixtures_dir,
    netns::{Observer, VethNs},
    prometheus::{Prometheus, ensure_installed, http_get, loopback_up, promtool_lint},
    require_root,
};
use serde_json::Value;

const METRICS: &str = "127.0.0.1:9470";
const PROMETHEUS: &str = "127.0.0.1:9090";

fn label(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

fn u(v: &Value) -> f64 {
    v.as_u64().unwrap_or(0) as f64
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn prometheus_stores_what_the_json_document_says() {
    require_root();
    ensure_installed().expect("Debian package `prometheus`");
    let ns = VethNs::new().expect("namespace with a veth pair");
    loopback_up(&ns).expect("loopback");
    let observer = Observer::on_both_ends(&ns, &["--metrics", METRICS]).expect("observer attaches");
    let rules = integration_tests::workspace_root().join("docs/prometheus/roce-observer.rules.yml");
    let prom =
        Prometheus::start(&ns, METRICS, PROMETHEUS, Some(&rules)).expect("prometheus starts");
    let wait_for = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ok() {
            assert!(
                Instant::now() < deadline,
                "{what} within 60 s:\n{}",
                prom.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    wait_for("a first scrape", &|| {
        let up = prom.query("up{job=\"roce\"}").expect("query up");
        up.first().is_some_and(|(_, v)| *v == 1.0)
    });
    // Traffic while Prometheus scrapes, so rates over the window are not zero: a first capture
    // makes the per-point series exist (a rate needs two samples of one series), a second one
    // raises them.
    ns.replay(&fixtures_dir().join("psn_gap.pcap"))
        .expect("tcpreplay");
    wait_for("the first capture's series", &|| {
        prom.query("roce_point_latency_seconds_count")
            .expect("query points")
            .len()
            == 2
    });
    ns.replay(&fixtures_dir().join("mixed_demo.pcap"))
        .expect("tcpreplay");
    // Several reporting intervals after the last frame: the published snapshot is final.
    std::thread::sleep(Duration::from_millis(1000));

    let (status, exposition) = http_get(&ns, METRICS, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "{exposition}");
    let lint = promtool_lint(&exposition).expect("promtool runs");
    assert!(lint.is_empty(), "promtool check metrics: {lint}");
    let roce_now: f64 = exposition
        .lines()
        .find_map(|l| l.strip_prefix("roce_frames_total{class=\"roce\"} "))
        .and_then(|v| v.parse().ok())
        .expect("roce_frames_total in the exposition");
    assert!(roce_now > 0.0);
    wait_for("a scrape of the final counts", &|| {
        let stored = prom
            .query("roce_frames_total{class=\"roce\"}")
            .expect("query frames");
        stored.first().is_some_and(|(_, v)| *v == roce_now)
    });
    let q = |expr: &str| prom.query(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    // The example recording rules load and produce their series (while the observer still
    // serves: a rate needs two samples of a series).
    wait_for("the recording rules' first evaluation", &|| {
        prom.query("fabric:roce_latency_seconds:p99_5m")
            .expect("query p99")
            .first()
            .is_some_and(|(_, v)| v.is_finite() && *v > 0.0)
    });
    let cnp_rate = q("fabric:roce_cnp:rate5m");
    assert!(
        cnp_rate.first().is_some_and(|(_, v)| *v > 0.0),
        "{cnp_rate:?}"
    );
    for rule in [
        "instance:roce_cnp:rate5m",
        "fabric:roce_pfc_paused:ratio_avg5m",
        "fabric:roce_pfc_paused:ratio_max5m",
        "fabric:roce_pfc_pause_frames:rate5m",
        "instance:roce_latency_seconds:p99_5m",
        "fabric:roce_retransmits:rate5m",
        "fabric:roce_naks:rate5m",
        "fabric:roce_observer_lost:rate5m",
    ] {
        // Rates need two samples of a series: give the rule a few evaluations.
        wait_for(&format!("recording rule {rule}"), &|| !q(rule).is_empty());
    }
    let out = observer.stop().expect("observer stops cleanly");
    // Once the observer is gone, a scrape that fails marks its series stale and an instant
    // query returns nothing: read each expression's last value over the last two minutes.
    let q = |expr: &str| {
        let last = format!("last_over_time(({expr})[2m:1s])");
        prom.query(&last).unwrap_or_else(|e| panic!("{last}: {e}"))
    };
    let doc: Value = serde_json::from_str(&out).expect("run --json output parses");
    let summary = &doc["summary"];
    let flows = doc["flows"].as_array().expect("flows");
    assert!(!flows.is_empty(), "the replay produced flows");

    // Frame classes.
    let frames: BTreeMap<String, f64> = q("roce_frames_total")
        .into_iter()
        .map(|(m, v)| (label(&m, "class"), v))
        .collect();
    for (class, field) in [
        ("roce", "roce_packets"),
        ("pfc", "pfc_frames"),
        ("pause_8023x", "pause_8023x"),
        ("non_roce", "non_roce"),
        ("malformed", "malformed"),
    ] {
        assert_eq!(
            frames.get(class),
            Some(&u(&summary[field])),
            "class {class}"
        );
    }
    // Every flow (fewer than --metrics-top-flows) with its packets and bytes.
    for (metric, field) in [
        ("roce_flow_packets_total", "packets"),
        ("roce_flow_bytes_total", "bytes"),
        ("roce_flow_ecn_ce_total", "ecn_ce"),
        ("roce_flow_retransmits_total", "retransmits"),
    ] {
        let stored = q(metric);
        assert_eq!(stored.len(), flows.len(), "{metric}: one series per flow");
        for (m, v) in stored {
            let flow = flows
                .iter()
                .find(|f| {
                    label(&m, "src") == label(f, "src_ip")
                        && label(&m, "dst") == label(f, "dst_ip")
                        && m["qp"].as_str() == Some(f["dst_qp"].to_string().as_str())
                        && label(&m, "iface") == label(f, "iface")
                        && label(&m, "direction") == label(f, "direction")
                })
                .unwrap_or_else(|| panic!("{metric}: no flow in the document for {m}"));
            assert_eq!(v, u(&flow[field]), "{metric} {m}");
        }
    }
    // Latency histogram per observation point: its count is the document's sample count.
    let mut samples: BTreeMap<(String, String), f64> = BTreeMap::new();
    for f in flows {
        *samples
            .entry((label(f, "iface"), label(f, "direction")))
            .or_default() += u(&f["rtt_ns"]["count"]);
    }
    let stored = q("roce_point_latency_seconds_count");
    assert_eq!(stored.len(), samples.len());
    for (m, v) in stored {
        let key = (label(&m, "iface"), label(&m, "direction"));
        assert_eq!(Some(&v), samples.get(&key), "{key:?}");
    }
    let all_samples: f64 = samples.values().sum();
    assert!(all_samples > 0.0, "the fixture has latency samples");
    let p99 = q("histogram_quantile(0.99, sum by (le) (roce_point_latency_seconds_bucket))");
    assert!(
        p99.first().is_some_and(|(_, v)| v.is_finite() && *v > 0.0),
        "p99 across points: {p99:?}"
    );
    // NAKs by class, PFC frames, observer health.
    for class in ["psn_seq_err", "rnr", "other"] {
        let in_doc: f64 = flows.iter().map(|f| u(&f["naks"][class])).sum();
        let stored = q(&format!("roce_naks_total{{class=\"{class}\"}}"));
        assert_eq!(
            stored.first().map(|(_, v)| *v),
            Some(in_doc),
            "NAK class {class}"
        );
    }
    let pause_doc: f64 = doc["pfc"]
        .as_array()
        .expect("pfc")
        .iter()
        .map(|p| u(&p["pause_frames"]))
        .sum();
    let pause = q("sum(roce_pfc_pause_frames_total)");
    assert_eq!(pause.first().map(|(_, v)| *v), Some(pause_doc));
    assert!(pause_doc > 0.0, "the fixture has PFC frames");
    let lost = q("roce_observer_events_lost_total");
    assert_eq!(
        lost.first().map(|(_, v)| *v),
        Some(u(&summary["events_lost"]))
    );
    eprintln!(
        "prometheus scrape: {} flows, {} latency samples, {} pause frames matched the JSON document",
        flows.len(),
        all_samples,
        pause_doc
    );
}
