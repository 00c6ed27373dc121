//! `roce-observer counters` on a sysfs tree laid out like the RDMA core's.

use std::{fs, path::PathBuf, process::Command};

fn tree(tag: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("roce-counters-{tag}-{}", std::process::id()));
    let port = root.join("rxe0/ports/1");
    fs::create_dir_all(port.join("hw_counters")).expect("mkdir");
    fs::write(port.join("hw_counters/out_of_seq_request"), "16\n").expect("write");
    fs::write(port.join("hw_counters/duplicate_request"), "7\n").expect("write");
    root
}

#[test]
fn json_totals_and_changes() {
    let root = tree("json");
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args([
            "counters",
            "--json",
            "--no-ethtool",
            "--duration",
            "0",
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
    assert_eq!(port["totals"]["rdma"]["out_of_seq_request"], 16);
    assert_eq!(port["changed"]["rdma"]["duplicate_request"], 0);
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
