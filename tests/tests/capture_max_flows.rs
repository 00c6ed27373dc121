//! `--max-flows` on capture sources (`analyze`, `run --capture`): the table holds at most N
//! flows and the packets of every flow that did not fit are counted exactly in `map_full`, as
//! the kernel counts them; without the option, a capture of a few flows keeps them all.

use std::{
    io::Write as _,
    process::{Command, Output, Stdio},
};

use integration_tests::observer_bin;
use roce_observer_common::frames::RoceFrame;
use serde_json::Value;

const FLOWS: u32 = 50;
const PACKETS_PER_FLOW: u32 = 3;

/// A pcap of FLOWS QPs, PACKETS_PER_FLOW RC SEND_ONLY packets each, interleaved.
fn capture() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(0xa1b2_c3d4u32.to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(4u16.to_le_bytes());
    out.extend(0i32.to_le_bytes());
    out.extend(0u32.to_le_bytes());
    out.extend(65535u32.to_le_bytes());
    out.extend(1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    let mut usec = 0u32;
    for psn in 0..PACKETS_PER_FLOW {
        for qp in 0..FLOWS {
            let frame = RoceFrame {
                payload: 64,
                ..RoceFrame::new(0x04, 0x100 + qp, psn)
            }
            .build();
            usec += 10;
            out.extend(1_700_000_000u32.to_le_bytes());
            out.extend(usec.to_le_bytes());
            out.extend((frame.len() as u32).to_le_bytes());
            out.extend((frame.len() as u32).to_le_bytes());
            out.extend(&frame);
        }
    }
    out
}

fn observer(args: &[&str], input: &[u8]) -> Value {
    let mut child = Command::new(observer_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("roce-observer starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("capture written");
    let out: Output = child.wait_with_output().expect("roce-observer runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON document")
}

#[test]
fn capture_sources_keep_at_most_max_flows_and_count_the_rest_exactly() {
    let pcap = capture();
    for cmd in [
        &["analyze", "-", "--json"][..],
        &["run", "--capture", "-", "--no-tui", "--json"][..],
    ] {
        let all = observer(cmd, &pcap);
        assert_eq!(all["summary"]["flows"], FLOWS, "{cmd:?}");
        assert_eq!(all["summary"]["map_full"], 0, "{cmd:?}");
        let mut bounded_args = cmd.to_vec();
        bounded_args.extend(["--max-flows", "20"]);
        let bounded = observer(&bounded_args, &pcap);
        assert_eq!(bounded["summary"]["flows"], 20, "{cmd:?}");
        assert_eq!(
            bounded["summary"]["map_full"],
            (FLOWS - 20) * PACKETS_PER_FLOW,
            "{cmd:?}: every packet of a flow that did not fit"
        );
        assert_eq!(
            bounded["summary"]["roce_packets"],
            FLOWS * PACKETS_PER_FLOW,
            "{cmd:?}: they stay RoCE packets"
        );
    }
}
