//! From counters to causes, end to end through `analyze`: a pcapng with two observation points
//! ("tx" before a lossy link, "rx" after it) of collective traffic with a known period, one
//! flow that ends every step late, and PSNs dropped between the points; the JSON document must
//! report the period, the straggler and the lost PSNs, and `--fail-on` must trip on them.

use std::process::{Command, Output};

use roce_observer_common::frames::RoceFrame;
use serde_json::Value;

mod common;
use common::pcapng;

const PERIOD_US: u64 = 50_000;
const STEPS: u64 = 15;
/// Flows (source host, QP); the last one sends 4 ms longer each step.
const FLOWS: [(u8, u32); 3] = [(1, 0x101), (3, 0x103), (4, 0x104)];
const LATE_US: u64 = 4_000;
/// PSNs of flow 0 dropped between tx and rx.
const DROPPED: [u32; 4] = [17, 230, 231, 600];

/// (time in us, interface, frame).
fn traffic() -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for (f, &(src, qp)) in FLOWS.iter().enumerate() {
        let mut psn = 0u32;
        for step in 0..STEPS {
            // A little jitter per step and flow, the same on every run.
            let start = step * PERIOD_US + (step * 7 + f as u64 * 13) % 300;
            let len = 10_000 + if f == 2 { LATE_US } else { 0 };
            let mut t = start;
            while t < start + len {
                let frame = RoceFrame {
                    src_ip: [192, 0, 2, src],
                    dst_ip: [192, 0, 2, 2],
                    tos: (26 << 2) | 2,
                    payload: 1024,
                    ..RoceFrame::new(0x0a, qp, psn)
                }
                .build();
                out.push((t, 0, frame.clone()));
                if !(f == 0 && DROPPED.contains(&psn)) {
                    out.push((t + 20, 1, frame));
                }
                psn += 1;
                t += 200;
            }
        }
    }
    out.sort_by_key(|r| (r.0, r.1));
    out
}

fn analyze(args: &[&str]) -> Output {
    // One directory per call: the tests of this file run in parallel in one process, and a
    // shared file would be truncated by one test while another reads it.
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "roce-observer-diagnosis-{}-{call}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("collective.pcapng");
    let t = traffic();
    let records: Vec<(u32, u32, Vec<u8>)> = t
        .iter()
        .map(|(us, _, f)| {
            let us = 1_700_000_000_000_000 + us;
            ((us / 1_000_000) as u32, (us % 1_000_000) as u32, f.clone())
        })
        .collect();
    std::fs::write(&path, pcapng(&[(1, "tx"), (1, "rx")], &records, |i| t[i].1))
        .expect("write capture");
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .arg("analyze")
        .args(args)
        .arg(&path)
        .output()
        .expect("run roce-observer");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "panic"
    );
    out
}

#[test]
fn steps_straggler_and_lost_psns_in_the_document() {
    let out = analyze(&["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");

    let steps = &doc["steps"];
    let period = steps["period_ms"].as_f64().expect("steps found");
    assert!((period - 50.0).abs() <= 0.5, "period {period}");
    assert_eq!(steps["count"], STEPS);
    let g = &steps["stragglers"][0];
    assert_eq!(
        (g["src_ip"].as_str(), g["dst_qp"].as_u64()),
        (Some("192.0.2.4"), Some(0x104))
    );
    assert_eq!(g["late_steps"], STEPS);
    assert_eq!(g["evidence"]["pause_us"], 0.0);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("-0.0"),
        "no negative zero"
    );
    assert_eq!(g["evidence"]["ce"], 0);
    let lag = g["mean_lag_ms"].as_f64().expect("lag");
    assert!((lag - 4.0).abs() < 0.5, "lag {lag}");

    let paths = doc["paths"].as_array().expect("paths");
    let lost = paths
        .iter()
        .find(|p| p["missing"].as_u64() > Some(0))
        .expect("a pair with losses");
    assert_eq!(lost["src_ip"], "192.0.2.1");
    assert_eq!(
        (&lost["upstream"]["iface"], &lost["downstream"]["iface"]),
        (&"tx".into(), &"rx".into())
    );
    assert_eq!(lost["missing"], DROPPED.len());
    assert_eq!(lost["missing_psns"], serde_json::json!(DROPPED));
    // Every other pair (both orders of the three flows) lost nothing.
    assert_eq!(paths.len(), 6);
    assert_eq!(paths.iter().filter(|p| p["missing"] != 0).count(), 1);
}

#[test]
fn fail_on_gates_on_stragglers_and_lost_psns() {
    for (expr, code) in [
        ("stragglers>0", 3),
        ("stragglers>1", 0),
        ("step_period>51ms", 0),
        ("step_period>49ms", 3),
        ("path_missing>=4", 3),
        ("path_missing>4", 0),
    ] {
        let out = analyze(&["--fail-on", expr]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{expr}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = analyze(&["--fail-on", "stragglers>0", "--fail-on", "path_missing>0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("stragglers>0 (stragglers = 1); path_missing>0 (path_missing = 4)"),
        "{stderr}"
    );
}
