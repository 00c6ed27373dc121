//! `analyze --since/--until` on a bundled capture: the frames analyzed are exactly those whose
//! capture time is in the half-open window, counted here by reading the pcap's record headers
//! directly (not through the program's reader).

use std::{path::PathBuf, process::Command};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/mixed_demo.pcap")
}

/// Every record's time, in microseconds (a classic little-endian microsecond pcap).
fn record_times_us() -> Vec<u64> {
    let bytes = std::fs::read(fixture()).expect("fixture");
    assert_eq!(bytes[..4], [0xd4, 0xc3, 0xb2, 0xa1], "a microsecond pcap");
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let mut times = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        times.push(u64::from(word(at)) * 1_000_000 + u64::from(word(at + 4)));
        at += 16 + word(at + 8) as usize;
    }
    times
}

/// Frames analyzed (summary.total_packets) and stderr, for these extra arguments.
fn analyzed(args: &[&str]) -> (Option<i32>, u64, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .arg("analyze")
        .arg(fixture())
        .arg("--json")
        .args(args)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let frames = serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|d| d["summary"]["total_packets"].as_u64())
        .unwrap_or(0);
    (out.status.code(), frames, err)
}

#[test]
fn the_window_keeps_exactly_the_frames_in_it() {
    let times = record_times_us();
    let start = times[0];
    let count = |keep: &dyn Fn(u64) -> bool| times.iter().filter(|t| keep(**t - start)).count();
    let all = times.len();
    assert_eq!(analyzed(&[]).1, all as u64);
    // (arguments, window in us from the first frame)
    for (args, from, to) in [
        (&["--since", "0.2"][..], 200_000, u64::MAX),
        (&["--until", "0.2"], 0, 200_000),
        (&["--since", "0.1", "--until", "0.3"], 100_000, 300_000),
        // The same window in absolute time: the first frame is at 1700000000 s
        // (2023-11-14T22:13:20Z), written here with an offset.
        (
            &[
                "--since",
                "2023-11-14T23:13:20.1+01:00",
                "--until",
                "2023-11-14T22:13:20.3Z",
            ],
            100_000,
            300_000,
        ),
        (&["--since", "5"], 5_000_000, u64::MAX),
    ] {
        let (code, frames, err) = analyzed(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        let want = count(&|t| (from..to).contains(&t));
        assert_eq!(frames, want as u64, "{args:?}");
        // What was left out is said, on stderr.
        let (before, after) = (count(&|t| t < from), count(&|t| t >= to));
        assert_eq!(before + want + after, all);
        assert!(
            err.contains(&format!(
                "{before} frames before the window and {after} from its end on left out"
            )),
            "{args:?}: {err}"
        );
    }
    // Adjacent windows split the capture: nothing counted twice, nothing lost.
    let (_, head, _) = analyzed(&["--until", "0.25"]);
    let (_, tail, _) = analyzed(&["--since", "0.25"]);
    assert_eq!(head + tail, all as u64);
    assert!(head > 0 && tail > 0, "the split falls inside the capture");
}

#[test]
fn bad_windows_are_command_line_errors() {
    for args in [
        &["--since", "0.3", "--until", "0.1"][..],
        &["--since", "0.3", "--until", "0.3"],
        &["--since", "yesterday"],
        &["--until", "2023-11-14T22:13:20"],
    ] {
        let (code, _, err) = analyzed(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("--since") || err.contains("--until"), "{err}");
    }
}
