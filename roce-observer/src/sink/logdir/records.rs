//! The JSON Lines records of the log directory (docs/log-schema.md), built from snapshots.
//!
//! Every line starts with `schema_version` and `kind`. Each interval gives the flows, PFC
//! entries, mirror sessions and alerts that changed since the last batch that reached the disk,
//! with their totals and the change (`delta`), and one `summary`; a full batch gives every
//! flow, PFC entry, mirror session and alert plus the ECMP view, so a file that starts with one
//! stands alone.
//!
//! Deltas are taken against the last batch *written*: when a batch is lost (full disk), the
//! next written batch carries the changes of both, so summing `delta` over the files that exist
//! still gives the totals.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use roce_observer_common::psn::psn_add;

use crate::report::{
    AlertSnapshot, EcmpSnapshot, FlowId, FlowSnapshot, LatencySnapshot, LosslessFinding,
    MirrorSnapshot, MirrorSource, PathPair, PfcOrigin, PfcSnapshot, PsnTrail, Snapshot,
    StepsSnapshot, Summary,
};

/// Version of the log line schema; changes are additive only (docs/log-schema.md).
pub const LOG_SCHEMA_VERSION: u32 = 1;

/// The counters of a flow whose change is logged.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct FlowDelta {
    pub packets: u64,
    pub bytes: u64,
    pub psn_gaps: u64,
    pub psn_missing: u64,
    pub retransmits: u64,
    pub reordered: u64,
    pub reorder_naks: u64,
    pub acks: u64,
    pub naks: u64,
    pub cnp: u64,
    pub ecn_ce: u64,
    pub ecn_ect: u64,
    pub rtt_samples: u64,
}

impl FlowDelta {
    fn totals(f: &FlowSnapshot) -> FlowDelta {
        FlowDelta {
            packets: f.packets,
            bytes: f.bytes,
            psn_gaps: f.psn_gaps,
            psn_missing: f.psn_missing,
            retransmits: f.retransmits,
            reordered: f.reordered,
            reorder_naks: f.reorder_naks,
            acks: f.acks,
            naks: f.naks.total(),
            cnp: f.cnp,
            ecn_ce: f.ecn_ce,
            ecn_ect: f.ecn_ect,
            rtt_samples: f.rtt_ns.count,
        }
    }

    /// `now - before`; a counter that went backwards (the flow was evicted and came back)
    /// counts from zero again.
    fn since(now: FlowDelta, before: FlowDelta) -> FlowDelta {
        let d = |a: u64, b: u64| if a >= b { a - b } else { a };
        FlowDelta {
            packets: d(now.packets, before.packets),
            bytes: d(now.bytes, before.bytes),
            psn_gaps: d(now.psn_gaps, before.psn_gaps),
            psn_missing: d(now.psn_missing, before.psn_missing),
            retransmits: d(now.retransmits, before.retransmits),
            reordered: d(now.reordered, before.reordered),
            reorder_naks: d(now.reorder_naks, before.reorder_naks),
            acks: d(now.acks, before.acks),
            naks: d(now.naks, before.naks),
            cnp: d(now.cnp, before.cnp),
            ecn_ce: d(now.ecn_ce, before.ecn_ce),
            ecn_ect: d(now.ecn_ect, before.ecn_ect),
            rtt_samples: d(now.rtt_samples, before.rtt_samples),
        }
    }

    fn is_zero(&self) -> bool {
        *self == FlowDelta::default()
    }
}

/// Fields every line starts with.
#[derive(Serialize)]
struct Head<'a> {
    schema_version: u32,
    kind: &'static str,
    /// Snapshot time, ns since the epoch.
    ts: u64,
    /// The observer that wrote the line (`--observer-id`, the host name by default), so that a
    /// row of a fleet table says who wrote it.
    host: &'a str,
    /// Part of a full batch (every entry, not only those that changed).
    full: bool,
}

#[derive(Serialize)]
struct FlowLine<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    /// Time of the last batch written before this one (the base of `delta`), 0 for the first.
    delta_since_ts: u64,
    delta: FlowDelta,
    #[serde(flatten)]
    psns: PsnInterval,
    #[serde(flatten)]
    flow: &'a FlowSnapshot,
}

/// What the baseline keeps of a flow: the totals last written, and where its request PSNs
/// stood then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FlowBase {
    totals: FlowDelta,
    req_highest: Option<u32>,
    lost_declared: u64,
    lost_unsent: u64,
}

impl FlowBase {
    fn of(f: &FlowSnapshot) -> FlowBase {
        let trail = &f.psn_trail;
        FlowBase {
            totals: FlowDelta::totals(f),
            req_highest: trail.requests.map(|(_, highest)| highest),
            lost_declared: trail.lost.as_ref().map_or(0, |l| l.declared),
            lost_unsent: trail.lost_unsent,
        }
    }
}

/// The request PSNs of a flow's interval (since the last line written), for joining the lines
/// of several observers PSN by PSN (docs/log-schema.md, `flow`). Bounded: at most
/// [`crate::report::LostRuns::KEPT`] runs, whatever was lost.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
struct PsnInterval {
    /// The new request PSNs: from the one after the last line's highest (the flow's first on
    /// its first line) to the highest now; null when none came.
    req_psn_first: Option<u32>,
    req_psn_highest: Option<u32>,
    /// Runs of request PSNs declared lost in the interval, in the order declared.
    psn_lost_runs: Vec<LostRun>,
    /// Some runs of the interval are not in `psn_lost_runs`: more than it lists, or the
    /// observation could not report them all (then `delta.psn_missing` still counts them).
    psn_lost_runs_truncated: bool,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
struct LostRun {
    first: u32,
    count: u32,
}

impl PsnInterval {
    fn new(trail: &PsnTrail, before: Option<&FlowBase>, now: &FlowBase) -> PsnInterval {
        // Counters that went backwards: the kernel's record was evicted and started again, so
        // its PSNs and unsent events count from nothing. (The lost runs are user space's and
        // go on.)
        let restarted = before.is_some_and(|b| now.totals.packets < b.totals.packets);
        let kernel_before = before.filter(|_| !restarted);
        let (req_psn_first, req_psn_highest) =
            match (trail.requests, kernel_before.and_then(|b| b.req_highest)) {
                (Some((_, highest)), Some(last)) if highest == last => (None, None),
                (Some((_, highest)), Some(last)) => (Some(psn_add(last, 1)), Some(highest)),
                (Some((first, highest)), None) => (Some(first), Some(highest)),
                (None, _) => (None, None),
            };
        let (psn_lost_runs, dropped) = match &trail.lost {
            Some(l) => {
                let (runs, dropped) = l.since(before.map_or(0, |b| b.lost_declared));
                let runs = runs.into_iter();
                (
                    runs.map(|(first, count)| LostRun { first, count })
                        .collect(),
                    dropped,
                )
            }
            None => (Vec::new(), false),
        };
        let unsent = trail.lost_unsent > kernel_before.map_or(0, |b| b.lost_unsent);
        PsnInterval {
            req_psn_first,
            req_psn_highest,
            psn_lost_runs,
            psn_lost_runs_truncated: dropped || unsent,
        }
    }
}

#[derive(Serialize)]
struct PfcLine<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    delta_since_ts: u64,
    delta_pause_frames: u64,
    delta_xon_frames: u64,
    delta_pause_quanta: u64,
    /// The entry, its own `kind` ("pfc"/"pause") renamed `pfc_kind`.
    #[serde(flatten)]
    pfc: serde_json::Map<String, serde_json::Value>,
}

#[derive(Serialize)]
struct MirrorLine<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    delta_since_ts: u64,
    delta_frames: u64,
    delta_seq_lost: u64,
    #[serde(flatten)]
    mirror: &'a MirrorSnapshot,
}

#[derive(Serialize)]
struct AlertLine<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    delta_count: u64,
    /// The alert, its own `kind` renamed `alert_kind`.
    #[serde(flatten)]
    alert: serde_json::Map<String, serde_json::Value>,
}

/// `v` as a JSON object whose `kind` field is renamed `rename` (every line's `kind` is the
/// line's kind).
fn object_renaming_kind<T: Serialize>(
    v: &T,
    rename: &str,
) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Object(mut m)) => {
            if let Some(k) = m.remove("kind") {
                m.insert(rename.to_string(), k);
            }
            m
        }
        _ => serde_json::Map::new(),
    }
}

#[derive(Serialize)]
struct EcmpLine<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    #[serde(flatten)]
    ecmp: &'a EcmpSnapshot,
}

/// The causes of the document (training steps, path loss, PFC storm origin, lossless-class
/// findings) on one line.
#[derive(Serialize)]
struct DiagnosisLine<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    steps: &'a Option<StepsSnapshot>,
    paths: &'a [PathPair],
    pfc_origin: &'a Option<PfcOrigin>,
    lossless: &'a [LosslessFinding],
}

/// The log's own health, carried on every summary line.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct LogHealth {
    /// Lines that could not be written (full disk, removed directory, lost permission).
    pub records_lost: u64,
    pub records_written: u64,
    pub files_rotated: u64,
    /// Rotated files deleted to keep within --log-max-files / the disk budget.
    pub files_deleted: u64,
    /// Files with our names that are not regular files of ours (links, other users' files):
    /// never opened, each named once in a warning.
    pub files_refused: u64,
}

#[derive(Serialize)]
struct SummaryLine<'a> {
    #[serde(flatten)]
    head: Head<'a>,
    #[serde(flatten)]
    summary: &'a Summary,
    latency: &'a LatencySnapshot,
    log: LogHealth,
}

/// Identity of a PFC entry and of an alert.
type PfcId = (String, &'static str, String, Option<u8>);
type AlertId = (&'static str, String);

fn flow_id(f: &FlowSnapshot) -> FlowId {
    f.id()
}

/// Identity of a mirror session across snapshots.
type MirrorId = (MirrorSource, std::net::IpAddr, String, &'static str);

fn mirror_id(m: &MirrorSnapshot) -> MirrorId {
    (m.source.clone(), m.outer_dst, m.iface.clone(), m.direction)
}

fn pfc_id(p: &PfcSnapshot) -> PfcId {
    (p.iface.clone(), p.direction, p.src_mac.clone(), p.priority)
}

fn alert_id(a: &AlertSnapshot) -> AlertId {
    // The subject's debug form is unique per (kind, subject), which is what identifies an alert.
    (a.kind, format!("{:?}/{:?}", a.flow, a.pfc))
}

/// What the last written batch contained: the base of the next deltas.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    ts: u64,
    flows: HashMap<FlowId, FlowBase>,
    /// The stamps of the flow views of the last written snapshot. The engine hands out the same
    /// view again for a flow that did not change, so a view found here has a zero delta: most
    /// flows of a large table are passed over without building their id (a table of
    /// 100,000 flows, a few changing, is the common case). Looked for at the same index only: the engine keeps its
    /// order, and a flow missed (the order moved: new flows) takes the path by id, exact as
    /// well. Stamps, not the views: the engine frees a view it replaces.
    held: Vec<u64>,
    pfc: HashMap<PfcId, (u64, u64, u64)>,
    alerts: HashMap<AlertId, u64>,
    mirrors: HashMap<MirrorId, (u64, u64)>,
    /// The causes last written, to write them again only when they changed.
    diagnosis: Diagnosis,
}

type Diagnosis = (
    Option<StepsSnapshot>,
    Vec<PathPair>,
    Option<PfcOrigin>,
    Vec<LosslessFinding>,
);

/// The baseline a batch leaves behind once it is written, as changes to the current one.
pub struct NextBaseline {
    ts: u64,
    /// Flows whose totals differ from the baseline's (new flows among them).
    flows: Vec<(FlowId, FlowBase)>,
    /// Every flow of the snapshot, when some flow of the baseline is no longer in it.
    only: Option<HashSet<FlowId>>,
    views: Vec<u64>,
    pfc: HashMap<PfcId, (u64, u64, u64)>,
    alerts: HashMap<AlertId, u64>,
    mirrors: HashMap<MirrorId, (u64, u64)>,
    diagnosis: Diagnosis,
}

impl Baseline {
    /// The batch was written: its totals are the base of the next deltas.
    pub fn advance(&mut self, next: NextBaseline) {
        self.ts = next.ts;
        if let Some(only) = next.only {
            self.flows.retain(|id, _| only.contains(id));
        }
        self.flows.extend(next.flows);
        self.held = next.views;
        self.pfc = next.pfc;
        self.alerts = next.alerts;
        self.mirrors = next.mirrors;
        self.diagnosis = next.diagnosis;
    }
}

impl Baseline {
    /// `flow`, at index `i` of its snapshot, is the view at `i` of the last written snapshot.
    fn written(&self, i: usize, flow: &FlowSnapshot) -> bool {
        self.held.get(i) == Some(&flow.stamp.get())
    }
}

/// One batch of lines, ready to write, and the baseline it leaves behind once written.
pub struct Batch {
    pub text: Vec<u8>,
    pub records: u64,
    pub next: NextBaseline,
}

fn push_line<T: Serialize>(out: &mut Vec<u8>, records: &mut u64, line: &T) {
    // Serializing plain data into a Vec cannot fail; a failure would drop only this line.
    if serde_json::to_writer(&mut *out, line).is_ok() {
        out.push(b'\n');
        *records += 1;
    }
}

/// Build the lines for `snap` against `base`: everything when `full`, else what changed.
pub fn build(
    snap: &Snapshot,
    ts: u64,
    host: &str,
    full: bool,
    base: &Baseline,
    log: LogHealth,
) -> Batch {
    let mut text = Vec::new();
    let mut records = 0;
    let mut next = NextBaseline {
        ts,
        flows: Vec::new(),
        only: None,
        views: snap.flows.iter().map(|f| f.stamp.get()).collect(),
        pfc: HashMap::new(),
        alerts: HashMap::new(),
        mirrors: HashMap::new(),
        diagnosis: Diagnosis::default(),
    };
    // Flows of the snapshot found in the baseline: fewer than the baseline holds means some
    // left it.
    let mut found = 0;
    let head = |kind| Head {
        schema_version: LOG_SCHEMA_VERSION,
        kind,
        ts,
        host,
        full,
    };
    for (i, flow) in snap.flows.iter().enumerate() {
        let (delta, psns, changed) = if base.written(i, flow) {
            found += 1;
            (FlowDelta::default(), PsnInterval::default(), None)
        } else {
            let id = flow_id(flow);
            let now = FlowBase::of(flow);
            let before = base.flows.get(&id).copied();
            found += usize::from(before.is_some());
            let delta = FlowDelta::since(now.totals, before.unwrap_or_default().totals);
            let psns = PsnInterval::new(&flow.psn_trail, before.as_ref(), &now);
            (delta, psns, (before != Some(now)).then_some((id, now)))
        };
        // A run's path event and the record counting it may reach user space in different
        // intervals: a line with a run is written even when no counter moved.
        if full || !delta.is_zero() || !psns.psn_lost_runs.is_empty() {
            let line = FlowLine {
                head: head("flow"),
                delta_since_ts: base.ts,
                delta,
                psns,
                flow,
            };
            push_line(&mut text, &mut records, &line);
        }
        next.flows.extend(changed);
    }
    if found < base.flows.len() {
        next.only = Some(snap.flows.iter().map(|f| flow_id(f)).collect());
    }
    for pfc in &snap.pfc {
        let id = pfc_id(pfc);
        let now = (pfc.pause_frames, pfc.xon_frames, pfc.pause_quanta);
        let before = base.pfc.get(&id).copied().unwrap_or_default();
        let d = |a: u64, b: u64| if a >= b { a - b } else { a };
        let delta = (d(now.0, before.0), d(now.1, before.1), d(now.2, before.2));
        if full || delta != (0, 0, 0) {
            let line = PfcLine {
                head: head("pfc"),
                delta_since_ts: base.ts,
                delta_pause_frames: delta.0,
                delta_xon_frames: delta.1,
                delta_pause_quanta: delta.2,
                pfc: object_renaming_kind(pfc, "pfc_kind"),
            };
            push_line(&mut text, &mut records, &line);
        }
        next.pfc.insert(id, now);
    }
    for mirror in &snap.mirror {
        let id = mirror_id(mirror);
        let now = (mirror.frames, mirror.seq_lost);
        let before = base.mirrors.get(&id).copied().unwrap_or_default();
        let d = |a: u64, b: u64| if a >= b { a - b } else { a };
        let delta = (d(now.0, before.0), d(now.1, before.1));
        if full || delta != (0, 0) {
            let line = MirrorLine {
                head: head("mirror"),
                delta_since_ts: base.ts,
                delta_frames: delta.0,
                delta_seq_lost: delta.1,
                mirror,
            };
            push_line(&mut text, &mut records, &line);
        }
        next.mirrors.insert(id, now);
    }
    for alert in &snap.alerts {
        let id = alert_id(alert);
        let before = base.alerts.get(&id).copied().unwrap_or(0);
        let delta = alert.count.saturating_sub(before);
        if full || delta > 0 {
            let line = AlertLine {
                head: head("alert"),
                delta_count: delta,
                alert: object_renaming_kind(alert, "alert_kind"),
            };
            push_line(&mut text, &mut records, &line);
        }
        next.alerts.insert(id, alert.count);
    }
    if full {
        let line = EcmpLine {
            head: head("ecmp"),
            ecmp: &snap.ecmp,
        };
        push_line(&mut text, &mut records, &line);
    }
    // Causes: when there are any, in full batches and whenever they changed.
    let found = snap.steps.is_some()
        || !snap.paths.is_empty()
        || snap.pfc_origin.is_some()
        || !snap.lossless.is_empty();
    let (b_steps, b_paths, b_origin, b_lossless) = &base.diagnosis;
    let changed = *b_steps != snap.steps
        || *b_paths != snap.paths
        || *b_origin != snap.pfc_origin
        || *b_lossless != snap.lossless;
    if found && (full || changed) {
        let line = DiagnosisLine {
            head: head("diagnosis"),
            steps: &snap.steps,
            paths: &snap.paths,
            pfc_origin: &snap.pfc_origin,
            lossless: &snap.lossless,
        };
        push_line(&mut text, &mut records, &line);
    }
    next.diagnosis = (
        snap.steps.clone(),
        snap.paths.clone(),
        snap.pfc_origin.clone(),
        snap.lossless.clone(),
    );
    // The summary line counts itself and this batch among the written records only once the
    // batch is written; it reports the health as of the batch's start.
    let mut summary = snap.summary.clone();
    summary.log_records_lost = Some(log.records_lost);
    let line = SummaryLine {
        head: head("summary"),
        summary: &summary,
        latency: &snap.latency,
        log,
    };
    push_line(&mut text, &mut records, &line);
    Batch {
        text,
        records,
        next,
    }
}

/// The first line of every file: what wrote it and how it rotates.
#[derive(Serialize)]
pub struct FileStart<'a> {
    pub schema_version: u32,
    pub kind: &'static str,
    pub ts: u64,
    pub observer_version: &'static str,
    pub host: &'a str,
    /// The rotation settings in force.
    pub max_bytes: u64,
    pub max_files: usize,
}

pub fn file_start_line(ts: u64, host: &str, max_bytes: u64, max_files: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut n = 0;
    push_line(
        &mut out,
        &mut n,
        &FileStart {
            schema_version: LOG_SCHEMA_VERSION,
            kind: "file_start",
            ts,
            observer_version: env!("CARGO_PKG_VERSION"),
            host,
            max_bytes,
            max_files,
        },
    );
    out
}
