//! PFC storm origin: within the window around the first storm onset, every pause source (source
//! MAC, observation point, priority) in the order of its first XOFF, the pause fraction of each
//! in that window, the origin candidate (the first) and how fast the pause spread
//! (docs/metrics.md, "PFC storm origin"). Fed with every PFC/PAUSE class frame (both paths:
//! capture frames and ring-buffer events); bounded to [`MAX_FRAMES`] frames per source.

use std::collections::{BTreeMap, VecDeque};

use roce_observer_common::{Direction, PfcKey, pfc::PRIORITY_LINK};

use super::{
    Engine, show_mac,
    snapshot::{PauseSource, PfcOrigin, PfcRef},
};

/// Frames kept per source (the latest).
pub const MAX_FRAMES: usize = 4096;

/// Frame times and requested pause (ns; 0 = XON) per source.
#[derive(Clone, Debug, Default)]
pub struct PauseLog {
    frames: BTreeMap<PfcKey, VecDeque<(u64, u64)>>,
}

impl PauseLog {
    pub fn frame(&mut self, key: PfcKey, ts: u64, pause_ns: u64) {
        let q = self.frames.entry(key).or_default();
        if q.len() >= MAX_FRAMES {
            q.pop_front();
        }
        q.push_back((ts, pause_ns));
    }
}

/// Paused time within `[from, to)` of one source's frames: an XOFF at `t` pauses until
/// `t + pause`, a later XOFF moves the end, an XON ends it (the rule of docs/metrics.md).
fn paused_within(frames: &VecDeque<(u64, u64)>, from: u64, to: u64) -> u64 {
    let clip = |s: u64, e: u64| e.min(to).saturating_sub(s.max(from));
    let mut total = 0;
    let mut open: Option<(u64, u64)> = None;
    for &(t, ns) in frames {
        open = match open {
            Some((s, e)) if e > t => {
                if ns == 0 {
                    total += clip(s, t);
                    None
                } else {
                    Some((s, t.saturating_add(ns)))
                }
            }
            Some((s, e)) => {
                total += clip(s, e);
                (ns != 0).then(|| (t, t.saturating_add(ns)))
            }
            None => (ns != 0).then(|| (t, t.saturating_add(ns))),
        };
    }
    total + open.map(|(s, e)| clip(s, e)).unwrap_or(0)
}

impl Engine {
    /// The storm origin view, or `None` when no storm was detected.
    pub(super) fn pfc_origin(&self) -> Option<PfcOrigin> {
        let onset = self
            .pfc
            .values()
            .filter_map(|e| e.timeline.first_storm_ns)
            .min()?;
        // A storm is detected at the end of a window that was mostly paused, at least one
        // window after the source's first frame: its start can lie two windows back.
        let window = self.cfg.storm_window_ns;
        let (from, to) = (
            onset.saturating_sub(2 * window),
            onset.saturating_add(window),
        );
        let mut sources: Vec<PauseSource> = self
            .pauses
            .frames
            .iter()
            .filter_map(|(k, frames)| {
                let first = frames
                    .iter()
                    .find(|(t, ns)| *t >= from && *t < to && *ns > 0)?
                    .0;
                let paused = paused_within(frames, from, to);
                Some(PauseSource {
                    source: PfcRef {
                        iface: self.iface_name(k.ifindex),
                        direction: Direction::from_u8(k.direction).name(),
                        src_mac: show_mac(k.src_mac),
                        priority: (k.priority != PRIORITY_LINK).then_some(k.priority),
                    },
                    first_xoff_ts: first,
                    paused_fraction: paused as f64 / (to - from).max(1) as f64,
                    storm: self.pfc.get(k).is_some_and(|e| e.timeline.storms > 0),
                })
            })
            .collect();
        sources.sort_by(|a, b| (a.first_xoff_ts, &a.source).cmp(&(b.first_xoff_ts, &b.source)));
        let first = sources.first()?;
        let last = sources.last()?;
        Some(PfcOrigin {
            storm_onset_ts: onset,
            window_start_ts: from,
            window_end_ts: to,
            origin: first.source.clone(),
            spread_ms: (last.first_xoff_ts - first.first_xoff_ts) as f64 / 1e6,
            sources,
        })
    }
}

#[cfg(test)]
mod tests {
    use roce_observer_common::frames::pfc_frame;

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
        assert_eq!(o.origin.iface, "leaf1");
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

    #[test]
    fn no_storm_no_origin() {
        let mut e = Engine::new(EngineConfig::default());
        pfc(&mut e, 1, 1, 0, 0xffff);
        pfc(&mut e, 1, 1, 10 * MS, 0);
        assert!(e.snapshot(T0 + 20 * MS).pfc_origin.is_none());
    }
}
