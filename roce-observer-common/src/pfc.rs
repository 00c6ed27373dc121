//! PFC (802.1Qbb) and legacy 802.3x PAUSE accounting, keyed per (interface, direction,
//! source MAC, priority). Legacy PAUSE uses priority [`PRIORITY_LINK`].

use crate::assert_size;

/// `PfcKey::priority` of a legacy 802.3x PAUSE (the whole link).
pub const PRIORITY_LINK: u8 = 0xff;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PfcKey {
    pub ifindex: u32,
    pub direction: u8,
    pub priority: u8,
    pub src_mac: [u8; 6],
}
assert_size!(PfcKey, 12);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PfcStats {
    /// XOFF: enabled class with a non-zero pause time.
    pub pause_frames: u64,
    /// XON: enabled class with time 0 (resume); never a pause.
    pub xon_frames: u64,
    /// Sum of the pause times, in quanta of 512 bit times.
    pub pause_quanta: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}
assert_size!(PfcStats, 40);

impl PfcStats {
    #[inline(always)]
    pub fn account(&mut self, quanta: u16, now_ns: u64) {
        if quanta == 0 {
            crate::account::add(&mut self.xon_frames, 1);
        } else {
            crate::account::add(&mut self.pause_frames, 1);
            crate::account::add(&mut self.pause_quanta, quanta as u64);
        }
        if self.first_ns == 0 {
            self.first_ns = now_ns;
        }
        self.last_ns = now_ns;
    }
}

/// Pause duration of `quanta` at `link_gbps`: one quantum is 512 bit times.
pub fn quanta_to_ns(quanta: u64, link_gbps: f64) -> f64 {
    if link_gbps <= 0.0 {
        return 0.0;
    }
    quanta as f64 * 512.0 / link_gbps
}
