//! Capture input handling end to end: pcapng, streams on stdin, and damaged or foreign input
//! (truncated files, other link types, garbage), which must give a clear error or a warning
//! with the results up to the damage, and never a panic.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use serde_json::Value;

mod common;
use common::pcapng;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

fn run(args: &[&str], stdin: Option<Vec<u8>>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_roce-observer"));
    cmd.arg("analyze").args(args);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn roce-observer");
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        // Dribble the stream in small pieces, as a live `tcpdump -w -` would.
        std::thread::spawn(move || {
            for chunk in data.chunks(1000) {
                if pipe.write_all(chunk).is_err() {
                    return;
                }
                let _ = pipe.flush();
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        });
    }
    let out = child.wait_with_output().expect("wait for roce-observer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    out
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// (ts_sec, ts_usec, data) of every record of a classic pcap.
fn pcap_records(bytes: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
    let u32le = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= bytes.len() {
        let caplen = u32le(bytes, off + 8) as usize;
        out.push((
            u32le(bytes, off),
            u32le(bytes, off + 4),
            bytes[off + 16..off + 16 + caplen].to_vec(),
        ));
        off += 16 + caplen;
    }
    out
}

fn pcap_header(linktype: u32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(0xa1b2_c3d4u32.to_le_bytes());
    h.extend(2u16.to_le_bytes());
    h.extend(4u16.to_le_bytes());
    h.extend(0i32.to_le_bytes());
    h.extend(0u32.to_le_bytes());
    h.extend(65535u32.to_le_bytes());
    h.extend(linktype.to_le_bytes());
    h
}

fn flows_without_place(doc: &Value) -> Vec<Value> {
    doc["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .map(|f| {
            let mut f = f.clone();
            if let Some(o) = f.as_object_mut() {
                o.remove("iface");
                o.remove("rate_bps");
            }
            f
        })
        .collect()
}

#[test]
fn pcapng_gives_the_same_flows_as_pcap() {
    let pcap = fixture("mixed_demo.pcap");
    let from_pcap = json(&run(&["--json", pcap.to_str().expect("utf-8 path")], None));
    let records = pcap_records(&std::fs::read(&pcap).expect("fixture"));
    let ng = pcapng(&[(1, "eth7")], &records, |_| 0);
    let dir = tempdir("pcapng");
    let path = dir.join("mixed.pcapng");
    std::fs::write(&path, ng).expect("write pcapng");
    let from_ng = json(&run(&["--json", path.to_str().expect("utf-8 path")], None));
    assert_eq!(from_ng["summary"]["capture"]["format"], "pcapng");
    assert_eq!(
        from_pcap["summary"]["total_packets"],
        from_ng["summary"]["total_packets"]
    );
    assert_eq!(
        flows_without_place(&from_pcap),
        flows_without_place(&from_ng)
    );
    assert!(
        from_ng["flows"]
            .as_array()
            .expect("flows")
            .iter()
            .all(|f| f["iface"] == "eth7")
    );
    assert_eq!(
        from_pcap["pfc"].as_array().map(Vec::len),
        from_ng["pfc"].as_array().map(Vec::len)
    );
}

#[test]
fn pcapng_skips_frames_on_interfaces_of_unsupported_link_types() {
    let records =
        pcap_records(&std::fs::read(fixture("rc_send_write_read.pcap")).expect("fixture"));
    let n = records.len() as u64;
    // Every third record on an 802.11 radiotap interface.
    let ng = pcapng(&[(1, "eth0"), (127, "wlan0")], &records, |i| {
        u32::from(i % 3 == 2)
    });
    let doc = json(&run(&["--json", "-"], Some(ng)));
    let skipped = doc["summary"]["capture"]["skipped_link_type"]
        .as_u64()
        .expect("count");
    assert_eq!(skipped, n / 3);
    assert_eq!(doc["summary"]["total_packets"].as_u64(), Some(n - skipped));
}

/// A LINUX_SLL2 interface of a pcapng (dumpcap -i any) is split into its interface indices,
/// named after it, next to an Ethernet interface of the same file.
#[test]
fn pcapng_sll2_interface_becomes_one_point_per_interface_index() {
    let records = pcap_records(&std::fs::read(fixture("sll2_forwarding.pcap")).expect("fixture"));
    let eth = pcap_records(&std::fs::read(fixture("psn_gap.pcap")).expect("fixture"));
    let n = records.len();
    let all: Vec<_> = records.into_iter().chain(eth).collect();
    let ng = pcapng(&[(276, "any"), (1, "eth0")], &all, |i| u32::from(i >= n));
    let doc = json(&run(&["--json", "-"], Some(ng)));
    assert_eq!(
        doc["summary"]["capture"]["link_types"],
        serde_json::json!(["LINUX_SLL2", "ETHERNET"])
    );
    let mut points: Vec<String> = doc["flows"]
        .as_array()
        .expect("flows")
        .iter()
        .map(|f| {
            format!(
                "{}/{}",
                f["iface"].as_str().unwrap_or("?"),
                f["direction"].as_str().unwrap_or("?")
            )
        })
        .collect();
    points.sort();
    points.dedup();
    assert_eq!(
        points,
        [
            "any:if3/egress",
            "any:if3/ingress",
            "any:if5/egress",
            "any:if5/ingress",
            "eth0/capture"
        ]
    );
    let lost: Vec<&Value> = doc["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter(|p| p["missing"].as_u64() > Some(0))
        .collect();
    assert_eq!(lost.len(), 1, "{}", doc["paths"]);
    assert_eq!(lost[0]["upstream"]["iface"], "any:if3");
    assert_eq!(lost[0]["downstream"]["iface"], "any:if5");
    assert_eq!(lost[0]["missing_psns"], serde_json::json!([4]));
}

#[test]
fn stdin_stream_matches_the_file() {
    let pcap = fixture("mixed_demo.pcap");
    let from_file = json(&run(&["--json", pcap.to_str().expect("utf-8 path")], None));
    let bytes = std::fs::read(&pcap).expect("fixture");
    let from_stdin = json(&run(&["--json", "-"], Some(bytes)));
    assert_eq!(from_file["flows"], from_stdin["flows"]);
    assert_eq!(from_file["pfc"], from_stdin["pfc"]);
    assert_eq!(from_file["summary"], from_stdin["summary"]);
}

#[test]
fn truncated_file_prints_results_up_to_the_damage() {
    let bytes = std::fs::read(fixture("mixed_demo.pcap")).expect("fixture");
    let records = pcap_records(&bytes);
    // Cut in the middle of record 100's data.
    let mut off = 24;
    for r in &records[..100] {
        off += 16 + r.2.len();
    }
    let cut = bytes[..off + 16 + records[100].2.len() / 2].to_vec();
    let out = run(&["--json", "-"], Some(cut));
    let doc = json(&out);
    assert_eq!(doc["summary"]["total_packets"], 100);
    let err = doc["summary"]["capture"]["error"]
        .as_str()
        .expect("damage reported");
    assert!(err.contains("after 100 frames"), "{err}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning"));
    // The table too.
    let table = run(&["-"], Some(bytes[..off + 20].to_vec()));
    assert!(table.status.success());
    assert!(String::from_utf8_lossy(&table.stdout).contains("frames 100"));
}

#[test]
fn corrupt_record_length_is_reported_not_fatal() {
    let bytes = std::fs::read(fixture("psn_gap.pcap")).expect("fixture");
    let mut bad = bytes.clone();
    // A record header claiming a 200 MB frame.
    bad.extend(0u32.to_le_bytes());
    bad.extend(0u32.to_le_bytes());
    bad.extend(200_000_000u32.to_le_bytes());
    bad.extend(200_000_000u32.to_le_bytes());
    bad.extend([0u8; 64]);
    let out = run(&["--json", "-"], Some(bad));
    let doc = json(&out);
    assert_eq!(doc["summary"]["total_packets"], 9);
    assert!(doc["summary"]["capture"]["error"].is_string());
}

#[test]
fn nothing_readable_is_an_error_that_says_what_to_do() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "empty"),
        (
            "garbage",
            b"GET / HTTP/1.1\r\nHost: example\r\n\r\n".to_vec(),
            "not a pcap or pcapng",
        ),
        ("short header", pcap_header(1)[..10].to_vec(), "truncated"),
        (
            "radiotap",
            pcap_header(127),
            "IEEE802_11_RADIOTAP is not supported",
        ),
        (
            "pcapng, only unsupported link types",
            pcapng(&[(127, "wlan0")], &[(1, 0, vec![0x45; 40])], |_| 0),
            "is not supported",
        ),
    ];
    for (what, input, needle) in cases {
        let out = run(&["--json", "-"], Some(input));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: should fail");
        assert!(stderr.contains(needle), "{what}: {stderr}");
    }
    let out = run(&["/nonexistent/capture.pcap"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open capture"));
}

#[test]
fn header_only_capture_is_an_empty_result() {
    for linktype in [1, 113, 276, 101, 228, 229] {
        let doc = json(&run(&["--json", "-"], Some(pcap_header(linktype))));
        assert_eq!(doc["summary"]["total_packets"], 0, "link type {linktype}");
        assert_eq!(doc["flows"], serde_json::json!([]));
    }
}

/// Records too short for their link header are counted malformed, one each, and leave the
/// flows of the others as they are.
#[test]
fn cut_link_headers_are_malformed_frames() {
    let good = pcap_records(&std::fs::read(fixture("sll_any.pcap")).expect("fixture"));
    for (linktype, header) in [(113u32, 16usize), (276, 20), (101, 1)] {
        let mut bytes = pcap_header(linktype);
        for cut in 0..header {
            let data = vec![0x45u8; cut];
            bytes.extend(1u32.to_le_bytes());
            bytes.extend(0u32.to_le_bytes());
            bytes.extend((data.len() as u32).to_le_bytes());
            bytes.extend((data.len() as u32).to_le_bytes());
            bytes.extend(&data);
        }
        let doc = json(&run(&["--json", "-"], Some(bytes)));
        assert_eq!(doc["summary"]["malformed"], header, "link type {linktype}");
        assert_eq!(doc["summary"]["total_packets"], header);
    }
    // sll_any's frames with cut ones in between: the same flows.
    let whole = json(&run(
        &["--json", fixture("sll_any.pcap").to_str().expect("utf-8")],
        None,
    ));
    let mut bytes = pcap_header(113);
    for (sec, usec, data) in &good {
        for (s, d) in [
            (*sec, data.clone()),
            (*sec, data[..data.len().min(9)].to_vec()),
        ] {
            bytes.extend(s.to_le_bytes());
            bytes.extend(usec.to_le_bytes());
            bytes.extend((d.len() as u32).to_le_bytes());
            bytes.extend((d.len() as u32).to_le_bytes());
            bytes.extend(&d);
        }
    }
    let mixed = json(&run(&["--json", "-"], Some(bytes)));
    assert_eq!(mixed["flows"], whole["flows"]);
    assert_eq!(
        mixed["summary"]["malformed"].as_u64(),
        whole["summary"]["malformed"]
            .as_u64()
            .map(|m| m + good.len() as u64)
    );
}

/// A fresh directory under the target dir (removed first if left over).
fn tempdir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

#[test]
fn table_fits_in_120_columns() {
    for name in [
        "mixed_demo",
        "rnr_nak",
        "ipv6",
        "pfc",
        "pause_8023x",
        "ecn_cnp",
    ] {
        let pcap = fixture(&format!("{name}.pcap"));
        let out = run(&[pcap.to_str().expect("utf-8 path")], None);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("SRC > DST"), "{name}: {text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 120, "{name}: too wide: {line}");
        }
    }
}

#[test]
fn interrupt_prints_what_was_read() {
    let bytes = std::fs::read(fixture("psn_gap.pcap")).expect("fixture");
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args(["analyze", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roce-observer");
    // Write the capture and keep the pipe open, as a running `tcpdump -w -` does.
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin.write_all(&bytes).expect("write capture");
    stdin.flush().expect("flush");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("wait for roce-observer");
    drop(stdin);
    let doc = json(&out);
    assert_eq!(doc["summary"]["total_packets"], 9);
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
}

#[test]
fn report_every_prints_interval_tables_and_logs_each_interval() {
    let dir = tempdir("report-every");
    let logs = dir.join("logs");
    let pcap = fixture("mixed_demo.pcap");
    let out = run(
        &[
            "--report-every",
            "0.2",
            "--log-dir",
            logs.to_str().expect("utf-8 path"),
            pcap.to_str().expect("utf-8 path"),
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Two interval reports (0.2 s, 0.4 s into a 0.48 s capture), then the final table.
    assert_eq!(text.matches("--- 0.200 s of capture").count(), 2, "{text}");
    assert_eq!(text.matches("SRC > DST").count(), 3);
    let lines: Vec<Value> = std::fs::read_to_string(logs.join("roce-observer.jsonl"))
        .expect("live log file written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines[0]["kind"], "file_start");
    assert!(lines.iter().all(|l| l["schema_version"] == 1));
    // One batch per report: the first full (all 10 flows), each ending with a summary.
    let summaries: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "summary").collect();
    assert_eq!(summaries.len(), 3);
    let full_flows = lines
        .iter()
        .filter(|l| l["kind"] == "flow" && l["full"] == true)
        .count();
    assert_eq!(full_flows, 10);
    // Per flow, the deltas add up to the final totals, which match the JSON document.
    let doc = json(&run(&["--json", pcap.to_str().expect("utf-8 path")], None));
    for flow in doc["flows"].as_array().expect("flows") {
        let same = |l: &&Value| {
            l["kind"] == "flow"
                && ["src_ip", "dst_ip", "dst_qp", "iface"]
                    .iter()
                    .all(|k| l[*k] == flow[*k])
        };
        let of_flow: Vec<&Value> = lines.iter().filter(same).collect();
        let sum: u64 = of_flow
            .iter()
            .map(|l| l["delta"]["packets"].as_u64().expect("delta.packets"))
            .sum();
        assert_eq!(Some(sum), flow["packets"].as_u64(), "{flow}");
    }
    assert_eq!(
        summaries[2]["total_packets"], doc["summary"]["total_packets"],
        "the last summary is the final one"
    );
    assert_eq!(summaries[2]["log_records_lost"], 0);
    assert_eq!(doc["summary"]["log_records_lost"], Value::Null);
}

#[test]
fn flow_log_is_replaced_by_log_dir_with_a_clear_error() {
    let dir = tempdir("flow-log");
    let pcap = fixture("psn_gap.pcap");
    let out = run(
        &[
            "--flow-log",
            dir.join("x.jsonl").to_str().expect("utf-8 path"),
            pcap.to_str().expect("utf-8 path"),
        ],
        None,
    );
    // A removed option is a command-line error: the service must not retry it.
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log-dir"), "{err}");
    // An unusable log directory is an error before anything is read.
    let file = dir.join("a-file");
    std::fs::write(&file, b"").expect("write");
    let out = run(
        &[
            "--log-dir",
            file.to_str().expect("utf-8 path"),
            pcap.to_str().expect("utf-8 path"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is a file, not a directory"), "{err}");
}
