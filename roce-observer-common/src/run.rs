//! Activity runs, kept per flow so that the kernel path can report training steps
//! (docs/metrics.md, "Training steps"): the current *data run* of a flow (its data packets with
//! no gap above [`RUN_GAP_NS`]: start, end, bytes, CE marks, retransmissions) and its current
//! *signal run* (its CNPs and NAKs, grouped by the same gap), both in the flow record. When a
//! packet starts a new run the finished one is kept: a data run of [`RUN_EVENT_MIN_PACKETS`]
//! packets or more in the flow's batch of finished runs ([`RunBatch`], not in the flow record:
//! a map of its own whose entry a flow gets with its first such run), which travels as one
//! ring-buffer record when it holds [`RUN_BATCH`] runs, so that bursty traffic (every burst a
//! run) sends at most one record per `RUN_BATCH * RUN_EVENT_MIN_PACKETS` data packets; a
//! shorter data run is only counted in the flow record (`runs_unsent`, `run_bytes_unsent`), so
//! that sparse traffic (every packet its own run) costs no record at all. A finished signal run
//! is one event (signals are rare). The runs of the batch not yet sent are read from the batch,
//! and the runs still open from the flow record.
//!
//! The rule is the one the engine applies packet by packet on the capture path
//! (roce-observer/src/engine/steps.rs, `Steps::packet`): a data packet more than
//! [`RUN_GAP_NS`] after the run's end starts a new run, any other extends it.

use crate::{Event, EventKind, FlowKey, assert_size};

/// A flow's data packets closer than this belong to one run (the 1 ms bin of the step series).
pub const RUN_GAP_NS: u64 = 1_000_000;

/// Data runs with fewer packets are not batched (counted in the flow record instead). With
/// [`RUN_BATCH`], bounds run records at one per 128 data packets whatever the traffic; a
/// collective's burst per QP and step is hundreds of packets and more.
pub const RUN_EVENT_MIN_PACKETS: u32 = 8;

/// Finished data runs per record ([`RunBatch`]): a power of two (a slot is a run number's low bits).
pub const RUN_BATCH: usize = 16;
const _: () = assert!(RUN_BATCH.is_power_of_two());

/// Data packets of one flow with no gap above [`RUN_GAP_NS`]; `packets == 0`: no run yet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataRun {
    /// Times of the first and the last packet (the flow record's clock), ns.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Frame bytes.
    pub bytes: u64,
    pub packets: u32,
    /// Packets marked CE, and retransmitted packets (as counted in `retransmits`).
    pub ce: u32,
    pub retransmits: u32,
    /// In a [`RunBatch`]: the run's number among the flow's batched runs (`RunBatch::seq` when
    /// it was added, wrapping). 0 in the open run.
    pub seq: u32,
}
assert_size!(DataRun, 40);

impl DataRun {
    pub const fn zeroed() -> DataRun {
        DataRun {
            start_ns: 0,
            end_ns: 0,
            bytes: 0,
            packets: 0,
            ce: 0,
            retransmits: 0,
            seq: 0,
        }
    }

    /// Whether a data packet at `now_ns` starts a new run, leaving this one finished.
    #[inline(always)]
    pub fn ends_before(&self, now_ns: u64) -> bool {
        self.packets != 0 && now_ns > self.end_ns.saturating_add(RUN_GAP_NS)
    }

    /// Whether the finished run goes to the batch (else counted in the flow record).
    #[inline(always)]
    pub fn sent(&self) -> bool {
        self.packets >= RUN_EVENT_MIN_PACKETS
    }

    /// Add a data packet at `now_ns`: it extends the run, or starts a new one when
    /// [`DataRun::ends_before`] (the caller deals with the finished run first). Field by field:
    /// in the kernel this is the flow map's value, and a whole new value would be built on
    /// the BPF stack and copied.
    #[inline(always)]
    pub fn add(&mut self, now_ns: u64, bytes: u32, ce: bool, retransmit: bool) {
        if self.packets == 0 || self.ends_before(now_ns) {
            self.start_ns = now_ns;
            self.end_ns = now_ns;
            self.bytes = bytes as u64;
            self.packets = 1;
            self.ce = ce as u32;
            self.retransmits = retransmit as u32;
            return;
        }
        // Packets processed out of time order (several CPUs) do not move the end back.
        if now_ns > self.end_ns {
            self.end_ns = now_ns;
        }
        self.bytes += bytes as u64;
        self.packets = self.packets.saturating_add(1);
        self.ce = self.ce.saturating_add(ce as u32);
        self.retransmits = self.retransmits.saturating_add(retransmit as u32);
    }
}

/// A flow's finished data runs of [`RUN_EVENT_MIN_PACKETS`] packets or more, in a map of their
/// own keyed by the flow (the kernel's `RUN_BATCHES`; an entry made with the flow's first such run):
/// run number `n` (counted from 0 per flow, wrapping) in slot `n % RUN_BATCH`, tagged with `n`.
/// When a run fills the batch (its count a multiple of [`RUN_BATCH`]) the batch itself is sent
/// as one ring-buffer record (the kernel copies it from the map value with one helper call):
/// the record is what counts for those runs. The runs added since (numbers `sent_from()..seq()`)
/// are the batch's unsent part, which user space reads from the map on its tick
/// ([`RunBatch::unsent`]) and replaces on the next read, until the record that carries them
/// arrives. A record the full ring buffer loses is counted with the short runs (`runs_unsent`,
/// `run_bytes_unsent`): its runs' bytes stay in the step series, untimed.
///
/// The head is an [`Event`] of kind [`EventKind::DataRun`] of the flow (written when the entry
/// is made, [`RunBatch::init`]), and, written when the batch fills: time = the first
/// run's start, `c` = the first run's number, `d` = [`RUN_BATCH`]. Between records it keeps the
/// batch's counters: `a` = runs added so far (the next run's number), `b` = bytes of the runs
/// added since the batch was last full (in a record: of its runs). Written field by field and
/// as little as possible when a batch fills: the verifier walks that code once per state that
/// reaches it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunBatch {
    pub head: Event,
    pub runs: [DataRun; RUN_BATCH],
}
assert_size!(RunBatch, 128 + 40 * RUN_BATCH);

impl RunBatch {
    pub const fn zeroed() -> RunBatch {
        RunBatch {
            head: Event::zeroed(),
            runs: [DataRun::zeroed(); RUN_BATCH],
        }
    }

    /// The head's kind and flow, in a new (all zero) batch of `flow`.
    #[inline(always)]
    pub fn init(&mut self, flow: &FlowKey) {
        self.head.kind = EventKind::DataRun as u32;
        self.head.flow = *flow;
    }

    /// Add the finished run `run` of `flow` to this batch (initialised first when new, all
    /// zero): [`RunBatch::push`], and when that fills it, the record, handed to `send` as it is
    /// (the kernel copies it from the map value), which says whether it was sent.
    #[inline(always)]
    pub fn add(
        &mut self,
        flow: &FlowKey,
        run: &DataRun,
        send: impl FnOnce(&RunBatch) -> bool,
    ) -> RunAdded {
        if self.head.kind == 0 {
            self.init(flow);
        }
        if !self.push(run) {
            return RunAdded::Kept;
        }
        self.seal();
        let sent = send(self);
        let bytes = self.restart();
        if sent {
            RunAdded::Sent
        } else {
            RunAdded::Lost { bytes }
        }
    }

    /// Runs added so far (wrapping): the next run's number.
    pub const fn seq(&self) -> u32 {
        self.head.a as u32
    }

    /// Add the finished run `run` (field by field, tag first: in the kernel both are map
    /// values). True when it fills the batch, which is then to be sent: [`RunBatch::seal`],
    /// the record, [`RunBatch::restart`].
    #[inline(always)]
    pub fn push(&mut self, run: &DataRun) -> bool {
        let seq = self.head.a as u32;
        let slot = &mut self.runs[seq as usize & (RUN_BATCH - 1)];
        slot.seq = seq;
        slot.start_ns = run.start_ns;
        slot.end_ns = run.end_ns;
        slot.bytes = run.bytes;
        slot.packets = run.packets;
        slot.ce = run.ce;
        slot.retransmits = run.retransmits;
        self.head.b += run.bytes;
        let next = seq.wrapping_add(1);
        self.head.a = next as u64;
        next as usize & (RUN_BATCH - 1) == 0
    }

    /// Complete the head of the record of this full batch (its slots are in run order: a full
    /// batch starts at slot 0).
    #[inline(always)]
    pub fn seal(&mut self) {
        self.head.ts_ns = self.runs[0].start_ns;
        self.head.c = (self.head.a as u32).wrapping_sub(RUN_BATCH as u32);
        self.head.d = RUN_BATCH as u32;
    }

    /// After the record: the bytes of its runs, the count started again for the next batch.
    #[inline(always)]
    pub fn restart(&mut self) -> u64 {
        let bytes = self.head.b;
        self.head.b = 0;
        bytes
    }

    /// The number of the first run not yet sent: the batch's unsent part is
    /// `sent_from()..seq()`.
    pub const fn sent_from(&self) -> u32 {
        self.seq() & !(RUN_BATCH as u32 - 1)
    }

    /// The runs added since the last full batch was sent, oldest first; a slot whose tag is not
    /// its run's number (a read that raced with the kernel rewriting it) is left out.
    pub fn unsent(&self) -> impl Iterator<Item = &DataRun> {
        let from = self.sent_from();
        (0..self.seq().wrapping_sub(from)).filter_map(move |i| {
            let run = &self.runs[i as usize];
            (run.seq == from.wrapping_add(i) && run.packets > 0).then_some(run)
        })
    }

    /// A ring-buffer record of finished data runs (its head an [`EventKind::DataRun`] event):
    /// length-checked, unaligned read, as [`Event::from_bytes`]. `None` for any other record.
    pub fn from_bytes(buf: &[u8]) -> Option<RunBatch> {
        let head = Event::from_bytes(buf)?;
        if head.kind() != Some(EventKind::DataRun) || buf.len() < core::mem::size_of::<RunBatch>() {
            return None;
        }
        // SAFETY: the length was checked above; RunBatch is plain old data (integers only, no
        // padding), so every bit pattern is valid, and read_unaligned tolerates any alignment.
        Some(unsafe { core::ptr::read_unaligned(buf.as_ptr().cast::<RunBatch>()) })
    }
}

/// What became of a finished data run given to its flow's batch (`Tables::add_run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAdded {
    /// In the batch, not yet sent.
    Kept,
    /// It filled the batch, whose record was sent.
    Sent,
    /// It filled the batch, whose record the full ring buffer lost: the caller counts the
    /// batch's [`RUN_BATCH`] runs and their `bytes` in the flow record.
    Lost { bytes: u64 },
    /// The flow has no batch and there is no room for one: the caller counts the run in the
    /// flow record (and in `map_full`).
    NoRoom,
}

/// CNPs and NAKs a flow carried with no gap above [`RUN_GAP_NS`]; `cnp + naks == 0`: none yet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignalRun {
    pub start_ns: u64,
    pub end_ns: u64,
    pub cnp: u32,
    pub naks: u32,
}
assert_size!(SignalRun, 24);

impl SignalRun {
    pub const fn zeroed() -> SignalRun {
        SignalRun {
            start_ns: 0,
            end_ns: 0,
            cnp: 0,
            naks: 0,
        }
    }

    /// Whether a CNP or NAK at `now_ns` starts a new run, leaving this one finished.
    #[inline(always)]
    pub fn ends_before(&self, now_ns: u64) -> bool {
        (self.cnp | self.naks) != 0 && now_ns > self.end_ns.saturating_add(RUN_GAP_NS)
    }

    /// Add a CNP (`cnp`) or a NAK at `now_ns`, as [`DataRun::add`].
    #[inline(always)]
    pub fn add(&mut self, now_ns: u64, cnp: bool) {
        if (self.cnp | self.naks) == 0 || self.ends_before(now_ns) {
            self.start_ns = now_ns;
            self.end_ns = now_ns;
            self.cnp = cnp as u32;
            self.naks = !cnp as u32;
            return;
        }
        if now_ns > self.end_ns {
            self.end_ns = now_ns;
        }
        if cnp {
            self.cnp = self.cnp.saturating_add(1);
        } else {
            self.naks = self.naks.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate alloc;
    use alloc::{vec, vec::Vec};

    use super::*;

    const MS: u64 = 1_000_000;

    /// Feed packet times; return the finished runs (start, end, packets) and the open one.
    fn runs(times: &[u64]) -> ([(u64, u64, u32); 8], usize, DataRun) {
        let mut run = DataRun::zeroed();
        let mut done = [(0, 0, 0); 8];
        let mut n = 0;
        for &t in times {
            if run.ends_before(t) {
                done[n] = (run.start_ns, run.end_ns, run.packets);
                n += 1;
            }
            run.add(t, 100, false, false);
        }
        (done, n, run)
    }

    #[test]
    fn a_gap_above_one_ms_starts_a_new_run() {
        // Exactly 1 ms after the end still extends the run; 1 ms + 1 ns starts a new one.
        let (done, n, open) = runs(&[10, 10 + MS, 10 + 2 * MS, 10 + 3 * MS + 1, 10 + 3 * MS + 5]);
        assert_eq!(n, 1);
        assert_eq!(done[0], (10, 10 + 2 * MS, 3));
        assert_eq!(
            (open.start_ns, open.end_ns, open.packets, open.bytes),
            (10 + 3 * MS + 1, 10 + 3 * MS + 5, 2, 200)
        );
    }

    #[test]
    fn counts_ce_and_retransmits_and_restarts_them() {
        let mut run = DataRun::zeroed();
        assert!(!run.ends_before(0), "no run yet: nothing finishes");
        run.add(0, 1000, true, false);
        run.add(100, 1000, false, true);
        run.add(200, 1000, true, true);
        assert_eq!(
            (run.ce, run.retransmits, run.bytes, run.packets),
            (2, 2, 3000, 3)
        );
        assert!(!run.sent(), "3 packets: counted, not sent");
        run.add(50, 10, false, false);
        assert_eq!(
            run.end_ns, 200,
            "an older packet does not move the end back"
        );
        assert!(run.ends_before(200 + MS + 1));
        run.add(5 * MS, 64, false, false);
        assert_eq!(
            (
                run.start_ns,
                run.end_ns,
                run.bytes,
                run.packets,
                run.ce,
                run.retransmits
            ),
            (5 * MS, 5 * MS, 64, 1, 0, 0)
        );
        for i in 1..RUN_EVENT_MIN_PACKETS as u64 {
            run.add(5 * MS + i, 64, false, false);
        }
        assert!(run.sent());
    }

    #[test]
    fn sparse_packets_are_one_run_each() {
        let times: [u64; 6] = core::array::from_fn(|i| i as u64 * 2 * MS);
        let (done, n, open) = runs(&times);
        assert_eq!(n, 5);
        assert!(done[..n].iter().all(|r| r.0 == r.1 && r.2 == 1));
        assert_eq!(open.start_ns, 10 * MS);
    }

    /// A run of `packets` packets starting at `start` ms (1 ms long, 100 bytes a packet).
    fn run_at(start: u64, packets: u32) -> DataRun {
        DataRun {
            start_ns: start * MS,
            end_ns: start * MS + MS,
            bytes: 100 * packets as u64,
            packets,
            ce: 1,
            retransmits: 2,
            seq: 0,
        }
    }

    /// Runs go to the batch in order; the sixteenth fills it (to be sent), and the unsent part
    /// is what came after the last full batch, each run tagged with its number.
    #[test]
    fn a_batch_fills_every_sixteen_runs_and_its_unsent_part_follows() {
        let mut b = RunBatch::zeroed();
        b.init(&FlowKey {
            dst_qp: 7,
            ..FlowKey::zeroed()
        });
        assert_eq!(b.unsent().count(), 0);
        let mut full = Vec::new();
        for i in 0..(2 * RUN_BATCH as u64 + 5) {
            if b.push(&run_at(10 * i, 8 + i as u32)) {
                full.push((i, b.sent_from()));
                // The record carries runs seq-16..seq, oldest in slot 0, and their bytes.
                b.seal();
                let rec = b;
                assert_eq!(
                    rec.head.body(),
                    Some(crate::EventBody::DataRuns {
                        first: b.seq() - RUN_BATCH as u32,
                        count: RUN_BATCH as u32,
                    })
                );
                assert_eq!(rec.head.flow.dst_qp, 7);
                assert_eq!(rec.head.ts_ns, rec.runs[0].start_ns);
                for (k, r) in rec.runs.iter().enumerate() {
                    assert_eq!(r.seq, b.seq() - RUN_BATCH as u32 + k as u32);
                    assert_eq!(r.start_ns, 10 * r.seq as u64 * MS);
                }
                let bytes: u64 = rec.runs.iter().map(|r| r.bytes).sum();
                assert_eq!(rec.head.b, bytes);
                assert_eq!(b.restart(), bytes);
                assert_eq!((b.head.b, b.seq()), (0, rec.seq()));
            }
        }
        assert_eq!(full, [(15, 16), (31, 32)]);
        let unsent: Vec<(u32, u64, u32)> = b
            .unsent()
            .map(|r| (r.seq, r.start_ns / MS, r.packets))
            .collect();
        assert_eq!(
            unsent,
            (32..37)
                .map(|n| (n, 10 * n as u64, 8 + n))
                .collect::<Vec<_>>()
        );
        let first = b.unsent().next().copied().expect("unsent");
        assert_eq!(
            (first.end_ns - first.start_ns, first.ce, first.retransmits),
            (MS, 1, 2)
        );
    }

    /// `add` on a new (all zero) batch makes its head the flow's; runs are kept until one fills
    /// the batch, whose record is handed over as it is; a record not sent gives back its runs'
    /// bytes for the flow record, and the batch goes on from the next number either way.
    #[test]
    fn add_initialises_a_new_batch_and_hands_over_full_ones() {
        let flow = FlowKey {
            dst_qp: 9,
            ..FlowKey::zeroed()
        };
        let mut b = RunBatch::zeroed();
        let mut sent = Vec::new();
        let mut outcomes = Vec::new();
        for i in 0..(2 * RUN_BATCH as u64) {
            let ok = i < RUN_BATCH as u64;
            outcomes.push(b.add(&flow, &run_at(i, 10), |full| {
                sent.push(*full);
                ok
            }));
        }
        assert_eq!(
            (b.head.kind(), b.head.flow),
            (Some(EventKind::DataRun), flow)
        );
        let kept = RUN_BATCH - 1;
        assert!(outcomes[..kept].iter().all(|o| *o == RunAdded::Kept));
        assert_eq!(outcomes[kept], RunAdded::Sent);
        assert!(
            outcomes[kept + 1..2 * kept + 1]
                .iter()
                .all(|o| *o == RunAdded::Kept)
        );
        assert_eq!(
            outcomes[2 * kept + 1],
            RunAdded::Lost {
                bytes: 1000 * RUN_BATCH as u64
            }
        );
        assert_eq!(sent.len(), 2);
        assert_eq!(
            sent[1].head.body(),
            Some(crate::EventBody::DataRuns {
                first: RUN_BATCH as u32,
                count: RUN_BATCH as u32
            })
        );
        assert_eq!((b.seq(), b.head.b, b.unsent().count()), (32, 0, 0));
    }

    /// A slot whose tag is not its run's number (the kernel rewriting it while user space
    /// reads) is left out of the unsent part; run numbers wrap.
    #[test]
    fn torn_slots_are_left_out_and_numbers_wrap() {
        let mut b = RunBatch::zeroed();
        b.head.a = u64::from(u32::MAX - 2);
        for i in 0..5 {
            b.push(&run_at(i, 9));
        }
        assert_eq!(b.seq(), 2);
        // u32::MAX - 2 is slot 13: the batch filled at u32::MAX (slot 15) and wrapped to 0.
        assert_eq!(b.sent_from(), 0);
        assert_eq!(b.unsent().map(|r| r.seq).collect::<Vec<_>>(), [0, 1]);
        b.runs[1].seq = 17;
        assert_eq!(b.unsent().map(|r| r.seq).collect::<Vec<_>>(), [0]);
        b.runs[0].packets = 0;
        assert_eq!(b.unsent().count(), 0);
    }

    /// A record written byte by byte at the offsets user space reads: the event head, then
    /// the runs, 40 bytes each (start, end, bytes, packets, CE, retransmits, number).
    #[test]
    fn a_runs_record_decodes_from_its_byte_layout() {
        let mut b = vec![0u8; core::mem::size_of::<RunBatch>()];
        b[0..8].copy_from_slice(&5_000u64.to_ne_bytes());
        b[8..12].copy_from_slice(&(EventKind::DataRun as u32).to_ne_bytes());
        b[48..52].copy_from_slice(&0x11u32.to_ne_bytes());
        b[96..100].copy_from_slice(&32u32.to_ne_bytes());
        b[100..104].copy_from_slice(&16u32.to_ne_bytes());
        for i in 0..RUN_BATCH {
            let o = 128 + 40 * i;
            let v = i as u64;
            b[o..o + 8].copy_from_slice(&(1000 + v).to_ne_bytes());
            b[o + 8..o + 16].copy_from_slice(&(2000 + v).to_ne_bytes());
            b[o + 16..o + 24].copy_from_slice(&((1u64 << 33) + v).to_ne_bytes());
            b[o + 24..o + 28].copy_from_slice(&(70_000 + i as u32).to_ne_bytes());
            b[o + 28..o + 32].copy_from_slice(&3u32.to_ne_bytes());
            b[o + 32..o + 36].copy_from_slice(&4u32.to_ne_bytes());
            b[o + 36..o + 40].copy_from_slice(&(32 + i as u32).to_ne_bytes());
        }
        let rec = RunBatch::from_bytes(&b).expect("a runs record");
        assert_eq!((rec.head.ts_ns, rec.head.flow.dst_qp), (5_000, 0x11));
        assert_eq!(
            rec.head.body(),
            Some(crate::EventBody::DataRuns {
                first: 32,
                count: 16
            })
        );
        assert_eq!(
            rec.runs[15],
            DataRun {
                start_ns: 1015,
                end_ns: 2015,
                bytes: (1 << 33) + 15,
                packets: 70_015,
                ce: 3,
                retransmits: 4,
                seq: 47,
            }
        );
        // Too short, or another kind: not a runs record (the event alone still decodes).
        assert_eq!(RunBatch::from_bytes(&b[..128]), None);
        b[8..12].copy_from_slice(&(EventKind::SignalRun as u32).to_ne_bytes());
        assert_eq!(RunBatch::from_bytes(&b), None);
        assert!(Event::from_bytes(&b).is_some());
    }

    #[test]
    fn signal_runs() {
        let mut s = SignalRun::zeroed();
        assert!(!s.ends_before(5 * MS));
        s.add(0, true);
        s.add(MS / 2, false);
        s.add(MS, true);
        assert_eq!((s.start_ns, s.end_ns, s.cnp, s.naks), (0, MS, 2, 1));
        assert!(!s.ends_before(2 * MS));
        assert!(s.ends_before(2 * MS + 1));
        s.add(3 * MS, false);
        assert_eq!(
            (s.start_ns, s.end_ns, s.cnp, s.naks),
            (3 * MS, 3 * MS, 0, 1)
        );
    }
}
