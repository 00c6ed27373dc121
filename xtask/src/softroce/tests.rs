use std::fs;

use super::observer::dropped_bytes;
use super::outputs::parse_perftest;
use super::scenarios::{CLIENT_IP, SERVER_IP};
use super::wire::{Pkt, direction, psn_add, psn_diff};
use super::wire_flows::{opcode_name, wire_flows};

fn pkt(src: &str, op: u8, psn: u32, syn: Option<u8>, len: Option<u32>) -> Pkt {
    Pkt {
        src: src.into(),
        dst: if src == CLIENT_IP {
            SERVER_IP
        } else {
            CLIENT_IP
        }
        .into(),
        dest_qp: 0x11,
        opcode: op,
        psn,
        syndrome: syn,
        dma_len: len,
        len: 100,
        ecn: 0,
        udp_sport: 49152,
    }
}

#[test]
fn psn_arithmetic_wraps() {
    assert_eq!(psn_diff(0, 0xFF_FFFF), 1);
    assert_eq!(psn_diff(0xFF_FFFF, 0), -1);
    assert_eq!(psn_add(0xFF_FFFF, 2), 1);
}

#[test]
fn read_requests_reserve_psns() {
    // two 8 KiB READs at path MTU 1024: PSN 10 then 18, responses 10..=25
    let mut v = vec![
        pkt(CLIENT_IP, 0x0C, 10, None, Some(8192)),
        pkt(CLIENT_IP, 0x0C, 18, None, Some(8192)),
    ];
    for (i, psn) in (10..26).enumerate() {
        let op = match i % 8 {
            0 => 0x0D,
            7 => 0x0F,
            _ => 0x0E,
        };
        v.push(pkt(SERVER_IP, op, psn, None, None));
    }
    let c = direction(&v, CLIENT_IP, 1024, None);
    assert_eq!(
        (c.req_gaps, c.req_retransmissions, c.read_requests),
        (0, 0, 2)
    );
    assert_eq!(c.req_gaps_pmtu4096, 1);
    assert_eq!((c.sim_duplicates, c.sim_out_of_seq), (0, 0));
    let s = direction(&v, SERVER_IP, 1024, None);
    assert_eq!(
        (
            s.resp_gaps,
            s.resent_read_responses,
            s.distinct_read_response_psns
        ),
        (0, 0, 16)
    );
}

#[test]
fn go_back_n_after_loss() {
    // 1 2 [3 lost] 4 5, NAK(3), 3 4 5 resent, then a timeout resend of 5
    let v: Vec<Pkt> = [1, 2, 4, 5, 3, 4, 5, 5]
        .iter()
        .map(|&p| pkt(CLIENT_IP, 0x0A, p, None, Some(64)))
        .chain([pkt(SERVER_IP, 0x11, 3, Some(0x60), None)])
        .collect();
    let c = direction(&v, CLIENT_IP, 1024, None);
    assert_eq!((c.req_gaps, c.req_missing_psns), (1, 1));
    assert_eq!(c.req_retransmissions, 4); // 3, 4, 5 and 5 again: not newer than 5
    assert_eq!(c.sim_out_of_seq, 1); // one NAK for 4 and 5
    assert_eq!(c.sim_duplicates, 1); // only the last 5 was already accepted
    assert_eq!(c.distinct_request_psns, 5);
    let s = direction(&v, SERVER_IP, 1024, None);
    assert_eq!((s.naks_seq, s.acks), (1, 0));
}

#[test]
fn wire_flow_records_follow_the_metrics_rules() {
    // requests 1 2 [3 lost] 4 5, resend of 3 only, then 6: one gap (3), the resend
    // changes nothing, 6 is no gap (the harness once moved `expected` on a resend)
    let mut v: Vec<Pkt> = [1, 2, 4, 5, 3, 6]
        .iter()
        .map(|&p| pkt(CLIENT_IP, 0x07, p, None, None))
        .collect();
    // READ responses 10..=13 with 12 missing, 11 resent, a NAK and an ACK in the same flow
    for (op, psn, syn) in [
        (0x0D, 10, None),
        (0x0E, 11, None),
        (0x11, 40, Some(0x60)),
        (0x0E, 11, None),
        (0x0F, 13, None),
        (0x11, 13, Some(0x1F)),
    ] {
        v.push(pkt(SERVER_IP, op, psn, syn, None));
    }
    v[0].ecn = 3;
    v[1].ecn = 2;
    v[2].udp_sport = 50000;
    let w = wire_flows(&v, 1024);
    let c = &w[&(CLIENT_IP.to_string(), SERVER_IP.to_string(), 0x11)];
    assert_eq!((c.packets, c.bytes), (6, 600));
    assert_eq!((c.req_retransmits, c.psn_gaps, c.psn_missing), (1, 1, 1));
    assert_eq!((c.ecn_ce, c.ecn_ect, c.udp_src_ports), (1, 1, 2));
    assert_eq!(c.opcodes["RC_RDMA_WRITE_MIDDLE"], 6);
    assert_eq!(c.distinct_request_psns, 6);
    let s = &w[&(SERVER_IP.to_string(), CLIENT_IP.to_string(), 0x11)];
    assert_eq!((s.resp_retransmits, s.psn_gaps, s.psn_missing), (1, 1, 1));
    assert_eq!((s.acks, s.naks_psn_seq_err, s.naks_other), (1, 1, 0));
    assert_eq!(s.opcodes["RC_ACKNOWLEDGE"], 2);
    // the per-direction figures agree
    let d = direction(&v, CLIENT_IP, 1024, None);
    assert_eq!((d.req_retransmissions, d.req_gaps), (1, 1));
    let d = direction(&v, SERVER_IP, 1024, None);
    assert_eq!((d.resent_read_responses, d.resp_gaps), (1, 1));
    assert_eq!(opcode_name(0x81), "CNP");
    assert_eq!(opcode_name(0x64), "UD_SEND_ONLY");
}

#[test]
fn first_request_lost() {
    // the QP starts at PSN 100; 100 is lost, 101 arrives (NAK), then 100 and 101 again
    let v: Vec<Pkt> = [101, 100, 101]
        .iter()
        .map(|&p| pkt(CLIENT_IP, 0x0A, p, None, Some(64)))
        .collect();
    let c = direction(&v, CLIENT_IP, 1024, Some(100));
    assert_eq!((c.sim_out_of_seq, c.sim_duplicates), (1, 0));
    assert_eq!((c.req_gaps, c.req_missing_psns), (1, 1));
    // without the initial PSN the first packet seen is taken as the start
    let c = direction(&v, CLIENT_IP, 1024, None);
    assert_eq!(c.sim_out_of_seq, 0);
}

#[test]
fn perftest_output_parses() {
    let dir = std::env::temp_dir().join(format!("softroce-test-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("tmp dir");
    fs::write(
            dir.join("perftest.out"),
            " Mtu             : 1024[B]\n local address: LID 0000 QPN 0x0011 PSN 0x2ae78a RKey 0x0002a1 VAddr 0x0056542bbde000\n #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 8192       100              11.86              7.28   \t\t   0.000932\n",
        )
        .expect("write");
    fs::write(dir.join("status.env"), "PERFTEST_RC=0\n").expect("write");
    let p = parse_perftest(&dir, false);
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(
        (p.rc, p.mtu, p.iterations),
        (Some(0), Some(1024), Some(100))
    );
    assert_eq!(p.bw_avg_mb, Some(7.28));
    assert_eq!(p.local_psn, Some(0x2ae78a));
}

#[test]
fn dropped_bytes_exact_bounded_and_refused() {
    let lens = |v: &[(&str, &[u32])]| -> std::collections::BTreeMap<String, std::collections::BTreeSet<u32>> {
        v.iter()
            .map(|(k, l)| (k.to_string(), l.iter().copied().collect()))
            .collect()
    };
    let obs = serde_json::json!({"RC_RDMA_WRITE_MIDDLE": 10, "RC_RDMA_WRITE_FIRST": 3});
    let cap = serde_json::json!({"RC_RDMA_WRITE_MIDDLE": 8, "RC_RDMA_WRITE_FIRST": 3});
    // one length per opcode: exact
    let d = dropped_bytes(
        &obs,
        &cap,
        &lens(&[
            ("RC_RDMA_WRITE_MIDDLE", &[1082]),
            ("RC_RDMA_WRITE_FIRST", &[1098]),
        ]),
    );
    assert_eq!((d.lo, d.hi), (2 * 1082, 2 * 1082));
    assert!(d.bad.is_empty() && d.unbounded.is_empty());
    // several lengths: a bound, not a skip
    let d = dropped_bytes(&obs, &cap, &lens(&[("RC_RDMA_WRITE_MIDDLE", &[100, 1082])]));
    assert_eq!((d.lo, d.hi), (200, 2 * 1082));
    // an opcode the capture never has cannot be bounded: reported
    let obs = serde_json::json!({"RC_SEND_ONLY": 1});
    let d = dropped_bytes(&obs, &serde_json::json!({}), &lens(&[]));
    assert_eq!(d.unbounded.len(), 1);
    // the capture having more than the observer is reported
    let d = dropped_bytes(
        &serde_json::json!({}),
        &obs,
        &lens(&[("RC_SEND_ONLY", &[60])]),
    );
    assert_eq!(d.bad, vec!["RC_SEND_ONLY 0 < 1".to_string()]);
}

/// `rdma -j resource show qp` as the client VM printed it (iproute2 6.1): the user QP with its
/// pid and command; the kernel's GSI QP (no pid, no rqpn) is not a user QP.
#[test]
fn guest_qps_are_the_user_qps_of_rdma_json() {
    let out = r#"[{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":17,"rqpn":18,"type":"RC","state":"RTS","rq-psn":5,"sq-psn":7,"path-mig-state":"MIGRATED","pdn":1,"pid":268,"comm":"ib_read_bw"},{"ifindex":0,"ifname":"rxe0","port":1,"lqpn":1,"type":"GSI","state":"RTS","sq-psn":0,"comm":"ib_core"}]"#;
    assert_eq!(
        super::owners::guest_qps(out),
        [super::owners::GuestQp {
            pid: 268,
            comm: "ib_read_bw".into(),
            lqpn: 17,
            rqpn: 18,
            state: "RTS".into(),
        }]
    );
    assert!(super::owners::guest_qps("").is_empty());
}

/// The owner check passes only when every flow names perftest's process and QP: a flow
/// without an owner, or with another pid or QP, fails it.
#[test]
fn owner_checks_fail_on_missing_or_wrong_labels() {
    use serde_json::json;
    let dir = std::env::temp_dir().join(format!("softroce-owners-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(
        dir.join("status.env"),
        "PERF_PIDOF=268\nPERF_COMM=ib_read_bw\n",
    )
    .expect("write");
    fs::write(
        dir.join("rdma-qp.json"),
        r#"[{"ifname":"rxe0","port":1,"lqpn":17,"rqpn":18,"state":"RTS","pid":268,"comm":"ib_read_bw"}]"#,
    )
    .expect("write");
    let sc = super::scenarios::scenarios()
        .into_iter()
        .find(|s| s.name == "read_bw_mtu1500")
        .expect("scenario");
    let owner = |pid: u64| {
        json!({"device": "rxe0", "port": 1, "lqpn": 17, "rqpn": 18, "sq_psn": 5,
               "rq_psn": 7, "state": "RTS", "pid": pid, "comm": "ib_read_bw", "gone": true})
    };
    let flow = |src: &str, dst: &str, qp: u32, dir: &str, owner: serde_json::Value| json!({"src_ip": src, "dst_ip": dst, "dst_qp": qp, "direction": dir, "owner": owner});
    let failed = |flows: Vec<serde_json::Value>| {
        let mut ck = super::checks::Checks(Vec::new());
        super::owners::owner_checks(&mut ck, &sc, &dir, &json!({ "flows": flows }));
        ck.0.iter().filter(|c| !c.ok).count()
    };
    // Into QP 17 (ingress), out of it to the server's QP 18 (egress).
    let good = vec![
        flow(SERVER_IP, CLIENT_IP, 17, "ingress", owner(268)),
        flow(CLIENT_IP, SERVER_IP, 18, "egress", owner(268)),
    ];
    assert_eq!(failed(good.clone()), 0);
    let mut missing = good.clone();
    missing[0]["owner"] = serde_json::Value::Null;
    assert_eq!(failed(missing), 1);
    let mut wrong_pid = good.clone();
    wrong_pid[1]["owner"]["pid"] = json!(999);
    assert_eq!(failed(wrong_pid), 1);
    let mut wrong_qp = good.clone();
    wrong_qp[1]["owner"]["rqpn"] = json!(17);
    assert_eq!(failed(wrong_qp), 1);
    let mut no_psn = good;
    no_psn[0]["owner"]["sq_psn"] = serde_json::Value::Null;
    assert_eq!(failed(no_psn), 1);
    // No ground truth (rdma never saw perftest's QP): the run fails too.
    fs::remove_file(dir.join("rdma-qp.json")).expect("rm");
    assert_eq!(failed(Vec::new()), 1);
    let _ = fs::remove_dir_all(&dir);
}
