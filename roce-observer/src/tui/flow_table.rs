//! The Flows view's own state: the sort column and direction, the filter, whether a flow's
//! observation points are merged into one row, and the rows in display order with each one's
//! severity. [`FlowTable::refresh`] recomputes the order from a report; nothing here draws.

use std::{collections::HashMap, net::IpAddr, sync::Arc};

use crate::{
    report::{FlowSnapshot, MirrorSource, Snapshot},
    severity::Severity,
};

/// Flow table ordering: by a column, largest first unless reversed (`S`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Worst severity first (crate::severity, the order of every renderer), then by bytes.
    Problems,
    Bytes,
    Packets,
    Rate,
    Gaps,
    Retransmits,
    Naks,
    Cnp,
    Ce,
    RttP50,
    RttP99,
    Qp,
}

impl SortKey {
    const ORDER: [SortKey; 12] = [
        SortKey::Problems,
        SortKey::Bytes,
        SortKey::Packets,
        SortKey::Rate,
        SortKey::Gaps,
        SortKey::Retransmits,
        SortKey::Naks,
        SortKey::Cnp,
        SortKey::Ce,
        SortKey::RttP50,
        SortKey::RttP99,
        SortKey::Qp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Problems => "problems",
            SortKey::Bytes => "bytes",
            SortKey::Packets => "packets",
            SortKey::Rate => "rate",
            SortKey::Gaps => "PSN gaps",
            SortKey::Retransmits => "retransmits",
            SortKey::Naks => "NAKs",
            SortKey::Cnp => "CNPs",
            SortKey::Ce => "CE marks",
            SortKey::RttP50 => "p50 latency",
            SortKey::RttP99 => "p99 latency",
            SortKey::Qp => "QP",
        }
    }

    /// The flow table's column this key sorts by (its header carries the sort arrow); bytes
    /// have no column of their own and mark none.
    pub fn column(self) -> Option<&'static str> {
        Some(match self {
            SortKey::Problems => " ",
            SortKey::Bytes => return None,
            SortKey::Packets => "pkts",
            SortKey::Rate => "rate",
            SortKey::Gaps => "gaps/miss",
            SortKey::Retransmits => "retx",
            SortKey::Naks => "NAK",
            SortKey::Cnp => "CNP",
            SortKey::Ce => "CE",
            SortKey::RttP50 => "p50",
            SortKey::RttP99 => "p99",
            SortKey::Qp => "QP",
        })
    }

    pub fn next(self) -> SortKey {
        let i = Self::ORDER.iter().position(|k| *k == self).unwrap_or(0);
        Self::ORDER[(i + 1) % Self::ORDER.len()]
    }

    fn value(self, f: &FlowSnapshot) -> f64 {
        match self {
            SortKey::Problems | SortKey::Bytes => f.bytes as f64,
            SortKey::Packets => f.packets as f64,
            SortKey::Rate => f.rate_bps,
            SortKey::Gaps => f.psn_gaps as f64,
            SortKey::Retransmits => f.retransmits as f64,
            SortKey::Naks => nak_total(f) as f64,
            SortKey::Cnp => f.cnp as f64,
            SortKey::Ce => f.ecn_ce as f64,
            SortKey::RttP50 => f.rtt_ns.p50.unwrap_or(0) as f64,
            SortKey::RttP99 => f.rtt_ns.p99.unwrap_or(0) as f64,
            SortKey::Qp => f64::from(f.dst_qp),
        }
    }
}

/// A flow's identity across the snapshot's flows and alerts.
type FlowId<'a> = (
    IpAddr,
    IpAddr,
    u32,
    &'a str,
    &'static str,
    Option<&'a MirrorSource>,
);

pub fn nak_total(f: &FlowSnapshot) -> u64 {
    f.naks.total()
}

/// The flow table: how the Flows view orders and filters the report's flows.
pub struct FlowTable {
    pub sort: SortKey,
    /// Smallest first instead of largest first.
    pub ascending: bool,
    /// One row per QP: each flow's observation points merged (`m`).
    pub merged: bool,
    /// The merged rows while `merged` is on.
    merged_flows: Vec<Arc<FlowSnapshot>>,
    /// Flow indices of [`FlowTable::rows`] in display order (those the filter lets through).
    pub order: Vec<usize>,
    /// Per flow of [`FlowTable::rows`]: whether it has a problem (see [`FlowTable::is_problem`]).
    pub problem: Vec<bool>,
    /// Per flow of [`FlowTable::rows`]: its severity, raised by the problem alerts that name it.
    pub severity: Vec<Severity>,
    /// Flows shown are those whose addresses, QPs or interface contain this text.
    pub filter: String,
}

impl Default for FlowTable {
    fn default() -> FlowTable {
        FlowTable {
            sort: SortKey::Problems,
            ascending: false,
            merged: false,
            merged_flows: Vec::new(),
            order: Vec::new(),
            problem: Vec::new(),
            severity: Vec::new(),
            filter: String::new(),
        }
    }
}

impl FlowTable {
    /// Recompute the rows, their severity and their order from `snapshot` (after a new report,
    /// or a change of sort, filter or merging).
    pub fn refresh(&mut self, snapshot: &Snapshot) {
        self.merged_flows = if self.merged {
            merge_points(&snapshot.flows)
        } else {
            Vec::new()
        };
        let flows: &[Arc<FlowSnapshot>] = if self.merged {
            &self.merged_flows
        } else {
            &snapshot.flows
        };
        // Flows an alert names (latency over the threshold among them); a merged row stands
        // for all its observation points.
        let merged = self.merged;
        fn id<'a>(
            merged: bool,
            (src, dst, qp): (IpAddr, IpAddr, u32),
            (iface, dir): (&'a str, &'static str),
            mirror: Option<&'a MirrorSource>,
        ) -> FlowId<'a> {
            if merged {
                (src, dst, qp, "", "", None)
            } else {
                (src, dst, qp, iface, dir, mirror)
            }
        }
        // Only problem alerts raise a flow: advice (not_ect, ...) is about a host pair and
        // marks no flow.
        let mut alerted: HashMap<FlowId<'_>, Severity> = HashMap::new();
        for a in &snapshot.alerts {
            let (Some(f), sev) = (a.flow.as_ref(), Severity::of_alert(a.kind)) else {
                continue;
            };
            if !sev.is_problem() {
                continue;
            }
            let e = alerted
                .entry(id(
                    merged,
                    (f.src_ip, f.dst_ip, f.dst_qp),
                    (&f.iface, f.direction),
                    f.mirror.as_ref(),
                ))
                .or_insert(sev);
            *e = (*e).max(sev);
        }
        let severity: Vec<Severity> = flows
            .iter()
            .map(|f| {
                let named = alerted
                    .get(&id(
                        merged,
                        (f.src_ip, f.dst_ip, f.dst_qp),
                        (&f.iface, f.direction),
                        f.mirror.as_ref(),
                    ))
                    .copied()
                    .unwrap_or(Severity::None);
                Severity::of_flow(f).max(named)
            })
            .collect();
        let problem: Vec<bool> = severity.iter().map(|s| s.is_problem()).collect();
        let needle = self.filter.to_lowercase();
        let mut order: Vec<usize> = (0..flows.len())
            .filter(|i| needle.is_empty() || matches_filter(&flows[*i], &needle))
            .collect();
        let key = self.sort;
        let ascending = self.ascending;
        order.sort_by(|a, b| {
            let first = if key == SortKey::Problems {
                severity[*b].cmp(&severity[*a])
            } else {
                std::cmp::Ordering::Equal
            };
            let by = first.then(key.value(&flows[*b]).total_cmp(&key.value(&flows[*a])));
            if ascending { by.reverse() } else { by }.then(a.cmp(b))
        });
        self.order = order;
        self.problem = problem;
        self.severity = severity;
    }

    /// A flow that needs a look by its own counters (crate::severity): PSNs lost, NAKs or
    /// retransmissions, CNPs or CE marks. Flows a problem alert names count too (see
    /// `refresh`); reordering alone and configuration advice do not.
    pub fn is_problem(f: &FlowSnapshot) -> bool {
        Severity::of_flow(f).is_problem()
    }

    /// The flow rows: the snapshot's, or one per QP when merged.
    pub fn rows<'a>(&'a self, snapshot: &'a Snapshot) -> &'a [Arc<FlowSnapshot>] {
        if self.merged {
            &self.merged_flows
        } else {
            &snapshot.flows
        }
    }

    /// The flow at display position `position`, if there is one.
    pub fn at<'a>(&'a self, snapshot: &'a Snapshot, position: usize) -> Option<&'a FlowSnapshot> {
        self.order
            .get(position)
            .and_then(|i| self.rows(snapshot).get(*i))
            .map(|f| &**f)
    }
}

/// Whether `needle` (lower case) is part of the flow's addresses, QPs (hex as shown
/// `0x001201`, hex without padding `0x1201` or `1201`, or decimal `4609` as JSON and Prometheus
/// write them), interface, or owning process (command or pid).
fn matches_filter(f: &FlowSnapshot, needle: &str) -> bool {
    let mut fields = vec![
        f.src_ip.to_string(),
        f.dst_ip.to_string(),
        crate::format::qp(f.dst_qp),
        format!("0x{:x}", f.dst_qp),
        f.dst_qp.to_string(),
        f.iface.to_lowercase(),
    ];
    if let Some(peer) = f.peer_qp {
        fields.push(crate::format::qp(peer));
        fields.push(format!("0x{peer:x}"));
        fields.push(peer.to_string());
    }
    // The mirror source, as the seen column and the table write it.
    if let Some(m) = &f.mirror {
        fields.push(m.compact());
        fields.push(m.label());
    }
    if let Some(o) = &f.owner {
        fields.push(o.comm.clone());
        fields.extend(o.pid.map(|p| p.to_string()));
    }
    fields.iter().any(|s| s.to_lowercase().contains(needle))
}

/// One row per (source, destination, QP): a flow seen at several observation points (both ends
/// of a link, ingress and egress) becomes one row whose counters are the largest any point saw
/// (the same packets counted twice are not added), its interface the points joined with '+'.
pub fn merge_points(flows: &[Arc<FlowSnapshot>]) -> Vec<Arc<FlowSnapshot>> {
    let mut out: Vec<Arc<FlowSnapshot>> = Vec::new();
    // The snapshot lists a flow's points next to each other (sorted by src, dst, QP first).
    for f in flows {
        match out.last_mut() {
            Some(m) if (m.src_ip, m.dst_ip, m.dst_qp) == (f.src_ip, f.dst_ip, f.dst_qp) => {
                // The first point's row is the snapshot's, shared: merged into a copy.
                let m = Arc::make_mut(m);
                m.iface = format!("{}+{}", m.iface, f.iface);
                if m.direction != f.direction {
                    m.direction = "all";
                }
                // Several mirror sources merged: no one source names the row.
                if m.mirror != f.mirror {
                    m.mirror = None;
                }
                m.packets = m.packets.max(f.packets);
                m.bytes = m.bytes.max(f.bytes);
                m.rate_bps = m.rate_bps.max(f.rate_bps);
                m.psn_gaps = m.psn_gaps.max(f.psn_gaps);
                m.psn_missing = m.psn_missing.max(f.psn_missing);
                m.retransmits = m.retransmits.max(f.retransmits);
                m.req_retransmits = m.req_retransmits.max(f.req_retransmits);
                m.resp_retransmits = m.resp_retransmits.max(f.resp_retransmits);
                m.cnp = m.cnp.max(f.cnp);
                m.ecn_ce = m.ecn_ce.max(f.ecn_ce);
                m.ecn_ect = m.ecn_ect.max(f.ecn_ect);
                m.acks = m.acks.max(f.acks);
                if nak_total(f) > nak_total(m) {
                    m.naks = f.naks.clone();
                }
                // Latency: the point that saw the most samples.
                if f.rtt_ns.count > m.rtt_ns.count {
                    m.rtt_ns = f.rtt_ns.clone();
                }
                m.peer_qp = m.peer_qp.or(f.peer_qp);
                if m.owner.is_none() {
                    m.owner = f.owner.clone();
                }
                m.first_ts = m.first_ts.min(f.first_ts);
                m.last_ts = m.last_ts.max(f.last_ts);
            }
            _ => out.push(f.clone()),
        }
    }
    out
}
