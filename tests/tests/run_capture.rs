//! `roce-observer run --capture FILE|-`: the live pipeline fed by a capture must report what
//! `analyze` reports (every fixture's expected document, lossless findings and storm origin
//! included, from a file and from a stdin stream),
//! end with the capture when there is no UI, refuse a stream that is not a capture, and, under
//! the terminal UI with the capture on stdin, read keys from the terminal and keep the final
//! state on screen marked "capture ended" until `q`.

use std::{
    io::{Read, Write},
    path::Path,
    process::{Command, Output, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use integration_tests::{
    compare::{View, compare, lossless_diffs},
    fixture_args, fixtures, fixtures_dir, observer_bin,
};
use serde_json::Value;

/// `run --capture -` with `input` written to its stdin (from a thread, as a pipe delivers it).
fn run_stdin(args: &[&str], input: Vec<u8>) -> Output {
    let mut child = Command::new(observer_bin())
        .args(["run", "--capture", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("roce-observer starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || {
        // A write error here means the observer stopped reading (checked by the callers).
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("roce-observer runs");
    writer.join().expect("writer thread");
    out
}

fn run_file(args: &[&str], pcap: &Path) -> Output {
    Command::new(observer_bin())
        .args(["run", "--capture"])
        .arg(pcap)
        .args(args)
        .output()
        .expect("roce-observer runs")
}

fn document(out: &Output, what: &str) -> Value {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: not JSON ({e})"))
}

#[test]
fn every_fixture_from_a_file_and_from_stdin_matches_its_expected_document() {
    let mut diffs = Vec::new();
    let mut checked = 0;
    for (name, pcap, expected) in fixtures() {
        let extra = fixture_args(&expected);
        let args: Vec<&str> = std::iter::once("--json")
            .chain(extra.iter().map(String::as_str))
            .collect();
        let from_file = document(&run_file(&args, &pcap), &name);
        let bytes = std::fs::read(&pcap).expect("read fixture");
        let from_stdin = document(&run_stdin(&args, bytes), &name);
        for (how, actual) in [("file", from_file), ("stdin", from_stdin)] {
            let view = View::for_fixture(&expected);
            for d in compare(&expected, &actual, &view)
                .into_iter()
                .chain(lossless_diffs(&expected, &actual))
            {
                diffs.push(format!("{name} ({how}): {d}"));
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} fixture runs");
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

/// Without a UI the command ends when the capture ends, with the periodic tables, the final
/// table, the log directory and the Prometheus file all written, and the metrics endpoint
/// served while it ran.
#[test]
fn no_tui_ends_with_the_capture_and_fills_every_output() {
    let dir =
        std::env::temp_dir().join(format!("roce-observer-run-capture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let logs = dir.join("logs");
    let prom = dir.join("metrics.prom");
    let pcap = fixtures_dir().join("mixed_demo.pcap");
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures_dir().join("mixed_demo.expected.json"))
            .expect("expected JSON"),
    )
    .expect("parses");
    let out = run_stdin(
        &[
            "--no-tui",
            "--log-dir",
            logs.to_str().expect("utf-8 path"),
            "--prom-file",
            prom.to_str().expect("utf-8 path"),
            "--metrics",
            "127.0.0.1:0",
        ],
        std::fs::read(&pcap).expect("read fixture"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("metrics at http://127.0.0.1:"),
        "the metrics endpoint is served: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("SRC > DST"), "a table is printed: {stdout}");
    // The log's flow lines (docs/log-schema.md): the last line of each flow is its final state,
    // and the deltas over all lines add up to it.
    let lines: Vec<Value> = std::fs::read_to_string(logs.join("roce-observer.jsonl"))
        .expect("log written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let mut last = std::collections::BTreeMap::new();
    let mut delta_packets = 0;
    for l in lines.iter().filter(|l| l["kind"] == "flow") {
        let id = ["src_ip", "dst_ip", "dst_qp", "iface", "direction"].map(|f| l[f].to_string());
        last.insert(id, l["packets"].as_u64().expect("packets"));
        delta_packets += l["delta"]["packets"].as_u64().expect("delta.packets");
    }
    let flows = expected["flows"].as_array().expect("expected flows");
    assert_eq!(last.len(), flows.len(), "{lines:?}");
    let packets: u64 = last.values().sum();
    let expected_packets: u64 = flows.iter().filter_map(|f| f["packets"].as_u64()).sum();
    assert_eq!(packets, expected_packets);
    assert_eq!(delta_packets, expected_packets);
    assert!(
        lines.iter().any(|l| l["kind"] == "summary"),
        "a summary per batch: {lines:?}"
    );
    let metrics = std::fs::read_to_string(&prom).expect("metrics written");
    let metric_packets: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("roce_flow_packets_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(metric_packets, expected_packets, "{metrics}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stream_that_is_not_a_capture_is_refused_with_exit_1() {
    let out = run_stdin(
        &["--json"],
        b"GET / HTTP/1.1\r\nHost: example\r\n\r\n".to_vec(),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nothing could be read from stdin")
            && stderr.contains("not a pcap or pcapng capture"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no report for a non-capture");
}

/// A capture without RoCE ends a `run --capture` outside the terminal UI (plain tables) with
/// the same advice on stderr as `analyze` gives, after the report; a capture with RoCE gets none.
#[test]
fn a_capture_without_roce_ends_with_the_advice_analyze_gives() {
    let pcap = fixtures_dir().join("non_roce.pcap");
    let run = run_file(&["--no-tui"], &pcap);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let analyze = Command::new(observer_bin())
        .arg("analyze")
        .arg(&pcap)
        .output()
        .expect("analyze runs");
    let advice = |out: &Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.contains("no RoCE flows"))
            .map(str::to_string)
            .collect()
    };
    let said = advice(&run);
    assert_eq!(said.len(), 1, "{}", String::from_utf8_lossy(&run.stderr));
    assert!(said[0].contains("none RoCEv2 on UDP port 4791") && said[0].contains("--roce-port"));
    assert_eq!(said, advice(&analyze), "the same advice as analyze");
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("SRC > DST"),
        "the table first"
    );
    let roce = run_file(&["--no-tui"], &fixtures_dir().join("mixed_demo.pcap"));
    assert!(
        advice(&roce).is_empty(),
        "{}",
        String::from_utf8_lossy(&roce.stderr)
    );
}

#[test]
fn capture_conflicts_with_interfaces() {
    let out = Command::new(observer_bin())
        .args(["run", "--capture", "-", "-i", "veth0"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

/// Output of a process, collected on a thread so the test can wait for a text with a deadline.
fn collect(mut from: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    rx
}

/// Wait (at most `limit`, a failure guard, not a measurement) until `seen` contains `needle`.
fn wait_for(rx: &mpsc::Receiver<Vec<u8>>, seen: &mut Vec<u8>, needle: &str, limit: Duration) {
    let end = Instant::now() + limit;
    while !String::from_utf8_lossy(seen).contains(needle) {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.extend_from_slice(&chunk),
            Err(_) => panic!(
                "never saw {needle:?}; output so far:\n{}",
                String::from_utf8_lossy(seen)
            ),
        }
    }
}

/// The UI on a pseudo-terminal (util-linux `script`), the capture piped into stdin: the UI
/// draws the final state marked "capture ended", stays until `q` typed on the terminal, then
/// restores the screen and prints the final table.
#[test]
fn tui_with_the_capture_on_stdin_reads_keys_from_the_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        panic!("util-linux `script` is needed for the pseudo-terminal test");
    }
    let pcap = fixtures_dir().join("mixed_demo.pcap");
    let inner = format!(
        "stty cols 120 rows 30; cat '{}' | '{}' run --capture -",
        pcap.display(),
        observer_bin().display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script starts");
    let mut keys = child.stdin.take().expect("stdin piped");
    let rx = collect(child.stdout.take().expect("stdout piped"));
    let mut seen = Vec::new();
    wait_for(&rx, &mut seen, "capture ended", Duration::from_secs(60));
    // (ratatui moves the cursor over blank cells, so words are checked one by one.)
    assert!(
        String::from_utf8_lossy(&seen).contains("stdin"),
        "the title names the stream"
    );
    // Still running: the final state stays until `q`.
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the UI stays open"
    );
    keys.write_all(b"q").expect("type q");
    keys.flush().expect("flush");
    wait_for(&rx, &mut seen, "SRC > DST", Duration::from_secs(60));
    let status = child.wait().expect("script ends");
    assert!(status.success(), "{status:?}");
}

/// `--capture -` with a terminal on stdin (the pipe forgotten): a clear error, not a UI and a
/// reader fighting over the keyboard.
#[test]
fn capture_from_a_terminal_stdin_is_refused() {
    let inner = format!("'{}' run --capture - --json", observer_bin().display());
    let out = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script runs");
    // A command-line error: exit 2, as every other (a unit never restarts on it).
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stdin is a terminal"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
