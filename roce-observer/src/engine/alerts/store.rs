//! The alert store: one alert per (kind, subject) with the times it was first and last seen;
//! repeats raise its count. Bounded: past [`MAX_ALERTS`] distinct alerts, new ones are only
//! counted in `dropped`. What raises an alert, and what it says, is in the rules (alerts.rs).

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
    /// PSNs declared lost on a flow (docs/metrics.md, "Reordering and loss"): packets lost
    /// before the observation point.
    PacketLoss,
    /// Retransmitted requests or READ responses on a flow.
    Retransmissions,
    /// NAKs other than RNR on a flow (sequence errors, invalid or refused requests).
    Nak,
    /// RNR NAKs: the responder had no receive buffer posted.
    RnrNak,
    /// CE marks on a flow: a switch queue on its path is congested.
    Congestion,
    /// CNPs on a flow: its source asks its destination to slow down.
    Cnp,
    /// PSN sequence-error NAKs for PSNs that were only reordered, not lost: the responder does
    /// not tolerate out-of-order arrival and falls back to go-back-N.
    ReorderNaks,
    /// Packets of a flow arrive out of PSN order with nothing lost: the fabric spreads the flow
    /// over several paths (adaptive routing, packet spraying). Information, not a problem.
    Reordering,
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
            AlertKind::PacketLoss => "packet_loss",
            AlertKind::Retransmissions => "retransmissions",
            AlertKind::Nak => "nak",
            AlertKind::RnrNak => "rnr_nak",
            AlertKind::Congestion => "congestion",
            AlertKind::Cnp => "cnp",
            AlertKind::ReorderNaks => "reorder_naks",
            AlertKind::Reordering => "reordering",
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
    pub(super) map: BTreeMap<(AlertKind, Subject), Alert>,
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
