//! The kernel path's input to the lossless-class rules `pfc_before_ecn` and `ecn_at_low_load`
//! (docs/metrics.md, "Lossless class diagnosis"): per observation point (interface index, both
//! directions together, as the engine's lossless analysis keys its points) and priority, the
//! open congestion episode, the current load interval and exact counts, in one map entry
//! ([`LosslessState`]). A closed episode, and a closed load interval that had CE marks, is one
//! event each (`EventKind::LosslessEpisode`, `EventKind::LosslessLoad`): never one per packet.
//! User space reads the open ones and the counts from the map on its tick.
//!
//! The definitions are the engine's (roce-observer/src/engine/lossless.rs): an episode is a
//! burst of CE marks, CNPs and XOFFs each within [`EPISODE_QUIET_NS`] of the previous one (an
//! XOFF counting until its pause ends); a load interval is [`LOAD_INTERVAL_NS`] long, aligned
//! to multiples of it since the Unix epoch.

use crate::{assert_size, atomic::add};

/// The quiet period that ends a congestion episode (and a pause episode).
pub const EPISODE_QUIET_NS: u64 = 10_000_000;

/// Length of the load intervals the data rate of a point and priority is measured over.
pub const LOAD_INTERVAL_NS: u64 = 10_000_000;

/// Observation point and priority.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LosslessKey {
    pub ifindex: u32,
    pub priority: u8,
    pub _pad: [u8; 3],
}
assert_size!(LosslessKey, 8);

/// One point and priority. Times are kernel monotonic ns; 0 means none (the monotonic clock is
/// never 0 when a program runs). Counts are atomic adds (exact); the episode and interval
/// fields are plain stores, so two CPUs at an episode's or interval's edge at the same moment
/// may both close it (user space drops the second event) or lose one's first time or bytes
/// (docs/metrics.md says how little).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LosslessState {
    /// CE-marked data packets, CNPs (on the lossless priority) and ECT data packets.
    pub ce: u64,
    pub cnp: u64,
    pub ect_data: u64,
    /// The open episode: its first signal, its latest signal or pause end, its first CE mark
    /// or CNP, its first XOFF.
    pub ep_start: u64,
    pub ep_last: u64,
    pub ep_first_mark: u64,
    pub ep_first_xoff: u64,
    /// The current load interval (its index + 1; 0: none), its data bytes and CE marks.
    pub load_slot: u64,
    pub load_bytes: u64,
    pub load_ce: u64,
    /// Closed episodes and marked intervals whose event was lost (ring buffer full).
    pub episodes_lost: u64,
    pub loads_lost: u64,
}
assert_size!(LosslessState, 96);

impl LosslessState {
    pub const fn zeroed() -> LosslessState {
        LosslessState {
            ce: 0,
            cnp: 0,
            ect_data: 0,
            ep_start: 0,
            ep_last: 0,
            ep_first_mark: 0,
            ep_first_xoff: 0,
            load_slot: 0,
            load_bytes: 0,
            load_ce: 0,
            episodes_lost: 0,
            loads_lost: 0,
        }
    }

    /// A congestion signal at `t` (`xoff`: an XOFF pausing until `until`; else a CE mark or
    /// CNP, `until` = `t`). When it comes after the open episode's quiet period, `close` gets
    /// the open episode first (to send it; false when it could not) and a new one starts.
    #[inline(always)]
    pub fn signal(&mut self, t: u64, xoff: bool, until: u64, close: impl FnOnce(&Self) -> bool) {
        if self.ep_start == 0 || t > self.ep_last.saturating_add(EPISODE_QUIET_NS) {
            if self.ep_start != 0 && !close(self) {
                add(&mut self.episodes_lost, 1);
            }
            self.ep_start = t;
            self.ep_last = t;
            self.ep_first_mark = 0;
            self.ep_first_xoff = 0;
        }
        if until > self.ep_last {
            self.ep_last = until;
        }
        if xoff {
            if self.ep_first_xoff == 0 {
                self.ep_first_xoff = t;
            }
        } else if self.ep_first_mark == 0 {
            self.ep_first_mark = t;
        }
    }

    /// A data packet of `bytes` at `t` (`ce`: marked) in the load interval of `t + phase`
    /// (`phase`: the monotonic clock's offset from the epoch, modulo [`LOAD_INTERVAL_NS`]).
    /// The interval it ends goes to `close` first when it had CE marks.
    #[inline(always)]
    pub fn load(
        &mut self,
        t: u64,
        phase: u64,
        bytes: u64,
        ce: bool,
        close: impl FnOnce(&Self) -> bool,
    ) {
        let slot = t.wrapping_add(phase) / LOAD_INTERVAL_NS + 1;
        if self.load_slot != slot {
            if self.load_ce != 0 && !close(self) {
                add(&mut self.loads_lost, 1);
            }
            self.load_slot = slot;
            self.load_bytes = 0;
            self.load_ce = 0;
        }
        add(&mut self.load_bytes, bytes);
        if ce {
            add(&mut self.load_ce, 1);
        }
    }
}

/// A CPU's count of ECT data packets (neither CE-marked nor kept for a load) of one point and
/// priority not yet added to its [`LosslessState::ect_data`]: such a packet, most of the data
/// of a DCQCN fabric, then costs a per-CPU array slot instead of a hash lookup and an atomic
/// add. Moved into the shared entry when the CPU meets another point or priority; user space
/// adds what each CPU holds to the entry's count when it reads them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EctCache {
    pub key: LosslessKey,
    pub pending: u64,
}
assert_size!(EctCache, 16);

/// The priority data with `pcp` and `dscp` travels on: its PCP when tagged, else the lossless
/// priority for the lossless DSCP, else DSCP / 8 (the default DSCP-to-priority map).
#[inline(always)]
pub fn priority_of(pcp: u8, dscp: u8, lossless_dscp: u8, lossless_pcp: u8) -> u8 {
    if pcp != crate::flow::PCP_UNTAGGED {
        pcp & 7
    } else if dscp == lossless_dscp {
        lossless_pcp & 7
    } else {
        (dscp >> 3) & 7
    }
}

/// The pause `quanta` asks for, ns, on a link of `link_kbps` kb/s (0: none); the engine's
/// `quanta_to_ns` in whole ns.
#[inline(always)]
pub fn pause_ns(quanta: u16, link_kbps: u64) -> u64 {
    if link_kbps == 0 {
        return 0;
    }
    u64::from(quanta) * 512_000_000 / link_kbps
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    const MS: u64 = 1_000_000;

    /// (start, last, first mark, first XOFF) of each closed episode, and the open one.
    fn episodes(signals: &[(u64, bool, u64)]) -> (Vec<[u64; 4]>, [u64; 4]) {
        let mut s = LosslessState::zeroed();
        let mut closed = Vec::new();
        for &(t, xoff, until) in signals {
            s.signal(t, xoff, until, |s| {
                closed.push([s.ep_start, s.ep_last, s.ep_first_mark, s.ep_first_xoff]);
                true
            });
        }
        (
            closed,
            [s.ep_start, s.ep_last, s.ep_first_mark, s.ep_first_xoff],
        )
    }

    #[test]
    fn an_episode_ends_after_the_quiet_period_and_an_xoff_counts_until_its_pause_ends() {
        // Marks at 1 and 2 ms, an XOFF at 5 ms pausing 8 ms (until 13 ms): a mark at 23 ms is
        // within 10 ms of the pause's end, one at 33.1 ms is not.
        let (closed, open) = episodes(&[
            (MS, false, MS),
            (2 * MS, false, 2 * MS),
            (5 * MS, true, 13 * MS),
            (23 * MS, false, 23 * MS),
            (33 * MS + 100_000, true, 34 * MS),
        ]);
        assert_eq!(closed, [[MS, 23 * MS, MS, 5 * MS]]);
        assert_eq!(open, [33 * MS + 100_000, 34 * MS, 0, 33 * MS + 100_000]);
    }

    #[test]
    fn a_closed_interval_with_marks_is_handed_over_once() {
        let mut s = LosslessState::zeroed();
        let mut closed = Vec::new();
        // Phase 3 ms: the interval of t = 6 ms ends at 7 ms.
        for (t, ce) in [
            (MS, false),
            (6 * MS, true),
            (7 * MS, false),
            (16 * MS, false),
            (17 * MS, true),
        ] {
            s.load(t, 3 * MS, 100, ce, |s| {
                closed.push((s.load_slot - 1, s.load_bytes, s.load_ce));
                true
            });
        }
        // Interval 0 (1 ms and 6 ms, one mark) closes; interval 1 (7 and 16 ms) had no mark.
        assert_eq!(closed, [(0, 200, 1)]);
        assert_eq!((s.load_slot - 1, s.load_bytes, s.load_ce), (2, 100, 1));
    }

    #[test]
    fn pause_ns_is_the_whole_ns_of_quanta_at_the_link_speed() {
        assert_eq!(pause_ns(0xffff, 100_000_000), 335_539);
        assert_eq!(pause_ns(1, 1_000), 512_000);
        assert_eq!(pause_ns(50_000, 100_000_000), 256_000);
        assert_eq!(pause_ns(1, 0), 0);
    }
}
