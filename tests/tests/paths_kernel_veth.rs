//! Where was it lost on the kernel path, end to end: the `mirror_loss` fixture (one stream
//! mirrored to one monitor host by two switches; switch 198.51.100.3, downstream, never sees
//! PSN 4, and 198.51.100.1's copy of PSN 3 is lost on its mirror path) replayed on a veth pair
//! with `run -i` on the receiving end (XDP ingress). The two mirror sources are two
//! observation points of the flow; `paths` must name PSN 4 missing from 198.51.100.1 to
//! 198.51.100.3 and PSN 3 the other way, as `analyze` does on the same capture.

use std::process::Command;

use integration_tests::{
    fixtures_dir,
    netns::{Observer, VethNs},
    observer_bin, require_root,
};
use serde_json::{Value, json};

/// The pairs without the attach point (the capture path says `pcap`/`capture`, the kernel
/// path the interface and `ingress`), ordered.
fn pairs(doc: &Value) -> Vec<Value> {
    let mut v: Vec<Value> = doc["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| {
            let mut p = p.clone();
            for end in ["upstream", "downstream"] {
                let point = p[end].as_object_mut().expect("point");
                point.remove("iface");
                point.remove("direction");
            }
            p
        })
        .collect();
    v.sort_by_key(|p| p.to_string());
    v
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn mirror_loss_replay_names_the_psn_lost_between_two_switches() {
    require_root();
    let pcap = fixtures_dir().join("mirror_loss.pcap");
    let out = Command::new(observer_bin())
        .args(["analyze", "--json"])
        .arg(&pcap)
        .output()
        .expect("analyze runs");
    assert!(out.status.success());
    let analyzed: Value = serde_json::from_slice(&out.stdout).expect("JSON");

    let ns = VethNs::new().expect("namespace with a veth pair");
    let observer = Observer::start(&ns, &["-i", &ns.b, "--json"]).expect("observer attaches");
    ns.replay(&pcap).expect("tcpreplay");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let doc: Value =
        serde_json::from_str(&observer.stop().expect("observer stops")).expect("run --json");

    let kernel = pairs(&doc);
    let expected_order = |up: &str, down: &str| {
        kernel
            .iter()
            .find(|p| {
                p["upstream"]["mirror"]["outer_src"] == up
                    && p["downstream"]["mirror"]["outer_src"] == down
            })
            .cloned()
            .unwrap_or_else(|| panic!("no pair {up} -> {down}: {kernel:?}"))
    };
    // By hand (gen_fixtures.py, mirror_loss): PSNs 1..6; .1 lacks 3, .3 lacks 4.
    let e_to_g = expected_order("198.51.100.1", "198.51.100.3");
    assert_eq!(e_to_g["missing_psns"], json!([4]), "{e_to_g}");
    assert_eq!(e_to_g["missing"], 1);
    assert_eq!(e_to_g["both"], 4, "PSNs 1, 2, 5 and 6");
    assert_eq!(e_to_g["downstream_retransmits_unseen"], 0);
    let g_to_e = expected_order("198.51.100.3", "198.51.100.1");
    assert_eq!(g_to_e["missing_psns"], json!([3]), "{g_to_e}");
    assert_eq!(kernel.len(), 2, "one flow at two points: {kernel:?}");
    for p in &doc["paths"].as_array().expect("paths")[..] {
        assert_eq!(p["upstream"]["iface"], json!(ns.b));
        assert_eq!(p["downstream"]["direction"], "ingress");
    }
    // The capture path on the same file.
    assert_eq!(kernel, pairs(&analyzed), "kernel path vs analyze");
}
