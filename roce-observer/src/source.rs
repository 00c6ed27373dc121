//! Event sources: the kernel programs (live, [`kernel`]), captures (`analyze`, see crate::wire;
//! fed live by [`capture`]) and the NIC's own counters ([`hw`]). Live sources implement [`LiveSource`], which is all the
//! live pipeline (crate::live) knows about them.

pub mod capture;
pub mod hw;
pub mod kernel;
pub mod qp_owner;

use std::os::fd::RawFd;

use crate::{engine::Engine, report::KernelCost};

/// Whether a live source can still produce data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceState {
    Open,
    /// The input ended (a capture stream reached its end): report once more and stop.
    Ended,
}

/// A source the live pipeline polls: the kernel programs, or a capture stream fed live
/// (`run --capture`, with an eventfd its reader thread raises as `ready_fd`).
pub trait LiveSource {
    /// A file descriptor that becomes readable when [`LiveSource::pump`] has work; `None` when
    /// the source is only read at each report interval.
    fn ready_fd(&self) -> Option<RawFd>;

    /// Move what is ready now into the engine, without blocking.
    fn pump(&mut self, engine: &mut Engine) -> anyhow::Result<SourceState>;

    /// Bring the engine fully up to date before a snapshot (a map-backed source copies its maps).
    fn refresh(&mut self, engine: &mut Engine) -> anyhow::Result<SourceState>;

    /// The time a snapshot taken now is stamped with, ns since the Unix epoch.
    fn now_ns(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }

    /// Stop observing (a kernel source detaches). Returns warnings for the user, e.g. about
    /// something that could not be cleaned up.
    fn stop(&mut self) -> Vec<String>;

    /// The interfaces watched and whether each is still there (the kernel programs: the name
    /// still leads to the interface they were attached to); none for a capture.
    fn interfaces(&self) -> Vec<(String, bool)> {
        Vec::new()
    }

    /// What the source's kernel programs cost and how full their ring buffer got since the
    /// last call; None for a source without kernel programs.
    fn kernel_cost(&mut self) -> Option<KernelCost> {
        None
    }

    /// Diagnostic lines from the source itself since the last call (the kernel programs'
    /// log with `run --kernel-log`); none by default.
    fn take_log(&mut self) -> Vec<String> {
        Vec::new()
    }
}
