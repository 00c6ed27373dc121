//! Latency matching: a timestamped request waits under (interface, requester IP, responder IP,
//! PSN, mirror source) until the responder answers with the same PSN (docs/metrics.md). The
//! mirror source keeps two switches' copies of one request apart.
//!
//! The requests wait in one set-associative table ([`PendingSet`], [`PENDING_SETS`] sets of
//! [`PENDING_WAYS`] slots), whose logic is here: the kernel keeps its sets in a preallocated BPF
//! array (an array lookup the verifier inlines: no hash-bucket walk, no LRU list), the engine in
//! a `Vec`, so both keep, push out and match exactly the same requests.
//!
//! The kernel keeps each request flow's samples in a [`LatencyHist`] (the `LATENCY4`/`LATENCY6`
//! maps), read on the report tick, instead of sending one ring-buffer event per sample: in
//! plain WRITE traffic one packet in five is an answer that makes a sample.

use crate::{FlowKey, assert_size, atomic, observe::Stored};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PendingKey {
    pub requester: [u8; 16],
    pub responder: [u8; 16],
    pub ifindex: u32,
    pub psn: u32,
    /// The flow key's mirror source (`FlowKey::outer_src`, `mirror_id`, `encap`).
    pub outer_src: [u8; 16],
    pub mirror_id: u32,
    pub encap: u8,
    pub _pad: [u8; 3],
}
assert_size!(PendingKey, 64);

impl PendingKey {
    pub const fn zeroed() -> PendingKey {
        PendingKey {
            requester: [0; 16],
            responder: [0; 16],
            ifindex: 0,
            psn: 0,
            outer_src: [0; 16],
            mirror_id: 0,
            encap: 0,
            _pad: [0; 3],
        }
    }

    /// The key of a request from `requester` to `responder` with `psn`, seen where `flow`
    /// was (interface and mirror source).
    #[inline(always)]
    pub fn fill(&mut self, flow: &FlowKey, requester: [u8; 16], responder: [u8; 16], psn: u32) {
        self.requester = requester;
        self.responder = responder;
        self.ifindex = flow.ifindex;
        self.psn = psn;
        self.outer_src = flow.outer_src;
        self.mirror_id = flow.mirror_id;
        self.encap = flow.encap;
    }

    /// The 64-bit fingerprint of the key without its PSN (never 0, which marks an empty slot):
    /// a request's set comes from it and the PSN ([`pending_set_index`]); it matches its answer
    /// by fingerprint and PSN. A false match needs two keys with the same fingerprint and PSN
    /// waiting in one set at once. Plain 64-bit arithmetic on the key's 32-bit words (the PSN's
    /// left out): cheap in BPF, where reading the addresses byte by byte cost ~150 instructions.
    #[inline(always)]
    pub fn fingerprint(&self) -> u64 {
        // SAFETY: PendingKey is repr(C), 64 bytes of fields with no implicit padding (`_pad` is
        // a field, always zero), and at least 4-byte aligned (both asserted below).
        let w = unsafe { &*(self as *const PendingKey).cast::<[u32; 16]>() };
        let pair = |i: usize, j: usize| u64::from(w[i]) | (u64::from(w[j]) << 32);
        // Words: requester 0-3, responder 4-7, ifindex 8, PSN 9, outer source 10-13, mirror
        // ID 14, encapsulation (and `_pad`) 15.
        let mut h = MUL_B;
        h = mix(h, pair(0, 1));
        h = mix(h, pair(2, 3));
        h = mix(h, pair(4, 5));
        h = mix(h, pair(6, 7));
        h = mix(h, pair(8, 15));
        h = mix(h, pair(10, 11));
        h = mix(h, pair(12, 13));
        h = mix(h, u64::from(w[14]));
        h ^= h >> 32;
        h = h.wrapping_mul(MUL_B);
        h ^= h >> 29;
        h + u64::from(h == 0)
    }
}

/// `PendingKey::fingerprint` reads the key as sixteen `u32`s, the PSN the tenth.
const _: () = assert!(
    core::mem::align_of::<PendingKey>() >= 4
        && core::mem::offset_of!(PendingKey, psn) == 9 * 4
        && core::mem::offset_of!(PendingKey, ifindex) == 8 * 4
        && core::mem::offset_of!(PendingKey, outer_src) == 10 * 4
        && core::mem::offset_of!(PendingKey, mirror_id) == 14 * 4
        && core::mem::offset_of!(PendingKey, encap) == 15 * 4
);

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingValue {
    pub ts_ns: u64,
    /// The request's destination QP (the responder's QP).
    pub dst_qp: u32,
    /// Direction the request was seen in.
    pub direction: u8,
    pub _pad: [u8; 3],
}
assert_size!(PendingValue, 16);

/// Sets of the table of timestamped requests, a power of two: the kernel's `STAMPS` array and
/// the engine's table both hold this many, so a capture and a live run keep the same requests.
/// 32,768 sets of 2 ways: 65,536 requests in 2 MiB (64 bytes a set), as many as the engine's
/// bounded hash map held; at 1,000 QPs a set is shared by two requests far less often than an
/// answer comes back.
pub const PENDING_SETS: u32 = 1 << 15;
/// Slots of a set: two 32-byte slots make a 64-byte set, one cache line.
pub const PENDING_WAYS: usize = 2;
/// A request that waited this long is taken for unanswered (its ACK was coalesced into a later
/// one, lost, or not seen): pushing it out of its set is not counted in `pending_full`. The
/// histograms' last bound; an answer after it still matches while the request is in the table.
pub const PENDING_STALE_NS: u64 = 1_000_000_000;

/// One timestamped request in the table: the fingerprint of its key (all of [`PendingKey`] but
/// the PSN, [`PendingKey::fingerprint`]; 0: the slot is empty), its PSN and what the answer's
/// sample needs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingSlot {
    pub fingerprint: u64,
    pub psn: u32,
    pub _pad: u32,
    pub value: PendingValue,
}
assert_size!(PendingSlot, 32);

/// One set of the table: the requests whose key and PSN hash to it ([`pending_set_index`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingSet {
    pub ways: [PendingSlot; PENDING_WAYS],
}
assert_size!(PendingSet, 64);

const EMPTY_SLOT: PendingSlot = PendingSlot {
    fingerprint: 0,
    psn: 0,
    _pad: 0,
    value: PendingValue {
        ts_ns: 0,
        dst_qp: 0,
        direction: 0,
        _pad: [0; 3],
    },
};

/// Multipliers of the key hash (odd 64-bit constants with well-spread bits).
const MUL_A: u64 = 0x9E37_79B9_7F4A_7C15;
const MUL_B: u64 = 0xBF58_476D_1CE4_E5B9;

/// One 64-bit word into the hash: xor, multiply, rotate (the rotation brings the high bits a
/// multiplication leaves alone back down for the next word).
#[inline(always)]
fn mix(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(MUL_A).rotate_left(29)
}

/// The set of a request whose key has `fingerprint` and whose PSN is `psn`, in a table of
/// `sets` sets (a power of two). The PSN is part of it: the key holds no QP, so every request
/// between two hosts shares one fingerprint, and without the PSN they would all share one set.
/// The high half of a product: every bit of the PSN reaches every bit of the index.
#[inline(always)]
pub fn pending_set_index(fingerprint: u64, psn: u32, sets: u32) -> u32 {
    (((fingerprint ^ u64::from(psn)).wrapping_mul(MUL_B) >> 32) as u32) & sets.wrapping_sub(1)
}

impl PendingSet {
    pub const fn zeroed() -> PendingSet {
        PendingSet {
            ways: [EMPTY_SLOT; PENDING_WAYS],
        }
    }

    /// Keep `value`, the request with `fingerprint` and `psn`. The same request already
    /// waiting keeps its first timestamp (a duplicate or resent copy); else an empty slot takes
    /// it, else the slot of the oldest request, which is pushed out: [`Stored::Evicted`] when it
    /// waited less than [`PENDING_STALE_NS`] (its answer could still come: `pending_full`),
    /// [`Stored::Replaced`] when older (taken for unanswered, not counted).
    #[inline(always)]
    pub fn insert(&mut self, fingerprint: u64, psn: u32, value: &PendingValue) -> Stored {
        let [a, b] = &mut self.ways;
        if (a.fingerprint == fingerprint && a.psn == psn)
            || (b.fingerprint == fingerprint && b.psn == psn)
        {
            return Stored::Present;
        }
        let (slot, stored) = if a.fingerprint == 0 {
            (a, Stored::Added)
        } else if b.fingerprint == 0 {
            (b, Stored::Added)
        } else {
            let oldest = if a.value.ts_ns <= b.value.ts_ns { a } else { b };
            let stored = if value.ts_ns.saturating_sub(oldest.value.ts_ns) < PENDING_STALE_NS {
                Stored::Evicted
            } else {
                Stored::Replaced
            };
            (oldest, stored)
        };
        slot.psn = psn;
        slot.value = *value;
        // Last, so that a slot is whole before it can match (in program order; the kernel's
        // other CPUs get no such promise, see `take`).
        slot.fingerprint = fingerprint;
        stored
    }

    /// Remove and return the request with `fingerprint` and `psn`, if it waits here.
    ///
    /// Not atomic: BPF has no compare-and-exchange on 5.10. Two CPUs that take the same slot at
    /// the same instant may both find it and both report a sample: that takes two copies of one
    /// answer (same interface, mirror source and PSN: a duplicated ACK, say) processed on two
    /// CPUs within the same few nanoseconds, which RSS makes rare by steering one flow's frames
    /// to one queue. Otherwise the first clears the slot and the second finds nothing.
    /// Counters stay exact: `pending_full` is counted by the inserting CPU, once per insert
    /// that overwrote a live request, whatever a concurrent take does.
    #[inline(always)]
    pub fn take(&mut self, fingerprint: u64, psn: u32) -> Option<PendingValue> {
        for slot in self.ways.iter_mut() {
            if slot.fingerprint == fingerprint && slot.psn == psn {
                let value = slot.value;
                slot.fingerprint = 0;
                return Some(value);
            }
        }
        None
    }

    /// Requests waiting in this set.
    pub fn waiting(&self) -> usize {
        self.ways.iter().filter(|s| s.fingerprint != 0).count()
    }
}

/// Buckets per decade of [`LatencyHist`]: bounds 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7,
/// 8 times a power of ten. No two neighbours are more than 1.25 apart, and every 1-2-5 bound of
/// the classic Prometheus buckets is one of them.
const MANTISSAS: [u64; 13] = [
    100, 125, 150, 175, 200, 250, 300, 350, 400, 500, 600, 700, 800,
];
/// Decades covered with 13 buckets each: 100 ns .. 1 s.
const DECADES: usize = 7;
/// Upper bounds (ns) of the histogram's buckets but the last: 100 ns, 125 ns, ..., 800 ms, 1 s.
/// Bucket `i` holds samples in `(HIST_BOUNDS_NS[i-1], HIST_BOUNDS_NS[i]]` (bucket 0 from 0),
/// and the last bucket everything above 1 s.
pub const HIST_BOUNDS_NS: [u64; DECADES * 13 + 1] = {
    let mut b = [0u64; DECADES * 13 + 1];
    let mut scale = 1;
    let mut d = 0;
    while d < DECADES {
        let mut m = 0;
        while m < 13 {
            b[d * 13 + m] = MANTISSAS[m] * scale;
            m += 1;
        }
        scale *= 10;
        d += 1;
    }
    b[DECADES * 13] = 1_000_000_000;
    b
};
/// Buckets of a [`LatencyHist`]: one per bound, and one above the last.
pub const HIST_BUCKETS: usize = HIST_BOUNDS_NS.len() + 1;

/// The bounds padded to a power of two with `u64::MAX`, for a branch-free binary search of
/// seven fixed steps (the kernel's loop is unrolled, each step one compare).
const SEARCH: [u64; 128] = {
    let mut t = [u64::MAX; 128];
    let mut i = 0;
    while i < HIST_BOUNDS_NS.len() {
        t[i] = HIST_BOUNDS_NS[i];
        i += 1;
    }
    t
};

/// The bucket of a sample of `ns`: the number of bounds below it.
#[inline(always)]
pub fn hist_bucket(ns: u64) -> usize {
    let mut i = 0;
    let mut step = 64;
    while step > 0 {
        // Masked: provably inside the table, for the compiler and the verifier.
        if ns > SEARCH[(i + step - 1) & 127] {
            i += step;
        }
        step >>= 1;
    }
    i
}

/// The range of samples bucket `i` holds: `(lo, hi]`, with `lo` = 0 for the first bucket and
/// `hi` = `u64::MAX` for the last.
pub fn hist_bucket_range(i: usize) -> (u64, u64) {
    let lo = if i == 0 { 0 } else { HIST_BOUNDS_NS[i - 1] };
    (lo, HIST_BOUNDS_NS.get(i).copied().unwrap_or(u64::MAX))
}

/// The latency samples of one request flow as the kernel keeps them (docs/metrics.md,
/// "Latency"): exact counts per bucket ([`HIST_BOUNDS_NS`]: 13 per decade from 100 ns to 1 s,
/// so a sample is known within a factor of 1.25), the exact sum, minimum and maximum, and the
/// samples above the `--rtt-alert-us` threshold. User space merges what a bucket gained since
/// its last read into the flow's quantile sketch.
///
/// Counts are u32 atomic adds, exact with several CPUs on one flow as long as a bucket gains
/// fewer than 2^32 samples between two reads (user space takes differences modulo 2^32); u16
/// would wrap within one report tick at a million answers a second. The minimum, maximum and
/// first alert sample are plain stores (BPF has no atomic min on 5.10): two CPUs sampling the
/// same flow in the same instant may keep the second-best of the two.
///
/// 432 bytes, in a map of its own rather than in [`crate::FlowStats`]: only flows with samples
/// (request flows) take one, the preallocated flow table and its per-tick read stay as they
/// were, and the data packet's lines of the flow record are untouched.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyHist {
    /// Sum of the samples, ns.
    pub sum_ns: u64,
    /// `!min`: the largest `!sample`, so that an all-zero (new) entry holds no minimum.
    pub min_inv: u64,
    pub max_ns: u64,
    /// Samples above the load-time alert threshold; the first one's time and value, and the
    /// latest one's time (the answer's time, same clock as `FlowStats::last_ns`).
    pub over: u64,
    pub over_first_ts: u64,
    pub over_first_ns: u64,
    pub over_last_ts: u64,
    pub buckets: [u32; HIST_BUCKETS],
    pub _pad: u32,
}
assert_size!(LatencyHist, 432);

impl LatencyHist {
    pub const fn zeroed() -> LatencyHist {
        LatencyHist {
            sum_ns: 0,
            min_inv: 0,
            max_ns: 0,
            over: 0,
            over_first_ts: 0,
            over_first_ns: 0,
            over_last_ts: 0,
            buckets: [0; HIST_BUCKETS],
            _pad: 0,
        }
    }

    /// One sample of `ns` ns, answered at `now`; `alert_ns` is the alert threshold
    /// (`u64::MAX`: none).
    #[inline(always)]
    pub fn add(&mut self, ns: u64, alert_ns: u64, now: u64) {
        if let Some(bucket) = self.buckets.get_mut(hist_bucket(ns)) {
            atomic::add32(bucket, 1);
        }
        atomic::add(&mut self.sum_ns, ns);
        if !ns > self.min_inv {
            self.min_inv = !ns;
        }
        if ns > self.max_ns {
            self.max_ns = ns;
        }
        if ns > alert_ns {
            if self.over == 0 {
                self.over_first_ts = now;
                self.over_first_ns = ns;
            }
            atomic::add(&mut self.over, 1);
            self.over_last_ts = now;
        }
    }

    /// Samples held.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|&n| u64::from(n)).sum()
    }

    /// The smallest sample (None without samples).
    pub fn min(&self) -> Option<u64> {
        (self.buckets.iter().any(|&n| n > 0)).then_some(!self.min_inv)
    }

    /// What each bucket gained since `earlier`, a read of the same entry (modulo 2^32).
    pub fn growth(&self, earlier: &LatencyHist) -> [u32; HIST_BUCKETS] {
        core::array::from_fn(|i| self.buckets[i].wrapping_sub(earlier.buckets[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_rise_by_at_most_a_quarter_and_hold_every_classic_bound() {
        assert_eq!(HIST_BUCKETS, 93);
        assert_eq!(HIST_BOUNDS_NS[0], 100);
        assert_eq!(HIST_BOUNDS_NS[HIST_BOUNDS_NS.len() - 1], 1_000_000_000);
        for w in HIST_BOUNDS_NS.windows(2) {
            assert!(w[0] < w[1] && w[1] * 4 <= w[0] * 5, "{w:?}");
        }
        // The Prometheus buckets (1-2-5 from 1 us to 100 ms), and every 1-2-5 value in range.
        let mut v = 100;
        while v <= 1_000_000_000 {
            for m in [1, 2, 5] {
                if v * m <= 1_000_000_000 {
                    assert!(HIST_BOUNDS_NS.contains(&(v * m)), "{}", v * m);
                }
            }
            v *= 10;
        }
    }

    #[test]
    fn each_sample_lands_in_the_bucket_whose_range_holds_it() {
        let around = HIST_BOUNDS_NS.iter().flat_map(|&b| [b - 1, b, b + 1]);
        for ns in [0, 1, 99, u64::MAX, 1_000_000_001]
            .into_iter()
            .chain(around)
        {
            let i = hist_bucket(ns);
            let (lo, hi) = hist_bucket_range(i);
            assert!(i < HIST_BUCKETS, "{ns}");
            assert!(
                (i == 0 || lo < ns) && ns <= hi,
                "{ns} in bucket {i} ({lo}, {hi}]"
            );
        }
        assert_eq!(hist_bucket(100), 0);
        assert_eq!(hist_bucket(101), 1);
        assert_eq!(hist_bucket(1_000_000_000), HIST_BUCKETS - 2);
        assert_eq!(hist_bucket(1_000_000_001), HIST_BUCKETS - 1);
    }

    #[test]
    fn counts_sum_extremes_and_alerts_are_exact_and_growth_wraps() {
        let mut h = LatencyHist::zeroed();
        assert_eq!((h.count(), h.min()), (0, None));
        for (i, ns) in [5_000u64, 0, 7_000, 2_000_000_000].into_iter().enumerate() {
            h.add(ns, 6_000, 10 + i as u64);
        }
        assert_eq!(h.count(), 4);
        assert_eq!(h.sum_ns, 2_000_012_000);
        assert_eq!((h.min(), h.max_ns), (Some(0), 2_000_000_000));
        assert_eq!(
            (h.over, h.over_first_ts, h.over_first_ns, h.over_last_ts),
            (2, 12, 7_000, 13)
        );
        let earlier = h;
        h.buckets[hist_bucket(5_000)] = u32::MAX;
        let mut later = h;
        later.add(5_000, u64::MAX, 20);
        later.add(5_000, u64::MAX, 21);
        let grown = later.growth(&h);
        assert_eq!(grown[hist_bucket(5_000)], 2, "across the u32 wrap");
        assert_eq!(grown.iter().map(|&n| u64::from(n)).sum::<u64>(), 2);
        assert_eq!(h.growth(&earlier)[hist_bucket(7_000)], 0);
    }

    fn key(requester: u8, psn: u32) -> PendingKey {
        let mut k = PendingKey::zeroed();
        k.requester = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, requester,
        ];
        k.responder = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 200,
        ];
        k.ifindex = 3;
        k.psn = psn;
        k
    }

    fn value(ts_ns: u64) -> PendingValue {
        PendingValue {
            ts_ns,
            dst_qp: 0x12,
            direction: 1,
            _pad: [0; 3],
        }
    }

    #[test]
    fn the_request_and_its_answer_find_the_same_set_and_the_psn_spreads_them() {
        let flow = crate::FlowKey {
            src_ip: key(1, 0).requester,
            dst_ip: key(1, 0).responder,
            ifindex: 3,
            ..crate::FlowKey::zeroed()
        };
        // The answer's flow goes the other way; observe fills its key with the roles swapped.
        let back = crate::FlowKey {
            src_ip: flow.dst_ip,
            dst_ip: flow.src_ip,
            ..flow
        };
        let (mut request, mut answer) = (PendingKey::zeroed(), PendingKey::zeroed());
        request.fill(&flow, flow.src_ip, flow.dst_ip, 77);
        answer.fill(&back, back.dst_ip, back.src_ip, 77);
        assert_eq!(request, key(1, 77));
        let fp = request.fingerprint();
        assert_ne!(fp, 0);
        assert_eq!(fp, answer.fingerprint());
        // The PSN is not in the fingerprint, everything else is.
        assert_eq!(fp, key(1, 78).fingerprint());
        let mut other = key(1, 77);
        other.mirror_id = 1;
        assert_ne!(fp, other.fingerprint());
        other = key(1, 77);
        other.encap = 1;
        assert_ne!(fp, other.fingerprint());
        // Pinned: the kernel and the engine compute it with the same code; a change of hash
        // is deliberate.
        assert_eq!(pending_set_index(fp, 77, PENDING_SETS), 13302);
        // One flow's PSNs spread over the sets: 4,096 consecutive ones fill nearly as many
        // sets as random picks would (4,096 of 32,768: about 3,850).
        let mut used = [false; PENDING_SETS as usize];
        for psn in 0..4096 {
            used[pending_set_index(fp, psn, PENDING_SETS) as usize] = true;
        }
        let used = used.iter().filter(|&&u| u).count();
        assert!(used > 3_700, "{used}");
        assert_eq!(pending_set_index(fp, 77, 1), 0);
    }

    #[test]
    fn a_request_keeps_its_first_timestamp_and_is_taken_once() {
        let mut set = PendingSet::zeroed();
        let fp = key(1, 5).fingerprint();
        assert_eq!(set.insert(fp, 5, &value(100)), Stored::Added);
        assert_eq!(set.insert(fp, 5, &value(200)), Stored::Present);
        assert_eq!(set.waiting(), 1);
        assert_eq!(set.take(fp, 6), None);
        assert_eq!(set.take(fp, 5), Some(value(100)));
        assert_eq!(set.take(fp, 5), None);
        assert_eq!(set.waiting(), 0);
    }

    #[test]
    fn keys_with_the_same_psn_do_not_match_each_other() {
        let mut set = PendingSet::zeroed();
        let (a, b) = (key(1, 9).fingerprint(), key(2, 9).fingerprint());
        assert_ne!(a, b);
        assert_eq!(set.insert(a, 9, &value(100)), Stored::Added);
        assert_eq!(set.take(b, 9), None);
        assert_eq!(set.insert(b, 9, &value(150)), Stored::Added);
        assert_eq!(set.take(b, 9), Some(value(150)));
        assert_eq!(set.take(a, 9), Some(value(100)));
        assert_eq!(set.waiting(), 0);
    }

    #[test]
    fn a_full_set_pushes_out_its_oldest_request() {
        let fp = key(1, 0).fingerprint();
        for (first, second) in [(100, 200), (200, 100)] {
            let mut set = PendingSet::zeroed();
            set.insert(fp, 1, &value(first));
            set.insert(fp, 2, &value(second));
            let oldest = if first < second { 1 } else { 2 };
            assert_eq!(set.insert(fp, 3, &value(300)), Stored::Evicted);
            assert_eq!(set.take(fp, oldest), None, "the oldest went");
            assert_eq!(set.take(fp, 3 - oldest), Some(value(first.max(second))));
            assert_eq!(set.take(fp, 3), Some(value(300)));
        }
        // An empty way is taken before anything is pushed out, wherever it is.
        let mut set = PendingSet::zeroed();
        set.insert(fp, 1, &value(100));
        set.insert(fp, 2, &value(200));
        set.take(fp, 1);
        assert_eq!(set.insert(fp, 3, &value(300)), Stored::Added);
        assert_eq!(set.waiting(), 2);
        // A request that waited past PENDING_STALE_NS goes without being counted.
        let now = 200 + PENDING_STALE_NS;
        assert_eq!(set.insert(fp, 4, &value(now - 1)), Stored::Evicted);
        assert_eq!(set.take(fp, 2), None);
        assert_eq!(
            set.insert(fp, 5, &value(300 + PENDING_STALE_NS)),
            Stored::Replaced
        );
        assert_eq!(set.take(fp, 3), None);
        assert_eq!(set.take(fp, 4), Some(value(now - 1)));
    }
}
