//! `run` refuses a busy metrics address or an unusable log directory with one clear line and
//! exit status 1, before it loads or attaches anything (the interface named here does not
//! exist, so a regression in that order shows up as a different error, never as an attach).

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args(["run", "-i", "rotnone0", "--no-tui"])
        .args(args)
        .output()
        .expect("roce-observer runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn busy_metrics_address_is_refused_before_anything_is_attached() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = taken.local_addr().expect("addr").to_string();
    let (code, err) = run(&["--metrics", &addr]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("already in use") && err.contains(&addr),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn unusable_log_directory_is_refused_before_anything_is_attached() {
    let file = std::env::temp_dir().join(format!("roce-run-errors-{}", std::process::id()));
    std::fs::write(&file, b"").expect("a plain file");
    let (code, err) = run(&["--log-dir", file.to_str().expect("utf-8")]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot use the log directory"), "{err}");
}

#[test]
fn bad_metrics_address_says_what_to_give() {
    let (code, err) = run(&["--metrics", "eth0"]);
    assert_eq!(code, Some(2), "a command-line error: {err}");
    assert!(err.contains("--metrics 9470"), "{err}");
}
