//! Where was it lost on the kernel path (`run -i`): the kernel sends no PSN per packet, only
//! rare path events from the shared observation (roce-observer-common/src/observe.rs,
//! `path_events`): each request gap (first missing PSN, how many) and each finished resend run
//! (first and last PSN) of a flow, rate-limited per flow. Each flow record adds the first and
//! highest request PSN, the resend run still open and the events suppressed by the limit.
//! From those, per observation point, the PSNs it saw sent the first time are its
//! `[first, highest]` less its gaps, and the pair counts follow by interval arithmetic with the
//! definitions of the capture path's ring (docs/metrics.md, "Where was it lost", which lists
//! where the two differ).
//!
//! PSNs are unwrapped to 64 bits per flow (serial arithmetic against the newest PSN seen of the
//! flow at any point), so a flow may wrap the 24-bit space any number of times between reads.
//! Bounded: [`MAX_PATHS`] flows, [`super::MAX_POINTS`] points each, [`MAX_RANGES`] gaps and
//! resend runs per point (past that the flow is marked incomplete).

use std::collections::HashMap;

use roce_observer_common::{
    FlowKey, FlowStats,
    psn::{PSN_MASK, REQ_RESENDING, psn_diff},
};

use super::{EXAMPLES, MAX_POINTS, PairCount, Path, Point};
use crate::engine::flows::FastHash;

/// Flows followed.
pub const MAX_PATHS: usize = 65_536;
/// Gaps, and resend runs, kept per point.
pub const MAX_RANGES: usize = 4096;

/// Half-open `[start, end)` ranges of unwrapped PSNs.
type Ranges = Vec<(u64, u64)>;

/// What one point reported of a flow.
#[derive(Clone, Debug)]
pub struct RangePoint {
    pub point: Point,
    /// First and highest request PSN (unwrapped), from the flow record.
    first: Option<u64>,
    highest: u64,
    gaps: Ranges,
    /// Finished resend runs, and the one open at the last read.
    resends: Ranges,
    open_resend: Option<(u64, u64)>,
    /// Holes open at the last read (skipped PSNs not arrived yet, not declared lost: no event
    /// says so), from the flow record's scoreboard.
    open_holes: Ranges,
    /// Events suppressed by the kernel's limit, or dropped past [`MAX_RANGES`].
    pub incomplete: bool,
}

#[derive(Clone, Debug, Default)]
pub struct RangeFlow {
    /// The newest PSN seen of this flow (raw) and its unwrapped value.
    anchor: Option<(u32, u64)>,
    pub points: Vec<RangePoint>,
}

impl RangeFlow {
    /// `psn` as a 64-bit position: within 2^23 of the anchor, by serial arithmetic.
    fn unwrap(&mut self, psn: u32) -> u64 {
        let psn = psn & PSN_MASK;
        let Some((raw, pos)) = self.anchor else {
            // Far from 0, so PSNs before the first one seen stay positive.
            let pos = (1u64 << 32) | u64::from(psn);
            self.anchor = Some((psn, pos));
            return pos;
        };
        let d = psn_diff(psn, raw);
        if d < 1 << 23 {
            let pos = pos + u64::from(d);
            self.anchor = Some((psn, pos));
            pos
        } else {
            pos - u64::from((1 << 24) - d)
        }
    }

    fn point_index(&mut self, p: Point) -> Option<usize> {
        if let Some(i) = self.points.iter().position(|s| s.point == p) {
            return Some(i);
        }
        if self.points.len() >= MAX_POINTS {
            return None;
        }
        self.points.push(RangePoint {
            point: p,
            first: None,
            highest: 0,
            gaps: Vec::new(),
            resends: Vec::new(),
            open_resend: None,
            open_holes: Vec::new(),
            incomplete: false,
        });
        Some(self.points.len() - 1)
    }

    /// Counts of the ordered pair (`a` upstream, `b` downstream), as the capture path's ring
    /// judges them: `both` = PSNs both saw sent the first time, `missing` = PSNs `a` saw so and
    /// `b` did not while `b` saw PSNs before and after them; `None` until both have read
    /// records.
    pub fn pair(&self, a: usize, b: usize) -> Option<PairCount> {
        let (up, down) = (&self.points[a], &self.points[b]);
        let (up_first, down_first) = (up.first?, down.first?);
        let up_gaps = merged(&[up.gaps.as_slice(), &up.open_holes].concat());
        let down_gaps = merged(&[down.gaps.as_slice(), &down.open_holes].concat());
        let up_seen = subtract(&[(up_first, up.highest + 1)], &up_gaps);
        let down_seen = subtract(&[(down_first, down.highest + 1)], &down_gaps);
        let both = total(&intersect(&up_seen, &down_seen));
        // Covered by downstream: from its first PSN up to (not including) its highest.
        let covered = [(down_first, down.highest)];
        let missing = intersect(&intersect(&down_gaps, &covered), &up_seen);
        let examples = missing
            .iter()
            .flat_map(|&(s, e)| s..e)
            .take(EXAMPLES)
            .map(|p| (p & u64::from(PSN_MASK)) as u32)
            .collect();
        // Downstream's resends of PSNs lost between the two: each resend run's PSNs in its
        // gaps that upstream saw sent the first time.
        let lost_between = intersect(&down_gaps, &up_seen);
        let retransmits_unseen = down
            .resends
            .iter()
            .chain(down.open_resend.iter())
            .map(|&r| total(&intersect(&[r], &lost_between)))
            .sum();
        Some(PairCount {
            both,
            missing: total(&missing),
            examples,
            retransmits_unseen,
        })
    }
}

/// Path views built from path events and flow records, per flow.
#[derive(Clone, Debug, Default)]
pub struct RangePaths {
    flows: HashMap<Path, RangeFlow, FastHash>,
    /// The flows seen at two or more points, the only ones with pairs to judge: the report
    /// walks these rather than every flow followed (up to [`MAX_PATHS`], every tick).
    several: Vec<Path>,
    /// Flows not followed: [`MAX_PATHS`] were.
    pub untracked_flows: u64,
}

fn point_of(key: &FlowKey) -> Point {
    (
        key.ifindex,
        key.direction,
        key.encap,
        key.outer_src,
        key.mirror_id,
    )
}

impl RangePaths {
    fn flow(&mut self, key: &FlowKey) -> Option<(&mut RangeFlow, usize)> {
        let path = (key.src_ip, key.dst_ip, key.dst_qp);
        if !self.flows.contains_key(&path) {
            if self.flows.len() >= MAX_PATHS {
                self.untracked_flows += 1;
                return None;
            }
            self.flows.insert(path, RangeFlow::default());
        }
        let flow = self.flows.get_mut(&path)?;
        let before = flow.points.len();
        let i = flow.point_index(point_of(key))?;
        if before == 1 && flow.points.len() == 2 {
            self.several.push(path);
        }
        Some((flow, i))
    }

    /// A flow record as read from the kernel's map (absolute values).
    pub fn flow_read(&mut self, key: &FlowKey, stats: &FlowStats) {
        if !stats.psn.has_requests() {
            return;
        }
        let Some((flow, i)) = self.flow(key) else {
            return;
        };
        let first = match flow.points[i].first {
            Some(f) => f,
            None => flow.unwrap(stats.req_first),
        };
        let highest = flow.unwrap(stats.psn.req_highest);
        let open = (stats.psn.flags & REQ_RESENDING != 0).then(|| {
            (
                flow.unwrap(stats.resend_first),
                flow.unwrap(stats.resend_last) + 1,
            )
        });
        let holes: Ranges = roce_observer_common::sequence::open_request_holes(stats)
            .map(|(start, n)| {
                let s = flow.unwrap(start);
                (s, s + u64::from(n))
            })
            .collect();
        let p = &mut flow.points[i];
        p.first = Some(first);
        p.highest = highest;
        p.open_resend = open;
        p.open_holes = holes;
        // Events over the per-flow limit, or lost to a full ring buffer: either way gaps or
        // resend runs the kernel saw are missing here, so the counts are lower bounds.
        p.incomplete |= stats.path_suppressed > 0 || stats.path_lost > 0;
    }

    /// A gap of `missing` request PSNs from `first` seen at `key`'s point.
    pub fn gap(&mut self, key: &FlowKey, first: u32, missing: u32) {
        let Some((flow, i)) = self.flow(key) else {
            return;
        };
        let start = flow.unwrap(first);
        let p = &mut flow.points[i];
        if p.gaps.len() >= MAX_RANGES {
            p.incomplete = true;
            return;
        }
        p.gaps.push((start, start + u64::from(missing)));
    }

    /// A finished resend run `first..=last` seen at `key`'s point.
    pub fn resend(&mut self, key: &FlowKey, first: u32, last: u32) {
        let Some((flow, i)) = self.flow(key) else {
            return;
        };
        let (start, end) = (flow.unwrap(first), flow.unwrap(last) + 1);
        let p = &mut flow.points[i];
        // The run read open from the record has finished: it is this one.
        if p.open_resend.is_some_and(|(s, _)| s == start) {
            p.open_resend = None;
        }
        if p.resends.len() >= MAX_RANGES {
            p.incomplete = true;
            return;
        }
        p.resends.push((start, end.max(start + 1)));
    }

    /// The flows seen at two or more points (a flow seen at one has no pair).
    pub fn flows_at_several_points(&self) -> impl Iterator<Item = (&Path, &RangeFlow)> {
        self.several
            .iter()
            .filter_map(|p| Some((p, self.flows.get(p)?)))
    }
}

/// Sorted, with overlapping and touching ranges merged.
fn merged(v: &[(u64, u64)]) -> Ranges {
    let mut v: Ranges = v.iter().copied().filter(|(s, e)| s < e).collect();
    v.sort_unstable();
    let mut out: Ranges = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Intersection of two sorted, disjoint range lists.
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Ranges {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if s < e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// `a` without `b` (both sorted and disjoint).
fn subtract(a: &[(u64, u64)], b: &[(u64, u64)]) -> Ranges {
    let mut out = Vec::new();
    for &(mut s, e) in a {
        for &(bs, be) in b {
            if be <= s || bs >= e {
                continue;
            }
            if bs > s {
                out.push((s, bs));
            }
            s = s.max(be);
        }
        if s < e {
            out.push((s, e));
        }
    }
    out
}

fn total(v: &[(u64, u64)]) -> u64 {
    v.iter().map(|(s, e)| e - s).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_arithmetic() {
        assert_eq!(merged(&[(5, 7), (1, 2), (2, 3), (6, 9)]), [(1, 3), (5, 9)]);
        assert_eq!(intersect(&[(0, 10)], &[(2, 3), (5, 12)]), [(2, 3), (5, 10)]);
        assert_eq!(subtract(&[(0, 10)], &[(2, 3), (5, 12)]), [(0, 2), (3, 5)]);
        assert_eq!(subtract(&[(0, 10)], &[]), [(0, 10)]);
        assert_eq!(total(&[(0, 2), (3, 5)]), 4);
    }

    #[test]
    fn unwrap_follows_the_newest_psn_across_the_wrap() {
        let mut f = RangeFlow::default();
        let a = f.unwrap(PSN_MASK - 1);
        assert_eq!(f.unwrap(PSN_MASK), a + 1);
        assert_eq!(f.unwrap(3), a + 5);
        assert_eq!(f.unwrap(PSN_MASK - 2), a - 1, "older than the anchor");
        assert_eq!(f.unwrap(4), a + 6);
    }
}
