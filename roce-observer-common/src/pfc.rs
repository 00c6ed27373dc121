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
            crate::atomic::add(&mut self.xon_frames, 1);
        } else {
            crate::atomic::add(&mut self.pause_frames, 1);
            crate::atomic::add(&mut self.pause_quanta, quanta as u64);
        }
        if self.first_ns == 0 {
            self.first_ns = now_ns;
        }
        self.last_ns = now_ns;
    }
}

/// The kernel's PFC map key: one entry per (interface, direction, source MAC), holding every
/// priority ([`PfcLink`]), so that a PFC frame costs one lookup, not one per priority.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PfcLinkKey {
    pub ifindex: u32,
    pub direction: u8,
    pub _pad: u8,
    pub src_mac: [u8; 6],
}
assert_size!(PfcLinkKey, 12);

/// Slot of a legacy 802.3x PAUSE in [`PfcLink::slots`] (0-7 are the PFC priorities).
pub const SLOT_LINK: usize = 8;

/// The kernel's PFC map value: [`PfcStats`] per priority, then the legacy PAUSE slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PfcLink {
    pub slots: [PfcStats; 9],
}
assert_size!(PfcLink, 360);

impl PfcLinkKey {
    /// The per-priority key of `slot` (user space keeps one entry per priority).
    pub const fn priority_key(&self, slot: usize) -> PfcKey {
        PfcKey {
            ifindex: self.ifindex,
            direction: self.direction,
            priority: if slot == SLOT_LINK {
                PRIORITY_LINK
            } else {
                slot as u8
            },
            src_mac: self.src_mac,
        }
    }
}

/// Pause duration of `quanta` at `link_gbps`: one quantum is 512 bit times.
pub fn quanta_to_ns(quanta: u64, link_gbps: f64) -> f64 {
    if link_gbps <= 0.0 {
        return 0.0;
    }
    quanta as f64 * 512.0 / link_gbps
}
