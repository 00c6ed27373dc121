//! The only ABI between the roce-observer kernel programs and user space, plus the whole
//! per-packet observation that both sides run (the kernel on every packet, the engine on every
//! captured frame): parsing (`parse`), flow accounting (`account`), and the events, latency
//! matching and PFC accounting around them (`observe`), so the two paths cannot drift apart.
//!
//! Everything that crosses the kernel boundary is `#[repr(C)]`, `Copy`, free of `bool`/`Option`
//! and of implicit padding; sizes are pinned by compile-time assertions.
#![no_std]
// BPF has atomic adds but no compare-and-swap, so core's atomics offer no fetch_add there: the
// per-flow counters use the intrinsic directly (atomic::add). The eBPF build is a build-std
// build that already needs unstable flags (docs: RUSTC_BOOTSTRAP for that child build only).
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

pub mod account;
pub mod atomic;
pub mod changes;
pub mod counters;
pub mod event;
pub mod floor;
pub mod flow;
pub mod frame_kind;
/// Test frames (feature `frames`; user space only, needs `alloc`).
#[cfg(any(test, feature = "frames"))]
pub mod frames;
pub mod headers;
pub mod latency;
pub mod lossless;
pub mod mirror;
pub mod observe;
pub mod opcode;
pub mod packet;
pub mod parse;
pub mod pfc;
pub mod psn;
pub mod run;
pub mod sequence;

pub use account::{Outcome, account};
pub use counters::Counter;
pub use event::{Event, EventBody, EventKind};
pub use flow::{Direction, FlowKey, FlowStats};
pub use parse::RocePacket;
pub use pfc::{PfcKey, PfcStats};

/// Destination UDP port of RoCEv2 (IANA); configurable at load time.
pub const ROCE_V2_PORT: u16 = 4791;
/// Default RoCE path MTU, used to size READ PSN reservations.
pub const DEFAULT_PMTU: u32 = 4096;
/// Default burst rule of the `retransmit_burst` and `nak_burst` alerts: this many on one flow
/// within this many ns (a fixed window from the first).
pub const BURST_COUNT: u32 = 10;
pub const BURST_WINDOW_NS: u64 = 100_000_000;
/// Path events (request gaps, finished resend runs) sent per flow and window; the ones over
/// the limit are counted in the flow record (`FlowStats::path_suppressed`). A flow losing one
/// packet in 10,000 at 3 Mpps makes ~600 a second, within the limit; a flow losing more is
/// marked incomplete rather than flooding the ring buffer.
pub const PATH_EVENT_LIMIT: u32 = 64;
pub const PATH_EVENT_WINDOW_NS: u64 = 100_000_000;
/// Slots of the kernel's XDP scoreboard programs in `SCOREBOARD_XDP` (observe.rs,
/// `Tables::SCOREBOARD`): that of the XDP program with frags, and of the one without.
pub const SEQ_SLOT_XDP: u32 = 0;
pub const SEQ_SLOT_XDP_PAGE: u32 = 1;
/// Distinct UDP source ports remembered exactly per flow.
pub const MAX_SPORTS: usize = 4;

/// Compile-time size check without padding surprises.
macro_rules! assert_size {
    ($t:ty, $n:expr) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $n);
    };
}
pub(crate) use assert_size;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: every type below is #[repr(C)], Copy, contains only integers and integer arrays,
    // and has no implicit padding (sizes asserted where the types are defined), so any bit
    // pattern is a valid value.
    unsafe impl aya::Pod for super::FlowKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::flow::FlowKey4 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::flow::FlowKey6 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FlowStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PfcKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PfcStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::pfc::PfcLinkKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::pfc::PfcLink {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Event {}
    // SAFETY: repr(C), integers only, no padding (size asserted in lossless.rs).
    unsafe impl aya::Pod for super::lossless::LosslessKey {}
    // SAFETY: repr(C), u64 fields only.
    unsafe impl aya::Pod for super::lossless::LosslessState {}
    // SAFETY: repr(C), integers only, no padding (size asserted in lossless.rs).
    unsafe impl aya::Pod for super::lossless::EctCache {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::latency::PendingKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::latency::PendingValue {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::latency::LatencyHist {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::mirror::MirrorKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::mirror::MirrorStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::run::RunBatch {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::changes::ChangeHead {}
}
