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
        time: 0.0,
        ack_req: false,
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
    // by the reordering definitions: 3 closed its hole and the next request (6) was new, so
    // it was reordered (distance 5 - 3), not lost and resent
    assert_eq!((c.req_retransmits, c.psn_gaps, c.psn_missing), (0, 0, 0));
    assert_eq!(
        (
            c.psn.reordered,
            c.psn.reorder_distance_max,
            c.psn.reorder_hist
        ),
        (1, 2, [0, 1, 0, 0, 0, 0])
    );
    assert_eq!((c.ecn_ce, c.ecn_ect, c.udp_src_ports), (1, 1, 2));
    assert_eq!(c.opcodes["RC_RDMA_WRITE_MIDDLE"], 6);
    assert_eq!(c.distinct_request_psns, 6);
    let s = &w[&(SERVER_IP.to_string(), CLIENT_IP.to_string(), 0x11)];
    // 12 is a hole still open at the end (within the window): not lost
    assert_eq!((s.resp_retransmits, s.psn_gaps, s.psn_missing), (1, 0, 0));
    assert_eq!((s.psn.psn_holes, s.psn.naks_unattributed), (1, 1));
    assert_eq!((s.acks, s.naks_psn_seq_err, s.naks_other), (1, 1, 0));
    assert_eq!(s.opcodes["RC_ACKNOWLEDGE"], 2);
    // the per-direction figures follow the primer's rules (a request not newer than the
    // highest is a retransmission, a skip is a gap)
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
        let mut ck = super::check::Checks(Vec::new());
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

/// NAKs are demanded exactly when netem dropped requests and the wire shows a request gap.
#[test]
fn lossy_nak_check_demands_naks_only_after_a_gap() {
    use super::checks::lossy_nak_check;
    // loss and a gap, no NAK: the responder must have NAKed, so this fails
    assert!(!lossy_nak_check(3, 2, 0).ok);
    assert!(lossy_nak_check(3, 2, 1).ok);
    // netem dropped nothing (the read_bw_mtu1500_loss2 run that failed before), or only the
    // last requests (no later request overtook them: timeout, no NAK)
    assert!(lossy_nak_check(0, 0, 0).ok);
    assert!(lossy_nak_check(2, 0, 0).ok);
}

/// A capture of the steps scenario in miniature: 6 steps of 500 ms, three READ-request flows
/// (client -> server QPs 0x13-0x15) at each onset and three response flows into the client's
/// QPs 0x11-0x13, those into 0x12 arriving 30 ms later than the others.
fn steps_capture(onset_jitter_ms: &[f64]) -> Vec<Pkt> {
    let mut v = Vec::new();
    for (k, j) in onset_jitter_ms.iter().enumerate() {
        let onset = 1000.0 + k as f64 * 0.5 + j / 1e3;
        for q in 0..3u32 {
            let mut r = pkt(CLIENT_IP, 0x0C, k as u32, None, Some(8192));
            r.dest_qp = 0x13 + q;
            r.time = onset + f64::from(q) * 1e-4;
            r.len = 78;
            v.push(r);
            let delay = if q == 1 { 0.030 } else { 0.0 };
            for i in 0..8u32 {
                let op = match i {
                    0 => 0x0D,
                    7 => 0x0F,
                    _ => 0x0E,
                };
                let mut p = pkt(SERVER_IP, op, k as u32 * 8 + i, None, None);
                p.dest_qp = 0x11 + q;
                p.time = onset + 0.002 + delay + f64::from(q) * 1e-3 + f64::from(i) * 5e-4;
                p.len = 1100;
                v.push(p);
            }
        }
    }
    v
}

#[test]
fn wire_steps_period_lags_and_delay() {
    use super::steps::{slowed_flow, wire_steps};
    let w = wire_steps(&steps_capture(&[0.0, 1.0, -1.0, 0.0, 2.0, 0.0]), 500.0);
    assert_eq!(w.steps.len(), 6);
    assert!((w.period_ms - 500.0).abs() < 1.0, "{}", w.period_ms);
    let slow = slowed_flow(0x12);
    let lag = w.lag_of(&slow);
    assert_eq!((lag.late_steps, lag.steps), (6, 6));
    // ends: requests at onset + 0/0.1/0.2 ms (78 B each: not peers of the 8 x 1,100 B
    // responses), responses 0x11 at +5.5, 0x13 at +7.5, 0x12 at +36.5; median of the three
    // responses = 7.5 ms, lag = 36.5 - 7.5 (with the requests as peers: 33.65)
    assert!((lag.mean_lag_ms - 29.0).abs() < 0.01, "{}", lag.mean_lag_ms);
    let extra = w.extra_delay_ms(&slow).expect("delay");
    assert!((extra - 31.0).abs() < 0.01, "{extra}");
    assert_eq!(w.lag_of(&slowed_flow(0x11)).late_steps, 0);
}

/// The steps checks pass on the document the capture implies and fail on every wrong one: no
/// steps, a period 2% off, a step too few, another QP (or none) named, a lag under half the
/// capture's or more than max(3 ms, 15%) above it; and the control on a doubled period.
#[test]
fn steps_checks_fail_on_wrong_documents() {
    use super::steps::{steps_checks, wire_steps};
    use serde_json::json;
    let all = super::scenarios::scenarios();
    let sc = all
        .iter()
        .find(|s| s.name == "steps_straggler")
        .expect("scenario");
    let control = all
        .iter()
        .find(|s| s.name == "steps_control")
        .expect("control");
    let w = wire_steps(&steps_capture(&[0.0; 6]), 500.0);
    let doc = |period: f64, count: u64, qp: u32, lag: f64| {
        json!({"steps": {"period_ms": period, "count": count, "stragglers": [
            {"src_ip": SERVER_IP, "dst_ip": CLIENT_IP, "dst_qp": qp, "late_steps": 6,
             "steps": 6, "mean_lag_ms": lag}]}})
    };
    let failed = |sc: &super::scenarios::Scenario, d: serde_json::Value| {
        let mut ck = super::check::Checks(Vec::new());
        steps_checks(&mut ck, sc, &w, "t", &d);
        ck.0.iter()
            .filter(|c| !c.ok)
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    let good = doc(500.0, 6, 0x12, 29.0);
    assert!(failed(sc, good).is_empty());
    assert_eq!(failed(sc, json!({"steps": null})).len(), 1);
    assert_eq!(failed(sc, doc(510.0, 6, 0x12, 29.0)).len(), 1);
    assert_eq!(failed(sc, doc(500.0, 4, 0x12, 29.0)).len(), 1);
    // a step fewer is allowed (a thin first step reads as cut by the window's start)
    assert!(failed(sc, doc(500.0, 5, 0x12, 29.0)).is_empty());
    assert_eq!(failed(sc, doc(500.0, 6, 0x13, 29.0)).len(), 1);
    assert_eq!(
        failed(
            sc,
            json!({"steps": {"period_ms": 500.0, "count": 6, "stragglers": []}})
        )
        .len(),
        1
    );
    // between half the capture's 29 ms and 29 + max(3 ms, 15%) = 33.35 ms
    assert!(failed(sc, doc(500.0, 6, 0x12, 15.0)).is_empty());
    assert!(failed(sc, doc(500.0, 6, 0x12, 33.0)).is_empty());
    assert_eq!(failed(sc, doc(500.0, 6, 0x12, 14.0)).len(), 1);
    assert_eq!(failed(sc, doc(500.0, 6, 0x12, 34.0)).len(), 1);
    // late in too few steps
    let mut few = doc(500.0, 6, 0x12, 29.0);
    few["steps"]["stragglers"][0]["late_steps"] = json!(4);
    assert_eq!(failed(sc, few).len(), 1);
    // the control checks period and count only: its traffic has a straggler of its own
    assert!(failed(control, doc(500.0, 6, 0x13, 20.0)).is_empty());
    assert_eq!(failed(control, doc(1000.0, 3, 0x13, 20.0)).len(), 2);
}

#[test]
fn netem_band_packets_parse() {
    let q = "qdisc prio 1: root refcnt 2 bands 4 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n Sent 5132328 bytes 4769 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\nqdisc netem 40: parent 1:4 limit 100000 delay 30ms\n Sent 1802112 bytes 1664 pkt (dropped 0, overlimits 0 requeues 0) \n";
    assert_eq!(super::steps::netem_sent_packets(q), Some(1664));
    assert_eq!(super::steps::netem_sent_packets("qdisc prio 1: root"), None);
}

/// With several QPs (the steps scenarios), each flow must carry the owner of the QP it goes
/// into or out of: the labels of two flows swapped fail both.
#[test]
fn owner_checks_with_several_qps_match_each_flow_to_its_qp() {
    use serde_json::json;
    let dir = std::env::temp_dir().join(format!("softroce-owners-q-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(dir.join("status.env"), "PERF_PIDOF=300\n").expect("write");
    let qp = |l: u64, r: u64| {
        format!(
            r#"{{"ifname":"rxe0","port":1,"lqpn":{l},"rqpn":{r},"state":"RTS","pid":300,"comm":"ib_read_bw"}}"#
        )
    };
    fs::write(
        dir.join("rdma-qp.json"),
        format!("[{},{},{}]", qp(17, 19), qp(18, 20), qp(19, 21)),
    )
    .expect("write");
    let sc = super::scenarios::scenarios()
        .into_iter()
        .find(|s| s.name == "steps_straggler")
        .expect("scenario");
    let owner = |l: u64, r: u64| {
        json!({"device": "rxe0", "port": 1, "lqpn": l, "rqpn": r, "sq_psn": 5, "rq_psn": 7,
               "pid": 300, "comm": "ib_read_bw"})
    };
    let flow = |src: &str, dst: &str, q: u32, dir: &str, o: serde_json::Value| json!({"src_ip": src, "dst_ip": dst, "dst_qp": q, "direction": dir, "owner": o});
    let failed = |flows: Vec<serde_json::Value>| {
        let mut ck = super::check::Checks(Vec::new());
        super::owners::owner_checks(&mut ck, &sc, &dir, &json!({ "flows": flows }));
        ck.0.iter().filter(|c| !c.ok).count()
    };
    let good: Vec<serde_json::Value> = (0..3u32)
        .flat_map(|i| {
            let (l, r) = (17 + u64::from(i), 19 + u64::from(i));
            [
                flow(SERVER_IP, CLIENT_IP, 17 + i, "ingress", owner(l, r)),
                flow(CLIENT_IP, SERVER_IP, 19 + i, "egress", owner(l, r)),
            ]
        })
        .collect();
    assert_eq!(failed(good.clone()), 0);
    let mut swapped = good.clone();
    let (a, b) = (swapped[0]["owner"].clone(), swapped[2]["owner"].clone());
    swapped[0]["owner"] = b;
    swapped[2]["owner"] = a;
    assert_eq!(failed(swapped), 2);
    // a flow into a QP that is not perftest's
    let mut stranger = good;
    stranger[0]["dst_qp"] = json!(25);
    assert_eq!(failed(stranger), 1);
    // one QP fewer than -q asks for: no ground truth
    fs::write(
        dir.join("rdma-qp.json"),
        format!("[{},{}]", qp(17, 19), qp(18, 20)),
    )
    .expect("write");
    assert_eq!(failed(Vec::new()), 1);
    let _ = fs::remove_dir_all(&dir);
}

/// The steady scenario's checks: a steady capture with null steps passes, so does one stalled
/// at random; steps found, a missing document, or a periodic capture (the miniature) fail.
#[test]
fn steady_checks_fail_on_steps_missing_documents_and_periodic_captures() {
    use super::steps::steady_checks;
    use serde_json::json;
    let steady: Vec<Pkt> = (0..2000u32)
        .map(|i| {
            let mut p = pkt(SERVER_IP, 0x10, i, None, None);
            p.time = 1000.0 + f64::from(i) * 1e-3;
            p
        })
        .collect();
    let failed = |pkts: &[Pkt], docs: &[(&str, &serde_json::Value)]| {
        let mut ck = super::check::Checks(Vec::new());
        steady_checks(&mut ck, pkts, docs);
        ck.0.iter().filter(|c| !c.ok).count()
    };
    let null = json!({"steps": null});
    let found = json!({"steps": {"period_ms": 4.0, "count": 9, "confidence": 0.4}});
    assert_eq!(failed(&steady, &[("a", &null), ("b", &null)]), 0);
    assert_eq!(failed(&steady, &[("a", &null), ("b", &found)]), 1);
    assert_eq!(failed(&steady, &[("a", &serde_json::Value::Null)]), 1);
    assert_eq!(failed(&steps_capture(&[0.0; 6]), &[("a", &null)]), 1);
    // stalls of 1 s and 0.3 s (a loaded host): 3 parts, not a step structure
    let stalled: Vec<Pkt> = steady
        .iter()
        .cloned()
        .map(|mut p| {
            p.time += if p.time > 1001.2 {
                1.3
            } else if p.time > 1000.5 {
                1.0
            } else {
                0.0
            };
            p
        })
        .collect();
    assert_eq!(failed(&stalled, &[("a", &null)]), 0);
}

/// A request flow client -> server and its answers, from a compact script: `R5` a WRITE
/// request with PSN 5, `r5` the same with the AckReq bit, `A5` an ACK, `N5` a PSN
/// sequence-error NAK; the figures of the request flow (NAKs apply once an ACK matched).
fn req_truth(script: &str) -> super::psn_truth::PsnFigures {
    let v = script_pkts(script);
    let refs: Vec<&Pkt> = v.iter().collect();
    super::psn_truth::psn_truth(&refs, 1024)
        .remove(&(CLIENT_IP.to_string(), SERVER_IP.to_string(), 0x11))
        .expect("the request flow")
}

/// (reordered, req_retransmits, psn_missing, psn_gaps, reorder_naks)
fn five(f: &super::psn_truth::PsnFigures) -> (u64, u64, u64, u64, u64) {
    (
        f.reordered,
        f.req_retransmits,
        f.psn_missing,
        f.psn_gaps,
        f.reorder_naks,
    )
}

#[test]
fn psn_truth_spraying_without_loss() {
    let f = req_truth("R0 R2 R1 R3 R5 R4 R6");
    assert_eq!(five(&f), (2, 0, 0, 0, 0));
    assert_eq!((f.reorder_distance_max, f.reorder_hist[0]), (1, 2));
    assert_eq!((f.raw_reordered, f.raw_never_seen, f.psn_holes), (2, 0, 0));
    // across the 24-bit wrap
    let f = req_truth("RFFFFFE R0 RFFFFFF R1");
    assert_eq!(five(&f), (1, 0, 0, 0, 0));
    // a duplicate of a reordered PSN is a retransmission
    let f = req_truth("R0 R2 R1 R3 R1");
    assert_eq!(five(&f), (1, 1, 0, 0, 0));
}

#[test]
fn psn_truth_loss_nak_and_go_back_n() {
    // 3 lost, NAKed, go-back-N from 3: lost and resent, like the primer's rule
    let f = req_truth("r1 A1 R2 R4 R5 N3 R3 R4 R5");
    assert_eq!(five(&f), (0, 3, 1, 1, 0));
    assert_eq!(f.lost_by_nak, 1);
    // before the first ACK matched a request, a NAK cannot be attributed: 3 closes its hole
    // and the duplicate 4 after it makes it the first packet of a resend run (lost)
    let f = req_truth("R1 R2 R4 R5 N3 R3 R4 R5");
    assert_eq!(five(&f), (0, 3, 1, 1, 0));
    assert_eq!(f.lost_by_resend_run, 1);
    // timeout go-back-N (no NAK): two consecutive holes resent as one run, one loss event
    let f = req_truth("R1 R4 R2 R3 R4");
    assert_eq!(five(&f), (0, 3, 2, 1, 0));
    // a first copy continuing a resend run: holes 3 and 5, two events
    let f = req_truth("R1 R2 R4 R6 R7 R3 R4 R5 R6");
    assert_eq!(five(&f), (0, 4, 2, 2, 0));
}

#[test]
fn psn_truth_reordering_nak_and_its_correction() {
    // on a flow that reorders (2 after 3), the NAK comes before the delayed first copy of 4: 4
    // is declared lost, its first copy is a retransmission, the go-back-N copy (the second)
    // corrects it: reordered, not lost, the NAK caused by reordering, one of the two copies a
    // retransmission
    let f = req_truth("r1 A1 R3 R2 R5 R6 N4 R4 R4 R5 R6 R7");
    assert_eq!(five(&f), (2, 3, 0, 0, 1));
    assert_eq!((f.corrections, f.reorder_distance_max), (1, 2));
    // the same on a flow that has not reordered: the late copy is a resend, 4 stays lost
    let f = req_truth("r1 A1 R2 R3 R5 R6 N4 R4 R4 R5 R6 R7");
    assert_eq!(five(&f), (0, 4, 1, 1, 0));
    // the NAK after the delayed first copy, before the next request decides it
    let f = req_truth("r1 A1 R2 R4 R5 R3 N3 R3 R4 R5 R6");
    assert_eq!(five(&f), (1, 3, 0, 0, 1));
    // the NAK after the decision
    let f = req_truth("r1 A1 R2 R4 R5 R3 R6 N3 R3 R4 R5 R6");
    assert_eq!(five(&f), (1, 4, 0, 0, 1));
}

#[test]
fn psn_truth_reordering_deeper_than_the_window() {
    // 0, then 70 (holes 1..69): the window keeps 64 PSNs below expected (71), so 1..6 are
    // declared lost. Their copies, newest first, come below the window (retransmissions);
    // 69 down to 7 are reordered
    let mut script = String::from("R0 R46");
    for p in (1..70).rev() {
        script += &format!(" R{p:x}");
    }
    let f = req_truth(&script);
    assert_eq!(five(&f), (63, 6, 6, 1, 0));
    assert_eq!((f.reorder_distance_max, f.reorder_hist[5]), (63, 63 - 31));
    assert_eq!((f.raw_reordered, f.raw_distance_max), (69, 69));
    assert_eq!((f.lost_by_window, f.not_reordered), (6, 6));
    // oldest first: 1..6 below the window are retransmissions, and 7 then continues their
    // "resend run" (the previous request a retransmission with PSN 6), so by the definitions
    // 7..69 are lost and resent too, each continuing the run: the whole late run is loss
    let mut script = String::from("R0 R46");
    for p in 1..70 {
        script += &format!(" R{p:x}");
    }
    let f = req_truth(&script);
    assert_eq!(five(&f), (0, 69, 69, 1, 0));
    assert_eq!((f.lost_by_window, f.lost_by_resend_run), (6, 63));
    assert_eq!((f.raw_reordered, f.not_reordered), (69, 69));
}

#[test]
fn psn_truth_read_responses() {
    // one 8 KiB READ (PSNs 10..17), 12 overtaken by 13, then a retried READ from 12
    let mut v = vec![pkt(CLIENT_IP, 0x0C, 10, None, Some(8192))];
    for (op, psn) in [
        (0x0D, 10),
        (0x0E, 11),
        (0x0E, 13),
        (0x0E, 12),
        (0x0E, 14),
        (0x0E, 15),
        (0x0E, 16),
        (0x0F, 17),
        (0x0D, 12),
        (0x0E, 13),
    ] {
        v.push(pkt(SERVER_IP, op, psn, None, None));
    }
    v.push(pkt(CLIENT_IP, 0x0C, 12, None, Some(6144)));
    // the retry is no new READ
    assert_eq!(direction(&v, CLIENT_IP, 1024, None).read_requests, 1);
    let refs: Vec<&Pkt> = v.iter().collect();
    let t = super::psn_truth::psn_truth(&refs, 1024);
    let s = &t[&(SERVER_IP.to_string(), CLIENT_IP.to_string(), 0x11)];
    assert_eq!(
        (s.reordered, s.resp_retransmits, s.psn_missing, s.psn_holes),
        (1, 2, 0, 0)
    );
    let c = &t[&(CLIENT_IP.to_string(), SERVER_IP.to_string(), 0x11)];
    assert_eq!((c.req_retransmits, c.reordered, c.psn_missing), (1, 0, 0));
    // beyond the window: FIRST 0, MIDDLE 100 (holes 1..99), then 1..99: 1..36 fell out of the
    // window (lost, their copies retransmissions), 37..99 reordered
    let mut v = vec![
        pkt(SERVER_IP, 0x0D, 0, None, None),
        pkt(SERVER_IP, 0x0E, 100, None, None),
    ];
    for p in 1..100 {
        v.push(pkt(SERVER_IP, 0x0E, p, None, None));
    }
    let refs: Vec<&Pkt> = v.iter().collect();
    let t = super::psn_truth::psn_truth(&refs, 1024);
    let s = &t[&(SERVER_IP.to_string(), CLIENT_IP.to_string(), 0x11)];
    assert_eq!(
        (s.reordered, s.resp_retransmits, s.psn_missing, s.psn_gaps),
        (63, 36, 36, 1)
    );
    assert_eq!(s.reorder_distance_max, 63);
}

fn script_pkts(script: &str) -> Vec<Pkt> {
    script
        .split_whitespace()
        .map(|w| {
            let psn: u32 = u32::from_str_radix(&w[1..], 16).expect("hex PSN");
            match &w[..1] {
                "R" => pkt(CLIENT_IP, 0x07, psn, None, None),
                "r" => Pkt {
                    ack_req: true,
                    ..pkt(CLIENT_IP, 0x07, psn, None, None)
                },
                "A" => pkt(SERVER_IP, 0x11, psn, Some(0x1F), None),
                "N" => pkt(SERVER_IP, 0x11, psn, Some(0x60), None),
                x => panic!("{x}"),
            }
        })
        .collect()
}

#[test]
fn physical_reordering_against_the_definitions() {
    use super::reorder::physical;
    // the delayed first copy of 3 after its NAK: reordered, the NAK caused by it, 3 resent
    let v = script_pkts("r1 A1 R2 R4 R5 N3 R3 R3 R4 R5 R6");
    let ph = physical(&v, CLIENT_IP, SERVER_IP, 1024);
    assert_eq!(
        (
            ph.reordered,
            ph.req_retransmits,
            ph.psn_missing,
            ph.reorder_naks
        ),
        (1, 3, 0, 1)
    );
    // a go-back-N sweep resends 2 and 3, then sends 4 and 5 the first time, after 6 overtook
    // them: RFC 4737 says 4 and 5 are reordered; the definitions' resend-run rule makes 4
    // the first packet of a resend run (after the retransmission of 3) and 5 its continuation
    let script = "R0 R1 R2 R3 R6 R2 R3 R4 R5";
    let ph = physical(&script_pkts(script), CLIENT_IP, SERVER_IP, 1024);
    assert_eq!(
        (ph.reordered, ph.req_retransmits, ph.psn_missing),
        (2, 2, 0)
    );
    let f = req_truth(script);
    assert_eq!(five(&f), (0, 4, 2, 1, 0));
    assert_eq!(f.lost_by_resend_run, 2);
    // deeper than the window: 1..6 lost to it, 7..69 reordered, whatever the order
    let mut script = String::from("R0 R46");
    for p in 1..70 {
        script += &format!(" R{p:x}");
    }
    let ph = physical(&script_pkts(&script), CLIENT_IP, SERVER_IP, 1024);
    assert_eq!(
        (
            ph.reordered,
            ph.req_retransmits,
            ph.psn_missing,
            ph.psn_gaps
        ),
        (63, 6, 6, 1)
    );
}

#[test]
fn loss_truth_aligns_the_two_captures() {
    use super::reorder::loss_truth;
    // 3's first transmission dropped: lost, resent with 4 and 5
    let pre = script_pkts("R1 R2 R3 R4 R5 R3 R4 R5");
    let cap = script_pkts("R1 R2 R4 R5 R3 R4 R5");
    let t = loss_truth(&pre, &cap, 1024);
    assert_eq!(
        (
            t.lost.clone(),
            t.events,
            t.req_retransmits,
            t.dropped,
            t.unmatched
        ),
        (vec![3], 1, 3, 1, 0)
    );
    // resent twice (two go-back-N rounds): still one lost PSN; the first round's copy of 3 went
    // on with a duplicate (a resend run), so the second round's does not correct it
    let pre = script_pkts("r1 R2 R3 R4 R3 R4 R3 R4");
    let cap = script_pkts("r1 R2 R4 R3 R4 R3 R4");
    let t = loss_truth(&pre, &cap, 1024);
    assert_eq!(
        (t.lost.clone(), t.events, t.req_retransmits),
        (vec![3], 1, 4)
    );
    let f = req_truth("r1 A1 R2 R4 N3 R3 R4 R3 R4");
    assert_eq!(five(&f), (0, 4, 1, 1, 0));
    // the last PSN dropped and resent before anything higher: not visible as a loss
    let pre = script_pkts("R1 R2 R3 R3");
    let cap = script_pkts("R1 R2 R3");
    let t = loss_truth(&pre, &cap, 1024);
    assert_eq!((t.lost.len(), t.req_retransmits, t.dropped), (0, 0, 1));
}
