use std::{collections::BTreeSet, io::Read as _};

use serde_json::Value;

use super::*;
use crate::engine::{Engine, EngineConfig};

/// Engines fed with fixture frames: `frames(name)` returns (ts, data, orig_len, iface) of each.
fn frames(name: &str) -> Vec<(u64, Vec<u8>, u32, u32)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/{name}.pcap"));
    let file = File::open(path).expect("fixture");
    let mut out = Vec::new();
    crate::wire::capture::read_capture(
        file,
        |_| {},
        |f| out.push((f.ts_ns, f.data.to_vec(), f.orig_len, f.iface)),
    );
    out
}

fn feed(engine: &mut Engine, frames: &[(u64, Vec<u8>, u32, u32)]) {
    for (ts, data, len, iface) in frames {
        engine.ingest_frame(*ts, data, *len, *iface);
    }
}

fn cfg(dir: &Path) -> LogDirConfig {
    LogDirConfig {
        dir: dir.to_path_buf(),
        max_bytes: DEFAULT_MAX_BYTES,
        max_files: DEFAULT_MAX_FILES,
        max_age_ns: 0,
        full_every_ns: 0,
        observer_id: None,
    }
}

/// A log file's text (a rotated file decompressed).
fn text(path: &Path) -> String {
    let mut text = String::new();
    let file = File::open(path).expect("open log file");
    if path.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file)
            .read_to_string(&mut text)
            .expect("gunzip");
    } else {
        let mut file = file;
        file.read_to_string(&mut text).expect("read");
    }
    text
}

fn lines(path: &Path) -> Vec<Value> {
    text(path)
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is one JSON object"))
        .collect()
}

fn kinds(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|l| l["kind"].as_str().expect("kind"))
        .collect()
}

#[test]
fn first_batch_is_full_then_only_what_changed_with_deltas() {
    let dir = rotate::tests::tempdir("deltas");
    let all = frames("nak_go_back_n");
    let (first, rest) = all.split_at(10);
    let mut engine = Engine::new(EngineConfig::default());
    let mut log = LogDir::open(cfg(&dir), 1).expect("open");
    feed(&mut engine, first);
    log.write(&engine.snapshot(first[9].0), 100);
    // Nothing happens: only a summary line.
    log.write(&engine.snapshot(first[9].0), 200);
    feed(&mut engine, rest);
    let snap = engine.snapshot(rest[rest.len() - 1].0);
    log.write(&snap, 300);
    let got = lines(&dir.join(LIVE_NAME));
    assert_eq!(
        kinds(&got),
        [
            "file_start",
            "flow",
            "ecmp",
            "summary",
            "summary",
            "flow",
            "flow",
            "alert",
            "alert",
            "summary"
        ]
    );
    // The NAK and the go-back-N retransmissions are per-flow problems (alerts::flow_problems)
    // once the rest of the capture is fed: new alerts, written with their counts.
    let mut alerts: Vec<&str> = got[7..9]
        .iter()
        .map(|l| l["alert_kind"].as_str().expect("alert_kind"))
        .collect();
    alerts.sort();
    assert_eq!(alerts, ["nak", "retransmissions"]);
    for l in &got[7..9] {
        assert_eq!(l["delta_count"], l["count"], "{l}");
    }
    for l in &got {
        assert_eq!(l["schema_version"], LOG_SCHEMA_VERSION);
    }
    assert_eq!(got[1]["full"], true);
    assert_eq!(got[5]["full"], false);
    // The base is the last batch written, the one with only a summary.
    assert_eq!(got[5]["delta_since_ts"], 200);
    // Deltas add up to the totals of the last snapshot, per flow.
    for flow in &snap.flows {
        let of_flow: Vec<&Value> = got
            .iter()
            .filter(|l| l["kind"] == "flow" && l["dst_qp"] == flow.dst_qp)
            .collect();
        let sum: u64 = of_flow
            .iter()
            .map(|l| l["delta"]["packets"].as_u64().expect("u64"))
            .sum();
        assert_eq!(sum, flow.packets, "flow {}", flow.dst_qp);
        let last = of_flow.last().expect("a line for every flow");
        assert_eq!(last["packets"], flow.packets);
        assert_eq!(last["retransmits"], flow.retransmits);
    }
    assert_eq!(log.health().records_lost, 0);
    assert_eq!(log.health().records_written, 9);
    fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn rotates_by_size_compresses_and_keeps_at_most_max_files() {
    let dir = rotate::tests::tempdir("size");
    let mut engine = Engine::new(EngineConfig::default());
    // One flow: its full batch fits in a file, a few times.
    feed(&mut engine, &frames("psn_gap"));
    let snap = engine.snapshot(0);
    let mut log = LogDir::open(
        LogDirConfig {
            max_bytes: 16 << 10,
            max_files: 4,
            // A full batch every interval makes each batch large enough to rotate often.
            full_every_ns: 1,
            ..cfg(&dir)
        },
        1,
    )
    .expect("open");
    for i in 0..40 {
        log.write(&snap, 1_000_000_000 * (i + 1));
    }
    log.finish();
    let rotated = rotate::list_rotated(&dir).expect("list");
    assert!(log.health().files_rotated >= 10, "{:?}", log.health());
    assert!(rotated.len() <= 3, "{rotated:?}");
    assert!(log.health().files_deleted >= 1);
    for (path, _) in &rotated {
        assert!(
            path.to_string_lossy().ends_with(".jsonl.gz"),
            "{path:?} not compressed"
        );
        // Each file stands alone: it starts with file_start and a full batch.
        let got = lines(path);
        assert_eq!(kinds(&got)[..2], ["file_start", "flow"]);
        assert_eq!(got[1]["full"], true);
    }
    assert_eq!(log.health().records_lost, 0);
    fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn rotates_by_age_and_writes_full_batches_on_schedule() {
    let dir = rotate::tests::tempdir("age");
    let mut engine = Engine::new(EngineConfig::default());
    feed(&mut engine, &frames("psn_gap"));
    let snap = engine.snapshot(0);
    let s = 1_000_000_000;
    let mut log = LogDir::open(
        LogDirConfig {
            max_age_ns: 10 * s,
            full_every_ns: 4 * s,
            ..cfg(&dir)
        },
        0,
    )
    .expect("open");
    for t in 0..=12 {
        log.write(&snap, t * s);
    }
    log.finish();
    let rotated = rotate::list_rotated(&dir).expect("list");
    assert_eq!(rotated.len(), 1, "{rotated:?}");
    let old = lines(&rotated[0].0);
    // Full batches at 0, 4 and 8 s; the file opened at 0 s rotates at 10 s.
    let full_ts: BTreeSet<u64> = old
        .iter()
        .filter(|l| l["kind"] == "flow" && l["full"] == true)
        .map(|l| l["ts"].as_u64().expect("ts"))
        .collect();
    assert_eq!(full_ts, BTreeSet::from([0, 4 * s, 8 * s]));
    let live = lines(&dir.join(LIVE_NAME));
    assert_eq!(live[0]["kind"], "file_start");
    assert_eq!(
        (live[1]["kind"].as_str(), live[1]["ts"].as_u64()),
        (Some("flow"), Some(10 * s))
    );
    assert_eq!(live[1]["full"], true);
    fs::remove_dir_all(&dir).expect("cleanup");
}

/// The text of every file of the directory, oldest first (rotated files decompressed).
fn all_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut paths: Vec<PathBuf> = rotate::list_rotated(dir)
        .expect("list")
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    paths.push(dir.join(LIVE_NAME));
    paths
        .into_iter()
        .map(|p| {
            let t = text(&p);
            (p, t)
        })
        .collect()
}

#[test]
fn a_full_batch_larger_than_a_file_is_split_and_does_not_rotate_every_interval() {
    let dir = rotate::tests::tempdir("bigbatch");
    let all = frames("mixed_demo");
    // The capture as seen on four interfaces: four times the flows.
    let all: Vec<_> = (1..=4)
        .flat_map(|i| all.iter().map(move |(ts, d, l, _)| (*ts, d.clone(), *l, i)))
        .collect();
    let mut engine = Engine::new(EngineConfig::default());
    feed(&mut engine, &all);
    let max_bytes = 32 << 10;
    let full = records::build(
        &engine.snapshot(0),
        1,
        "h",
        true,
        &records::Baseline::default(),
        LogHealth::default(),
    );
    assert!(
        full.text.len() > max_bytes as usize,
        "the test needs a full batch of several files, got {} bytes",
        full.text.len()
    );
    let mut engine = Engine::new(EngineConfig::default());
    let mut log = LogDir::open(
        LogDirConfig {
            max_bytes,
            max_files: 100,
            ..cfg(&dir)
        },
        0,
    )
    .expect("open");
    // The whole capture first (a full batch of several files), then another capture one frame
    // per interval: small change batches.
    feed(&mut engine, &all);
    log.write(&engine.snapshot(0), 1_000_000_000);
    let more = frames("psn_gap");
    let mut intervals = 1;
    for (i, frame) in more.iter().cycle().take(80).enumerate() {
        feed(&mut engine, std::slice::from_ref(frame));
        log.write(&engine.snapshot(0), 1_000_000_000 * (i as u64 + 2));
        intervals += 1;
    }
    let snap = engine.snapshot(0);
    log.finish();
    let health = log.health();
    assert_eq!(health.records_lost, 0);
    let files = all_files(&dir);
    for (path, text) in &files {
        assert!(
            text.len() as u64 <= max_bytes,
            "{path:?} holds {} bytes, past --log-max-bytes {max_bytes}",
            text.len()
        );
    }
    // About one file per max_bytes written, not one per interval.
    let written: usize = files.iter().map(|(_, t)| t.len()).sum();
    let needed = written.div_ceil(max_bytes as usize) as u64;
    assert!(
        health.files_rotated <= needed * 3 / 2 + 1 && health.files_rotated < intervals / 2,
        "{} rotations for {written} bytes over {intervals} intervals",
        health.files_rotated
    );
    // Every line whole, and the deltas over all files add up to the totals.
    let lines: Vec<Value> = files
        .iter()
        .flat_map(|(_, t)| {
            t.lines()
                .map(|l| serde_json::from_str(l).expect("whole line"))
        })
        .collect();
    let written_lines = lines.iter().filter(|l| l["kind"] != "file_start").count();
    assert_eq!(written_lines as u64, health.records_written);
    for flow in &snap.flows {
        let sum: u64 = lines
            .iter()
            .filter(|l| {
                l["kind"] == "flow"
                    && l["dst_qp"] == flow.dst_qp
                    && l["src_ip"] == flow.src_ip.to_string()
                    && l["iface"] == flow.iface
                    && l["direction"] == flow.direction
            })
            .map(|l| l["delta"]["packets"].as_u64().expect("u64"))
            .sum();
        assert_eq!(sum, flow.packets, "flow {}", flow.dst_qp);
    }
    fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn every_line_names_its_observer() {
    let dir = rotate::tests::tempdir("host");
    let mut engine = Engine::new(EngineConfig::default());
    feed(&mut engine, &frames("mixed_demo"));
    let mut log = LogDir::open(
        LogDirConfig {
            observer_id: Some("mon-7".into()),
            ..cfg(&dir)
        },
        1,
    )
    .expect("open");
    log.write(&engine.snapshot(0), 2);
    feed(&mut engine, &frames("psn_gap"));
    log.write(&engine.snapshot(0), 3);
    let got = lines(&dir.join(LIVE_NAME));
    assert!(kinds(&got).len() > 10, "{:?}", kinds(&got));
    for l in &got {
        assert_eq!(l["host"], "mon-7", "{l}");
    }
    // Without --observer-id: the host name.
    let dir2 = rotate::tests::tempdir("hostname");
    let mut log = LogDir::open(cfg(&dir2), 1).expect("open");
    log.write(&engine.snapshot(0), 2);
    for l in &lines(&dir2.join(LIVE_NAME)) {
        assert_eq!(l["host"].as_str(), Some(hostname().as_str()), "{l}");
    }
    fs::remove_dir_all(&dir).expect("cleanup");
    fs::remove_dir_all(&dir2).expect("cleanup");
}

#[test]
fn removed_directory_is_recreated_and_nothing_is_lost_from_the_deltas() {
    let dir = rotate::tests::tempdir("removed");
    let all = frames("nak_go_back_n");
    let mut engine = Engine::new(EngineConfig::default());
    let mut log = LogDir::open(cfg(&dir), 0).expect("open");
    feed(&mut engine, &all[..5]);
    log.write(&engine.snapshot(0), 1);
    fs::remove_dir_all(&dir).expect("remove the log directory under the writer");
    feed(&mut engine, &all[5..]);
    let snap = engine.snapshot(0);
    log.write(&snap, 2);
    assert_eq!(log.health().records_lost, 0);
    let got = lines(&dir.join(LIVE_NAME));
    // A fresh file: it starts with a full batch whose deltas cover what the lost file held.
    assert_eq!(kinds(&got)[..2], ["file_start", "flow"]);
    assert_eq!(got[1]["full"], true);
    assert_eq!(got[1]["delta_since_ts"], 1);
    fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn unusable_directory_at_start_is_a_clear_error() {
    let dir = rotate::tests::tempdir("unusable");
    let file = dir.join("not-a-dir");
    fs::write(&file, b"").expect("write");
    let err = LogDir::open(cfg(&file), 0)
        .err()
        .expect("a file is not a directory");
    let msg = err.to_string();
    assert!(
        msg.contains("not-a-dir") && msg.contains("is a file, not a directory"),
        "{msg}"
    );
    assert!(matches!(err, LogDirError::NotADirectory { .. }), "{msg}");
    // Below a file the directory cannot be made: the OS error is said once, with the chain.
    let err = LogDir::open(cfg(&file.join("sub")), 0)
        .err()
        .expect("no directory below a file");
    let msg = format!("{:#}", anyhow::Error::new(err));
    assert_eq!(msg.matches("os error").count(), 1, "{msg}");
    assert!(msg.contains("--log-dir"), "{msg}");
    assert!(matches!(
        LogDir::open(
            LogDirConfig {
                max_files: 1,
                ..cfg(&dir)
            },
            0
        ),
        Err(LogDirError::TooFewFiles)
    ));
    fs::remove_dir_all(&dir).expect("cleanup");
}

/// A file outside the log directory that only root may read or write (what an attacker
/// points a link at), and its content.
struct Target {
    dir: PathBuf,
    path: PathBuf,
    text: &'static [u8],
}

impl Target {
    fn new(tag: &str, text: &'static [u8]) -> Target {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = rotate::tests::tempdir(tag);
        let path = dir.join("root-only");
        fs::write(&path, text).expect("write target");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        Target { dir, path, text }
    }

    /// The target was not written (same content) and its content reached no file in `dir`
    /// (plain or gzip).
    fn assert_untouched(&self, dir: &Path) {
        assert_eq!(fs::read(&self.path).expect("read target"), self.text);
        for entry in fs::read_dir(dir).expect("list") {
            let path = entry.expect("entry").path();
            let meta = fs::symlink_metadata(&path).expect("lstat");
            if !meta.file_type().is_file() {
                continue;
            }
            let mut bytes = fs::read(&path).expect("read");
            if path.extension().is_some_and(|e| e == "gz") {
                let mut plain = Vec::new();
                flate2::read::GzDecoder::new(&bytes[..])
                    .read_to_end(&mut plain)
                    .expect("gunzip");
                bytes = plain;
            }
            assert!(
                !bytes.windows(self.text.len()).any(|w| w == self.text),
                "{path:?} holds the target's content"
            );
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn is_link(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

#[test]
fn a_live_file_linked_to_another_file_is_moved_aside_unread_at_start_and_mid_run() {
    use std::os::unix::fs::symlink;
    let secret = Target::new("secret", b"root-only secret line\n");
    let dir = rotate::tests::tempdir("live-link");
    let live = dir.join(LIVE_NAME);
    // At start: the "stale live file" of an earlier run is a link to the secret.
    symlink(&secret.path, &live).expect("plant link");
    let mut engine = Engine::new(EngineConfig::default());
    feed(&mut engine, &frames("nak_go_back_n"));
    let mut log = LogDir::open(cfg(&dir), 1_000_000_000).expect("open");
    log.write(&engine.snapshot(0), 2_000_000_000);
    assert_eq!(log.health().files_refused, 1);
    let warnings = log.take_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&live.display().to_string())
            && warnings[0].contains("symbolic link")
            && warnings[0].contains("moved aside"),
        "{warnings:?}"
    );
    let aside = dir.join(format!("{LIVE_NAME}.refused-{}", utc_stamp(1_000_000_000)));
    assert!(
        is_link(&aside),
        "the link is kept, renamed, for the user to inspect"
    );
    assert!(
        fs::symlink_metadata(&live)
            .expect("live")
            .file_type()
            .is_file()
    );
    // Mid-run: the live file is replaced by a link.
    fs::remove_file(&live).expect("remove live");
    symlink(&secret.path, &live).expect("plant link");
    log.write(&engine.snapshot(0), 3_000_000_000);
    log.finish();
    assert_eq!(log.health().files_refused, 2);
    assert_eq!(log.take_warnings().len(), 1);
    assert!(
        fs::symlink_metadata(&live)
            .expect("live")
            .file_type()
            .is_file()
    );
    // The new live file starts over with a full batch, written to a file of ours.
    assert_eq!(kinds(&lines(&live))[..2], ["file_start", "flow"]);
    secret.assert_untouched(&dir);
    fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn links_at_predictable_temporary_names_are_never_written_through() {
    use std::os::unix::fs::symlink;
    let victim = Target::new("victim", b"a root-owned 0600 file\n");
    let dir = rotate::tests::tempdir("tmp-link");
    // A stale live file of ours, rotated at start to roce-observer-<stamp>.jsonl and then
    // compressed: links wait at the temporary names that used to be derived from that name.
    let ts = 1_796_094_245_678_000_000;
    fs::write(dir.join(LIVE_NAME), b"{\"kind\":\"file_start\"}\n").expect("stale live");
    let stamp = utc_stamp(ts);
    for name in [
        format!("roce-observer-{stamp}.jsonl.gz.tmp"),
        format!("roce-observer-{stamp}-1.jsonl.gz.tmp"),
        format!("roce-observer-{stamp}.jsonl.tmp"),
    ] {
        symlink(&victim.path, dir.join(name)).expect("plant link");
    }
    let mut log = LogDir::open(cfg(&dir), ts).expect("open");
    log.finish();
    victim.assert_untouched(&dir);
    // The stale file was still compressed, through a temporary file of its own.
    let rotated = rotate::list_rotated(&dir).expect("list");
    assert_eq!(rotated.len(), 1, "{rotated:?}");
    assert!(
        rotated[0]
            .0
            .ends_with(format!("roce-observer-{stamp}.jsonl.gz"))
    );
    assert_eq!(kinds(&lines(&rotated[0].0)), ["file_start"]);
    fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn rotated_names_that_are_links_or_other_users_files_are_never_read_nor_deleted() {
    use std::os::unix::fs::symlink;
    let secret = Target::new("secret-rot", b"root-only secret line\n");
    let dir = rotate::tests::tempdir("rot-link");
    let link = dir.join(format!("roce-observer-{}.jsonl", utc_stamp(0)));
    symlink(&secret.path, &link).expect("plant link");
    let foreign = dir.join(format!("roce-observer-{}.jsonl", utc_stamp(1_000_000_000)));
    let running_as_root = crate::sink::files::euid() == 0;
    if running_as_root {
        fs::write(&foreign, b"another user's file\n").expect("write");
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).expect("chown");
    }
    // One file kept: retention would delete every older rotated file if they were ours.
    let mut log = LogDir::open(
        LogDirConfig {
            max_files: 2,
            ..cfg(&dir)
        },
        2_000_000_000,
    )
    .expect("open");
    log.write(
        &Engine::new(EngineConfig::default()).snapshot(0),
        3_000_000_000,
    );
    log.finish();
    let expected = 1 + u64::from(running_as_root);
    assert_eq!(log.health().files_refused, expected);
    let warnings = log.take_warnings();
    assert_eq!(warnings.len() as u64, expected, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&link.display().to_string()))
    );
    assert!(is_link(&link));
    if running_as_root {
        assert_eq!(
            fs::read(&foreign).expect("foreign file kept"),
            b"another user's file\n"
        );
        assert!(warnings.iter().any(|w| w.contains("uid 65534")));
    }
    secret.assert_untouched(&dir);
    fs::remove_dir_all(&dir).expect("cleanup");
}

/// The fields each kind of line carries, as docs/log-schema.md lists them. Changes are additive
/// only: a field may be added here (and documented), never removed or renamed.
const PINNED: &[(&str, &[&str])] = &[
    (
        "file_start",
        &[
            "schema_version",
            "kind",
            "ts",
            "observer_version",
            "host",
            "max_bytes",
            "max_files",
        ],
    ),
    (
        "flow",
        &[
            "schema_version",
            "kind",
            "ts",
            "host",
            "full",
            "delta_since_ts",
            "delta",
            "req_psn_first",
            "req_psn_highest",
            "psn_lost_runs",
            "psn_lost_runs_truncated",
            "src_ip",
            "dst_ip",
            "dst_qp",
            "iface",
            "direction",
            "transport",
            "packets",
            "bytes",
            "opcodes",
            "other_transport",
            "psn_gaps",
            "psn_missing",
            "retransmits",
            "req_retransmits",
            "resp_retransmits",
            "acks",
            "naks",
            "cnp",
            "ecn_ce",
            "ecn_ect",
            "dscp",
            "pcp",
            "peer_qp",
            "udp_src_ports",
            "udp_src_port_overflow",
            "rtt_ns",
            "first_ts",
            "last_ts",
            "rate_bps",
        ],
    ),
    (
        "pfc",
        &[
            "schema_version",
            "kind",
            "ts",
            "host",
            "full",
            "delta_since_ts",
            "delta_pause_frames",
            "delta_xon_frames",
            "delta_pause_quanta",
            "iface",
            "direction",
            "src_mac",
            "priority",
            "pfc_kind",
            "pause_frames",
            "xon_frames",
            "pause_quanta",
            "pause_us",
            "paused_us",
            "paused_fraction",
            "storm",
            "storms",
            "first_ts",
            "last_ts",
        ],
    ),
    (
        "mirror",
        &[
            "schema_version",
            "kind",
            "ts",
            "host",
            "full",
            "delta_since_ts",
            "delta_frames",
            "delta_seq_lost",
            "iface",
            "direction",
            "encap",
            "outer_src",
            "outer_dst",
            "frames",
            "sequenced",
            "seq_lost",
            "seq_late",
            "seq_resyncs",
        ],
    ),
    (
        "alert",
        &[
            "schema_version",
            "kind",
            "ts",
            "host",
            "full",
            "delta_count",
            "alert_kind",
            "reason",
            "flow",
            "pfc",
            "first_ts",
            "last_ts",
            "count",
        ],
    ),
    (
        "ecmp",
        &[
            "schema_version",
            "kind",
            "ts",
            "host",
            "full",
            "measured",
            "modelled",
            "entropy",
        ],
    ),
    (
        "diagnosis",
        &[
            "schema_version",
            "kind",
            "ts",
            "host",
            "full",
            "steps",
            "paths",
            "pfc_origin",
            "lossless",
        ],
    ),
    (
        "summary",
        &[
            "schema_version",
            "kind",
            "ts",
            "host",
            "full",
            "total_packets",
            "roce_packets",
            "pfc_frames",
            "pause_8023x",
            "non_roce",
            "malformed",
            "ip_fragments",
            "unsupported",
            "map_full",
            "ringbuf_full",
            "pending_full",
            "tail_call_failed",
            "events_lost",
            "mirror_seq_lost",
            "flows",
            "pmtu",
            "pmtu_learned",
            "link_gbps",
            "roce_port",
            "vxlan_port",
            "ts_resolution_ns",
            "interval_start_ts",
            "interval_end_ts",
            "interval_s",
            "by_direction",
            "alerts_dropped",
            "capture_read",
            "capture",
            "latency",
            "log",
        ],
    ),
];

/// Fields of the nested `delta` and `log` objects.
const PINNED_NESTED: &[(&str, &[&str])] = &[
    (
        "delta",
        &[
            "packets",
            "bytes",
            "psn_gaps",
            "psn_missing",
            "retransmits",
            "acks",
            "naks",
            "cnp",
            "ecn_ce",
            "ecn_ect",
            "rtt_samples",
        ],
    ),
    (
        "log",
        &[
            "records_lost",
            "records_written",
            "files_rotated",
            "files_deleted",
            "files_refused",
        ],
    ),
];

#[test]
fn schema_is_pinned_and_documented() {
    let dir = rotate::tests::tempdir("schema");
    let mut engine = Engine::new(EngineConfig {
        rtt_alert_ns: Some(1),
        ..EngineConfig::default()
    });
    for name in ["mixed_demo", "pfc", "mirror_loss"] {
        feed(&mut engine, &frames(name));
    }
    let mut log = LogDir::open(cfg(&dir), 0).expect("open");
    log.write(&engine.snapshot(0), 1);
    let got = lines(&dir.join(LIVE_NAME));
    let doc =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/log-schema.md"))
            .expect("docs/log-schema.md");
    let mut seen = BTreeSet::new();
    for l in &got {
        let kind = l["kind"].as_str().expect("kind");
        seen.insert(kind);
        let (_, pinned) = PINNED
            .iter()
            .find(|(k, _)| *k == kind)
            .expect("a pinned kind");
        let keys: BTreeSet<&str> = l
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        for field in *pinned {
            assert!(
                keys.contains(field),
                "{kind} line lacks pinned field {field}: {keys:?}"
            );
        }
        for key in keys {
            assert!(
                doc.contains(&format!("`{key}`")),
                "field {key} of {kind} lines is not in docs/log-schema.md"
            );
        }
        for (name, fields) in PINNED_NESTED {
            if let Some(obj) = l.get(*name).and_then(Value::as_object) {
                for field in *fields {
                    assert!(obj.contains_key(*field), "{kind}.{name} lacks {field}");
                }
                for key in obj.keys() {
                    assert!(
                        doc.contains(&format!("`{name}.{key}`")),
                        "{kind}.{name}.{key} is not in docs/log-schema.md"
                    );
                }
            }
        }
    }
    assert_eq!(
        seen,
        BTreeSet::from([
            "file_start",
            "flow",
            "pfc",
            "mirror",
            "alert",
            "ecmp",
            "diagnosis",
            "summary"
        ])
    );
    fs::remove_dir_all(&dir).expect("cleanup");
}

/// One flow seen at two interfaces, PSN 5 lost between them: the causes go to the log in a
/// `diagnosis` line in the first (full) batch, not again while they stay the same, and again
/// when they change. Its fields are pinned and documented like the others.
#[test]
fn causes_are_logged_when_found_and_when_they_change() {
    use roce_observer_common::frames::RoceFrame;
    let dir = rotate::tests::tempdir("diagnosis");
    let mut engine = Engine::new(EngineConfig::default());
    engine.set_iface_name(1, "up");
    engine.set_iface_name(2, "down");
    let send = |e: &mut Engine, psn: u32, lost: bool| {
        let f = RoceFrame::new(0x0a, 0x12, psn).build();
        e.ingest_frame(u64::from(psn) * 1000, &f, f.len() as u32, 1);
        if !lost {
            e.ingest_frame(u64::from(psn) * 1000 + 10, &f, f.len() as u32, 2);
        }
    };
    for psn in 0..10 {
        send(&mut engine, psn, psn == 5);
    }
    let mut log = LogDir::open(cfg(&dir), 1).expect("open");
    log.write(&engine.snapshot(20_000), 100);
    log.write(&engine.snapshot(20_000), 200);
    send(&mut engine, 10, true);
    send(&mut engine, 11, false);
    log.write(&engine.snapshot(30_000), 300);
    let got = lines(&dir.join(LIVE_NAME));
    let diag: Vec<&Value> = got.iter().filter(|l| l["kind"] == "diagnosis").collect();
    let at: Vec<u64> = diag.iter().filter_map(|l| l["ts"].as_u64()).collect();
    assert_eq!(at, [100, 300], "{got:?}");
    let lost = |l: &Value| {
        l["paths"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["upstream"]["iface"] == "up"))
            .map(|p| p["missing_psns"].clone())
    };
    assert_eq!(lost(diag[0]), Some(serde_json::json!([5])));
    assert_eq!(lost(diag[1]), Some(serde_json::json!([5, 10])));
    assert_eq!(diag[0]["steps"], Value::Null);
    let (_, pinned) = PINNED
        .iter()
        .find(|(k, _)| *k == "diagnosis")
        .expect("pinned");
    let keys: Vec<&str> = diag[0]
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let doc =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/log-schema.md"))
            .expect("docs/log-schema.md");
    for key in keys {
        assert!(pinned.contains(&key), "unpinned field {key}");
        assert!(doc.contains(&format!("`{key}`")), "{key} undocumented");
    }
    fs::remove_dir_all(&dir).expect("cleanup");
}

/// Each flow line says which request PSNs its interval brought (from the one after the last
/// line's highest to the highest) and which runs it declared lost, bounded: past
/// `LostRuns::KEPT` runs in one interval the newest are listed and the line says it is
/// truncated. Holes are listed once declared lost (here by the reorder window, 64 PSNs), in the
/// interval that declared them.
#[test]
fn flow_lines_carry_the_interval_request_psns_and_the_runs_declared_lost() {
    use roce_observer_common::frames::RoceFrame;
    let dir = rotate::tests::tempdir("psn-interval");
    let mut engine = Engine::new(EngineConfig::default());
    let send = |e: &mut Engine, psns: std::ops::RangeInclusive<u32>, lost: &[u32]| {
        for psn in psns.filter(|p| !lost.contains(p)) {
            let f = RoceFrame::new(0x0a, 0x12, psn).build();
            e.ingest_frame(u64::from(psn) * 1_000_000, &f, f.len() as u32, 1);
        }
    };
    let mut log = LogDir::open(cfg(&dir), 1).expect("open");
    send(&mut engine, 0..=99, &[10, 20, 21]);
    log.write(&engine.snapshot(100_000_000), 100);
    send(&mut engine, 100..=199, &[150]);
    log.write(&engine.snapshot(200_000_000), 200);
    log.write(&engine.snapshot(200_000_000), 300);
    send(&mut engine, 200..=299, &[]);
    log.write(&engine.snapshot(300_000_000), 400);
    let isolated: Vec<u32> = (0..10).map(|k| 300 + 3 * k).collect();
    send(&mut engine, 300..=420, &isolated);
    log.write(&engine.snapshot(421_000_000), 500);
    let got = lines(&dir.join(LIVE_NAME));
    let flows: Vec<&Value> = got.iter().filter(|l| l["kind"] == "flow").collect();
    let seen: Vec<(u64, Value, Value, Value, Value, Value)> = flows
        .iter()
        .map(|l| {
            (
                l["ts"].as_u64().expect("ts"),
                l["req_psn_first"].clone(),
                l["req_psn_highest"].clone(),
                l["psn_lost_runs"].clone(),
                l["psn_lost_runs_truncated"].clone(),
                l["delta"]["psn_missing"].clone(),
            )
        })
        .collect();
    let run = |first: u32, count: u32| serde_json::json!({"first": first, "count": count});
    let runs =
        |r: &[(u32, u32)]| Value::from(r.iter().map(|(f, c)| run(*f, *c)).collect::<Vec<_>>());
    let newest: Vec<(u32, u32)> = isolated[2..].iter().map(|p| (*p, 1)).collect();
    assert_eq!(
        seen,
        [
            (
                100,
                0.into(),
                99.into(),
                runs(&[(10, 1), (20, 2)]),
                false.into(),
                3.into()
            ),
            (
                200,
                100.into(),
                199.into(),
                runs(&[]),
                false.into(),
                0.into()
            ),
            (
                400,
                200.into(),
                299.into(),
                runs(&[(150, 1)]),
                false.into(),
                1.into()
            ),
            (
                500,
                300.into(),
                420.into(),
                runs(&newest),
                true.into(),
                10.into()
            ),
        ],
        "{flows:?}"
    );
    log.finish();
    // A full batch lists a flow that brought nothing new with null PSNs and no runs.
    let mut full = LogDir::open(
        LogDirConfig {
            full_every_ns: 1,
            ..cfg(&dir)
        },
        600,
    )
    .expect("open");
    full.write(&engine.snapshot(421_000_000), 600);
    full.write(&engine.snapshot(421_000_000), 700);
    let got = lines(&dir.join(LIVE_NAME));
    let last = got
        .iter()
        .rev()
        .find(|l| l["kind"] == "flow")
        .expect("a flow line");
    assert_eq!(last["ts"], 700, "{last}");
    assert_eq!(last["full"], true, "{last}");
    assert_eq!(last["req_psn_first"], Value::Null, "{last}");
    assert_eq!(last["psn_lost_runs"], serde_json::json!([]), "{last}");
    fs::remove_dir_all(&dir).expect("cleanup");
}
