//! The reorder scenarios (netem `delay .. reorder ..` on one VM's egress): what the capture
//! must show for the scenario to test anything, the ground truth of the observer's kernel path
//! when the reordering happens after it (the client's requests: TC egress is before netem),
//! and the evidence for the reorder window (distances, what the window cost).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde_json::{Value, json};

use super::checks::Checks;
use super::outputs::netem_dropped;
use super::psn_truth::{BUCKETS, PsnFigures, WINDOW};
use super::scenarios::{CLIENT_IP, Op, Reorder, SERVER_IP, Scenario};
use super::wire::{Pkt, tshark_packets};
use super::wire_flows::{FlowKey, WireFlow, flow_label, wire_flows_of};

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
        "not_reordered": f.not_reordered,
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
