//! Prometheus metrics of a snapshot, encoded with the Prometheus project's Rust client
//! (`prometheus-client`) in the text format 0.0.4, for `/metrics` (`run --metrics ADDR`) and
//! the node_exporter textfile (`--prom-file`), which carry the same content.
//!
//! Cardinality is bounded whatever the flow table holds:
//! - per-flow series only for the `top_flows` flows with the most bytes, plus up to
//!   `top_flows` more flows with problems (PSN gaps, retransmissions, NAKs), most first;
//! - aggregates per observation point (interface + direction), per host pair (at most
//!   [`MAX_HOST_PAIRS`], most bytes first, counters only) and per NAK class;
//! - PFC per (interface, direction, priority), summed over the sending MACs;
//! - QP owners as one info series per flow that has series; NIC counters per device, port
//!   and counter (the device's own counter list);
//! - the observer's own health.
//!
//! Latency is a classic histogram with buckets from 1 us to 100 ms (`LATENCY_BUCKETS_NS`), so
//! it sums across flows and hosts; the bucket counts are exact. Counters are cumulative since
//! the observer started. Metric definitions: docs/metrics.md.

pub mod server;

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    sync::Arc,
};

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{MetricType, TypedMetric, counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};

use roce_observer_common::flow::{NAK_CLASSES, nak};

use crate::engine::flows::FastHash;
use crate::report::{FlowSnapshot, LATENCY_BUCKETS_NS, LosslessFinding, RttSummary, Snapshot};

/// Host pairs exported, most bytes first.
pub const MAX_HOST_PAIRS: usize = 256;
pub const DEFAULT_TOP_FLOWS: usize = 100;

/// Content type of the text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The observer's health beyond the snapshot's own counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Health {
    /// Log lines lost and written (`--log-dir`); None when there is no log.
    pub log_records_lost: Option<u64>,
    pub log_records_written: Option<u64>,
    /// How long encoding the previous scrape took, seconds (None before the first scrape).
    pub last_scrape_seconds: Option<f64>,
    pub scrapes: u64,
}

type Labels = Vec<(&'static str, String)>;

/// Series of one family with their labels; encoded by prometheus-client like its own families.
#[derive(Debug)]
struct ConstFamily<M>(Vec<(Labels, M)>);

impl<M: EncodeMetric + TypedMetric> EncodeMetric for ConstFamily<M> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, metric) in &self.0 {
            metric.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A classic histogram with fixed values: per-bucket counts (not cumulative), sum and count.
#[derive(Debug, Default, Clone)]
struct ConstHistogram {
    sum: f64,
    count: u64,
    buckets: [u64; LATENCY_BUCKETS_NS.len()],
}

impl TypedMetric for ConstHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_NS
            .iter()
            .zip(self.buckets)
            .map(|(&ns, n)| (ns as f64 / 1e9, n))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

impl ConstHistogram {
    fn add(&mut self, r: &RttSummary) {
        self.count += r.count;
        self.sum += r.sum_ns as f64 / 1e9;
        for (mine, theirs) in self.buckets.iter_mut().zip(r.buckets) {
            *mine += theirs;
        }
    }
}

/// Gaps + retransmissions + NAKs: what makes a flow a problem flow.
fn trouble(f: &FlowSnapshot) -> u64 {
    f.psn_gaps + f.retransmits + f.naks.total()
}

/// What the families over every flow need, gathered in one read of each flow: at 100,000 flows
/// each read of a flow is a cache miss, and a pass per family (the selection, the problem
/// flows, the sums) cost one miss per pass.
struct FlowSums<'a> {
    /// The flows that get their own series, in snapshot order.
    chosen: Vec<&'a FlowSnapshot>,
    /// Per observation point (interface, direction), in that order.
    points: BTreeMap<(&'a str, &'a str), Totals>,
    /// Per host pair (counters only: host pairs have no NAK or latency series).
    pairs: HashMap<(IpAddr, IpAddr), Totals, FastHash>,
    naks: [u64; NAK_CLASSES],
}

impl<'a> FlowSums<'a> {
    /// The sums of `flows`; the flows with series are the top `k` by bytes, then up to `k` more
    /// with problems.
    fn of(flows: &'a [Arc<FlowSnapshot>], k: usize) -> FlowSums<'a> {
        use std::cmp::Reverse;
        let mut by_bytes: Vec<(Reverse<u64>, usize)> = Vec::with_capacity(flows.len());
        let mut troubled: Vec<(Reverse<u64>, usize)> = Vec::new();
        // A point's latency sum is a float: each point's flows are summed in snapshot order, as
        // they always were. Runs of one point are common: the last one is tried first.
        let mut points: Vec<((&str, &str), Totals)> = Vec::new();
        let mut point_at: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        let mut last_point = 0;
        let mut pairs: HashMap<(IpAddr, IpAddr), Totals, FastHash> = HashMap::default();
        // The flows come sorted by address: runs of one host pair are summed before the
        // lookup (counters only, so the order of the sums does not matter).
        let mut run: Option<((IpAddr, IpAddr), Totals)> = None;
        let mut naks = [0u64; NAK_CLASSES];
        for (i, f) in flows.iter().enumerate() {
            by_bytes.push((Reverse(f.bytes), i));
            let t = trouble(f);
            if t > 0 {
                troubled.push((Reverse(t), i));
            }
            let point = (f.iface.as_str(), f.direction);
            if points.get(last_point).is_none_or(|(p, _)| *p != point) {
                last_point = *point_at.entry(point).or_insert_with(|| {
                    points.push((point, Totals::default()));
                    points.len() - 1
                });
            }
            points[last_point].1.add(f);
            let pair = (f.src_ip, f.dst_ip);
            match run.as_mut() {
                Some((p, sum)) if *p == pair => sum.add_counters(f),
                _ => {
                    if let Some((p, sum)) = run.take() {
                        pairs.entry(p).or_default().merge_counters(&sum);
                    }
                    let mut sum = Totals::default();
                    sum.add_counters(f);
                    run = Some((pair, sum));
                }
            }
            for (sum, (_, v)) in naks.iter_mut().zip(f.naks.by_class()) {
                *sum += v;
            }
        }
        if let Some((p, sum)) = run {
            pairs.entry(p).or_default().merge_counters(&sum);
        }
        FlowSums {
            chosen: choose(flows, by_bytes, troubled, k),
            points: points.into_iter().collect(),
            pairs,
            naks,
        }
    }
}

/// The flows with series: top `k` by bytes, then up to `k` more of the `troubled` (gaps,
/// retransmissions, NAKs), most trouble first; in snapshot order.
fn choose(
    flows: &[Arc<FlowSnapshot>],
    mut by_bytes: Vec<(std::cmp::Reverse<u64>, usize)>,
    mut troubled: Vec<(std::cmp::Reverse<u64>, usize)>,
    k: usize,
) -> Vec<&FlowSnapshot> {
    // Only which flows are the top k matters, not their order: a selection, not a sort of
    // every flow (the order, most bytes then index, is total, so the set is the same).
    if k < by_bytes.len() {
        by_bytes.select_nth_unstable(k);
        by_bytes.truncate(k);
    }
    let mut chosen = vec![false; flows.len()];
    for &(_, i) in &by_bytes {
        chosen[i] = true;
    }
    troubled.retain(|(_, i)| !chosen[*i]);
    troubled.sort_unstable();
    for &(_, i) in troubled.iter().take(k) {
        chosen[i] = true;
    }
    (0..flows.len())
        .filter(|&i| chosen[i])
        .map(|i| &*flows[i])
        .collect()
}

fn flow_labels(f: &FlowSnapshot) -> Labels {
    let mut labels = vec![
        ("src", f.src_ip.to_string()),
        ("dst", f.dst_ip.to_string()),
        ("qp", f.dst_qp.to_string()),
        ("iface", f.iface.clone()),
        ("direction", f.direction.to_string()),
    ];
    // A flow seen inside switch mirrors names its mirror source: one flow mirrored by two
    // switches is two flows. Bounded as the other labels are (top flows only).
    if let Some(m) = &f.mirror {
        labels.push(("mirror", m.label()));
    }
    labels
}

/// One series per mirror session and field: at most MAX_MIRROR_SESSIONS sessions (the table
/// bound of both paths), so at most 4 x 1024 series.
fn register_mirrors(reg: &mut Registry, snap: &Snapshot) {
    if snap.mirror.is_empty() {
        return;
    }
    let labels = |m: &crate::report::MirrorSnapshot| -> Labels {
        vec![
            ("encap", m.source.encap.to_string()),
            ("outer_src", m.source.outer_src.to_string()),
            ("outer_dst", m.outer_dst.to_string()),
            ("id", m.source.id_label()),
            ("iface", m.iface.clone()),
            ("direction", m.direction.to_string()),
        ]
    };
    type Field = fn(&crate::report::MirrorSnapshot) -> u64;
    let fields: [(&str, &str, Field); 4] = [
        (
            "roce_mirror_frames",
            "Frames unwrapped, per mirror session",
            |m| m.frames,
        ),
        (
            "roce_mirror_seq_lost",
            "Sequence numbers skipped (frames lost on the mirror path), per mirror session",
            |m| m.seq_lost,
        ),
        (
            "roce_mirror_seq_late",
            "Frames not newer than the newest seen (reordered, duplicated), per mirror session",
            |m| m.seq_late,
        ),
        (
            "roce_mirror_seq_resyncs",
            "Restarts of the sequence numbering, per mirror session",
            |m| m.seq_resyncs,
        ),
    ];
    for (name, help, get) in fields {
        let series = snap
            .mirror
            .iter()
            .map(|m| (labels(m), ConstCounter::new(get(m))))
            .collect();
        reg.register(name, help, ConstFamily(series));
    }
}

/// Counters summed over a group of flows.
#[derive(Clone, Debug, Default)]
struct Totals {
    flows: u64,
    packets: u64,
    bytes: u64,
    psn_gaps: u64,
    psn_missing: u64,
    retransmits: u64,
    reordered: u64,
    reorder_naks: u64,
    cnp: u64,
    ecn_ce: u64,
    naks: [u64; NAK_CLASSES],
    latency: ConstHistogram,
}

impl Totals {
    fn add(&mut self, f: &FlowSnapshot) {
        self.add_counters(f);
        for (sum, (_, v)) in self.naks.iter_mut().zip(f.naks.by_class()) {
            *sum += v;
        }
        self.latency.add(&f.rtt_ns);
    }

    /// The flow's counters, without its NAKs by class and latency (host pairs have neither).
    fn add_counters(&mut self, f: &FlowSnapshot) {
        self.flows += 1;
        self.packets += f.packets;
        self.bytes += f.bytes;
        self.psn_gaps += f.psn_gaps;
        self.psn_missing += f.psn_missing;
        self.retransmits += f.retransmits;
        self.reordered += f.reordered;
        self.reorder_naks += f.reorder_naks;
        self.cnp += f.cnp;
        self.ecn_ce += f.ecn_ce;
    }

    /// The counters of `other` (as [`Totals::add_counters`] sums them) added to these.
    fn merge_counters(&mut self, other: &Totals) {
        self.flows += other.flows;
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.psn_gaps += other.psn_gaps;
        self.psn_missing += other.psn_missing;
        self.retransmits += other.retransmits;
        self.reordered += other.reordered;
        self.reorder_naks += other.reorder_naks;
        self.cnp += other.cnp;
        self.ecn_ce += other.ecn_ce;
    }
}

/// Register one counter family per field of a group of totals; with `detail`, also NAKs by
/// class and the latency histogram (19 series per group, so not for host pairs).
fn register_totals(
    reg: &mut Registry,
    prefix: &str,
    what: &str,
    groups: &[(Labels, Totals)],
    detail: bool,
) {
    type Get = fn(&Totals) -> u64;
    let fields: [(&str, &str, Get); 9] = [
        ("packets", "RoCE packets", |t| t.packets),
        ("bytes", "Frame bytes of RoCE packets", |t| t.bytes),
        (
            "psn_gaps",
            "Loss events (runs of consecutive PSNs declared lost)",
            |t| t.psn_gaps,
        ),
        (
            "psn_missing",
            "PSNs declared lost before the observation point",
            |t| t.psn_missing,
        ),
        ("retransmits", "Requests and READ responses resent", |t| {
            t.retransmits
        }),
        (
            "reordered",
            "Packets that arrived after a newer PSN, first copies (not lost)",
            |t| t.reordered,
        ),
        (
            "reorder_naks",
            "PSN sequence-error NAKs for packets that were only reordered",
            |t| t.reorder_naks,
        ),
        ("cnp", "Congestion notification packets", |t| t.cnp),
        ("ecn_ce", "RoCE packets marked ECN CE", |t| t.ecn_ce),
    ];
    for (name, help, get) in fields {
        let series = groups
            .iter()
            .map(|(l, t)| (l.clone(), ConstCounter::new(get(t))))
            .collect();
        reg.register(
            format!("{prefix}_{name}"),
            format!("{help}, {what}"),
            ConstFamily(series),
        );
    }
    if !detail {
        return;
    }
    let naks = groups
        .iter()
        .flat_map(|(l, t)| {
            nak::NAMES.iter().zip(t.naks).map(move |(class, v)| {
                let mut l = l.clone();
                l.push(("class", class.to_string()));
                (l, ConstCounter::new(v))
            })
        })
        .collect();
    reg.register(
        format!("{prefix}_naks"),
        format!("NAKs by class, {what}"),
        ConstFamily(naks),
    );
    let latency = groups
        .iter()
        .map(|(l, t)| (l.clone(), t.latency.clone()))
        .collect();
    reg.register(
        format!("{prefix}_latency_seconds"),
        format!("Request to answer latency seen at the observation point, {what}"),
        ConstFamily(latency),
    );
}

/// The registry for `snap`: every family, bounded as the module says.
pub fn registry(snap: &Snapshot, top_flows: usize, health: &Health) -> Registry {
    let mut reg = Registry::default();
    let FlowSums {
        chosen,
        points,
        pairs,
        naks: nak_sum,
    } = FlowSums::of(&snap.flows, top_flows);
    let per_flow: Vec<(Labels, Totals)> = chosen
        .iter()
        .map(|f| {
            let mut t = Totals::default();
            t.add(f);
            (flow_labels(f), t)
        })
        .collect();
    register_totals(
        &mut reg,
        "roce_flow",
        "per flow (top flows and flows with problems)",
        &per_flow,
        true,
    );
    let acks = chosen
        .iter()
        .map(|f| (flow_labels(f), ConstCounter::new(f.acks)))
        .collect();
    reg.register("roce_flow_acks", "ACKs, per flow", ConstFamily(acks));

    // Grouped by borrowed names and by address, named once per group below: naming every
    // flow's group cost more than the rest of a render at 100,000 flows.
    let points: Vec<(Labels, Totals)> = points
        .into_iter()
        .map(|((iface, dir), t)| {
            let labels = vec![("iface", iface.to_string()), ("direction", dir.to_string())];
            (labels, t)
        })
        .collect();
    let flows_per_point = points
        .iter()
        .map(|(l, t)| (l.clone(), ConstGauge::new(t.flows as i64)))
        .collect();
    register_totals(
        &mut reg,
        "roce_point",
        "per observation point",
        &points,
        true,
    );
    reg.register(
        "roce_point_flows",
        "Flows in the table, per observation point",
        ConstFamily(flows_per_point),
    );
    let mut pairs: Vec<((String, String), Totals)> = pairs
        .into_iter()
        .map(|((src, dst), t)| ((src.to_string(), dst.to_string()), t))
        .collect();
    pairs.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then_with(|| a.0.cmp(&b.0)));
    pairs.truncate(MAX_HOST_PAIRS);
    let pairs: Vec<(Labels, Totals)> = pairs
        .into_iter()
        .map(|((src, dst), t)| (vec![("src", src), ("dst", dst)], t))
        .collect();
    let qps = pairs
        .iter()
        .map(|(l, t)| (l.clone(), ConstGauge::new(t.flows as i64)))
        .collect();
    register_totals(
        &mut reg,
        "roce_host_pair",
        "per host pair (source IP, destination IP)",
        &pairs,
        false,
    );
    reg.register(
        "roce_host_pair_flows",
        "Flows (QPs) per host pair",
        ConstFamily(qps),
    );
    let naks = nak::NAMES
        .iter()
        .zip(nak_sum)
        .map(|(c, v)| (vec![("class", c.to_string())], ConstCounter::new(v)))
        .collect();
    reg.register("roce_naks", "NAKs by class, all flows", ConstFamily(naks));

    register_owners(&mut reg, &chosen);
    register_nic(&mut reg, snap);
    register_pfc(&mut reg, snap);
    register_lossless(&mut reg, snap);
    register_mirrors(&mut reg, snap);
    register_summary(&mut reg, snap, chosen.len(), health);
    reg
}

/// Who owns the flows that have series: one info series per such flow (its flow labels plus
/// the owner's), so owners never multiply the counter series and a pid that changes replaces
/// one series. Join it with `* on(src, dst, qp, iface, direction) group_left(comm, pid)`.
fn register_owners(reg: &mut Registry, chosen: &[&FlowSnapshot]) {
    let info = chosen
        .iter()
        .filter_map(|f| {
            let o = f.owner.as_deref()?;
            let mut l = flow_labels(f);
            l.push(("comm", o.comm.clone()));
            l.push(("pid", o.pid.map_or(String::new(), |p| p.to_string())));
            l.push(("device", o.device.clone()));
            l.push(("port", o.port.map_or(String::new(), |p| p.to_string())));
            l.push(("local_qp", o.lqpn.to_string()));
            Some((l, ConstGauge::new(1)))
        })
        .collect();
    reg.register(
        "roce_flow_owner_info",
        "The local QP of a flow with series and its process (RDMA netlink; 1 per flow)",
        ConstFamily(info),
    );
}

/// The RDMA NIC counters (hw_counters, counters, and the netdev's pause counters), per device,
/// port and counter: bounded by the devices' counter lists. The total as read is a counter
/// (rate() it); the rate over the last reporting interval is a gauge.
fn register_nic(reg: &mut Registry, snap: &Snapshot) {
    let mut totals = Vec::new();
    let mut rates = Vec::new();
    for p in &snap.nic {
        for (source, counters) in [("rdma", &p.rdma), ("pause", &p.pause)] {
            for (name, c) in counters {
                let labels: Labels = vec![
                    ("device", p.device.clone()),
                    ("port", p.port.to_string()),
                    ("source", source.to_string()),
                    ("counter", name.clone()),
                ];
                totals.push((labels.clone(), ConstCounter::new(c.total)));
                rates.push((labels, ConstGauge::new(c.per_s)));
            }
        }
    }
    reg.register(
        "roce_nic_stat",
        "RDMA NIC counter as read (source rdma: hw_counters and counters; pause: ethtool -S)",
        ConstFamily(totals),
    );
    reg.register(
        "roce_nic_stat_rate",
        "Change of the NIC counter per second over the last reporting interval",
        ConstFamily(rates),
    );
}

fn register_pfc(reg: &mut Registry, snap: &Snapshot) {
    #[derive(Default)]
    struct Pfc {
        pause: u64,
        xon: u64,
        quanta: u64,
        requested_us: f64,
        paused_fraction: f64,
        storms: u64,
        storm: bool,
    }
    let mut by_prio: BTreeMap<(String, &str, String), Pfc> = BTreeMap::new();
    for p in &snap.pfc {
        let prio = p.priority.map_or("link".to_string(), |v| v.to_string());
        let e = by_prio
            .entry((p.iface.clone(), p.direction, prio))
            .or_default();
        e.pause += p.pause_frames;
        e.xon += p.xon_frames;
        e.quanta += p.pause_quanta;
        e.requested_us += p.pause_us;
        // Senders pause the same queue: the queue is paused when any of them paused it, so
        // the largest fraction is a lower bound of the union.
        e.paused_fraction = e.paused_fraction.max(p.paused_fraction);
        e.storms += p.storms;
        e.storm |= p.storm;
    }
    let labels = |(iface, dir, prio): &(String, &str, String)| -> Labels {
        vec![
            ("iface", iface.clone()),
            ("direction", dir.to_string()),
            ("priority", prio.clone()),
        ]
    };
    type Get = fn(&Pfc) -> u64;
    let counters: [(&str, &str, Get); 4] = [
        (
            "roce_pfc_pause_frames",
            "PFC/PAUSE XOFF frames (non-zero time), per priority (`link`: 802.3x PAUSE)",
            |p| p.pause,
        ),
        (
            "roce_pfc_xon_frames",
            "PFC/PAUSE XON frames (time 0), per priority",
            |p| p.xon,
        ),
        (
            "roce_pfc_pause_quanta",
            "Requested pause time in quanta of 512 bit times, per priority",
            |p| p.quanta,
        ),
        ("roce_pfc_storms", "PFC storm onsets, per priority", |p| {
            p.storms
        }),
    ];
    for (name, help, get) in counters {
        let series = by_prio
            .iter()
            .map(|(k, p)| (labels(k), ConstCounter::new(get(p))))
            .collect();
        reg.register(name, help, ConstFamily(series));
    }
    let requested = by_prio
        .iter()
        .map(|(k, p)| (labels(k), ConstCounter::new(p.requested_us / 1e6)))
        .collect();
    reg.register(
        "roce_pfc_requested_pause_seconds",
        "Requested pause time at the link speed, per priority",
        ConstFamily(requested),
    );
    let fraction = by_prio
        .iter()
        .map(|(k, p)| (labels(k), ConstGauge::new(p.paused_fraction)))
        .collect();
    reg.register(
        "roce_pfc_paused_ratio",
        "Fraction of the last reporting interval the priority was paused",
        ConstFamily(fraction),
    );
    let storm = by_prio
        .iter()
        .map(|(k, p)| (labels(k), ConstGauge::new(i64::from(p.storm))))
        .collect();
    reg.register(
        "roce_pfc_storm",
        "1 while the priority is in a PFC storm",
        ConstFamily(storm),
    );
}

/// Lossless-class findings per point and priority (docs/metrics.md, "Lossless class
/// diagnosis"): one series per finding and point (a deadlock: each member of its cycle), and
/// the figures each rule is judged on.
fn register_lossless(reg: &mut Registry, snap: &Snapshot) {
    let labels = |f: &LosslessFinding, point: &str| -> Labels {
        vec![
            ("kind", f.kind.to_string()),
            ("iface", point.to_string()),
            ("priority", f.priority.to_string()),
        ]
    };
    let at = |f: &LosslessFinding| -> Labels {
        vec![
            ("iface", f.points.join(",")),
            ("priority", f.priority.to_string()),
        ]
    };
    let found = snap
        .lossless
        .iter()
        .flat_map(|f| {
            f.points
                .iter()
                .map(move |p| (labels(f, p), ConstGauge::new(1)))
        })
        .collect();
    reg.register(
        "roce_lossless_finding",
        "1 per lossless-class finding (pfc_before_ecn, ecn_at_low_load, deadlock) and point",
        ConstFamily(found),
    );
    let share = snap
        .lossless
        .iter()
        .filter_map(|f| Some((at(f), ConstGauge::new(f.episodes.as_ref()?.pfc_first_share))))
        .collect();
    reg.register(
        "roce_lossless_pfc_first_ratio",
        "Share of congestion episodes whose first XOFF came before the first ECN mark",
        ConstFamily(share),
    );
    let starts = snap
        .lossless
        .iter()
        .filter_map(|f| Some((at(f), ConstGauge::new(f.load.as_ref()?.marking_starts_at))))
        .collect();
    reg.register(
        "roce_lossless_marking_start_ratio",
        "Lowest utilisation of a load interval with CE marks (marking at low load)",
        ConstFamily(starts),
    );
}

fn register_summary(reg: &mut Registry, snap: &Snapshot, exported: usize, health: &Health) {
    let m = &snap.summary;
    let frames = [
        ("roce", m.roce_packets),
        ("pfc", m.pfc_frames),
        ("pause_8023x", m.pause_8023x),
        ("non_roce", m.non_roce),
        ("malformed", m.malformed),
        ("ip_fragment", m.ip_fragments),
        ("unsupported", m.unsupported),
    ]
    .into_iter()
    .map(|(c, v)| (vec![("class", c.to_string())], ConstCounter::new(v)))
    .collect();
    reg.register("roce_frames", "Frames seen, by class", ConstFamily(frames));
    let mut alerts: BTreeMap<&str, u64> = BTreeMap::new();
    for a in &snap.alerts {
        *alerts.entry(a.kind).or_default() += a.count;
    }
    let alerts = alerts
        .into_iter()
        .map(|(k, v)| (vec![("kind", k.to_string())], ConstCounter::new(v)))
        .collect();
    reg.register(
        "roce_alerts",
        "Alert occurrences by kind (docs/metrics.md, Alerts)",
        ConstFamily(alerts),
    );
    let one = |v: u64| ConstFamily(vec![(Labels::new(), ConstCounter::new(v))]);
    let gauge = |v: f64| ConstFamily(vec![(Labels::new(), ConstGauge::new(v))]);
    reg.register(
        "roce_observer_events_lost",
        "Ring-buffer events lost (counters stay exact)",
        one(m.events_lost),
    );
    reg.register(
        "roce_observer_map_full",
        "RoCE packets of flows not tracked because the flow table was full",
        one(m.map_full),
    );
    reg.register(
        "roce_observer_pending_full",
        "Timestamped requests pushed out of the pending table before their answer",
        one(m.pending_full),
    );
    reg.register(
        "roce_observer_tail_call_failed",
        "RoCE packets the kernel could not hand to its scoreboard program (a loader fault)",
        one(m.tail_call_failed),
    );
    reg.register(
        "roce_observer_alerts_dropped",
        "Alerts not kept (table full)",
        one(m.alerts_dropped),
    );
    reg.register(
        "roce_observer_flows",
        "Flows in the table",
        gauge(m.flows as f64),
    );
    reg.register(
        "roce_observer_metrics_flows_omitted",
        "Flows without per-flow series (outside --metrics-top-flows and the problem flows)",
        gauge(m.flows.saturating_sub(exported as u64) as f64),
    );
    if let (Some(lost), Some(written)) = (health.log_records_lost, health.log_records_written) {
        reg.register(
            "roce_observer_log_records_lost",
            "Log lines that could not be written (--log-dir)",
            one(lost),
        );
        reg.register(
            "roce_observer_log_records_written",
            "Log lines written (--log-dir)",
            one(written),
        );
    }
    let up = m
        .interfaces_up
        .iter()
        .map(|(iface, up)| {
            (
                vec![("iface", iface.clone())],
                ConstGauge::new(i64::from(*up)),
            )
        })
        .collect();
    reg.register(
        "roce_observer_interface_up",
        "1 while a watched interface is there, 0 once it was removed (run -i; the run then ends)",
        ConstFamily(up),
    );
    if let Some(errors) = m.prom_file_errors {
        reg.register(
            "roce_observer_prom_file_errors",
            "Failed writes of the --prom-file textfile (each retried the next interval)",
            one(errors),
        );
    }
    register_observer_cost(reg, m);
    reg.register(
        "roce_observer_scrapes",
        "Scrapes of /metrics served",
        one(health.scrapes),
    );
    if let Some(s) = health.last_scrape_seconds {
        reg.register(
            "roce_observer_last_scrape_duration_seconds",
            "Time taken to encode the previous scrape",
            gauge(s),
        );
    }
}

/// The exposition text (Prometheus text format 0.0.4).
pub fn render(snap: &Snapshot, top_flows: usize, health: &Health) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(
        &mut out,
        &registry(snap, top_flows, health),
    );
    out
}

/// Replace `path` with the exposition atomically, for node_exporter's textfile collector
/// (`--prom-file`): written to a sibling `.NAME.<random>.tmp` created exclusively (a link
/// planted there is never written through; node_exporter reads only `*.prom`), then renamed
/// over `path` (which replaces a link at `path` instead of following it). On failure the
/// temporary file is removed.
pub fn write_textfile(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mut file, tmp) = crate::sink::files::create_temp(dir, &format!(".{name}."), ".tmp")?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.flush())
        .and_then(|()| {
            drop(file);
            std::fs::rename(&tmp, path)
        });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
pub(crate) mod tests;

/// What watching costs: events received, and (live runs) the process's CPU and memory, the
/// ring buffer's fill and the kernel programs' runs (docs/metrics.md, "Observer cost").
fn register_observer_cost(reg: &mut Registry, m: &crate::report::Summary) {
    let by_kind = m
        .events_by_kind
        .iter()
        .map(|(k, v)| (vec![("kind", (*k).to_string())], ConstCounter::new(*v)))
        .collect();
    reg.register(
        "roce_observer_events",
        "Ring-buffer records received, by kind",
        ConstFamily(by_kind),
    );
    let gauge = |v: f64| ConstFamily(vec![(Labels::new(), ConstGauge::new(v))]);
    reg.register(
        "roce_observer_events_per_packet",
        "Ring-buffer records received per frame seen",
        gauge(m.events_per_packet),
    );
    let Some(cost) = &m.observer else {
        return;
    };
    reg.register(
        "roce_observer_cpu_seconds",
        "CPU time (user + system) of the observer process",
        ConstFamily(vec![(Labels::new(), ConstCounter::new(cost.cpu_seconds))]),
    );
    reg.register(
        "roce_observer_resident_memory_bytes",
        "Resident memory of the observer process",
        ConstFamily(vec![(
            Labels::new(),
            ConstGauge::new(i64::try_from(cost.rss_bytes).unwrap_or(i64::MAX)),
        )]),
    );
    let Some(kernel) = &cost.kernel else {
        return;
    };
    reg.register(
        "roce_observer_ringbuf_fill_ratio",
        "Highest fill of the event ring buffer seen before a read in the last interval (0..1)",
        gauge(kernel.ringbuf_fill),
    );
    reg.register(
        "roce_observer_bpf_stats_enabled",
        "1 while the kernel keeps BPF run-time statistics (program runs and times below)",
        ConstFamily(vec![(
            Labels::new(),
            ConstGauge::new(i64::from(kernel.bpf_stats)),
        )]),
    );
    let labels = |p: &crate::report::ProgramCost| {
        vec![("program", p.name.clone()), ("hook", p.hook.to_string())]
    };
    let runs = kernel
        .programs
        .iter()
        .map(|p| (labels(p), ConstCounter::new(p.run_count)))
        .collect();
    reg.register(
        "roce_observer_program_runs",
        "Runs of each attached kernel program (counted while BPF statistics are on)",
        ConstFamily(runs),
    );
    let time = kernel
        .programs
        .iter()
        .map(|p| (labels(p), ConstCounter::new(p.run_time_ns as f64 / 1e9)))
        .collect();
    reg.register(
        "roce_observer_program_run_seconds",
        "Time spent in each attached kernel program (counted while BPF statistics are on)",
        ConstFamily(time),
    );
}
