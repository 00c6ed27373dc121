//! Lossless-class diagnosis end to end through `analyze` (docs/metrics.md, "Lossless class
//! diagnosis"): pcapngs built here with known answers. Clean DCQCN (marks first, rare pauses)
//! raises nothing; pause-first episodes raise `pfc_before_ecn`; marks at 20% load raise
//! `ecn_at_low_load`; three switch ports pausing in a loop while data stopped raise
//! `deadlock` (and the storm origin names no root); the same loop while data still flows, and
//! a storm spreading down a tree (10,000 XOFFs per port), stay storms with an origin.
//!
//! The link is 0.1 Gb/s (`--link-speed 0.1`), so that a 10 ms load interval is 125,000 bytes:
//! a 1,098-byte frame every 100 us is 87.8% load, every 500 us 17.6%. 200 quanta pause 1.024 ms.

use std::process::{Command, Output};

use roce_observer_common::frames::{RoceFrame, pfc_frame};
use serde_json::Value;

mod common;
use common::pcapng;

const T0_US: u64 = 1_700_000_000_000_000;
const QUANTA: u16 = 200;

/// (time in us, interface, frame).
type Trace = Vec<(u64, u32, Vec<u8>)>;

/// RDMA WRITE data from 192.0.2.`src` on QP `qp`, DSCP 26 (priority 3), ECN `ecn`.
fn data(src: u8, qp: u32, psn: u32, ecn: u8) -> Vec<u8> {
    RoceFrame {
        src_ip: [192, 0, 2, src],
        dst_ip: [192, 0, 2, 100],
        tos: (26 << 2) | ecn,
        payload: 1024,
        ..RoceFrame::new(0x0a, qp, psn)
    }
    .build()
}

/// An XOFF for priority 3 from switch port `mac`.
fn xoff(mac: u8) -> Vec<u8> {
    let mut q = [0; 8];
    q[3] = QUANTA;
    pfc_frame(mac, 1 << 3, q)
}

fn analyze(ifaces: &[&str], trace: &Trace, args: &[&str]) -> Output {
    analyze_at(Some("0.1"), ifaces, trace, args)
}

/// `analyze` with `--link-speed link`, or with the assumed default speed for None.
fn analyze_at(link: Option<&str>, ifaces: &[&str], trace: &Trace, args: &[&str]) -> Output {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "roce-observer-lossless-{}-{call}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("lossless.pcapng");
    let mut trace = trace.clone();
    trace.sort_by_key(|r| (r.0, r.1));
    let records: Vec<(u32, u32, Vec<u8>)> = trace
        .iter()
        .map(|(us, _, f)| {
            let us = T0_US + us;
            ((us / 1_000_000) as u32, (us % 1_000_000) as u32, f.clone())
        })
        .collect();
    let ifaces: Vec<(u16, &str)> = ifaces.iter().map(|n| (1, *n)).collect();
    std::fs::write(&path, pcapng(&ifaces, &records, |i| trace[i].1)).expect("write capture");
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .arg("analyze")
        .args(link.iter().flat_map(|l| ["--link-speed", l]))
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

fn document(ifaces: &[&str], trace: &Trace, args: &[&str]) -> Value {
    let out = analyze(ifaces, trace, &[args, &["--json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn findings<'a>(doc: &'a Value, kind: &str) -> Vec<&'a Value> {
    doc["lossless"]
        .as_array()
        .map(|a| a.iter().filter(|f| f["kind"] == kind).collect())
        .unwrap_or_default()
}

fn exit_code(ifaces: &[&str], trace: &Trace, expr: &str) -> Option<i32> {
    analyze(ifaces, trace, &["--fail-on", expr]).status.code()
}

/// 500 ms of data at 87.8% load on one port; every 50 ms a congestion episode of CE marks
/// (10 packets, from `mark_at` ms into it) and, when `pause(k)`, an XOFF `xoff_at` ms in.
fn episodes(mark_at: Option<u64>, xoff_at: u64, pause: impl Fn(u64) -> bool) -> Trace {
    let mut t = Vec::new();
    for i in 0..5000u64 {
        let us = i * 100;
        let into = us % 50_000;
        let marked = mark_at.is_some_and(|m| into >= m * 1000 && into < m * 1000 + 1000);
        t.push((us, 0, data(1, 0x11, i as u32, if marked { 3 } else { 2 })));
    }
    for k in 0..10u64 {
        if pause(k) {
            t.push((k * 50_000 + xoff_at * 1000 + 50, 0, xoff(7)));
        }
    }
    t
}

#[test]
fn clean_dcqcn_marks_first_and_raises_nothing() {
    // Marks from 2 ms into each episode, an XOFF 3 ms in every fourth one.
    let trace = episodes(Some(2), 3, |k| k % 4 == 0);
    let doc = document(&["sw"], &trace, &[]);
    assert!(doc.get("lossless").is_none(), "{}", doc["lossless"]);
    assert_eq!(exit_code(&["sw"], &trace, "pfc_before_ecn>0"), Some(0));
    assert_eq!(exit_code(&["sw"], &trace, "ecn_at_low_load>0"), Some(0));
}

#[test]
fn pauses_before_marks_raise_pfc_before_ecn() {
    // XOFF 1 ms into each episode, marks from 2 ms: pauses lead by 1 ms - 50 us.
    let trace = episodes(Some(2), 1, |_| true);
    let doc = document(&["sw"], &trace, &[]);
    let f = findings(&doc, "pfc_before_ecn");
    assert_eq!(f.len(), 1, "{}", doc["lossless"]);
    let f = f[0];
    assert_eq!(
        (f["points"][0].as_str(), f["priority"].as_u64()),
        (Some("sw"), Some(3))
    );
    let e = &f["episodes"];
    assert_eq!(
        (e["episodes"].as_u64(), e["pfc_first"].as_u64()),
        (Some(10), Some(10))
    );
    assert_eq!(e["pfc_first_share"], 1.0);
    assert_eq!(e["with_both"], 10);
    // First XOFF at +1.05 ms, first mark at +2 ms: -0.95 ms.
    let lead = e["mean_lead_ms"].as_f64().expect("lead");
    assert!((lead + 0.95).abs() < 1e-9, "{lead}");
    assert_eq!(e["ce"], 100);
    assert_eq!(f["start_ts"], (T0_US + 1050) * 1000);
    assert_eq!(exit_code(&["sw"], &trace, "pfc_before_ecn>0"), Some(3));
    // In the alerts too (the TUI's alerts view, the log's alert lines, roce_alerts).
    let alerts = doc["alerts"].as_array().expect("alerts");
    assert!(alerts.iter().any(|a| a["kind"] == "pfc_before_ecn"));

    // Pauses and no mark at all on ECT traffic: ECN is off.
    let off = episodes(None, 1, |_| true);
    let doc = document(&["sw"], &off, &[]);
    let f = findings(&doc, "pfc_before_ecn");
    assert_eq!(f.len(), 1, "{}", doc["lossless"]);
    assert_eq!(f[0]["episodes"]["pause_without_marks"], 10);
    assert!(
        f[0]["reason"]
            .as_str()
            .expect("reason")
            .contains("ECN marking is off")
    );
}

#[test]
fn marks_at_twenty_percent_load_raise_ecn_at_low_load() {
    // A frame every 500 us for 200 ms (20 per 10 ms interval), one in four marked CE.
    let mut trace = Vec::new();
    for i in 0..400u64 {
        trace.push((
            i * 500,
            0,
            data(1, 0x11, i as u32, if i % 4 == 0 { 3 } else { 2 }),
        ));
    }
    let len = trace[0].2.len() as f64;
    let doc = document(&["sw"], &trace, &[]);
    let f = findings(&doc, "ecn_at_low_load");
    assert_eq!(f.len(), 1, "{}", doc["lossless"]);
    let load = &f[0]["load"];
    let util = 20.0 * len * 8.0 / 1e6;
    assert!((load["marking_starts_at"].as_f64().expect("start") - util).abs() < 1e-9);
    assert_eq!(load["marked_intervals"], 20);
    assert_eq!(load["low_load_intervals"], 20);
    assert_eq!(load["low_load_ce"], 100);
    assert_eq!(
        (f[0]["start_ts"].as_u64(), f[0]["end_ts"].as_u64()),
        (Some(T0_US * 1000), Some((T0_US + 200_000) * 1000))
    );
    assert_eq!(exit_code(&["sw"], &trace, "ecn_at_low_load>0"), Some(3));
    // Without --link-speed the speed is only assumed: the load is not judged.
    let assumed = analyze_at(None, &["sw"], &trace, &["--json"]);
    let assumed: Value = serde_json::from_slice(&assumed.stdout).expect("JSON");
    assert_eq!(findings(&assumed, "ecn_at_low_load").len(), 0);
    // The same marks at 87.8% load (clean_dcqcn) are not at low load.
    let busy = episodes(Some(2), 3, |_| false);
    assert_eq!(exit_code(&["sw"], &busy, "ecn_at_low_load>0"), Some(0));
}

/// Three switch ports as pcapng interfaces a, b, c; flow 1 is seen at a then b, flow 2 at b
/// then c, flow 3 at c then a (a loop). Data for 50 ms (until `data_until_us`), then every port
/// pauses priority 3 from 60, 61 and 62 ms for 1.5 s (XOFF every 500 us, 1.024 ms each).
fn ring(data_until_us: u64) -> Trace {
    let mut t = Vec::new();
    let hops = [(0, 1), (1, 2), (2, 0)];
    for i in 0..data_until_us / 200 {
        for (f, &(from, to)) in hops.iter().enumerate() {
            let frame = data(f as u8 + 1, 0x20 + f as u32, i as u32, 2);
            let us = i * 200 + f as u64 * 50;
            t.push((us, from, frame.clone()));
            t.push((us + 20, to, frame));
        }
    }
    for k in 0..3000u64 {
        for port in 0..3u32 {
            t.push((
                60_000 + port as u64 * 1000 + k * 500,
                port,
                xoff(port as u8 + 1),
            ));
        }
    }
    t
}

const RING: [&str; 3] = ["a", "b", "c"];
const STORM_WINDOW: [&str; 2] = ["--storm-window-ms", "100"];

#[test]
fn a_pause_loop_with_data_stopped_is_a_deadlock_without_root() {
    let trace = ring(50_000);
    let doc = document(&RING, &trace, &STORM_WINDOW);
    let f = findings(&doc, "deadlock");
    assert_eq!(f.len(), 1, "{}", doc["lossless"]);
    let f = f[0];
    assert_eq!(f["points"], serde_json::json!(["a", "b", "c"]));
    assert_eq!(f["priority"], 3);
    let cycle = f["cycle"].as_array().expect("cycle");
    let starts: Vec<u64> = cycle
        .iter()
        .map(|m| m["pause_start_ts"].as_u64().expect("start"))
        .collect();
    let ms = |m: u64| (T0_US + m * 1000) * 1000;
    assert_eq!(starts, [ms(60), ms(61), ms(62)]);
    // Together from c's first XOFF to a's last pause end (its last XOFF + 1.024 ms).
    assert_eq!(f["start_ts"], ms(62));
    assert_eq!(
        f["end_ts"],
        (T0_US + 60_000 + 2999 * 500) * 1000 + 1_024_000
    );
    assert!(cycle.iter().all(|m| m["last_data_ts"].is_null()));
    // The storm origin names no root.
    let o = &doc["pfc_origin"];
    assert_eq!(o["deadlock"], true);
    assert!(o["origin"].is_null() && o["origin_index"].is_null(), "{o}");
    assert_eq!(exit_code(&RING, &trace, "deadlock>0"), Some(3));
}

#[test]
fn a_pause_loop_while_data_flows_is_a_storm() {
    // Data keeps flowing through every port until the pauses end.
    let trace = ring(1_600_000);
    let doc = document(&RING, &trace, &STORM_WINDOW);
    assert!(findings(&doc, "deadlock").is_empty(), "{}", doc["lossless"]);
    let o = &doc["pfc_origin"];
    assert_eq!(o["deadlock"], false);
    assert_eq!(o["origin"]["iface"], "a");
    assert_eq!(exit_code(&RING, &trace, "deadlock>0"), Some(0));
}

/// The storm of the storm-origin rule's limits: flows cross if1 then if0 and if2 then if0;
/// if0 pauses first, if1 2 ms later, if2 4 ms later, every 200 us for 2 s (10,000 XOFFs per
/// port). Data stops before the storm. A tree, not a loop: a storm with if0 as origin, and
/// every port keeps its start.
#[test]
fn a_storm_spreading_down_a_tree_keeps_its_start_and_its_origin() {
    let mut t = Vec::new();
    for i in 0..100u64 {
        let (a, b) = (data(1, 0x31, i as u32, 2), data(2, 0x32, i as u32, 2));
        t.push((i * 200, 1, a.clone()));
        t.push((i * 200 + 20, 0, a));
        t.push((i * 200 + 100, 2, b.clone()));
        t.push((i * 200 + 120, 0, b));
    }
    let start = 100_000;
    for k in 0..10_000u64 {
        for port in 0..3u32 {
            t.push((
                start + port as u64 * 2000 + k * 200,
                port,
                xoff(port as u8 + 1),
            ));
        }
    }
    let names = ["if0", "if1", "if2"];
    let doc = document(&names, &t, &[]);
    assert!(findings(&doc, "deadlock").is_empty(), "{}", doc["lossless"]);
    let o = &doc["pfc_origin"];
    assert_eq!(o["origin"]["iface"], "if0", "{o}");
    assert_eq!(
        (o["reached"].as_u64(), o["hops"].as_u64()),
        (Some(2), Some(1))
    );
    let sources = o["sources"].as_array().expect("sources");
    let got: Vec<(&str, u64)> = sources
        .iter()
        .map(|s| {
            (
                s["source"]["iface"].as_str().expect("iface"),
                s["first_xoff_ts"].as_u64().expect("first"),
            )
        })
        .collect();
    let us = |u: u64| (T0_US + u) * 1000;
    assert_eq!(
        got,
        [
            ("if0", us(start)),
            ("if1", us(start + 2000)),
            ("if2", us(start + 4000))
        ]
    );
    // Each paused from its first XOFF to its last one's end (1999.8 ms + 1.024 ms), the last
    // one up to the end of the capture (its own last XOFF).
    let paused: Vec<f64> = sources
        .iter()
        .map(|s| s["episode_paused_ms"].as_f64().expect("paused"))
        .collect();
    for (ms, want) in paused.iter().zip([2000.824, 2000.824, 1999.8]) {
        assert!((ms - want).abs() < 1e-6, "{paused:?}");
    }
}
