//! `analyze --json` on every fixture capture (tests/fixtures/*.pcap) must reproduce its
//! expected document exactly: the summary classes, every listed flow field, the latency
//! samples (count, min, max and every quantile, which are exact for small sample counts), the
//! PFC entries, and the order of flows and PFC entries.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

const FLOW_FIELDS: &[&str] = &[
    "src_ip",
    "dst_ip",
    "dst_qp",
    "packets",
    "bytes",
    "opcodes",
    "psn_gaps",
    "psn_missing",
    "retransmits",
    "acks",
    "naks",
    "cnp",
    "ecn_ce",
    "ecn_ect",
    "dscp",
    "pcp",
    "udp_src_ports",
    "peer_qp",
];

const PFC_FIELDS: &[&str] = &[
    "src_mac",
    "priority",
    "pause_frames",
    "xon_frames",
    "pause_quanta",
];

const SUMMARY_FIELDS: &[&str] = &[
    "total_packets",
    "roce_packets",
    "pfc_frames",
    "pause_8023x",
    "non_roce",
    "malformed",
    "ip_fragments",
    "unsupported",
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn analyze(pcap: &Path, extra: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .arg("analyze")
        .arg("--json")
        .args(extra)
        .arg(pcap)
        .output()
        .expect("run roce-observer");
    assert!(
        out.status.success(),
        "analyze {} failed: {}",
        pcap.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("analyze prints JSON")
}

/// Nearest-rank quantile of sorted samples (the engine's definition).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn compare(name: &str, expected: &Value, actual: &Value) -> Vec<String> {
    let mut diffs = Vec::new();
    for f in SUMMARY_FIELDS {
        if expected["summary"][f] != actual["summary"][f] {
            diffs.push(format!(
                "{name}: summary.{f}: expected {}, got {}",
                expected["summary"][f], actual["summary"][f]
            ));
        }
    }
    let none = Vec::new();
    let exp_flows = expected["flows"].as_array().unwrap_or(&none);
    let act_flows = actual["flows"].as_array().unwrap_or(&none);
    if exp_flows.len() != act_flows.len() {
        diffs.push(format!(
            "{name}: {} flows expected, {} reported",
            exp_flows.len(),
            act_flows.len()
        ));
    }
    // Same order: flows are sorted by (src_ip, dst_ip, dst_qp).
    for (i, (e, a)) in exp_flows.iter().zip(act_flows).enumerate() {
        for f in FLOW_FIELDS {
            if e[f] != a[f] {
                diffs.push(format!(
                    "{name}: flow[{i}].{f}: expected {}, got {}",
                    e[f], a[f]
                ));
            }
        }
        if a["iface"] != "pcap" || a["direction"] != "capture" {
            diffs.push(format!(
                "{name}: flow[{i}] iface/direction {} {}",
                a["iface"], a["direction"]
            ));
        }
        let mut samples: Vec<u64> = e["rtt_ns"]
            .as_array()
            .unwrap_or(&none)
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        samples.sort_unstable();
        let rtt = &a["rtt_ns"];
        if rtt["count"].as_u64() != Some(samples.len() as u64) || e["rtt_samples"] != rtt["count"] {
            diffs.push(format!(
                "{name}: flow[{i}].rtt_ns.count: expected {}, got {}",
                samples.len(),
                rtt["count"]
            ));
        } else if !samples.is_empty() {
            let mut want = vec![("min", samples[0]), ("max", samples[samples.len() - 1])];
            // Exact below the sketch's switch-over; within 1% above it.
            let exact = samples.len() <= 64;
            for (k, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)] {
                want.push((k, quantile(&samples, q)));
            }
            for (k, w) in want {
                let got = rtt[k].as_u64().unwrap_or(u64::MAX);
                let ok = if exact || k == "min" || k == "max" {
                    got == w
                } else {
                    (got as f64 - w as f64).abs() <= 0.01 * w as f64
                };
                if !ok {
                    diffs.push(format!(
                        "{name}: flow[{i}].rtt_ns.{k}: expected {w}, got {got}"
                    ));
                }
            }
        }
    }
    let exp_pfc = expected["pfc"].as_array().unwrap_or(&none);
    let act_pfc = actual["pfc"].as_array().unwrap_or(&none);
    if exp_pfc.len() != act_pfc.len() {
        diffs.push(format!(
            "{name}: {} pfc entries expected, {} reported",
            exp_pfc.len(),
            act_pfc.len()
        ));
    }
    for (i, (e, a)) in exp_pfc.iter().zip(act_pfc).enumerate() {
        for f in PFC_FIELDS {
            if e[f] != a[f] {
                diffs.push(format!(
                    "{name}: pfc[{i}].{f}: expected {}, got {}",
                    e[f], a[f]
                ));
            }
        }
    }
    diffs
}

#[test]
fn every_fixture_matches_its_expected_document() {
    let mut pcaps: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("tests/fixtures exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    pcaps.sort();
    assert!(pcaps.len() >= 10, "fixtures missing: {pcaps:?}");
    let mut diffs = Vec::new();
    for pcap in &pcaps {
        let name = pcap
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("?")
            .to_string();
        let expected: Value = serde_json::from_slice(
            &std::fs::read(pcap.with_extension("expected.json"))
                .expect("expected JSON next to the pcap"),
        )
        .expect("expected JSON parses");
        let pmtu = expected["pmtu"].as_u64().unwrap_or(4096).to_string();
        let actual = analyze(pcap, &["--pmtu", &pmtu]);
        diffs.extend(compare(&name, &expected, &actual));
        // Learning the path MTU must not change anything on these captures.
        let learned = analyze(pcap, &[]);
        diffs.extend(compare(
            &format!("{name} (pmtu learned)"),
            &expected,
            &learned,
        ));
    }
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}
