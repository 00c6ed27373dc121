//! The observer run in the client VM, against `analyze` on the same capture and the wire.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::SoftRoceOpts;
use super::check::Checks;
use super::outputs::read_kv;
use super::owners::owner_checks;
use super::scenarios::{CLIENT_IP, Scenario};
use super::wire::{Dir, FlowKey, flow_label};
use super::wire_flows::WireFlow;
use crate::util::output_checked;

/// The roce-observer binary that ran in the client VM: `--observer PATH` when given, else the
/// copy staged in the client's share when config.env's EXTRA_CMD is `/share/extra/NAME run
/// ...` (so `--reanalyze` checks an observer run again without being told).
pub(super) fn observer_bin(opts: &SoftRoceOpts, cdir: &Path) -> Result<Option<PathBuf>> {
    if let Some(obs) = &opts.observer {
        return Ok(Some(
            fs::canonicalize(obs).with_context(|| obs.display().to_string())?,
        ));
    }
    let cfg = read_kv(&cdir.join("config.env"));
    let Some(cmd) = cfg.get("EXTRA_CMD") else {
        return Ok(None);
    };
    let cmd = cmd.trim_matches('\'');
    let mut words = cmd.split_whitespace();
    let (Some(bin), Some("run")) = (words.next(), words.next()) else {
        return Ok(None);
    };
    let staged = bin
        .strip_prefix("/share/extra/")
        .map(|name| cdir.join("extra").join(name));
    Ok(staged.filter(|p| p.exists()))
}

fn flows_by_key(doc: &Value) -> BTreeMap<FlowKey, Vec<&Value>> {
    let mut m: BTreeMap<FlowKey, Vec<&Value>> = BTreeMap::new();
    for f in doc["flows"].as_array().into_iter().flatten() {
        let key = (
            f["src_ip"].as_str().unwrap_or("?").to_string(),
            f["dst_ip"].as_str().unwrap_or("?").to_string(),
            f["dst_qp"].as_u64().unwrap_or(u64::MAX) as u32,
        );
        m.entry(key).or_default().push(f);
    }
    m
}

/// NAKs of a flow record, all classes.
fn naks_total(f: &Value) -> u64 {
    f["naks"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0)
}

/// Fields of a flow record that `analyze` and the kernel path must agree on (docs/metrics.md;
/// time-derived fields, iface and direction aside).
const OBSERVER_FIELDS: &[&str] = &[
    "packets",
    "bytes",
    "opcodes",
    "psn_gaps",
    "psn_missing",
    "retransmits",
    "req_retransmits",
    "resp_retransmits",
    "acks",
    "naks",
    "cnp",
    "ecn_ce",
    "ecn_ect",
    "peer_qp",
    "udp_src_ports",
    "udp_src_port_overflow",
    "transport",
    "other_transport",
    "dscp",
    "pcp",
    "reordered",
    "reorder_distance_max",
    "reorder_distance",
    "reorder_naks",
    "psn_holes",
];

/// The reordering figures of a wire record as the flow record spells them (docs/metrics.md).
pub(super) fn wire_reorder_fields(wf: &WireFlow) -> [(&'static str, Value); 5] {
    let f = &wf.psn;
    [
        ("reordered", json!(f.reordered)),
        ("reorder_distance_max", json!(f.reorder_distance_max)),
        ("reorder_distance", f.hist_json()),
        ("reorder_naks", json!(f.reorder_naks)),
        ("psn_holes", json!(f.psn_holes)),
    ]
}

/// What the observer checks need from the rest of the analysis.
pub(super) struct ObserverInputs<'a> {
    pub(super) sc: &'a Scenario,
    pub(super) bin: &'a Path,
    pub(super) cap: &'a Path,
    pub(super) cdir: &'a Path,
    pub(super) wire: &'a BTreeMap<FlowKey, WireFlow>,
    pub(super) c2s: &'a Dir,
    pub(super) s2c: &'a Dir,
    pub(super) client_sent_pkts: i64,
    pub(super) netem_dropped: Option<i64>,
    /// The reorder scenarios with netem on the client: the flows as TC egress saw them (pre.pcap
    /// before netem, merged with cap.pcap's server packets), and pre.pcap's client packets.
    pub(super) egress_truth: Option<&'a (BTreeMap<FlowKey, WireFlow>, u64)>,
}

/// Checks of the observer's JSON document (kernel path, XDP ingress + TC egress on the client's
/// eth0) against `analyze` on the capture of the same run, and of `analyze` against the wire
/// figures (tshark). Returns the per-flow table rows and the figures for summary.json.
pub(super) fn observer_checks(ck: &mut Checks, inp: &ObserverInputs) -> (Vec<Vec<String>>, Value) {
    let sc = inp.sc;
    let status = read_kv(&inp.cdir.join("status.env"));
    // the observer installs a SIGINT handler and exits 0 on it (guest-init.sh sends SIGINT,
    // then SIGTERM after 10 s, then SIGKILL; EXTRA_SIGNAL is the last one sent)
    ck.eq(
        "observer stopped by SIGINT, exit code",
        "INT, 0".to_string(),
        format!(
            "{}, {}",
            status.get("EXTRA_SIGNAL").map_or("none", |s| s.as_str()),
            status.get("EXTRA_RC").map_or("none", |s| s.as_str())
        ),
    );
    let doc: Option<Value> = fs::read_to_string(inp.cdir.join("extra.out"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .filter(|d: &Value| d["flows"].is_array() && d["summary"].is_object());
    ck.truth(
        "observer printed its JSON document (vm-client/extra.out)",
        "a document with flows and summary",
        if doc.is_some() {
            "yes"
        } else {
            "no (see vm-client/extra.err)"
        }
        .into(),
        doc.is_some(),
    );
    let pmtu = sc.expected_pmtu();
    let ana: Result<Value> = output_checked(
        Command::new(inp.bin)
            .args(["analyze", "--json", "--pmtu", &pmtu.to_string()])
            .arg(inp.cap),
    )
    .and_then(|s| serde_json::from_str(&s).context("analyze --json output"));
    ck.truth(
        "roce-observer analyze --json on cap.pcap",
        "runs",
        match &ana {
            Ok(_) => "ran".into(),
            Err(e) => format!("{e:#}"),
        },
        ana.is_ok(),
    );
    let Ok(ana) = ana else {
        return (Vec::new(), Value::Null);
    };
    // without the observer's document the checks of analyze against the wire still run (and
    // every check of the observer fails: no records)
    let doc = doc.unwrap_or_else(|| json!({"flows": [], "summary": {}}));
    let lossy = sc.loss.is_some();
    let owners = owner_checks(ck, sc, inp.cdir, &doc);

    // summary of the kernel path
    let s = &doc["summary"];
    for k in ["malformed", "events_lost", "map_full"] {
        ck.eq(&format!("observer summary {k}"), json!(0), s[k].clone());
    }
    let bd = &s["by_direction"];
    ck.eq(
        "observer ingress RoCE packets == wire server->client",
        json!(inp.s2c.packets),
        bd["ingress"]["roce_packets"].clone(),
    );
    if lossy {
        ck.eq(
            "observer egress RoCE packets == client sent_pkts (TC egress is before netem)",
            json!(inp.client_sent_pkts),
            bd["egress"]["roce_packets"].clone(),
        );
    } else {
        ck.eq(
            "observer egress RoCE packets == wire client->server",
            json!(inp.c2s.packets),
            bd["egress"]["roce_packets"].clone(),
        );
    }
    ck.eq(
        "analyze summary malformed",
        json!(0),
        ana["summary"]["malformed"].clone(),
    );

    let obs = flows_by_key(&doc);
    let anf = flows_by_key(&ana);
    let keys = |m: &BTreeMap<FlowKey, Vec<&Value>>| -> String {
        m.keys().map(flow_label).collect::<Vec<_>>().join(", ")
    };
    let wire_keys = inp
        .wire
        .keys()
        .map(flow_label)
        .collect::<Vec<_>>()
        .join(", ");
    ck.eq("analyze flows == wire flows", wire_keys, keys(&anf));
    ck.eq("observer flows == analyze flows", keys(&anf), keys(&obs));

    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for (key, wf) in inp.wire {
        let label = flow_label(key);
        let Some(a) = anf.get(key).and_then(|v| v.first().copied()) else {
            continue;
        };
        // 2. analyze against the wire (tshark + docs/metrics.md rules, computed here)
        let mut wire_fields: Vec<(&str, Value, Value)> = vec![
            ("packets", json!(wf.packets), a["packets"].clone()),
            ("bytes", json!(wf.bytes), a["bytes"].clone()),
            ("opcodes", json!(wf.opcodes), a["opcodes"].clone()),
            ("acks", json!(wf.acks), a["acks"].clone()),
            (
                "naks.psn_seq_err",
                json!(wf.naks_psn_seq_err),
                a["naks"]["psn_seq_err"].clone(),
            ),
            (
                "other NAKs",
                json!(wf.naks_other),
                json!(naks_total(a) - a["naks"]["psn_seq_err"].as_u64().unwrap_or(0)),
            ),
            (
                "req_retransmits",
                json!(wf.req_retransmits),
                a["req_retransmits"].clone(),
            ),
            (
                "resp_retransmits",
                json!(wf.resp_retransmits),
                a["resp_retransmits"].clone(),
            ),
            ("psn_gaps", json!(wf.psn_gaps), a["psn_gaps"].clone()),
            (
                "psn_missing",
                json!(wf.psn_missing),
                a["psn_missing"].clone(),
            ),
            ("ecn_ce", json!(wf.ecn_ce), a["ecn_ce"].clone()),
            ("ecn_ect", json!(wf.ecn_ect), a["ecn_ect"].clone()),
            (
                "udp_src_ports",
                json!(wf.udp_src_ports),
                a["udp_src_ports"].clone(),
            ),
        ];
        for (field, w) in wire_reorder_fields(wf) {
            wire_fields.push((field, w, a[field].clone()));
        }
        for (field, w, av) in wire_fields {
            ck.eq(&format!("analyze == wire, {label}: {field}"), w, av);
        }

        // 1. the kernel path against analyze
        let egress = key.0 == CLIENT_IP;
        let point = if egress { "egress" } else { "ingress" };
        let o_all = obs.get(key).cloned().unwrap_or_default();
        ck.eq(
            &format!("observer records of {label}"),
            format!("1, eth0/{point}"),
            format!(
                "{}, {}",
                o_all.len(),
                o_all
                    .iter()
                    .map(|f| format!(
                        "{}/{}",
                        f["iface"].as_str().unwrap_or("?"),
                        f["direction"].as_str().unwrap_or("?")
                    ))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
        let Some(o) = o_all.first().copied() else {
            continue;
        };
        if let (true, Some(truth)) = (egress, inp.egress_truth) {
            reorder_egress_checks(ck, inp, &label, truth, a, o);
        } else if egress && lossy {
            lossy_egress_checks(ck, inp, &label, wf, a, o);
        } else {
            for field in OBSERVER_FIELDS {
                ck.eq(
                    &format!("observer == analyze, {label} ({point}): {field}"),
                    a[*field].clone(),
                    o[*field].clone(),
                );
            }
            // the latency samples' values differ (clocks), their number must not: the same
            // requests are timestamped and answered at both points
            ck.eq(
                &format!("observer == analyze, {label} ({point}): rtt_ns.count"),
                a["rtt_ns"]["count"].clone(),
                o["rtt_ns"]["count"].clone(),
            );
        }

        let n = |v: &Value| v.as_u64().map_or("?".into(), |x| x.to_string());
        rows.push(vec![
            sc.name.to_string(),
            label.clone(),
            point.to_string(),
            format!("{}/{}/{}", wf.packets, n(&a["packets"]), n(&o["packets"])),
            format!(
                "{}/{}/{}",
                wf.req_retransmits + wf.resp_retransmits,
                n(&a["retransmits"]),
                n(&o["retransmits"])
            ),
            format!(
                "{}/{}/{}",
                wf.naks_psn_seq_err + wf.naks_other,
                naks_total(a),
                naks_total(o)
            ),
            format!(
                "{}/{}/{}",
                wf.psn_gaps,
                n(&a["psn_gaps"]),
                n(&o["psn_gaps"])
            ),
            format!(
                "{}/{}/{}",
                wf.psn.reordered,
                n(&a["reordered"]),
                n(&o["reordered"])
            ),
        ]);
        let pick = |f: &Value| -> Value {
            let mut m = serde_json::Map::new();
            for k in OBSERVER_FIELDS {
                m.insert((*k).into(), f[*k].clone());
            }
            m.insert("rtt_samples".into(), f["rtt_ns"]["count"].clone());
            Value::Object(m)
        };
        figures.push(json!({
            "flow": label,
            "observer_point": format!("eth0/{point}"),
            "wire": {
                "packets": wf.packets, "bytes": wf.bytes, "opcodes": wf.opcodes,
                "acks": wf.acks, "naks_psn_seq_err": wf.naks_psn_seq_err,
                "naks_other": wf.naks_other, "req_retransmits": wf.req_retransmits,
                "resp_retransmits": wf.resp_retransmits, "psn_gaps": wf.psn_gaps,
                "psn_missing": wf.psn_missing, "ecn_ce": wf.ecn_ce, "ecn_ect": wf.ecn_ect,
                "udp_src_ports": wf.udp_src_ports,
                "reorder": super::reorder::figures_json(wf),
                "psn_evidence": super::reorder::evidence_json(&wf.psn),
            },
            "analyze": pick(a),
            "observer": pick(o),
        }));
    }
    let json = json!({
        "binary": inp.bin.display().to_string(),
        "observer_summary": {
            "malformed": s["malformed"], "events_lost": s["events_lost"],
            "map_full": s["map_full"], "by_direction": bd,
        },
        "flows": figures,
        "owners": owners,
    });
    (rows, json)
}

/// What the packets the capture lacks (netem dropped them after TC egress saw them) add to the
/// observer's byte count, from the per-opcode counts of the observer and of the capture.
#[derive(Debug, PartialEq)]
pub(super) struct DroppedBytes {
    /// The byte surplus lies in lo..=hi (equal when every opcode has one frame length).
    pub(super) lo: u64,
    pub(super) hi: u64,
    /// Opcodes the capture has more of than the observer.
    pub(super) bad: Vec<String>,
    /// Opcodes the observer has more of, but which are absent from the capture (no length).
    pub(super) unbounded: Vec<String>,
}

/// The packets netem dropped are the observer's surplus per opcode. Each dropped packet has one
/// of the frame lengths its opcode has on the wire (every PSN reaches the wire eventually, a
/// resend has the length of the original), so the byte surplus lies between the surplus counts
/// times the shortest and times the longest length: exact when each opcode has one length
/// (WRITE/READ of whole MTUs), a bound otherwise.
pub(super) fn dropped_bytes(
    observer: &Value,
    capture: &Value,
    op_lens: &BTreeMap<String, BTreeSet<u32>>,
) -> DroppedBytes {
    let mut names: BTreeSet<&String> = BTreeSet::new();
    for m in [observer, capture].iter().filter_map(|v| v.as_object()) {
        names.extend(m.keys());
    }
    let mut d = DroppedBytes {
        lo: 0,
        hi: 0,
        bad: Vec::new(),
        unbounded: Vec::new(),
    };
    for k in names {
        let (x, y) = (
            observer[k].as_u64().unwrap_or(0),
            capture[k].as_u64().unwrap_or(0),
        );
        if x < y {
            d.bad.push(format!("{k} {x} < {y}"));
            continue;
        }
        let lens = op_lens.get(k);
        match (lens.and_then(|l| l.first()), lens.and_then(|l| l.last())) {
            (Some(&min), Some(&max)) => {
                d.lo += (x - y) * u64::from(min);
                d.hi += (x - y) * u64::from(max);
            }
            _ if x == y => {}
            // the observer saw an opcode the capture never has: one of its PSNs never
            // reached the wire, which the PSN checks would also flag
            _ => d
                .unbounded
                .push(format!("{k} ({} on the observer only)", x - y)),
        }
    }
    d
}

/// The client's own requests under netem loss. TC egress runs before the root qdisc (netem);
/// tcpdump's tap is after it. So the observer counts every packet rxe sent, the capture only
/// those netem let through, and the exact relations are:
/// - observer packets == rxe's sent_pkts (client), and observer - capture == the RoCE packets
///   netem dropped (sent_pkts - wire), at most netem's own drop count (which also counts the
///   odd TCP packet of perftest's out-of-band exchange);
/// - per opcode, observer >= capture; the byte difference is the dropped packets' frame
///   lengths (exact when each opcode has one frame length, else bounded by the shortest and
///   longest length of each opcode);
/// - no gap: a requester sends every new PSN in order, and TC sees all of them;
/// - so each distinct request PSN on the wire is new exactly once at TC, and every other
///   request packet TC saw is a retransmission: retransmits == packets - ACK/NAKs - distinct
///   request PSNs (the capture has every PSN, checked above);
/// - everything not about the dropped packets (ACKs, NAKs, CNP, ECN, peer QP, ports) is equal.
fn lossy_egress_checks(
    ck: &mut Checks,
    inp: &ObserverInputs,
    label: &str,
    wf: &WireFlow,
    a: &Value,
    o: &Value,
) {
    let name = |what: &str| format!("observer vs analyze, {label} (egress before netem): {what}");
    let u = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
    let (op, ap) = (u(&o["packets"]), u(&a["packets"]));
    ck.eq(
        &name("packets == client sent_pkts"),
        inp.client_sent_pkts,
        op as i64,
    );
    ck.range(
        &name("observer - capture packets (RoCE dropped by netem) <= netem drops"),
        0,
        inp.netem_dropped.unwrap_or(0),
        op as i64 - ap as i64,
    );
    let d = dropped_bytes(&o["opcodes"], &a["opcodes"], &wf.op_lens);
    let (lo, hi, bad, unbounded) = (d.lo, d.hi, d.bad, d.unbounded);
    ck.truth(
        &name("every opcode count >= the capture's"),
        "observer >= capture",
        if bad.is_empty() {
            "yes".into()
        } else {
            bad.join(", ")
        },
        bad.is_empty(),
    );
    ck.truth(
        &name("every opcode the observer saw is on the wire (its frame lengths are known)"),
        "yes",
        if unbounded.is_empty() {
            "yes".into()
        } else {
            unbounded.join(", ")
        },
        unbounded.is_empty(),
    );
    let what = if lo == hi {
        "bytes - capture bytes == sum of the dropped packets' frame lengths"
    } else {
        "bytes - capture bytes within the dropped packets' shortest..longest frame lengths"
    };
    ck.range(
        &name(what),
        lo as i64,
        hi as i64,
        u(&o["bytes"]) as i64 - u(&a["bytes"]) as i64,
    );
    // TC sees rxe's own order: nothing skipped, nothing out of order
    for field in [
        "psn_gaps",
        "psn_missing",
        "reordered",
        "reorder_distance_max",
        "reorder_naks",
        "psn_holes",
    ] {
        ck.eq(&name(field), json!(0), o[field].clone());
    }
    let acks_naks = u(&o["acks"]) + naks_total(o);
    ck.eq(
        &name("req_retransmits == packets - ACK/NAKs - distinct request PSNs on the wire"),
        op.saturating_sub(acks_naks)
            .saturating_sub(wf.distinct_request_psns) as i64,
        u(&o["req_retransmits"]) as i64,
    );
    // every other field is equal
    let about_the_dropped = [
        "packets",
        "bytes",
        "opcodes",
        "psn_gaps",
        "psn_missing",
        "retransmits",
        "req_retransmits",
        "reordered",
        "reorder_distance_max",
        "reorder_distance",
        "reorder_naks",
        "psn_holes",
    ];
    for field in OBSERVER_FIELDS
        .iter()
        .filter(|f| !about_the_dropped.contains(f))
    {
        ck.eq(&name(field), a[*field].clone(), o[*field].clone());
    }
}

/// The client's requests reordered by netem after TC egress: the observer saw them as rxe sent
/// them, which pre.pcap (captured at clsact egress, before the root qdisc) shows. Its record of
/// that flow must equal the wire record of pre.pcap (merged with cap.pcap's server packets for
/// the NAKs): every figure the wire record has, the PSN figures included (no first copy out of
/// order there, so no reordering, no loss, no NAK caused by reordering, and every copy after
/// the first a retransmission); the rest (peer QP, transport, DSCP ...) equals analyze's. And
/// netem drops nothing: observer packets == capture packets == pre.pcap's == rxe's sent_pkts.
fn reorder_egress_checks(
    ck: &mut Checks,
    inp: &ObserverInputs,
    label: &str,
    (truth, pre_packets): &(BTreeMap<FlowKey, WireFlow>, u64),
    a: &Value,
    o: &Value,
) {
    let name = |what: &str| format!("observer == pre.pcap, {label} (egress before netem): {what}");
    let key = (
        o["src_ip"].as_str().unwrap_or("?").to_string(),
        o["dst_ip"].as_str().unwrap_or("?").to_string(),
        o["dst_qp"].as_u64().unwrap_or(u64::MAX) as u32,
    );
    ck.eq(
        &name("packets == capture packets == pre.pcap's == client sent_pkts"),
        format!("{0} {0} {0}", inp.client_sent_pkts),
        format!("{} {} {}", o["packets"], a["packets"], pre_packets),
    );
    let Some(t) = truth.get(&key) else {
        ck.truth(&name("flow in pre.pcap"), "present", "absent".into(), false);
        return;
    };
    let mut fields: Vec<(&str, Value)> = vec![
        ("packets", json!(t.packets)),
        ("bytes", json!(t.bytes)),
        ("opcodes", json!(t.opcodes)),
        ("acks", json!(t.acks)),
        ("req_retransmits", json!(t.req_retransmits)),
        ("resp_retransmits", json!(t.resp_retransmits)),
        ("retransmits", json!(t.req_retransmits + t.resp_retransmits)),
        ("psn_gaps", json!(t.psn_gaps)),
        ("psn_missing", json!(t.psn_missing)),
        ("ecn_ce", json!(t.ecn_ce)),
        ("ecn_ect", json!(t.ecn_ect)),
        ("udp_src_ports", json!(t.udp_src_ports)),
    ];
    fields.extend(wire_reorder_fields(t));
    for (field, tv) in &fields {
        ck.eq(&name(field), tv.clone(), o[*field].clone());
    }
    ck.eq(
        &name("naks"),
        json!(t.naks_psn_seq_err + t.naks_other),
        json!(naks_total(o)),
    );
    let from_truth: Vec<&str> = fields.iter().map(|(f, _)| *f).collect();
    for field in OBSERVER_FIELDS
        .iter()
        .filter(|f| !from_truth.contains(f) && **f != "naks")
    {
        ck.eq(
            &format!("observer == analyze, {label} (egress): {field}"),
            a[*field].clone(),
            o[*field].clone(),
        );
    }
}
