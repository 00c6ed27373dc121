//! The observer never replaces a program it did not attach, and leaves nothing attached when it
//! exits or is killed. What it holds is read from the process itself (/proc/PID/fdinfo of its
//! BPF link descriptors), so other BPF users on the machine cannot disturb the counts. The
//! exact attachments depend on the kernel, as the observer decides (source/kernel.rs): XDP
//! through a BPF link (kernels >= 5.9, which have XDP links); TC egress through a TCX link on kernels >= 6.6, else through
//! a netlink filter on a clsact qdisc the observer adds and removes.

use std::{collections::BTreeSet, thread::sleep, time::Duration};

use aya::{
    programs::{loaded_links, loaded_programs},
    util::KernelVersion,
};
use integration_tests::{
    compare::{View, compare},
    fixtures,
    netns::{Observer, VethNs},
    require_root,
};

/// A BPF link a process holds open, from /proc/PID/fdinfo/FD.
#[derive(Debug)]
struct HeldLink {
    /// "xdp", "tcx", ...
    kind: String,
    /// "egress"/"ingress" for TCX links, empty for others.
    attach: String,
    ifindex: u32,
    link_id: u32,
    prog_id: u32,
}

/// The BPF links held by process `pid` (fds whose fdinfo names a link).
fn links_held_by(pid: u32) -> Vec<HeldLink> {
    let dir = format!("/proc/{pid}/fdinfo");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    let mut links = Vec::new();
    for entry in entries.flatten() {
        // A descriptor closed since the listing is simply not one of ours any more.
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let number = |name: &str| field(name).and_then(|v| v.parse().ok()).unwrap_or(0);
        let Some(kind) = field("link_type") else {
            continue;
        };
        // TCX: "attach_type:\t47 (egress)".
        let attach = field("attach_type")
            .and_then(|v| v.split_once('('))
            .map_or("", |(_, rest)| rest.trim_end_matches(')'));
        links.push(HeldLink {
            kind: kind.to_string(),
            attach: attach.to_string(),
            ifindex: number("ifindex"),
            link_id: number("link_id"),
            prog_id: number("prog_id"),
        });
    }
    links
}

fn has_clsact(ns: &VethNs, dev: &str) -> bool {
    let out = ns
        .exec("tc")
        .args(["qdisc", "show", "dev", dev])
        .output()
        .expect("tc runs");
    assert!(out.status.success(), "tc qdisc show dev {dev} failed");
    String::from_utf8_lossy(&out.stdout).contains("clsact")
}

/// The kernel path the observer takes for TC egress (the same test as source/kernel.rs).
fn tcx_kernel() -> bool {
    KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0))
}

/// Start an observer on both ends of `ns`, check that it holds exactly the attachments of this
/// kernel's path, and return it with the link and program ids it holds.
fn start_and_check(ns: &VethNs, extra: &[&str]) -> (Observer, BTreeSet<u32>, BTreeSet<u32>) {
    for dev in [&ns.a, &ns.b] {
        assert!(
            !has_clsact(ns, dev),
            "a fresh veth {dev} has a clsact qdisc"
        );
    }
    let ifaces = format!("{},{}", ns.a, ns.b);
    let mut args = vec!["-i", ifaces.as_str()];
    args.extend_from_slice(extra);
    let observer = Observer::start(ns, &args).expect("observer attaches");
    let held = links_held_by(observer.pid());
    let mut got: Vec<(String, String, u32)> = held
        .iter()
        .map(|l| (l.kind.clone(), l.attach.clone(), l.ifindex))
        .collect();
    got.sort();
    let (a, b) = (
        ns.ifindex(&ns.a).expect("ifindex"),
        ns.ifindex(&ns.b).expect("ifindex"),
    );
    let mut want = vec![
        ("xdp".to_string(), String::new(), a),
        ("xdp".to_string(), String::new(), b),
    ];
    if tcx_kernel() {
        want.push(("tcx".to_string(), "egress".to_string(), a));
        want.push(("tcx".to_string(), "egress".to_string(), b));
    }
    want.sort();
    assert_eq!(got, want, "links held by the observer ({held:?})");
    for dev in [&ns.a, &ns.b] {
        // TCX needs no qdisc; the netlink path needs the clsact the observer adds.
        assert_eq!(
            has_clsact(ns, dev),
            !tcx_kernel(),
            "clsact qdisc on {dev} while the observer runs"
        );
    }
    let links = held.iter().map(|l| l.link_id).collect();
    let progs = held.iter().map(|l| l.prog_id).collect();
    (observer, links, progs)
}

/// Link and program ids among `links`/`progs` still loaded after up to 3 s: the kernel releases
/// them asynchronously once the last descriptor of the dead process closes.
fn still_loaded(links: &BTreeSet<u32>, progs: &BTreeSet<u32>) -> (Vec<u32>, Vec<u32>) {
    let mut left = (Vec::new(), Vec::new());
    for _ in 0..30 {
        left = (
            loaded_links()
                .flatten()
                .map(|l| l.id())
                .filter(|id| links.contains(id))
                .collect(),
            loaded_programs()
                .flatten()
                .map(|p| p.id())
                .filter(|id| progs.contains(id))
                .collect(),
        );
        if left.0.is_empty() && left.1.is_empty() {
            break;
        }
        sleep(Duration::from_millis(100));
    }
    left
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_second_observer_is_refused_and_the_first_keeps_counting() {
    require_root();
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
    // The metrics file carries the same counts (psn_gap: its late PSN 103 is reordered).
    let metrics = std::fs::read_to_string(&prom).expect("metrics file written");
    let _ = std::fs::remove_file(&prom);
    let line = format!(
        "roce_flow_reordered_total{{src=\"192.0.2.1\",dst=\"192.0.2.2\",qp=\"18\",iface=\"{}\",direction=\"ingress\"}} 1",
        ns.b
    );
    assert!(metrics.contains(&line), "{line} not in:\n{metrics}");
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn nothing_stays_attached_after_sigkill_or_a_clean_exit() {
    require_root();
    // SIGKILL: the kernel closes the process's descriptors, which removes its links (XDP,
    // TCX) and then its programs. A netlink TC filter (kernels < 6.6) outlives SIGKILL, as
    // docs/usage.md says: on those kernels only the links are checked here.
    let ns = VethNs::new().expect("namespace");
    let (killed, links, progs) = start_and_check(&ns, &["--no-tui"]);
    // SAFETY: signalling the observer this test started, by its pid.
    unsafe { libc::kill(killed.pid() as i32, libc::SIGKILL) };
    killed.wait().expect("reaped");
    let (links_left, progs_left) = still_loaded(&links, &progs);
    assert!(
        links_left.is_empty(),
        "links left after SIGKILL: {links_left:?}"
    );
    if tcx_kernel() {
        assert!(
            progs_left.is_empty(),
            "programs left loaded after SIGKILL: {progs_left:?}"
        );
        for dev in [&ns.a, &ns.b] {
            assert!(!has_clsact(&ns, dev), "clsact on {dev} after SIGKILL");
        }
    }
    drop(ns);

    // A clean exit (SIGINT) removes everything, on every kernel path. A fresh pair: after
    // SIGKILL on a netlink-TC kernel the old one still carries that run's filter.
    let ns = VethNs::new().expect("namespace");
    let (clean, links, progs) = start_and_check(&ns, &["--json"]);
    clean.stop().expect("clean stop");
    let (links_left, progs_left) = still_loaded(&links, &progs);
    assert!(
        links_left.is_empty() && progs_left.is_empty(),
        "left after a clean exit: links {links_left:?}, programs {progs_left:?}"
    );
    for dev in [&ns.a, &ns.b] {
        assert!(
            !has_clsact(&ns, dev),
            "clsact qdisc left on {dev} after a clean exit"
        );
    }
}
