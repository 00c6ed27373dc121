//! The reorder scenarios (netem `delay .. reorder ..` on one VM's egress): what the capture
//! must show for the scenario to test anything, the ground truth of the observer's kernel path
//! when the reordering happens after it (the client's requests: TC egress is before netem),
//! and the evidence for the reorder window (distances, what the window cost).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde_json::{Value, json};

use super::check::Checks;
use super::outputs::netem_dropped;
use super::psn_truth::{BUCKETS, PsnFigures, WINDOW};
use super::scenarios::{CLIENT_IP, Op, Reorder, SERVER_IP, Scenario};
use super::wire::{FlowKey, Pkt, flow_label, tshark_packets};
use super::wire_flows::{WireFlow, wire_flows_of};

/// Fewest first copies the capture must show arriving after a higher PSN (RFC 4737, no
/// window) on the reordered flow: below it the scenario tests nothing.
pub(super) const MIN_REORDERED: u64 = 50;

/// The flow netem reorders: the client's requests (WRITE) or the server's READ responses.
pub(super) fn reordered_flow<'a>(
    sc: &Scenario,
    r: &Reorder,
    wire: &'a BTreeMap<FlowKey, WireFlow>,
) -> Option<(&'a FlowKey, &'a WireFlow)> {
    let src = if r.on_server { SERVER_IP } else { CLIENT_IP };
    wire.iter()
        .filter(|(k, _)| k.0 == src)
        .max_by_key(|(_, w)| match sc.op {
            Op::Read if r.on_server => w.opcodes.values().sum::<u64>(),
            _ => w.distinct_request_psns,
        })
}

/// Checks on the capture itself (the ground truth's premises) and the evidence for the window.
pub(super) fn capture_checks(
    ck: &mut Checks,
    sc: &Scenario,
    r: &Reorder,
    (sdir, cdir): (&Path, &Path),
    wire: &BTreeMap<FlowKey, WireFlow>,
) -> Value {
    let ndir = if r.on_server { sdir } else { cdir };
    let side = if r.on_server { "server" } else { "client" };
    ck.eq(
        &format!("netem reorder on the {side}: packets dropped (netem reorders, drops nothing)"),
        "0".to_string(),
        netem_dropped(ndir).map_or("no netem statistics (qdisc.txt)".into(), |d| d.to_string()),
    );
    let never: u64 = wire.values().map(|w| w.psn.raw_never_seen).sum();
    ck.eq(
        "reorder: request PSNs between a flow's first and highest never seen in the capture",
        0,
        never,
    );
    let Some((key, w)) = reordered_flow(sc, r, wire) else {
        ck.truth(
            "reorder: the reordered flow is in the capture",
            "present",
            "absent".into(),
            false,
        );
        return Value::Null;
    };
    let label = flow_label(key);
    ck.truth(
        &format!(
            "reorder: first copies arriving after a higher PSN (RFC 4737, no window), {label}"
        ),
        &format!(">= {MIN_REORDERED}"),
        w.psn.raw_reordered.to_string(),
        w.psn.raw_reordered >= MIN_REORDERED,
    );
    if sc.op == Op::Write {
        // the responder sees the capture's order (the link after the capture point is FIFO):
        // a request ahead of the expected PSN is NAKed (rxe: once per gap)
        let naks: u64 = wire
            .iter()
            .filter(|(k, _)| k.0 == SERVER_IP)
            .map(|(_, w)| w.naks_psn_seq_err)
            .sum();
        ck.truth(
            "reorder: rxe NAKed the reordered requests (sequence-error NAKs > 0)",
            "> 0",
            naks.to_string(),
            naks > 0,
        );
    }
    json!({
        "flow": label,
        "window": WINDOW,
        "definitions": figures_json(w),
        "evidence": evidence_json(&w.psn),
        "flows": wire.iter().map(|(k, w)| json!({
            "flow": flow_label(k), "definitions": figures_json(w), "evidence": evidence_json(&w.psn),
        })).collect::<Vec<_>>(),
    })
}

pub(super) fn figures_json(w: &WireFlow) -> Value {
    let f = &w.psn;
    json!({
        "packets": w.packets,
        "distinct_request_psns": w.distinct_request_psns,
        "reordered": f.reordered, "reorder_distance_max": f.reorder_distance_max,
        "reorder_distance": f.hist_json(),
        "req_retransmits": f.req_retransmits, "resp_retransmits": f.resp_retransmits,
        "psn_missing": f.psn_missing, "psn_gaps": f.psn_gaps,
        "reorder_naks": f.reorder_naks, "psn_holes": f.psn_holes,
        "naks_psn_seq_err": w.naks_psn_seq_err,
    })
}

pub(super) fn evidence_json(f: &PsnFigures) -> Value {
    json!({
        "raw_reordered": f.raw_reordered,
        "raw_distance_max": f.raw_distance_max,
        "raw_distance": BUCKETS.iter().zip(f.raw_hist).map(|(b, n)| ((*b).to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "raw_never_seen": f.raw_never_seen,
        "lost_by_nak": f.lost_by_nak, "lost_by_window": f.lost_by_window,
        "lost_by_resend_run": f.lost_by_resend_run, "corrections": f.corrections,
        "naks_unattributed": f.naks_unattributed,
        "reordered_examples": f.reordered_examples.iter()
            .map(|(p, d)| json!({"psn": p, "distance": d})).collect::<Vec<_>>(),
        "not_reordered": f.not_reordered,
        "hole_age_ms_reordered": quantiles_ms(&f.hole_age_reordered),
        "hole_age_ms_resend_run_lost": quantiles_ms(&f.hole_age_resend_run),
        "answer_time_ms": quantiles_ms(&f.answer_times),
        "not_reordered_examples": f.not_reordered_examples.iter()
            .map(|(p, d, why)| json!({"psn": p, "distance": d, "why": why})).collect::<Vec<_>>(),
    })
}

/// The kernel path's truth when netem reorders the client's requests: TC egress sees them
/// before netem, as pre.pcap does (a mirror at clsact egress, before the root qdisc), and the
/// server's packets (XDP ingress) as cap.pcap does; merged in time order (one clock, the
/// client VM's).
pub(super) fn egress_truth(
    cdir: &Path,
    cap_pkts: &[Pkt],
    pmtu: u64,
) -> Result<(BTreeMap<FlowKey, WireFlow>, u64)> {
    let pre = tshark_packets(&cdir.join("pre.pcap"))?;
    let mut merged: Vec<&Pkt> = pre
        .iter()
        .filter(|p| p.src == CLIENT_IP)
        .chain(cap_pkts.iter().filter(|p| p.src != CLIENT_IP))
        .collect();
    merged.sort_by(|a, b| a.time.total_cmp(&b.time));
    let pre_client = pre.iter().filter(|p| p.src == CLIENT_IP).count() as u64;
    Ok((wire_flows_of(&merged, pmtu), pre_client))
}

/// min / median / max of durations in seconds, in ms, and their number.
fn quantiles_ms(v: &[f64]) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    let mut v: Vec<f64> = v.iter().map(|s| s * 1e3).collect();
    v.sort_by(f64::total_cmp);
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"n": v.len(), "min": r(v[0]), "median": r(v[v.len() / 2]), "max": r(v[v.len() - 1])})
}

/// What netem did to one request flow, counted without the definitions' rules for telling
/// loss from reordering (which a capture of unknown losses needs, and this one does not:
/// netem reorders and drops nothing, checked): RFC 4737's Type-P-Reordered singletons and
/// every later copy a retransmission, with only the window's limit applied as the definitions
/// state it (a hole open while the expected PSN moved more than `WINDOW` PSNs past it is
/// declared lost, and its first copy is a retransmission). NAKs: rxe NAKs a PSN ahead of the
/// expected one, and nothing was lost, so every attributed sequence-error NAK naming a PSN not
/// lost to the window was caused by reordering.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Physical {
    pub(super) reordered: u64,
    pub(super) reorder_distance_max: u32,
    pub(super) reorder_hist: [u64; 6],
    pub(super) req_retransmits: u64,
    pub(super) psn_missing: u64,
    pub(super) psn_gaps: u64,
    pub(super) psn_holes: u64,
    pub(super) reorder_naks: u64,
    /// Late first copies the wire cannot tell from the start of a go-back-N resend run: the
    /// next request repeats the PSN after it (docs/metrics.md, "What one observation point
    /// cannot tell apart"). An observer may count each as lost and resent instead of reordered.
    pub(super) ambiguous: u64,
}

impl Physical {
    pub(super) fn fields(&self) -> [(&'static str, Value); 7] {
        [
            ("reordered", json!(self.reordered)),
            ("reorder_distance_max", json!(self.reorder_distance_max)),
            (
                "reorder_distance",
                Value::Object(
                    BUCKETS
                        .iter()
                        .zip(self.reorder_hist)
                        .map(|(b, n)| ((*b).to_string(), json!(n)))
                        .collect(),
                ),
            ),
            ("req_retransmits", json!(self.req_retransmits)),
            ("psn_missing", json!(self.psn_missing)),
            ("psn_gaps", json!(self.psn_gaps)),
            ("reorder_naks", json!(self.reorder_naks)),
        ]
    }
}

/// [`Physical`] of the requests `src` sends to `dst` (one QP each way in these scenarios). The
/// NAKs are those `dst` sends back once an answer matched a timestamped request (the observer
/// attributes a NAK to its request flow from then on).
pub(super) fn physical(pkts: &[Pkt], src: &str, dst: &str, pmtu: u64) -> Physical {
    use super::psn_truth::bucket;
    use super::wire::{is_request, psn_diff, span};
    use std::collections::{BTreeSet, HashSet};
    let mut ph = Physical::default();
    let (mut highest, mut expected, mut hi_abs): (Option<u32>, u32, i64) = (None, 0, 0);
    let mut seen: HashSet<i64> = HashSet::new();
    let mut lost: BTreeSet<i64> = BTreeSet::new();
    // timestamped requests waiting for an answer (the observer's peer learning)
    let mut waiting: HashSet<u32> = HashSet::new();
    let mut peer_known = false;
    let mut naks: Vec<i64> = Vec::new();
    // The PSN after the last late first copy, while the next request is awaited.
    let mut after_late: Option<u32> = None;
    for p in pkts {
        if p.src == src && p.dst == dst && is_request(p.opcode) {
            let s = span(p, pmtu);
            let after = after_late.take();
            let Some(h) = highest else {
                highest = Some(p.psn);
                expected = super::wire::psn_add(p.psn, s);
                for i in 0..s {
                    seen.insert(i64::from(i));
                }
                if p.ack_req || p.opcode == 0x0C {
                    waiting.insert(p.psn);
                }
                continue;
            };
            let a = hi_abs + i64::from(psn_diff(p.psn, h));
            let first = !seen.contains(&a);
            if !first && after == Some(p.psn) {
                ph.ambiguous += 1;
            }
            for i in 0..s {
                seen.insert(a + i64::from(i));
            }
            let older = psn_diff(p.psn, expected) < 0;
            if !older {
                highest = Some(p.psn);
                hi_abs = a;
                expected = super::wire::psn_add(p.psn, s);
            } else if !first {
                ph.req_retransmits += 1;
            } else if psn_diff(expected, p.psn) > WINDOW as i32 {
                // its hole outlived the window: lost, and this copy a retransmission
                ph.req_retransmits += 1;
                for i in 0..s {
                    lost.insert(a + i64::from(i));
                }
            } else {
                let d = psn_diff(h, p.psn).max(0) as u32;
                ph.reordered += 1;
                ph.reorder_distance_max = ph.reorder_distance_max.max(d);
                ph.reorder_hist[bucket(d)] += 1;
                after_late = Some(super::wire::psn_add(p.psn, s));
            }
            if first && (p.ack_req || p.opcode == 0x0C) {
                waiting.insert(p.psn);
            }
        } else if p.src == dst && p.dst == src && matches!(p.opcode, 0x11 | 0x12 | 0x0D | 0x10) {
            if p.syndrome == Some(0x60)
                && matches!(p.opcode, 0x11 | 0x12)
                && peer_known
                && let Some(h) = highest
            {
                naks.push(hi_abs + i64::from(psn_diff(p.psn, h)));
            }
            if waiting.remove(&p.psn) {
                peer_known = true;
            }
        }
    }
    // holes never closed: lost when the window moved past them, else still open
    let Some(h) = highest else {
        return ph;
    };
    let exp_abs = hi_abs + i64::from(psn_diff(expected, h));
    for a in 0..exp_abs {
        if !seen.contains(&a) {
            if exp_abs - a > i64::from(WINDOW) {
                lost.insert(a);
            } else {
                ph.psn_holes += 1;
            }
        }
    }
    ph.psn_missing = lost.len() as u64;
    ph.psn_gaps = lost.iter().filter(|&&a| !lost.contains(&(a - 1))).count() as u64;
    ph.reorder_naks = naks.iter().filter(|a| !lost.contains(a)).count() as u64;
    ph
}

/// The reorder scenarios: the documents whose observation point saw the capture's order
/// (`analyze`; the kernel path too when netem is on the server) against [`physical`], per
/// request flow: do they count reordering as reordering and nothing as lost?
pub(super) fn physical_checks(
    ck: &mut Checks,
    pkts: &[Pkt],
    pmtu: u64,
    docs: &[(&str, &Value)],
) -> Value {
    let mut out = Vec::new();
    for (src, dst) in [(CLIENT_IP, SERVER_IP), (SERVER_IP, CLIENT_IP)] {
        if !pkts
            .iter()
            .any(|p| p.src == src && super::wire::is_request(p.opcode))
        {
            continue;
        }
        let ph = physical(pkts, src, dst, pmtu);
        for (what, doc) in docs {
            let recs: Vec<&Value> = doc["flows"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| f["src_ip"] == src && f["dst_ip"] == dst)
                .collect();
            let Some(rec) = recs.first() else {
                ck.truth(
                    &format!("reorder, {what}: a record of {src}>{dst}"),
                    "present",
                    "absent".into(),
                    false,
                );
                continue;
            };
            for (field, v) in ph.fields() {
                let name = format!(
                    "reorder: {what} == the capture's reordering (RFC 4737, window {WINDOW}, nothing lost), {src}>{dst}: {field}"
                );
                let amb = ph.ambiguous as i64;
                let (exact, got) = (v.as_i64().unwrap_or(0), rec[field].as_i64().unwrap_or(-1));
                match field {
                    // Each ambiguous copy may be read as a loss and a resend instead.
                    "reordered" if amb > 0 => ck.range(&name, exact - amb, exact, got),
                    "req_retransmits" | "psn_missing" | "psn_gaps" if amb > 0 => {
                        ck.range(&name, exact, exact + amb, got)
                    }
                    "reorder_distance_max" if amb > 0 => ck.range(&name, 0, exact, got),
                    "reorder_distance" if amb > 0 => {
                        let off: i64 = BUCKETS
                            .iter()
                            .map(|b| {
                                (v[*b].as_i64().unwrap_or(0) - rec[field][*b].as_i64().unwrap_or(0))
                                    .abs()
                            })
                            .sum();
                        ck.range(&format!("{name} (buckets off in all)"), 0, amb, off)
                    }
                    _ => ck.eq(&name, v, rec[field].clone()),
                }
            }
        }
        out.push(json!({
            "flow": format!("{src}>{dst}"),
            "physical": Value::Object(ph.fields().into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
            "ambiguous": ph.ambiguous,
            "psn_holes": ph.psn_holes,
        }));
    }
    Value::Array(out)
}

/// What netem loss did to the client's requests, from the two captures: cap.pcap (after netem)
/// is pre.pcap (before it) less the packets netem dropped, in the same order, so aligning the
/// two names the dropped packets. A PSN whose first transmission was dropped and whose first
/// copy after netem (a resend) arrived after a higher PSN is lost as the capture can see it;
/// a dropped last PSN resent before anything higher arrived cannot be told from an in-order
/// one there. netem loss reorders nothing.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct LossTruth {
    /// Request PSNs lost as the capture sees them (with the READ reservations), oldest first.
    pub(super) lost: Vec<u32>,
    /// Loss events: runs of consecutive lost PSNs.
    pub(super) events: u64,
    /// Request packets after netem that are not the first copy of their PSN, plus the first
    /// copies that resend a lost PSN.
    pub(super) req_retransmits: u64,
    /// Request packets netem dropped (by the alignment).
    pub(super) dropped: u64,
    /// cap.pcap's request packets the alignment could not find in pre.pcap (0 if it is a
    /// subsequence, as it must be).
    pub(super) unmatched: u64,
}

pub(super) fn loss_truth(pre: &[Pkt], cap: &[Pkt], pmtu: u64) -> LossTruth {
    use super::wire::{is_request, psn_diff, span};
    use std::collections::{BTreeSet, HashSet};
    let reqs = |v: &[Pkt]| -> Vec<Pkt> {
        v.iter()
            .filter(|p| p.src == CLIENT_IP && p.dst == SERVER_IP && is_request(p.opcode))
            .cloned()
            .collect()
    };
    let (pre, cap) = (reqs(pre), reqs(cap));
    let mut t = LossTruth::default();
    // align: greedy subsequence match on (PSN, opcode, length)
    let mut dropped_first: HashSet<u32> = HashSet::new();
    let mut sent: HashSet<u32> = HashSet::new();
    let mut j = 0;
    for p in &pre {
        let first = sent.insert(p.psn);
        if j < cap.len() && (cap[j].psn, cap[j].opcode, cap[j].len) == (p.psn, p.opcode, p.len) {
            j += 1;
        } else {
            t.dropped += 1;
            if first {
                dropped_first.insert(p.psn);
            }
        }
    }
    t.unmatched = (cap.len() - j) as u64;
    let Some(first) = cap.first() else {
        return t;
    };
    let mut highest = first.psn;
    let mut seen: HashSet<u32> = HashSet::new();
    let mut lost: BTreeSet<i64> = BTreeSet::new();
    for p in &cap {
        let is_first = seen.insert(p.psn);
        let older = psn_diff(p.psn, highest) < 0;
        if !is_first {
            t.req_retransmits += 1;
        } else if older && dropped_first.contains(&p.psn) {
            t.req_retransmits += 1;
            for i in 0..span(p, pmtu) {
                let q = super::wire::psn_add(p.psn, i);
                lost.insert(i64::from(psn_diff(q, first.psn)));
                t.lost.push(q);
            }
        }
        if psn_diff(p.psn, highest) > 0 {
            highest = p.psn;
        }
    }
    t.lost.sort_by_key(|q| psn_diff(*q, first.psn));
    t.events = lost.iter().filter(|&&a| !lost.contains(&(a - 1))).count() as u64;
    t
}

/// The loss scenarios: `analyze` of cap.pcap against [`loss_truth`] (the request flow of the
/// client): exact loss, no reordering.
pub(super) fn loss_checks(
    ck: &mut Checks,
    cdir: &Path,
    cap: &[Pkt],
    pmtu: u64,
    ana: &Value,
) -> Value {
    let pre = match tshark_packets(&cdir.join("pre.pcap")) {
        Ok(p) => p,
        Err(e) => {
            ck.truth("loss: pre.pcap decoded", "decoded", format!("{e:#}"), false);
            return Value::Null;
        }
    };
    let t = loss_truth(&pre, cap, pmtu);
    ck.eq(
        "loss: cap.pcap's requests are pre.pcap's less the dropped ones, in order (unmatched)",
        0,
        t.unmatched,
    );
    let rec = ana["flows"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["src_ip"] == CLIENT_IP && f["dst_ip"] == SERVER_IP)
        .cloned()
        .unwrap_or(Value::Null);
    let name = |f: &str| {
        format!(
            "loss: analyze == what netem dropped (pre.pcap vs cap.pcap), {CLIENT_IP}>{SERVER_IP}: {f}"
        )
    };
    for (field, v) in [
        ("psn_missing", json!(t.lost.len())),
        ("psn_gaps", json!(t.events)),
        ("req_retransmits", json!(t.req_retransmits)),
        ("reordered", json!(0)),
        ("reorder_naks", json!(0)),
    ] {
        ck.eq(&name(field), v, rec[field].clone());
    }
    json!({
        "lost": t.lost, "events": t.events, "req_retransmits": t.req_retransmits,
        "dropped_request_packets": t.dropped,
    })
}
