//! Every map of the kernel programs: key, value and sizing. User space reads them all; only the
//! loader sizes them (`EbpfLoader::set_max_entries`) and sets the globals in `main.rs`.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray, ProgramArray, RingBuf},
};
use roce_observer_common::{
    Counter, FlowKey, FlowStats,
    changes::{CHANGE_EPOCH_ENTRIES, CHANGE_SLOTS, ChangeHead, GATHER},
    counters::COUNTER_SLOTS,
    flow::{FlowKey4, FlowKey6},
    latency::{LatencyHist, PENDING_SETS, PendingSet},
    lossless::{EctCache, LosslessKey, LosslessState},
    mirror::{MAX_MIRROR_SESSIONS, MirrorKey, MirrorStats},
    observe::Scratch,
    pfc::{PfcLink, PfcLinkKey},
    run::RunBatch,
};

/// The flow table, in two maps by the compact key the flow takes (`FlowKey::compact`): one
/// entry per (src IP, dst IP, dst QP, direction, observation point), the point being the
/// interface or the mirror session. Two maps because the hash lookup every RoCE packet pays
/// grows with the key: 16 bytes hashed and compared for an IPv4 flow, 40 for the others, where
/// one map of the whole 64-byte FlowKey cost each packet ~14 ns more.
///
/// One value (FlowStats, 848 B) is shared by every CPU that sees the flow: counters are atomic
/// adds (account.rs). Plain hashes (not LRU): a full map is counted (`map_full`), never
/// silently evicts counts. The loader sizes both to --max-flows (default 16384).
///
/// FlowKey4 -> FlowStats: flows whose two addresses are IPv4. Preallocated (~14 MiB at 16384).
#[map]
pub static FLOWS4: HashMap<FlowKey4, FlowStats> = HashMap::with_max_entries(16384, 0);

/// FlowKey6 -> FlowStats: every other flow. Not preallocated (BPF_F_NO_PREALLOC): an entry
/// takes memory when made, so a host of IPv4 traffic pays for one table, not two.
#[map]
pub static FLOWS6: HashMap<FlowKey6, FlowStats> =
    HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);

/// uapi/linux/bpf.h map flag.
const BPF_F_NO_PREALLOC: u32 = 1;

/// The lists of changed flows (roce-observer-common/src/changes.rs; changes.rs here). The
/// current epoch (written by user space at each report tick) and, per list slot, the last epoch
/// whose changes did not all fit in their lists; user space reads and writes them through a
/// shared mapping.
#[map]
pub static CHANGE_EPOCH: Array<u32> = Array::with_max_entries(CHANGE_EPOCH_ENTRIES, BPF_F_MMAPABLE);

/// Per CPU, `CHANGE_SLOTS` list heads (`changes::list`). Read by user space through a shared
/// read-only mapping (BPF_F_MMAPABLE, 5.5): no syscall per list. The loader sizes it to
/// possible CPUs x CHANGE_SLOTS.
#[map]
pub static CHANGE_HEADS: Array<ChangeHead> = Array::with_max_entries(CHANGE_SLOTS, BPF_F_MMAPABLE);

/// The lists' keys: list `l` holds `CHANGE_KEYS[l * cap .. l * cap + count]`, cap being the
/// loader's `CHANGE_CAP` (changes::capacity). Mapped by user space as the heads are. The loader
/// sizes it to possible CPUs x CHANGE_SLOTS x cap (40 bytes a key).
#[map]
pub static CHANGE_KEYS: Array<FlowKey6> = Array::with_max_entries(CHANGE_SLOTS, BPF_F_MMAPABLE);

/// The gather program's keys in (user space writes them), entries out, and found flags (entry
/// 0: how many keys; 1 + i: whether key i was found). All mapped by user space.
#[map]
pub static GATHER_KEYS: Array<FlowKey6> = Array::with_max_entries(GATHER, BPF_F_MMAPABLE);
#[map]
pub static GATHER_FLOWS: Array<FlowStats> = Array::with_max_entries(GATHER, BPF_F_MMAPABLE);
#[map]
pub static GATHER_FOUND: Array<u32> = Array::with_max_entries(1 + GATHER, BPF_F_MMAPABLE);

/// uapi/linux/bpf.h map flag: the array can be mapped into user memory.
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// The latency samples of each request flow (LatencyHist, 432 B: exact counts in 93 log
/// buckets, sum, min, max, samples above the alert threshold), keyed as the flow maps: one
/// entry per flow whose requests were answered, made at its first sample. User space reads
/// them on its tick and merges what they gained into its sketches, where one ring-buffer event
/// per sample was a fifth of the packets of plain WRITE traffic. A map of its own, not part of
/// FlowStats: only request flows with samples take one (not preallocated), so the flow table's
/// preallocated footprint and per-tick read stay as they were, and a data packet touches no
/// more of its flow record. The loader sizes both to --max-flows: a sample's request flow has
/// an entry in the flow maps, so they fill no sooner than those.
#[map]
pub static LATENCY4: HashMap<FlowKey4, LatencyHist> =
    HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);
#[map]
pub static LATENCY6: HashMap<FlowKey6, LatencyHist> =
    HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);

/// FlowKey -> RunBatch (768 B): the finished data runs of 8 packets or more of each flow (run.rs),
/// sent sixteen to a ring-buffer record, the ones not yet sent read by user space on its tick.
/// A map of its own, not part of FlowStats, for the reasons of the latency maps: only flows
/// that finish such runs take an entry (made at the first; not preallocated), and the flow
/// table's preallocated footprint and per-tick read stay as they were. Keyed by the whole flow
/// key, which the frame's scratch memory holds already: one map and no compact key to build on
/// the run-finish path (a lookup there once per 8 data packets at most). The loader sizes it
/// to --max-flows; a finished run whose flow finds no room is counted in `map_full` and in the
/// flow record's `runs_unsent`/`run_bytes_unsent`.
#[map]
pub static RUN_BATCHES: HashMap<FlowKey, RunBatch> =
    HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);

/// One all-zero RunBatch, never written: the source of new `RUN_BATCHES` entries.
#[map]
pub static ZERO_BATCH: PerCpuArray<RunBatch> = PerCpuArray::with_max_entries(1, 0);

/// One all-zero LatencyHist, never written: the source of new latency entries.
#[map]
pub static ZERO_LATENCY: PerCpuArray<LatencyHist> = PerCpuArray::with_max_entries(1, 0);

/// PfcLinkKey -> PfcLink: per (interface, direction, source MAC), the counters of all eight
/// priorities and of 802.3x PAUSE in one entry, so that a PFC frame costs one lookup.
#[map]
pub static PFC: HashMap<PfcLinkKey, PfcLink> = HashMap::with_max_entries(1024, 0);

/// One all-zero PfcLink, never written: the source of new PFC entries (360 bytes are too many
/// for the BPF stack).
#[map]
pub static ZERO_PFC: PerCpuArray<PfcLink> = PerCpuArray::with_max_entries(1, 0);

/// Lossless class (roce-observer-common/src/lossless.rs): per (interface, priority), the open
/// congestion episode, the current load interval and exact counts, shared by every CPU and
/// both programs (one point is both directions of an interface, as in the engine). Looked up
/// by CE-marked data, CNPs and XOFFs only (every data packet when loads are judged; other ECT
/// data is counted in LOSSLESS_ECT first). A full map is counted (`map_full`).
#[map]
pub static LOSSLESS: HashMap<LosslessKey, LosslessState> = HashMap::with_max_entries(1024, 0);

/// Each CPU's ECT data packets not yet added to their LOSSLESS entry (roce-observer-common
/// lossless.rs, `EctCache`); user space reads it with the entries.
#[map]
pub static LOSSLESS_ECT: PerCpuArray<EctCache> = PerCpuArray::with_max_entries(1, 0);

/// One all-zero LosslessState, never written: the source of new lossless entries.
#[map]
pub static ZERO_LOSSLESS: PerCpuArray<LosslessState> = PerCpuArray::with_max_entries(1, 0);

/// Timestamped requests waiting for their answer: the sets of the shared table
/// (roce-observer-common latency.rs, `PendingSet`: 2 slots of 32 bytes, fingerprint of the
/// PendingKey, PSN, time, destination QP, direction), indexed by `pending_set_index`. An array,
/// preallocated (2 MiB) and shared by all CPUs, so that an answer processed on another CPU still
/// finds its request: its lookup is inlined by the verifier, where the LRU hash map it replaces
/// walked a hash bucket on every insert, lookup and delete. A request whose answer never comes
/// stays until a newer one of its set pushes it out (the oldest of the set goes first).
#[map]
pub static STAMPS: Array<PendingSet> = Array::with_max_entries(PENDING_SETS, 0);

/// Switch-mirror sessions: MirrorKey (outer source and destination, encapsulation, session ID
/// / VNI / GRE key, attach point) -> the session's slot in SESSIONS, which is also its number
/// in the flow keys (`POINT_MIRROR | slot`). A full table is counted (`map_full`). Looked up
/// only when a CPU's last session (SessionCache) is not the frame's: a hash lookup per
/// mirrored frame cost ~15 ns, half of the 30 ns budget for unwrapping a mirror.
#[map]
pub static MIRRORS: HashMap<MirrorKey, u32> = HashMap::with_max_entries(MAX_MIRROR_SESSIONS, 0);

/// Each session's frames and sequence gaps (MirrorStats), by slot; one value shared by every
/// CPU, as the flow maps. A CPU makes new sessions in its own range of slots (`cpu *
/// MAX_MIRROR_SESSIONS + n`, n counted in its SessionCache): unique without an atomic
/// fetch-add (5.12+). The loader sizes it to possible CPUs x MAX_MIRROR_SESSIONS (48 KiB per
/// CPU).
#[map]
pub static SESSIONS: Array<MirrorStats> = Array::with_max_entries(MAX_MIRROR_SESSIONS, 0);

/// The last mirror session a CPU counted, and how many sessions it made.
#[repr(C)]
pub struct SessionCache {
    pub key: MirrorKey,
    pub slot: u32,
    /// 1 once `key` and `slot` are set.
    pub valid: u32,
    pub made: u32,
}

/// Scratch for the frame being observed: the shared observation's (observe::Scratch: the
/// mirror session its outer headers name, the flow key), and the compact flow-map keys built
/// from it. A map value, not stack variables: with them on the stack the TC program overflowed
/// the 512-byte BPF stack.
#[repr(C)]
pub struct KernelScratch {
    pub shared: Scratch,
    pub key4: FlowKey4,
    pub key6: FlowKey6,
    pub session: SessionCache,
    /// The compact keys of a latency sample's request flow (`Tables::latency_sample`).
    pub lat4: FlowKey4,
    pub lat6: FlowKey6,
    /// The flows to list as changed once the frame is done (changes.rs).
    pub pending: Pending,
}

/// Flows a frame may change: its own, and a request flow (an answer's, or a NAK's in either
/// direction). A power of two.
pub const FRAME_CHANGES: usize = 4;

/// The keys of the flows the frame being processed listed first in their epoch, for
/// `changes::flush` (part of the per-CPU scratch memory, which a tail call keeps).
#[repr(C)]
pub struct Pending {
    pub keys: [FlowKey6; FRAME_CHANGES],
    pub epochs: [u32; FRAME_CHANGES],
    pub count: u32,
}

#[map]
pub static SCRATCH: PerCpuArray<KernelScratch> = PerCpuArray::with_max_entries(1, 0);

/// The scoreboard programs (main.rs, `*_seq`) that the main programs hand their out-of-order
/// packets to, filled by the loader. One array per program type, since a program array holds
/// programs of the type of the first program loaded that uses it: XDP's by the slot of the
/// main program (`roce_observer_common::SEQ_SLOT_XDP`, `SEQ_SLOT_XDP_PAGE`), TC's in slot 0.
#[map]
pub static SCOREBOARD_XDP: ProgramArray = ProgramArray::with_max_entries(2, 0);
#[map]
pub static SCOREBOARD_TC: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// Frame classes and error counters, one block of `Counter::COUNT` per direction; per-CPU so
/// increments never contend; user space sums the CPUs.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// One all-zero FlowStats, never written: the source of new flow entries (a FlowStats does not
/// fit on the 512-byte BPF stack next to the parse state).
#[map]
pub static ZERO_FLOW: PerCpuArray<FlowStats> = PerCpuArray::with_max_entries(1, 0);

/// Bytes of an egress frame copied for parsing: every header chain the parser reads, a mirror's
/// outer headers included, ends within them (at most ~250 bytes: outer Ethernet with two tags,
/// IPv6, GRE with all options, ERSPAN III with its subheader, then the mirrored frame's
/// Ethernet, two tags, IPv4 with 40 bytes of options, UDP, BTH and extended headers).
pub const HEAD_BYTES: usize = 256;

/// The TC program's copy of the frame's first HEAD_BYTES (see view.rs), one per CPU. Twice as
/// long as what is copied, so that a header read at any offset below HEAD_BYTES stays inside
/// the value, which is what the verifier checks.
#[map]
pub static TC_HEAD: PerCpuArray<[u8; 2 * HEAD_BYTES]> = PerCpuArray::with_max_entries(1, 0);

/// Size of `EVENTS` in bytes.
pub const EVENTS_BYTES: u64 = 1 << 20;

/// Events (PFC, PAUSE, finished signal run, path event), 128 B each, and records of
/// sixteen finished data runs (`RunBatch`, 768 B); 1 MiB holds ~8k events between two drains.
/// Reserve failures are counted, counters stay exact.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES as u32, 0);

/// Count one occurrence of `counter` in `direction`.
#[inline(always)]
pub fn count(counter: Counter, direction: u8) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter.slot(direction)) {
        // SAFETY: the pointer comes from a successful per-CPU array lookup: valid, aligned,
        // and only this CPU writes it.
        unsafe { *slot += 1 };
    }
}
