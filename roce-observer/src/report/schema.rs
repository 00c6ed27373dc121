//! The report's types: everything the engine knows at one moment, as plain data that every
//! renderer (table, JSON, flow log, TUI) reads. Field names are the JSON names (docs/metrics.md).
//! The output contract: this module imports nothing from the engine's analysis modules.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv6Addr},
    sync::Arc,
};

use roce_observer_common::{
    flow::{NAK_CLASSES, nak},
    psn::{PSN_MASK, psn_add},
};
use serde::{Serialize, Serializer, ser::SerializeMap};

/// A 16-byte address as shown: IPv4-mapped addresses as dotted IPv4.
pub fn show_ip(a: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(a);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The reverse of [`show_ip`].
pub fn store_ip(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// JSON schema version of the document built from a snapshot.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Snapshot {
    pub schema_version: u32,
    /// Shared with the engine, which rebuilds a flow's entry only when the flow changed.
    pub flows: Vec<Arc<FlowSnapshot>>,
    pub pfc: Vec<PfcSnapshot>,
    /// Switch-mirror sessions: frames and mirror-path loss per session.
    pub mirror: Vec<MirrorSnapshot>,
    pub summary: Summary,
    pub latency: LatencySnapshot,
    pub ecmp: EcmpSnapshot,
    pub alerts: Vec<AlertSnapshot>,
    /// Training steps (null when the traffic is not periodic).
    pub steps: Option<StepsSnapshot>,
    /// Flows seen at two or more points: per ordered pair, request PSNs missing downstream.
    pub paths: Vec<PathPair>,
    /// Where the first PFC storm started and how it spread (null without a storm).
    pub pfc_origin: Option<PfcOrigin>,
    /// Lossless-class findings (docs/metrics.md, "Lossless class diagnosis"): PFC before ECN,
    /// ECN at low load, PFC deadlock (absent when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lossless: Vec<LosslessFinding>,
    /// The host's RDMA NIC counters over the interval (live runs on a host with RDMA
    /// devices; absent otherwise). Not engine data: assembled from [`super::Beside`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nic: Vec<NicPortSnapshot>,
    /// The host's QPs and their owners from RDMA netlink (live runs on a host with RDMA
    /// devices; absent otherwise). Flows are matched to them by QP number.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub qp_owners: Vec<QpOwner>,
}

/// One QP of a local RDMA device and who owns it (what `rdma resource show qp` prints).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct QpOwner {
    pub device: String,
    pub port: Option<u32>,
    pub lqpn: u32,
    /// RC/UC only.
    pub rqpn: Option<u32>,
    /// The NIC's send and receive queue PSNs.
    pub sq_psn: Option<u32>,
    pub rq_psn: Option<u32>,
    /// IB QP state name (RESET, INIT, RTR, RTS, SQD, SQE, ERR).
    pub state: Option<&'static str>,
    /// The creating process; None for QPs the kernel created.
    pub pid: Option<u32>,
    /// /proc/PID/comm, or the kernel module's name for kernel QPs.
    pub comm: String,
    /// The QP was destroyed since it was read (kept so that its flows stay labelled).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
}

/// One NIC counter: its value, and its change over the interval.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NicCounter {
    pub total: u64,
    pub delta: u64,
    pub per_s: f64,
}

/// One RDMA port's counters (`hw_counters`, `counters`) and its netdev's PFC/pause counters
/// (`ethtool -S`), as rates over the interval.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NicPortSnapshot {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// Wall-clock seconds the deltas cover.
    pub interval_s: f64,
    pub rdma: BTreeMap<String, NicCounter>,
    pub pause: BTreeMap<String, NicCounter>,
}

/// Opcode counts in opcode order, serialized as a JSON object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpcodeCounts(pub Vec<(String, u64)>);

impl Serialize for OpcodeCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct NakCounts {
    pub psn_seq_err: u64,
    pub rnr: u64,
    pub invalid_request: u64,
    pub remote_access: u64,
    pub remote_op: u64,
    pub other: u64,
}

impl NakCounts {
    /// Every class with its name, in the order of `roce_observer_common::nak::NAMES` (the one
    /// list of NAK classes; the test below keeps the field names equal to it).
    pub fn by_class(&self) -> [(&'static str, u64); NAK_CLASSES] {
        let counts = [
            self.psn_seq_err,
            self.rnr,
            self.invalid_request,
            self.remote_access,
            self.remote_op,
            self.other,
        ];
        std::array::from_fn(|i| (nak::NAMES[i], counts[i]))
    }

    /// NAKs of every class.
    pub fn total(&self) -> u64 {
        self.by_class().iter().map(|(_, n)| n).sum()
    }
}
/// Upper bounds (ns) of the classic latency buckets: 1 us .. 100 ms in 1-2-5 steps, the range
/// of RDMA request -> answer times from one switch hop to a congested fabric.
pub const LATENCY_BUCKETS_NS: [u64; 16] = [
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
];

/// Latency quantiles in nanoseconds; all but `count` are null without samples.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RttSummary {
    pub count: u64,
    pub min: Option<u64>,
    pub p50: Option<u64>,
    pub p90: Option<u64>,
    pub p99: Option<u64>,
    pub p999: Option<u64>,
    pub max: Option<u64>,
    pub mean: Option<f64>,
    /// Exact samples per classic bucket (`LATENCY_BUCKETS_NS`, not cumulative) and their sum,
    /// for the Prometheus histogram; not part of the JSON document.
    #[serde(skip)]
    pub buckets: [u64; LATENCY_BUCKETS_NS.len()],
    #[serde(skip)]
    pub sum_ns: u128,
}

/// Where a mirrored flow was mirrored from: the switch (outer source address), the
/// encapsulation and the one ID it carries (ERSPAN session ID, VNI, or the GRE key of ERSPAN I
/// and GRE bridging, 0 without a key). Part of the observation point.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MirrorSource {
    /// "erspan1", "erspan2", "erspan3", "gre" or "vxlan".
    pub encap: &'static str,
    pub outer_src: IpAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vni: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gre_key: Option<u32>,
}

impl MirrorSource {
    /// The mirror source of a flow key's or session key's fields; `None` when not mirrored.
    pub fn new(encap: u8, outer_src: [u8; 16], id: u32) -> Option<MirrorSource> {
        let name = roce_observer_common::mirror::encap::name(encap)?;
        let mut m = MirrorSource {
            encap: name,
            outer_src: show_ip(outer_src),
            session_id: None,
            vni: None,
            gre_key: None,
        };
        *match roce_observer_common::mirror::encap::id_name(encap) {
            "session_id" => &mut m.session_id,
            "vni" => &mut m.vni,
            _ => &mut m.gre_key,
        } = Some(id);
        Some(m)
    }

    /// The ID with its name, for one-line renderers: "session 7", "vni 5001", "key 0".
    pub fn id_label(&self) -> String {
        match (self.session_id, self.vni, self.gre_key) {
            (Some(s), _, _) => format!("session {s}"),
            (_, Some(v), _) => format!("vni {v}"),
            (_, _, Some(k)) => format!("key {k}"),
            _ => String::new(),
        }
    }

    /// "erspan2:198.51.100.1#7", for a narrow column.
    pub fn compact(&self) -> String {
        let id = self.session_id.or(self.vni).or(self.gre_key).unwrap_or(0);
        format!("{}:{}#{id}", self.encap, self.outer_src)
    }

    /// "erspan2 198.51.100.1 session 7".
    pub fn label(&self) -> String {
        format!("{} {} {}", self.encap, self.outer_src, self.id_label())
    }
}

/// A flow's identity across snapshots: addresses, QP and observation point (interface,
/// direction, mirror source).
pub type FlowId = (
    IpAddr,
    IpAddr,
    u32,
    String,
    &'static str,
    Option<MirrorSource>,
);

impl FlowSnapshot {
    pub fn id(&self) -> FlowId {
        (
            self.src_ip,
            self.dst_ip,
            self.dst_qp,
            self.iface.clone(),
            self.direction,
            self.mirror.clone(),
        )
    }
}

/// One switch-mirror session as seen at one attach point (`mirror` section).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MirrorSnapshot {
    pub iface: String,
    pub direction: &'static str,
    #[serde(flatten)]
    pub source: MirrorSource,
    pub outer_dst: IpAddr,
    /// Frames unwrapped.
    pub frames: u64,
    /// Whether its frames carry a GRE sequence number (VXLAN never does).
    pub sequenced: bool,
    /// Sequence numbers skipped: frames lost on the mirror path.
    pub seq_lost: u64,
    /// Frames not newer than the newest seen (reordered or duplicated).
    pub seq_late: u64,
    /// Jumps of 65536 or more: the session's numbering restarted.
    pub seq_resyncs: u64,
}

/// Reorder distances by bucket (`sequence::DISTANCE_NAMES`).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ReorderDistance {
    #[serde(rename = "1")]
    pub d1: u64,
    #[serde(rename = "2-3")]
    pub d2_3: u64,
    #[serde(rename = "4-7")]
    pub d4_7: u64,
    #[serde(rename = "8-15")]
    pub d8_15: u64,
    #[serde(rename = "16-31")]
    pub d16_31: u64,
    #[serde(rename = "32+")]
    pub d32: u64,
}

impl ReorderDistance {
    pub fn new(b: [u64; roce_observer_common::sequence::DISTANCE_BUCKETS]) -> ReorderDistance {
        ReorderDistance {
            d1: b[0],
            d2_3: b[1],
            d4_7: b[2],
            d8_15: b[3],
            d16_31: b[4],
            d32: b[5],
        }
    }

    pub fn buckets(&self) -> [u64; roce_observer_common::sequence::DISTANCE_BUCKETS] {
        [
            self.d1,
            self.d2_3,
            self.d4_7,
            self.d8_15,
            self.d16_31,
            self.d32,
        ]
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlowSnapshot {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub dst_qp: u32,
    pub iface: String,
    pub direction: &'static str,
    /// The mirror source, for a flow seen inside switch mirrors (null otherwise).
    pub mirror: Option<MirrorSource>,
    /// "RC", "UC", "UD", "XRC", ..., or null for a flow of CNPs only.
    pub transport: Option<&'static str>,
    pub packets: u64,
    pub bytes: u64,
    pub opcodes: OpcodeCounts,
    pub other_transport: u64,
    pub psn_gaps: u64,
    pub psn_missing: u64,
    pub retransmits: u64,
    pub req_retransmits: u64,
    pub resp_retransmits: u64,
    /// First copies that arrived after a newer PSN (docs/metrics.md, "Reordering and loss"),
    /// the largest distance and the distances by bucket.
    pub reordered: u64,
    pub reorder_distance_max: u64,
    pub reorder_distance: ReorderDistance,
    /// PSN sequence-error NAKs for this flow's requests that were not lost.
    pub reorder_naks: u64,
    /// Skipped PSNs neither arrived nor declared lost yet.
    pub psn_holes: u64,
    pub acks: u64,
    pub naks: NakCounts,
    pub cnp: u64,
    pub ecn_ce: u64,
    pub ecn_ect: u64,
    pub dscp: u8,
    pub pcp: Option<u8>,
    pub peer_qp: Option<u32>,
    pub udp_src_ports: u64,
    pub udp_src_port_overflow: u64,
    /// Shared by every flow without samples (most of them): a summary is 264 bytes, and a
    /// large table holds one view per flow, two while a report replaces them.
    pub rtt_ns: Arc<RttSummary>,
    /// ns since the Unix epoch (capture time, or the clock the live path converted to).
    pub first_ts: u64,
    pub last_ts: u64,
    /// bits/s over the reporting interval.
    pub rate_bps: f64,
    /// The local QP this flow goes into or comes out of, and its process (live runs on a host
    /// with RDMA devices; absent otherwise).
    /// Boxed: most flows have none, and the view is kept per flow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<Box<QpOwner>>,
    /// Request PSNs for the flow log's per-interval fields (docs/log-schema.md, `flow`); not
    /// in the JSON document, whose totals need none of it.
    #[serde(skip)]
    pub psn_trail: PsnTrail,
    /// Which build of the view this is (not shown, not compared).
    #[serde(skip)]
    pub stamp: ViewStamp,
}

/// What a flow log line needs to say which request PSNs an interval brought and which it
/// declared lost, so that the lines of several observers can be joined PSN by PSN.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PsnTrail {
    /// The flow's first and highest request PSN (none before its first request).
    pub requests: Option<(u32, u32)>,
    /// Runs of request PSNs declared lost (boxed: most flows have none).
    pub lost: Option<Box<LostRuns>>,
    /// Path events the observation could not send (per-flow rate limit, full ring buffer, a
    /// packet that declared more than one run): runs declared then are missing from `lost`.
    pub lost_unsent: u64,
}

/// The request PSNs declared lost on a flow (docs/metrics.md, "Reordering and loss"), as its
/// path events told them: how many so far, and the newest runs of consecutive PSNs (PSNs that
/// continue the newest run extend it: the reorder window declares a burst one PSN per packet).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LostRuns {
    /// PSNs declared lost so far.
    pub declared: u64,
    /// At most [`LostRuns::KEPT`], oldest first: (first PSN, how many).
    pub recent: std::collections::VecDeque<(u32, u32)>,
}

impl LostRuns {
    /// Runs kept per flow: the most a log line lists (more in one interval is marked
    /// truncated), so a line stays bounded however much is lost.
    pub const KEPT: usize = 8;

    pub fn push(&mut self, first: u32, count: u32) {
        self.declared += u64::from(count);
        if let Some(last) = self.recent.back_mut()
            && psn_add(last.0, last.1) == first
            && last.1.saturating_add(count) <= PSN_MASK
        {
            last.1 += count;
            return;
        }
        if self.recent.len() == Self::KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back((first, count));
    }

    /// The PSNs declared lost after the first `before`, as runs oldest first, and whether some
    /// of them are no longer kept. A count below `before` is a flow that left the table and
    /// came back: every PSN is new.
    pub fn since(&self, before: u64) -> (Vec<(u32, u32)>, bool) {
        let mut left = if self.declared >= before {
            self.declared - before
        } else {
            self.declared
        };
        let mut runs = Vec::new();
        for &(first, count) in self.recent.iter().rev() {
            if left == 0 {
                break;
            }
            // The newest `take` PSNs of the run are new; the older ones were listed before.
            let take = u32::try_from(left).unwrap_or(u32::MAX).min(count);
            runs.push((psn_add(first, count - take), take));
            left -= u64::from(take);
        }
        runs.reverse();
        (runs, left > 0)
    }
}

/// Which build of a flow's view this is: unique in the process; a copy gets a new one, and so
/// must a view changed in place. A reader that keeps the stamps of the views it last saw (the
/// log directory's baseline) tells a view it already wrote from one to look at again without
/// holding the views: holding them kept two generations of views alive while the engine
/// replaced them, a third of the memory of a table of 100,000 flows. Not part of
/// the content: views that differ only in their stamps are equal.
#[derive(Debug)]
pub struct ViewStamp(u64);

impl ViewStamp {
    pub fn new() -> ViewStamp {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        ViewStamp(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    pub fn get(&self) -> u64 {
        self.0
    }
}

impl Default for ViewStamp {
    fn default() -> ViewStamp {
        ViewStamp::new()
    }
}

impl Clone for ViewStamp {
    /// A copy may be changed: it is another build.
    fn clone(&self) -> ViewStamp {
        ViewStamp::new()
    }
}

impl PartialEq for ViewStamp {
    fn eq(&self, _: &ViewStamp) -> bool {
        true
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PfcSnapshot {
    pub iface: String,
    pub direction: &'static str,
    pub src_mac: String,
    /// 0..=7, or null for a legacy 802.3x PAUSE (the whole link).
    pub priority: Option<u8>,
    /// "pfc" or "pause".
    pub kind: &'static str,
    /// XOFF: enabled class (or PAUSE) with a non-zero time.
    pub pause_frames: u64,
    pub xon_frames: u64,
    pub pause_quanta: u64,
    /// `pause_quanta` at the link speed, in microseconds (requested pause time).
    pub pause_us: f64,
    /// Time actually paused (union of pause periods, cut short by XON), in microseconds.
    pub paused_us: f64,
    /// `paused_us` / the reporting interval.
    pub paused_fraction: f64,
    /// A storm was detected (paused fraction above the threshold for a whole window).
    pub storm: bool,
    pub storms: u64,
    pub first_ts: u64,
    pub last_ts: u64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CaptureSummary {
    pub format: &'static str,
    pub frames: u64,
    pub snap_truncated: u64,
    pub skipped_link_type: u64,
    /// Link types of the interfaces read ("ETHERNET", "LINUX_SLL2", ...).
    pub link_types: Vec<&'static str>,
    /// For link types other than Ethernet: what their frames do not show (one line each).
    pub unseen: Vec<String>,
    /// The damage that stopped reading early, if any.
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub total_packets: u64,
    pub roce_packets: u64,
    pub pfc_frames: u64,
    pub pause_8023x: u64,
    pub non_roce: u64,
    pub malformed: u64,
    pub ip_fragments: u64,
    pub unsupported: u64,
    /// Kernel error counters by `Counter::name()`.
    pub map_full: u64,
    pub ringbuf_full: u64,
    /// Timestamped requests pushed out of the table of waiting requests before their answer
    /// (docs/metrics.md, "Latency").
    pub pending_full: u64,
    /// Packets the kernel could not hand to its scoreboard program (never expected: a loader
    /// fault), counted in their class and in no flow.
    pub tail_call_failed: u64,
    /// Ring-buffer events lost (equals `ringbuf_full`).
    pub events_lost: u64,
    /// Frames lost on the mirror path: the sum of the mirror sessions' `seq_lost`.
    pub mirror_seq_lost: u64,
    /// Ring-buffer records received, all kinds (captures: the records the kernel programs'
    /// shared observation would have sent for the same frames).
    pub events: u64,
    /// `events` / `total_packets` (0 before the first packet).
    pub events_per_packet: f64,
    /// `events` by kind (`new_flow`, `pfc`, `pause`, `latency`, `data_run`, `signal_run`,
    /// `path`), every kind present.
    pub events_by_kind: BTreeMap<&'static str, u64>,
    /// What watching costs: the observer's own CPU and memory, and its kernel programs' cost
    /// and ring-buffer fill; null for `analyze`. Filled in by the live loop, not the engine.
    pub observer: Option<ObserverCost>,
    pub flows: u64,
    /// Path MTU used for READ reservations, and whether it was learned from READ responses.
    pub pmtu: u32,
    pub pmtu_learned: bool,
    pub link_gbps: f64,
    /// The UDP ports RoCEv2 and VXLAN were looked for on (`--roce-port`, `--vxlan-port`): what
    /// a report without RoCE advises against.
    pub roce_port: u16,
    pub vxlan_port: u16,
    /// The resolution of the timestamps, ns: 1 on the kernel path; for a capture, from its
    /// header (1000 for a microsecond pcap), the coarsest of its interfaces. A latency below
    /// it was not measurable.
    pub ts_resolution_ns: u64,
    /// Reporting interval, ns since the epoch.
    pub interval_start_ts: u64,
    pub interval_end_ts: u64,
    pub interval_s: f64,
    /// Counters per direction ("ingress", "egress", "capture"), directions with traffic only.
    pub by_direction: BTreeMap<&'static str, BTreeMap<&'static str, u64>>,
    pub alerts_dropped: u64,
    /// Log lines that could not be written (`--log-dir`: full disk, removed directory, lost
    /// permission); null without a log directory. From the outputs ([`super::OutputHealth`]).
    pub log_records_lost: Option<u64>,
    /// Failed writes of the `--prom-file` textfile (each retried the next interval); null
    /// without one. From the outputs ([`super::OutputHealth`]).
    pub prom_file_errors: Option<u64>,
    /// The interfaces `run -i` watches and whether each is still there (a removed interface
    /// ends the run); empty for captures. From the live loop ([`super::Beside`]).
    pub interfaces_up: BTreeMap<String, bool>,
    /// `run --capture FILE`: the share of the file taken so far (bytes to the end of the
    /// last frame read / the file's size, 1 at its end); null for a stream, `analyze` and
    /// interfaces.
    pub capture_read: Option<f64>,
    /// Present for captures (`analyze`).
    pub capture: Option<CaptureSummary>,
}

/// The observer's own cost (docs/metrics.md, "Observer cost").
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ObserverCost {
    /// CPU time (user + system) of the observer process over the report interval, as a
    /// fraction of one core.
    pub cpu_fraction: f64,
    /// CPU time (user + system) since the observer started, seconds.
    pub cpu_seconds: f64,
    /// Resident memory of the observer process, bytes.
    pub rss_bytes: u64,
    /// The kernel programs' side; null for a source without kernel programs.
    pub kernel: Option<KernelCost>,
}

/// The kernel programs' cost and their ring buffer.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct KernelCost {
    /// Size of the ring buffer, bytes.
    pub ringbuf_bytes: u64,
    /// The highest fill of the ring buffer (0..1, bytes not yet read / size) seen before a
    /// read during the report interval.
    pub ringbuf_fill: f64,
    /// Kernel BPF run-time statistics are on (`kernel.bpf_stats_enabled`, or `run
    /// --bpf-stats`): without them the programs' run counts and times stay 0.
    pub bpf_stats: bool,
    /// Each attached program (tail-called scoreboard programs are counted in the program
    /// that called them).
    pub programs: Vec<ProgramCost>,
}

/// One kernel program's runs, from its `bpf_prog_info`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProgramCost {
    /// The program's name (as bpftool shows it) and its hook: `xdp` or `tc`.
    pub name: String,
    pub hook: &'static str,
    /// Runs and nanoseconds spent since the statistics were turned on (0 while off).
    pub run_count: u64,
    pub run_time_ns: u64,
    /// `run_time_ns` / `run_count`; null before the first counted run.
    pub ns_per_run: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencySnapshot {
    /// Latency is seen at the observation point, not at either host.
    pub observed_at: &'static str,
    pub overall: RttSummary,
    pub flows_with_samples: u64,
    /// Timestamped requests still waiting for their answer.
    pub pending: u64,
    pub relative_accuracy: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowRef {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub dst_qp: u32,
    pub iface: String,
    pub direction: &'static str,
    pub mirror: Option<MirrorSource>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct PfcRef {
    pub iface: String,
    pub direction: &'static str,
    pub src_mac: String,
    pub priority: Option<u8>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AlertSnapshot {
    pub kind: &'static str,
    pub reason: String,
    pub flow: Option<FlowRef>,
    pub pfc: Option<PfcRef>,
    pub first_ts: u64,
    pub last_ts: u64,
    pub count: u64,
}

// ECMP views (docs/metrics.md, "ECMP"), computed by ecmp.rs.

/// The hash a switch applies to the UDP 5-tuple (the modelled ECMP view; computed in ecmp.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EcmpHash {
    /// CRC-32 (IEEE) over seed ‖ src IP ‖ dst IP ‖ protocol ‖ src port ‖ dst port.
    Crc32,
    /// XOR of the 32-bit words of the same fields and the seed, folded to 16 bits.
    Xor,
    /// Toeplitz (RSS) over src IP ‖ dst IP ‖ src port ‖ dst port with the Microsoft RSS key,
    /// its first four bytes XORed with the seed.
    Toeplitz,
}

impl EcmpHash {
    pub fn name(self) -> &'static str {
        match self {
            EcmpHash::Crc32 => "crc32",
            EcmpHash::Xor => "xor",
            EcmpHash::Toeplitz => "toeplitz",
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PathLoad {
    pub path: String,
    pub bytes: u64,
    pub flows: u64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MeasuredView {
    pub paths: Vec<PathLoad>,
    pub imbalance: f64,
    pub jain: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TupleLoad {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub udp_src_port: u16,
    pub bytes: u64,
    pub qps: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Collision {
    pub path: u32,
    /// Bytes of the elephants that share this path.
    pub bytes: u64,
    pub elephants: Vec<TupleLoad>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ModelledView {
    pub hash: EcmpHash,
    pub seed: u32,
    pub paths: u32,
    pub bytes_per_path: Vec<u64>,
    pub tuples_per_path: Vec<u64>,
    pub imbalance: f64,
    pub jain: f64,
    /// Paths that carry two or more elephant 5-tuples (at least half a path's fair share,
    /// total / 2N, each), busiest first; at most 10.
    pub collisions: Vec<Collision>,
    /// Flows left out of the model: their packets arrived reordered, the fabric sprays them
    /// over several paths (no per-5-tuple hash decides their path), and their bytes.
    pub multipath_flows: u64,
    pub multipath_bytes: u64,
    /// New source ports for colliding elephants, and the model's view after (ecmp_advice.rs).
    pub advice: Option<EcmpAdvice>,
    /// QPs per connection that spread the colliding elephants, and the model's view after
    /// (ecmp_advice.rs).
    pub qp_advice: Option<QpAdvice>,
}

/// One connection (host pair) of the QP-count prescription.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct QpCount {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    /// Its elephant bytes, and the QPs on its elephant 5-tuples now.
    pub bytes: u64,
    pub qps_now: u64,
    /// QPs to split those bytes over, and the source ports the model gave them.
    pub qps: u32,
    pub udp_src_ports: Vec<u16>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct QpAdvice {
    pub connections: Vec<QpCount>,
    pub bytes_per_path_after: Vec<u64>,
    pub imbalance_after: f64,
    pub jain_after: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PortChange {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub udp_src_port: u16,
    pub new_udp_src_port: u16,
    pub bytes: u64,
    pub from_path: u32,
    pub to_path: u32,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EcmpAdvice {
    pub changes: Vec<PortChange>,
    pub bytes_per_path_after: Vec<u64>,
    pub imbalance_after: f64,
    pub jain_after: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HostPairEntropy {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub bytes: u64,
    pub qps: u64,
    pub udp_src_ports: u64,
    /// Share of the pair's bytes on its busiest 5-tuple.
    pub busiest_tuple_share: f64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct EcmpSnapshot {
    pub measured: MeasuredView,
    pub modelled: Option<ModelledView>,
    /// Host pairs, most bytes first; at most `ecmp::MAX_PAIRS`.
    pub entropy: Vec<HostPairEntropy>,
}

// Training steps (docs/metrics.md, "Training steps"), computed by steps.rs.

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StepsSnapshot {
    /// Step period, milliseconds.
    pub period_ms: f64,
    /// Steps found in the window (communication bursts on the period's grid).
    pub count: u64,
    /// Mean share of a step spent communicating.
    pub comm_fraction: f64,
    /// The analysed window (the last data bytes kept), seconds.
    pub window_s: f64,
    /// The data kept (first to last non-empty bin), seconds: more than `window_s` when only its
    /// latest part has one period (the step time changed).
    pub retained_s: f64,
    /// Strength of the periodicity: the normalised autocorrelation at the period (0..1).
    pub confidence: f64,
    /// The last steps, oldest first (at most 10).
    pub recent: Vec<StepSpan>,
    /// Flows that end their step's communication last, most lag first.
    pub stragglers: Vec<Straggler>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StepSpan {
    /// ns since the epoch.
    pub start: u64,
    pub duration_ms: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Straggler {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub dst_qp: u32,
    pub iface: String,
    pub direction: &'static str,
    /// Steps in which this flow's data ended last, of `steps` in which it was compared.
    pub late_steps: u64,
    pub steps: u64,
    /// Mean time its data ended after the median flow's, over the compared steps.
    pub mean_lag_ms: f64,
    /// Seen in its late steps' windows.
    pub evidence: StragglerEvidence,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StragglerEvidence {
    /// CE-marked data packets of the flow.
    pub ce: u64,
    /// CNPs from its destination host to its source host.
    pub cnp: u64,
    /// Retransmitted data packets of the flow.
    pub retransmits: u64,
    /// NAKs from its destination host to its source host.
    pub naks: u64,
    /// Pause time requested by XOFF frames seen anywhere, microseconds.
    pub pause_us: f64,
}

// PFC storm origin (docs/metrics.md), computed by pfc_origin.rs.

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PauseSource {
    pub source: PfcRef,
    /// The first XOFF of its first pause episode in the window (docs/metrics.md), ns since the
    /// epoch; it may lie before the window.
    pub first_xoff_ts: u64,
    /// That episode's paused time (up to the snapshot), milliseconds, and the end of its last
    /// pause period so far.
    pub episode_paused_ms: f64,
    pub episode_end_ts: u64,
    /// Paused time in the window / the window.
    pub paused_fraction: f64,
    /// This source had a storm of its own.
    pub storm: bool,
    /// Who paused it: the index in `sources` of the source whose pause it followed, by the
    /// chain rules of docs/metrics.md; `None` for a root (nothing in the window explains it).
    pub paused_by: Option<usize>,
    /// What ties it to `paused_by`: "shared_flow" (a flow seen at both interfaces, same
    /// priority or link-level PAUSE) or "same_port" (the same MAC and interface, another
    /// priority).
    pub evidence: Option<&'static str>,
    /// Its first XOFF after that of `paused_by`, milliseconds.
    pub hop_ms: Option<f64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PfcOrigin {
    /// The first storm onset of any source, and the window around it (two storm windows
    /// before, one after).
    pub storm_onset_ts: u64,
    pub window_start_ts: u64,
    pub window_end_ts: u64,
    /// The origin candidate: the root whose chain reaches the most sources (ties: the first
    /// XOFF), which is the first source unless the first pause spread nowhere; null when the
    /// sources include a PFC deadlock (`deadlock`), which has no root.
    pub origin: Option<PfcRef>,
    /// Its index in `sources`.
    pub origin_index: Option<usize>,
    /// Some sources pause in a deadlock cycle (see `lossless`): no origin is named.
    pub deadlock: bool,
    /// Sources its chain reaches (itself not counted), and the longest chain from it in hops.
    pub reached: usize,
    pub hops: usize,
    /// From the first source's first XOFF to the last source's, milliseconds.
    pub spread_ms: f64,
    /// Every source that paused in the window, by first XOFF.
    pub sources: Vec<PauseSource>,
}

// Where was it lost (docs/metrics.md), computed by pathloss.rs.

#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct PointRef {
    pub iface: String,
    pub direction: &'static str,
    /// The mirror source, for a point inside switch mirrors (null otherwise).
    pub mirror: Option<MirrorSource>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PathPair {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub dst_qp: u32,
    pub upstream: PointRef,
    pub downstream: PointRef,
    /// Request PSNs both points saw sent the first time.
    pub both: u64,
    /// Request PSNs `upstream` saw sent the first time and `downstream` did not, while
    /// `downstream` saw PSNs before and after them.
    pub missing: u64,
    /// The first of them (at most 16).
    pub missing_psns: Vec<u32>,
    /// Retransmissions `downstream` saw of PSNs `upstream` saw sent the first time and it never
    /// did (lost between them).
    pub downstream_retransmits_unseen: u64,
    /// Kernel path: some of either point's path events were suppressed by the kernel's
    /// per-flow limit (or past the engine's bound), so the counts are lower bounds. Only
    /// written when true.
    #[serde(skip_serializing_if = "is_false")]
    pub incomplete: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nak_classes_are_named_as_in_json_and_in_the_shared_list() {
        let naks = NakCounts {
            psn_seq_err: 1,
            rnr: 2,
            invalid_request: 3,
            remote_access: 4,
            remote_op: 5,
            other: 6,
        };
        let json = serde_json::to_value(&naks).expect("serializes");
        for (class, n) in naks.by_class() {
            assert_eq!(json[class], n, "{class}");
        }
        assert_eq!(json.as_object().map(|o| o.len()), Some(NAK_CLASSES));
        assert_eq!(naks.total(), 21);
    }

    #[test]
    fn a_copy_of_a_view_is_another_build_and_stamps_do_not_count_in_equality() {
        let a = ViewStamp::new();
        let b = a.clone();
        assert_ne!(a.get(), b.get());
        assert_ne!(ViewStamp::new().get(), ViewStamp::new().get());
        assert_eq!(a, b);
    }
}

// Lossless-class diagnosis (docs/metrics.md), computed by lossless.rs.

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LosslessFinding {
    /// `pfc_before_ecn`, `ecn_at_low_load` or `deadlock`.
    pub kind: &'static str,
    pub priority: u8,
    /// The observation points involved (a deadlock: its cycle, in order).
    pub points: Vec<String>,
    /// Time range of the evidence, ns since the epoch.
    pub start_ts: u64,
    pub end_ts: u64,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub episodes: Option<EpisodeFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle: Option<Vec<CycleMember>>,
}

/// Congestion episodes of one point and priority (`pfc_before_ecn`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EpisodeFigures {
    pub episodes: u64,
    /// Episodes whose first CE mark or CNP came first (or alone), and those whose first XOFF
    /// came first (or alone), with their share of all episodes.
    pub ecn_first: u64,
    pub pfc_first: u64,
    pub pfc_first_share: f64,
    /// Episodes with XOFFs and no CE mark or CNP.
    pub pause_without_marks: u64,
    /// Episodes with both, and their mean first XOFF - first mark (negative: pauses led).
    pub with_both: u64,
    pub mean_lead_ms: Option<f64>,
    /// CE-marked data packets, CNPs, ECT data packets at the point and priority.
    pub ce: u64,
    pub cnp: u64,
    pub ect_data: u64,
}

/// Marked load intervals of one point and priority (`ecn_at_low_load`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LoadFigures {
    /// The lowest utilisation (data rate / link speed) of an interval with CE marks.
    pub marking_starts_at: f64,
    pub marked_intervals: u64,
    /// Marked intervals below the low-load fraction, and their CE marks.
    pub low_load_intervals: u64,
    pub low_load_ce: u64,
    pub interval_ms: f64,
    pub link_gbps: f64,
}

/// One point of a deadlock cycle.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CycleMember {
    pub point: String,
    /// Start and length of its pause span.
    pub pause_start_ts: u64,
    pub paused_ms: f64,
    /// Its last data packet of the priority in that span (before the deadlock), if any.
    pub last_data_ts: Option<u64>,
}
