//! `run --log-dir` on a small tmpfs that fills up while traffic flows: the observer keeps
//! running, counts the log lines it could not write (metrics, JSON summary, the log's own
//! summary lines), and resumes writing by itself once space is free again. No line is torn,
//! and per flow the logged deltas still add up to the totals.

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use integration_tests::{
    fixtures_dir,
    netns::{Observer, VethNs},
    prometheus::{http_get, loopback_up},
    require_root,
};
use serde_json::Value;

/// A small tmpfs mounted on a fresh directory, unmounted and removed on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// `tag` tells apart the mounts of tests running at the same time.
    fn new(tag: &str, size: &str) -> Tmpfs {
        let dir = std::env::temp_dir().join(format!("roce-fulldisk-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("mount runs");
        assert!(ok.success(), "mount tmpfs on {}", dir.display());
        Tmpfs { dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Fill the file system with `path` until it refuses more.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).expect("filler");
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

fn metric(ns: &VethNs, name: &str) -> f64 {
    let (status, text) = http_get(ns, "127.0.0.1:9471", "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "the observer still serves metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_full_disk_loses_lines_but_not_the_observer() {
    require_root();
    let fs = Tmpfs::new("foreign", "256k");
    let logs = fs.dir.join("logs");
    let ns = VethNs::new().expect("namespace with a veth pair");
    loopback_up(&ns).expect("loopback");
    let observer = Observer::on_both_ends(
        &ns,
        &[
            "--metrics",
            "127.0.0.1:9471",
            "--log-dir",
            logs.to_str().expect("utf-8 path"),
        ],
    )
    .expect("observer attaches");
    ns.replay(&fixtures_dir().join("psn_gap.pcap"))
        .expect("tcpreplay");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(metric(&ns, "roce_observer_log_records_lost_total"), 0.0);

    let filler = fs.dir.join("filler");
    fill(&filler);
    ns.replay(&fixtures_dir().join("mixed_demo.pcap"))
        .expect("tcpreplay");
    std::thread::sleep(Duration::from_millis(1000));
    let lost_while_full = metric(&ns, "roce_observer_log_records_lost_total");
    assert!(
        lost_while_full > 0.0,
        "lines lost while the disk is full are counted"
    );

    std::fs::remove_file(&filler).expect("free the space again");
    std::thread::sleep(Duration::from_millis(1000));
    let out = observer.stop().expect("observer ran on and stops cleanly");
    let doc: Value = serde_json::from_str(&out).expect("run --json output parses");
    let lost = doc["summary"]["log_records_lost"]
        .as_u64()
        .expect("lost count in the summary");
    assert!(lost as f64 >= lost_while_full, "{lost} < {lost_while_full}");

    // Every line is whole; writing resumed (a summary after the loss reports it).
    let text = std::fs::read_to_string(logs.join("roce-observer.jsonl")).expect("live file");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("torn line {l:?}: {e}")))
        .collect();
    let resumed = lines
        .iter()
        .filter(|l| l["kind"] == "summary")
        .any(|l| l["log"]["records_lost"].as_u64().is_some_and(|n| n > 0));
    assert!(resumed, "no summary line was written after the loss");
    // Deltas were taken against the last batch written, so they still add up per flow.
    let mut packets: BTreeMap<String, u64> = BTreeMap::new();
    for l in lines.iter().filter(|l| l["kind"] == "flow") {
        let key = format!(
            "{} {} {} {}",
            l["src_ip"], l["dst_ip"], l["dst_qp"], l["iface"]
        );
        *packets.entry(key).or_default() += l["delta"]["packets"].as_u64().expect("delta");
    }
    let flows = doc["flows"].as_array().expect("flows");
    assert!(flows.len() > 2, "both replays produced flows");
    for f in flows {
        let key = format!(
            "{} {} {} {}",
            f["src_ip"], f["dst_ip"], f["dst_qp"], f["iface"]
        );
        assert_eq!(packets.get(&key).copied(), f["packets"].as_u64(), "{key}");
    }
    eprintln!(
        "full disk: {lost} log lines lost and counted, writing resumed, {} flows' deltas add up",
        flows.len()
    );
}

/// When the log's own files are what fills the disk, the live file is rotated and the oldest
/// files deleted until the batch fits, so writing goes on; without that, every later line is
/// lost. The writer is driven directly with snapshots of a fixture (only the mount needs root).
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_log_that_fills_its_own_disk_rotates_and_deletes_its_oldest_files() {
    use roce_observer::{
        engine::{Engine, EngineConfig},
        sink::logdir::{LIVE_NAME, LogDir, LogDirConfig},
    };
    require_root();
    let fs = Tmpfs::new("own", "256k");
    let dir = fs.dir.join("logs");
    let mut engine = Engine::new(EngineConfig::default());
    let capture = std::fs::File::open(fixtures_dir().join("mixed_demo.pcap")).expect("fixture");
    roce_observer::wire::capture::read_capture(
        capture,
        |_| {},
        |f| engine.ingest_frame(f.ts_ns, f.data, f.orig_len, f.iface),
    );
    let snap = engine.snapshot(0);
    // Limits far above the disk's size: only the disk can stop the live file.
    let mut log = LogDir::open(
        LogDirConfig {
            dir: dir.clone(),
            max_bytes: 64 << 20,
            max_files: 20,
            max_age_ns: 0,
            // A full batch every interval: the live file grows fast.
            full_every_ns: 1,
            observer_id: None,
        },
        0,
    )
    .expect("open the log directory");
    let intervals = 400u64;
    for i in 1..=intervals {
        log.write(&snap, i * 1_000_000_000);
    }
    log.finish();
    let health = log.health();
    let written = health.records_written;
    assert!(
        health.files_rotated >= 1 && health.files_deleted >= 1,
        "the full disk was cleared by rotating and deleting: {health:?}"
    );
    assert_eq!(
        health.records_lost, 0,
        "no line lost once the log made room: {health:?}"
    );
    // Writing went on to the end: the live file holds the last interval, whole lines only.
    let text = std::fs::read_to_string(dir.join(LIVE_NAME)).expect("live file");
    let last_ts = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("torn {l:?}: {e}")))
        .filter_map(|l| l["ts"].as_u64())
        .max();
    assert_eq!(last_ts, Some(intervals * 1_000_000_000));
    eprintln!(
        "own full disk: {written} lines written, {} rotations, {} files deleted, 0 lost",
        health.files_rotated, health.files_deleted
    );
}
