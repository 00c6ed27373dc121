//! What both paths share after accounting: events (bursts, PFC pause timelines, latency
//! samples) and the class checks on what an update added to a flow.

use super::*;

impl Engine {
    /// Events from either path.
    pub(super) fn on_event(&mut self, ev: &Event) {
        let Some(kind) = EventKind::from_u32(ev.kind) else {
            return;
        };
        let ts = ev.ts_ns;
        let cfg = &self.cfg;
        match kind {
            EventKind::NewFlow | EventKind::Cnp | EventKind::PsnGap => {}
            EventKind::PsnRetransmit => {
                let (limit, window) = (cfg.burst_count, cfg.burst_window_ns);
                if let Some(e) = self.flows.get_mut(&ev.flow)
                    && e.retransmit_burst.add(ts, 1, limit, window)
                {
                    self.alerts.raise(AlertKind::RetransmitBurst, Subject::Flow(ev.flow), ts, 1, || {
                            format!("{limit} or more retransmissions within {} ms (loss, or a go-back-N after a NAK or timeout)", window / 1_000_000)
                        });
                }
            }
            EventKind::Nak => {
                let (limit, window) = (cfg.burst_count, cfg.burst_window_ns);
                if let Some(e) = self.flows.get_mut(&ev.flow)
                    && e.nak_burst.add(ts, 1, limit, window)
                {
                    self.alerts
                        .raise(AlertKind::NakBurst, Subject::Flow(ev.flow), ts, 1, || {
                            format!("{limit} or more NAKs within {} ms", window / 1_000_000)
                        });
                }
            }
            EventKind::Pfc => {
                let d = Direction::from_u8(ev.flow.direction);
                for prio in 0..8u8 {
                    if ev.c & (1 << prio) != 0 {
                        let key = pfc_key(ev.flow.ifindex, d, prio, ev.mac);
                        self.pause_timeline(key, ts, ev.quanta[prio as usize]);
                    }
                }
            }
            EventKind::Pause => {
                let d = Direction::from_u8(ev.flow.direction);
                let key = pfc_key(ev.flow.ifindex, d, PRIORITY_LINK, ev.mac);
                self.pause_timeline(key, ts, ev.quanta[0]);
            }
            EventKind::Latency => {
                let sample = ev.a;
                let max_flows = cfg.max_flows;
                let alert = cfg.rtt_alert_ns.filter(|t| sample > *t);
                if !self.flows.contains_key(&ev.flow) && self.flows.len() < max_flows {
                    self.flows.insert(ev.flow, FlowEntry::new(ts));
                }
                if let Some(e) = self.flows.get_mut(&ev.flow) {
                    e.rtt.get_or_insert_with(Default::default).insert(sample);
                }
                self.rtt_overall.insert(sample);
                if let Some(t) = alert {
                    self.alerts.raise(
                        AlertKind::HighLatency,
                        Subject::Flow(ev.flow),
                        ts,
                        1,
                        || {
                            format!(
                                "latency above {} us seen at the observation point (first: {} us)",
                                t / 1000,
                                sample / 1000
                            )
                        },
                    );
                }
            }
        }
    }

    fn pause_timeline(&mut self, key: PfcKey, ts: u64, quanta: u16) {
        let (gbps, thr, win) = (
            self.cfg.link_gbps,
            self.cfg.storm_threshold,
            self.cfg.storm_window_ns,
        );
        let entry = self.pfc.entry(key).or_default();
        if entry.timeline.frame(ts, quanta, gbps, thr, win) {
            self.alerts.raise(AlertKind::PfcStorm, Subject::Pfc(key), ts, 1, || {
                format!(
                    "paused more than {:.0}% of {} ms: a PFC storm (a stuck receiver or a pause loop) stalls every flow on this priority",
                    thr * 100.0,
                    win / 1_000_000
                )
            });
        }
    }

    /// Class checks on what an update added to a flow (one packet in the capture path, one
    /// map read's worth in the live path): data outside the lossless class, Not-ECT data,
    /// CNPs off the CNP DSCP. `dscp`/`pcp` are those of the flow's last packet, so a batch
    /// that mixes CNPs and data is not judged on them.
    pub(super) fn check_classes(&mut self, key: &FlowKey, before: Tally, after: Tally, ts: u64) {
        let packets = after.packets.saturating_sub(before.packets);
        let cnps = after.cnp.saturating_sub(before.cnp);
        if packets == 0 {
            return;
        }
        let data = packets - cnps.min(packets);
        let marked = (after.ect + after.ce).saturating_sub(before.ect + before.ce);
        let cfg = &self.cfg;
        let subject = Subject::Flow(*key);
        if cnps == 0 {
            let pcp_ok = after.pcp == PCP_UNTAGGED || after.pcp == cfg.lossless_pcp;
            if after.dscp != cfg.lossless_dscp || !pcp_ok {
                let (dscp, pcp, ld, lp) =
                    (after.dscp, after.pcp, cfg.lossless_dscp, cfg.lossless_pcp);
                self.alerts.raise(AlertKind::NonLosslessClass, subject, ts, data, || {
                    let pcp = if pcp == PCP_UNTAGGED { "untagged".to_string() } else { format!("PCP {pcp}") };
                    format!(
                        "RoCE data on DSCP {dscp} ({pcp}) outside the lossless class (DSCP {ld}, PCP {lp} when tagged): it may be dropped instead of paused"
                    )
                });
            }
        } else if data == 0 && after.dscp != cfg.cnp_dscp {
            let (dscp, want) = (after.dscp, cfg.cnp_dscp);
            self.alerts.raise(AlertKind::CnpWrongDscp, subject, ts, cnps, || {
                format!("CNPs on DSCP {dscp}, not the CNP DSCP {want}: they may queue behind the data they should slow down")
            });
        }
        // In a mixed batch CNPs could be the marked ones; count conservatively.
        let not_ect = data.saturating_sub(marked);
        if not_ect > 0 {
            self.alerts.raise(AlertKind::NotEct, subject, ts, not_ect, || {
                "RoCE data sent Not-ECT: switches cannot mark it, so ECN congestion control (DCQCN) is off for this flow".to_string()
            });
        }
    }
}
