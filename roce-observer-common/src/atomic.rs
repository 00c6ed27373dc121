//! Counter updates that other CPUs may race with: the atomic adds every per-flow, PFC and
//! mirror counter goes through, in the kernel and (as plain adds) in user space.

/// Add `n` to a counter that other CPUs may update at the same moment: in the kernel one flow
/// can be processed on several CPUs at once (docs/metrics.md, "Several CPUs"), so every
/// counter is an atomic add. BPF: `atomicrmw add` whose result is unused compiles to the
/// non-fetching BPF atomic add (the old BPF_XADD, on every kernel with eBPF, unlike the
/// fetching variants of 5.12). User space: a plain add, the engine owns its table.
#[inline(always)]
pub fn add(counter: &mut u64, n: u64) {
    #[cfg(target_arch = "bpf")]
    // SAFETY: `counter` is a valid, aligned u64 in a map value; other CPUs touch it only through
    // atomic operations of the same width. (core's AtomicU64 has no fetch_add on this target,
    // which lacks compare-and-swap; the intrinsic is the same `atomicrmw add`.)
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            counter, n,
        );
    }
    #[cfg(not(target_arch = "bpf"))]
    {
        // Wrapping, as the kernel's add: a correction adds `u64::MAX` (minus one).
        *counter = counter.wrapping_add(n);
    }
}

/// [`add`] on a 32-bit counter (the BPF atomic add has a 32-bit form on every kernel too).
#[inline(always)]
pub fn add32(counter: &mut u32, n: u32) {
    #[cfg(target_arch = "bpf")]
    // SAFETY: as in `add`, for a valid, aligned u32 in a map value.
    unsafe {
        core::intrinsics::atomic_xadd::<u32, u32, { core::intrinsics::AtomicOrdering::Relaxed }>(
            counter, n,
        );
    }
    #[cfg(not(target_arch = "bpf"))]
    {
        *counter = counter.wrapping_add(n);
    }
}
