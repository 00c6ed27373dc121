//! The observer's own cost, measured in the process: CPU time (getrusage) over each report
//! interval and resident memory (/proc/self/statm). The kernel programs' side (run counts,
//! ring-buffer fill) comes from the source (`LiveSource::kernel_cost`).

use std::time::Instant;

use crate::report::{KernelCost, ObserverCost};

/// CPU time of this process (user + system) so far, seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer for getrusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Resident memory of this process, bytes (0 where /proc cannot be read).
fn rss_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// CPU time and wall time at the start of the current interval.
pub struct CostMeter {
    cpu_at: f64,
    wall_at: Instant,
}

impl Default for CostMeter {
    fn default() -> Self {
        CostMeter {
            cpu_at: cpu_seconds(),
            wall_at: Instant::now(),
        }
    }
}

impl CostMeter {
    /// The cost since the last call (or since the meter was made), with the source's kernel
    /// side; the next interval starts now.
    pub fn interval(&mut self, kernel: Option<KernelCost>) -> ObserverCost {
        let cpu = cpu_seconds();
        let now = Instant::now();
        let wall = now.duration_since(self.wall_at).as_secs_f64();
        let cpu_fraction = if wall > 0.0 {
            ((cpu - self.cpu_at) / wall).max(0.0)
        } else {
            0.0
        };
        self.cpu_at = cpu;
        self.wall_at = now;
        ObserverCost {
            cpu_fraction,
            cpu_seconds: cpu,
            rss_bytes: rss_bytes(),
            kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_interval_shows_cpu_and_the_process_has_memory() {
        let mut meter = CostMeter::default();
        // Burn some CPU so that the interval has time to show (getrusage has tick resolution
        // on some kernels): loop until a few ms of CPU time have passed.
        let start = cpu_seconds();
        let mut x = 0u64;
        while cpu_seconds() - start < 0.02 {
            for i in 0..10_000u64 {
                x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
            }
        }
        std::hint::black_box(x);
        let cost = meter.interval(None);
        assert!(cost.cpu_seconds >= 0.02, "{cost:?}");
        // Other test threads may add CPU time, but one busy thread gives at least a share.
        assert!(cost.cpu_fraction > 0.0, "{cost:?}");
        // The test binary's own text and heap are resident: far more than a page.
        assert!(cost.rss_bytes > 1 << 20, "{cost:?}");
        assert_eq!(cost.kernel, None);
    }
}
