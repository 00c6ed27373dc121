//! From counters to causes, end to end through `analyze`: a pcapng with two observation points
//! ("tx" before a lossy link, "rx" after it) of collective traffic with a known period, one
//! flow that ends every step late, and PSNs dropped between the points; the JSON document must
//! report the period, the straggler and the lost PSNs, and `--fail-on` must trip on them. And a
//! PFC storm captured at three switch ports (pcapng interfaces) that starts at one and spreads
//! along the flows: the who-paused-whom chain.

use std::process::{Command, Output};

use roce_observer_common::frames::{RoceFrame, pfc_frame};
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
    analyze_capture(&[(1, "tx"), (1, "rx")], &traffic(), args)
}

/// `analyze ARGS` on a pcapng of `t` (time in us, interface index into `ifaces`, frame).
fn analyze_capture(ifaces: &[(u16, &str)], t: &[(u64, u32, Vec<u8>)], args: &[&str]) -> Output {
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
    let records: Vec<(u32, u32, Vec<u8>)> = t
        .iter()
        .map(|(us, _, f)| {
            let us = 1_700_000_000_000_000 + us;
            ((us / 1_000_000) as u32, (us % 1_000_000) as u32, f.clone())
        })
        .collect();
    std::fs::write(&path, pcapng(ifaces, &records, |i| t[i].1)).expect("write capture");
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

/// Three switch ports as pcapng interfaces: flow A crosses leaf1 and spine1, flow B spine1 and
/// leaf2. leaf1 pauses priority 3 from 100 ms on (0xffff quanta refreshed every 300 us), spine1
/// from 120 ms, leaf2 from 145 ms; a fourth port ("edge") carries neither flow and pauses from
/// 110 ms. The chain: leaf1 -> spine1 -> leaf2, edge a root of its own.
fn storm() -> Vec<(u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    for (k, (src, dst, qp, ifaces)) in [(1u8, 2u8, 0x10u32, [0u32, 1]), (3, 4, 0x20, [1, 2])]
        .into_iter()
        .enumerate()
    {
        for psn in 0..20u32 {
            let f = RoceFrame {
                src_ip: [192, 0, 2, src],
                dst_ip: [192, 0, 2, dst],
                tos: (26 << 2) | 2,
                ..RoceFrame::new(0x0a, qp, psn)
            }
            .build();
            let t = 1_000 + k as u64 * 50_000 + u64::from(psn) * 100;
            out.push((t, ifaces[0], f.clone()));
            out.push((t + 5, ifaces[1], f));
        }
    }
    let prio3 = |mac| {
        let mut q = [0u16; 8];
        q[3] = 0xffff;
        pfc_frame(mac, 1 << 3, q)
    };
    for k in 0..2000u64 {
        let t = 100_000 + k * 300;
        out.push((t, 0, prio3(1)));
        for (from, mac, iface) in [(110_000, 9, 3), (120_000, 2, 1), (145_000, 3, 2)] {
            if t >= from {
                out.push((t + u64::from(mac), iface, prio3(mac)));
            }
        }
    }
    out.sort_by_key(|r| (r.0, r.1));
    out
}

#[test]
fn a_storm_that_starts_at_one_port_is_traced_along_the_flows() {
    let ifaces = [(1, "leaf1"), (1, "spine1"), (1, "leaf2"), (1, "edge")];
    let out = analyze_capture(&ifaces, &storm(), &["--json", "--storm-window-ms", "100"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let o = &doc["pfc_origin"];
    let sources = o["sources"].as_array().expect("a storm with sources");
    let rows: Vec<(String, Option<u64>, Value)> = sources
        .iter()
        .map(|s| {
            (
                s["source"]["iface"].as_str().unwrap_or("?").to_string(),
                s["paused_by"].as_u64(),
                s["evidence"].clone(),
            )
        })
        .collect();
    let want = [
        ("leaf1", None, Value::Null),
        ("edge", None, Value::Null),
        ("spine1", Some(0), "shared_flow".into()),
        ("leaf2", Some(2), "shared_flow".into()),
    ]
    .map(|(i, by, ev)| (i.to_string(), by, ev));
    assert_eq!(rows, want);
    assert_eq!(o["origin"]["iface"], "leaf1");
    assert_eq!((&o["reached"], &o["hops"]), (&2.into(), &2.into()));
    // spine1's first XOFF at 120.102 ms, leaf2's at 145.003 ms (the first refreshes at or past
    // their start, plus the MAC-numbered offsets in us above).
    assert_eq!(sources[0]["source"]["priority"], 3);
    let hop = sources[3]["hop_ms"].as_f64().expect("hop");
    assert!((hop - 24.901).abs() < 1e-6, "{hop}");
    // Each hop's pause fraction: the later a port joined, the less of the window it paused.
    let fraction = |i: usize| sources[i]["paused_fraction"].as_f64().expect("fraction");
    assert!(fraction(0) > fraction(2) && fraction(2) > fraction(3) && fraction(3) > 0.0);
}
