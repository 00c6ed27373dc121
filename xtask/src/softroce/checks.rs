//! The checks of one scenario: perftest, rxe's counters and the wire against each other.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::util::output_checked;

use super::SoftRoceOpts;
use super::check::{Check, Checks};
use super::observer::{ObserverInputs, observer_bin, observer_checks};
use super::outputs::{
    Perftest, counter_deltas, netem_dropped, parse_perftest, read_kv, tcpdump_kernel_drops,
};
use super::owners::guest_qps;
use super::scenarios::{CLIENT_IP, Op, SERVER_IP, Scenario};
use super::steps::{netem_sent_packets, steady_checks, steps_checks, truth_checks, wire_steps};
use super::wire::{direction, tshark_packets};
use super::wire_flows::{WireFlow, wire_flows};

pub(super) struct Summary {
    pub(super) checks: Vec<Check>,
    pub(super) row: Vec<String>,
    /// wire / analyze / observer per flow (with an observer)
    pub(super) flow_rows: Vec<Vec<String>>,
    pub(super) json: Value,
}

/// Under netem loss, NAKs are demanded exactly when the responder must have sent one: netem
/// dropped request packets (`lost` = the client's sent_pkts - the wire's), and a later request
/// overtook a lost one, i.e. the wire shows a request gap (the server receives what the client's
/// capture shows after netem, so it saw a PSN ahead of the expected one: rxe counts
/// out_of_seq_request and NAKs). A loss with no gap (the last requests of a run, or only
/// retransmissions dropped) is recovered by the requester's timeout, without a NAK. (Before,
/// NAKs were demanded from 500 PSNs on, which counted READ response PSNs: read_bw_mtu1500_loss2
/// sends only ~127 request packets, and one run in which netem dropped none of them failed.)
/// The per-flow checks then require analyze's and the observer's NAKs to equal the wire's.
/// `roce-observer analyze --json` of the capture, or null when it fails (the checks that read
/// it then fail and say so).
fn analyze_json(bin: &Path, pmtu: u64, cap: &Path) -> Value {
    output_checked(
        std::process::Command::new(bin)
            .args(["analyze", "--json", "--pmtu", &pmtu.to_string()])
            .arg(cap),
    )
    .ok()
    .and_then(|s| serde_json::from_str(&s).ok())
    .unwrap_or(Value::Null)
}

/// A JSON document the guest wrote, or null when it is missing or unreadable.
fn json_file(path: &Path) -> Value {
    fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null)
}

pub(super) fn lossy_nak_check(lost: i64, req_gaps: u64, naks: u64) -> Check {
    let due = lost > 0 && req_gaps > 0;
    Check {
        name: "lossy run: NAKs on the wire when netem dropped requests and a later request overtook one (request gaps)".into(),
        expected: if due {
            format!("> 0 ({lost} requests dropped, {req_gaps} request gaps)")
        } else {
            format!("any ({lost} requests dropped, {req_gaps} request gaps: no NAK due)")
        },
        actual: naks.to_string(),
        ok: !due || naks > 0,
    }
}

/// Check a scenario's results again (after a change of the checks), without booting.
pub(super) fn reanalyze(sc: &Scenario, dir: &Path, opts: &SoftRoceOpts) -> Result<Summary> {
    let old: Value = fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let wall = old["wall_seconds"].as_f64().unwrap_or(0.0);
    let client_secs = old["client_vm_seconds"].as_f64().unwrap_or(0.0);
    if !dir.join("vm-server/config.env").exists() {
        bail!("no results in {} to check", dir.display());
    }
    check_scenario(sc, dir, (wall, client_secs), opts)
}

/// Check a scenario's results in `dir` (vm-server/, vm-client/, cap.pcap): every check, the
/// table row and summary.json.
pub(super) fn check_scenario(
    sc: &Scenario,
    dir: &Path,
    (wall, client_secs): (f64, f64),
    opts: &SoftRoceOpts,
) -> Result<Summary> {
    let (sdir, cdir) = (&dir.join("vm-server"), &dir.join("vm-client"));
    let cap = &dir.join("cap.pcap");
    let observer = observer_bin(opts, cdir)?;
    let pc = parse_perftest(cdir, sc.latency);
    let ps = parse_perftest(sdir, sc.latency);
    let cc = counter_deltas(cdir);
    let scn = counter_deltas(sdir);
    let cstat = read_kv(&cdir.join("status.env"));
    let sstat = read_kv(&sdir.join("status.env"));
    if let Some(e) = cstat.get("ERROR").or(sstat.get("ERROR")) {
        bail!(
            "guest error {e}; see {}/*/init.log and console.log",
            dir.display()
        );
    }
    if !cap.exists() {
        bail!("no capture at {}", cap.display());
    }
    let expect_pmtu = sc.expected_pmtu();
    // the analysis needs a path MTU even when perftest printed none; the check below fails
    // then, so the substitute never makes a run pass
    let pmtu = pc.mtu.unwrap_or(expect_pmtu);
    let pkts = tshark_packets(cap)?;
    // perftest prints one initial PSN per QP; with several QPs the analysis trusts each flow's
    // first request instead (those scenarios are lossless, so it is the initial one)
    let first_psn = |p: &Perftest| if sc.qps == 1 { p.local_psn } else { None };
    let c2s = direction(&pkts, CLIENT_IP, pmtu, first_psn(&pc));
    let s2c = direction(&pkts, SERVER_IP, pmtu, first_psn(&ps));
    let g = |m: &BTreeMap<String, i64>, k: &str| m.get(k).copied().unwrap_or(-1);

    let mut ck = Checks(Vec::new());
    ck.eq("client perftest exit code", 0, pc.rc.unwrap_or(-1));
    ck.eq("server perftest exit code", 0, ps.rc.unwrap_or(-1));
    ck.eq(
        "client perftest iterations (all QPs)",
        sc.iters * u64::from(sc.qps),
        pc.iterations.unwrap_or(0),
    );
    ck.eq(
        "path MTU reported by perftest",
        expect_pmtu.to_string(),
        pc.mtu.map_or_else(
            || "no \"Mtu\" line in vm-client/perftest.out".to_string(),
            |m| m.to_string(),
        ),
    );
    ck.truth(
        "closing rendezvous (server counters read before the capture stopped)",
        "no timeout",
        format!(
            "client {}, server {}",
            cstat.get("DONE_RENDEZVOUS").map_or("ok", |s| s.as_str()),
            sstat.get("DONE_RENDEZVOUS").map_or("ok", |s| s.as_str())
        ),
        !cstat.contains_key("DONE_RENDEZVOUS") && !sstat.contains_key("DONE_RENDEZVOUS"),
    );
    ck.eq(
        "tcpdump packets dropped by kernel",
        0,
        tcpdump_kernel_drops(cdir).unwrap_or(u64::MAX),
    );

    // packets implied by perftest's parameters and the path MTU (-n is per QP)
    let per_msg = sc.size.div_ceil(pmtu).max(1);
    let reqs = sc.iters * u64::from(sc.qps);
    let psns = reqs * per_msg;
    let implied: &[(&str, u64, u64)] = match (sc.op, sc.latency) {
        (Op::Read, _) => &[
            (
                "client->server distinct READ requests == -n x QPs",
                reqs,
                c2s.read_requests,
            ),
            (
                "server->client distinct READ response PSNs == n*QPs*ceil(s/pmtu)",
                psns,
                s2c.distinct_read_response_psns,
            ),
            ("server->client requests", 0, s2c.requests),
        ],
        (_, true) => &[
            (
                "client->server distinct request PSNs == n*QPs*ceil(s/pmtu)",
                psns,
                c2s.distinct_request_psns,
            ),
            (
                "server->client distinct request PSNs == n*QPs*ceil(s/pmtu)",
                psns,
                s2c.distinct_request_psns,
            ),
        ],
        (_, false) => &[
            (
                "client->server distinct request PSNs == n*QPs*ceil(s/pmtu)",
                psns,
                c2s.distinct_request_psns,
            ),
            ("server->client requests", 0, s2c.requests),
        ],
    };
    for &(name, expected, actual) in implied {
        ck.eq(name, expected, actual);
    }

    // rxe's own packet counters against the wire
    let lossy = sc.loss.is_some();
    if lossy {
        // netem drops after rxe counted the packet as sent, before the capture point
        let dropped = netem_dropped(cdir).unwrap_or(0);
        ck.range(
            "client sent_pkts - wire client->server (<= netem drops)",
            0,
            dropped,
            g(&cc, "sent_pkts") - c2s.packets as i64,
        );
    } else {
        ck.eq(
            "client sent_pkts == wire client->server",
            c2s.packets as i64,
            g(&cc, "sent_pkts"),
        );
    }
    // (name, expected, actual); NAKs and duplicates against the responders' counters (each VM
    // is the responder of the other's requests)
    let mut equal: Vec<(&str, i64, i64)> = vec![
        (
            "server rcvd_pkts == wire client->server",
            c2s.packets as i64,
            g(&scn, "rcvd_pkts"),
        ),
        (
            "server sent_pkts == wire server->client",
            s2c.packets as i64,
            g(&scn, "sent_pkts"),
        ),
        (
            "client rcvd_pkts == wire server->client",
            s2c.packets as i64,
            g(&cc, "rcvd_pkts"),
        ),
        (
            "wire NAKs server->client == server out_of_seq_request",
            g(&scn, "out_of_seq_request"),
            s2c.naks_seq as i64,
        ),
        (
            "wire NAKs client->server == client out_of_seq_request",
            g(&cc, "out_of_seq_request"),
            c2s.naks_seq as i64,
        ),
        (
            "responder model out-of-seq client->server == server out_of_seq_request",
            g(&scn, "out_of_seq_request"),
            c2s.sim_out_of_seq as i64,
        ),
        (
            "responder model duplicates client->server == server duplicate_request",
            g(&scn, "duplicate_request"),
            c2s.sim_duplicates as i64,
        ),
        (
            "responder model duplicates server->client == client duplicate_request",
            g(&cc, "duplicate_request"),
            s2c.sim_duplicates as i64,
        ),
    ];
    if !lossy && sc.reorder.is_none() {
        // without loss every resent request reaches the responder as a duplicate, and
        // there is no gap anywhere: the detector must not invent one (READ, ping-pong)
        equal.extend([
            (
                "wire request retransmissions client->server == server duplicate_request",
                g(&scn, "duplicate_request"),
                c2s.req_retransmissions as i64,
            ),
            (
                "wire request retransmissions server->client == client duplicate_request",
                g(&cc, "duplicate_request"),
                s2c.req_retransmissions as i64,
            ),
            (
                "request gaps client->server (none lost)",
                0,
                c2s.req_gaps as i64,
            ),
            (
                "request gaps server->client (none lost)",
                0,
                s2c.req_gaps as i64,
            ),
            ("READ response gaps server->client", 0, s2c.resp_gaps as i64),
            (
                "NAKs on the wire (none lost)",
                0,
                (c2s.naks_seq + s2c.naks_seq) as i64,
            ),
        ]);
    }
    for (name, expected, actual) in equal {
        ck.eq(name, expected, actual);
    }
    if lossy {
        // requests netem dropped (rxe counted them as sent, the wire never saw them): each
        // must have been sent again, since every PSN shows up on the wire (checked above)
        let lost = g(&cc, "sent_pkts") - c2s.packets as i64;
        ck.truth(
            "requests lost to netem were retransmitted",
            &format!("retransmissions > 0 when lost ({lost}) > 0"),
            c2s.req_retransmissions.to_string(),
            lost <= 0 || c2s.req_retransmissions > 0,
        );
        ck.0.push(lossy_nak_check(lost, c2s.req_gaps, s2c.naks_seq));
        ck.truth(
            "request retransmissions >= duplicate_request",
            &format!(">= {}", g(&scn, "duplicate_request")),
            c2s.req_retransmissions.to_string(),
            c2s.req_retransmissions as i64 >= g(&scn, "duplicate_request"),
        );
    }

    // the per-flow wire figures (docs/metrics.md record) add up to the per-direction ones
    let wire = wire_flows(&pkts, pmtu);
    for (src, d, label) in [
        (CLIENT_IP, &c2s, "client->server"),
        (SERVER_IP, &s2c, "server->client"),
    ] {
        let sum = |f: &dyn Fn(&WireFlow) -> u64| -> u64 {
            wire.iter()
                .filter(|(k, _)| k.0 == src)
                .map(|(_, w)| f(w))
                .sum()
        };
        if sc.reorder.is_some() || lossy {
            // the per-direction figures follow the primer's rules (not newer than the highest
            // = retransmission), the per-flow ones the reordering definitions: with reordering
            // they differ by design, and under loss where the definitions correct a lost PSN
            // that rxe resent twice (the `loss:` checks compare analyze with what netem
            // dropped instead)
            ck.eq(
                &format!(
                    "wire per-flow sums == per-direction figures {label} (packets, ACKs, NAKs)"
                ),
                format!("{} {} {}", d.packets, d.acks, d.naks_seq),
                format!(
                    "{} {} {}",
                    sum(&|w| w.packets),
                    sum(&|w| w.acks),
                    sum(&|w| w.naks_psn_seq_err)
                ),
            );
            continue;
        }
        ck.eq(
            &format!("wire per-flow sums == per-direction figures {label} (packets, ACKs, NAKs, request/response retransmissions)"),
            format!(
                "{} {} {} {} {}",
                d.packets, d.acks, d.naks_seq, d.req_retransmissions, d.resent_read_responses
            ),
            format!(
                "{} {} {} {} {}",
                sum(&|w| w.packets),
                sum(&|w| w.acks),
                sum(&|w| w.naks_psn_seq_err),
                sum(&|w| w.req_retransmits),
                sum(&|w| w.resp_retransmits)
            ),
        );
    }

    // the reorder scenarios: the capture's premises and the window's evidence; with netem on
    // the client, the kernel path's truth from pre.pcap
    let reorder_json = sc
        .reorder
        .map(|r| super::reorder::capture_checks(&mut ck, sc, &r, (sdir, cdir), &wire));
    let egress_truth = match (sc.reorder, observer.as_deref()) {
        (Some(r), Some(_)) if !r.on_server => {
            match super::reorder::egress_truth(cdir, &pkts, pmtu) {
                Ok(t) => Some(t),
                Err(e) => {
                    ck.truth(
                        "reorder: pre.pcap (the client's packets before netem) decoded",
                        "decoded",
                        format!("{e:#}"),
                        false,
                    );
                    None
                }
            }
        }
        _ => None,
    };
    // the observer (kernel path) against analyze on the same capture, analyze against the wire
    let (flow_rows, observer_json) = match observer.as_deref() {
        Some(bin) => observer_checks(
            &mut ck,
            &ObserverInputs {
                sc,
                bin,
                cap,
                cdir,
                wire: &wire,
                c2s: &c2s,
                s2c: &s2c,
                client_sent_pkts: g(&cc, "sent_pkts"),
                netem_dropped: netem_dropped(cdir),
                egress_truth: egress_truth.as_ref(),
            },
        ),
        None => (Vec::new(), Value::Null),
    };
    // the reorder scenarios: the documents that saw the capture's order against what netem did
    let physical_json = match (sc.reorder, observer.as_deref()) {
        (Some(r), Some(bin)) => {
            let ana: Value = analyze_json(bin, pmtu, cap);
            let obs: Value = json_file(&cdir.join("extra.out"));
            let mut docs: Vec<(&str, &Value)> = vec![("analyze (capture)", &ana)];
            if r.on_server {
                // XDP ingress and TC egress see what the capture sees (no netem in the client)
                docs.push(("observer (run -i, kernel path)", &obs));
            }
            super::reorder::physical_checks(&mut ck, &pkts, pmtu, &docs)
        }
        (Some(_), None) => super::reorder::physical_checks(&mut ck, &pkts, pmtu, &[]),
        _ => Value::Null,
    };
    // the steps scenarios: the capture's step structure, then the observer's and analyze's
    // `steps` against it
    let steps_json = if sc.steps.is_some_and(|s| s.per_second == 0) {
        // steady traffic: `steps` must be null on both paths
        let mut docs: Vec<(&str, Value)> = Vec::new();
        if let Some(bin) = observer.as_deref() {
            docs.push((
                "observer (run -i, kernel path)",
                json_file(&cdir.join("extra.out")),
            ));
            docs.push(("analyze (capture)", analyze_json(bin, pmtu, cap)));
        }
        let docs: Vec<(&str, &Value)> = docs.iter().map(|(w, d)| (*w, d)).collect();
        steady_checks(&mut ck, &pkts, &docs)
    } else if let Some(spec) = sc.steps {
        let nominal_ms = 1000.0 / spec.per_second as f64;
        let ws = wire_steps(&pkts, nominal_ms);
        let lqpns: Vec<u64> =
            guest_qps(&fs::read_to_string(cdir.join("rdma-qp.json")).unwrap_or_default())
                .iter()
                .map(|q| q.lqpn)
                .collect();
        let delayed = fs::read_to_string(sdir.join("qdisc.txt"))
            .ok()
            .and_then(|q| netem_sent_packets(&q));
        let truth = truth_checks(&mut ck, sc, &ws, &pkts, &lqpns, delayed);
        let mut docs = serde_json::Map::new();
        if let Some(bin) = observer.as_deref() {
            let obs: Value = json_file(&cdir.join("extra.out"));
            docs.insert(
                "observer".into(),
                steps_checks(&mut ck, sc, &ws, "observer (run -i, kernel path)", &obs),
            );
            let ana: Value = analyze_json(bin, pmtu, cap);
            docs.insert(
                "analyze".into(),
                steps_checks(&mut ck, sc, &ws, "analyze (capture)", &ana),
            );
        }
        json!({"wire": truth, "documents": docs})
    } else {
        Value::Null
    };

    // the loss scenarios: analyze's loss figures against what netem dropped (pre.pcap)
    let loss_json = match (sc.loss, observer.as_deref()) {
        (Some(_), Some(bin)) => {
            let ana: Value = analyze_json(bin, pmtu, cap);
            super::reorder::loss_checks(&mut ck, cdir, &pkts, pmtu, &ana)
        }
        _ => Value::Null,
    };
    // where was it lost: the loss scenarios' capture before netem against cap.pcap after it
    if let (Some(bin), true) = (observer.as_deref(), sc.loss.is_some()) {
        super::paths::path_checks(&mut ck, sc, bin, cap, cdir);
    }

    let name = sc.name.to_string();
    let perf = if sc.latency {
        format!("{:.0}us typ", pc.lat_typical_us.unwrap_or(f64::NAN))
    } else {
        format!("{:.2}MB/s", pc.bw_avg_mb.unwrap_or(f64::NAN))
    };
    let row = vec![
        name.clone(),
        format!("{:.0}s", wall),
        perf,
        pmtu.to_string(),
        format!("{}/{}", c2s.packets, s2c.packets),
        format!("{}/{}", g(&cc, "sent_pkts"), g(&scn, "rcvd_pkts")),
        format!("{}/{}", g(&scn, "sent_pkts"), g(&cc, "rcvd_pkts")),
        format!(
            "{}/{}",
            s2c.naks_seq + c2s.naks_seq,
            g(&scn, "out_of_seq_request") + g(&cc, "out_of_seq_request")
        ),
        format!(
            "{}/{}/{}",
            c2s.req_retransmissions + s2c.req_retransmissions,
            c2s.sim_duplicates + s2c.sim_duplicates,
            g(&scn, "duplicate_request") + g(&cc, "duplicate_request")
        ),
        format!(
            "{}/{}",
            c2s.req_gaps + s2c.req_gaps + s2c.resp_gaps,
            c2s.req_gaps_pmtu4096 + s2c.req_gaps_pmtu4096
        ),
        netem_dropped(cdir)
            .map(|d| d.to_string())
            .unwrap_or_else(|| "-".into()),
    ];
    let pj = |p: &Perftest| {
        json!({"rc": p.rc, "mtu": p.mtu, "bytes": p.bytes, "iterations": p.iterations,
               "initial_psn": p.local_psn,
               "bw_average_mb_s": p.bw_avg_mb, "msg_rate_mpps": p.msg_rate_mpps,
               "lat_typical_us": p.lat_typical_us, "lat_avg_us": p.lat_avg_us})
    };
    let json = json!({
        "scenario": name,
        "perftest": sc.perftest,
        "perftest_args": sc.perftest_args(),
        "link_mtu": sc.mtu,
        "path_mtu": pmtu,
        "netem_loss": sc.loss,
        "netem_dropped": netem_dropped(cdir),
        "capture": cap.file_name().map(|f| f.to_string_lossy().into_owned()),
        "capture_point": "client VM eth0 (after its egress qdisc)",
        "client_ip": CLIENT_IP,
        "server_ip": SERVER_IP,
        "wall_seconds": wall,
        "client_vm_seconds": client_secs,
        "client_status": cstat,
        "server_status": sstat,
        "perftest_client": pj(&pc),
        "perftest_server": pj(&ps),
        "rxe_counters_client": cc,
        "rxe_counters_server": scn,
        "wire_client_to_server": c2s.json(),
        "wire_server_to_client": s2c.json(),
        "extra_json": fs::read_to_string(cdir.join("extra.out"))
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok()),
        "observer_vs_analyze_vs_wire": observer_json,
        "steps": steps_json,
        "reorder": reorder_json,
        "reorder_physical": physical_json,
        "loss_truth": loss_json,
        "netem_reorder": sc.reorder.map(|r| json!({"netem": r.netem, "on": if r.on_server { "server" } else { "client" }})),
        "checks": ck.0.iter().map(|c| json!({"name": c.name, "expected": c.expected, "actual": c.actual, "ok": c.ok})).collect::<Vec<_>>(),
    });
    fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    Ok(Summary {
        checks: ck.0,
        row,
        flow_rows,
        json,
    })
}
