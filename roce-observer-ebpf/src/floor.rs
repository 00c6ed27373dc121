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
//! The hash floor on XDP can add one of the observer's per-packet parts at a time
//! (`FLOOR_PARTS`, roce-observer-common/src/floor.rs: the precise clock, a value the size of the
//! flow record, the observer's parser), so that the benchmark shows what each costs by itself.
//!
//! Their maps have one entry in the object; the benchmark sizes them (`KernelOptions::
//! floor_entries`), so the observer itself never allocates them.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
    programs::{TcContext, XdpContext},
};
use roce_observer_common::{
    FlowStats,
    atomic::add,
    floor::{CLOCK, PARSER, RECORD},
    headers::VXLAN_PORT,
    mirror::{MirrorPoint, Ports},
    parse::{Frame, parse_mirrored},
};

use crate::view::XdpView;

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

/// The observer's parts the XDP hash floor adds (roce-observer-common/src/floor.rs); set by the
/// loader. Frozen .rodata: the verifier drops the parts not asked for.
#[unsafe(no_mangle)]
static FLOOR_PARTS: u8 = 0;

/// 64-bit words of a value the size of the observer's flow record.
const RECORD_WORDS: usize = core::mem::size_of::<FlowStats>() / 8;
const _: () = assert!(RECORD_WORDS * 8 == core::mem::size_of::<FlowStats>());

/// The `RECORD` part: packets and bytes of one `HashKey` in the first two words of a value the
/// size of the flow record (the rest stays zero).
#[map]
pub static FLOOR_RECORD: HashMap<HashKey, [u64; RECORD_WORDS]> = HashMap::with_max_entries(1, 0);

/// One all-zero record, never written: the source of new FLOOR_RECORD entries (a value on the
/// 512-byte stack would not fit).
#[map]
static FLOOR_ZERO: PerCpuArray<[u64; RECORD_WORDS]> = PerCpuArray::with_max_entries(1, 0);

/// The `CLOCK` part's reading, kept per CPU; the `PARSER` part's mirror session (the parser's
/// scratch memory, as the observer's is).
#[map]
static FLOOR_CLOCK: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);
#[map]
static FLOOR_POINT: PerCpuArray<MirrorPoint> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn parts() -> u8 {
    // SAFETY: an initialised static, read volatile so the loader's value is seen.
    unsafe { core::ptr::read_volatile(&FLOOR_PARTS) }
}

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

/// The `hash` floor on XDP, with the parts `FLOOR_PARTS` asks for.
#[inline(always)]
pub fn hash(ctx: &XdpContext) {
    let (start, end) = (ctx.data(), ctx.data_end());
    let parts = parts();
    let key = if parts & PARSER != 0 {
        parsed_key(ctx)
    } else {
        hash_key(start, end)
    };
    if parts & CLOCK != 0
        && key.is_some()
        && let Some(last) = FLOOR_CLOCK.get_ptr_mut(0)
    {
        // SAFETY: this CPU's value of a per-CPU array; the helper takes no arguments.
        unsafe { *last = bpf_ktime_get_ns() };
    }
    if parts & RECORD != 0 {
        count_record(key, (end - start) as u64);
    } else {
        count_hash(key, (end - start) as u64);
    }
}

/// The key of a plain IPv4 RoCEv2 frame found by the observer's parser, in the form
/// `hash_key` gives it (the addresses' last word as on the wire, the port and QP as numbers).
#[inline(always)]
fn parsed_key(ctx: &XdpContext) -> Option<HashKey> {
    let point = FLOOR_POINT.get_ptr_mut(0)?;
    let ports = Ports {
        roce: ROCE_PORT,
        vxlan: VXLAN_PORT,
    };
    // SAFETY: this CPU's value of a per-CPU array, used only during this run.
    let frame = parse_mirrored(&XdpView::multi_buffer(ctx), ports, unsafe { &mut *point });
    let Frame::Roce {
        src_ip,
        dst_ip,
        pkt,
    } = frame
    else {
        return None;
    };
    let word = |a: [u8; 16]| u32::from_ne_bytes([a[12], a[13], a[14], a[15]]);
    Some([
        word(src_ip),
        word(dst_ip),
        u32::from(pkt.udp_sport),
        pkt.dst_qp,
    ])
}

/// `count_in` on FLOOR_RECORD: the same lookup and adds, on a value of the flow record's
/// size.
#[inline(always)]
fn count_record(key: Option<HashKey>, len: u64) {
    if let Some(zero) = FLOOR_ZERO.get_ptr(0) {
        // SAFETY: `zero` points at a live per-CPU array value of the right type, never written.
        count_in(&FLOOR_RECORD, unsafe { &*zero }, key, len);
    }
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
    count_in(&FLOOR_HASH, &[0, 0], key, len);
}

/// The packet and its bytes added to the first two words of `key`'s value in `map`, made from
/// `zero` when absent.
#[inline(always)]
fn count_in<const N: usize>(
    map: &'static HashMap<HashKey, [u64; N]>,
    zero: &[u64; N],
    key: Option<HashKey>,
    len: u64,
) {
    let Some(key) = key else {
        return;
    };
    let counts = match map.get_ptr_mut(&key) {
        Some(c) => c,
        None => {
            let _ = map.insert(&key, zero, 1 /* BPF_NOEXIST */);
            match map.get_ptr_mut(&key) {
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
