//! `roce-observer analyze --json` on every fixture capture must reproduce its expected
//! document: summary classes, every flow field, latency samples (min, max and quantiles), PFC
//! entries, path views, lossless findings and the storm origin where listed, and the order of
//! flows and PFC entries, with the path MTU given and learned, and with the arguments a fixture
//! is made for (`args`: a link speed, a storm window). Fixtures whose flows name their observation point (`tcpdump -i any`
//! captures: interface and direction from the link header) are compared at every point.

use integration_tests::{
    compare::{View, compare, lossless_diffs},
    fixture_args, fixtures,
};
use serde_json::Value;

/// (src, dst, qp) of each flow, and (mac, priority) of each PFC entry, in document order.
fn order(doc: &Value) -> (Vec<String>, Vec<String>) {
    let empty = Vec::new();
    let flows = doc["flows"].as_array().unwrap_or(&empty);
    let pfc = doc["pfc"].as_array().unwrap_or(&empty);
    (
        flows
            .iter()
            .map(|f| format!("{} {} {}", f["src_ip"], f["dst_ip"], f["dst_qp"]))
            .collect(),
        pfc.iter()
            .map(|p| format!("{} {}", p["src_mac"], p["priority"]))
            .collect(),
    )
}

#[test]
fn every_fixture_matches_its_expected_document() {
    let mut diffs = Vec::new();
    let mut checked = 0;
    for (name, pcap, expected) in fixtures() {
        let view = View::for_fixture(&expected);
        let pmtu = expected["pmtu"].as_u64().unwrap_or(4096).to_string();
        let args = fixture_args(&expected);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // Learning the path MTU must not change anything on these captures.
        for (label, extra) in [
            (
                "pmtu given",
                [&["--pmtu", pmtu.as_str()][..], &args].concat(),
            ),
            ("pmtu learned", args.clone()),
        ] {
            let actual = integration_tests::analyze_json(&pcap, &extra);
            for d in compare(&expected, &actual, &view)
                .into_iter()
                .chain(lossless_diffs(&expected, &actual))
            {
                diffs.push(format!("{name} ({label}): {d}"));
            }
            if order(&expected) != order(&actual) {
                diffs.push(format!(
                    "{name} ({label}): flows or PFC entries out of order"
                ));
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} fixture runs");
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}
