//! One flow processed on two CPUs at once: two `tcpreplay` processes pinned to CPU 0
//! and CPU 1 send the same RC flow through a veth with two queues, XPS mapping CPU i to TX queue
//! i (and so to RX queue i of the receiving end). TC egress runs on both senders' CPUs and XDP
//! on both receive queues at the same time; every per-flow counter must still be exact on both
//! attach points. Before counters were atomic adds, about 0.2% of the updates were lost here.

use integration_tests::{
    netns::{Observer, VethNs},
    require_root,
};
use roce_observer_common::frames::RoceFrame;
use serde_json::Value;

/// Frames per sender.
const FRAMES: u32 = 100_000;
/// RDMA WRITE MIDDLE payload bytes.
const PAYLOAD: usize = 256;

/// A pcap of `FRAMES` RC WRITE MIDDLE packets to QP 0x11 with in-order PSNs; returns the frame
/// length.
fn write_capture(path: &std::path::Path) -> usize {
    let frame = |psn| {
        RoceFrame {
            payload: PAYLOAD,
            tos: 0x6a,
            ..RoceFrame::new(0x07, 0x11, psn)
        }
        .build()
    };
    roce_observer_tools::write_pcap(path, (0..FRAMES).map(frame)).expect("write capture");
    frame(0).len()
}

fn flow_on<'a>(doc: &'a Value, iface: &str, direction: &str) -> Vec<&'a Value> {
    doc["flows"]
        .as_array()
        .map(|flows| {
            flows
                .iter()
                .filter(|f| f["iface"] == iface && f["direction"] == direction)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn one_flow_on_two_cpus_is_counted_exactly_on_both_attach_points() {
    require_root();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cpus >= 2,
        "this test needs two CPUs to process one flow at once; this machine has {cpus}"
    );
    let dir = std::env::temp_dir().join(format!("roce-multi-cpu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("one_flow.pcap");
    let len = write_capture(&pcap);

    let ns = VethNs::with_queues(2).expect("namespace with a two-queue veth pair");
    ns.pin_tx_queues(2).expect("XPS: CPU i -> TX queue i");
    let ifaces = format!("{},{}", ns.a, ns.b);
    let observer = Observer::start(&ns, &["-i", &ifaces, "--json"]).expect("observer attaches");
    let senders: Vec<_> = (0..2)
        .map(|cpu| {
            ns.exec("taskset")
                .args([
                    "-c",
                    &cpu.to_string(),
                    "tcpreplay",
                    "-q",
                    "--topspeed",
                    "-i",
                ])
                .arg(&ns.a)
                .arg(&pcap)
                .spawn()
                .expect("tcpreplay starts")
        })
        .collect();
    for mut s in senders {
        assert!(
            s.wait().expect("tcpreplay runs").success(),
            "tcpreplay failed"
        );
    }
    // Let the receiving veth's softirq finish with the last frames.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = observer.stop().expect("observer stops cleanly");
    let _ = std::fs::remove_dir_all(&dir);
    let doc: Value = serde_json::from_str(&out).expect("run --json output parses");

    let sent = 2 * u64::from(FRAMES);
    let mut failures = Vec::new();
    for (iface, direction) in [(&ns.a, "egress"), (&ns.b, "ingress")] {
        let flows = flow_on(&doc, iface, direction);
        let [flow] = flows.as_slice() else {
            failures.push(format!("{direction}: {} flows, want 1", flows.len()));
            continue;
        };
        for (field, want) in [
            ("packets", sent),
            ("bytes", sent * len as u64),
            ("ecn_ect", sent),
        ] {
            if flow[field].as_u64() != Some(want) {
                failures.push(format!("{direction} {field}: {} != {want}", flow[field]));
            }
        }
        let middles = &flow["opcodes"]["RC_RDMA_WRITE_MIDDLE"];
        if middles.as_u64() != Some(sent) {
            failures.push(format!(
                "{direction} RC_RDMA_WRITE_MIDDLE: {middles} != {sent}"
            ));
        }
        // Each PSN is sent twice, once by each sender: whichever copy is processed second is
        // not newer than the highest PSN seen, so it is a retransmission; a first copy can be
        // one too when the other sender is ahead (docs/metrics.md, "Several CPUs"). Both
        // copies can also be judged new when the two CPUs update the PSN state at the same
        // moment (the documented lost update: seen as 99,999 of 100,000, about 1 run in 4),
        // so the lower bound has 1% of slack; the exact counters above have none.
        let retransmits = flow["retransmits"].as_u64().unwrap_or(0);
        let floor = u64::from(FRAMES - FRAMES / 100);
        if !(floor..=sent).contains(&retransmits) {
            failures.push(format!("{direction} retransmits: {retransmits}"));
        }
    }
    assert!(failures.is_empty(), "{}\n{out}", failures.join("\n"));
}
