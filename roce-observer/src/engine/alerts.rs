//! Diagnostics: conditions worth a person's attention, each with a reason, a subject (a flow,
//! a PFC priority) and the times it was first and last seen. One alert per (kind, subject);
//! repeats raise its count. Bounded: past [`MAX_ALERTS`] distinct alerts, new ones are only
//! counted in `dropped`.

use std::collections::BTreeMap;

use roce_observer_common::{FlowKey, PfcKey};
use serde::Serialize;

pub const MAX_ALERTS: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// RoCE data outside the lossless class (DSCP, or PCP when tagged).
    NonLosslessClass,
    /// CNPs not on the CNP DSCP.
    CnpWrongDscp,
    /// RoCE data that is Not-ECT (a switch cannot mark it; ECN-based congestion control is off).
    NotEct,
    /// A PFC priority paused for more than the threshold of a window.
    PfcStorm,
    /// Retransmissions on one flow: at least `burst_count` within `burst_window`.
    RetransmitBurst,
    /// NAKs on one flow: at least `burst_count` within `burst_window`.
    NakBurst,
    /// A latency sample above `--rtt-alert-us`.
    HighLatency,
    /// CE-marked packets on a flow with no CNP ever seen in the opposite direction.
    CeWithoutCnp,
}

impl AlertKind {
    pub fn name(self) -> &'static str {
        match self {
            AlertKind::NonLosslessClass => "non_lossless_class",
            AlertKind::CnpWrongDscp => "cnp_wrong_dscp",
            AlertKind::NotEct => "not_ect",
            AlertKind::PfcStorm => "pfc_storm",
            AlertKind::RetransmitBurst => "retransmit_burst",
            AlertKind::NakBurst => "nak_burst",
            AlertKind::HighLatency => "high_latency",
            AlertKind::CeWithoutCnp => "ce_without_cnp",
        }
    }
}

/// What an alert is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subject {
    Flow(FlowKey),
    Pfc(PfcKey),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    pub kind: AlertKind,
    pub subject: Subject,
    pub reason: String,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Occurrences (packets, bursts, samples or storms, by kind).
    pub count: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Alerts {
    map: BTreeMap<(AlertKind, Subject), Alert>,
    pub dropped: u64,
}

impl Alerts {
    /// Record `count` occurrences at `ts`; `reason` is only built for a new alert (the hot
    /// path of a repeating alert is a map lookup).
    pub fn raise(
        &mut self,
        kind: AlertKind,
        subject: Subject,
        ts: u64,
        count: u64,
        reason: impl FnOnce() -> String,
    ) {
        if let Some(a) = self.map.get_mut(&(kind, subject)) {
            a.count += count;
            a.first_ns = a.first_ns.min(ts);
            a.last_ns = a.last_ns.max(ts);
            return;
        }
        if self.map.len() >= MAX_ALERTS {
            self.dropped += 1;
            return;
        }
        self.map.insert(
            (kind, subject),
            Alert {
                kind,
                subject,
                reason: reason(),
                first_ns: ts,
                last_ns: ts,
                count,
            },
        );
    }

    pub fn iter(&self) -> impl Iterator<Item = &Alert> {
        self.map.values()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Fixed-window event counter for burst detection: `limit` events within `window_ns` of the
/// window's first event make one burst (reported once per window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Burst {
    start: u64,
    count: u64,
    fired: bool,
}

impl Burst {
    /// Count `n` events at `ts`; true when this completes a burst.
    pub fn add(&mut self, ts: u64, n: u64, limit: u64, window_ns: u64) -> bool {
        if self.count == 0 || ts.saturating_sub(self.start) > window_ns {
            *self = Burst {
                start: ts,
                count: 0,
                fired: false,
            };
        }
        self.count += n;
        if !self.fired && limit > 0 && self.count >= limit {
            self.fired = true;
            return true;
        }
        false
    }
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
    fn burst_window() {
        let mut b = Burst::default();
        let fired: Vec<bool> = (0..12).map(|i| b.add(i * 10, 1, 10, 1000)).collect();
        assert_eq!(fired.iter().filter(|f| **f).count(), 1);
        assert!(fired[9]);
        // Spread out: never a burst.
        let mut c = Burst::default();
        assert!((0..100).all(|i| !c.add(i * 2000, 1, 10, 1000)));
    }
}
