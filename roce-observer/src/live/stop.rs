//! Stopping on SIGINT/SIGTERM, the same way for both schedules: the first signal asks the run
//! to end with the results so far (a final report, the `--fail-on` verdict). The handler only
//! stores to an atomic and writes to an eventfd, both async-signal-safe; the batch schedule
//! reads the flag between reads, the live loop waits on the eventfd.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use anyhow::Context as _;
use tokio::io::{Interest, unix::AsyncFd};

use super::Fd;

/// Set by the first SIGINT/SIGTERM.
static REQUESTED: AtomicBool = AtomicBool::new(false);
/// The eventfd the handler raises (-1: none).
static WAKE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_stop_signal(_: libc::c_int) {
    REQUESTED.store(true, Ordering::Relaxed);
    let fd = WAKE.load(Ordering::Relaxed);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd that `Stop` keeps open for the
        // rest of the process; write(2) is async-signal-safe.
        unsafe { libc::write(fd, (&raw const one).cast(), 8) };
    }
}

/// What a second signal does, and whether a signal interrupts a blocked read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handling {
    /// One-shot, no SA_RESTART: a blocked read() (a capture on stdin) returns EINTR, so the
    /// reader sees the request; a second Ctrl-C kills as usual (`analyze`, which has nothing
    /// to clean up).
    Batch,
    /// Kept, with SA_RESTART: other threads' reads are not disturbed, and a second Ctrl-C does
    /// not cut the cleanup short (a kernel source detaches its programs).
    Live,
}

fn install(handling: Handling) {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is a valid value; the handler only touches atomics and
        // write(2) (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            sa.sa_flags = match handling {
                Handling::Batch => libc::SA_RESETHAND,
                Handling::Live => libc::SA_RESTART,
            };
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// A request to stop, from SIGINT/SIGTERM once installed.
pub struct Stop {
    installed: bool,
    wake: Option<AsyncFd<Fd>>,
}

impl Stop {
    /// Never requested (library callers and tests).
    pub fn never() -> Stop {
        Stop {
            installed: false,
            wake: None,
        }
    }

    /// For the batch schedule: handlers installed, checked with [`Stop::requested`].
    pub fn batch() -> Stop {
        install(Handling::Batch);
        Stop {
            installed: true,
            wake: None,
        }
    }

    /// For the live schedule: handlers installed and an eventfd to wait on. Call from inside
    /// the tokio runtime.
    pub fn live() -> anyhow::Result<Stop> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("creating an eventfd");
        }
        // The descriptor is never closed: the handler may write to it at any time for the rest
        // of the process.
        WAKE.store(fd, Ordering::Relaxed);
        install(Handling::Live);
        // SAFETY: `fd` is never closed (above), so it outlives the AsyncFd; `Fd` always
        // returns that same fd.
        let wake = unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) }
            .context("installing the SIGINT/SIGTERM handler")?;
        Ok(Stop {
            installed: true,
            wake: Some(wake),
        })
    }

    /// Whether a stop was asked for.
    pub fn requested(&self) -> bool {
        self.installed && REQUESTED.load(Ordering::Relaxed)
    }

    /// Complete once a stop was asked for (never without a live handler).
    pub async fn wait(&self) {
        let Some(wake) = self.wake.as_ref() else {
            return std::future::pending().await;
        };
        while !self.requested() {
            match wake.readable().await {
                Ok(mut guard) => guard.clear_ready(),
                Err(_) => return std::future::pending().await,
            }
        }
    }
}
