//! Benchmark floors, never attached by the observer: the least a program can do to
//! keep an exact per-flow packet count, so that `cargo xtask bench` can show what part of the
//! observer's per-packet cost any per-flow design pays on the same veth, in the same run.
//!
//! Both read an untagged IPv4 RoCEv2 frame at fixed offsets (Ethernet, IPv4 without options,
//! UDP to port 4791, BTH: no VLAN, no IPv6, no mirrors, no validation beyond the bounds: far
//! less than the observer's parser) and count the packet:
//! - `hash`, the yardstick the observer's cost is stated against: a preallocated hash map
//!   (the bench sizes it to 65,536 entries) keyed by (source IP, destination IP, UDP source
//!   port, destination QP), the packet and its bytes added atomically (also as a TC
//!   classifier, the yardstick of the egress program);
//! - `array`: the plain flow key's 44 bytes (IPv4-mapped addresses, destination QP,
//!   interface, direction) hashed to an array slot, with no key compare and collisions merged,
//!   one atomic add of the packet: one memory touch per packet, the floor of any per-flow
//!   state.
//!
//! Their maps have one entry in the object; the benchmark sizes them (`KernelOptions::
//! floor_entries`), so the observer itself never allocates them.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap},
    programs::{TcContext, XdpContext},
};
use roce_observer_common::atomic::add;

/// 44-byte plain flow key, as 32-bit words.
type Key = [u32; 11];

/// (source IP, destination IP, UDP source port, destination QP), as found in the frame.
type HashKey = [u32; 4];

/// Packets and bytes of one `HashKey`.
#[map]
pub static FLOOR_HASH: HashMap<HashKey, [u64; 2]> = HashMap::with_max_entries(1, 0);

#[map]
pub static FLOOR_ARRAY: Array<u64> = Array::with_max_entries(1, 0);

/// Slots of FLOOR_ARRAY (a power of two); set by the loader.
#[unsafe(no_mangle)]
static FLOOR_SLOTS: u32 = 1;

const ETH: usize = 14;
const IP: usize = 20;
const UDP: usize = 8;
const BTH: usize = 12;
const ROCE_PORT: u16 = roce_observer_common::ROCE_V2_PORT;

#[inline(always)]
fn key(ctx: &XdpContext) -> Option<Key> {
    let (start, end) = (ctx.data(), ctx.data_end());
    if start + ETH + IP + UDP + BTH > end {
        return None;
    }
    let p = start as *const u8;
    // SAFETY: every read below is within the ETH + IP + UDP + BTH bytes checked above.
    unsafe {
        let at = |o: usize| *p.add(o);
        let be16 = |o: usize| u16::from_be_bytes([at(o), at(o + 1)]);
        let word = |o: usize| u32::from_ne_bytes([at(o), at(o + 1), at(o + 2), at(o + 3)]);
        if be16(12) != 0x0800 || at(ETH) != 0x45 || at(ETH + 9) != 17 {
            return None;
        }
        if be16(ETH + IP + 2) != ROCE_PORT {
            return None;
        }
        let bth = ETH + IP + UDP;
        let qp = u32::from_be_bytes([0, at(bth + 5), at(bth + 6), at(bth + 7)]);
        let mapped = u32::from_ne_bytes([0, 0, 0xff, 0xff]);
        let ifindex = (*ctx.ctx).ingress_ifindex;
        Some([
            0,
            0,
            mapped,
            word(ETH + 12),
            0,
            0,
            mapped,
            word(ETH + 16),
            qp,
            ifindex,
            0,
        ])
    }
}

/// The `hash` floor's key of an untagged IPv4 RoCEv2 frame at `start..end` (packet pointers
/// the verifier knows as such).
#[inline(always)]
fn hash_key(start: usize, end: usize) -> Option<HashKey> {
    if start + ETH + IP + UDP + BTH > end {
        return None;
    }
    let p = start as *const u8;
    // SAFETY: every read below is within the ETH + IP + UDP + BTH bytes checked above.
    unsafe {
        let at = |o: usize| *p.add(o);
        let be16 = |o: usize| u16::from_be_bytes([at(o), at(o + 1)]);
        let word = |o: usize| u32::from_ne_bytes([at(o), at(o + 1), at(o + 2), at(o + 3)]);
        if be16(12) != 0x0800 || at(ETH) != 0x45 || at(ETH + 9) != 17 {
            return None;
        }
        let udp = ETH + IP;
        if be16(udp + 2) != ROCE_PORT {
            return None;
        }
        let bth = udp + UDP;
        let qp = u32::from_be_bytes([0, at(bth + 5), at(bth + 6), at(bth + 7)]);
        Some([word(ETH + 12), word(ETH + 16), u32::from(be16(udp)), qp])
    }
}

/// The `hash` floor on XDP.
#[inline(always)]
pub fn hash(ctx: &XdpContext) {
    let (start, end) = (ctx.data(), ctx.data_end());
    count_hash(hash_key(start, end), (end - start) as u64);
}

/// The same on TC egress (direct packet access to the skb's linear part, which holds the
/// headers of the frames the benchmark sends); the frame's length is the skb's.
#[inline(always)]
pub fn hash_tc(ctx: &TcContext) {
    count_hash(hash_key(ctx.data(), ctx.data_end()), u64::from(ctx.len()));
}

/// One hash-map lookup (insert when new) and two atomic adds (packets, bytes) per RoCE
/// packet.
#[inline(always)]
fn count_hash(key: Option<HashKey>, len: u64) {
    let Some(key) = key else {
        return;
    };
    let counts = match FLOOR_HASH.get_ptr_mut(&key) {
        Some(c) => c,
        None => {
            let _ = FLOOR_HASH.insert(&key, &[0, 0], 1 /* BPF_NOEXIST */);
            match FLOOR_HASH.get_ptr_mut(&key) {
                Some(c) => c,
                None => return,
            }
        }
    };
    // SAFETY: a map value pointer from a successful lookup, valid for the program's run.
    let counts = unsafe { &mut *counts };
    add(&mut counts[0], 1);
    add(&mut counts[1], len);
}

/// One array slot (by a hash of the key) and one atomic add per RoCE packet.
#[inline(always)]
pub fn array(ctx: &XdpContext) {
    let Some(key) = key(ctx) else { return };
    let mut h: u32 = 0;
    let mut i = 0;
    while i < key.len() {
        h = (h ^ key[i]).wrapping_mul(0x9e37_79b1);
        i += 1;
    }
    // SAFETY: an initialised static, read volatile so the loader's value is seen.
    let slots = unsafe { core::ptr::read_volatile(&FLOOR_SLOTS) };
    if let Some(count) = FLOOR_ARRAY.get_ptr_mut(h & slots.wrapping_sub(1)) {
        // SAFETY: an array value pointer from a successful lookup.
        add(unsafe { &mut *count }, 1);
    }
}
