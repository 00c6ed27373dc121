//! `run` refuses a busy metrics address or an unusable log directory with one clear line and
//! exit status 1, before it loads or attaches anything (the interface named here does not
//! exist, so a regression in that order shows up as a different error, never as an attach);
//! bad values exit 2.

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["run", "-i", "rotnone0", "--no-tui"];
    all.extend_from_slice(args);
    status(&all)
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
    assert!(err.contains("is a file, not a directory"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn bad_metrics_address_says_what_to_give() {
    let (code, err) = run(&["--metrics", "eth0"]);
    assert_eq!(code, Some(2), "a command-line error: {err}");
    assert!(err.contains("--metrics 9470"), "{err}");
}

/// Status and stderr of the binary with these arguments (nothing is attached: every case is
/// refused before any source starts).
fn status(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args(args)
        .output()
        .expect("roce-observer runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every bad value is a command-line error (status 2, which the systemd unit does not
/// restart), named in the message, the same however the value is written.
#[test]
fn bad_values_exit_2_with_the_option_named() {
    let capture = "../tests/fixtures/psn_gap.pcap";
    for (option, value) in [
        ("--interval", "0"),
        ("--interval", "-1"),
        ("--link-speed", "0"),
        ("--storm-threshold", "150"),
        ("--duration", "-5"),
        ("--roce-port", "0"),
        ("--max-flows", "0"),
    ] {
        let spaced = status(&["run", "--capture", capture, "--no-tui", option, value]);
        let joined = status(&[
            "run",
            "--capture",
            capture,
            "--no-tui",
            &format!("{option}={value}"),
        ]);
        assert_eq!(spaced.0, Some(2), "{option} {value}: {}", spaced.1);
        assert!(spaced.1.contains(option), "{option} {value}: {}", spaced.1);
        assert_eq!(spaced, joined, "{option} {value} and {option}={value}");
    }
    for args in [
        &["analyze", capture, "--report-every", "0"][..],
        &["analyze", capture, "--report-every", "-1"],
        &["analyze", capture, "--link-speed", "0"],
        &["analyze", capture, "--storm-threshold", "150"],
        &["analyze", capture, "--roce-port", "0"],
        &["counters", "--interval", "0"],
        &["help", "nonsense"],
    ] {
        let (code, err) = status(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
    }
}

#[test]
fn run_without_a_source_names_both_sources() {
    let (code, err) = status(&["run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--iface") && err.contains("--capture"),
        "{err}"
    );
}

#[test]
fn help_help_and_exit_statuses_in_help() {
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args(["help", "--help"])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_roce-observer"))
        .args(["help", "run"])
        .output()
        .expect("runs");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for heading in [
        "Source:",
        "Output:",
        "Engine:",
        "Kernel:",
        "Examples:",
        "Exit status:",
    ] {
        assert!(help.contains(heading), "{heading}:\n{help}");
    }
    // --color is an option of run only: the other commands have nothing to colour.
    assert!(help.contains("--color"));
    let (code, err) = status(&["analyze", "x.pcap", "--color", "never"]);
    assert_eq!(code, Some(2), "{err}");
}

/// The interface is checked before the privilege: run as an unprivileged user (when this test
/// runs as root, through setpriv), a misspelt interface is what the message says.
#[test]
fn a_missing_interface_is_said_before_a_missing_privilege() {
    let bin = env!("CARGO_BIN_EXE_roce-observer");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let out = if root {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ])
            .args([bin, "run", "-i", "rotnone0"])
            .output()
    } else {
        Command::new(bin).args(["run", "-i", "rotnone0"]).output()
    };
    let Ok(out) = out else {
        panic!("setpriv (util-linux) is needed to run this test as root");
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no interface named `rotnone0`"), "{err}");
    assert!(!err.contains("needs root"), "{err}");
}
