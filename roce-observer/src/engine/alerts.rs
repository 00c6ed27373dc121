//! Diagnostics: conditions worth a person's attention, each with a reason, a subject (a flow,
//! a PFC priority) and the times it was first and last seen (the store: alerts/store.rs).
//!
//! Every alert rule lives here: when it fires and what it says. The store ([`Alerts`]) is kept
//! by the engine beside its counters, and raised into from both paths (class checks on flow
//! updates, PFC storms, latency samples). The [`AlertsAnalysis`] writes the report's alerts:
//! those raised, plus those judged on the whole flow table ([`ce_without_cnp`],
//! [`flow_problems`], [`bursts`]).

use std::collections::HashSet;

use roce_observer_common::{
    Direction, FlowKey, FlowStats, PfcKey,
    account::{Outcome, RocePacket},
    flow::{PCP_UNTAGGED, nak},
    pfc::PRIORITY_LINK,
};

use super::{
    EngineConfig,
    analysis::{Analysis, Names, View},
    show_mac,
};
use crate::{
    format::plural,
    report::{AlertSnapshot, FlowRef, MirrorSource, PfcRef, Snapshot, show_ip},
};

pub mod store;

pub use store::{Alert, AlertKind, Alerts, MAX_ALERTS, Subject};

impl Alerts {
    /// `count` latency samples on `flow` above the `threshold` of `--rtt-alert-us`, the first
    /// of `first_ns` ns, seen from `span.0` to `span.1` (one sample, or what a kernel
    /// histogram gained between two reads).
    pub fn high_latency(
        &mut self,
        flow: &FlowKey,
        span: (u64, u64),
        first_ns: u64,
        count: u64,
        threshold: u64,
    ) {
        let key = (AlertKind::HighLatency, Subject::Flow(*flow));
        self.raise(key.0, key.1, span.0, count, || {
            format!(
                "latency above {} us seen at the observation point (first: {} us)",
                threshold / 1000,
                first_ns / 1000
            )
        });
        if let Some(a) = self.map.get_mut(&key) {
            a.last_ns = a.last_ns.max(span.1);
        }
    }

    /// A PFC storm started on `key` (detected by the pause timeline, pfc.rs).
    pub fn pfc_storm(&mut self, key: &PfcKey, ts: u64, cfg: &EngineConfig) {
        let (thr, win) = (cfg.storm_threshold, cfg.storm_window_ns);
        self.raise(AlertKind::PfcStorm, Subject::Pfc(*key), ts, 1, || {
            format!(
                "paused more than {:.0}% of {} ms: a PFC storm (a stuck receiver or a pause loop) stalls every flow on this priority",
                thr * 100.0,
                win / 1_000_000
            )
        });
    }

    /// Class checks on what an update added to a flow (one packet in the capture path, one
    /// map read's worth in the live path): data outside the lossless class, Not-ECT data,
    /// CNPs off the CNP DSCP. `dscp`/`pcp` are those of the flow's last packet, so a batch
    /// that mixes CNPs and data is not judged on them.
    pub fn classes(&mut self, key: &FlowKey, added: Added, ts: u64, cfg: &EngineConfig) {
        let Added {
            packets,
            cnps,
            data,
            not_ect_data,
            dscp,
            pcp,
        } = added;
        if packets == 0 {
            return;
        }
        // Made only for an alert raised (most packets raise none).
        let subject = || Subject::Flow(*key);
        if cnps == 0 {
            let pcp_ok = pcp == PCP_UNTAGGED || pcp == cfg.lossless_pcp;
            if dscp != cfg.lossless_dscp || !pcp_ok {
                let (ld, lp) = (cfg.lossless_dscp, cfg.lossless_pcp);
                self.raise(AlertKind::NonLosslessClass, subject(), ts, data, || {
                    let pcp = if pcp == PCP_UNTAGGED { "untagged".to_string() } else { format!("PCP {pcp}") };
                    format!(
                        "RoCE data on DSCP {dscp} ({pcp}) outside the lossless class (DSCP {ld}, PCP {lp} when tagged): it may be dropped instead of paused"
                    )
                });
            }
        } else if data == 0 && dscp != cfg.cnp_dscp {
            let want = cfg.cnp_dscp;
            self.raise(AlertKind::CnpWrongDscp, subject(), ts, cnps, || {
                format!("CNPs on DSCP {dscp}, not the CNP DSCP {want}: they may queue behind the data they should slow down")
            });
        }
        if not_ect_data > 0 {
            self.raise(AlertKind::NotEct, subject(), ts, not_ect_data, || {
                "RoCE data sent Not-ECT: switches cannot mark it, so ECN congestion control (DCQCN) is off for this flow".to_string()
            });
        }
    }
}

/// The alerts' section of the report: the alerts raised, plus those judged on the flows that
/// may raise one, by first time seen.
#[derive(Default)]
pub struct AlertsAnalysis;

impl Analysis for AlertsAnalysis {
    fn section(&mut self, view: &View<'_>, _now: u64, report: &mut Snapshot) {
        let names = view.names;
        let mut alerts: Vec<AlertSnapshot> = view
            .alerts
            .iter()
            .map(|a| alert_snapshot(a, names))
            .collect();
        let troubled: Vec<(&FlowKey, &FlowStats)> = view
            .troubled
            .iter()
            .filter_map(|k| view.flows.get_key_value(k))
            .map(|(k, e)| (k, e.stats()))
            .collect();
        let table = troubled.iter().copied();
        alerts.extend(
            ce_without_cnp(table.clone())
                .iter()
                .chain(&flow_problems(table.clone()))
                .chain(&bursts(table, view.cfg))
                .map(|a| alert_snapshot(a, names)),
        );
        alerts.sort_by(|a, b| {
            (a.first_ts, a.kind, &a.flow, &a.pfc).cmp(&(b.first_ts, b.kind, &b.flow, &b.pfc))
        });
        report.alerts = alerts;
        report.summary.alerts_dropped = view.alerts.dropped;
    }
}

/// Flow `k` as an alert names it.
fn flow_ref(k: &FlowKey, names: &Names) -> FlowRef {
    FlowRef {
        src_ip: show_ip(k.src_ip),
        dst_ip: show_ip(k.dst_ip),
        dst_qp: k.dst_qp,
        iface: names.name(k.ifindex),
        direction: Direction::from_u8(k.direction).name(),
        mirror: MirrorSource::new(k.encap, k.outer_src, k.mirror_id),
    }
}

fn alert_snapshot(a: &Alert, names: &Names) -> AlertSnapshot {
    let (flow, pfc) = match &a.subject {
        Subject::Flow(k) => (Some(flow_ref(k, names)), None),
        Subject::Pfc(k) => (
            None,
            Some(PfcRef {
                iface: names.name(k.ifindex),
                direction: Direction::from_u8(k.direction).name(),
                src_mac: show_mac(k.src_mac),
                priority: (k.priority != PRIORITY_LINK).then_some(k.priority),
            }),
        ),
    };
    AlertSnapshot {
        kind: a.kind.name(),
        reason: a.reason.clone(),
        flow,
        pfc,
        first_ts: a.first_ns,
        last_ts: a.last_ns,
        count: a.count,
    }
}

/// What an update added to a flow, for [`Alerts::classes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Added {
    pub packets: u64,
    pub cnps: u64,
    /// Packets that are neither CNPs nor ACKs/NAKs: the data the class checks judge.
    pub data: u64,
    /// Data packets sent Not-ECT (live path: at least this many, the Not-ECT packets that
    /// the other packets added cannot account for).
    pub not_ect_data: u64,
    /// DSCP and PCP of the flow's last packet.
    pub dscp: u8,
    pub pcp: u8,
}

impl Added {
    /// Live path: from the flow's counters before and after a map read.
    pub fn between(before: &FlowStats, after: &FlowStats) -> Added {
        let packets = after.packets().saturating_sub(before.packets());
        let cnps = after.cnp.saturating_sub(before.cnp);
        let answers = |s: &FlowStats| s.acks() + s.naks.iter().sum::<u64>();
        let answers = answers(after).saturating_sub(answers(before));
        let not_ect = after.ecn_not_ect.saturating_sub(before.ecn_not_ect);
        let data = packets.saturating_sub(cnps).saturating_sub(answers);
        Added {
            packets,
            cnps,
            data,
            not_ect_data: not_ect.saturating_sub(packets - data).min(data),
            dscp: after.dscp,
            pcp: after.pcp,
        }
    }

    /// Capture path: one packet as `account` applied it (what `between` gives around that call).
    pub fn packet(pkt: &RocePacket, out: &Outcome) -> Added {
        let answer = roce_observer_common::opcode::psn_space(pkt.opcode)
            == roce_observer_common::opcode::PsnSpace::Ack;
        let data = u64::from(!out.cnp && !answer);
        Added {
            packets: 1,
            cnps: u64::from(out.cnp),
            data,
            not_ect_data: data & u64::from(pkt.ecn == 0),
            dscp: pkt.dscp,
            pcp: pkt.pcp,
        }
    }
}

/// Judged on the whole flow table: retransmission and NAK bursts, detected per packet by the
/// shared observation on each flow's own windows (`FlowStats::retransmit_bursts`, so the
/// kernel needs no event per retransmission) and counted there.
pub fn bursts<'a, I>(flows: I, cfg: &EngineConfig) -> Vec<Alert>
where
    I: Iterator<Item = (&'a FlowKey, &'a FlowStats)>,
{
    let (limit, window_ms) = (cfg.burst_count, cfg.burst_window_ns / 1_000_000);
    let mut out = Vec::new();
    for (k, s) in flows {
        for (kind, w, what) in [
            (
                AlertKind::RetransmitBurst,
                &s.retransmit_bursts,
                "retransmissions",
            ),
            (AlertKind::NakBurst, &s.nak_bursts, "NAKs"),
        ] {
            if w.bursts == 0 {
                continue;
            }
            let why = if kind == AlertKind::RetransmitBurst {
                " (loss, or a go-back-N after a NAK or timeout)"
            } else {
                ""
            };
            out.push(Alert {
                kind,
                subject: Subject::Flow(*k),
                reason: format!("{limit} or more {what} within {window_ms} ms{why}"),
                first_ns: w.first_burst_ns,
                last_ns: w.last_burst_ns,
                count: u64::from(w.bursts),
            });
        }
    }
    out
}

/// Judged on the whole flow table: flows with CE marks whose data receiver never sent a CNP
/// back (no CNP at all from the destination host to the source host).
pub fn ce_without_cnp<'a, I>(flows: I) -> Vec<Alert>
where
    I: Iterator<Item = (&'a FlowKey, &'a FlowStats)> + Clone,
{
    let with_cnp: HashSet<([u8; 16], [u8; 16])> = flows
        .clone()
        .filter(|(_, s)| s.cnp > 0)
        .map(|(k, _)| (k.src_ip, k.dst_ip))
        .collect();
    flows
        .filter(|(k, s)| s.ecn_ce > 0 && !with_cnp.contains(&(k.dst_ip, k.src_ip)))
        .map(|(k, s)| Alert {
            kind: AlertKind::CeWithoutCnp,
            subject: Subject::Flow(*k),
            reason: format!(
                "{} CE-marked packets but no CNP from {} back to {}: the receiver's NIC does not run DCQCN notification, or CNPs take another path",
                s.ecn_ce,
                show_ip(k.dst_ip),
                show_ip(k.src_ip)
            ),
            first_ns: s.first_ns,
            last_ns: s.last_ns,
            count: s.ecn_ce,
        })
        .collect()
}

/// Judged on the whole flow table: what a person calls a problem on a flow, one alert per kind
/// and flow with the flow's exact count (PSN gaps, retransmissions, NAKs, RNR NAKs, CE marks,
/// CNPs).
/// The burst rules above add when such events come in bursts.
pub fn flow_problems<'a, I>(flows: I) -> Vec<Alert>
where
    I: Iterator<Item = (&'a FlowKey, &'a FlowStats)>,
{
    let mut out = Vec::new();
    for (k, s) in flows {
        let rnr = s.naks[nak::RNR];
        let other_naks = s.naks.iter().sum::<u64>() - rnr;
        let retransmits = s.req_retransmits + s.resp_retransmits;
        // The reasons are formatted only for counts above zero: judged on every flow every
        // report, formatting them all was most of a report's cost at 100,000 flows.
        let (reordered, _, distance_max, reorder_naks) =
            roce_observer_common::sequence::reordering(s);
        let sequenced = s
            .packets()
            .saturating_sub(s.acks() + s.naks.iter().sum::<u64>() + s.cnp);
        let found: [(AlertKind, u64, &dyn Fn() -> String); 8] = [
            (AlertKind::PacketLoss, s.psn_missing, &|| {
                format!(
                    "{} lost before this observation point ({}): NAKed by the responder, resent in a go-back-N run, or not arrived within the reorder window",
                    plural(s.psn_missing, "PSN", "PSNs"),
                    plural(s.psn_gaps, "loss event", "loss events")
                )
            }),
            (AlertKind::ReorderNaks, reorder_naks, &|| {
                format!(
                    "{} for packets that were only reordered: the responder's RNIC does not tolerate out-of-order arrival and answers each reordering with go-back-N; enable out-of-order placement on the RNICs (e.g. ConnectX adaptive-routing support), or stop spraying this traffic class",
                    plural(
                        reorder_naks,
                        "PSN sequence-error NAK",
                        "PSN sequence-error NAKs"
                    )
                )
            }),
            (AlertKind::Reordering, reordered, &|| {
                format!(
                    "{reordered} of {sequenced} packets ({:.2}%) arrived reordered, at most {} late, nothing lost for it: the fabric spreads this flow over several paths (adaptive routing, packet spraying)",
                    reordered as f64 * 100.0 / sequenced.max(1) as f64,
                    plural(distance_max, "PSN", "PSNs")
                )
            }),
            (AlertKind::Retransmissions, retransmits, &|| {
                format!(
                    "{} ({} requests, {} READ responses): the sender is recovering from loss, a timeout or a NAK",
                    plural(retransmits, "retransmission", "retransmissions"),
                    s.req_retransmits,
                    s.resp_retransmits
                )
            }),
            (AlertKind::Nak, other_naks, &|| {
                format!(
                    "{} ({}): the responder refused or lost requests",
                    plural(other_naks, "NAK", "NAKs"),
                    nak::NAMES
                        .iter()
                        .zip(s.naks)
                        .enumerate()
                        .filter(|(class, (_, n))| *n > 0 && *class != nak::RNR)
                        .map(|(_, (name, n))| format!("{name} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
            (AlertKind::RnrNak, rnr, &|| {
                format!(
                    "{}: the receiver had no receive buffer posted (the application posts receives too slowly)",
                    plural(rnr, "RNR NAK", "RNR NAKs")
                )
            }),
            (AlertKind::Congestion, s.ecn_ce, &|| {
                format!(
                    "{}: a switch queue on this path is congested (DCQCN slows the sender once CNPs come back)",
                    plural(s.ecn_ce, "CE-marked packet", "CE-marked packets")
                )
            }),
            (AlertKind::Cnp, s.cnp, &|| {
                format!(
                    "{}: the source received CE-marked packets from the destination and asks it to slow down",
                    plural(s.cnp, "CNP", "CNPs")
                )
            }),
        ];
        for (kind, count, reason) in found {
            if count > 0 {
                out.push(Alert {
                    kind,
                    subject: Subject::Flow(*k),
                    reason: reason(),
                    first_ns: s.first_ns,
                    last_ns: s.last_ns,
                    count,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_dedupes_and_bounds() {
        let mut a = Alerts::default();
        let k = FlowKey::zeroed();
        a.raise(AlertKind::NotEct, Subject::Flow(k), 5, 1, || "x".into());
        a.raise(AlertKind::NotEct, Subject::Flow(k), 3, 2, || "y".into());
        assert_eq!(a.iter().next().map(|a| a.reason.as_str()), Some("x"));
        assert_eq!(a.len(), 1);
        let al = a.iter().next().expect("one alert");
        assert_eq!((al.first_ns, al.last_ns, al.count), (3, 5, 3));
        for i in 0..MAX_ALERTS as u32 + 5 {
            let k = FlowKey {
                dst_qp: i + 1,
                ..FlowKey::zeroed()
            };
            a.raise(AlertKind::NotEct, Subject::Flow(k), 0, 1, String::new);
        }
        assert_eq!(a.len(), MAX_ALERTS);
        assert_eq!(a.dropped, 6);
    }

    #[test]
    fn added_by_one_packet_is_what_account_adds() {
        use roce_observer_common::{account::account, opcode::OP_CNP};
        let base = RocePacket {
            opcode: 0x04,
            psn: 1,
            dst_qp: 0x11,
            ack_req: false,
            dma_len: 0,
            syndrome: 0,
            ecn: 0,
            dscp: 26,
            pcp: 3,
            udp_sport: 49152,
            frame_len: 100,
        };
        let mut stats = FlowStats::zeroed();
        stats.init(0);
        for pkt in [
            base,
            RocePacket {
                ecn: 3,
                psn: 2,
                ..base
            },
            RocePacket {
                ecn: 1,
                dscp: 48,
                pcp: PCP_UNTAGGED,
                ..base
            },
            RocePacket {
                opcode: OP_CNP,
                ecn: 2,
                ..base
            },
            // Another transport: counted apart, yet a packet of the flow.
            RocePacket {
                opcode: 0x64,
                ..base
            },
        ] {
            let before = stats;
            let out = account(&mut stats, &pkt, 4096, 64, 1, true);
            assert_eq!(Added::packet(&pkt, &out), Added::between(&before, &stats));
        }
    }
}
