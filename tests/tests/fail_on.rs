//! `analyze --fail-on` and `run --fail-on`: the gate trips exactly when its condition holds on a
//! fixture, with the values taken from the fixture's expected document (written by hand from the
//! frames), exit status 3 and a one-line reason; a bad expression is a usage error naming what is
//! allowed. `run` on a capture is judged when the capture ends; `run` on interfaces at every
//! interval, ending the run (programs detached) at the first that trips (a veth kernel test).

use std::time::Duration;

use integration_tests::{
    fixtures,
    netns::{Observer, VethNs},
    observer_bin, require_root,
};
use serde_json::Value;

fn analyze(pcap: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(observer_bin())
        .arg("analyze")
        .args(args)
        .arg(pcap)
        .output()
        .expect("roce-observer runs (built by cargo xtask test)")
}

fn run_capture(pcap: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(observer_bin())
        .arg("run")
        .arg("--capture")
        .arg(pcap)
        .args(args)
        .output()
        .expect("roce-observer runs (built by cargo xtask test)")
}

fn fixture(name: &str) -> (std::path::PathBuf, Value) {
    fixtures()
        .into_iter()
        .find(|f| f.0 == name)
        .map(|f| (f.1, f.2))
        .unwrap_or_else(|| panic!("fixture {name}"))
}

/// Sum of a per-flow field over the expected document.
fn sum(doc: &Value, field: &str) -> u64 {
    doc["flows"]
        .as_array()
        .map(|fs| fs.iter().filter_map(|f| f[field].as_u64()).sum())
        .unwrap_or(0)
}

#[test]
fn the_gate_trips_exactly_at_the_fixture_values() {
    for (name, metric) in [
        // Real loss (two flows, psn_gaps 1 + 2, psn_missing 2 + 2); psn_gap's skipped PSNs are
        // open holes at the end of its capture, not loss.
        ("loss_go_back_n_timeout", "psn_gaps"),
        ("loss_go_back_n_timeout", "psn_missing"),
        ("nak_go_back_n", "retransmits"),
        ("ecn_cnp", "cnp"),
        ("ecn_cnp", "ecn_ce"),
    ] {
        let (pcap, doc) = fixture(name);
        let n = sum(&doc, metric);
        assert!(n > 0, "{name} has {metric}");
        let at = format!("{metric}>={n}");
        let out = analyze(&pcap, &["--json", "--fail-on", &at]);
        assert_eq!(out.status.code(), Some(3), "{name}: {at}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.trim_end(),
            format!("roce-observer: --fail-on: {at} ({metric} = {n})"),
            "{name}"
        );
        // The report is printed all the same.
        let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(sum(&printed, metric), n, "{name}");
        let above = format!("{metric}>{n}");
        let out = analyze(&pcap, &["--fail-on", &above]);
        assert_eq!(out.status.code(), Some(0), "{name}: {above}");
    }
}

#[test]
fn pause_fraction_and_latency_gates() {
    let (pcap, _) = fixture("pfc");
    let out = analyze(&pcap, &["--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let max = doc["pfc"]
        .as_array()
        .expect("pfc entries")
        .iter()
        .filter_map(|p| p["paused_fraction"].as_f64())
        .fold(0.0, f64::max);
    assert!(max > 0.0, "the pfc fixture pauses");
    let below = format!("pause_fraction>{}%", max * 100.0 * 0.99);
    assert_eq!(
        analyze(&pcap, &["--fail-on", &below]).status.code(),
        Some(3)
    );
    let above = format!("pause_fraction>{}%", max * 100.0 * 1.01);
    assert_eq!(
        analyze(&pcap, &["--fail-on", &above]).status.code(),
        Some(0)
    );

    // psn_gap: latency samples of 20 and 30 us (its expected document).
    let (pcap, doc) = fixture("psn_gap");
    assert_eq!(doc["flows"][0]["rtt_ns"], serde_json::json!([20000, 30000]));
    for (expr, code) in [
        ("rtt_max>29us", 3),
        ("rtt_max>30us", 0),
        ("rtt_p50<=20000", 3),
        ("rtt_p50<20us", 0),
    ] {
        assert_eq!(
            analyze(&pcap, &["--fail-on", expr]).status.code(),
            Some(code),
            "{expr}"
        );
    }
}

#[test]
fn a_bad_expression_is_a_usage_error_before_reading() {
    let (pcap, _) = fixture("psn_gap");
    let out = analyze(&pcap, &["--fail-on", "rtt_p99>50/s"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--fail-on"), "{stderr}");
    assert!(stderr.contains("ns, us, ms or s"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing analysed");
    let out = analyze(&pcap, &["--fail-on", "gaps>0"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("use one of psn_gaps"),
        "the allowed metrics are listed"
    );
}

/// `run --capture`: the same verdict as `analyze`, on the report printed when the capture ends.
#[test]
fn run_on_a_capture_is_judged_when_it_ends() {
    for (name, metric) in [("loss_go_back_n_timeout", "psn_gaps"), ("ecn_cnp", "cnp")] {
        let (pcap, doc) = fixture(name);
        let n = sum(&doc, metric);
        assert!(n > 0, "{name} has {metric}");
        let at = format!("{metric}>={n}");
        let out = run_capture(&pcap, &["--json", "--fail-on", &at]);
        assert_eq!(out.status.code(), Some(3), "{name}: {at}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim_end(),
            format!("roce-observer: --fail-on: {at} ({metric} = {n})"),
            "{name}"
        );
        let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(
            sum(&printed, metric),
            n,
            "{name}: the whole capture was read"
        );
        let above = format!("{metric}>{n}");
        let out = run_capture(&pcap, &["--no-tui", "--fail-on", &above]);
        assert_eq!(out.status.code(), Some(0), "{name}: {above}");
    }
    let (pcap, _) = fixture("psn_gap");
    let out = run_capture(&pcap, &["--fail-on", "psn_gaps>1us"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad expression is a usage error"
    );
}

/// Whether `dev` in `ns` has an XDP program attached (`ip link` shows `prog/xdp`).
fn has_xdp(ns: &VethNs, dev: &str) -> bool {
    let out = ns
        .exec("ip")
        .args(["link", "show", "dev", dev])
        .output()
        .expect("ip runs");
    assert!(out.status.success(), "ip link show dev {dev}");
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

/// `run -i`: judged at every interval. A condition that holds ends the run by itself with
/// status 3, the reason line and the final report, and nothing stays attached; one that never
/// holds leaves the run going until it is stopped (status 0).
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn run_on_interfaces_ends_at_the_first_interval_that_trips() {
    require_root();
    let (pcap, doc) = fixture("loss_go_back_n_timeout");
    let gaps = sum(&doc, "psn_gaps");
    assert!(gaps > 0);
    let pmtu = doc["pmtu"].as_u64().unwrap_or(4096).to_string();
    for (expr, trips) in [("psn_gaps>0", true), ("psn_gaps>1000", false)] {
        let ns = VethNs::new().expect("namespace with a veth pair");
        let observer = Observer::on_both_ends(&ns, &["--pmtu", &pmtu, "--fail-on", expr])
            .expect("observer attaches");
        assert!(has_xdp(&ns, &ns.a) && has_xdp(&ns, &ns.b), "attached");
        ns.replay(&pcap).expect("tcpreplay");
        if !trips {
            std::thread::sleep(Duration::from_millis(1000));
            let out = observer
                .stop()
                .expect("still running, stops cleanly with status 0");
            let printed: Value = serde_json::from_str(&out).expect("final JSON");
            // Seen at both ends: TC egress of a, XDP ingress of b.
            assert_eq!(sum(&printed, "psn_gaps"), 2 * gaps, "{expr}");
            continue;
        }
        let (status, out, log) = observer
            .wait_output(Duration::from_secs(10))
            .expect("the gate ends the run");
        assert_eq!(status.code(), Some(3), "{expr}: {log}");
        let reason = log
            .lines()
            .find(|l| l.contains("--fail-on"))
            .unwrap_or_else(|| panic!("no reason line: {log}"));
        let value: u64 = reason
            .strip_prefix(&format!("roce-observer: --fail-on: {expr} (psn_gaps = "))
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("reason line: {reason}"));
        assert!(value > 0 && value <= 2 * gaps, "{reason}");
        let printed: Value = serde_json::from_str(&out).expect("the final report is printed");
        assert!(sum(&printed, "psn_gaps") > 0);
        for dev in [&ns.a, &ns.b] {
            assert!(
                !has_xdp(&ns, dev),
                "XDP left on {dev} after the gate tripped"
            );
        }
    }
}
