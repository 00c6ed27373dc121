//! Activity runs, kept in the flow record so that the kernel path can report training steps
//! (docs/metrics.md, "Training steps"): the current *data run* of a flow (its data packets with
//! no gap above [`RUN_GAP_NS`]: start, end, bytes, CE marks, retransmissions) and its current
//! *signal run* (its CNPs and NAKs, grouped by the same gap). When a packet starts a new run the
//! finished one travels as one ring-buffer event (observe.rs); a data run of fewer than
//! [`RUN_EVENT_MIN_PACKETS`] packets is only counted in the flow record (`runs_unsent`,
//! `run_bytes_unsent`), so that sparse traffic (every packet its own run) cannot make an event
//! per packet. The run still open is read from the flow record itself.
//!
//! The rule is the one the engine applies packet by packet on the capture path
//! (roce-observer/src/engine/steps.rs, `Steps::packet`): a data packet more than
//! [`RUN_GAP_NS`] after the run's end starts a new run, any other extends it.

use crate::assert_size;

/// A flow's data packets closer than this belong to one run (the 1 ms bin of the step series).
pub const RUN_GAP_NS: u64 = 1_000_000;

/// Data runs with fewer packets are not sent as events (counted in the flow record instead).
/// Bounds run events at one per 8 data packets whatever the traffic; a collective's burst per
/// QP and step is hundreds of packets and more.
pub const RUN_EVENT_MIN_PACKETS: u32 = 8;

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
    pub _pad: u32,
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
            _pad: 0,
        }
    }

    /// Whether a data packet at `now_ns` starts a new run, leaving this one finished.
    #[inline(always)]
    pub fn ends_before(&self, now_ns: u64) -> bool {
        self.packets != 0 && now_ns > self.end_ns.saturating_add(RUN_GAP_NS)
    }

    /// Whether the finished run is sent as an event (else counted in the flow record).
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
