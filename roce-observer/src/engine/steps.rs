//! Training steps: the compute/communication period of collective traffic, and the flows that
//! finish each step's communication last (stragglers), with the congestion and loss evidence seen
//! in the same windows (docs/metrics.md, "Training steps").
//!
//! Fed two ways. The capture path: per accounted RoCE packet ([`Steps::packet`]), exact. The
//! kernel path: per finished activity run, sent by the kernel sixteen data runs to a record
//! or a signal run to an event ([`Steps::data_runs`], [`Steps::signal_run`];
//! roce-observer-common/src/run.rs), with each run's bytes spread evenly over the 1 ms bins it
//! spans, and the finished data runs not yet sent read from the flows' batches
//! ([`Steps::runs_read`]) and the runs still open from the flow records ([`Steps::flow_read`]). Memory is bounded: data bytes in 1 ms bins for the
//! last [`WINDOW_BINS`] ms; per flow (at most [`MAX_FLOWS`]) its last [`MAX_RUNS`] activity runs
//! and [`MAX_SIGNALS`] CNP/NAK times; [`MAX_PAUSES`] XOFF times.
//! The analysis itself (period, onsets, stragglers) runs on that window when a snapshot is taken:
//! see [`period`] and the `detect` module.

use std::collections::{HashMap, VecDeque};

use roce_observer_common::{
    Direction, Event, EventBody, FlowKey, FlowStats, PfcKey,
    account::{Outcome, RocePacket},
    psn::PsnVerdict,
    run::{DataRun, RunBatch},
};

/// Whether run number `a` is at or after `b` (run numbers wrap).
fn run_at_or_after(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) < 1 << 31
}

use super::{
    EngineConfig,
    analysis::{Analysis, Feed, Names, View},
    flows::FastHash,
};
use crate::report::{Snapshot, StepsSnapshot};

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
/// A flow's data packets closer than this belong to one run (the kernel's rule, run.rs).
pub const RUN_GAP_NS: u64 = roce_observer_common::run::RUN_GAP_NS;
const _: () = assert!(RUN_GAP_NS == BIN_NS);

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
    /// The newest run, after `runs`, while packets may still extend it: kept here, beside the
    /// flow's other fields, so that a packet does not load a line of `runs`' buffer.
    tail: Option<Run>,
    /// Capture path: the engine's number of the flow this activity is kept for (see
    /// [`Steps::by_flow`]).
    owner: Option<u32>,
    /// CNPs and NAKs this flow carried (they answer the reverse flow), with their times.
    pub signals: VecDeque<(u64, Signal)>,
    /// Kernel path: the run still open in the flow record at its last read (finished runs
    /// arrive as records), and the signals of its open signal run.
    open: Option<Run>,
    /// Kernel path: the finished data runs of the flow's batch not yet sent at its last read,
    /// with their numbers; replaced by each read, and left out once a record carries them
    /// ([`FlowActivity::sent_next`]).
    unsent: Vec<(u32, Run)>,
    /// Kernel path: the number of runs the flow's batch had taken at its last read
    /// (`RunBatch::seq`): a batch read again unchanged is not gone through again.
    batch_read: Option<u32>,
    /// Kernel path: the number after the last run of the last record received.
    sent_next: Option<u32>,
    open_signals: Vec<(u64, Signal)>,
    /// Kernel path: the flow record's `run_bytes_unsent` and `last_ns` at its last read.
    unsent_read: Option<(u64, u64)>,
}

impl FlowActivity {
    /// Kernel path: the run open at the last read, unless it has finished meanwhile (a record
    /// carried it, or the batch read after the flow record holds it).
    fn open_run(&self) -> Option<&Run> {
        self.open.as_ref().filter(|o| {
            self.newest_run().is_none_or(|r| o.start > r.start)
                && self.unsent.last().is_none_or(|(_, r)| o.start > r.start)
        })
    }

    fn newest_run(&self) -> Option<&Run> {
        self.tail.as_ref().or(self.runs.back())
    }

    /// The runs kept, oldest first (the tail last).
    fn kept_runs(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().chain(self.tail.as_ref())
    }

    /// Kernel path: the finished runs read from the flow's batch that no record has carried
    /// since.
    fn unsent_runs(&self) -> impl Iterator<Item = &Run> {
        self.unsent
            .iter()
            .filter(|(n, _)| self.sent_next.is_none_or(|s| run_at_or_after(*n, s)))
            .map(|(_, r)| r)
    }

    /// The finished runs, then (kernel path) those not yet sent and the open one.
    pub fn all_runs(&self) -> impl Iterator<Item = &Run> {
        self.kept_runs()
            .chain(self.unsent_runs())
            .chain(self.open_run())
    }

    /// Kernel path: the runs read from the maps (finished, not yet sent; open).
    fn read_runs(&self) -> impl Iterator<Item = &Run> {
        self.unsent_runs().chain(self.open_run())
    }

    /// Move the tail to the end of `runs` (at most [`MAX_RUNS`] kept).
    fn settle_tail(&mut self) {
        if let Some(t) = self.tail.take() {
            if self.runs.len() >= MAX_RUNS {
                self.runs.pop_front();
            }
            self.runs.push_back(t);
        }
    }

    /// The signals, those of the open signal run (kernel path) included.
    pub fn all_signals(&self) -> impl Iterator<Item = &(u64, Signal)> {
        let newer = |o: &&(u64, Signal)| self.signals.back().is_none_or(|s| o.0 > s.0);
        self.signals
            .iter()
            .chain(self.open_signals.iter().filter(newer))
    }
}

/// The retained series.
#[derive(Clone, Debug, Default)]
pub struct Steps {
    /// Data bytes per bin; `bins[0]` is bin number `first_bin` (time / [`BIN_NS`]).
    bins: VecDeque<u64>,
    first_bin: u64,
    /// The flows followed, by key: the index of each one's activity in `activities`. The
    /// map's order is the order flows are analysed in (ties between stragglers go to the
    /// first).
    flows: HashMap<FlowKey, usize, FastHash>,
    /// The flows' activities; a forgotten flow's slot is reused (`free`).
    activities: Vec<FlowActivity>,
    free: Vec<usize>,
    /// Capture path: the activity slot of each flow by the engine's flow number
    /// (`FlowEntry::id`; `u32::MAX`: none), checked against the slot's owner, so that a packet
    /// finds its flow's activity without hashing and looking up its key.
    by_flow: Vec<u32>,
    /// Flows not followed because [`MAX_FLOWS`] were.
    pub untracked_flows: u64,
    /// XOFF frames: time and requested pause time (ns), any point, any priority.
    pauses: VecDeque<(u64, u64)>,
    /// Kernel path: bytes per bin of the unsent short runs, as differences (a rate starts at
    /// one bin and stops at another; see `add_background`), aligned with `bins`; empty until
    /// used.
    background: VecDeque<f64>,
}

/// `n` signal times spread evenly over `[start, end]` (a signal run gives its counts, not
/// each time).
fn spread_times(start: u64, end: u64, n: u32) -> impl Iterator<Item = u64> {
    let span = end.saturating_sub(start);
    (0..n).map(move |i| {
        if n <= 1 {
            start
        } else {
            start + (span as u128 * i as u128 / (n - 1) as u128) as u64
        }
    })
}

/// `bytes` spread evenly over the bins of `[start, end]` (by the time each bin overlaps it):
/// calls `each(bin, bytes)` for every bin that gets some. Integer shares; they sum to `bytes`.
fn spread_bytes(start: u64, end: u64, bytes: u64, mut each: impl FnMut(u64, u64)) {
    // Only the last window's worth matters (and is looped over).
    let window = WINDOW_BINS as u64 * BIN_NS;
    let (start, bytes) = if end.saturating_sub(start) > window {
        let kept = bytes as u128 * window as u128 / (end - start) as u128;
        (end - window, kept as u64)
    } else {
        (start, bytes)
    };
    let (first, last) = (start / BIN_NS, end / BIN_NS);
    if first == last || end <= start {
        each(first, bytes);
        return;
    }
    let span = (end - start) as u128;
    let mut given = 0u64;
    for bin in first..=last {
        let upto = ((bin + 1) * BIN_NS).min(end);
        let cumulative = (bytes as u128 * (upto - start) as u128 / span) as u64;
        let share = if bin == last {
            bytes - given
        } else {
            cumulative - given
        };
        given += share;
        if share > 0 {
            each(bin, share);
        }
    }
}

impl Steps {
    /// One accounted RoCE packet seen at `ts`.
    pub fn packet(&mut self, ts: u64, key: &FlowKey, pkt: &RocePacket, out: &Outcome) {
        self.packet_of(ts, key, None, pkt, out);
    }

    /// [`Steps::packet`] of the engine's flow number `flow`, when known.
    pub fn packet_of(
        &mut self,
        ts: u64,
        key: &FlowKey,
        flow: Option<u32>,
        pkt: &RocePacket,
        out: &Outcome,
    ) {
        let signal = if out.cnp {
            Some(Signal::Cnp)
        } else if out.nak {
            Some(Signal::Nak)
        } else {
            None
        };
        let data = signal.is_none() && pkt.carries_data();
        if data {
            self.add_bytes(ts, pkt.frame_len as u64);
        }
        if !data && signal.is_none() {
            return;
        }
        let ix = match flow.and_then(|f| self.owned_by(f)) {
            Some(ix) => ix,
            None => {
                let full = self.flows.len() >= MAX_FLOWS;
                let ix = match self.flows.get(key) {
                    Some(&ix) => ix,
                    None if full => {
                        self.untracked_flows += 1;
                        return;
                    }
                    None => self.insert(key),
                };
                if let Some(f) = flow {
                    self.own(ix, f);
                }
                ix
            }
        };
        let activity = &mut self.activities[ix];
        if let Some(s) = signal {
            if activity.signals.len() >= MAX_SIGNALS {
                activity.signals.pop_front();
            }
            activity.signals.push_back((ts, s));
            return;
        }
        let retransmit = matches!(out.psn, PsnVerdict::Retransmit { .. }) as u64;
        let ce = (pkt.ecn == 3) as u64;
        if activity.tail.is_none() {
            // The newest run, whoever made it, is the one a packet may extend.
            activity.tail = activity.runs.pop_back();
        }
        match activity.tail.as_mut() {
            Some(r) if ts <= r.end.saturating_add(RUN_GAP_NS) => {
                r.end = r.end.max(ts);
                r.bytes += pkt.frame_len as u64;
                r.ce += ce;
                r.retransmits += retransmit;
            }
            _ => {
                activity.settle_tail();
                if activity.runs.len() >= MAX_RUNS {
                    activity.runs.pop_front();
                }
                activity.tail = Some(Run {
                    start: ts,
                    end: ts,
                    bytes: pkt.frame_len as u64,
                    ce,
                    retransmits: retransmit,
                });
            }
        }
    }

    /// The activity slot of the engine's flow `flow`, if it is still that flow's.
    #[inline]
    fn owned_by(&self, flow: u32) -> Option<usize> {
        let ix = *self.by_flow.get(flow as usize)? as usize;
        (self.activities.get(ix)?.owner == Some(flow)).then_some(ix)
    }

    /// Slot `ix` is the activity of the engine's flow `flow`.
    fn own(&mut self, ix: usize, flow: u32) {
        let f = flow as usize;
        if self.by_flow.len() <= f {
            self.by_flow.resize(f + 1, u32::MAX);
        }
        self.by_flow[f] = ix as u32;
        self.activities[ix].owner = Some(flow);
    }

    /// A new, empty activity for `key` (absent from `flows`): its slot.
    fn insert(&mut self, key: &FlowKey) -> usize {
        let ix = match self.free.pop() {
            Some(ix) => ix,
            None => {
                self.activities.push(FlowActivity::default());
                self.activities.len() - 1
            }
        };
        self.flows.entry(*key).or_insert(ix);
        ix
    }

    /// The activity of `key`, made if there is room for another flow (else counted).
    fn activity(&mut self, key: &FlowKey) -> Option<&mut FlowActivity> {
        let ix = match self.flows.get(key) {
            Some(&ix) => ix,
            None if self.flows.len() >= MAX_FLOWS => {
                self.untracked_flows += 1;
                return None;
            }
            None => self.insert(key),
        };
        Some(&mut self.activities[ix])
    }

    /// The activity of `key`, if followed.
    fn activity_of(&self, key: &FlowKey) -> Option<&FlowActivity> {
        self.flows.get(key).map(|&ix| &self.activities[ix])
    }

    /// Kernel path: the finished data runs of `key` numbered `first..` (one record), each as
    /// [`Steps::data_run`]; the same runs read from the flow record before are left out from now
    /// on.
    pub fn data_runs(&mut self, key: &FlowKey, first: u32, runs: &[DataRun]) {
        for r in runs {
            self.data_run(key, run_of(r));
        }
        let next = first.wrapping_add(runs.len() as u32);
        if let Some(&ix) = self.flows.get(key) {
            let activity = &mut self.activities[ix];
            activity.sent_next = Some(next);
            activity.unsent.retain(|(n, _)| run_at_or_after(*n, next));
        }
    }

    /// Kernel path: a finished data run of `key`, its bytes spread over its bins.
    pub fn data_run(&mut self, key: &FlowKey, run: Run) {
        spread_bytes(run.start, run.end, run.bytes, |bin, b| self.add_bin(bin, b));
        let Some(activity) = self.activity(key) else {
            return;
        };
        if activity.open.is_some_and(|o| o.start <= run.start) {
            activity.open = None;
        }
        activity.settle_tail();
        if activity.runs.len() >= MAX_RUNS {
            activity.runs.pop_front();
        }
        activity.runs.push_back(run);
    }

    /// Kernel path: a finished signal run of `key`: `cnp` CNPs and `naks` NAKs, their times
    /// spread evenly over `[start, end]`.
    pub fn signal_run(&mut self, key: &FlowKey, start: u64, end: u64, cnp: u32, naks: u32) {
        let Some(activity) = self.activity(key) else {
            return;
        };
        if activity.open_signals.first().is_some_and(|o| o.0 <= start) {
            activity.open_signals.clear();
        }
        for (t, s) in signal_times(start, end, cnp, naks) {
            if activity.signals.len() >= MAX_SIGNALS {
                activity.signals.pop_front();
            }
            activity.signals.push_back((t, s));
        }
    }

    /// Kernel path: a flow record as read from the map (times in ns since the epoch), after
    /// the records drained before it: its open runs replace the last read's, and the bytes of
    /// the runs too short to be batched (or whose record was lost, or that found no room for a
    /// batch) since the last read are spread evenly over the time between the two reads' last
    /// packets (they are sparse traffic: background).
    pub fn flow_read(&mut self, key: &FlowKey, stats: &FlowStats) {
        let open = (stats.run.packets > 0 && stats.run.sent()).then(|| run_of(&stats.run));
        let signals = stats.signals;
        let nothing = open.is_none() && (signals.cnp | signals.naks) == 0;
        if nothing && stats.run_bytes_unsent == 0 && !self.flows.contains_key(key) {
            // No data yet (a flow of ACKs, one short run so far): no entry to keep.
            return;
        }
        let Some(activity) = self.activity(key) else {
            return;
        };
        // After the last read's last packet (the first read: from the first packet on).
        let (before, since) = activity
            .unsent_read
            .map_or((0, stats.first_ns), |(b, last)| (b, last + 1));
        activity.unsent_read = Some((stats.run_bytes_unsent, stats.last_ns));
        activity.open = open;
        activity.open_signals = signal_times(
            signals.start_ns,
            signals.end_ns,
            signals.cnp.min(MAX_SIGNALS as u32),
            signals.naks.min(MAX_SIGNALS as u32),
        )
        .collect();
        let unsent = stats.run_bytes_unsent.saturating_sub(before);
        if unsent > 0 {
            self.add_background(since, stats.last_ns, unsent);
        }
    }

    /// Kernel path: a flow's batch of finished data runs as read from its map (times in ns
    /// since the epoch) on every tick, after the flow records: its runs not yet sent replace the
    /// last read's. A batch unchanged since its last read is skipped; one of a flow not followed
    /// is taken only when a run not yet sent is within the window (a flow forgotten for having
    /// nothing left there stays forgotten).
    pub fn runs_read(&mut self, key: &FlowKey, batch: &RunBatch) {
        let seq = batch.seq();
        let window = self.first_bin * BIN_NS;
        match self.activity_of(key) {
            Some(a) if a.batch_read == Some(seq) => return,
            Some(_) => {}
            // The flow read has counted a flow the full table does not follow.
            None if self.flows.len() >= MAX_FLOWS => return,
            None if !batch.unsent().any(|r| r.end_ns >= window) => return,
            None => {}
        }
        let ix = match self.flows.get(key) {
            Some(&ix) => ix,
            None => self.insert(key),
        };
        let activity = &mut self.activities[ix];
        activity.batch_read = Some(seq);
        activity.unsent = batch.unsent().map(|r| (r.seq, run_of(r))).collect();
    }

    /// An XOFF seen at `ts` asking for `pause_ns` of pause.
    pub fn pause(&mut self, ts: u64, pause_ns: u64) {
        if self.pauses.len() >= MAX_PAUSES {
            self.pauses.pop_front();
        }
        self.pauses.push_back((ts, pause_ns));
    }

    fn add_bytes(&mut self, ts: u64, bytes: u64) {
        self.add_bin(ts / BIN_NS, bytes);
    }

    /// Add `bytes` to bin number `bin`.
    fn add_bin(&mut self, bin: u64, bytes: u64) {
        if let Some(i) = self.slot(bin) {
            self.bins[i] += bytes;
        }
    }

    /// The index of bin number `bin`, the series grown to hold it. Bins may come out of time
    /// order (the kernel path's runs arrive when they finish, not when they start): the series
    /// grows at either end, within the window; `None` for a bin older than the window.
    /// `background` (when used) grows and shrinks with `bins`.
    fn slot(&mut self, bin: u64) -> Option<usize> {
        if self.bins.is_empty() {
            self.first_bin = bin;
        }
        let with_background = !self.background.is_empty();
        if bin < self.first_bin {
            let grow = self.first_bin - bin;
            if grow as usize + self.bins.len() > WINDOW_BINS + WINDOW_BINS / 10 {
                // Older than the window (out-of-order interfaces): not part of the series.
                return None;
            }
            for _ in 0..grow {
                self.bins.push_front(0);
                if with_background {
                    self.background.push_front(0.0);
                }
            }
            self.first_bin = bin;
        }
        let end = self.first_bin + self.bins.len() as u64;
        if bin >= end {
            let grow = bin - end + 1;
            if grow as usize >= WINDOW_BINS {
                // An idle stretch longer than the window: start over.
                self.bins.clear();
                self.first_bin = bin;
                self.bins.push_back(0);
                if with_background {
                    self.background.clear();
                    self.background.push_back(0.0);
                }
            } else {
                self.bins.extend(std::iter::repeat_n(0, grow as usize));
                if with_background {
                    self.background
                        .extend(std::iter::repeat_n(0.0, grow as usize));
                }
            }
        }
        // Trimmed in chunks of a tenth of the window, so that forgetting old runs is rare.
        if self.bins.len() > WINDOW_BINS + WINDOW_BINS / 10 {
            let excess = self.bins.len() - WINDOW_BINS;
            self.bins.drain(..excess);
            if with_background {
                // The rates started in the dropped bins still hold after them.
                let carried: f64 = self.background.drain(..excess).sum();
                if let Some(b) = self.background.front_mut() {
                    *b += carried;
                }
            }
            self.first_bin += excess as u64;
            self.forget_before(self.first_bin * BIN_NS);
        }
        bin.checked_sub(self.first_bin)
            .map(|i| i as usize)
            .filter(|&i| i < self.bins.len())
    }

    /// `bytes` spread evenly over the bins of `[start, end]` as background (the kernel path's
    /// unsent short runs): one rate added where it starts and removed after it ends, summed
    /// into the series at analysis time, so a flow read costs the same whatever its span.
    fn add_background(&mut self, start: u64, end: u64, bytes: u64) {
        let window = WINDOW_BINS as u64 * BIN_NS;
        let start = start.max(end.saturating_sub(window)).min(end);
        let (first, last) = (start / BIN_NS, end / BIN_NS);
        // The bin after the span first (it may grow the series at the end), then its first
        // (which may grow it at the front, shifting indices: `after` is found again).
        if self.slot(last + 1).is_none() {
            return;
        }
        let Some(from) = self.slot(first) else {
            return;
        };
        // First use: all zero, aligned with the bins (from here on `slot` keeps it so).
        if self.background.len() < self.bins.len() {
            self.background.resize(self.bins.len(), 0.0);
        }
        let rate = bytes as f64 / (last + 1 - first) as f64;
        self.background[from] += rate;
        let after = (last + 1).checked_sub(self.first_bin).map(|i| i as usize);
        if let Some(b) = after.and_then(|i| self.background.get_mut(i)) {
            *b -= rate;
        }
    }

    /// Drop runs, signals and pauses that ended before the window.
    fn forget_before(&mut self, t: u64) {
        for &ix in self.flows.values() {
            let a = &mut self.activities[ix];
            while a.runs.front().is_some_and(|r| r.end < t) {
                a.runs.pop_front();
            }
            if a.runs.is_empty() && a.tail.is_some_and(|r| r.end < t) {
                a.tail = None;
            }
            while a.signals.front().is_some_and(|s| s.0 < t) {
                a.signals.pop_front();
            }
        }
        for &ix in self.flows.values() {
            let a = &mut self.activities[ix];
            if a.open.is_some_and(|o| o.end < t) {
                a.open = None;
            }
            a.unsent.retain(|(_, r)| r.end >= t);
            a.open_signals.retain(|s| s.0 >= t);
        }
        // A flow with nothing left in the window is forgotten (a kernel flow read within it is
        // kept: its last read is the base of the next one's unsent bytes).
        let Steps {
            flows,
            activities,
            free,
            ..
        } = self;
        flows.retain(|_, ix| {
            let a = &activities[*ix];
            let keep = !a.runs.is_empty()
                || a.tail.is_some()
                || !a.signals.is_empty()
                || a.open.is_some()
                || !a.unsent.is_empty()
                || a.unsent_read.is_some_and(|(_, last)| last >= t);
            if !keep {
                activities[*ix] = FlowActivity::default();
                free.push(*ix);
            }
            keep
        });
        while self.pauses.front().is_some_and(|p| p.0 < t) {
            self.pauses.pop_front();
        }
    }

    /// How far the series reaches (the bin after its last, runs still open included) and its
    /// length in bins: what the analysis cache compares (report.rs).
    pub fn extent(&self) -> (u64, usize) {
        let end = self.first_bin + self.bins.len() as u64;
        let open = self
            .flows
            .values()
            .flat_map(|&ix| self.activities[ix].read_runs())
            .map(|r| r.end / BIN_NS + 1)
            .max()
            .unwrap_or(0);
        (end.max(open), self.bins.len())
    }

    pub fn bins(&self) -> (u64, &VecDeque<u64>) {
        (self.first_bin, &self.bins)
    }

    /// The series to analyse: the bins, with the bytes of the runs read from the flow records
    /// (kernel path: finished but not yet sent, or still open) spread in. A copy only when
    /// there are such runs.
    pub fn series(&self) -> (u64, std::borrow::Cow<'_, VecDeque<u64>>) {
        let open: Vec<Run> = self
            .flows
            .values()
            .flat_map(|&ix| self.activities[ix].read_runs())
            .copied()
            .collect();
        if open.is_empty() && self.background.is_empty() {
            return (self.first_bin, std::borrow::Cow::Borrowed(&self.bins));
        }
        let mut copy = Steps {
            bins: self.bins.clone(),
            first_bin: self.first_bin,
            ..Steps::default()
        };
        let mut rate = 0.0;
        for (b, d) in copy.bins.iter_mut().zip(&self.background) {
            rate += d;
            *b += rate.max(0.0).round() as u64;
        }
        for r in open {
            spread_bytes(r.start, r.end, r.bytes, |bin, b| copy.add_bin(bin, b));
        }
        (copy.first_bin, std::borrow::Cow::Owned(copy.bins))
    }

    pub fn flows(&self) -> impl Iterator<Item = (&FlowKey, &FlowActivity)> {
        self.flows.iter().map(|(k, &ix)| (k, &self.activities[ix]))
    }

    pub fn pauses(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.pauses.iter()
    }
}

/// A run of the kernel's flow record.
fn run_of(r: &DataRun) -> Run {
    Run {
        start: r.start_ns,
        end: r.end_ns,
        bytes: r.bytes,
        ce: r.ce as u64,
        retransmits: r.retransmits as u64,
    }
}

/// The signal times of a signal run: its CNPs, then its NAKs, each spread over the run.
fn signal_times(start: u64, end: u64, cnp: u32, naks: u32) -> impl Iterator<Item = (u64, Signal)> {
    let cnps = spread_times(start, end, cnp).map(|t| (t, Signal::Cnp));
    let naks = spread_times(start, end, naks).map(|t| (t, Signal::Nak));
    let mut all: Vec<(u64, Signal)> = cnps.chain(naks).collect();
    all.sort_by_key(|s| s.0);
    all.into_iter()
}

/// The steps analysis: the series, and the last analysis of it.
#[derive(Default)]
pub struct StepsAnalysis {
    pub steps: Steps,
    feed: Feed,
    /// The last analysis and the series' extent it saw.
    last: Option<(u64, Option<StepsSnapshot>)>,
}

impl StepsAnalysis {
    pub fn fed(feed: Feed) -> StepsAnalysis {
        StepsAnalysis {
            feed,
            ..StepsAnalysis::default()
        }
    }

    /// The next section analyses the steps afresh instead of reusing the last analysis.
    pub fn forget(&mut self) {
        self.last = None;
    }
}

impl Analysis for StepsAnalysis {
    fn packet(
        &mut self,
        _: &EngineConfig,
        ts: u64,
        key: &FlowKey,
        flow: u32,
        pkt: &RocePacket,
        out: &Outcome,
    ) {
        if self.feed == Feed::Packets {
            self.steps.packet_of(ts, key, Some(flow), pkt, out);
        }
    }

    fn pause(&mut self, _: &EngineConfig, _: &PfcKey, ts: u64, quanta: u16, pause_ns: u64) {
        if quanta > 0 {
            self.steps.pause(ts, pause_ns);
        }
    }

    fn event(&mut self, ev: &Event, body: &EventBody, from_capture: bool) {
        // Fed packet by packet (exact bins), the runs the shared observation also emits are
        // not needed.
        if from_capture && self.feed == Feed::Packets {
            return;
        }
        let ts = ev.ts_ns;
        if let EventBody::SignalRun {
            duration_ns,
            cnp,
            naks,
        } = *body
        {
            self.steps
                .signal_run(&ev.flow, ts, ts.saturating_add(duration_ns), cnp, naks);
        }
    }

    fn data_runs(&mut self, flow: &FlowKey, first: u32, runs: &[DataRun], from_capture: bool) {
        // As for events.
        if from_capture && self.feed == Feed::Packets {
            return;
        }
        self.steps.data_runs(flow, first, runs);
    }

    /// The runs still open, and the bytes of runs too short to be batched.
    fn flow_read(&mut self, key: &FlowKey, stats: &FlowStats) {
        self.steps.flow_read(key, stats);
    }

    /// The runs finished but not yet sent.
    fn runs_read(&mut self, key: &FlowKey, batch: &RunBatch) {
        self.steps.runs_read(key, batch);
    }

    /// Names are part of the stragglers.
    fn renamed(&mut self, _: &Names) {
        self.last = None;
    }

    /// The steps of the window, analysed again only when the series has grown by a 64th of
    /// its length (at least a bin) since the last analysis: an analysis of the full 300 s
    /// window (an FFT of 2^20 points) takes over 100 ms, and a live report every second would
    /// repeat it for 1.6% more data; at most 4.7 s of the newest data wait for the next one.
    fn section(&mut self, view: &View<'_>, _now: u64, report: &mut Snapshot) {
        let (extent, len) = self.steps.extent();
        if let Some((at, result)) = &self.last
            && extent >= *at
            && extent - *at < (len as u64 / 64).max(1)
        {
            report.steps = result.clone();
            return;
        }
        let result = analyse(&self.steps, |k| {
            (
                view.names.name(k.ifindex),
                Direction::from_u8(k.direction).name(),
            )
        });
        self.last = Some((extent, result.clone()));
        report.steps = result;
    }
}

#[cfg(test)]
mod tests;
