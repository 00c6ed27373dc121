//! `roce-observer counters` on a sysfs tree laid out like the RDMA core's.

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

fn tree(tag: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("roce-counters-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let port = root.join("rxe0/ports/1");
    fs::create_dir_all(port.join("hw_counters")).expect("mkdir");
    set_counter(&root, "out_of_seq_request", 16);
    set_counter(&root, "duplicate_request", 7);
    set_counter(&root, "rcvd_pkts", 1000);
    root
}

/// Write one counter the way sysfs shows it, atomically (a rename), so that a read by the
/// running command sees the old or the new value, never a half-written file.
fn set_counter(root: &Path, name: &str, value: u64) {
    let port = root.join("rxe0/ports/1");
    let tmp = port.join(format!("{name}.new"));
    fs::write(&tmp, format!("{value}\n")).expect("write");
    fs::rename(&tmp, port.join("hw_counters").join(name)).expect("rename");
}

#[test]
fn json_totals() {
    let root = tree("json");
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args([
            "counters",
            "--json",
            "--no-ethtool",
            "--duration",
            "0",
            // The old name of --rdma-sysfs, kept (hidden) for existing scripts.
            "--sysfs",
        ])
        .arg(&root)
        .output()
        .expect("runs");
    let _ = fs::remove_dir_all(&root);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let port = &doc["ports"][0];
    assert_eq!(port["totals"]["device"], "rxe0");
    assert_eq!(port["totals"]["port"], 1);
    assert_eq!(port["totals"]["rdma"]["out_of_seq_request"], 16);
    assert_eq!(port["totals"]["rdma"]["duplicate_request"], 7);
    assert_eq!(port["totals"]["rdma"]["rcvd_pkts"], 1000);
}

/// One interval report: the seconds it covers, and counter name -> (change, rate per second),
/// as printed.
fn parse_report(lines: &[String]) -> (f64, BTreeMap<String, (u64, f64)>) {
    // `13:05:42.123 UTC  rxe0 port 1  (last 0.200 s)`, then the column headers.
    let secs = lines[0]
        .rsplit_once("(last ")
        .and_then(|(_, t)| t.strip_suffix(" s)"))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no interval in the header: {}", lines[0]));
    let columns: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        columns,
        ["COUNTER", "CHANGE", "RATE", "MEANING"],
        "{}",
        lines[1]
    );
    let rows = lines
        .iter()
        .skip(2)
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next()?.to_string();
            let change = words.next()?.parse().ok()?;
            let rate = words.next()?.strip_suffix("/s")?.parse().ok()?;
            Some((name, (change, rate)))
        })
        .collect();
    (secs, rows)
}

/// The interval reports show what changed between two reads, and the rate over the interval.
/// The counters change once, while the command runs; the reports that follow must add up to
/// exactly that change (it may straddle two reads, so the reports are summed).
#[test]
fn interval_reports_show_changes_and_rates() {
    let root = tree("interval");
    let interval = 0.2;
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args(["counters", "--all", "--no-ethtool", "--interval"])
        .arg(interval.to_string())
        .arg("--rdma-sysfs")
        .arg(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    // Reports are blocks of lines ended by an empty line.
    let mut next_report = || {
        let block: Vec<String> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
        assert!(!block.is_empty(), "the command stopped reporting");
        assert!(
            block[0].contains("UTC  rxe0 port 1  (last "),
            "report header: {}",
            block[0]
        );
        parse_report(&block)
    };
    // The first report comes after two reads of the unchanged tree: nothing changed (the key
    // counters are listed even at zero; --all adds others only when they changed).
    let (_, quiet) = next_report();
    assert_eq!(quiet.get("out_of_seq_request"), Some(&(0, 0.0)));
    assert_eq!(quiet.get("duplicate_request"), Some(&(0, 0.0)));
    assert_eq!(
        quiet.get("rcvd_pkts"),
        None,
        "--all lists only changed counters"
    );

    set_counter(&root, "out_of_seq_request", 16 + 5);
    set_counter(&root, "duplicate_request", 7 + 3);
    set_counter(&root, "rcvd_pkts", 1000 + 40);
    let want = [
        ("out_of_seq_request", 5),
        ("duplicate_request", 3),
        ("rcvd_pkts", 40),
    ];
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    // Bounded by reports, not by time: the change shows within a few of them.
    for _ in 0..50 {
        let (secs, report) = next_report();
        for (name, _) in want {
            if let Some((change, rate)) = report.get(name) {
                *seen.entry(name).or_default() += change;
                // Printed with one decimal.
                // Over the time the header says (about --interval; printed to the ms).
                assert!((secs - interval).abs() < 0.1, "{secs} s");
                let expected = *change as f64 / secs;
                assert!(
                    (rate - expected).abs() < 0.05 + expected * 0.005,
                    "{name}: rate {rate}/s for {change} in {secs} s"
                );
            }
        }
        if want.iter().all(|(n, v)| seen.get(n) >= Some(v)) {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = fs::remove_dir_all(&root);
    let want: BTreeMap<&str, u64> = want.into_iter().collect();
    assert_eq!(seen, want, "changes reported over the intervals");
}

/// One read (`--duration 0`): totals under column headers, no rate column.
#[test]
fn one_read_prints_totals_under_headers() {
    let root = tree("totals");
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args([
            "counters",
            "--no-ethtool",
            "--duration",
            "0",
            "--rdma-sysfs",
        ])
        .arg(&root)
        .output()
        .expect("runs");
    let _ = fs::remove_dir_all(&root);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "rxe0 port 1  (totals since the driver loaded)");
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["COUNTER", "TOTAL", "MEANING"]
    );
    let row = lines
        .iter()
        .find(|l| l.trim_start().starts_with("out_of_seq_request"))
        .expect("a key counter");
    assert_eq!(row.split_whitespace().nth(1), Some("16"), "{row}");
    assert!(!text.contains("/s"), "totals have no rate:\n{text}");
}

#[test]
fn bad_intervals_are_command_line_errors() {
    for args in [
        &["--interval", "0"][..],
        &["--interval", "-1"],
        &["--interval=-1"],
        &["--duration=-5"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
            .arg("counters")
            .args(args)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("number of seconds"), "{args:?}: {err}");
    }
}

#[test]
fn a_host_without_rdma_gets_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args(["counters", "--sysfs", "/nonexistent/infiniband"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no RDMA devices"), "{err}");
}

/// `run --capture` on a host with RDMA devices: the JSON document carries the NIC counters
/// beside the wire view (`nic`), for the device chosen with --rdma-dev; `none` leaves them out
/// and an unknown device is refused.
#[test]
fn run_attaches_nic_counters_to_the_document() {
    let root = tree("run");
    let pcap = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/psn_gap.pcap");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_roce-observer"))
            .args(["run", "--json", "--capture"])
            .arg(&pcap)
            .arg("--rdma-sysfs")
            .arg(&root)
            .args(extra)
            .output()
            .expect("runs")
    };
    let out = run(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let port = &doc["nic"][0];
    assert_eq!(port["device"], "rxe0");
    assert_eq!(port["port"], 1);
    assert_eq!(port["rdma"]["out_of_seq_request"]["total"], 16);
    assert_eq!(port["rdma"]["duplicate_request"]["total"], 7);
    assert!(port["rdma"]["rcvd_pkts"]["per_s"].is_number());
    assert!(
        doc["flows"].as_array().is_some_and(|f| !f.is_empty()),
        "the wire view too"
    );
    let chosen = run(&["--rdma-dev", "rxe0"]);
    let doc: serde_json::Value = serde_json::from_slice(&chosen.stdout).expect("JSON");
    assert_eq!(doc["nic"][0]["device"], "rxe0");
    let off = run(&["--rdma-dev", "none"]);
    let doc: serde_json::Value = serde_json::from_slice(&off.stdout).expect("JSON");
    assert!(doc.get("nic").is_none(), "no section without devices");
    let missing = run(&["--rdma-dev", "mlx5_7"]);
    let _ = fs::remove_dir_all(&root);
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("mlx5_7") && stderr.contains("rxe0"),
        "{stderr}"
    );
}
