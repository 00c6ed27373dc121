//! One severity ranking for every renderer (the table, the TUI, the alert lists): what is a
//! problem, how bad, and how alerts are grouped, so that a lossy flow is listed first wherever
//! it is shown. Reads the report only.
//!
//! The order, worst first: packets lost; NAKs and retransmissions; congestion (CE marks, CNPs,
//! PFC storms, latency over the threshold); then configuration advice (`not_ect`,
//! `non_lossless_class`, `cnp_wrong_dscp`), which describes a host pair or an observation
//! point rather than a flow and is summarised once per pair or point; then information
//! (`reordering`: packets out of order with nothing lost), which is not a problem at all.

use std::{collections::BTreeMap, net::IpAddr};

use crate::engine::snapshot::{AlertSnapshot, FlowSnapshot};

/// How bad something is; larger is worse. Only [`Severity::is_problem`] levels earn a `!`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    None,
    /// Worth knowing, not a problem (reordering with nothing lost).
    Info,
    /// A configuration that works against RoCE (marking, class), not a failure seen.
    Advice,
    /// CE marks, CNPs, PFC storms, latency over the threshold.
    Congestion,
    /// NAKs (any class, those caused by reordering among them) and retransmissions.
    Nak,
    /// PSNs lost.
    Loss,
}

impl Severity {
    /// Worse than advice: what a `!` marks and what "problems first" lists first.
    pub fn is_problem(self) -> bool {
        self >= Severity::Congestion
    }

    /// The severity of an alert kind (its snapshot name); unknown kinds count as problems so
    /// that a new rule is never hidden behind advice.
    pub fn of_alert(kind: &str) -> Severity {
        match kind {
            "packet_loss" => Severity::Loss,
            "nak" | "rnr_nak" | "nak_burst" | "reorder_naks" | "retransmissions"
            | "retransmit_burst" => Severity::Nak,
            "not_ect" | "non_lossless_class" | "cnp_wrong_dscp" => Severity::Advice,
            "reordering" => Severity::Info,
            _ => Severity::Congestion,
        }
    }

    /// A flow's own severity, from its counters.
    pub fn of_flow(f: &FlowSnapshot) -> Severity {
        if f.psn_missing > 0 || f.psn_gaps > 0 {
            Severity::Loss
        } else if f.naks.total() > 0 || f.reorder_naks > 0 || f.retransmits > 0 {
            Severity::Nak
        } else if f.cnp > 0 || f.ecn_ce > 0 {
            Severity::Congestion
        } else if f.reordered > 0 {
            Severity::Info
        } else {
            Severity::None
        }
    }
}

/// Indices of `flows` in "problems first" order: worst severity first, then most bytes, ties in
/// the given order. `extra` raises a flow's severity (an alert that names it); pass
/// `|_| Severity::None` for none.
pub fn problems_first(
    flows: &[impl AsRef<FlowSnapshot>],
    extra: impl Fn(usize) -> Severity,
) -> Vec<usize> {
    let key: Vec<(Severity, u64)> = flows
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = f.as_ref();
            (Severity::of_flow(f).max(extra(i)), f.bytes)
        })
        .collect();
    let mut order: Vec<usize> = (0..flows.len()).collect();
    order.sort_by(|a, b| key[*b].cmp(&key[*a]).then(a.cmp(b)));
    order
}

/// What one line of an alert group is about.
#[derive(Clone, Debug, PartialEq)]
pub enum Subject {
    /// One alert: its flow or PFC priority as [`describe`] writes it.
    One(String),
    /// Advice over the flows of one host pair: how many QPs (alerts) it covers.
    HostPair {
        src: IpAddr,
        dst: IpAddr,
        qps: usize,
    },
    /// Advice over the PFC priorities of one observation point.
    Point {
        iface: String,
        direction: &'static str,
        priorities: usize,
    },
}

impl Subject {
    pub fn text(&self) -> String {
        match self {
            Subject::One(s) => s.clone(),
            Subject::HostPair { src, dst, qps } => {
                format!(
                    "{src} > {dst} ({})",
                    crate::format::plural(*qps as u64, "QP", "QPs")
                )
            }
            Subject::Point {
                iface,
                direction,
                priorities,
            } => format!(
                "{iface}/{direction} ({})",
                crate::format::plural(*priorities as u64, "priority", "priorities")
            ),
        }
    }
}

/// One line of a group: a problem alert, or advice summarised over a host pair or point.
#[derive(Clone, Debug)]
pub struct Entry<'a> {
    pub subject: Subject,
    /// Occurrences summed over the alerts of this line.
    pub count: u64,
    /// The first alert of this line (its reason stands for the others of an advice line).
    pub alert: &'a AlertSnapshot,
}

/// The alerts of one kind.
#[derive(Clone, Debug)]
pub struct Group<'a> {
    pub kind: &'static str,
    pub severity: Severity,
    /// Alerts of this kind (distinct subjects).
    pub alerts: usize,
    /// Occurrences summed over them.
    pub count: u64,
    pub entries: Vec<Entry<'a>>,
}

/// The alerts grouped by kind, worst severity first (then most alerts); problems one line per
/// alert, most occurrences first; advice one line per host pair or observation point.
pub fn group_alerts(alerts: &[AlertSnapshot]) -> Vec<Group<'_>> {
    let mut by_kind: BTreeMap<&'static str, Vec<&AlertSnapshot>> = BTreeMap::new();
    for a in alerts {
        by_kind.entry(a.kind).or_default().push(a);
    }
    let mut groups: Vec<Group<'_>> = by_kind
        .into_iter()
        .map(|(kind, list)| {
            let severity = Severity::of_alert(kind);
            let mut entries = if severity == Severity::Advice {
                summarise(&list)
            } else {
                list.iter()
                    .map(|a| Entry {
                        subject: Subject::One(describe(a)),
                        count: a.count,
                        alert: a,
                    })
                    .collect()
            };
            entries.sort_by_key(|e| std::cmp::Reverse(e.count));
            Group {
                kind,
                severity,
                alerts: list.len(),
                count: list.iter().map(|a| a.count).sum(),
                entries,
            }
        })
        .collect();
    groups.sort_by(|a, b| {
        (b.severity, b.alerts)
            .cmp(&(a.severity, a.alerts))
            .then(a.kind.cmp(b.kind))
    });
    groups
}

/// Advice alerts folded per host pair (flows) or observation point (PFC priorities).
fn summarise<'a>(list: &[&'a AlertSnapshot]) -> Vec<Entry<'a>> {
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Key<'k> {
        Pair(IpAddr, IpAddr),
        Point(&'k str, &'static str),
        Other(&'k str),
    }
    let mut folded: BTreeMap<Key<'a>, (usize, u64, &'a AlertSnapshot)> = BTreeMap::new();
    for a in list {
        let key = match (&a.flow, &a.pfc) {
            (Some(f), _) => Key::Pair(f.src_ip, f.dst_ip),
            (None, Some(p)) => Key::Point(&p.iface, p.direction),
            (None, None) => Key::Other(&a.reason),
        };
        let e = folded.entry(key).or_insert((0, 0, a));
        e.0 += 1;
        e.1 += a.count;
    }
    folded
        .into_iter()
        .map(|(key, (n, count, alert))| Entry {
            subject: match key {
                Key::Pair(src, dst) => Subject::HostPair { src, dst, qps: n },
                Key::Point(iface, direction) => Subject::Point {
                    iface: iface.to_string(),
                    direction,
                    priorities: n,
                },
                Key::Other(_) => Subject::One(String::new()),
            },
            count,
            alert,
        })
        .collect()
}

/// An alert's subject, the same in every renderer: `src > dst qp 0x000101 at eth0/ingress`
/// (plus the mirror source), or `eth0/ingress aa:bb:.. prio 3`.
pub fn describe(a: &AlertSnapshot) -> String {
    match (&a.flow, &a.pfc) {
        (Some(f), _) => format!(
            "{} > {} qp {} at {}/{}{}",
            f.src_ip,
            f.dst_ip,
            crate::format::qp(f.dst_qp),
            f.iface,
            f.direction,
            f.mirror
                .as_ref()
                .map_or(String::new(), |m| format!(" via {}", m.label()))
        ),
        // A lossless-class finding names its points (a deadlock: its cycle), no sender.
        (None, Some(p)) if p.src_mac.is_empty() => format!(
            "{} prio {}",
            p.iface,
            p.priority.map_or("link".into(), |v| v.to_string())
        ),
        (None, Some(p)) => format!(
            "{}/{} {} prio {}",
            p.iface,
            p.direction,
            p.src_mac,
            p.priority.map_or("link".into(), |v| v.to_string())
        ),
        (None, None) => String::new(),
    }
}
