//! Test harness for the kernel path: throwaway network namespaces and veth pairs (RAII guards
//! that clean up even when a test fails; unique names per test), the observer run as a real
//! process, fixture discovery, and the comparison of observer output with the fixtures'
//! expected JSON.

pub mod compare;
pub mod netns;
pub mod prometheus;

use std::path::{Path, PathBuf};

/// Why kernel tests are `#[ignore]`d by default. libtest then reports them as "ignored" when
/// they are not asked for (never as passed); `cargo xtask test` runs them as root with
/// `--include-ignored`, and by hand: `cargo test -p integration-tests -- --include-ignored`.
/// The same text is the `#[ignore]` reason of each kernel test (an attribute takes no constant).
pub const KERNEL_TEST: &str = "kernel test: needs root (BPF, network namespaces)";

/// Called first by every kernel test: a kernel test that was asked to run but cannot (not
/// root) fails here with what to do, instead of passing without having checked anything.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert!(
        euid == 0,
        "{KERNEL_TEST}: running as uid {euid}. Run as root, or leave out --include-ignored \
         so libtest reports this test as ignored"
    );
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub fn fixtures_dir() -> PathBuf {
    workspace_root().join("tests/fixtures")
}

/// Every fixture: (name, capture path, expected JSON).
pub fn fixtures() -> Vec<(String, PathBuf, serde_json::Value)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(fixtures_dir()) else {
        return out;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".expected.json"))
        else {
            continue;
        };
        // A fixture with several observation points is a pcapng (one interface each).
        let pcapng = path.with_file_name(format!("{name}.pcapng"));
        let pcap = if pcapng.exists() {
            pcapng
        } else {
            path.with_file_name(format!("{name}.pcap"))
        };
        let text = std::fs::read_to_string(&path).expect("read expected JSON");
        let expected = serde_json::from_str(&text).expect("expected JSON parses");
        out.push((name.to_string(), pcap, expected));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(
        !out.is_empty(),
        "no fixtures found in {}",
        fixtures_dir().display()
    );
    out
}

/// The fixtures the kernel programs are expected to read as their expected JSON says: all but
/// those marked `"kernel": false` (none today: the kernel programs unwrap mirrors too; the flag
/// stays for a capture only `analyze` can read).
pub fn kernel_fixtures() -> Vec<(String, PathBuf, serde_json::Value)> {
    fixtures()
        .into_iter()
        .filter(|f| f.2["kernel"] != serde_json::Value::Bool(false))
        .collect()
}

/// The `analyze` / `run` arguments a fixture's expected document holds for (`args`: a link
/// speed, a storm window), none for most.
pub fn fixture_args(expected: &serde_json::Value) -> Vec<String> {
    expected["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Every frame of a capture, in order.
pub use roce_observer_tools::read_frames;

/// The roce-observer binary under test.
pub fn observer_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ROCE_OBSERVER_BIN") {
        return PathBuf::from(p);
    }
    workspace_root().join("target/debug/roce-observer")
}

/// `roce-observer analyze --json EXTRA PCAP`, parsed; panics with analyze's stderr if it fails.
pub fn analyze_json(pcap: &Path, extra: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(observer_bin())
        .args(["analyze", "--json"])
        .args(extra)
        .arg(pcap)
        .output()
        .expect("roce-observer runs (built by cargo xtask test)");
    assert!(
        out.status.success(),
        "analyze {} failed: {}",
        pcap.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("analyze --json prints JSON")
}

/// Fill the kernel's event ring buffer until it loses an event: PFC frames through the XDP
/// program (one event each, one PFC entry, no flow), in batches, with nothing draining the ring
/// (it holds ~7,700 events). Returns the `ringbuf_full` count per direction (ingress, egress)
/// after it, so that a test can tell which later losses are its own.
pub fn fill_event_ring(src: &roce_observer::source::kernel::KernelSource) -> [u64; 2] {
    use roce_observer_common::Counter;
    let frame = roce_observer_common::frames::pfc_frame(0x42, 0x01, [0xffff, 0, 0, 0, 0, 0, 0, 0]);
    let full = |src: &roce_observer::source::kernel::KernelSource| {
        let c = src.read_counters().expect("counters");
        [
            c[0][Counter::RingbufFull as usize],
            c[1][Counter::RingbufFull as usize],
        ]
    };
    // 1 MiB of 136-byte records, rounded up; a bound so that a ring that never fills (a larger
    // EVENTS map) fails here instead of looping.
    for _ in 0..64 {
        for _ in 0..256 {
            src.test_run_xdp(&frame).expect("test run");
        }
        let lost = full(src);
        if lost[0] > 0 {
            return lost;
        }
    }
    panic!("the event ring buffer never filled after 16,384 PFC frames");
}

/// An IPv6 RoCEv2 frame 2001:db8::1 -> 2001:db8::2: Ethernet, IPv6 (next header UDP), UDP to
/// 4791, a BTH (RC SEND_ONLY to `qp`, `psn`), 16 bytes of payload and an ICRC placeholder.
pub fn ipv6_roce_frame(qp: u32, psn: u32) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x86, 0xdd];
    let udp_len: u16 = 8 + 12 + 16 + 4;
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    for last in [1u8, 2] {
        f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        f.extend_from_slice(&[0; 11]);
        f.push(last);
    }
    f.extend_from_slice(&0xc001u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0x04, 0, 0xff, 0xff]);
    f.extend_from_slice(&qp.to_be_bytes());
    f.extend_from_slice(&psn.to_be_bytes());
    f.extend_from_slice(&[0x5a; 16]);
    f.extend_from_slice(&[0; 4]);
    f
}
