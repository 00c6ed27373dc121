//! Compare an observer JSON document (from `run --json` or `analyze --json`) with a fixture's
//! expected JSON (tests/fixtures/*.expected.json, written by the scapy generator). Returns every
//! difference, so one failing run shows everything that is off.

use serde_json::Value;

/// Which part of the observer document to compare.
pub struct View<'a> {
    /// Only flows/PFC entries seen on this interface (None: any).
    pub iface: Option<&'a str>,
    /// Only flows/PFC entries seen in this direction ("ingress", "egress", "capture"; "" for
    /// every direction, with the document's overall summary).
    pub direction: &'a str,
    /// Compare latency sample values exactly (captures: times come from the file).
    pub exact_rtt: bool,
}

impl View<'static> {
    /// How a capture's document is compared with a fixture's expected one: at the one point
    /// of a pcap ("pcap", "capture"), or, when the expected flows name their point
    /// (`tcpdump -i any` captures: interface and direction from the link header), at every
    /// point, each flow at its own.
    pub fn for_fixture(expected: &Value) -> View<'static> {
        let by_point = expected["flows"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f.get("iface").is_some()));
        View {
            iface: if by_point { None } else { Some("pcap") },
            direction: if by_point { "" } else { "capture" },
            exact_rtt: true,
        }
    }
}

const FLOW_FIELDS: &[&str] = &[
    "packets",
    "bytes",
    "opcodes",
    "psn_gaps",
    "psn_missing",
    "retransmits",
    "reordered",
    "reorder_distance_max",
    "reorder_distance",
    "reorder_naks",
    "psn_holes",
    "acks",
    "naks",
    "cnp",
    "ecn_ce",
    "ecn_ect",
    "dscp",
    "pcp",
    "udp_src_ports",
    "peer_qp",
];

const PFC_FIELDS: &[&str] = &["pause_frames", "xon_frames", "pause_quanta"];

const SUMMARY_FIELDS: &[&str] = &[
    "total_packets",
    "roce_packets",
    "pfc_frames",
    "pause_8023x",
    "non_roce",
    "malformed",
    "ip_fragments",
    "unsupported",
];

fn selected(entry: &Value, view: &View<'_>) -> bool {
    let dir_ok = view.direction.is_empty()
        || entry.get("direction").and_then(Value::as_str) == Some(view.direction);
    let iface_ok = view
        .iface
        .is_none_or(|i| entry.get("iface").and_then(Value::as_str) == Some(i));
    dir_ok && iface_ok
}

/// A mirror source or session as one line: "erspan2 198.51.100.1 session_id 7", or "" for a
/// flow that was not mirrored.
fn mirror_id(m: &Value) -> String {
    if m.is_null() {
        return String::new();
    }
    let id = ["session_id", "vni", "gre_key"]
        .iter()
        .find(|k| !m[**k].is_null())
        .map(|k| format!("{k} {}", m[*k]))
        .unwrap_or_default();
    format!(
        "{} {} {id}",
        m["encap"].as_str().unwrap_or("?"),
        m["outer_src"].as_str().unwrap_or("?")
    )
}

fn flow_id(f: &Value) -> String {
    let via = match mirror_id(&f["mirror"]) {
        m if m.is_empty() => m,
        m => format!(" via {m}"),
    };
    format!(
        "{} -> {} qp {}{via}",
        f["src_ip"].as_str().unwrap_or("?"),
        f["dst_ip"].as_str().unwrap_or("?"),
        f["dst_qp"]
    )
}

/// [`flow_id`] and, when `by_point`, where the flow was seen ("at if3/ingress"): for fixtures
/// whose expected flows name their observation point (one flow seen at several).
fn flow_at(f: &Value, by_point: bool) -> String {
    if by_point {
        format!(
            "{} at {}/{}",
            flow_id(f),
            f["iface"].as_str().unwrap_or("?"),
            f["direction"].as_str().unwrap_or("?")
        )
    } else {
        flow_id(f)
    }
}

/// A path view's pair as one line: "192.0.2.1 -> 192.0.2.2 qp 18 from if3/ingress to
/// if5/egress". Expected documents write a point as "iface/direction"; the observer's as an
/// object.
fn pair_id(p: &Value) -> String {
    let point = |v: &Value| match v.as_str() {
        Some(s) => s.to_string(),
        None => format!(
            "{}/{}",
            v["iface"].as_str().unwrap_or("?"),
            v["direction"].as_str().unwrap_or("?")
        ),
    };
    format!(
        "{} from {} to {}",
        flow_id(p),
        point(&p["upstream"]),
        point(&p["downstream"])
    )
}

const PATH_FIELDS: &[&str] = &[
    "both",
    "missing",
    "missing_psns",
    "downstream_retransmits_unseen",
];

/// The path views (`paths`) against the expected ones, when the expected document lists them:
/// every pair, no other.
fn path_diffs(expected: &Value, actual: &Value) -> Vec<String> {
    let Some(want) = expected["paths"].as_array() else {
        return Vec::new();
    };
    let empty = Vec::new();
    let seen = actual["paths"].as_array().unwrap_or(&empty);
    let mut diffs = Vec::new();
    for exp in want {
        let id = pair_id(exp);
        let Some(act) = seen.iter().find(|p| pair_id(p) == id) else {
            diffs.push(format!("path {id}: missing"));
            continue;
        };
        for field in PATH_FIELDS {
            if exp[field] != act[field] {
                diffs.push(format!(
                    "path {id}: {field}: expected {}, got {}",
                    exp[field], act[field]
                ));
            }
        }
    }
    for act in seen {
        let id = pair_id(act);
        if !want.iter().any(|e| pair_id(e) == id) {
            diffs.push(format!("path {id}: not expected"));
        }
    }
    diffs
}

/// A mirror session: its source and its destination.
fn session_id(m: &Value) -> String {
    format!(
        "{} to {}",
        mirror_id(m),
        m["outer_dst"].as_str().unwrap_or("?")
    )
}

const MIRROR_FIELDS: &[&str] = &["frames", "sequenced", "seq_lost", "seq_late", "seq_resyncs"];

/// The `mirror` sessions of the view against the expected ones, and `summary.mirror_seq_lost`
/// (the document's total must be the sum of its sessions').
fn mirror_diffs(expected: &Value, actual: &Value, view: &View<'_>) -> Vec<String> {
    let mut diffs = Vec::new();
    let empty = Vec::new();
    let all = actual["mirror"].as_array().unwrap_or(&empty);
    let seen: Vec<&Value> = all.iter().filter(|m| selected(m, view)).collect();
    let want = expected["mirror"].as_array().unwrap_or(&empty);
    for exp in want {
        let id = session_id(exp);
        let Some(act) = seen.iter().find(|m| session_id(m) == id) else {
            diffs.push(format!("mirror session {id}: missing"));
            continue;
        };
        for field in MIRROR_FIELDS {
            if exp[field] != act[field] {
                diffs.push(format!(
                    "mirror session {id}: {field}: expected {}, got {}",
                    exp[field], act[field]
                ));
            }
        }
    }
    for act in &seen {
        let id = session_id(act);
        if !want.iter().any(|e| session_id(e) == id) {
            diffs.push(format!("mirror session {id}: not expected"));
        }
    }
    // The view's loss against the expected sessions' (whose sum the generator checked to be
    // the fixture's `summary.mirror_seq_lost`); the document's summary covers every view (both
    // attach points of a veth replay, several fixtures of a kernel-matrix run), so it is
    // checked against its own sessions.
    let lost = |v: &[&Value]| -> u64 { v.iter().filter_map(|m| m["seq_lost"].as_u64()).sum() };
    let expected_lost = lost(&want.iter().collect::<Vec<_>>());
    if expected_lost != lost(&seen) {
        diffs.push(format!(
            "mirror_seq_lost: expected {expected_lost}, the sessions seen lost {}",
            lost(&seen)
        ));
    }
    let total = actual["summary"]["mirror_seq_lost"].as_u64();
    if total != Some(lost(&all.iter().collect::<Vec<_>>())) {
        diffs.push(format!(
            "summary.mirror_seq_lost {total:?} is not the sum of the sessions' seq_lost"
        ));
    }
    diffs
}

fn pfc_id(p: &Value) -> String {
    format!(
        "{} prio {}",
        p["src_mac"].as_str().unwrap_or("?"),
        p["priority"]
    )
}

/// The summary block for one direction: `summary.by_direction.<direction>` when present
/// (the live path), else `summary`.
fn summary<'v>(doc: &'v Value, direction: &str) -> &'v Value {
    let by_dir = &doc["summary"]["by_direction"][direction];
    if by_dir.is_object() {
        by_dir
    } else {
        &doc["summary"]
    }
}

/// Nearest-rank quantile of sorted samples (the engine's definition).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Latency summary against the exact sample values: min and max exact; quantiles exact while
/// the engine keeps every sample (64 per flow), within its 1 % relative error after that.
fn rtt_diffs(samples: &[u64], rtt: &Value) -> Vec<String> {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Vec::new();
    };
    let mut want = vec![("min", *first), ("max", *last)];
    for (k, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)] {
        want.push((k, quantile(samples, q)));
    }
    let exact = samples.len() <= 64;
    want.into_iter()
        .filter_map(|(k, w)| {
            let got = rtt[k].as_u64().unwrap_or(u64::MAX);
            let ok = if exact || k == "min" || k == "max" {
                got == w
            } else {
                (got as f64 - w as f64).abs() <= 0.01 * w as f64
            };
            (!ok).then(|| format!("rtt_ns.{k}: expected {w}, got {got}"))
        })
        .collect()
}

pub fn compare(expected: &Value, actual: &Value, view: &View<'_>) -> Vec<String> {
    let mut diffs = Vec::new();
    let sum = summary(actual, view.direction);
    for field in SUMMARY_FIELDS {
        if expected["summary"][field] != sum[field] {
            diffs.push(format!(
                "summary.{field}: expected {}, got {}",
                expected["summary"][field], sum[field]
            ));
        }
    }

    let empty = Vec::new();
    let actual_flows: Vec<&Value> = actual["flows"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter(|f| selected(f, view))
        .collect();
    let expected_flows = expected["flows"].as_array().unwrap_or(&empty);
    let by_point = expected_flows.iter().any(|f| f.get("iface").is_some());
    for exp in expected_flows {
        let id = flow_at(exp, by_point);
        let Some(act) = actual_flows.iter().find(|f| flow_at(f, by_point) == id) else {
            diffs.push(format!("flow {id}: missing"));
            continue;
        };
        for field in FLOW_FIELDS {
            if exp[field] != act[field] {
                diffs.push(format!(
                    "flow {id}: {field}: expected {}, got {}",
                    exp[field], act[field]
                ));
            }
        }
        let count = &act["rtt_ns"]["count"];
        if exp["rtt_samples"] != *count {
            diffs.push(format!(
                "flow {id}: rtt samples: expected {}, got {count}",
                exp["rtt_samples"]
            ));
        }
        if view.exact_rtt {
            let mut samples: Vec<u64> = exp["rtt_ns"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .filter_map(Value::as_u64)
                .collect();
            samples.sort_unstable();
            diffs.extend(
                rtt_diffs(&samples, &act["rtt_ns"])
                    .into_iter()
                    .map(|d| format!("flow {id}: {d}")),
            );
        }
    }
    for act in &actual_flows {
        let id = flow_at(act, by_point);
        if !expected_flows.iter().any(|e| flow_at(e, by_point) == id) {
            diffs.push(format!("flow {id}: not expected"));
        }
    }

    let actual_pfc: Vec<&Value> = actual["pfc"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter(|p| selected(p, view))
        .collect();
    let expected_pfc = expected["pfc"].as_array().unwrap_or(&empty);
    for exp in expected_pfc {
        let id = pfc_id(exp);
        let Some(act) = actual_pfc.iter().find(|p| pfc_id(p) == id) else {
            diffs.push(format!("pfc {id}: missing"));
            continue;
        };
        for field in PFC_FIELDS {
            if exp[field] != act[field] {
                diffs.push(format!(
                    "pfc {id}: {field}: expected {}, got {}",
                    exp[field], act[field]
                ));
            }
        }
    }
    for act in &actual_pfc {
        let id = pfc_id(act);
        if !expected_pfc.iter().any(|e| pfc_id(e) == id) {
            diffs.push(format!("pfc {id}: not expected"));
        }
    }
    diffs.extend(mirror_diffs(expected, actual, view));
    diffs.extend(path_diffs(expected, actual));
    diffs
}

/// Fields that depend on when or where a packet was seen, not on what it was.
const TIME_OR_PLACE: &[&str] = &["first_ts", "last_ts", "rate_bps", "iface", "direction"];

/// Differential check: every flow record and mirror session of `a` (one observation point)
/// against `b` (another source of the same packets), field by field, except time- and
/// place-derived fields; latency is compared by its sample count only.
///
/// What it can and cannot catch: the kernel programs and `analyze` run the same parser and the
/// same accounting rules (roce-observer-common), so a wrong rule (a PSN gap miscounted, a NAK
/// misclassified) gives the same wrong number on both sides and passes here. It catches
/// plumbing: map and ring-buffer transport, the verifier's bounds forcing a different code path,
/// per-CPU summing, attach-point differences. The rules are judged by oracles written apart from
/// the code: the fixtures' hand-derived expected JSON ([`compare`]), and in the Soft-RoCE VMs
/// perftest's parameters, rxe's counters and tshark's decoding.
pub fn diff_flows(a: &Value, a_view: &View<'_>, b: &Value, b_view: &View<'_>) -> Vec<String> {
    let mut diffs = Vec::new();
    let empty = Vec::new();
    let pick = |doc: &Value, view: &View<'_>| -> Vec<Value> {
        doc["flows"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .filter(|f| selected(f, view))
            .cloned()
            .collect()
    };
    let (fa, fb) = (pick(a, a_view), pick(b, b_view));
    if fa.len() != fb.len() {
        diffs.push(format!("flow count: {} vs {}", fa.len(), fb.len()));
    }
    for x in &fa {
        let id = flow_id(x);
        let Some(y) = fb.iter().find(|f| flow_id(f) == id) else {
            diffs.push(format!("flow {id}: only in the first"));
            continue;
        };
        let (Some(ox), Some(oy)) = (x.as_object(), y.as_object()) else {
            continue;
        };
        for (key, vx) in ox {
            if TIME_OR_PLACE.contains(&key.as_str()) {
                continue;
            }
            let vy = &oy.get(key).cloned().unwrap_or(Value::Null);
            let same = if key == "rtt_ns" {
                vx["count"] == vy["count"]
            } else {
                vx == vy
            };
            if !same {
                diffs.push(format!("flow {id}: {key}: {vx} vs {vy}"));
            }
        }
    }
    let sessions = |doc: &Value, view: &View<'_>| -> Vec<Value> {
        doc["mirror"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .filter(|m| selected(m, view))
            .cloned()
            .collect()
    };
    let (ma, mb) = (sessions(a, a_view), sessions(b, b_view));
    if ma.len() != mb.len() {
        diffs.push(format!(
            "mirror session count: {} vs {}",
            ma.len(),
            mb.len()
        ));
    }
    for x in &ma {
        let id = session_id(x);
        let Some(y) = mb.iter().find(|m| session_id(m) == id) else {
            diffs.push(format!("mirror session {id}: only in the first"));
            continue;
        };
        for field in MIRROR_FIELDS {
            if x[field] != y[field] {
                diffs.push(format!(
                    "mirror session {id}: {field}: {} vs {}",
                    x[field], y[field]
                ));
            }
        }
    }
    diffs
}

/// Two JSON values equal, numbers within a relative 1e-9 (figures computed in floating point,
/// such as a share or a utilisation, by the engine and by the fixture's oracle).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            (x - y).abs() <= 1e-9 * y.abs().max(1.0)
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

const FINDING_FIELDS: &[&str] = &[
    "kind", "priority", "points", "start_ts", "end_ts", "episodes", "load", "cycle",
];

/// The lossless-class findings (`lossless`, in order: absent means none) and the storm origin
/// (`pfc_origin`: origin, deadlock, reach and each source's start, paused time and cause)
/// against the expected ones, when the expected document lists them.
pub fn lossless_diffs(expected: &Value, actual: &Value) -> Vec<String> {
    let Some(want) = expected["lossless"].as_array() else {
        return Vec::new();
    };
    let empty = Vec::new();
    let got = actual["lossless"].as_array().unwrap_or(&empty);
    let mut diffs = Vec::new();
    if want.len() != got.len() {
        diffs.push(format!(
            "lossless: expected {} findings, got {}: {}",
            want.len(),
            got.len(),
            actual["lossless"]
        ));
    }
    for (i, (exp, act)) in want.iter().zip(got).enumerate() {
        for field in FINDING_FIELDS {
            let act_field = act.get(*field).unwrap_or(&Value::Null);
            if !same(&exp[field], act_field) {
                diffs.push(format!(
                    "lossless[{i}] ({}): {field}: expected {}, got {act_field}",
                    exp["kind"], exp[field]
                ));
            }
        }
    }
    let (want, got) = (&expected["pfc_origin"], &actual["pfc_origin"]);
    if want.is_null() || got.is_null() {
        if want.is_null() != got.is_null() {
            diffs.push(format!("pfc_origin: expected {want}, got {got}"));
        }
        return diffs;
    }
    let origin = &got["origin"]["iface"];
    if want["origin"] != *origin {
        diffs.push(format!(
            "pfc_origin.origin: expected {}, got {origin}",
            want["origin"]
        ));
    }
    for field in ["deadlock", "reached", "hops"] {
        if want[field] != got[field] {
            diffs.push(format!(
                "pfc_origin.{field}: expected {}, got {}",
                want[field], got[field]
            ));
        }
    }
    let sources: Vec<Value> = got["sources"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|s| {
            serde_json::json!({
                "iface": s["source"]["iface"],
                "src_mac": s["source"]["src_mac"],
                "priority": s["source"]["priority"],
                "first_xoff_ts": s["first_xoff_ts"],
                "episode_paused_ms": s["episode_paused_ms"],
                "paused_by": s["paused_by"],
            })
        })
        .collect();
    let sources = Value::Array(sources);
    if !same(&want["sources"], &sources) {
        diffs.push(format!(
            "pfc_origin.sources: expected {}, got {sources}",
            want["sources"]
        ));
    }
    diffs
}
