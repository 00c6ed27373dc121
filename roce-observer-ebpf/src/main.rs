//! roce-observer kernel programs: an XDP program (ingress) and a TC classifier (clsact egress)
//! that run the same observation on every frame. Both always pass the packet on: an observer
//! never changes the fate of traffic; failures are counted, never acted on.
//!
//! Parse (shared with user space): roce-observer-common/src/parse.rs.
//! Per-flow accounting (shared): roce-observer-common/src/account.rs.
//! Per-packet observation (shared): roce-observer-common/src/observe.rs, run on the maps of
//! maps.rs by observe.rs.
#![no_std]
// Inline BPF assembly (view.rs: an offset bound the verifier can see) is unstable in Rust.
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]
#![no_main]

mod changes;
mod diag;
mod floor;
mod gather;
mod maps;
mod observe;
mod view;

use aya_ebpf::{
    EbpfContext as _,
    bindings::{TC_ACT_PIPE, xdp_action},
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};
use roce_observer_common::Direction;

/// `frags`: jumbo frames (RoCE fabrics run MTU 9000) arrive as multi-buffer XDP; the headers we
/// parse are always in the first buffer. Without it the kernel refuses XDP on a veth or NIC whose
/// MTU exceeds one page. Needs kernel 5.18+ (frags, `bpf_xdp_get_buff_len`).
#[xdp(frags)]
pub fn roce_observer_xdp(ctx: XdpContext) -> u32 {
    xdp(
        &ctx,
        view::XdpView::multi_buffer(&ctx),
        roce_observer_common::SEQ_SLOT_XDP,
    )
}

/// The same observation for kernels without XDP frags (before 5.18): the loader picks this one
/// after probing. Every frame is one buffer here, so its length comes from the packet pointers;
/// a jumbo MTU then needs generic (skb) XDP, which hands the program the whole frame.
#[xdp]
pub fn roce_observer_xdp_page(ctx: XdpContext) -> u32 {
    xdp(
        &ctx,
        view::XdpView::single_buffer(&ctx),
        roce_observer_common::SEQ_SLOT_XDP_PAGE,
    )
}

#[inline(always)]
fn xdp(ctx: &XdpContext, view: view::XdpView, slot: u32) -> u32 {
    // SAFETY: reading a field of the context the kernel passed in.
    let ifindex = unsafe { (*ctx.ctx).ingress_ifindex };
    observe::observe(
        &view,
        ctx.as_ptr(),
        &maps::SCOREBOARD_XDP,
        slot,
        ifindex,
        Direction::Ingress as u8,
    );
    diag::flush();
    xdp_action::XDP_PASS
}

#[classifier]
pub fn roce_observer_tc(ctx: TcContext) -> i32 {
    // SAFETY: reading a field of the context the kernel passed in.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    let view = view::TcView::new(&ctx);
    observe::observe(
        &view,
        ctx.as_ptr(),
        &maps::SCOREBOARD_TC,
        0,
        ifindex,
        Direction::Egress as u8,
    );
    diag::flush();
    // PIPE: let the next filter or the default action decide, as if we were not here.
    TC_ACT_PIPE
}

/// The PSN scoreboard (roce-observer-common/src/sequence.rs) for the packets the XDP program
/// hands over (out of order, resent, sequence-error NAKs): a program of its own, reached by a
/// tail call, so that the verifier checks the scoreboard once rather than once for every way
/// through the parser. Loaded, never attached.
#[xdp(frags)]
pub fn roce_observer_xdp_seq(_ctx: XdpContext) -> u32 {
    observe::scoreboard();
    diag::flush();
    xdp_action::XDP_PASS
}

/// The same for the XDP program without frags.
#[xdp]
pub fn roce_observer_xdp_page_seq(_ctx: XdpContext) -> u32 {
    observe::scoreboard();
    diag::flush();
    xdp_action::XDP_PASS
}

/// The same for the TC program.
#[classifier]
pub fn roce_observer_tc_seq(_ctx: TcContext) -> i32 {
    observe::scoreboard();
    diag::flush();
    TC_ACT_PIPE
}

/// Copies the flows a report tick reads (gather.rs); run by user space with
/// BPF_PROG_TEST_RUN, never attached.
#[xdp]
pub fn roce_observer_gather(_ctx: XdpContext) -> u32 {
    gather::gather();
    xdp_action::XDP_PASS
}

/// Benchmark baseline, never attached: an XDP program that does nothing, so that
/// `cargo xtask bench` can print our per-packet cost as a ratio to it.
#[xdp]
pub fn roce_observer_baseline(_ctx: XdpContext) -> u32 {
    xdp_action::XDP_PASS
}

/// Benchmark floor, never attached by the observer: an exact per-flow count in a hash map
/// (floor.rs).
#[xdp]
pub fn roce_observer_floor_hash(ctx: XdpContext) -> u32 {
    floor::hash(&ctx);
    xdp_action::XDP_PASS
}

/// Benchmark baseline on TC egress, never attached by the observer: a classifier that does
/// nothing.
#[classifier]
pub fn roce_observer_baseline_tc(_ctx: TcContext) -> i32 {
    TC_ACT_PIPE
}

/// Benchmark floor on TC egress, never attached by the observer: the hash floor as a
/// classifier (floor.rs).
#[classifier]
pub fn roce_observer_floor_hash_tc(ctx: TcContext) -> i32 {
    floor::hash_tc(&ctx);
    TC_ACT_PIPE
}

/// Benchmark floor, never attached by the observer: a per-flow count in an array slot
/// (floor.rs).
#[xdp]
pub fn roce_observer_floor_array(ctx: XdpContext) -> u32 {
    floor::array(&ctx);
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
