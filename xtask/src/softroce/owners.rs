//! The observer's QP owners (RDMA netlink) against what the client VM saw itself: every flow
//! of the run goes into or out of perftest's QP on rxe0, so every flow record must carry
//! perftest's pid and command, device rxe0 port 1, the NIC's SQ/RQ PSNs, and the local QP that
//! iproute2's `rdma resource show qp` listed for that pid (tests/softroce/guest-init.sh polls it
//! while perftest runs, and names the process with pidof and /proc/PID/comm).

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use super::check::Checks;
use super::outputs::read_kv;
use super::scenarios::{CLIENT_IP, Scenario};

/// Perftest's QP as the guest saw it.
#[derive(Debug, PartialEq)]
pub(super) struct GuestQp {
    pub(super) pid: u64,
    pub(super) comm: String,
    pub(super) lqpn: u64,
    pub(super) rqpn: u64,
    pub(super) state: String,
}

/// The user QPs (those with a pid) of `rdma -j resource show qp`.
pub(super) fn guest_qps(rdma_json: &str) -> Vec<GuestQp> {
    let doc: Value = serde_json::from_str(rdma_json).unwrap_or(Value::Null);
    doc.as_array()
        .into_iter()
        .flatten()
        .filter_map(|q| {
            Some(GuestQp {
                pid: q["pid"].as_u64()?,
                comm: q["comm"].as_str().unwrap_or("").to_string(),
                lqpn: q["lqpn"].as_u64()?,
                rqpn: q["rqpn"].as_u64()?,
                state: q["state"].as_str().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// One line per flow record: what its `owner` says (or that it has none).
fn describe(o: &Value) -> String {
    if o.is_null() {
        return "no owner".into();
    }
    let n = |k: &str| o[k].as_u64().map_or("-".into(), |v| v.to_string());
    format!(
        "{}/{} on {}/{} lqpn {} rqpn {} sq_psn {} rq_psn {}",
        o["comm"].as_str().unwrap_or("-"),
        n("pid"),
        o["device"].as_str().unwrap_or("-"),
        n("port"),
        n("lqpn"),
        n("rqpn"),
        n("sq_psn"),
        n("rq_psn"),
    )
}

/// The checks; `doc` is the observer's JSON document of the client VM.
pub(super) fn owner_checks(ck: &mut Checks, sc: &Scenario, cdir: &Path, doc: &Value) -> Value {
    let status = read_kv(&cdir.join("status.env"));
    let pidof: Option<u64> = status
        .get("PERF_PIDOF")
        .and_then(|p| p.trim_matches('\'').parse().ok());
    let qps = guest_qps(&fs::read_to_string(cdir.join("rdma-qp.json")).unwrap_or_default());
    // The ground truth first: perftest's user QPs (one per -q), connected (their rqpn is set
    // from RTR on), seen by rdma and by /proc alike, and no other user QP.
    let truth: Option<&[GuestQp]> = match pidof {
        Some(pid)
            if qps.len() == sc.qps as usize
                && qps
                    .iter()
                    .all(|q| q.pid == pid && q.comm == sc.perftest && q.rqpn != 0) =>
        {
            Some(qps.as_slice())
        }
        _ => None,
    };
    ck.truth(
        "guest: rdma resource show qp lists perftest's QPs (pid = pidof, comm = perftest, rqpn set)",
        &format!("{} connected QP(s) of {}/<pidof>", sc.qps, sc.perftest),
        format!(
            "pidof {}, comm {}, rdma: {}",
            pidof.map_or("none".into(), |p| p.to_string()),
            status.get("PERF_COMM").map_or("none", |s| s.as_str()),
            qps.iter()
                .map(|q| format!(
                    "{}/{} lqpn {} rqpn {} {}",
                    q.comm, q.pid, q.lqpn, q.rqpn, q.state
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        truth.is_some(),
    );
    let Some(truth) = truth else {
        return Value::Null;
    };
    // The server VM runs a loopback perftest first (guest-init.sh, SHIFT_QPN), so that a label
    // taken from the wrong end (lqpn for rqpn) cannot pass.
    for q in truth {
        ck.truth(
            "guest: perftest's local and remote QP numbers differ",
            "lqpn != rqpn",
            format!("lqpn {} rqpn {}", q.lqpn, q.rqpn),
            q.lqpn != q.rqpn,
        );
    }
    let flows = doc["flows"].as_array().cloned().unwrap_or_default();
    ck.truth(
        "observer flow records to label",
        "at least one",
        flows.len().to_string(),
        !flows.is_empty(),
    );
    let mut seen = Vec::new();
    for f in &flows {
        let (src, dst) = (
            f["src_ip"].as_str().unwrap_or("?"),
            f["dst_ip"].as_str().unwrap_or("?"),
        );
        let dst_qp = f["dst_qp"].as_u64().unwrap_or(u64::MAX);
        // Into perftest's QP (from the server) it is the destination QP; out of it (to the
        // server) the destination QP is its remote QP.
        let egress = src == CLIENT_IP;
        // the guest QP this flow goes out of (egress: its remote QP is the destination) or
        // into (ingress: it is the destination)
        let q = truth
            .iter()
            .find(|q| if egress { q.rqpn } else { q.lqpn } == dst_qp)
            .unwrap_or(&truth[0]);
        let (dir, lqpn, rqpn) = if egress {
            ("egress", q.lqpn, dst_qp)
        } else {
            ("ingress", dst_qp, q.rqpn)
        };
        let o = &f["owner"];
        let expected = format!(
            "{}/{} on rxe0/1 lqpn {lqpn} rqpn {rqpn} sq_psn <24-bit> rq_psn <24-bit>",
            sc.perftest, q.pid
        );
        let psn = |k: &str| o[k].as_u64().is_some_and(|p| p < 1 << 24);
        let ok = f["direction"] == dir
            && o["pid"] == json!(q.pid)
            && o["comm"] == sc.perftest
            && o["device"] == "rxe0"
            && o["port"] == 1
            && o["lqpn"] == json!(lqpn)
            && o["rqpn"] == json!(rqpn)
            && q.lqpn == lqpn
            && q.rqpn == rqpn
            && psn("sq_psn")
            && psn("rq_psn");
        let label = format!("{src}>{dst} qp {dst_qp:#x} ({dir})");
        ck.truth(
            &format!("observer owner of {label}"),
            &expected,
            describe(o),
            ok,
        );
        seen.push(json!({"flow": label, "owner": o}));
    }
    let guest: Vec<Value> = truth
        .iter()
        .map(|q| json!({"pid": q.pid, "comm": q.comm, "lqpn": q.lqpn, "rqpn": q.rqpn}))
        .collect();
    json!({"guest_qps": guest, "flows": seen})
}
