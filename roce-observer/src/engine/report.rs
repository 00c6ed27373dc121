//! The snapshot: what the renderers read, built from the flow table, the PFC table, the
//! counters, the latency sketches, the ECMP views and the alerts.

use std::collections::BTreeMap;

use roce_observer_common::{
    Counter, Direction, FlowKey,
    mirror::SEQ_SEEN,
    pfc::{PRIORITY_LINK, quanta_to_ns},
};

use super::{
    DIRECTIONS, Engine,
    alerts::{Alert, Subject, bursts, ce_without_cnp, flow_problems},
    dir_index,
    ecmp::{self, FiveTuple, FlowLoad},
    ecmp_advice,
    flows::{self, FlowEntry},
    latency::{rtt_summary, sketch},
    show_mac,
    snapshot::{
        AlertSnapshot, FlowRef, FlowSnapshot, LatencySnapshot, MirrorSnapshot, MirrorSource,
        PfcRef, PfcSnapshot, SCHEMA_VERSION, Snapshot, Summary, show_ip,
    },
    steps,
};

impl Engine {
    /// Everything the renderers show, as of `now_ns` (the end of the reporting interval).
    pub fn snapshot(&self, now_ns: u64) -> Snapshot {
        let start = self.interval_start.or(self.first_ns).unwrap_or(now_ns);
        let interval_ns = now_ns.saturating_sub(start);
        let interval_s = interval_ns as f64 / 1e9;

        // Sort references (moving whole records made sorting the biggest cost at 100k flows).
        let mut order: Vec<(&FlowKey, &FlowEntry)> = self
            .flows
            .iter()
            .filter(|(_, e)| e.stats.packets() > 0)
            .collect();
        order.sort_unstable_by(|(a, _), (b, _)| {
            (a.src_ip, a.dst_ip, a.dst_qp)
                .cmp(&(b.src_ip, b.dst_ip, b.dst_qp))
                .then_with(|| self.iface_name(a.ifindex).cmp(&self.iface_name(b.ifindex)))
                .then(a.direction.cmp(&b.direction))
                .then((a.encap, a.outer_src, a.mirror_id).cmp(&(b.encap, b.outer_src, b.mirror_id)))
        });
        let flows: Vec<FlowSnapshot> = order
            .into_iter()
            .map(|(k, e)| {
                let s = &e.stats;
                let rate = if interval_ns > 0 {
                    s.bytes.saturating_sub(e.base_bytes) as f64 * 8.0 / interval_s
                } else {
                    0.0
                };
                FlowSnapshot {
                    src_ip: show_ip(k.src_ip),
                    dst_ip: show_ip(k.dst_ip),
                    dst_qp: k.dst_qp,
                    iface: self.iface_name(k.ifindex),
                    direction: Direction::from_u8(k.direction).name(),
                    mirror: MirrorSource::new(k.encap, k.outer_src, k.mirror_id),
                    transport: flows::transport(s),
                    packets: s.packets(),
                    bytes: s.bytes,
                    opcodes: flows::opcode_counts(s),
                    other_transport: s.other_transport,
                    psn_gaps: s.psn_gaps,
                    psn_missing: s.psn_missing,
                    retransmits: s.retransmits(),
                    req_retransmits: s.req_retransmits,
                    resp_retransmits: s.resp_retransmits,
                    acks: s.acks(),
                    naks: flows::nak_counts(s),
                    cnp: s.cnp,
                    ecn_ce: s.ecn_ce,
                    ecn_ect: s.ecn_ect(),
                    dscp: s.dscp,
                    pcp: flows::pcp(s),
                    peer_qp: s.peer_qp(),
                    udp_src_ports: s.udp_src_ports() as u64,
                    udp_src_port_overflow: s.udp_sport_overflow,
                    rtt_ns: rtt_summary(e.rtt.as_deref()),
                    first_ts: s.first_ns,
                    last_ts: s.last_ns,
                    rate_bps: rate,
                    owner: None,
                }
            })
            .collect();

        let mut pfc: Vec<PfcSnapshot> = self
            .pfc
            .iter()
            .filter(|(_, e)| {
                e.stats.pause_frames + e.stats.xon_frames > 0 || e.timeline.has_frames()
            })
            .map(|(k, e)| {
                let paused = e.timeline.paused_in_interval(now_ns);
                PfcSnapshot {
                    iface: self.iface_name(k.ifindex),
                    direction: Direction::from_u8(k.direction).name(),
                    src_mac: show_mac(k.src_mac),
                    priority: (k.priority != PRIORITY_LINK).then_some(k.priority),
                    kind: if k.priority == PRIORITY_LINK {
                        "pause"
                    } else {
                        "pfc"
                    },
                    pause_frames: e.stats.pause_frames,
                    xon_frames: e.stats.xon_frames,
                    pause_quanta: e.stats.pause_quanta,
                    pause_us: quanta_to_ns(e.stats.pause_quanta, self.cfg.link_gbps) / 1000.0,
                    paused_us: paused as f64 / 1000.0,
                    paused_fraction: if interval_ns > 0 {
                        (paused as f64 / interval_ns as f64).min(1.0)
                    } else {
                        0.0
                    },
                    storm: e.timeline.storms > 0
                        || e.timeline.storm_at(
                            now_ns,
                            self.cfg.storm_threshold,
                            self.cfg.storm_window_ns,
                        ),
                    storms: e.timeline.storms,
                    first_ts: e.stats.first_ns,
                    last_ts: e.stats.last_ns,
                }
            })
            .collect();
        // By (source MAC, priority) with the legacy PAUSE entry (null) first, then where seen.
        pfc.sort_by(|a, b| {
            (&a.src_mac, a.priority, &a.iface, a.direction).cmp(&(
                &b.src_mac,
                b.priority,
                &b.iface,
                b.direction,
            ))
        });

        let mirror = self.mirror_snapshot();

        // Counters.
        let total = |c: Counter| -> u64 { self.counters.iter().map(|d| d[c as usize]).sum() };
        let mut by_direction = BTreeMap::new();
        for d in DIRECTIONS {
            let block = &self.counters[dir_index(d)];
            if block.iter().any(|&v| v > 0) {
                by_direction.insert(
                    d.name(),
                    Counter::ALL
                        .iter()
                        .map(|c| (c.name(), block[*c as usize]))
                        .collect(),
                );
            }
        }

        // Alerts, plus those judged on the whole table.
        let mut alerts: Vec<AlertSnapshot> =
            self.alerts.iter().map(|a| self.alert_snapshot(a)).collect();
        let table = self.flows.iter().map(|(k, e)| (k, &e.stats));
        alerts.extend(
            ce_without_cnp(table.clone())
                .iter()
                .chain(&flow_problems(table.clone()))
                .chain(&bursts(table, &self.cfg))
                .map(|a| self.alert_snapshot(a)),
        );
        alerts.sort_by(|a, b| {
            (a.first_ts, a.kind, &a.flow, &a.pfc).cmp(&(b.first_ts, b.kind, &b.flow, &b.pfc))
        });

        let ecmp_flows: Vec<FlowLoad> = self
            .flows
            .iter()
            .filter(|(_, e)| e.stats.packets() > 0)
            .map(|(k, e)| FlowLoad {
                dst_qp: k.dst_qp,
                tuple: FiveTuple {
                    src: show_ip(k.src_ip),
                    dst: show_ip(k.dst_ip),
                    sport: e.stats.udp_sports[0],
                    dport: self.cfg.roce_port,
                },
                point: format!(
                    "{}/{}",
                    self.iface_name(k.ifindex),
                    Direction::from_u8(k.direction).name()
                ),
                bytes: e.stats.bytes,
                sports: e
                    .stats
                    .udp_sports
                    .iter()
                    .copied()
                    .filter(|p| *p != 0)
                    .collect(),
            })
            .collect();
        let mut ecmp = ecmp::compute(
            &ecmp_flows,
            self.cfg.ecmp_hash,
            self.cfg.ecmp_paths,
            self.cfg.ecmp_seed,
        );
        if let Some(m) = ecmp.modelled.as_mut() {
            m.advice = ecmp_advice::advise(m, self.cfg.roce_port);
            m.qp_advice = ecmp_advice::qp_counts(m, self.cfg.roce_port);
        }

        let ringbuf_full = total(Counter::RingbufFull);
        Snapshot {
            schema_version: SCHEMA_VERSION,
            summary: Summary {
                total_packets: total(Counter::TotalPackets),
                roce_packets: total(Counter::RocePackets),
                pfc_frames: total(Counter::PfcFrames),
                pause_8023x: total(Counter::Pause8023x),
                non_roce: total(Counter::NonRoce),
                malformed: total(Counter::Malformed),
                ip_fragments: total(Counter::IpFragments),
                unsupported: total(Counter::Unsupported),
                map_full: total(Counter::MapFull),
                ringbuf_full,
                pending_full: total(Counter::PendingFull),
                events_lost: ringbuf_full,
                mirror_seq_lost: mirror.iter().map(|m| m.seq_lost).sum(),
                flows: flows.len() as u64,
                pmtu: self.pmtu,
                pmtu_learned: self.pmtu_learned,
                link_gbps: self.cfg.link_gbps,
                interval_start_ts: start,
                interval_end_ts: now_ns,
                interval_s,
                by_direction,
                alerts_dropped: self.alerts.dropped,
                log_records_lost: None,
                capture: self.capture.clone(),
            },
            latency: LatencySnapshot {
                observed_at: "latency seen at the observation point (request to the first answer from the peer), not at either host",
                overall: rtt_summary(Some(&self.rtt_overall)),
                flows_with_samples: self.flows.values().filter(|e| e.rtt.is_some()).count() as u64,
                pending: self.pending.waiting() as u64,
                relative_accuracy: sketch::ALPHA,
            },
            flows,
            pfc,
            mirror,
            ecmp,
            alerts,
            paths: self.path_pairs(),
            pfc_origin: self.pfc_origin(),
            steps: steps::analyse(&self.steps, |k| {
                (
                    self.iface_name(k.ifindex),
                    Direction::from_u8(k.direction).name(),
                )
            }),
            nic: Vec::new(),
            qp_owners: Vec::new(),
        }
    }

    /// The time of the latest frame or event (the natural `now` for a finished capture).
    pub fn last_ts(&self) -> u64 {
        self.last_ns
    }

    fn flow_ref(&self, k: &FlowKey) -> FlowRef {
        FlowRef {
            src_ip: show_ip(k.src_ip),
            dst_ip: show_ip(k.dst_ip),
            dst_qp: k.dst_qp,
            iface: self.iface_name(k.ifindex),
            direction: Direction::from_u8(k.direction).name(),
            mirror: MirrorSource::new(k.encap, k.outer_src, k.mirror_id),
        }
    }

    /// The mirror sessions, by (outer source, encapsulation, ID, outer destination, where seen).
    fn mirror_snapshot(&self) -> Vec<MirrorSnapshot> {
        let mut out: Vec<MirrorSnapshot> = self
            .mirrors
            .iter()
            .filter_map(|(k, m)| {
                Some(MirrorSnapshot {
                    iface: self.iface_name(k.ifindex),
                    direction: Direction::from_u8(k.direction).name(),
                    source: MirrorSource::new(k.encap, k.outer_src, k.id)?,
                    outer_dst: show_ip(k.outer_dst),
                    frames: m.frames,
                    sequenced: m.flags & SEQ_SEEN != 0,
                    seq_lost: m.seq_lost,
                    seq_late: m.seq_late,
                    seq_resyncs: m.seq_resyncs,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.source, a.outer_dst, &a.iface, a.direction).cmp(&(
                &b.source,
                b.outer_dst,
                &b.iface,
                b.direction,
            ))
        });
        out
    }

    fn alert_snapshot(&self, a: &Alert) -> AlertSnapshot {
        let (flow, pfc) = match &a.subject {
            Subject::Flow(k) => (Some(self.flow_ref(k)), None),
            Subject::Pfc(k) => (
                None,
                Some(PfcRef {
                    iface: self.iface_name(k.ifindex),
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
}
