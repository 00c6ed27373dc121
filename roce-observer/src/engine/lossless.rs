//! Is the lossless class configured right (docs/metrics.md, "Lossless class diagnosis"): per
//! observation point and priority, whether ECN marks come before PFC pauses in each congestion
//! episode (`pfc_before_ecn`), whether CE marks come at low load (`ecn_at_low_load`), and
//! whether points pause one priority in a closed loop while no data passes (`deadlock`).
//!
//! Fed packet by packet on the capture path (data, CE marks, CNPs) and with every PFC class
//! frame on both paths. State per (point, priority): the open congestion episode and exact
//! counts of the closed ones, the current load interval and counts of the marked ones, and the
//! point's current and last long pause span. Bounded by the number of points and priorities.
//! On the kernel path the programs keep the episodes, load intervals and counts with the same
//! definitions (roce-observer-common/src/lossless.rs): closed ones come as events
//! (`kernel_episode`, `kernel_load`), the open ones and the counts from the map
//! (`kernel_state`); pauses there only make spans.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use roce_observer_common::{
    Event, EventBody, FlowKey, FlowStats, PfcKey,
    account::{Outcome, RocePacket},
    flow::PCP_UNTAGGED,
    lossless::LosslessState,
    pfc::PRIORITY_LINK,
};

use super::{
    EngineConfig,
    analysis::{Analysis, View},
    pfc::EPISODE_QUIET_NS,
};
use crate::report::{
    AlertSnapshot, CycleMember, EpisodeFigures, LoadFigures, LosslessFinding, PfcOrigin, PfcRef,
    Snapshot,
};

/// Length of the load intervals the data rate of a point and priority is measured over (the
/// kernel programs' too).
pub use roce_observer_common::lossless::LOAD_INTERVAL_NS;

/// A marked interval below this fraction of the link is marked at low load.
pub const LOW_LOAD: f64 = 0.5;

/// Evidence a rule needs before it is judged: marked low-load intervals (`ecn_at_low_load`),
/// pause-first episodes (`pfc_before_ecn`). A few marks or pauses at the edge of a burst say
/// nothing about thresholds.
pub const MIN_EVIDENCE: u64 = 3;

/// Finding names (also `--fail-on` metrics and alert kinds).
pub const PFC_BEFORE_ECN: &str = "pfc_before_ecn";
pub const ECN_AT_LOW_LOAD: &str = "ecn_at_low_load";
pub const DEADLOCK: &str = "deadlock";

/// Observation point (interface index, or mirror point) and priority.
type PointKey = (u32, u8);

/// One congestion episode at a point and priority: CE marks, CNPs and XOFFs with no gap of
/// [`EPISODE_QUIET_NS`] between them (an XOFF counts until its pause ends).
#[derive(Clone, Copy, Debug)]
struct Episode {
    start: u64,
    /// The latest signal, or the end of the latest pause.
    last: u64,
    first_mark: Option<u64>,
    first_xoff: Option<u64>,
}

/// Exact counts of the closed episodes.
#[derive(Clone, Copy, Debug, Default)]
struct EpisodeCounts {
    episodes: u64,
    ecn_first: u64,
    pfc_first: u64,
    /// Episodes with XOFFs and no CE mark or CNP.
    pause_only: u64,
    /// Episodes with both, and the sum of their lead times (first XOFF - first mark).
    both: u64,
    lead_ns: i128,
    /// Time range of the pause-first episodes.
    pfc_first_range: Option<(u64, u64)>,
}

impl EpisodeCounts {
    fn add(&mut self, ep: &Episode) {
        self.episodes += 1;
        match (ep.first_mark, ep.first_xoff) {
            (Some(_), None) => self.ecn_first += 1,
            (None, Some(_)) => {
                self.pfc_first += 1;
                self.pause_only += 1;
            }
            (Some(m), Some(x)) => {
                self.both += 1;
                self.lead_ns += i128::from(x) - i128::from(m);
                if m <= x {
                    self.ecn_first += 1;
                } else {
                    self.pfc_first += 1;
                }
            }
            (None, None) => {}
        }
        let pfc_first = match (ep.first_mark, ep.first_xoff) {
            (None, Some(_)) => true,
            (Some(m), Some(x)) => x < m,
            _ => false,
        };
        if pfc_first {
            let (s, e) = self.pfc_first_range.unwrap_or((ep.start, ep.last));
            self.pfc_first_range = Some((s.min(ep.start), e.max(ep.last)));
        }
    }
}

/// The load interval being filled, and counts of the closed marked ones.
#[derive(Clone, Copy, Debug, Default)]
struct Load {
    /// Interval index (time / [`LOAD_INTERVAL_NS`]), bytes and CE marks in it.
    current: Option<(u64, u64, u64)>,
    marked: u64,
    low_marked: u64,
    low_ce: u64,
    /// Lowest utilisation of a marked interval.
    lowest: Option<f64>,
    /// Time range of the low-load marked intervals.
    low_range: Option<(u64, u64)>,
}

impl Load {
    fn close(&mut self, (idx, bytes, ce): (u64, u64, u64), link_gbps: f64) {
        if ce == 0 {
            return;
        }
        let util = utilisation(bytes, link_gbps);
        self.marked += 1;
        self.lowest = Some(self.lowest.map_or(util, |l| l.min(util)));
        if util < LOW_LOAD {
            self.low_marked += 1;
            self.low_ce += ce;
            let (s, e) = (idx * LOAD_INTERVAL_NS, (idx + 1) * LOAD_INTERVAL_NS);
            let (a, b) = self.low_range.unwrap_or((s, e));
            self.low_range = Some((a.min(s), b.max(e)));
        }
    }
}

/// Bytes in one load interval as a fraction of the link.
fn utilisation(bytes: u64, link_gbps: f64) -> f64 {
    (bytes * 8) as f64 / (LOAD_INTERVAL_NS as f64 * link_gbps.max(f64::MIN_POSITIVE))
}

/// A point's pause span: the union of its XOFF periods of one priority (any source), cut by
/// an XON; `data` counts the data packets of that priority seen in it, `data_last` the last.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u64,
    end: u64,
    data_last: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct Point {
    episode: Option<Episode>,
    counts: EpisodeCounts,
    ce: u64,
    cnp: u64,
    ect_data: u64,
    load: Load,
    span: Option<Span>,
    /// The last closed span longer than the storm window.
    long_span: Option<Span>,
    /// Kernel path: the start of the last closed episode and the index of the last closed
    /// marked interval taken from an event (a second event for the same one, from two CPUs
    /// closing it at once, is dropped; the map's open ones count only when newer).
    closed_episode: Option<u64>,
    closed_load: Option<u64>,
}

impl Point {
    /// A congestion signal (`xoff`: a pause until `until`; else a CE mark or CNP) at `t`.
    fn signal(&mut self, t: u64, xoff: bool, until: u64) {
        let ep = match self.episode.as_mut() {
            Some(ep) if t <= ep.last.saturating_add(EPISODE_QUIET_NS) => ep,
            _ => {
                if let Some(done) = self.episode.take() {
                    self.counts.add(&done);
                }
                self.episode.insert(Episode {
                    start: t,
                    last: t,
                    first_mark: None,
                    first_xoff: None,
                })
            }
        };
        ep.last = ep.last.max(until);
        let first = if xoff {
            &mut ep.first_xoff
        } else {
            &mut ep.first_mark
        };
        first.get_or_insert(t);
    }

    /// A data packet of the priority at `ts`: noted in the pause span that holds it (the
    /// current one, or the last long one when a kernel read comes after it closed).
    fn saw_data(&mut self, ts: u64) {
        for span in [self.span.as_mut(), self.long_span.as_mut()]
            .into_iter()
            .flatten()
        {
            if span.start <= ts && ts < span.end {
                span.data_last = Some(span.data_last.map_or(ts, |d| d.max(ts)));
            }
        }
    }

    /// The counts with the open episode closed at `now`: an episode still within its quiet
    /// period counts as it stands.
    fn counts(&self) -> EpisodeCounts {
        let mut c = self.counts;
        if let Some(ep) = &self.episode {
            c.add(ep);
        }
        c
    }

    /// The span with its data, as of `now`: the current one when longer than `window`, else
    /// the last long one.
    fn deadlock_span(&self, now: u64, window: u64) -> Option<Span> {
        let current = self.span.map(|s| Span {
            end: s.end.min(now.max(s.start)),
            ..s
        });
        current
            .filter(|s| s.end.saturating_sub(s.start) > window)
            .or(self.long_span)
    }
}

/// The lossless-class analysis state.
#[derive(Clone, Debug, Default)]
pub struct Lossless {
    points: BTreeMap<PointKey, Point>,
    /// Kernel path: the programs keep the episodes, loads and counts (`kernel_*`); a pause
    /// here only makes spans.
    kernel: bool,
    /// The lossless DSCP and PCP, from the first pause (which brings the configuration): the
    /// kernel path's data reads come without it, and before a pause there is no span to note
    /// data in.
    classes: Option<(u8, u8)>,
}

/// The priority data with `pcp` and `dscp` travels on: its PCP when tagged, else the lossless
/// priority for the lossless DSCP, else DSCP / 8 (the default DSCP-to-priority map).
fn priority_of(pcp: u8, dscp: u8, (lossless_dscp, lossless_pcp): (u8, u8)) -> u8 {
    if pcp != PCP_UNTAGGED {
        pcp
    } else if dscp == lossless_dscp {
        lossless_pcp
    } else {
        dscp >> 3
    }
}

fn priority(pkt: &RocePacket, cfg: &EngineConfig) -> u8 {
    priority_of(pkt.pcp, pkt.dscp, (cfg.lossless_dscp, cfg.lossless_pcp))
}

impl Lossless {
    /// Capture path: one RoCE packet at `point`. A CNP is a congestion signal on the lossless
    /// priority (the class whose data it slows down); data counts toward the load and, marked
    /// CE, is a congestion signal on its own priority.
    pub fn packet(&mut self, ts: u64, point: u32, pkt: &RocePacket, cnp: bool, cfg: &EngineConfig) {
        if cnp {
            let p = self.points.entry((point, cfg.lossless_pcp)).or_default();
            p.cnp += 1;
            p.signal(ts, false, ts);
            return;
        }
        if !pkt.carries_data() {
            return;
        }
        let p = self.points.entry((point, priority(pkt, cfg))).or_default();
        let ce = pkt.ecn == 3;
        if pkt.ecn != 0 {
            p.ect_data += 1;
        }
        if ce {
            p.ce += 1;
            p.signal(ts, false, ts);
        }
        // Loads are judged against a given link speed only (`low_load`): without one, nothing
        // to keep per packet.
        if cfg.link_known {
            let idx = ts / LOAD_INTERVAL_NS;
            let bytes = u64::from(pkt.frame_len);
            match p.load.current.as_mut() {
                Some(cur) if cur.0 == idx => {
                    cur.1 += bytes;
                    cur.2 += u64::from(ce);
                }
                _ => {
                    if let Some(done) = p.load.current.take() {
                        p.load.close(done, cfg.link_gbps);
                    }
                    p.load.current = Some((idx, bytes, u64::from(ce)));
                }
            }
        }
        p.saw_data(ts);
    }

    /// Kernel path: data of a flow with `pcp` and `dscp` passed `point` at `ts` (its latest
    /// data packet as a flow record read says).
    pub fn data_at(&mut self, ts: u64, point: u32, pcp: u8, dscp: u8) {
        let Some(classes) = self.classes else {
            return;
        };
        if let Some(p) = self
            .points
            .get_mut(&(point, priority_of(pcp, dscp, classes)))
        {
            p.saw_data(ts);
        }
    }

    /// Both paths: a PFC class frame for `priority` at `point`, pausing `pause_ns` (0: XON).
    /// Link-level PAUSE is not part of these rules (it is no priority's flow control).
    pub fn pause(&mut self, ts: u64, point: u32, priority: u8, pause_ns: u64, cfg: &EngineConfig) {
        if priority == PRIORITY_LINK {
            return;
        }
        self.classes = Some((cfg.lossless_dscp, cfg.lossless_pcp));
        let window = cfg.storm_window_ns;
        let p = self.points.entry((point, priority)).or_default();
        let until = ts.saturating_add(pause_ns);
        if pause_ns > 0 && !self.kernel {
            p.signal(ts, true, until);
        }
        match p.span.as_mut() {
            Some(s) if ts <= s.end => {
                s.end = if pause_ns == 0 { ts } else { s.end.max(until) };
            }
            _ => {
                if let Some(done) = p.span.take()
                    && done.end.saturating_sub(done.start) > window
                {
                    p.long_span = Some(done);
                }
                if pause_ns > 0 {
                    p.span = Some(Span {
                        start: ts,
                        end: until,
                        data_last: None,
                    });
                }
            }
        }
    }

    /// Kernel path: the programs keep the episodes, load intervals and counts from now on.
    pub fn from_kernel(&mut self) {
        self.kernel = true;
    }

    /// Kernel path: a closed congestion episode at `point` and `prio` (times since the epoch).
    pub fn kernel_episode(
        &mut self,
        (point, prio): PointKey,
        start: u64,
        last: u64,
        first_mark: Option<u64>,
        first_xoff: Option<u64>,
    ) {
        let p = self.points.entry((point, prio)).or_default();
        if p.closed_episode.is_some_and(|c| start <= c) {
            return;
        }
        p.counts.add(&Episode {
            start,
            last,
            first_mark,
            first_xoff,
        });
        p.closed_episode = Some(start);
        if p.episode.is_some_and(|e| e.start <= start) {
            p.episode = None;
        }
    }

    /// Kernel path: a closed load interval with CE marks at `point` and `prio`, from `start`
    /// (since the epoch).
    pub fn kernel_load(&mut self, key: PointKey, start: u64, bytes: u64, ce: u64, link_gbps: f64) {
        let p = self.points.entry(key).or_default();
        let idx = start / LOAD_INTERVAL_NS;
        if p.closed_load.is_some_and(|c| idx <= c) {
            return;
        }
        p.load.close((idx, bytes, ce), link_gbps);
        p.closed_load = Some(idx);
        if p.load.current.is_some_and(|c| c.0 <= idx) {
            p.load.current = None;
        }
    }

    /// Kernel path: a point's map entry as read (times since the epoch, `load_slot` the
    /// interval index since the epoch + 1): its counts, open episode and current interval.
    pub fn kernel_state(&mut self, key: PointKey, st: &LosslessState) {
        let p = self.points.entry(key).or_default();
        (p.ce, p.cnp, p.ect_data) = (st.ce, st.cnp, st.ect_data);
        let some = |t: u64| (t != 0).then_some(t);
        p.episode = some(st.ep_start)
            .filter(|&s| p.closed_episode.is_none_or(|c| s > c))
            .map(|start| Episode {
                start,
                last: st.ep_last,
                first_mark: some(st.ep_first_mark),
                first_xoff: some(st.ep_first_xoff),
            });
        p.load.current = st
            .load_slot
            .checked_sub(1)
            .filter(|&i| st.load_slot != 0 && p.closed_load.is_none_or(|c| i > c))
            .map(|i| (i, st.load_bytes, st.load_ce));
    }

    /// The findings as of `now`. `name` gives a point's name; `flows` gives, per flow (source
    /// IP, destination IP, QP), the points that saw it with the time each first did: it is
    /// called only when two points of a priority pause long enough to be in a deadlock (a pass
    /// over every flow on each report otherwise).
    pub fn findings(
        &self,
        now: u64,
        cfg: &EngineConfig,
        name: impl Fn(u32) -> String,
        flows: impl FnOnce() -> Vec<Vec<(u64, u32)>>,
    ) -> Vec<LosslessFinding> {
        let mut out = Vec::new();
        for (&(point, prio), p) in &self.points {
            if let Some(f) = ecn_order(p, prio, &name(point)) {
                out.push(f);
            }
            if let Some(f) = low_load(p, prio, &name(point), cfg) {
                out.push(f);
            }
        }
        out.extend(self.deadlocks(now, cfg.storm_window_ns, &name, flows));
        out.sort_by(|a, b| (a.start_ts, a.kind, &a.points).cmp(&(b.start_ts, b.kind, &b.points)));
        out
    }

    /// Closed loops of points pausing one priority (docs/metrics.md, "PFC deadlock").
    fn deadlocks(
        &self,
        now: u64,
        window: u64,
        name: &impl Fn(u32) -> String,
        flows: impl FnOnce() -> Vec<Vec<(u64, u32)>>,
    ) -> Vec<LosslessFinding> {
        let mut by_prio: BTreeMap<u8, BTreeMap<u32, Span>> = BTreeMap::new();
        for (&(point, prio), p) in &self.points {
            if let Some(s) = p.deadlock_span(now, window) {
                by_prio.entry(prio).or_default().insert(point, s);
            }
        }
        // A cycle has two members at least.
        by_prio.retain(|_, spans| spans.len() >= 2);
        if by_prio.is_empty() {
            return Vec::new();
        }
        // A -> B: a flow seen at A is next seen at B.
        let mut next: BTreeSet<(u32, u32)> = BTreeSet::new();
        for seen in flows() {
            let mut order = seen.clone();
            order.sort_unstable();
            for w in order.windows(2) {
                if w[0].1 != w[1].1 {
                    next.insert((w[0].1, w[1].1));
                }
            }
        }
        let mut out = Vec::new();
        for (prio, spans) in by_prio {
            let mut taken: BTreeSet<u32> = BTreeSet::new();
            // Members by their span start, so that a cycle is named from its first pauser.
            let mut starts: Vec<(u64, u32)> = spans.iter().map(|(&k, s)| (s.start, k)).collect();
            starts.sort_unstable();
            for (_, first) in starts {
                if taken.contains(&first) {
                    continue;
                }
                let Some(cycle) = shortest_cycle(first, &spans, &next, &taken) else {
                    continue;
                };
                let members: Vec<Span> = cycle.iter().map(|k| spans[k]).collect();
                let from = members.iter().map(|s| s.start).max().unwrap_or(0);
                let to = members.iter().map(|s| s.end).min().unwrap_or(0);
                let stopped = members.iter().all(|s| s.data_last.is_none_or(|d| d < from));
                if to <= from || to - from <= window || !stopped {
                    continue;
                }
                taken.extend(cycle.iter().copied());
                let names: Vec<String> = cycle.iter().map(|&k| name(k)).collect();
                out.push(LosslessFinding {
                    kind: DEADLOCK,
                    priority: prio,
                    start_ts: from,
                    end_ts: to,
                    reason: format!(
                        "{} pause priority {prio} in a closed loop ({} -> {}) for {:.0} ms while no data of it passes any of them: a PFC deadlock (cyclic buffer dependency); it has no root, break the loop (routing, or a lossy priority on one hop)",
                        names.join(", "),
                        names.join(" -> "),
                        names[0],
                        (to - from) as f64 / 1e6
                    ),
                    points: names,
                    episodes: None,
                    load: None,
                    cycle: Some(
                        cycle
                            .iter()
                            .zip(&members)
                            .map(|(&k, s)| CycleMember {
                                point: name(k),
                                pause_start_ts: s.start,
                                paused_ms: s.end.saturating_sub(s.start) as f64 / 1e6,
                                last_data_ts: s.data_last,
                            })
                            .collect(),
                    ),
                });
            }
        }
        out
    }
}

/// The shortest cycle through `first` over the `next` edges among the points of `spans` not
/// `taken`, in order from `first`.
fn shortest_cycle(
    first: u32,
    spans: &BTreeMap<u32, Span>,
    next: &BTreeSet<(u32, u32)>,
    taken: &BTreeSet<u32>,
) -> Option<Vec<u32>> {
    let ok = |k: u32| spans.contains_key(&k) && !taken.contains(&k);
    let mut came_from: HashMap<u32, u32> = HashMap::new();
    let mut queue = VecDeque::from([first]);
    while let Some(at) = queue.pop_front() {
        for &(_, to) in next.range((at, 0)..=(at, u32::MAX)) {
            if to == first {
                let mut cycle = vec![at];
                while let Some(&prev) = came_from.get(cycle.last()?) {
                    cycle.push(prev);
                }
                cycle.reverse();
                return (cycle.len() >= 2).then_some(cycle);
            }
            if ok(to) && !came_from.contains_key(&to) {
                came_from.insert(to, at);
                queue.push_back(to);
            }
        }
    }
    None
}

/// `pfc_before_ecn` at one point and priority.
fn ecn_order(p: &Point, prio: u8, name: &str) -> Option<LosslessFinding> {
    let c = p.counts();
    let most = c.pfc_first * 2 > c.episodes && c.pfc_first >= MIN_EVIDENCE;
    let no_marks = c.pause_only >= MIN_EVIDENCE && p.ce + p.cnp == 0;
    if p.ect_data == 0 || !(most || no_marks) {
        return None;
    }
    let (start_ts, end_ts) = c.pfc_first_range?;
    let share = c.pfc_first as f64 / c.episodes.max(1) as f64;
    let mean_lead_ms = (c.both > 0).then(|| c.lead_ns as f64 / c.both as f64 / 1e6);
    let reason = if no_marks {
        format!(
            "{name} priority {prio}: PFC pauses in {} episodes and not one CE mark or CNP on ECT traffic: ECN marking is off (or its threshold is above PFC XOFF), so PFC does the congestion control",
            c.pause_only
        )
    } else {
        format!(
            "{name} priority {prio}: PFC pauses before the first ECN mark in {} of {} congestion episodes ({:.0}%): the ECN threshold is above PFC XOFF, so PFC does the congestion control",
            c.pfc_first,
            c.episodes,
            share * 100.0
        )
    };
    Some(LosslessFinding {
        kind: PFC_BEFORE_ECN,
        priority: prio,
        points: vec![name.to_string()],
        start_ts,
        end_ts,
        reason,
        episodes: Some(EpisodeFigures {
            episodes: c.episodes,
            ecn_first: c.ecn_first,
            pfc_first: c.pfc_first,
            pfc_first_share: share,
            pause_without_marks: c.pause_only,
            with_both: c.both,
            mean_lead_ms,
            ce: p.ce,
            cnp: p.cnp,
            ect_data: p.ect_data,
        }),
        load: None,
        cycle: None,
    })
}

/// `ecn_at_low_load` at one point and priority.
fn low_load(p: &Point, prio: u8, name: &str, cfg: &EngineConfig) -> Option<LosslessFinding> {
    // A load is a share of the link: against an assumed speed (or a slow replay of a fast
    // link) it would call every marking "low load".
    if !cfg.link_known {
        return None;
    }
    let mut load = p.load;
    if let Some(cur) = load.current.take() {
        load.close(cur, cfg.link_gbps);
    }
    if load.low_marked * 2 <= load.marked || load.low_marked < MIN_EVIDENCE {
        return None;
    }
    let (start_ts, end_ts) = load.low_range?;
    let lowest = load.lowest?;
    Some(LosslessFinding {
        kind: ECN_AT_LOW_LOAD,
        priority: prio,
        points: vec![name.to_string()],
        start_ts,
        end_ts,
        reason: format!(
            "{name} priority {prio}: CE marks in {} of {} marked {} ms intervals below {:.0}% of the {} Gb/s link; marking starts at {:.0}% load: the ECN threshold is set too low and throttles traffic long before the link is full",
            load.low_marked,
            load.marked,
            LOAD_INTERVAL_NS / 1_000_000,
            LOW_LOAD * 100.0,
            cfg.link_gbps,
            lowest * 100.0
        ),
        episodes: None,
        load: Some(LoadFigures {
            marking_starts_at: lowest,
            marked_intervals: load.marked,
            low_load_intervals: load.low_marked,
            low_load_ce: load.low_ce,
            interval_ms: LOAD_INTERVAL_NS as f64 / 1e6,
            link_gbps: cfg.link_gbps,
        }),
        cycle: None,
    })
}

/// A deadlock has no root: the storm origin names none when its sources include a member of
/// a deadlock cycle on the same priority.
pub fn unroot(origin: &mut PfcOrigin, findings: &[LosslessFinding]) {
    let in_cycle = |iface: &str, prio: Option<u8>| {
        findings.iter().any(|f| {
            f.kind == DEADLOCK && Some(f.priority) == prio && f.points.iter().any(|p| p == iface)
        })
    };
    if origin
        .sources
        .iter()
        .any(|s| in_cycle(&s.source.iface, s.source.priority))
    {
        origin.deadlock = true;
        origin.origin = None;
        origin.origin_index = None;
        origin.reached = 0;
        origin.hops = 0;
    }
}

/// A finding as an alert row (the alerts view, the log's alert lines, `roce_alerts`): its
/// subject is the point and priority (a deadlock: its cycle).
pub fn lossless_alert(f: &LosslessFinding) -> AlertSnapshot {
    AlertSnapshot {
        kind: f.kind,
        reason: f.reason.clone(),
        flow: None,
        pfc: Some(PfcRef {
            iface: f.points.join(" -> "),
            direction: "any",
            src_mac: String::new(),
            priority: Some(f.priority),
        }),
        first_ts: f.start_ts,
        last_ts: f.end_ts,
        count: f.episodes.as_ref().map_or(1, |e| e.pfc_first.max(1)),
    }
}

/// A flow across observation points: source IP, destination IP, destination QP.
type FlowId = ([u8; 16], [u8; 16], u32);

/// The lossless-class diagnosis as an analysis.
#[derive(Default)]
pub struct LosslessAnalysis {
    state: Lossless,
    /// Kernel path: the link speed the marked intervals' loads are taken against.
    link_gbps: f64,
}

impl LosslessAnalysis {
    /// Kernel path: the programs keep episodes, loads and counts (`cfg`: the engine's).
    pub fn from_kernel(&mut self, cfg: &EngineConfig) {
        self.state.from_kernel();
        self.link_gbps = cfg.link_gbps;
    }

    /// Kernel path: one map entry as read.
    pub fn kernel_state(&mut self, ifindex: u32, priority: u8, st: &LosslessState) {
        self.state.kernel_state((ifindex, priority), st);
    }
}

impl Analysis for LosslessAnalysis {
    fn packet(
        &mut self,
        cfg: &EngineConfig,
        ts: u64,
        key: &FlowKey,
        _: u32,
        pkt: &RocePacket,
        out: &Outcome,
    ) {
        self.state.packet(ts, key.ifindex, pkt, out.cnp, cfg);
    }

    fn pause(&mut self, cfg: &EngineConfig, key: &PfcKey, ts: u64, _quanta: u16, pause_ns: u64) {
        self.state
            .pause(ts, key.ifindex, key.priority, pause_ns, cfg);
    }

    /// Kernel path: closed episodes and marked load intervals.
    fn event(&mut self, ev: &Event, body: &EventBody, _from_capture: bool) {
        match *body {
            EventBody::LosslessEpisode {
                ifindex,
                priority,
                last,
                first_mark,
                first_xoff,
            } => self.state.kernel_episode(
                (ifindex, priority),
                ev.ts_ns,
                last,
                first_mark,
                first_xoff,
            ),
            EventBody::LosslessLoad {
                ifindex,
                priority,
                bytes,
                ce,
            } => self
                .state
                .kernel_load((ifindex, priority), ev.ts_ns, bytes, ce, self.link_gbps),
            _ => {}
        }
    }

    /// Kernel path: a changed flow record's open data run ends at its latest data packet,
    /// data passing its point (a deadlock needs none). The capture path notes every data
    /// packet itself.
    fn flow_read(&mut self, key: &FlowKey, stats: &FlowStats) {
        if stats.run.packets > 0 {
            self.state
                .data_at(stats.run.end_ns, key.ifindex, stats.pcp, stats.dscp);
        }
    }

    /// The findings as of `now`, and an alert for each (after the engine's, which are sorted).
    fn section(&mut self, view: &View<'_>, now: u64, report: &mut Snapshot) {
        let chains = || {
            let mut seen: HashMap<FlowId, Vec<(u64, u32)>> = HashMap::new();
            for (k, e) in view.flows.iter() {
                let st = e.stats();
                if st.packets() > 0 {
                    let at = seen.entry((k.src_ip, k.dst_ip, k.dst_qp)).or_default();
                    match at.iter_mut().find(|(_, i)| *i == k.ifindex) {
                        Some(p) => p.0 = p.0.min(st.first_ns),
                        None => at.push((st.first_ns, k.ifindex)),
                    }
                }
            }
            seen.into_values().filter(|v| v.len() >= 2).collect()
        };
        let findings = self
            .state
            .findings(now, view.cfg, |i| view.names.name(i), chains);
        report.alerts.extend(findings.iter().map(lossless_alert));
        report.lossless = findings;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Three points 1 -> 2 -> 3 -> 1 (a flow seen at each, then at the next), each pausing
    /// priority 3 from 30 + p ms: an XOFF of 102.4 ms every 50 ms, twelve of them; `data`
    /// notes kernel-path data reads. The deadlocks found at 700 ms.
    fn ring(data: impl FnOnce(&mut Lossless)) -> Vec<LosslessFinding> {
        let cfg = EngineConfig {
            storm_window_ns: 100 * MS,
            ..EngineConfig::default()
        };
        let mut l = Lossless::default();
        for k in 0..12 {
            for p in 1..=3u32 {
                let ts = (30 + u64::from(p) + 50 * k) * MS;
                l.pause(ts, p, 3, 102_400_000, &cfg);
            }
        }
        data(&mut l);
        let flows = vec![
            vec![(0, 1), (1, 2)],
            vec![(2, 2), (3, 3)],
            vec![(4, 3), (5, 1)],
        ];
        l.findings(700 * MS, &cfg, |p| format!("p{p}"), || flows)
            .into_iter()
            .filter(|f| f.kind == DEADLOCK)
            .collect()
    }

    #[test]
    fn flow_chains_are_asked_for_only_when_two_points_pause_one_priority() {
        let cfg = EngineConfig {
            storm_window_ns: 100 * MS,
            ..EngineConfig::default()
        };
        let asked = |l: &Lossless| {
            let mut asked = false;
            l.findings(
                700 * MS,
                &cfg,
                |p| format!("p{p}"),
                || {
                    asked = true;
                    Vec::new()
                },
            );
            asked
        };
        let mut l = Lossless::default();
        for k in 0..12 {
            l.pause((30 + 50 * k) * MS, 1, 3, 102_400_000, &cfg);
        }
        assert!(!asked(&l));
        for k in 0..12 {
            l.pause((31 + 50 * k) * MS, 2, 3, 102_400_000, &cfg);
        }
        assert!(asked(&l));
        // Another priority's pauser does not pair with these.
        let mut other = Lossless::default();
        for k in 0..12 {
            other.pause((30 + 50 * k) * MS, 1, 3, 102_400_000, &cfg);
            other.pause((31 + 50 * k) * MS, 2, 4, 102_400_000, &cfg);
        }
        assert!(!asked(&other));
    }

    #[test]
    fn kernel_reads_of_data_inside_a_span_rule_out_a_deadlock() {
        let none = ring(|_| {});
        assert_eq!(none.len(), 1);
        assert_eq!(none[0].points, ["p1", "p2", "p3"]);
        // A flow record read says DSCP 26 data (the lossless priority, 3) passed p2 mid-span.
        let flowing = ring(|l| l.data_at(300 * MS, 2, PCP_UNTAGGED, 26));
        assert!(flowing.is_empty(), "{flowing:?}");
        // Data of another priority, or data before the spans, is no evidence.
        assert_eq!(ring(|l| l.data_at(300 * MS, 2, PCP_UNTAGGED, 40)).len(), 1);
        assert_eq!(ring(|l| l.data_at(10 * MS, 2, PCP_UNTAGGED, 26)).len(), 1);
        // Tagged data travels on its PCP.
        assert!(ring(|l| l.data_at(300 * MS, 3, 3, 0)).is_empty());
    }

    /// One point's traffic, as the capture path sees it (`packet`, `pause`) and as the kernel
    /// programs keep it (the shared `LosslessState` steps, their events and the map read at
    /// the end): the findings must be the same. Per 50 ms for 12 rounds: ECT data of priority
    /// 3 every 1 ms (1,000 B: under 1% of the 1 Gb/s link), an XOFF at +1 ms (pausing 0.512
    /// ms), CE marks at +2..+2.4 ms; ECT data of priority 5 (DSCP 40) at +35 ms; in every third
    /// round a CNP at +30 ms and an XOFF of priority 5 at +31 ms.
    fn both_paths(link_known: bool) -> (Vec<LosslessFinding>, Vec<LosslessFinding>) {
        let cfg = EngineConfig {
            link_gbps: 0.001 * 1000.0,
            link_known,
            ..EngineConfig::default()
        };
        let link_kbps = (cfg.link_gbps * 1e6) as u64;
        let mut capture = Lossless::default();
        let mut kernel = Lossless::default();
        kernel.from_kernel();
        let mut states: BTreeMap<PointKey, LosslessState> = BTreeMap::new();
        let mut events: Vec<(PointKey, bool, LosslessState)> = Vec::new();
        let data = |ce: bool, dscp: u8| RocePacket {
            opcode: 0x04,
            ecn: if ce { 3 } else { 2 },
            dscp,
            pcp: PCP_UNTAGGED,
            frame_len: 1000,
            ..RocePacket::zeroed()
        };
        let cnp = RocePacket {
            opcode: 0x81,
            ..RocePacket::zeroed()
        };
        // (time, what): 0 data, 1 CE data, 2 CNP, 3 XOFF priority 3, 4 XOFF priority 5, 5
        // data of priority 5.
        let mut plan: Vec<(u64, u8)> = Vec::new();
        for r in 0..12u64 {
            let base = 1_000 * MS + r * 50 * MS;
            plan.extend((0..50).map(|i| (base + i * MS + 500, 0)));
            plan.push((base + MS, 3));
            plan.extend((0..5).map(|j| (base + 2 * MS + j * 100_000, 1)));
            plan.push((base + 35 * MS, 5));
            if r % 3 == 0 {
                plan.push((base + 30 * MS, 2));
                plan.push((base + 31 * MS, 4));
            }
        }
        plan.sort_unstable();
        let quanta = 1u16; // 512 us at 1 Gb/s
        for &(t, what) in &plan {
            let (key, xoff) = match what {
                0 | 1 => ((7, 3), false),
                2 => ((7, 3), false),
                3 => ((7, 3), true),
                4 => ((7, 5), true),
                _ => ((7, 5), false),
            };
            let st = states.entry(key).or_default();
            let mut closed = |ev: bool, st: &LosslessState| {
                events.push((key, ev, *st));
                true
            };
            if xoff {
                let ns = roce_observer_common::lossless::pause_ns(quanta, link_kbps);
                capture.pause(t, 7, key.1, ns, &cfg);
                kernel.pause(t, 7, key.1, ns, &cfg);
                st.signal(t, true, t + ns, |s| closed(true, s));
                continue;
            }
            let pkt = match what {
                2 => cnp,
                5 => data(false, 40),
                _ => data(what == 1, 26),
            };
            capture.packet(t, 7, &pkt, what == 2, &cfg);
            if what == 2 {
                st.cnp += 1;
                st.signal(t, false, t, |s| closed(true, s));
                continue;
            }
            st.ect_data += 1;
            if what == 1 {
                st.ce += 1;
                st.signal(t, false, t, |s| closed(true, s));
            }
            if link_known {
                st.load(t, 0, 1000, what == 1, |s| closed(false, s));
            }
        }
        for (key, episode, st) in events {
            if episode {
                // Sent twice, as two CPUs closing it at once would: counted once.
                for _ in 0..2 {
                    kernel.kernel_episode(
                        key,
                        st.ep_start,
                        st.ep_last,
                        (st.ep_first_mark != 0).then_some(st.ep_first_mark),
                        (st.ep_first_xoff != 0).then_some(st.ep_first_xoff),
                    );
                }
            } else {
                let start = (st.load_slot - 1) * LOAD_INTERVAL_NS;
                kernel.kernel_load(key, start, st.load_bytes, st.load_ce, cfg.link_gbps);
            }
        }
        for (key, st) in &states {
            kernel.kernel_state(*key, st);
        }
        let now = 2_000 * MS;
        let name = |p: u32| format!("p{p}");
        (
            capture.findings(now, &cfg, name, Vec::new),
            kernel.findings(now, &cfg, name, Vec::new),
        )
    }

    #[test]
    fn the_kernel_paths_episodes_and_loads_give_the_capture_paths_findings() {
        for link_known in [false, true] {
            let (capture, kernel) = both_paths(link_known);
            // Priority 3: the XOFF first in all 12 rounds (4 of them with a CNP episode
            // besides); priority 5: 4 pause-only episodes and not one mark; with a known link,
            // every marked interval of priority 3 at under 1% load.
            let kinds: Vec<_> = capture.iter().map(|f| (f.kind, f.priority)).collect();
            let want = if link_known {
                vec![
                    (PFC_BEFORE_ECN, 3),
                    (PFC_BEFORE_ECN, 5),
                    (ECN_AT_LOW_LOAD, 3),
                ]
            } else {
                vec![(PFC_BEFORE_ECN, 3), (PFC_BEFORE_ECN, 5)]
            };
            let mut sorted = kinds.clone();
            sorted.sort_unstable();
            let mut want_sorted = want.clone();
            want_sorted.sort_unstable();
            assert_eq!(sorted, want_sorted, "{capture:#?}");
            assert_eq!(kernel, capture);
        }
    }
}
