//! Where was it lost: a flow (source IP, destination IP, destination QP) seen at two or more
//! observation points (interface + direction: TC egress and XDP ingress of one host, the
//! interfaces of a pcapng capture, mirror sessions) gets a path view per ordered pair of points:
//! the request PSNs the first point saw sent for the first time and the second never did
//! (docs/metrics.md, "Where was it lost").
//!
//! Fed per accounted request packet (the capture path). Bounded: a flow gets a PSN ring
//! ([`RING`] PSNs, one bit per point) once a second point sees it (or at its first packet when
//! the capture declares several interfaces), for at most [`MAX_FLOWS`] flows; a PSN is judged
//! when it leaves the ring (or, for the ones still in it, at the snapshot), so points may see a
//! PSN up to [`RING`] PSNs apart.
//!
//! The kernel path (`run -i`) sends no PSN per packet: its view is built from path events and
//! flow records in [`ranges`], with the same definitions, and listed the same way.

use std::collections::{BTreeMap, HashMap};

use roce_observer_common::{
    Direction, Event, EventBody, FlowKey, FlowStats,
    account::{Outcome, RocePacket},
    opcode::{self, PsnSpace},
    psn::{PSN_MASK, PsnVerdict, psn_add, psn_diff, psn_newer},
};

use super::{
    EngineConfig,
    analysis::{Analysis, Feed, Names, View},
    flows::FastHash,
};
use crate::report::{MirrorSource, PathPair, PointRef, Snapshot, show_ip};

/// PSNs held per flow.
pub const RING: u32 = 4096;
/// Points per flow (one bit each).
pub const MAX_POINTS: usize = 8;
/// Flows with a ring.
pub const MAX_FLOWS: usize = 4096;
/// Missing PSNs listed per pair.
pub const EXAMPLES: usize = 16;

pub mod ranges;

/// (source IP, destination IP, destination QP).
type Path = ([u8; 16], [u8; 16], u32);
/// (ifindex, direction).
/// Interface, direction and mirror source (encapsulation, outer source, ID; zero when not
/// mirrored): two switches mirroring one flow are two points.
pub type Point = (u32, u8, u8, [u8; 16], u32);

/// What one point saw of a flow.
#[derive(Clone, Debug)]
pub struct PointState {
    pub point: Point,
    /// First and highest request PSN it saw since the ring exists.
    first: Option<u32>,
    highest: u32,
}

impl PointState {
    /// The first request PSN it saw since the ring exists.
    pub fn first_psn(&self) -> Option<u32> {
        self.first
    }

    /// It saw PSNs on both sides of `psn`: a PSN it lacks there was lost before it.
    fn covers(&self, psn: u32) -> bool {
        self.first
            .is_some_and(|f| !psn_newer(f, psn) && psn_newer(self.highest, psn))
    }
}

/// Per ordered pair of point indices: PSNs seen at both, and seen at the first only; the
/// second point's retransmissions of PSNs the first saw sent the first time and it did not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PairCount {
    pub both: u64,
    pub missing: u64,
    pub examples: Vec<u32>,
    pub retransmits_unseen: u64,
}

/// Retransmissions waiting for their PSN to be judged, per flow: past this they are judged
/// when seen (then a first copy later in the input is not taken into account).
pub const MAX_PENDING_RESENDS: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct PathFlow {
    pub points: Vec<PointState>,
    /// Bit `i`: point `i` saw the PSN sent the first time; PSN `base` is at `ring[head]`.
    ring: Vec<u8>,
    base: u32,
    /// `base` unwrapped (PSNs judged since the ring started, plus the first PSN).
    base_seq: u64,
    head: usize,
    started: bool,
    /// Retransmissions seen at a point that had not seen the PSN sent the first time:
    /// (unwrapped PSN, point) -> how many. Judged with the PSN (when it leaves the ring, or at
    /// the snapshot), not when seen: in a capture of several interfaces the packets are not in
    /// time order across interfaces (dumpcap writes each interface's packets in batches), so
    /// upstream's first copy may come later in the file than downstream's resend.
    pending: BTreeMap<(u64, u8), u64>,
    pub pairs: HashMap<(u8, u8), PairCount>,
}

impl PathFlow {
    fn point_index(&mut self, p: Point) -> Option<usize> {
        if let Some(i) = self.points.iter().position(|s| s.point == p) {
            return Some(i);
        }
        if self.points.len() >= MAX_POINTS {
            return None;
        }
        self.points.push(PointState {
            point: p,
            first: None,
            highest: 0,
        });
        Some(self.points.len() - 1)
    }

    fn see(&mut self, i: usize, psn: u32, retransmit: bool) {
        let psn = psn & PSN_MASK;
        if !self.started {
            self.started = true;
            self.base = psn;
            self.base_seq = u64::from(psn);
            self.ring = vec![0; RING as usize];
        }
        let d = psn_diff(psn, self.base);
        if d >= 1 << 23 {
            // Older than the ring: already judged.
            return;
        }
        if d >= RING {
            self.advance(psn_add(psn, 1).wrapping_sub(RING) & PSN_MASK);
        }
        let slot = self.slot(psn);
        let bit = 1u8 << i;
        let mask = self.ring[slot];
        if retransmit {
            // A resend of a PSN this point never saw sent the first time: for each point that
            // did, the original was lost between them (judged with the PSN, `judge`).
            if mask & bit == 0 {
                let seq = self.base_seq + u64::from(psn_diff(psn, self.base));
                if self.pending.len() < MAX_PENDING_RESENDS
                    || self.pending.contains_key(&(seq, i as u8))
                {
                    *self.pending.entry((seq, i as u8)).or_default() += 1;
                } else {
                    unseen(mask, i, 1, &mut self.pairs);
                }
            }
        } else {
            self.ring[slot] |= bit;
        }
        let p = &mut self.points[i];
        match p.first {
            None => {
                p.first = Some(psn);
                p.highest = psn;
            }
            Some(_) if psn_newer(psn, p.highest) => p.highest = psn,
            Some(_) => {}
        }
    }

    /// PSNs declared lost at point `i` after it saw them arrive: copies that closed holes and
    /// turned out to start a go-back-N resend run. Not sent the first time there after all:
    /// each is one of its retransmissions.
    fn declared_lost(&mut self, i: usize, first: u32, count: u32) {
        let bit = 1u8 << i;
        for k in 0..count.min(RING) {
            let psn = psn_add(first, k);
            let d = psn_diff(psn, self.base);
            if !self.started || d >= RING {
                continue;
            }
            let slot = self.slot(psn);
            if self.ring[slot] & bit == 0 {
                continue;
            }
            self.ring[slot] &= !bit;
            let seq = self.base_seq + u64::from(d);
            if self.pending.len() < MAX_PENDING_RESENDS
                || self.pending.contains_key(&(seq, i as u8))
            {
                *self.pending.entry((seq, i as u8)).or_default() += 1;
            }
        }
    }

    fn slot(&self, psn: u32) -> usize {
        (self.head + psn_diff(psn, self.base) as usize) % RING as usize
    }

    /// Judge and drop every PSN before `new_base` (a jump of more than the ring judges the
    /// whole ring once).
    fn advance(&mut self, new_base: u32) {
        let n = psn_diff(new_base, self.base).min(RING);
        let jump = psn_diff(new_base, self.base);
        let kept = self.pending.split_off(&(self.base_seq + u64::from(n), 0));
        let leaving = std::mem::replace(&mut self.pending, kept);
        let mut leaving = leaving.into_iter().peekable();
        for k in 0..n {
            let psn = psn_add(self.base, k);
            let slot = self.slot(psn);
            let mask = self.ring[slot];
            self.ring[slot] = 0;
            judge(&self.points, psn, mask, &mut self.pairs);
            let seq = self.base_seq + u64::from(k);
            while let Some(((_, point), count)) = leaving.next_if(|((s, _), _)| *s == seq) {
                unseen(mask, point as usize, count, &mut self.pairs);
            }
        }
        self.head = (self.head + n as usize) % RING as usize;
        self.base = new_base;
        self.base_seq += u64::from(jump);
    }

    /// The pair counts including the PSNs still in the ring.
    pub fn counts(&self) -> HashMap<(u8, u8), PairCount> {
        let mut pairs = self.pairs.clone();
        if self.started {
            for k in 0..RING {
                let psn = psn_add(self.base, k);
                judge(&self.points, psn, self.ring[self.slot(psn)], &mut pairs);
            }
            for (&(seq, point), &count) in &self.pending {
                let psn = psn_add(self.base, (seq - self.base_seq) as u32);
                unseen(self.ring[self.slot(psn)], point as usize, count, &mut pairs);
            }
        }
        pairs
    }
}

/// `count` retransmissions at point `b` of a PSN that the points of `mask` saw sent the first
/// time: unless `b` is one of them, the original was lost between each of them and `b`. (A
/// PSN no point saw first was lost before all of them: no pair is blamed.)
fn unseen(mask: u8, b: usize, count: u64, pairs: &mut HashMap<(u8, u8), PairCount>) {
    if mask & (1 << b) != 0 {
        return;
    }
    for a in (0..MAX_POINTS).filter(|&a| mask & (1 << a) != 0) {
        pairs
            .entry((a as u8, b as u8))
            .or_default()
            .retransmits_unseen += count;
    }
}

/// One PSN: for every point that saw it and every other point that covers it.
fn judge(points: &[PointState], psn: u32, mask: u8, pairs: &mut HashMap<(u8, u8), PairCount>) {
    if mask == 0 {
        return;
    }
    for (a, _) in points
        .iter()
        .enumerate()
        .filter(|(a, _)| mask & (1 << a) != 0)
    {
        for (b, pb) in points.iter().enumerate() {
            if a == b {
                continue;
            }
            let c = pairs.entry((a as u8, b as u8)).or_default();
            if mask & (1 << b) != 0 {
                c.both += 1;
            } else if pb.covers(psn) {
                c.missing += 1;
                if c.examples.len() < EXAMPLES {
                    c.examples.push(psn);
                }
            }
        }
    }
}

/// The one point a flow was seen at before it got a ring, and the request PSNs it saw there in
/// order (each the one after the last, none a retransmission) up to the latest: when a second
/// point sees the flow, the ring starts with those, so a single-interface input (two switch
/// mirrors on one monitor port) compares the first point's PSNs from before the second
/// appeared, as the kernel path does (ranges.rs).
#[derive(Clone, Copy, Debug)]
struct Before {
    point: Point,
    run_start: u32,
    last: u32,
}

impl Before {
    fn new(point: Point, psn: u32, retransmit: bool) -> Before {
        let mut b = Before {
            point,
            run_start: psn,
            last: psn,
        };
        if retransmit {
            // Not sent the first time: the in-order run starts after it.
            b.run_start = psn_add(psn, 1);
        }
        b
    }

    fn see(&mut self, psn: u32, retransmit: bool) {
        if retransmit {
            // A PSN of the run resent, or one before it: the run is no longer known to be
            // every PSN seen first.
            self.run_start = psn_add(self.last, 1);
            return;
        }
        if psn != psn_add(self.last, 1) {
            self.run_start = psn;
        }
        self.last = psn;
    }

    /// The PSNs of the in-order run (at most a ring's worth, the latest).
    fn run(&self) -> impl Iterator<Item = u32> + use<> {
        let n = psn_add(psn_diff(self.last, self.run_start), 1);
        let n = if n > RING || psn_newer(self.run_start, self.last) {
            0
        } else {
            n
        };
        let start = psn_add(self.last, 1).wrapping_sub(n) & PSN_MASK;
        (0..n).map(move |k| psn_add(start, k))
    }
}

/// Flows by path, and where each was seen.
#[derive(Clone, Debug, Default)]
pub struct PathLoss {
    /// The point each path was seen at before it got a ring.
    seen_at: HashMap<Path, Before, FastHash>,
    flows: HashMap<Path, PathFlow, FastHash>,
    /// Paths seen at a second point after [`MAX_FLOWS`] had rings.
    pub untracked_flows: u64,
    /// The input declared several observation points (pcapng interfaces, or the kernel's
    /// interfaces): a flow gets its ring at its first packet, so that a point whose packets
    /// come later in the file (a batch of another interface) is compared with everything the
    /// first point saw. Otherwise a ring starts at the second point, as memory is kept for
    /// flows seen at several points only.
    pub several_points: bool,
    /// The first point any packet was seen at, until a packet comes from another (then
    /// `None` with `seen_two` set): an input with one point (a pcap, a pcapng with one
    /// interface) costs one comparison per packet here, and one more for the input's first
    /// flow, whose in-order run is followed meanwhile (its packets at the first point come
    /// before any second point could appear).
    only_point: Option<Point>,
    first_flow: Option<(Path, Before)>,
    seen_two: bool,
    /// The kernel path's view, from path events and flow records.
    pub from_events: ranges::RangePaths,
}

impl PathLoss {
    /// One accounted packet seen at `key`'s point.
    pub fn packet(&mut self, key: &FlowKey, pkt: &RocePacket, out: &Outcome) {
        if opcode::psn_space(pkt.opcode) != PsnSpace::Request {
            return;
        }
        let point = (
            key.ifindex,
            key.direction,
            key.encap,
            key.outer_src,
            key.mirror_id,
        );
        let path = (key.src_ip, key.dst_ip, key.dst_qp);
        let retransmit = matches!(out.psn, PsnVerdict::Retransmit { .. });
        // For a one-point run: PSNs declared lost by this packet (copies already seen that
        // started a resend run) end the run of PSNs known to be seen first, as a resend does.
        let breaks_run = retransmit || out.gap_missing != 0;
        let psn = pkt.psn & PSN_MASK;
        // Points announced once packets flowed (an SLL2 capture's interfaces appear with their
        // first packet): the one-point run followed so far is kept as any other first point's.
        if self.several_points
            && let Some((first_path, before)) = self.first_flow.take()
        {
            self.only_point = None;
            self.seen_two = true;
            self.seen_at.insert(first_path, before);
        }
        if !self.several_points && !self.seen_two {
            match self.only_point {
                Some(p) if p != point => {
                    self.seen_two = true;
                    self.only_point = None;
                    if let Some((first_path, before)) = self.first_flow.take() {
                        self.seen_at.insert(first_path, before);
                    }
                }
                Some(_) => {
                    if let Some((first_path, before)) = &mut self.first_flow
                        && *first_path == path
                    {
                        before.see(psn, breaks_run);
                    }
                    return;
                }
                None => {
                    self.only_point = Some(point);
                    self.first_flow = Some((path, Before::new(point, psn, breaks_run)));
                    return;
                }
            }
        }
        if self.several_points
            // Half the rings at most go to flows before a second point saw them: flows that
            // cross one point only must not take every ring from those that cross two.
            && self.flows.len() < MAX_FLOWS / 2
            && !self.flows.contains_key(&path)
            && !self.seen_at.contains_key(&path)
        {
            self.flows.insert(path, PathFlow::default());
        }
        let flow = match self.flows.get_mut(&path) {
            Some(f) => f,
            None => match self.seen_at.get_mut(&path) {
                // One point so far: remember it, nothing to compare yet.
                None => {
                    if self.seen_at.len() < 16 * MAX_FLOWS {
                        self.seen_at
                            .insert(path, Before::new(point, psn, breaks_run));
                    }
                    return;
                }
                Some(b) if b.point == point => {
                    b.see(psn, breaks_run);
                    return;
                }
                Some(_) => {
                    let Some(before) = self.seen_at.remove(&path) else {
                        return;
                    };
                    if self.flows.len() >= MAX_FLOWS {
                        self.untracked_flows += 1;
                        return;
                    }
                    let f = self.flows.entry(path).or_default();
                    if let Some(i) = f.point_index(before.point) {
                        for p in before.run() {
                            f.see(i, p, false);
                        }
                    }
                    f
                }
            },
        };
        let Some(i) = flow.point_index(point) else {
            return;
        };
        flow.see(i, psn, retransmit);
        if out.gap_missing != 0 {
            flow.declared_lost(i, out.gap_first, out.gap_missing);
        }
    }

    pub fn flows(&self) -> impl Iterator<Item = (&Path, &PathFlow)> {
        self.flows.iter()
    }
}

/// Path pairs listed in the snapshot.
pub const MAX_PATH_PAIRS: usize = 1000;

/// Where was it lost, as an analysis: fed per packet on the capture path, or from path events
/// and flow records (the kernel path, and the capture path fed as the kernel).
#[derive(Default)]
pub struct PathsAnalysis {
    pub loss: PathLoss,
    feed: Feed,
}

impl PathsAnalysis {
    pub fn fed(feed: Feed) -> PathsAnalysis {
        PathsAnalysis {
            feed,
            ..PathsAnalysis::default()
        }
    }

    /// Per ordered pair of points of each flow seen at several, what went missing between them;
    /// most missing first, at most [`MAX_PATH_PAIRS`].
    fn pairs(&self, names: &Names) -> Vec<PathPair> {
        let point = |p: Point| PointRef {
            iface: names.name(p.0),
            direction: Direction::from_u8(p.1).name(),
            mirror: MirrorSource::new(p.2, p.3, p.4),
        };
        let mut out = Vec::new();
        // One row per ordered pair of points that saw the flow's PSNs, from either source.
        let mut row = |(src, dst, qp): &Path, up: Point, down: Point, c: PairCount, incomplete| {
            if c.both + c.missing > 0 {
                out.push(PathPair {
                    src_ip: show_ip(*src),
                    dst_ip: show_ip(*dst),
                    dst_qp: *qp,
                    upstream: point(up),
                    downstream: point(down),
                    both: c.both,
                    missing: c.missing,
                    missing_psns: c.examples,
                    downstream_retransmits_unseen: c.retransmits_unseen,
                    incomplete,
                });
            }
        };
        // A flow seen at one point (a ring started at its first packet) has no pair to judge.
        for (path, f) in self.loss.flows().filter(|(_, f)| f.points.len() >= 2) {
            for ((a, b), c) in f.counts() {
                let (up, down) = (&f.points[a as usize], &f.points[b as usize]);
                row(path, up.point, down.point, c, false);
            }
        }
        for (path, f) in self.loss.from_events.flows_at_several_points() {
            for a in 0..f.points.len() {
                for b in (0..f.points.len()).filter(|&b| b != a) {
                    if let Some(c) = f.pair(a, b) {
                        let (up, down) = (&f.points[a], &f.points[b]);
                        row(
                            path,
                            up.point,
                            down.point,
                            c,
                            up.incomplete || down.incomplete,
                        );
                    }
                }
            }
        }
        out.sort_by(|a, b| {
            b.missing.cmp(&a.missing).then_with(|| {
                (a.src_ip, a.dst_ip, a.dst_qp, &a.upstream, &a.downstream).cmp(&(
                    b.src_ip,
                    b.dst_ip,
                    b.dst_qp,
                    &b.upstream,
                    &b.downstream,
                ))
            })
        });
        out.truncate(MAX_PATH_PAIRS);
        out
    }
}

impl Analysis for PathsAnalysis {
    fn packet(
        &mut self,
        _: &EngineConfig,
        _: u64,
        key: &FlowKey,
        _: u32,
        pkt: &RocePacket,
        out: &Outcome,
    ) {
        if self.feed == Feed::Packets {
            self.loss.packet(key, pkt, out);
        }
    }

    fn event(&mut self, ev: &Event, body: &EventBody, from_capture: bool) {
        // Fed packet by packet, the capture path sees every PSN: its path events are not needed.
        if from_capture && self.feed == Feed::Packets {
            return;
        }
        if let EventBody::Path { resend, gap } = *body {
            if let Some((first, last)) = resend {
                self.loss.from_events.resend(&ev.flow, first, last);
            }
            if let Some((first, missing)) = gap {
                self.loss.from_events.gap(&ev.flow, first, missing);
            }
        }
    }

    /// First and highest request PSN, the open resend run.
    fn flow_read(&mut self, key: &FlowKey, stats: &FlowStats) {
        self.loss.from_events.flow_read(key, stats);
    }

    /// A capture that declares several interfaces (pcapng) may hold one flow at several
    /// points, written in any order (dumpcap writes each interface's packets in batches).
    fn renamed(&mut self, names: &Names) {
        self.loss.several_points = names.count() >= 2;
    }

    fn section(&mut self, view: &View<'_>, _now: u64, report: &mut Snapshot) {
        report.paths = self.pairs(view.names);
    }
}

#[cfg(test)]
mod tests;
