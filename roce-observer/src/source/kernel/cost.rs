//! What the kernel programs cost and how full their ring buffer gets: run counts and times
//! from each attached program's `bpf_prog_info` (kept by the kernel only while BPF run-time
//! statistics are on: `kernel.bpf_stats_enabled`, or a `BPF_ENABLE_STATS` file descriptor
//! held by `run --bpf-stats`), and the ring buffer's producer and consumer positions read
//! through read-only mappings of its two position pages.

use std::{os::fd::OwnedFd, ptr::NonNull};

use aya::programs::ProgramInfo;

use crate::report::ProgramCost;

/// Whether BPF run-time statistics are on for the whole kernel (the sysctl; a
/// `BPF_ENABLE_STATS` descriptor held by any process also turns them on, and does not show
/// here).
pub fn stats_sysctl_on() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|v| v.trim() != "0")
}

/// Turn BPF run-time statistics on for as long as the returned descriptor lives (the kernel
/// turns them off again when the last such descriptor closes, even if the process is killed).
pub fn enable_stats() -> Result<OwnedFd, aya::sys::SyscallError> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
}

/// One program's cost from its info (`name`: the kernel keeps only 15 bytes of it).
pub fn program_cost(info: &ProgramInfo, name: &str, hook: &'static str) -> ProgramCost {
    let run_count = info.run_count();
    let run_time_ns = u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX);
    ProgramCost {
        name: name.to_string(),
        hook,
        run_count,
        run_time_ns,
        ns_per_run: (run_count > 0).then(|| run_time_ns as f64 / run_count as f64),
    }
}

/// The consumer and producer position pages of a BPF ring buffer, mapped read-only (the
/// reader's own mapping, aya's, is the one that moves the consumer position).
pub struct RingFill {
    consumer: NonNull<libc::c_void>,
    producer: NonNull<libc::c_void>,
    page: usize,
    /// Size of the data area, bytes.
    size: u64,
    /// The highest fill seen since the last [`RingFill::take_peak`].
    peak: f64,
}

impl RingFill {
    /// Map the position pages of the ring buffer `fd` of `size` data bytes; None if the
    /// kernel refuses the mappings (the fill is then not reported).
    pub fn map(fd: std::os::fd::BorrowedFd<'_>, size: u64) -> Option<RingFill> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: sysconf has no memory effects.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let map_page = |offset: usize| {
            // SAFETY: a fresh shared read-only mapping of one page of the ring buffer map
            // (offset 0: consumer position page, one page on: producer position page), which
            // the kernel allows read-only; nothing else refers to the new address.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    page,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    offset as libc::off_t,
                )
            };
            (addr != libc::MAP_FAILED)
                .then(|| NonNull::new(addr))
                .flatten()
        };
        let consumer = map_page(0)?;
        let Some(producer) = map_page(page) else {
            // SAFETY: `consumer` was mapped above with this length and is not used after.
            unsafe { libc::munmap(consumer.as_ptr(), page) };
            return None;
        };
        Some(RingFill {
            consumer,
            producer,
            page,
            size: size.max(1),
            peak: 0.0,
        })
    }

    /// Size of the data area, bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The fill now (bytes written and not yet read / size), also kept as the peak if highest.
    pub fn sample(&mut self) -> f64 {
        // SAFETY: both pages stay mapped while `self` lives; each starts with the position
        // (an unsigned long the kernel and the reader update atomically), read volatile.
        let (cons, prod) = unsafe {
            (
                std::ptr::read_volatile(self.consumer.as_ptr().cast::<u64>()),
                std::ptr::read_volatile(self.producer.as_ptr().cast::<u64>()),
            )
        };
        let fill = (prod.saturating_sub(cons) as f64 / self.size as f64).min(1.0);
        self.peak = self.peak.max(fill);
        fill
    }

    /// The highest fill sampled since the last call; the next period starts from the fill now.
    pub fn take_peak(&mut self) -> f64 {
        let now = self.sample();
        std::mem::replace(&mut self.peak, now).max(now)
    }
}

// SAFETY: the pointers are to read-only mappings owned by the value alone (made in `map`,
// removed in `drop`); reading them from another thread is as sound as from this one.
unsafe impl Send for RingFill {}

impl Drop for RingFill {
    fn drop(&mut self) {
        // SAFETY: both were mapped with `page` bytes in `map` and are not used after this.
        unsafe {
            libc::munmap(self.consumer.as_ptr(), self.page);
            libc::munmap(self.producer.as_ptr(), self.page);
        }
    }
}
