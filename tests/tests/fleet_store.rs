//! The fleet store on ClickHouse's own engine (chDB, in process): three observers along one
//! forwarding path write their log directories while a stream crosses it and a tc filter drops
//! chosen PSNs between the second and the third; the logs (rotated .jsonl.gz files and the
//! live files) are loaded with the shipped docs/clickhouse/schema.sql and ingest.sql, every
//! shipped query runs, the loss queries name the dropped PSNs between observers 2 and 3, and
//! the totals in the store, and the per-minute sums the whole-range queries read, equal each
//! observer's own JSON document.
//!
//! The three observers run on three hosts, each its own network namespace along a veth chain
//! (`VethNs::chain`): observer 1 at TC egress of host 1's sending end, observer 2 at XDP
//! ingress of host 2's receiving end (before host 2's tc drops the chosen PSNs and forwards the
//! rest), observer 3 at XDP ingress of host 3. Each runs `run -i` with its own `--log-dir` and
//! `--observer-id`.
//! Run by `cargo xtask fleet` (which installs chDB), not by `cargo xtask test`.

use std::{collections::BTreeMap, path::PathBuf, process::Command, time::Duration};

use integration_tests::{
    netns::{Chain, Observer, VethNs},
    require_root, workspace_root,
};
use serde_json::Value;

const PSNS: std::ops::Range<u32> = 0..400;
const DROPPED: [u32; 4] = [17, 100, 101, 250];

fn log_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("log directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned());
            n.is_some_and(|n| n.ends_with(".jsonl") || n.ends_with(".jsonl.gz"))
        })
        .collect();
    files.sort();
    files
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces) and chDB (cargo xtask fleet)"]
fn fleet_store_three_observers_lost_between_two_and_three() {
    require_root();
    let have_chdb = Command::new("python3")
        .args(["-c", "import chdb"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        have_chdb,
        "chDB is not installed: run `cargo xtask fleet` (it installs it with pip)"
    );
    let Chain { hosts, points } = VethNs::chain(&DROPPED).expect("three hosts in a row");
    let (dir, sent) = hosts[0]
        .psn_stream("fleet", PSNS)
        .expect("the frames to send");
    let ids = ["fleet-obs-1", "fleet-obs-2", "fleet-obs-3"];
    let mut observers = Vec::new();
    for ((id, host), dev) in ids.iter().zip(&hosts).zip(&points) {
        let logs = dir.join(id);
        let _ = std::fs::remove_dir_all(&logs);
        let logs = logs.to_string_lossy().into_owned();
        observers.push(
            Observer::start(
                host,
                &[
                    "-i",
                    dev,
                    "--json",
                    "--interval",
                    "0.3",
                    "--log-dir",
                    &logs,
                    "--observer-id",
                    id,
                    // Rotation by age every second: rotated .gz files are part of the load.
                    "--log-max-age",
                    "1",
                ],
            )
            .expect("observer attaches"),
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    hosts[0].replay(&sent).expect("tcpreplay");
    std::thread::sleep(Duration::from_millis(2500));
    let docs: Vec<Value> = observers
        .into_iter()
        .map(|o| serde_json::from_str(&o.stop().expect("observer stops")).expect("run --json"))
        .collect();

    let mut files = Vec::new();
    for id in &ids {
        let of = log_files(&dir.join(id));
        assert!(
            of.iter()
                .any(|p| p.to_string_lossy().ends_with(".jsonl.gz")),
            "{id}: no rotated .gz file among {of:?}"
        );
        files.extend(of);
    }
    let session = dir.join("chdb");
    let out = Command::new("python3")
        .arg(workspace_root().join("tests/fleet/chdb_load.py"))
        .arg(&session)
        .args(["2000-01-01 00:00:00", "2100-01-01 00:00:00"])
        .args(&files)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "loading into chDB: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).expect("loader prints JSON");
    let _ = std::fs::remove_dir_all(&dir);

    // Every shipped query ran.
    let queries = got["queries"].as_object().expect("queries");
    let shipped: Vec<String> = std::fs::read_dir(workspace_root().join("docs/clickhouse/queries"))
        .expect("queries dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    assert!(shipped.len() >= 7, "{shipped:?}");
    for name in &shipped {
        assert!(queries.contains_key(name), "{name} did not run");
    }

    // Between observers 2 and 3, exactly the dropped PSNs, named PSN by PSN from the lines'
    // lost runs and request spans; nowhere else.
    let between = queries["lost_between_observers.sql"]["rows"]
        .as_array()
        .expect("rows");
    let flow = |r: &Value| r["dst_qp"] == 0x12 && r["src_ip"] == "::ffff:192.0.2.1";
    let links: Vec<(&Value, &Value, &Value, &Value, &Value)> = between
        .iter()
        .filter(|r| flow(r))
        .map(|r| {
            (
                &r["upstream_host"],
                &r["downstream_host"],
                &r["psns_lost_between"],
                &r["psns"],
                &r["from_counts"],
            )
        })
        .collect();
    assert_eq!(
        links,
        [(
            &Value::from("fleet-obs-2"),
            &Value::from("fleet-obs-3"),
            &Value::from(DROPPED.len()),
            &Value::from(DROPPED.to_vec()),
            &Value::from(false),
        )],
        "{between:?}"
    );
    let top = &queries["top_qps_by_psns_lost.sql"]["rows"][0];
    assert!(flow(top), "{top}");
    assert_eq!(top["psns_lost"], DROPPED.len(), "{top}");
    assert_eq!(top["points"], 3, "{top}");
    assert!(
        top["counted_at"]
            .as_str()
            .is_some_and(|p| p.starts_with("fleet-obs-3 ")),
        "{top}"
    );

    // The store's totals are each observer's own: per point, the summed deltas and the last
    // totals equal the flows of its JSON document.
    let totals = got["point_totals"].as_array().expect("point totals");
    for (id, doc) in ids.iter().zip(&docs) {
        let flows = doc["flows"].as_array().expect("flows");
        assert!(!flows.is_empty(), "{id} saw the stream");
        for f in flows {
            let src = format!("::ffff:{}", f["src_ip"].as_str().expect("ip"));
            let row = totals
                .iter()
                .find(|r| {
                    r["host"] == *id
                        && r["src_ip"] == src
                        && r["dst_qp"] == f["dst_qp"]
                        && r["iface"] == f["iface"]
                        && r["direction"] == f["direction"]
                })
                .unwrap_or_else(|| panic!("{id}: flow {f} not in the store: {totals:?}"));
            for (col, field) in [
                ("sum_packets", "packets"),
                ("sum_bytes", "bytes"),
                ("sum_psn_missing", "psn_missing"),
                ("last_packets", "packets"),
            ] {
                assert_eq!(row[col], f[field], "{id} {col}: {row} vs {f}");
            }
        }
        let in_store = totals.iter().filter(|r| r["host"] == *id).count();
        assert_eq!(in_store, flows.len(), "{id}: flows in the store");
    }

    // The per-minute sums (roce.flow_minutes, filled at insert) that bytes_per_point.sql reads
    // hold every point's bytes: the same as the flow rows.
    let point = |r: &Value| {
        format!(
            "{} {} {}",
            r["host"].as_str().unwrap_or_default(),
            r["iface"].as_str().unwrap_or_default(),
            r["direction"].as_str().unwrap_or_default()
        )
    };
    let mut from_flows = BTreeMap::<String, u64>::new();
    for r in totals {
        *from_flows.entry(point(r)).or_default() += r["sum_bytes"].as_u64().expect("bytes");
    }
    let from_minutes: BTreeMap<String, u64> = queries["bytes_per_point.sql"]["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (point(r), r["bytes"].as_u64().expect("bytes")))
        .collect();
    assert_eq!(from_minutes, from_flows, "bytes per point");
    eprintln!(
        "fleet store: {} files, tables {}, load {:.2} s; {} PSNs lost between fleet-obs-2 and fleet-obs-3",
        got["files"],
        got["tables"],
        got["load_s"].as_f64().unwrap_or(0.0),
        DROPPED.len()
    );
}
