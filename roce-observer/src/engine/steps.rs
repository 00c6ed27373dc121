//! Training steps: the compute/communication period of collective traffic, and the flows that
//! finish each step's communication last (stragglers), with the congestion and loss evidence seen
//! in the same windows (docs/metrics.md, "Training steps").
//!
//! Fed per accounted RoCE packet (the capture path; the kernel path has no per-packet times, so
//! `run` without a capture source reports `steps: null`). Memory is bounded: data bytes in 1 ms
//! bins for the last [`WINDOW_BINS`] ms; per flow (at most [`MAX_FLOWS`]) its last
//! [`MAX_RUNS`] activity runs and [`MAX_SIGNALS`] CNP/NAK times; [`MAX_PAUSES`] XOFF times.
//! The analysis itself (period, onsets, stragglers) runs on that window when a snapshot is taken:
//! see [`period`] and the `detect` module.

use std::collections::{HashMap, VecDeque};

use roce_observer_common::{
    FlowKey,
    account::{Outcome, RocePacket},
    opcode::{self, PsnSpace},
    psn::PsnVerdict,
};

use super::flows::FastHash;

mod detect;

pub use detect::{MIN_CONFIDENCE, MIN_STEPS, analyse, period};

/// Bin width of the byte series.
pub const BIN_NS: u64 = 1_000_000;
/// Bins kept: the analysis window (5 minutes).
pub const WINDOW_BINS: usize = 300_000;
/// Flows followed for stragglers; later flows still count in the byte series.
pub const MAX_FLOWS: usize = 4096;
/// Activity runs kept per flow.
pub const MAX_RUNS: usize = 256;
/// CNP/NAK times kept per flow.
pub const MAX_SIGNALS: usize = 256;
/// XOFF times kept.
pub const MAX_PAUSES: usize = 65_536;
/// A flow's data packets closer than this belong to one run.
pub const RUN_GAP_NS: u64 = BIN_NS;

/// Data packets of one flow with no gap above [`RUN_GAP_NS`], and what happened on them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Run {
    pub start: u64,
    pub end: u64,
    pub bytes: u64,
    pub ce: u64,
    pub retransmits: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Cnp,
    Nak,
}

/// What one flow did, as far as steps care.
#[derive(Clone, Debug, Default)]
pub struct FlowActivity {
    pub runs: VecDeque<Run>,
    /// CNPs and NAKs this flow carried (they answer the reverse flow), with their times.
    pub signals: VecDeque<(u64, Signal)>,
}

/// The retained series.
#[derive(Clone, Debug, Default)]
pub struct Steps {
    /// Data bytes per bin; `bins[0]` is bin number `first_bin` (time / [`BIN_NS`]).
    bins: VecDeque<u64>,
    first_bin: u64,
    flows: HashMap<FlowKey, FlowActivity, FastHash>,
    /// Flows not followed because [`MAX_FLOWS`] were.
    pub untracked_flows: u64,
    /// XOFF frames: time and requested pause time (ns), any point, any priority.
    pauses: VecDeque<(u64, u64)>,
}

/// Requests and READ responses carry the collective's data; ACKs and CNPs answer it.
fn carries_data(pkt: &RocePacket) -> bool {
    matches!(
        opcode::psn_space(pkt.opcode),
        PsnSpace::Request | PsnSpace::ReadResponse
    ) || (opcode::transport(pkt.opcode) == opcode::TRANSPORT_UD)
}

impl Steps {
    /// One accounted RoCE packet seen at `ts`.
    pub fn packet(&mut self, ts: u64, key: &FlowKey, pkt: &RocePacket, out: &Outcome) {
        let signal = if out.cnp {
            Some(Signal::Cnp)
        } else if out.nak {
            Some(Signal::Nak)
        } else {
            None
        };
        let data = signal.is_none() && carries_data(pkt);
        if data {
            self.add_bytes(ts, pkt.frame_len as u64);
        }
        if !data && signal.is_none() {
            return;
        }
        let full = self.flows.len() >= MAX_FLOWS;
        let activity = match self.flows.get_mut(key) {
            Some(a) => a,
            None if full => {
                self.untracked_flows += 1;
                return;
            }
            None => self.flows.entry(*key).or_default(),
        };
        if let Some(s) = signal {
            if activity.signals.len() >= MAX_SIGNALS {
                activity.signals.pop_front();
            }
            activity.signals.push_back((ts, s));
            return;
        }
        let retransmit = matches!(out.psn, PsnVerdict::Retransmit { .. }) as u64;
        let ce = (pkt.ecn == 3) as u64;
        match activity.runs.back_mut() {
            Some(r) if ts <= r.end.saturating_add(RUN_GAP_NS) => {
                r.end = r.end.max(ts);
                r.bytes += pkt.frame_len as u64;
                r.ce += ce;
                r.retransmits += retransmit;
            }
            _ => {
                if activity.runs.len() >= MAX_RUNS {
                    activity.runs.pop_front();
                }
                activity.runs.push_back(Run {
                    start: ts,
                    end: ts,
                    bytes: pkt.frame_len as u64,
                    ce,
                    retransmits: retransmit,
                });
            }
        }
    }

    /// An XOFF seen at `ts` asking for `pause_ns` of pause.
    pub fn pause(&mut self, ts: u64, pause_ns: u64) {
        if self.pauses.len() >= MAX_PAUSES {
            self.pauses.pop_front();
        }
        self.pauses.push_back((ts, pause_ns));
    }

    fn add_bytes(&mut self, ts: u64, bytes: u64) {
        let bin = ts / BIN_NS;
        if self.bins.is_empty() {
            self.first_bin = bin;
        }
        if bin < self.first_bin {
            // Older than the window (out-of-order interfaces): not part of the series.
            return;
        }
        let end = self.first_bin + self.bins.len() as u64;
        if bin >= end {
            let grow = bin - end + 1;
            if grow as usize >= WINDOW_BINS {
                // An idle stretch longer than the window: start over.
                self.bins.clear();
                self.first_bin = bin;
                self.bins.push_back(0);
            } else {
                self.bins.extend(std::iter::repeat_n(0, grow as usize));
            }
        }
        // Trimmed in chunks of a tenth of the window, so that forgetting old runs is rare.
        if self.bins.len() > WINDOW_BINS + WINDOW_BINS / 10 {
            let excess = self.bins.len() - WINDOW_BINS;
            self.bins.drain(..excess);
            self.first_bin += excess as u64;
            self.forget_before(self.first_bin * BIN_NS);
        }
        let i = (bin - self.first_bin) as usize;
        if let Some(b) = self.bins.get_mut(i) {
            *b += bytes;
        }
    }

    /// Drop runs, signals and pauses that ended before the window.
    fn forget_before(&mut self, t: u64) {
        for a in self.flows.values_mut() {
            while a.runs.front().is_some_and(|r| r.end < t) {
                a.runs.pop_front();
            }
            while a.signals.front().is_some_and(|s| s.0 < t) {
                a.signals.pop_front();
            }
        }
        self.flows
            .retain(|_, a| !a.runs.is_empty() || !a.signals.is_empty());
        while self.pauses.front().is_some_and(|p| p.0 < t) {
            self.pauses.pop_front();
        }
    }

    pub fn bins(&self) -> (u64, &VecDeque<u64>) {
        (self.first_bin, &self.bins)
    }

    pub fn flows(&self) -> impl Iterator<Item = (&FlowKey, &FlowActivity)> {
        self.flows.iter()
    }

    pub fn pauses(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.pauses.iter()
    }
}

#[cfg(test)]
mod tests;
