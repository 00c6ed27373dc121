//! The observer never replaces a program it did not attach, and leaves nothing attached when it
//! is killed (XDP and TCX attach through BPF links, which the kernel removes with the process).

use std::{collections::HashSet, sync::Mutex, thread::sleep, time::Duration};

use aya::programs::{loaded_links, loaded_programs};
use integration_tests::{
    compare::{View, compare},
    fixtures, kernel_tests_enabled,
    netns::{Observer, VethNs},
};

/// The tests of this file count kernel-wide objects: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// BPF links (XDP, TCX) whose program is one of ours, kernel-wide, by link type.
fn our_links() -> Vec<String> {
    let ours: HashSet<u32> = loaded_programs()
        .flatten()
        .filter(|p| {
            p.name_as_str()
                .is_some_and(|n| n.starts_with("roce_observer"))
        })
        .map(|p| p.id())
        .collect();
    loaded_links()
        .flatten()
        .filter(|l| ours.contains(&l.program_id()))
        .map(|l| format!("{:?}", l.link_type()))
        .collect()
}

/// Our links once teardown has had up to 3 s: links go when the last file descriptor of the
/// dead process closes, which the kernel finishes asynchronously.
fn links_after_teardown(before: usize) -> Vec<String> {
    let mut left = our_links();
    for _ in 0..30 {
        if left.len() <= before {
            break;
        }
        sleep(Duration::from_millis(100));
        left = our_links();
    }
    left
}

#[test]
fn a_second_observer_is_refused_and_the_first_keeps_counting() {
    if !kernel_tests_enabled("a_second_observer_is_refused_and_the_first_keeps_counting") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = VethNs::new().expect("namespace");
    let ifaces = format!("{},{}", ns.a, ns.b);
    let prom = std::env::temp_dir().join(format!("{}.prom", ns.name));
    let prom_arg = prom.to_string_lossy().into_owned();
    let first = Observer::start(&ns, &["-i", &ifaces, "--json", "--prom-file", &prom_arg])
        .expect("first observer");
    let second = ns
        .exec(integration_tests::observer_bin())
        .args(["run", "--no-tui", "--duration", "1", "-i", &ns.b])
        .output()
        .expect("second observer runs");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success(),
        "the second observer must not attach"
    );
    assert!(
        stderr.contains("another XDP program is already attached")
            && stderr.contains("never replaces"),
        "unclear refusal: {stderr}"
    );
    let (name, pcap, expected) = fixtures()
        .into_iter()
        .find(|f| f.0 == "psn_gap")
        .expect("psn_gap fixture");
    ns.replay(&pcap).expect("replay");
    sleep(Duration::from_millis(300));
    let doc: serde_json::Value =
        serde_json::from_str(&first.stop().expect("first stops")).expect("JSON");
    let view = View {
        iface: Some(&ns.b),
        direction: "ingress",
        exact_rtt: false,
    };
    let diffs = compare(&expected, &doc, &view);
    assert!(diffs.is_empty(), "{name}: {}", diffs.join("\n"));
    // The metrics file carries the same counts.
    let metrics = std::fs::read_to_string(&prom).expect("metrics file written");
    let _ = std::fs::remove_file(&prom);
    let line = format!(
        "roce_flow_psn_gaps_total{{src=\"192.0.2.1\",dst=\"192.0.2.2\",qp=\"18\",iface=\"{}\",direction=\"ingress\"}} 1",
        ns.b
    );
    assert!(metrics.contains(&line), "{line} not in:\n{metrics}");
}

#[test]
fn nothing_stays_attached_after_sigkill_or_a_clean_exit() {
    if !kernel_tests_enabled("nothing_stays_attached_after_sigkill_or_a_clean_exit") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = VethNs::new().expect("namespace");
    let ifaces = format!("{},{}", ns.a, ns.b);
    let before = our_links().len();

    let killed = Observer::start(&ns, &["-i", &ifaces, "--no-tui"]).expect("observer");
    let running = our_links();
    // XDP on both interfaces and TC egress on both (TCX links on kernels >= 6.6).
    assert!(
        running.len() >= before + 2,
        "expected the observer's links while it runs: {running:?}"
    );
    // SAFETY: signalling the observer this test started, by its pid.
    unsafe { libc::kill(killed.pid() as i32, libc::SIGKILL) };
    killed.wait().expect("reaped");
    let left = links_after_teardown(before);
    assert_eq!(left.len(), before, "left attached after SIGKILL: {left:?}");

    let clean = Observer::start(&ns, &["-i", &ifaces, "--json"]).expect("observer again");
    clean.stop().expect("clean stop");
    let left = links_after_teardown(before);
    assert_eq!(
        left.len(),
        before,
        "left attached after a clean exit: {left:?}"
    );
    // No qdisc of ours stays either (TCX needs none; a netlink-path clsact is removed).
    for dev in [&ns.a, &ns.b] {
        let out = ns
            .exec("tc")
            .args(["qdisc", "show", "dev", dev])
            .output()
            .expect("tc runs");
        let qdiscs = String::from_utf8_lossy(&out.stdout);
        assert!(!qdiscs.contains("clsact"), "clsact left on {dev}: {qdiscs}");
    }
}
