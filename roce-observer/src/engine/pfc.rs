//! PFC and legacy PAUSE per (interface, direction, source MAC, priority) as an analysis: the
//! frame counters ([`PfcStats`], shared with the kernel) plus a pause timeline that gives the
//! time actually paused, the paused fraction of the reporting interval, and storm detection
//! (pfc/timeline.rs). Storm onsets are raised into the alert store the caller passes.
//!
//! Fed by both paths: the capture path counts frames through the shared observation
//! ([`PfcAnalysis::account`]), the kernel path reads its map ([`PfcAnalysis::read`]); the
//! timelines take the PFC/PAUSE events of either ([`classes`], [`PfcAnalysis::frame`]).

use std::collections::BTreeMap;

use roce_observer_common::{
    Direction, Event, EventBody, PfcKey, PfcStats,
    pfc::{PRIORITY_LINK, quanta_to_ns},
};

use super::{
    EngineConfig,
    alerts::Alerts,
    analysis::{Analysis, View},
    show_mac,
};
use crate::report::{PfcSnapshot, Snapshot};

pub mod timeline;

pub use timeline::{PauseTimeline, PfcEntry, Storms};

/// A pause episode ends when its source has been unpaused this long (docs/metrics.md, "Pause
/// and congestion episodes"); the next XOFF starts a new one. The kernel programs' congestion
/// episodes end after the same quiet period.
pub use roce_observer_common::lossless::EPISODE_QUIET_NS;

/// The PFC classes (or the legacy PAUSE) a PFC or PAUSE event asks for: each class's key and
/// quanta (0: XON). Nothing for any other event.
pub fn classes(ev: &Event, body: EventBody) -> impl Iterator<Item = (PfcKey, u16)> {
    let (ifindex, d) = (ev.flow.ifindex, Direction::from_u8(ev.flow.direction));
    let class = move |priority: u8, src_mac: [u8; 6], quanta: u16| {
        let key = PfcKey {
            ifindex,
            direction: d as u8,
            priority,
            src_mac,
        };
        (key, quanta)
    };
    let (pfc, pause) = match body {
        EventBody::Pfc {
            src_mac,
            class_enable,
            quanta,
        } => (Some((src_mac, class_enable, quanta)), None),
        EventBody::Pause { src_mac, quanta } => (None, Some(class(PRIORITY_LINK, src_mac, quanta))),
        _ => (None, None),
    };
    let per_priority = pfc.into_iter().flat_map(move |(mac, enabled, quanta)| {
        (0..8u8)
            .filter(move |p| enabled & (1 << p) != 0)
            .map(move |p| class(p, mac, quanta[p as usize]))
    });
    per_priority.chain(pause)
}

/// Every PFC priority's (and legacy PAUSE's) counters and timeline, and the storms.
#[derive(Default)]
pub struct PfcAnalysis {
    entries: BTreeMap<PfcKey, PfcEntry>,
    storms: Storms,
}

impl PfcAnalysis {
    /// Capture path: one class (or legacy PAUSE) of a frame the shared observation counted,
    /// with `quanta`, at `now` (one entry per priority here, as in the report; the kernel
    /// keeps one per link).
    pub fn account(&mut self, key: PfcKey, quanta: u16, now: u64) {
        self.entries
            .entry(key)
            .or_default()
            .stats
            .account(quanta, now);
    }

    /// Kernel path: the absolute values of one PFC map entry.
    pub fn read(&mut self, key: &PfcKey, stats: &PfcStats) {
        self.entries.entry(*key).or_default().stats = *stats;
    }

    /// Either path: one PFC class (or a legacy PAUSE) with `quanta` at `ts` on the timeline of
    /// `key`; a storm onset is raised into `alerts`. Returns the pause it asks for, ns at the
    /// link speed (0: XON), for the other analyses' pause hook.
    pub fn frame(
        &mut self,
        cfg: &EngineConfig,
        key: PfcKey,
        ts: u64,
        quanta: u16,
        alerts: &mut Alerts,
    ) -> u64 {
        let entry = self.entries.entry(key).or_default();
        let (gbps, thr, win) = (cfg.link_gbps, cfg.storm_threshold, cfg.storm_window_ns);
        if entry.timeline.frame(ts, quanta, gbps, thr, win) {
            self.storms.onset(&key, ts);
            alerts.pfc_storm(&key, ts, cfg);
        }
        quanta_to_ns(u64::from(quanta), gbps) as u64
    }

    /// Start a new reporting interval at `now`: `paused_fraction` covers it from here on.
    pub fn mark(&mut self, now: u64) {
        for e in self.entries.values_mut() {
            e.timeline.mark(now);
        }
    }

    /// The storms seen so far (the PFC storm origin reads them).
    pub fn storms(&self) -> &Storms {
        &self.storms
    }
}

impl Analysis for PfcAnalysis {
    /// The PFC table, over the report's interval (the summary's, written before).
    fn section(&mut self, view: &View<'_>, now: u64, report: &mut Snapshot) {
        let cfg = view.cfg;
        let interval_ns = now.saturating_sub(report.summary.interval_start_ts);
        let mut pfc: Vec<PfcSnapshot> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.stats.pause_frames + e.stats.xon_frames > 0 || e.timeline.has_frames()
            })
            .map(|(k, e)| {
                let paused = e.timeline.paused_in_interval(now);
                PfcSnapshot {
                    iface: view.names.name(k.ifindex),
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
                    pause_us: quanta_to_ns(e.stats.pause_quanta, cfg.link_gbps) / 1000.0,
                    paused_us: paused as f64 / 1000.0,
                    paused_fraction: if interval_ns > 0 {
                        (paused as f64 / interval_ns as f64).min(1.0)
                    } else {
                        0.0
                    },
                    storm: e.timeline.storms > 0
                        || e.timeline
                            .storm_at(now, cfg.storm_threshold, cfg.storm_window_ns),
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
        report.pfc = pfc;
    }
}

#[cfg(test)]
mod tests {
    use roce_observer_common::FlowKey;

    use super::*;
    use crate::engine::alerts::{AlertKind, Subject};

    const MS: u64 = 1_000_000;
    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];

    #[test]
    fn an_event_asks_for_its_enabled_classes_or_the_link() {
        let mut quanta = [0; 8];
        (quanta[3], quanta[4], quanta[5]) = (100, 0, 7);
        let ev = Event::pfc(4, Direction::Egress as u8, MAC, (1 << 3) | (1 << 4), quanta);
        let got: Vec<(PfcKey, u16)> = classes(&ev, ev.body().expect("body")).collect();
        let key = |priority| PfcKey {
            ifindex: 4,
            direction: Direction::Egress as u8,
            priority,
            src_mac: MAC,
        };
        assert_eq!(got, [(key(3), 100), (key(4), 0)]);
        let ev = Event::pause(4, Direction::Egress as u8, MAC, 0xffff);
        let got: Vec<(PfcKey, u16)> = classes(&ev, ev.body().expect("body")).collect();
        assert_eq!(got, [(key(PRIORITY_LINK), 0xffff)]);
        let ev = Event::path(&FlowKey::zeroed(), None, Some((1, 1)));
        assert_eq!(classes(&ev, ev.body().expect("body")).count(), 0);
    }

    #[test]
    fn a_storm_onset_is_raised_into_the_store_it_is_given() {
        let cfg = EngineConfig::default();
        let key = PfcKey {
            ifindex: 1,
            direction: Direction::Ingress as u8,
            priority: 3,
            src_mac: MAC,
        };
        let mut pfc = PfcAnalysis::default();
        let mut alerts = Alerts::default();
        // Paused throughout (a refresh every 300 us) for 1.5 windows.
        let mut t = 0;
        while t < 1500 * MS {
            let ns = pfc.frame(&cfg, key, t, 0xffff, &mut alerts);
            assert_eq!(ns, 335_539);
            t += 300_000;
        }
        let raised: Vec<_> = alerts
            .iter()
            .map(|a| (a.kind, a.subject, a.count))
            .collect();
        assert_eq!(raised, [(AlertKind::PfcStorm, Subject::Pfc(key), 1)]);
        let onset = pfc.storms().first_ns.expect("onset");
        assert!((1000 * MS..1001 * MS).contains(&onset));
        assert!(pfc.storms().stormed.contains(&key));
    }

    #[test]
    fn the_storm_onset_is_the_earliest_first_onset_of_a_priority() {
        let key = |priority| PfcKey {
            ifindex: 1,
            direction: Direction::Ingress as u8,
            priority,
            src_mac: MAC,
        };
        let mut s = Storms::default();
        s.onset(&key(3), 10);
        s.onset(&key(4), 5);
        // A later onset of a priority (its timeline keeps the first) moves nothing, even at
        // an earlier capture time.
        s.onset(&key(3), 1);
        assert_eq!(s.first_ns, Some(5));
        assert_eq!(s.stormed.len(), 2);
    }
}
