//! The kernel's lists of changed flows, so that a report tick reads only the flows that changed
//! instead of copying the whole flow table (848 bytes a flow) out of the kernel.
//!
//! User space numbers its report ticks: at the start of each it writes the next *epoch* to
//! `CHANGE_EPOCH[0]`. Each flow record keeps the epoch in which the kernel last listed it
//! (`FlowStats::epoch`, in its first cache line). A packet whose flow's epoch is not the
//! current one stores the current one and appends the flow's key to this CPU's list for that
//! epoch; every other packet pays one load and one compare. A list is one of [`CHANGE_SLOTS`]
//! per CPU, chosen by epoch modulo [`CHANGE_SLOTS`]: the head ([`ChangeHead`]) says which epoch
//! it holds and how many keys, and the kernel starts a slot afresh at the first append of a
//! newer epoch. A change that finds no room in its list (more keys than the lists hold) is
//! recorded in `CHANGE_EPOCH[1 + epoch % CHANGE_SLOTS]`, the epoch itself, and user space then
//! reads the whole table.
//!
//! At a tick that bumped the epoch to `c`, user space reads the lists of epochs `c - 1` and
//! `c - 2` (the latter again): a packet processed while the epoch moved may have read the old
//! epoch, then appended, or updated a flow already listed, after user space read that list or
//! that flow. Reading the older list once more a tick later hands such a flow again with all of
//! that packet's updates (a program runs for microseconds, a tick lasts a second). The slot of
//! epoch `c - 2` is reused only at epoch `c + 1`.
//!
//! Keys are listed as [`FlowKey6`]: a flow of `FLOWS4` with its addresses IPv4-mapped (no key
//! of `FLOWS6` has two mapped addresses, `FlowKey::compact`), so one list holds both maps'
//! flows.

use crate::{
    FlowKey, assert_size,
    flow::{FlowKey4, FlowKey6},
};

/// Lists per CPU: the current epoch's and the two before it.
pub const CHANGE_SLOTS: u32 = 3;

/// `CHANGE_EPOCH` entries: the current epoch, then per slot the last epoch whose changes did
/// not all fit in their lists.
pub const CHANGE_EPOCH_ENTRIES: u32 = 1 + CHANGE_SLOTS;

/// One list's head: the epoch whose keys it holds and how many (never more than the list's
/// capacity; a change past it is recorded as lost instead).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChangeHead {
    pub epoch: u32,
    pub count: u32,
}
assert_size!(ChangeHead, 8);

/// Flows copied per run of the gather program (roce-observer-ebpf/src/gather.rs): user space
/// reads the listed flows `GATHER` at a time in one syscall, not one lookup syscall each.
pub const GATHER: u32 = 64;

/// The list slot of `epoch`.
#[inline(always)]
pub const fn slot(epoch: u32) -> u32 {
    epoch % CHANGE_SLOTS
}

/// Index of CPU `cpu`'s list for `epoch` in `CHANGE_HEADS`; its keys start at this times the
/// lists' capacity in `CHANGE_KEYS`.
#[inline(always)]
pub const fn list(cpu: u32, epoch: u32) -> u32 {
    cpu.wrapping_mul(CHANGE_SLOTS).wrapping_add(slot(epoch))
}

/// Keys per list for a flow table of `max_flows` entries (the loader's choice): a sixteenth of
/// the table, at least 64 and at most 4096. Each CPU keeps `CHANGE_SLOTS` lists of 40-byte keys
/// (480 KiB per CPU at most). More changes than that in a tick on one CPU cost a full read, as
/// every tick cost before the lists.
pub const fn capacity(max_flows: u32) -> u32 {
    let c = max_flows / 16;
    if c < 64 {
        64
    } else if c > 4096 {
        4096
    } else {
        c
    }
}

/// Write the listed key of flow `key` at observation `point` to `to`: its compact key in the
/// form of `FLOWS6`'s, addresses as the [`FlowKey`] holds them (IPv4-mapped for IPv4). Copied
/// as 32-bit words (the key is 4-byte aligned): byte loops would cost the programs a load and a
/// store per byte, and whole 16-byte array copies failed the 5.10 and 6.1 verifiers.
#[inline(always)]
pub fn write_listed(key: &FlowKey, point: u32, to: &mut FlowKey6) {
    const WORDS: usize = 8;
    const _: () = assert!(core::mem::offset_of!(FlowKey, dst_ip) == 16);
    const _: () = assert!(core::mem::offset_of!(FlowKey6, dst_ip) == 16);
    let from = core::ptr::from_ref(key).cast::<u32>();
    let dst = core::ptr::from_mut(to).cast::<u32>();
    let mut i = 0;
    while i < WORDS {
        // SAFETY: word i of the two addresses, the first 32 bytes of both keys (offsets
        // asserted above); both 4-byte aligned, `to` writable.
        unsafe { *dst.add(i) = *from.add(i) };
        i += 1;
    }
    to.qp_dir = key.qp_dir();
    to.point = point;
}

/// The compact key a listed key names: `FLOWS4`'s when both addresses are IPv4-mapped, else
/// `FLOWS6`'s (the listed key itself).
pub fn listed_flow(k: &FlowKey6) -> Listed {
    if crate::flow::is_mapped(&k.src_ip) && crate::flow::is_mapped(&k.dst_ip) {
        let mut src_ip = [0; 4];
        let mut dst_ip = [0; 4];
        src_ip.copy_from_slice(&k.src_ip[12..]);
        dst_ip.copy_from_slice(&k.dst_ip[12..]);
        return Listed::V4(FlowKey4 {
            src_ip,
            dst_ip,
            qp_dir: k.qp_dir,
            point: k.point,
        });
    }
    Listed::V6(*k)
}

/// A listed flow's key in the map that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    V4(FlowKey4),
    V6(FlowKey6),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Compact;

    #[test]
    fn each_cpu_has_its_own_lists_and_an_epoch_reuses_its_slot_three_later() {
        assert_eq!(list(0, 7), 1);
        assert_eq!(list(1, 7), 4);
        assert_eq!(list(1, 10), list(1, 7));
        assert_ne!(list(1, 8), list(1, 7));
        assert_eq!(
            [capacity(0), capacity(16384), capacity(1 << 20)],
            [64, 1024, 4096]
        );
    }

    /// A listed key names the flow's own compact key, in the map that holds it.
    #[test]
    fn a_listed_key_is_the_compact_key_of_its_map() {
        let v4 = crate::headers::ipv4_mapped;
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6[15] = 9;
        let plain = FlowKey {
            src_ip: v4([192, 0, 2, 1]),
            dst_ip: v4([192, 0, 2, 2]),
            dst_qp: 0x00ab_cdef,
            ifindex: 3,
            direction: 1,
            ..FlowKey::zeroed()
        };
        for (key, point) in [
            (plain, 3),
            (plain, crate::flow::POINT_MIRROR | 4),
            (
                FlowKey {
                    src_ip: v6,
                    ..plain
                },
                3,
            ),
            (
                FlowKey {
                    dst_ip: v6,
                    ..plain
                },
                5,
            ),
        ] {
            let mut listed = FlowKey6::zeroed();
            write_listed(&key, point, &mut listed);
            let (mut k4, mut k6) = (FlowKey4::zeroed(), FlowKey6::zeroed());
            let expected = match key.compact(point, &mut k4, &mut k6) {
                Compact::V4 => Listed::V4(k4),
                Compact::V6 => Listed::V6(k6),
            };
            assert_eq!(listed_flow(&listed), expected, "{key:?} at {point}");
        }
    }
}
