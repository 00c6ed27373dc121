//! Layer 2: each fixture replayed with tcpreplay into one end of a veth pair inside a throwaway
//! network namespace, with `roce-observer run` attached to both ends: TC egress on the sending
//! end and XDP ingress on the receiving end must each report exactly the expected records.
//! Differential: `roce-observer analyze` on the same capture must produce the same flow
//! records as the kernel path, field for field (time-derived fields aside). Both share the
//! parser and accounting code, so this part catches plumbing and verifier problems, not rule
//! mistakes; the expected-JSON comparison above is what judges the rules (see
//! `compare::diff_flows`).

use integration_tests::{
    compare::{View, compare, diff_flows},
    kernel_fixtures,
    netns::{Observer, VethNs},
    require_root,
};

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn every_fixture_replayed_on_veth_matches_on_both_ends() {
    require_root();
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut differential = 0;
    for (name, pcap, expected) in kernel_fixtures() {
        let ns = VethNs::new().expect("namespace with a veth pair");
        let pmtu = expected["pmtu"].as_u64().unwrap_or(4096).to_string();
        let ifaces = format!("{},{}", ns.a, ns.b);
        let observer = Observer::start(&ns, &["-i", &ifaces, "--json", "--pmtu", &pmtu])
            .expect("observer attaches");
        ns.replay(&pcap).expect("tcpreplay");
        // Let the receiving veth's softirq finish with the last frames.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let out = observer.stop().expect("observer stops cleanly");
        let doc: serde_json::Value = serde_json::from_str(&out).expect("run --json output parses");
        for (iface, direction) in [(&ns.b, "ingress"), (&ns.a, "egress")] {
            let view = View {
                iface: Some(iface),
                direction,
                exact_rtt: false,
            };
            for diff in compare(&expected, &doc, &view) {
                failures.push(format!("{name} ({direction} on {iface}): {diff}"));
            }
            checked += 1;
        }
        let analyzed = std::process::Command::new(integration_tests::observer_bin())
            .args(["analyze", "--json", "--pmtu", &pmtu])
            .arg(&pcap)
            .output()
            .expect("analyze runs");
        assert!(analyzed.status.success(), "{name}: analyze failed");
        let offline: serde_json::Value =
            serde_json::from_slice(&analyzed.stdout).expect("analyze --json output parses");
        let capture = View {
            iface: None,
            direction: "capture",
            exact_rtt: false,
        };
        for (iface, direction) in [(&ns.b, "ingress"), (&ns.a, "egress")] {
            let kernel = View {
                iface: Some(iface),
                direction,
                exact_rtt: false,
            };
            for diff in diff_flows(&doc, &kernel, &offline, &capture) {
                failures.push(format!("{name}: kernel {direction} vs analyze: {diff}"));
            }
            differential += 1;
        }
    }
    assert!(checked > 0, "no fixture was checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "veth replay: {checked} fixture/attach-point pairs matched the expected output, \
         {differential} matched analyze field for field"
    );
}
