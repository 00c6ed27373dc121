//! Reordering, loss and retransmission per flow, computed here from tshark's decoding of a
//! capture, straight from the definitions the observer implements (docs/metrics.md; request
//! PSN space and READ-response PSN space, a reorder window of `WINDOW` PSNs), independently of
//! roce-observer's code. Beside the definitions' figures it keeps what the capture shows
//! without any window or rule (RFC 4737's reordered singletons, PSNs never seen), the evidence
//! the scenario's report gives for the window.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::wire::{FlowKey, Pkt, is_read_response, is_request, psn_add, psn_diff, span};

/// The observer's default reorder window, in PSNs.
pub(super) const WINDOW: u32 = 64;

/// Buckets of the reorder distance histogram, as the flow record names them.
pub(super) const BUCKETS: [&str; 6] = ["1", "2-3", "4-7", "8-15", "16-31", "32+"];

pub(super) fn bucket(distance: u32) -> usize {
    match distance {
        0..=1 => 0,
        2..=3 => 1,
        4..=7 => 2,
        8..=15 => 3,
        16..=31 => 4,
        _ => 5,
    }
}

/// One flow's figures by the definitions, plus the window-free evidence.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct PsnFigures {
    pub(super) req_retransmits: u64,
    pub(super) resp_retransmits: u64,
    /// PSNs declared lost (minus corrections), both PSN spaces.
    pub(super) psn_missing: u64,
    /// Loss events: maximal runs of consecutive lost PSNs.
    pub(super) psn_gaps: u64,
    pub(super) reordered: u64,
    pub(super) reorder_distance_max: u32,
    pub(super) reorder_hist: [u64; 6],
    /// PSN sequence-error NAKs caused by reordering, counted on the request flow.
    pub(super) reorder_naks: u64,
    /// Holes still open at the end of the capture.
    pub(super) psn_holes: u64,
    // ---- evidence, not compared with the observer ----
    /// First copies older than the highest PSN seen before them (RFC 4737), no window.
    pub(super) raw_reordered: u64,
    pub(super) raw_distance_max: u32,
    pub(super) raw_hist: [u64; 6],
    /// Request PSNs between the first and the highest that never had a copy.
    pub(super) raw_never_seen: u64,
    /// Lost PSNs by the reason they were declared lost (requests; responses: window).
    pub(super) lost_by_nak: u64,
    pub(super) lost_by_window: u64,
    pub(super) lost_by_resend_run: u64,
    /// NAK-declared lost PSNs corrected by a second copy.
    pub(super) corrections: u64,
    /// Sequence-error NAKs on this (answer) flow that could not be attributed (peer not yet
    /// learned).
    pub(super) naks_unattributed: u64,
    /// First copies the definitions did not count as reordered although they arrived after a
    /// higher PSN: (PSN, distance, why), at most 32 kept, and their number.
    pub(super) not_reordered_examples: Vec<(u32, u32, &'static str)>,
    pub(super) not_reordered: u64,
    /// The first reordered PSNs (at most 32), with their distance.
    pub(super) reordered_examples: Vec<(u32, u32)>,
    /// How long a request hole was open before its first copy closed it, seconds: for the
    /// copies decided reordered, and for those the resend-run rules declared lost.
    pub(super) hole_age_reordered: Vec<f64>,
    pub(super) hole_age_resend_run: Vec<f64>,
    /// Request to answer times of the matched answers (the observer's latency samples), s.
    pub(super) answer_times: Vec<f64>,
}

impl PsnFigures {
    pub(super) fn hist_json(&self) -> serde_json::Value {
        let m: serde_json::Map<String, serde_json::Value> = BUCKETS
            .iter()
            .zip(self.reorder_hist)
            .map(|(b, n)| ((*b).to_string(), serde_json::json!(n)))
            .collect();
        serde_json::Value::Object(m)
    }
    fn count_reordered(&mut self, psn: u32, distance: u32) {
        if self.reordered_examples.len() < 32 {
            self.reordered_examples.push((psn, distance));
        }
        self.reordered += 1;
        self.reorder_distance_max = self.reorder_distance_max.max(distance);
        self.reorder_hist[bucket(distance)] += 1;
    }
    fn not_reordered(&mut self, psn: u32, distance: u32, why: &'static str) {
        self.not_reordered += 1;
        if self.not_reordered_examples.len() < 32 {
            self.not_reordered_examples.push((psn, distance, why));
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    /// Skipped, no copy yet.
    Hole,
    /// Declared lost; `copies` seen since, the first one's distance.
    Lost {
        by_nak: bool,
        copies: u32,
        distance: u32,
        /// Its copy is known to be a resend (its resend run went on with a duplicate): a
        /// later copy does not correct it.
        sure: bool,
    },
    /// Seen. `reordered`: its first copy was decided reordered; `pending`: its first copy
    /// closed a hole and awaits the decision. `nak`: pending, a NAK named it meanwhile;
    /// reordered, a NAK caused by it was counted already (one per PSN, as the observer's
    /// scoreboard flag).
    Seen {
        reordered: bool,
        pending: bool,
        nak: bool,
    },
}

impl Slot {
    /// A PSN seen in order: its first copy was not reordered and nothing is pending.
    const FRESH: Slot = Slot::Seen {
        reordered: false,
        pending: false,
        nak: false,
    };
}

/// Request PSN space of one flow.
#[derive(Debug, Default)]
struct ReqSpace {
    started: bool,
    highest: u32,
    expected: u32,
    base: u32,
    /// When each open hole was opened (capture time).
    opened: HashMap<u32, f64>,
    /// The time of the packet being processed.
    now: f64,
    /// Unwrapped position of `highest` (PSN arithmetic stays 24-bit; this only numbers lost
    /// PSNs for the loss-event count).
    highest_abs: i64,
    slots: HashMap<u32, Slot>,
    /// First copies closing holes, consecutive, awaiting the next request: (PSN, span,
    /// distance).
    pending: Vec<(u32, u32, u32)>,
    /// The previous request: PSN, span, whether it was a retransmission.
    prev: Option<(u32, u32, bool)>,
    /// Where the resend run of the previous retransmission began.
    run_start: u32,
    /// When the pending first copies arrived.
    closed: HashMap<u32, f64>,
    /// Lost PSNs (unwrapped) for the loss-event count.
    lost: BTreeSet<i64>,
    /// Window-free evidence: every PSN ever seen (unwrapped), the highest.
    raw_seen: HashSet<i64>,
    raw_first_abs: i64,
    /// From this PSN up to `base` every PSN had a copy (set at the first request out of
    /// order; moved above a PSN that leaves the window with none).
    clean: Option<u32>,
}

fn d_age(t0: f64, t1: f64) -> f64 {
    (t1 - t0).max(0.0)
}

impl ReqSpace {
    fn closed_at(&mut self, p: u32) -> f64 {
        self.closed.remove(&p).unwrap_or(self.now)
    }
    fn abs(&self, p: u32) -> i64 {
        self.highest_abs + psn_diff(p, self.highest) as i64
    }
    fn in_window(&self, p: u32) -> bool {
        psn_diff(p, self.base) >= 0 && psn_diff(p, self.expected) < 0
    }
    fn declare_lost(&mut self, p: u32) {
        let a = self.abs(p);
        self.lost.insert(a);
    }

    /// Decide the pending first copies: lost + retransmission when `next` is a duplicate
    /// exactly after the last of them, else reordered.
    fn decide(&mut self, f: &mut PsnFigures, next_dup_after: bool) {
        let pend = std::mem::take(&mut self.pending);
        for (p, s, d) in pend {
            for i in 0..s {
                let q = psn_add(p, i);
                let nak = matches!(self.slots.get(&q), Some(Slot::Seen { nak: true, .. }));
                if self.in_window(q) {
                    self.slots.insert(
                        q,
                        if next_dup_after {
                            // lost; a later copy in the window corrects it (the observer)
                            Slot::Lost {
                                by_nak: false,
                                copies: 1,
                                sure: true,
                                distance: if i == 0 {
                                    d
                                } else {
                                    psn_diff(self.highest, q) as u32
                                },
                            }
                        } else {
                            Slot::Seen {
                                reordered: true,
                                pending: false,
                                nak,
                            }
                        },
                    );
                }
                if i == 0 {
                    let age = self
                        .opened
                        .remove(&p)
                        .map(|t0| d_age(t0, self.closed_at(p)));
                    if next_dup_after {
                        f.hole_age_resend_run.extend(age);
                        f.req_retransmits += 1;
                        f.not_reordered(p, d, "closed a hole, then go-back-N resend run");
                    } else {
                        f.hole_age_reordered.extend(age);
                        f.count_reordered(p, d);
                        if nak {
                            f.reorder_naks += 1;
                        }
                    }
                }
                if next_dup_after {
                    f.lost_by_resend_run += 1;
                    self.declare_lost(q);
                }
            }
        }
    }

    /// Resolve what falls out of the window below `expected - WINDOW`.
    fn slide(&mut self, f: &mut PsnFigures) {
        while psn_diff(self.expected, self.base) > WINDOW as i32 {
            let b = self.base;
            match self.slots.remove(&b) {
                Some(Slot::Hole) => {
                    f.lost_by_window += 1;
                    self.declare_lost(b);
                    self.clean = Some(psn_add(b, 1));
                }
                Some(Slot::Lost { copies: 0, .. }) => self.clean = Some(psn_add(b, 1)),
                _ => {}
            }
            self.base = psn_add(b, 1);
        }
        // a pending run whose first copy falls out of the window is decided now: reordering
        if self
            .pending
            .first()
            .is_some_and(|&(p, _, _)| psn_diff(p, self.base) < 0)
        {
            self.decide(f, false);
        }
    }

    fn request(&mut self, f: &mut PsnFigures, p: u32, s: u32) -> bool {
        // window-free evidence
        if !self.started {
            self.started = true;
            self.highest = p;
            self.expected = psn_add(p, s);
            self.base = p;
            self.highest_abs = 0;
            self.raw_first_abs = 0;
            for i in 0..s {
                self.slots.insert(psn_add(p, i), Slot::FRESH);
                self.raw_seen.insert(i as i64);
            }
            self.prev = Some((p, s, false));
            return false;
        }
        if self.clean.is_none() && p != self.expected {
            self.clean = Some(self.expected);
        }
        let a = self.abs(p);
        // a first copy arriving after a higher PSN (RFC 4737), whatever the rules say
        let raw_distance = (!self.raw_seen.contains(&a))
            .then(|| psn_diff(self.highest, p))
            .filter(|&d| d > 0)
            .map(|d| d as u32);
        if let Some(d) = raw_distance {
            f.raw_reordered += 1;
            f.raw_distance_max = f.raw_distance_max.max(d);
            f.raw_hist[bucket(d)] += 1;
        }
        for i in 0..s {
            self.raw_seen.insert(a + i as i64);
        }

        let slot = self.slots.get(&p).copied();
        let older = psn_diff(p, self.expected) < 0;
        let below_base = older && psn_diff(p, self.base) < 0;
        let is_hole = older && !below_base && slot == Some(Slot::Hole);
        // the pending group: a consecutive first copy joins it, anything else decides it
        if let Some(&(lp, ls, _)) = self.pending.last() {
            let after = psn_add(lp, ls);
            if !(is_hole && p == after) {
                let dup = older
                    && (below_base
                        || matches!(
                            slot,
                            Some(
                                Slot::Seen { pending: false, .. } | Slot::Lost { copies: 1.., .. }
                            )
                        ));
                let first = self.pending.first().map_or(lp, |&(fp, _, _)| fp);
                self.decide(f, dup && p == after);
                if dup && p == after {
                    // the decided copies were a resend run, which this duplicate continues
                    self.prev = Some((lp, ls, true));
                    self.run_start = first;
                }
            }
        }
        let slot = self.slots.get(&p).copied();
        let retransmit;
        if !older {
            // rule 1: new
            let mut q = self.expected;
            while q != p {
                self.slots.insert(q, Slot::Hole);
                self.opened.insert(q, self.now);
                q = psn_add(q, 1);
            }
            for i in 0..s {
                self.slots.insert(psn_add(p, i), Slot::FRESH);
            }
            self.highest_abs = a;
            self.highest = p;
            self.expected = psn_add(p, s);
            self.slide(f);
            retransmit = false;
        } else if below_base {
            retransmit = true;
        } else {
            match slot {
                Some(Slot::Hole) => {
                    let d = psn_diff(self.highest, p) as u32;
                    let resend_run = self
                        .prev
                        .is_some_and(|(q, qs, retx)| retx && p == psn_add(q, qs));
                    if resend_run {
                        for i in 0..s {
                            let q = psn_add(p, i);
                            if self.in_window(q) {
                                self.slots.insert(
                                    q,
                                    Slot::Lost {
                                        by_nak: false,
                                        copies: 1,
                                        distance: psn_diff(self.highest, q) as u32,
                                        sure: false,
                                    },
                                );
                            }
                            f.lost_by_resend_run += 1;
                            self.declare_lost(q);
                        }
                        f.not_reordered(p, d, "closed a hole continuing a resend run");
                        if let Some(t0) = self.opened.remove(&p) {
                            f.hole_age_resend_run.push(d_age(t0, self.now));
                        }
                        retransmit = true;
                    } else {
                        for i in 0..s {
                            let q = psn_add(p, i);
                            if self.in_window(q) {
                                self.slots.insert(
                                    q,
                                    Slot::Seen {
                                        reordered: false,
                                        pending: true,
                                        nak: false,
                                    },
                                );
                            }
                        }
                        self.closed.insert(p, self.now);
                        self.pending.push((p, s, d));
                        retransmit = false;
                    }
                }
                Some(Slot::Lost {
                    by_nak,
                    copies,
                    distance,
                    sure,
                }) => {
                    if copies == 0 {
                        let d = psn_diff(self.highest, p) as u32;
                        self.slots.insert(
                            p,
                            Slot::Lost {
                                by_nak,
                                copies: 1,
                                distance: d,
                                sure,
                            },
                        );
                        retransmit = true;
                    } else if sure || f.reordered == 0 {
                        // another resend round of a PSN whose copy was a resend, or on a flow
                        // that has shown no reordering (its late copies are resends)
                        retransmit = true;
                    } else {
                        // the second copy in the window: it was not lost, the first copy
                        // was reordered (and the NAK that declared it lost was caused by it)
                        self.lost.remove(&a);
                        f.corrections += 1;
                        f.count_reordered(p, distance);
                        if by_nak {
                            f.reorder_naks += 1;
                            f.lost_by_nak -= 1;
                        }
                        self.slots.insert(
                            p,
                            Slot::Seen {
                                reordered: true,
                                pending: false,
                                nak: true,
                            },
                        );
                        // of the two copies exactly one is a retransmission (the first
                        // already counted); this one is a copy all the same (a resend run
                        // may continue from it)
                        self.run(p, true);
                        self.prev = Some((p, s, true));
                        return true;
                    }
                }
                _ => retransmit = true,
            }
        }
        if retransmit {
            f.req_retransmits += 1;
            if let Some(d) = raw_distance {
                if below_base {
                    f.not_reordered(p, d, "first copy below the window (its hole was lost)");
                } else if matches!(slot, Some(Slot::Lost { .. })) {
                    f.not_reordered(p, d, "first copy of a PSN a NAK had declared lost");
                }
            }
        }
        if retransmit {
            let dup = below_base
                || matches!(
                    slot,
                    Some(Slot::Seen { .. } | Slot::Lost { copies: 1.., .. })
                );
            self.run(p, dup);
        }
        self.prev = Some((p, s, retransmit));
        retransmit
    }

    /// A retransmission of `p`: it starts a resend run, or continues the previous one (the
    /// PSN after the previous retransmission); a duplicate that continues one shows the run
    /// is a resend, and the lost PSNs it closed are not corrected by later copies.
    fn run(&mut self, p: u32, dup: bool) {
        let continues = self
            .prev
            .is_some_and(|(q, qs, retx)| retx && p == psn_add(q, qs));
        if !continues {
            self.run_start = p;
            return;
        }
        if dup {
            let mut q = self.run_start;
            while q != p && self.in_window(q) {
                if let Some(Slot::Lost { sure, .. }) = self.slots.get_mut(&q) {
                    *sure = true;
                }
                q = psn_add(q, 1);
            }
        }
    }

    /// A PSN sequence-error NAK naming `x`.
    fn nak(&mut self, f: &mut PsnFigures, x: u32) {
        if !self.started {
            return;
        }
        if !self.in_window(x) {
            // below the window: had a copy here, on a flow that reorders
            let below = psn_diff(self.base, x);
            if below > 0
                && below <= 1 << 22
                && f.reordered > 0
                && self.clean.is_some_and(|c| psn_diff(x, c) >= 0)
            {
                f.reorder_naks += 1;
            }
            return;
        }
        match self.slots.get(&x).copied() {
            Some(Slot::Hole) => {
                self.slots.insert(
                    x,
                    Slot::Lost {
                        by_nak: true,
                        copies: 0,
                        distance: 0,
                        sure: false,
                    },
                );
                f.lost_by_nak += 1;
                self.declare_lost(x);
            }
            Some(Slot::Seen {
                reordered: true,
                nak: false,
                ..
            }) => {
                f.reorder_naks += 1;
                self.slots.insert(
                    x,
                    Slot::Seen {
                        reordered: true,
                        pending: false,
                        nak: true,
                    },
                );
            }
            Some(Slot::Seen {
                pending: true,
                reordered,
                ..
            }) => {
                self.slots.insert(
                    x,
                    Slot::Seen {
                        reordered,
                        pending: true,
                        nak: true,
                    },
                );
            }
            // a copy of it arrived before the NAK, on a flow that reorders
            Some(Slot::Seen { .. } | Slot::Lost { copies: 1.., .. }) if f.reordered > 0 => {
                f.reorder_naks += 1;
            }
            _ => {}
        }
    }

    fn finish(&mut self, f: &mut PsnFigures) {
        if !self.pending.is_empty() {
            self.decide(f, false);
        }
        let mut q = self.base;
        while q != self.expected {
            if self.slots.get(&q) == Some(&Slot::Hole) {
                f.psn_holes += 1;
            }
            q = psn_add(q, 1);
        }
        let max_abs = self.raw_seen.iter().copied().max().unwrap_or(0);
        f.raw_never_seen += (self.raw_first_abs..=max_abs)
            .filter(|a| !self.raw_seen.contains(a))
            .count() as u64;
    }
}

/// READ-response PSN space of one flow.
#[derive(Debug, Default)]
struct RespSpace {
    started: bool,
    highest: u32,
    /// PSNs seen and holes, within the window below `highest`.
    seen: HashSet<u32>,
    holes: BTreeSet<u32>,
    lost_events: BTreeSet<i64>,
    highest_abs: i64,
    /// Window-free evidence: every response PSN ever seen (unwrapped).
    raw_seen: HashSet<i64>,
    /// Unwrapped position of the first response: the space starts there (as the request
    /// space starts at the first request), an older response is a retransmission.
    first_abs: i64,
}

impl RespSpace {
    fn response(&mut self, f: &mut PsnFigures, p: u32, continues: bool) {
        if !self.started {
            self.started = true;
            self.highest = p;
            self.seen.insert(p);
            self.raw_seen.insert(0);
            return;
        }
        let d = psn_diff(p, self.highest);
        let a = self.highest_abs + d as i64;
        if self.raw_seen.insert(a) && d < 0 {
            let dist = (-d) as u32;
            f.raw_reordered += 1;
            f.raw_distance_max = f.raw_distance_max.max(dist);
            f.raw_hist[bucket(dist)] += 1;
            if dist >= WINDOW {
                f.not_reordered(p, dist, "READ response beyond the window");
            } else if a < self.first_abs {
                f.not_reordered(p, dist, "READ response older than the first one seen");
            }
        }
        if d > 0 {
            if continues {
                let mut q = psn_add(self.highest, 1);
                while q != p {
                    self.holes.insert(q);
                    q = psn_add(q, 1);
                }
            }
            self.highest = p;
            self.highest_abs += d as i64;
            self.seen.insert(p);
            // what falls out of the window: open holes are lost
            let (h, habs) = (self.highest, self.highest_abs);
            let out: Vec<u32> = self
                .holes
                .iter()
                .copied()
                .filter(|&q| psn_diff(h, q) >= WINDOW as i32)
                .collect();
            for q in out {
                self.holes.remove(&q);
                self.lost_events.insert(habs - psn_diff(h, q) as i64);
                f.lost_by_window += 1;
            }
            self.seen.retain(|&q| psn_diff(h, q) < WINDOW as i32);
            return;
        }
        let dist = (-d) as u32;
        if d < 0 && dist < WINDOW && a > self.first_abs && !self.seen.contains(&p) {
            self.seen.insert(p);
            self.holes.remove(&p);
            f.count_reordered(p, dist);
        } else {
            f.resp_retransmits += 1;
        }
    }
}

#[derive(Default)]
struct FlowState {
    f: PsnFigures,
    req: ReqSpace,
    resp: RespSpace,
    peer_qp: Option<u32>,
}

/// Every flow's figures, the capture's packets in their order. Sequence-error NAKs apply to
/// the request flow they answer once the answer flow has learned its peer QP: at its first
/// answer (ACK, NAK, READ response FIRST/ONLY) whose PSN is that of a timestamped request
/// (ack-request bit, or a READ request) still waiting in the reverse direction, as the
/// observer's latency matching learns it; a NAK before that is not attributed.
pub(super) fn psn_truth(pkts: &[&Pkt], pmtu: u64) -> BTreeMap<FlowKey, PsnFigures> {
    let mut flows: BTreeMap<FlowKey, FlowState> = BTreeMap::new();
    // timestamped requests waiting for an answer: (requester IP, responder IP, PSN) -> the
    // request's destination QP
    let mut waiting: HashMap<(String, String, u32), (u32, f64)> = HashMap::new();
    for p in pkts {
        let key: FlowKey = (p.src.clone(), p.dst.clone(), p.dest_qp);
        if is_request(p.opcode) {
            let st = flows.entry(key).or_default();
            st.req.now = p.time;
            let retx = st.req.request(&mut st.f, p.psn, span(p, pmtu));
            if !retx && (p.ack_req || p.opcode == 0x0C) {
                waiting.insert((p.src.clone(), p.dst.clone(), p.psn), (p.dest_qp, p.time));
            }
        } else if is_read_response(p.opcode) || matches!(p.opcode, 0x11 | 0x12) {
            let peer = flows.get(&key).and_then(|s| s.peer_qp);
            let st = flows.entry(key.clone()).or_default();
            if is_read_response(p.opcode) {
                st.resp
                    .response(&mut st.f, p.psn, matches!(p.opcode, 0x0E | 0x0F));
            }
            let seq_nak = matches!(p.opcode, 0x11 | 0x12) && p.syndrome == Some(0x60);
            if seq_nak {
                match peer {
                    Some(q) => {
                        let rk = (p.dst.clone(), p.src.clone(), q);
                        let r = flows.entry(rk).or_default();
                        r.req.now = p.time;
                        r.req.nak(&mut r.f, p.psn);
                    }
                    None => st.f.naks_unattributed += 1,
                }
            }
            let answers = matches!(p.opcode, 0x11 | 0x12 | 0x0D | 0x10);
            if answers
                && let Some((q, t0)) = waiting.remove(&(p.dst.clone(), p.src.clone(), p.psn))
                && let Some(st) = flows.get_mut(&key)
            {
                if st.peer_qp.is_none() {
                    st.peer_qp = Some(q);
                }
                if let Some(r) = flows.get_mut(&(p.dst.clone(), p.src.clone(), q)) {
                    r.f.answer_times.push(d_age(t0, p.time));
                }
            }
        } else {
            flows.entry(key).or_default();
        }
    }
    flows
        .into_iter()
        .map(|(k, mut st)| {
            if st.req.started {
                st.req.finish(&mut st.f);
            }
            st.f.psn_holes += st.resp.holes.len() as u64;
            let runs = |set: &BTreeSet<i64>| -> u64 {
                set.iter().filter(|&&a| !set.contains(&(a - 1))).count() as u64
            };
            st.f.psn_missing = (st.req.lost.len() + st.resp.lost_events.len()) as u64;
            st.f.psn_gaps = runs(&st.req.lost) + runs(&st.resp.lost_events);
            (k, st.f)
        })
        .collect()
}
