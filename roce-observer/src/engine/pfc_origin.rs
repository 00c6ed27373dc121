//! PFC storm origin: within the window around the first storm onset, every pause source (source
//! MAC, observation point, priority) in the order of its first XOFF, the pause fraction of each
//! in that window, the origin candidate (the first) and how fast the pause spread
//! (docs/metrics.md, "PFC storm origin"). Fed with every PFC/PAUSE class frame (both paths:
//! capture frames and ring-buffer events). Each source keeps its pause periods (a refreshed
//! pause is one period) and its episodes (first XOFF after a quiet period, paused time), so a
//! storm of any length keeps its start; memory is bounded per source ([`MAX_PERIODS`],
//! [`MAX_EPISODES`]).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use roce_observer_common::{Direction, PfcKey, pfc::PRIORITY_LINK};

use super::{
    EngineConfig,
    analysis::{Analysis, View},
    lossless,
    pfc::EPISODE_QUIET_NS,
    show_mac,
};
use crate::report::{PauseSource, PfcOrigin, PfcRef, Snapshot};

/// Pause periods kept per source (the latest); each source's episodes are kept whole
/// (start and paused time) whatever their number of frames.
pub const MAX_PERIODS: usize = 4096;

/// Episodes kept per source (the latest).
pub const MAX_EPISODES: usize = 1024;

/// One source's pause episode: its first XOFF, the end of its last pause period so far, and
/// the paused time of its closed periods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Episode {
    pub start: u64,
    pub end: u64,
    pub paused_ns: u64,
}

/// One source's pause periods (the union of its XOFF periods, cut by XONs: a refreshed pause
/// is one period however many frames refresh it) and its episodes.
#[derive(Clone, Debug, Default)]
pub struct SourceLog {
    /// Closed periods `[start, end)`, oldest first (the latest [`MAX_PERIODS`]).
    periods: VecDeque<(u64, u64)>,
    /// The period in effect since the last frame: `[start, requested end)`.
    open: Option<(u64, u64)>,
    /// Closed episodes, oldest first (the latest [`MAX_EPISODES`]), and the current one.
    episodes: VecDeque<Episode>,
    current: Option<Episode>,
}

impl SourceLog {
    /// A frame at `t` requesting `pause_ns` (0: XON): the PFC time rule of docs/metrics.md.
    pub fn frame(&mut self, t: u64, pause_ns: u64) {
        match self.open {
            Some((s, e)) if e > t => {
                if pause_ns == 0 {
                    self.close(s, t);
                } else {
                    self.open = Some((s, t.saturating_add(pause_ns)));
                }
            }
            Some((s, e)) => {
                self.close(s, e);
                self.start(t, pause_ns);
            }
            None => self.start(t, pause_ns),
        }
    }

    fn start(&mut self, t: u64, pause_ns: u64) {
        if pause_ns == 0 {
            return;
        }
        self.open = Some((t, t.saturating_add(pause_ns)));
        match self.current {
            Some(ep) if t < ep.end.saturating_add(EPISODE_QUIET_NS) => {}
            _ => {
                if let Some(ep) = self.current.take() {
                    if self.episodes.len() >= MAX_EPISODES {
                        self.episodes.pop_front();
                    }
                    self.episodes.push_back(ep);
                }
                self.current = Some(Episode {
                    start: t,
                    end: t,
                    paused_ns: 0,
                });
            }
        }
    }

    fn close(&mut self, s: u64, e: u64) {
        self.open = None;
        if e <= s {
            return;
        }
        if self.periods.len() >= MAX_PERIODS {
            self.periods.pop_front();
        }
        self.periods.push_back((s, e));
        if let Some(ep) = self.current.as_mut() {
            ep.paused_ns += e - s;
            ep.end = e;
        }
    }

    /// Paused time within `[from, to)`.
    pub fn paused_within(&self, from: u64, to: u64) -> u64 {
        let clip = |&(s, e): &(u64, u64)| e.min(to).saturating_sub(s.max(from));
        self.periods.iter().map(clip).sum::<u64>() + self.open.as_ref().map(clip).unwrap_or(0)
    }

    /// Every episode as of `now` (the current one with its open period up to `now`), oldest
    /// first.
    pub fn episodes(&self, now: u64) -> impl Iterator<Item = Episode> + '_ {
        let current = self.current.map(|mut ep| {
            if let Some((s, e)) = self.open {
                let e = e.min(now.max(s));
                ep.paused_ns += e - s;
                ep.end = ep.end.max(e);
            }
            ep
        });
        self.episodes.iter().copied().chain(current)
    }

    /// The paused state at `t`: whether a period covers `t`.
    pub fn paused_at(&self, t: u64) -> bool {
        self.open.is_some_and(|(s, e)| s <= t && t < e)
            || self.periods.iter().rev().any(|&(s, e)| s <= t && t < e)
    }
}

/// Pause periods and episodes per source.
#[derive(Clone, Debug, Default)]
pub struct PauseLog {
    sources: BTreeMap<PfcKey, SourceLog>,
}

impl PauseLog {
    pub fn frame(&mut self, key: PfcKey, ts: u64, pause_ns: u64) {
        self.sources.entry(key).or_default().frame(ts, pause_ns);
    }

    pub fn sources(&self) -> impl Iterator<Item = (&PfcKey, &SourceLog)> {
        self.sources.iter()
    }
}

/// Why source `b` follows source `a` in the chain (docs/metrics.md, "Who paused whom"): `a`
/// paused first and was pausing in the storm window before `b`'s first XOFF, and either the
/// two sit on one path (a flow seen at both interfaces) with the same priority (or link-level
/// PAUSE, which stops every priority), or `b` is `a`'s device on the same port pausing
/// another priority (a shared buffer).
fn hop_evidence(
    a: (&PfcKey, &SourceLog, u64),
    b: (&PfcKey, u64),
    window: u64,
    shared: &HashSet<(u32, u32)>,
) -> Option<&'static str> {
    let ((ka, frames_a, first_a), (kb, first_b)) = (a, b);
    if first_a >= first_b || frames_a.paused_within(first_b.saturating_sub(window), first_b) == 0 {
        return None;
    }
    let same_prio =
        ka.priority == kb.priority || ka.priority == PRIORITY_LINK || kb.priority == PRIORITY_LINK;
    if ka.ifindex != kb.ifindex && same_prio && shared.contains(&(ka.ifindex, kb.ifindex)) {
        Some("shared_flow")
    } else if ka.ifindex == kb.ifindex && ka.src_mac == kb.src_mac && ka.priority != kb.priority {
        Some("same_port")
    } else {
        None
    }
}

/// The PFC storm origin as an analysis: every PFC/PAUSE class frame's time per source.
#[derive(Default)]
pub struct PfcOriginAnalysis {
    pauses: PauseLog,
}

impl Analysis for PfcOriginAnalysis {
    fn pause(&mut self, _: &EngineConfig, key: &PfcKey, ts: u64, _quanta: u16, pause_ns: u64) {
        self.pauses.frame(*key, ts, pause_ns);
    }

    /// Written after the lossless findings: a source those explain is no root.
    fn section(&mut self, view: &View<'_>, now: u64, report: &mut Snapshot) {
        let mut origin = pfc_origin(&self.pauses, view, now);
        if let Some(o) = origin.as_mut() {
            lossless::unroot(o, &report.lossless);
        }
        report.pfc_origin = origin;
    }
}

/// Ordered pairs of the `ifaces` that see one flow (source IP, destination IP, QP), in
/// either direction: the interfaces of one path.
fn shared_flow_ifaces(view: &View<'_>, ifaces: &HashSet<u32>) -> HashSet<(u32, u32)> {
    let mut seen: HashMap<([u8; 16], [u8; 16], u32), Vec<u32>> = HashMap::new();
    for (k, e) in view.flows.iter() {
        if e.stats().packets() > 0 && ifaces.contains(&k.ifindex) {
            let at = seen.entry((k.src_ip, k.dst_ip, k.dst_qp)).or_default();
            if !at.contains(&k.ifindex) {
                at.push(k.ifindex);
            }
        }
    }
    let mut pairs = HashSet::new();
    for at in seen.values() {
        for &x in at {
            for &y in at {
                if x != y {
                    pairs.insert((x, y));
                }
            }
        }
    }
    pairs
}

/// The storm origin view as of `now`, or `None` when no storm was detected.
fn pfc_origin(pauses: &PauseLog, view: &View<'_>, now: u64) -> Option<PfcOrigin> {
    let onset = view.storms.first_ns?;
    // A storm is detected at the end of a window that was mostly paused, at least one
    // window after the source's first frame: its start can lie two windows back.
    let window = view.cfg.storm_window_ns;
    let (from, to) = (
        onset.saturating_sub(2 * window),
        onset.saturating_add(window),
    );
    let mut found: Vec<(&PfcKey, &SourceLog, PauseSource)> = pauses
        .sources()
        .filter_map(|(k, frames)| {
            // The first episode in the window, from its own first XOFF (which may lie
            // before the window: a storm keeps its start).
            let episode = frames
                .episodes(now)
                .find(|ep| ep.start < to && ep.end.max(ep.start + 1) > from)?;
            let first = episode.start;
            let paused = frames.paused_within(from, to);
            let source = PauseSource {
                source: PfcRef {
                    iface: view.names.name(k.ifindex),
                    direction: Direction::from_u8(k.direction).name(),
                    src_mac: show_mac(k.src_mac),
                    priority: (k.priority != PRIORITY_LINK).then_some(k.priority),
                },
                first_xoff_ts: first,
                episode_paused_ms: episode.paused_ns as f64 / 1e6,
                episode_end_ts: episode.end,
                paused_fraction: paused as f64 / (to - from).max(1) as f64,
                storm: view.storms.stormed.contains(k),
                paused_by: None,
                evidence: None,
                hop_ms: None,
            };
            Some((k, frames, source))
        })
        .collect();
    found.sort_by(|(_, _, a), (_, _, b)| {
        (a.first_xoff_ts, &a.source).cmp(&(b.first_xoff_ts, &b.source))
    });
    let ifaces: HashSet<u32> = found.iter().map(|(k, _, _)| k.ifindex).collect();
    let shared = shared_flow_ifaces(view, &ifaces);
    // Each source's cause: the latest earlier source that explains it.
    for j in 0..found.len() {
        let (kb, first_b) = (found[j].0, found[j].2.first_xoff_ts);
        let cause = (0..j).rev().find_map(|i| {
            let (ka, fa, sa) = &found[i];
            hop_evidence((ka, fa, sa.first_xoff_ts), (kb, first_b), window, &shared)
                .map(|ev| (i, ev, sa.first_xoff_ts))
        });
        if let Some((i, ev, first_a)) = cause {
            let b = &mut found[j].2;
            b.paused_by = Some(i);
            b.evidence = Some(ev);
            b.hop_ms = Some((first_b - first_a) as f64 / 1e6);
        }
    }
    let sources: Vec<PauseSource> = found.into_iter().map(|(_, _, s)| s).collect();
    // Depth of every source below its root (causes come first in `sources`).
    let mut root = vec![0usize; sources.len()];
    let mut depth = vec![0usize; sources.len()];
    for (j, s) in sources.iter().enumerate() {
        (root[j], depth[j]) = match s.paused_by {
            Some(i) => (root[i], depth[i] + 1),
            None => (j, 0),
        };
    }
    let reach = |r: usize| {
        (0..sources.len())
            .filter(|&j| root[j] == r && j != r)
            .count()
    };
    let origin_index = (0..sources.len())
        .filter(|&j| root[j] == j)
        // Most reached first; on ties the earlier (smaller index) wins.
        .min_by_key(|&r| (std::cmp::Reverse(reach(r)), r))?;
    let first = sources.first()?;
    let last = sources.last()?;
    Some(PfcOrigin {
        storm_onset_ts: onset,
        window_start_ts: from,
        window_end_ts: to,
        origin: Some(sources[origin_index].source.clone()),
        origin_index: Some(origin_index),
        deadlock: false,
        reached: reach(origin_index),
        hops: (0..sources.len())
            .filter(|&j| root[j] == origin_index)
            .map(|j| depth[j])
            .max()
            .unwrap_or(0),
        spread_ms: (last.first_xoff_ts - first.first_xoff_ts) as f64 / 1e6,
        sources,
    })
}

#[cfg(test)]
mod tests {
    use roce_observer_common::frames::{RoceFrame, pfc_frame};

    use crate::engine::{Engine, EngineConfig};

    const T0: u64 = 1_700_000_000_000_000_000;
    const MS: u64 = 1_000_000;

    fn pfc(e: &mut Engine, mac_last: u8, ifindex: u32, t: u64, quanta: u16) {
        let f = pfc_frame(mac_last, 0x08, [quanta; 8]);
        e.ingest_frame(T0 + t, &f, f.len() as u32, ifindex);
    }

    #[test]
    fn the_storm_starts_at_one_port_and_spreads() {
        let mut e = Engine::new(EngineConfig {
            storm_window_ns: 100 * MS,
            ..EngineConfig::default()
        });
        e.set_iface_name(1, "leaf1");
        e.set_iface_name(2, "spine1");
        e.set_iface_name(3, "leaf2");
        // Port 1 pauses without a break from 0 ms (0xffff quanta = 335.5 us at 100 Gb/s,
        // refreshed every 300 us); spine1 joins 20 ms later, leaf2 45 ms later and only half
        // the time. A lone XOFF long before the storm is outside the window.
        pfc(&mut e, 9, 3, 0, 0xffff);
        for k in 0..1000u64 {
            let t = 500 * MS + k * 300_000;
            pfc(&mut e, 1, 1, t, 0xffff);
            if t >= 520 * MS {
                pfc(&mut e, 2, 2, t + 1000, 0xffff);
            }
            if t >= 545 * MS && k % 2 == 0 {
                pfc(&mut e, 3, 3, t + 2000, 0xffff);
            }
        }
        let o = e.snapshot(T0 + 900 * MS).pfc_origin.expect("a storm");
        assert_eq!(o.origin.as_ref().expect("origin").iface, "leaf1");
        let order: Vec<&str> = o.sources.iter().map(|s| s.source.iface.as_str()).collect();
        assert_eq!(order, ["leaf1", "spine1", "leaf2"]);
        assert_eq!(o.sources[0].first_xoff_ts, T0 + 500 * MS);
        assert!((o.spread_ms - 45.1).abs() < 0.2, "{}", o.spread_ms);
        assert!(o.sources[0].storm);
        // Each source's share of the 300 ms window around the onset.
        let window = (o.window_end_ts - o.window_start_ts) as f64;
        assert_eq!(window, 300.0 * MS as f64);
        assert!(o.sources[0].paused_fraction > o.sources[1].paused_fraction);
        assert!(o.sources[1].paused_fraction > o.sources[2].paused_fraction);
        assert!(o.sources[2].paused_fraction > 0.0);
    }

    /// RDMA WRITE data of QP `qp` from 192.0.2.`src` to 192.0.2.`dst`, seen on `ifindex`.
    fn data(e: &mut Engine, ifindex: u32, src: u8, dst: u8, qp: u32, t: u64) {
        let f = RoceFrame {
            src_ip: [192, 0, 2, src],
            dst_ip: [192, 0, 2, dst],
            tos: (26 << 2) | 2,
            ..RoceFrame::new(0x0a, qp, 1)
        }
        .build();
        e.ingest_frame(T0 + t, &f, f.len() as u32, ifindex);
    }

    fn pfc_prio(e: &mut Engine, mac_last: u8, ifindex: u32, t: u64, prio: u8) {
        let mut quanta = [0u16; 8];
        quanta[prio as usize] = 0xffff;
        let f = pfc_frame(mac_last, 1 << prio, quanta);
        e.ingest_frame(T0 + t, &f, f.len() as u32, ifindex);
    }

    /// Four switch ports on two paths: flow 1 crosses leaf1 and spine1, flow 2 spine1 and
    /// leaf2; a fifth port (other) carries neither. leaf1 pauses priority 3 first; spine1
    /// follows on priority 3 (shared flow), then on priority 4 from the same MAC and port
    /// (same port); leaf2 follows spine1 on priority 3. other pauses between them but shares
    /// no flow: a root of its own. A port that stopped pausing a window before does not cause.
    #[test]
    fn who_paused_whom_follows_flows_and_priorities() {
        let mut e = Engine::new(EngineConfig {
            storm_window_ns: 100 * MS,
            ..EngineConfig::default()
        });
        for (i, name) in [
            (1, "leaf1"),
            (2, "spine1"),
            (3, "leaf2"),
            (4, "other"),
            (5, "old"),
        ] {
            e.set_iface_name(i, name);
        }
        data(&mut e, 1, 1, 2, 0x10, 0);
        data(&mut e, 2, 1, 2, 0x10, 1000);
        data(&mut e, 2, 3, 4, 0x20, 2000);
        data(&mut e, 3, 3, 4, 0x20, 3000);
        data(&mut e, 4, 5, 6, 0x30, 4000);
        // "old" shares flow 2 with leaf2 but paused once, 300 ms before the storm.
        data(&mut e, 5, 3, 4, 0x20, 5000);
        pfc_prio(&mut e, 5, 5, 200 * MS, 3);
        for k in 0..1000u64 {
            let t = 500 * MS + k * 300_000;
            pfc_prio(&mut e, 1, 1, t, 3);
            if t >= 510 * MS {
                pfc_prio(&mut e, 9, 4, t + 500, 3);
            }
            if t >= 520 * MS {
                pfc_prio(&mut e, 2, 2, t + 1000, 3);
            }
            if t >= 530 * MS {
                pfc_prio(&mut e, 2, 2, t + 1500, 4);
            }
            if t >= 545 * MS {
                pfc_prio(&mut e, 3, 3, t + 2000, 3);
            }
        }
        let o = e.snapshot(T0 + 900 * MS).pfc_origin.expect("a storm");
        let row = |s: &crate::report::PauseSource| {
            (
                s.source.iface.clone(),
                s.source.priority,
                s.paused_by.map(|i| o.sources[i].source.iface.clone()),
                s.evidence,
            )
        };
        let got: Vec<_> = o.sources.iter().map(row).collect();
        let want = [
            ("leaf1", 3, None, None),
            ("other", 3, None, None),
            ("spine1", 3, Some("leaf1"), Some("shared_flow")),
            ("spine1", 4, Some("spine1"), Some("same_port")),
            ("leaf2", 3, Some("spine1"), Some("shared_flow")),
        ]
        .map(|(i, p, by, ev)| (i.to_string(), Some(p), by.map(String::from), ev));
        assert_eq!(got, want);
        // leaf2 follows spine1's priority-3 source (index 2), not its priority-4 one.
        assert_eq!(o.sources[4].paused_by, Some(2));
        assert_eq!(o.origin.as_ref().expect("origin").iface, "leaf1");
        assert_eq!((o.origin_index, o.reached, o.hops), (Some(0), 3, 2));
        // spine1's first XOFF at 520.101 ms (the first refresh past 520 ms, + 1 us), leaf2's
        // at 545.002 ms.
        let hop = o.sources[4].hop_ms.expect("a hop");
        assert!((hop - 24.901).abs() < 1e-9, "{hop}");
    }

    /// The first source to pause is not the origin when its pause spread nowhere and a later
    /// one's did.
    #[test]
    fn the_origin_is_the_root_that_reaches_most() {
        let mut e = Engine::new(EngineConfig {
            storm_window_ns: 100 * MS,
            ..EngineConfig::default()
        });
        data(&mut e, 2, 1, 2, 0x10, 0);
        data(&mut e, 3, 1, 2, 0x10, 1000);
        for k in 0..1000u64 {
            let t = 500 * MS + k * 300_000;
            pfc_prio(&mut e, 1, 1, t, 3);
            if t >= 505 * MS {
                pfc_prio(&mut e, 2, 2, t + 500, 3);
            }
            if t >= 515 * MS {
                pfc_prio(&mut e, 3, 3, t + 1000, 3);
            }
        }
        let o = e.snapshot(T0 + 900 * MS).pfc_origin.expect("a storm");
        assert_eq!(o.sources[0].source.src_mac, "02:00:00:00:01:01");
        assert_eq!(
            o.origin.as_ref().expect("origin").src_mac,
            "02:00:00:00:01:02"
        );
        assert_eq!((o.origin_index, o.reached, o.hops), (Some(1), 1, 1));
    }

    /// Three ports in a tree (flows cross if1 then if0, and if2 then if0): if0 pauses first,
    /// if1 2 ms later and if2 4 ms later, all refreshed every 200 us for 2 s: 10,000 frames
    /// per source, more than any per-frame log would keep. Each source keeps its episode start
    /// and its paused time, and the origin is the port that paused first.
    #[test]
    fn a_long_storm_keeps_every_start() {
        let mut e = Engine::new(EngineConfig::default());
        data(&mut e, 1, 1, 2, 0x10, 0);
        data(&mut e, 0, 1, 2, 0x10, 1000);
        data(&mut e, 2, 3, 2, 0x20, 2000);
        data(&mut e, 0, 3, 2, 0x20, 3000);
        let start = 100 * MS;
        for k in 0..10_000u64 {
            let t = start + k * 200_000;
            pfc_prio(&mut e, 1, 0, t, 3);
            pfc_prio(&mut e, 2, 1, t + 2 * MS, 3);
            pfc_prio(&mut e, 3, 2, t + 4 * MS, 3);
        }
        let end = start + 2000 * MS;
        let o = e.snapshot(T0 + end + 10 * MS).pfc_origin.expect("a storm");
        let got: Vec<(&str, u64, Option<usize>)> = o
            .sources
            .iter()
            .map(|s| (s.source.iface.as_str(), s.first_xoff_ts - T0, s.paused_by))
            .collect();
        assert_eq!(
            got,
            [
                ("if0", start, None),
                ("if1", start + 2 * MS, Some(0)),
                ("if2", start + 4 * MS, Some(0)),
            ]
        );
        assert_eq!(o.origin.as_ref().expect("origin").iface, "if0");
        assert_eq!((o.reached, o.hops), (2, 1));
        // Paused from the first XOFF to the last one's end (0xffff quanta at 100 Gb/s =
        // 335.539 us): 1999.8 ms + 335.539 us, for each source.
        let paused_ns = 9_999 * 200_000 + 335_539;
        for s in &o.sources {
            assert_eq!((s.episode_paused_ms * 1e6).round() as u64, paused_ns);
        }
        assert_eq!(o.sources[0].episode_end_ts - T0, start + paused_ns);
    }

    #[test]
    fn no_storm_no_origin() {
        let mut e = Engine::new(EngineConfig::default());
        pfc(&mut e, 1, 1, 0, 0xffff);
        pfc(&mut e, 1, 1, 10 * MS, 0);
        assert!(e.snapshot(T0 + 20 * MS).pfc_origin.is_none());
    }
}
