//! `run --prom-file` on a small tmpfs that is full: the observer keeps running, counts the
//! failed writes (`prom_file_errors` in the JSON summary, `roce_observer_prom_file_errors_total`
//! in the file once it can be written), leaves no temporary file behind, says so once on stderr,
//! and writes the file again once space is free.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use integration_tests::{fixtures_dir, observer_bin, require_root};
use serde_json::Value;

/// A small tmpfs mounted on a fresh directory, unmounted and removed on drop (also when the
/// test fails).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let dir = std::env::temp_dir().join(format!("roce-promfull-{}", std::process::id()));
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

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
#[ignore = "needs root (mounts a tmpfs)"]
fn a_full_disk_fails_metrics_file_writes_but_not_the_observer() {
    require_root();
    let fs = Tmpfs::new("256k");
    let prom = fs.dir.join("roce.prom");
    let filler = fs.dir.join("filler");
    // A metrics file larger than what is left once the disk is full.
    let pcap = std::fs::read(fixtures_dir().join("mixed_demo.pcap")).expect("fixture");
    let mut child = Command::new(observer_bin())
        .args(["run", "--capture", "-", "--no-tui", "--json"])
        .args(["--interval", "0.2", "--prom-file"])
        .arg(&prom)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("roce-observer starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin.write_all(&pcap).expect("capture written");
    stdin.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        prom.exists(),
        "the metrics file is written while there is room"
    );
    fill(&filler);
    // Several intervals fail.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        names(&fs.dir),
        ["filler", "roce.prom"],
        "no temporary file is left behind"
    );
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "the observer still runs"
    );
    std::fs::remove_file(&filler).expect("free the space again");
    std::thread::sleep(Duration::from_millis(600));
    // The end of the capture ends the run.
    drop(stdin);
    let out = child.wait_with_output().expect("roce-observer runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("run --json output parses");
    let errors = doc["summary"]["prom_file_errors"]
        .as_u64()
        .expect("prom_file_errors in the summary");
    assert!(errors >= 2, "{errors} failed writes counted: {stderr}");
    let text = std::fs::read_to_string(&prom).expect("metrics file");
    let in_file: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("roce_observer_prom_file_errors_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no roce_observer_prom_file_errors_total in\n{text}"));
    assert_eq!(in_file, errors, "the file written last carries the count");
    assert_eq!(
        stderr.matches("cannot write the metrics file").count(),
        1,
        "the failure is said once: {stderr}"
    );
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains("written again"), "{stderr}");
    assert_eq!(names(&fs.dir), ["roce.prom"]);
    eprintln!("full disk: {errors} failed metrics file writes counted, the file written again");
}
