//! Where was it lost, on real interfaces: frames sent into a veth pair (a1 -> b1) are forwarded
//! by a tc ingress action on b1 to a second pair (a2 -> b2), and a tc u32 filter on b1's
//! ingress takes four chosen PSNs out of the path on the way (redirected into a third pair that
//! leads nowhere: this kernel has `mirred` but not the `gact` drop action), after the capture
//! point (packet taps on b1 see a frame before tc ingress runs). `dumpcap` captures b1 and b2 into one pcapng (two interfaces), and
//! `analyze` must name exactly the dropped PSNs for the pair b1 -> b2 and nothing the other way.
//! At the same time `run -i` on the sending end and on b2 (the kernel path: path events and
//! flow records, no per-packet PSNs) sees the flow at TC egress of the sending end, before the
//! drop, and at XDP ingress of b2, after it: its `paths` must name exactly the same PSNs.

use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use integration_tests::{
    netns::{Forwarding, Observer, VethNs},
    observer_bin, require_root,
};

/// PSNs of the flow, and the ones dropped between b1 and b2.
const PSNS: std::ops::Range<u32> = 0..300;
const DROPPED: [u32; 4] = [17, 100, 101, 250];

#[test]
#[ignore = "kernel test: needs root (network namespaces, tc)"]
fn a_drop_between_two_capture_points_names_the_dropped_psns() {
    require_root();
    let ns = VethNs::new().expect("namespace with a veth pair");
    let b1 = &ns.b;
    let Forwarding { b2, .. } = ns.forward_dropping(&DROPPED).expect("forwarding path");

    let (dir, sent) = ns.psn_stream("pathloss", PSNS).expect("the frames to send");
    let captured = dir.join("b1-b2.pcapng");

    let mut dumpcap = ns
        .exec("dumpcap")
        .args(["-i", b1, "-i", &b2, "-w"])
        .arg(&captured)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dumpcap starts (install wireshark-common / dumpcap)");
    // Ready when it says "Capturing on ...".
    let stderr = dumpcap.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut said = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.contains("Capturing on") => break,
            Ok(line) => said.push(line),
            Err(_) => {}
        }
        if Instant::now() > deadline {
            let _ = dumpcap.kill();
            panic!("dumpcap did not start capturing: {said:?}");
        }
    }
    let a1 = &ns.a;
    let observer =
        Observer::start(&ns, &["-i", &format!("{a1},{b2}"), "--json"]).expect("observer attaches");
    let replay = ns.replay(&sent);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling the dumpcap this test started, by its pid (a clean stop flushes it).
    unsafe { libc::kill(dumpcap.id() as i32, libc::SIGINT) };
    let status = dumpcap.wait().expect("dumpcap ends");
    replay.expect("tcpreplay");
    assert!(status.success(), "dumpcap: {status}");
    let live: serde_json::Value =
        serde_json::from_str(&observer.stop().expect("observer stops")).expect("run --json");

    let out = Command::new(observer_bin())
        .args(["analyze", "--json"])
        .arg(&captured)
        .output()
        .expect("analyze runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let paths = doc["paths"].as_array().expect("paths");
    let pair = |up: &str, down: &str| {
        paths
            .iter()
            .find(|p| p["upstream"]["iface"] == up && p["downstream"]["iface"] == down)
            .unwrap_or_else(|| {
                let seen: Vec<_> = doc["flows"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|f| (&f["iface"], &f["direction"], &f["packets"], &f["psn_gaps"]))
                    .collect();
                panic!(
                    "no pair {up} -> {down}: {paths:?}; flows {seen:?}; {}",
                    doc["summary"]
                )
            })
    };
    let lost = pair(b1, &b2);
    assert_eq!(lost["missing_psns"], serde_json::json!(DROPPED), "{lost}");
    assert_eq!(lost["missing"], DROPPED.len());
    assert_eq!(lost["both"], PSNS.len() - DROPPED.len());
    assert_eq!(lost["downstream_retransmits_unseen"], 0);
    assert_eq!(pair(&b2, b1)["missing"], 0);
    assert_eq!(paths.len(), 2, "one flow, two points: {paths:?}");

    // The kernel path: TC egress of a1 before the drop, XDP ingress of b2 after it.
    let live_paths = live["paths"].as_array().expect("paths");
    let live_pair = |up: &str, down: &str| {
        live_paths
            .iter()
            .find(|p| {
                format!("{}/{}", p["upstream"]["iface"], p["upstream"]["direction"]) == up
                    && format!(
                        "{}/{}",
                        p["downstream"]["iface"], p["downstream"]["direction"]
                    ) == down
            })
            .unwrap_or_else(|| panic!("no pair {up} -> {down} in run -i: {live_paths:?}"))
    };
    let (up, down) = (
        format!("\"{a1}\"/\"egress\""),
        format!("\"{b2}\"/\"ingress\""),
    );
    let lost = live_pair(&up, &down);
    assert_eq!(lost["missing_psns"], serde_json::json!(DROPPED), "{lost}");
    assert_eq!(lost["missing"], DROPPED.len());
    assert_eq!(lost["both"], PSNS.len() - DROPPED.len());
    assert_eq!(lost["downstream_retransmits_unseen"], 0);
    assert_eq!(live_pair(&down, &up)["missing"], 0);
    assert_eq!(live_paths.len(), 2, "one flow, two points: {live_paths:?}");
}
