//! One PFC priority's (or legacy PAUSE's) counters and pause timeline, and the storms seen
//! so far: the PFC analysis's state (pfc.rs), named here below the analysis trait so that
//! other analyses' sections can read the storms through their `View`.
//!
//! Timeline: an XOFF with `q` quanta at time `t` pauses the priority over `[t, t + q·512/link)`;
//! a later XOFF before that end refreshes the end to its own `t' + q'·512/link`; an XON (time
//! 0) ends the pause at its own time. The paused time is the length of the union of these
//! periods. A storm is a moment at which the priority was paused for more than `threshold` of
//! the preceding `window` (and at least one `window` of this priority has been observed).

use std::collections::{BTreeSet, VecDeque};

use roce_observer_common::{PfcKey, PfcStats, pfc::quanta_to_ns};

#[derive(Clone, Debug, Default)]
pub struct PfcEntry {
    pub stats: PfcStats,
    pub timeline: PauseTimeline,
}

/// The pause periods of one priority.
#[derive(Clone, Debug, Default)]
pub struct PauseTimeline {
    /// First frame time (start of the observed span).
    first_ns: Option<u64>,
    /// The open pause period `[start, end)`, if one was started and not yet accounted.
    open: Option<(u64, u64)>,
    /// Closed periods that may still overlap the storm window.
    recent: VecDeque<(u64, u64)>,
    /// Total closed paused time.
    closed_ns: u64,
    /// Paused time before the current reporting interval (see [`PauseTimeline::mark`]).
    base_ns: u64,
    /// Storm onsets, and the time of the first one.
    pub storms: u64,
    pub first_storm_ns: Option<u64>,
    in_storm: bool,
}

impl PauseTimeline {
    /// One PFC class (or a legacy PAUSE) with `quanta` at `t`. Returns true when a storm starts.
    pub fn frame(
        &mut self,
        t: u64,
        quanta: u16,
        link_gbps: f64,
        threshold: f64,
        window_ns: u64,
    ) -> bool {
        self.first_ns.get_or_insert(t);
        let dur = quanta_to_ns(u64::from(quanta), link_gbps) as u64;
        match self.open {
            Some((start, end)) if end > t => {
                // Still paused: refresh (XOFF) or end here (XON).
                if quanta == 0 {
                    self.close(start, t);
                    self.open = None;
                } else {
                    self.open = Some((start, t.saturating_add(dur)));
                }
            }
            Some((start, end)) => {
                self.close(start, end);
                self.open = (quanta != 0).then(|| (t, t.saturating_add(dur)));
            }
            None => self.open = (quanta != 0).then(|| (t, t.saturating_add(dur))),
        }
        self.check_storm(t, threshold, window_ns)
    }

    fn close(&mut self, start: u64, end: u64) {
        if end > start {
            self.closed_ns += end - start;
            self.recent.push_back((start, end));
        }
    }

    /// Paused time in `[from, to)`.
    fn paused_between(&self, from: u64, to: u64) -> u64 {
        let clip = |(s, e): (u64, u64)| e.min(to).saturating_sub(s.max(from));
        self.recent.iter().map(|p| clip(*p)).sum::<u64>() + self.open.map(clip).unwrap_or(0)
    }

    fn check_storm(&mut self, now: u64, threshold: f64, window_ns: u64) -> bool {
        let from = now.saturating_sub(window_ns);
        while self.recent.front().is_some_and(|(_, e)| *e <= from) {
            self.recent.pop_front();
        }
        let storm = self.storm_at(now, threshold, window_ns);
        let onset = storm && !self.in_storm;
        if onset {
            self.storms += 1;
            self.first_storm_ns.get_or_insert(now);
        }
        self.in_storm = storm;
        onset
    }

    /// Whether the paused fraction of the window ending at `now` exceeds `threshold`.
    pub fn storm_at(&self, now: u64, threshold: f64, window_ns: u64) -> bool {
        let Some(first) = self.first_ns else {
            return false;
        };
        if window_ns == 0 || now.saturating_sub(first) < window_ns {
            return false;
        }
        let paused = self.paused_between(now - window_ns, now);
        paused as f64 > threshold * window_ns as f64
    }

    /// Total paused time up to `now`.
    pub fn paused_ns(&self, now: u64) -> u64 {
        let open = self
            .open
            .map(|(s, e)| e.min(now).saturating_sub(s))
            .unwrap_or(0);
        self.closed_ns + open
    }

    /// Paused time since the last [`PauseTimeline::mark`].
    pub fn paused_in_interval(&self, now: u64) -> u64 {
        self.paused_ns(now).saturating_sub(self.base_ns)
    }

    /// Start a new reporting interval at `now`.
    pub fn mark(&mut self, now: u64) {
        self.base_ns = self.paused_ns(now);
    }

    pub fn has_frames(&self) -> bool {
        self.first_ns.is_some()
    }
}

/// The storms seen so far, over every priority: what the PFC storm origin starts from.
#[derive(Clone, Debug, Default)]
pub struct Storms {
    /// The earliest storm onset.
    pub first_ns: Option<u64>,
    /// The priorities that had a storm.
    pub stormed: BTreeSet<PfcKey>,
}

impl Storms {
    /// A storm started on `key` at `ts`. Each priority's first onset counts (the earliest of
    /// those is the storm's onset), as its timeline's `first_storm_ns` does.
    pub fn onset(&mut self, key: &PfcKey, ts: u64) {
        if self.stormed.insert(*key) {
            self.first_ns = Some(self.first_ns.map_or(ts, |f| f.min(ts)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn xoff_xon_and_refresh() {
        let mut t = PauseTimeline::default();
        // 0xffff quanta at 100G = 335.5 us.
        t.frame(0, 0xffff, 100.0, 0.5, 1000 * MS);
        assert_eq!(t.paused_ns(1_000_000), 335_539);
        // XON after 100 us ends it there.
        let mut u = PauseTimeline::default();
        u.frame(0, 0xffff, 100.0, 0.5, 1000 * MS);
        u.frame(100_000, 0, 100.0, 0.5, 1000 * MS);
        assert_eq!(u.paused_ns(1_000_000), 100_000);
        // A refresh at 300 us extends to 300 + 335.5 us.
        let mut r = PauseTimeline::default();
        r.frame(0, 0xffff, 100.0, 0.5, 1000 * MS);
        r.frame(300_000, 0xffff, 100.0, 0.5, 1000 * MS);
        assert_eq!(r.paused_ns(10 * MS), 635_539);
        // An XON that is not needed (already resumed) changes nothing.
        r.frame(5 * MS, 0, 100.0, 0.5, 1000 * MS);
        assert_eq!(r.paused_ns(10 * MS), 635_539);
    }

    #[test]
    fn storm_needs_a_full_paused_window() {
        let mut t = PauseTimeline::default();
        let mut onsets = 0;
        // Refresh every 300 us for 1.5 s: continuously paused.
        let mut now = 0;
        while now < 1500 * MS {
            if t.frame(now, 0xffff, 100.0, 0.5, 1000 * MS) {
                onsets += 1;
                assert!(now >= 1000 * MS);
            }
            now += 300_000;
        }
        assert_eq!(onsets, 1);
        assert_eq!(t.storms, 1);
        assert!(t.recent.len() <= 1);
        // Sparse pauses: 335 us every 10 ms is 3.4%: no storm.
        let mut s = PauseTimeline::default();
        let mut now = 0;
        while now < 3000 * MS {
            assert!(!s.frame(now, 0xffff, 100.0, 0.5, 1000 * MS));
            now += 10 * MS;
        }
        assert!(s.recent.len() < 200);
    }

    #[test]
    fn interval_mark() {
        let mut t = PauseTimeline::default();
        t.frame(0, 0xffff, 100.0, 0.5, 1000 * MS);
        t.mark(MS);
        t.frame(2 * MS, 0xffff, 100.0, 0.5, 1000 * MS);
        assert_eq!(t.paused_in_interval(3 * MS), 335_539);
    }
}
