//! The batch schedule: a capture read to its end in the calling thread, with an interval
//! report every N ns of capture time, at the first frame past each boundary. Nothing here reads
//! a clock, so the reports depend on the capture only (`analyze`).

use std::{
    io::{Read, Write},
    sync::atomic::{AtomicBool, Ordering},
};

use super::{Pipeline, stop::Stop};
use crate::{
    cli::capture_time::CaptureTime,
    engine::Engine,
    sink::outputs::OutputError,
    source::capture::capture_summary,
    wire::capture::{CaptureError, read_capture},
};

/// When the batch schedule reports.
#[derive(Clone, Copy, Debug, Default)]
pub struct Batch {
    /// An interval report every this many ns of capture time (None: the final report only).
    pub every_ns: Option<u64>,
    /// The frames analysed (`--since`/`--until`).
    pub window: Window,
}

/// The capture-time window of `--since`/`--until`, and what it left out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    pub since: Option<CaptureTime>,
    pub until: Option<CaptureTime>,
    /// The capture's first frame (what relative times count from), once seen.
    start_ns: Option<u64>,
    /// Frames before the window and from its end on.
    pub before: u64,
    pub after: u64,
}

impl Window {
    pub fn new(since: Option<CaptureTime>, until: Option<CaptureTime>) -> Window {
        Window {
            since,
            until,
            ..Window::default()
        }
    }

    /// Whether there is a window at all.
    pub fn is_set(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }

    /// Whether the frame at `ts_ns` is inside (counting it as left out if not).
    pub fn keep(&mut self, ts_ns: u64) -> bool {
        let start = *self.start_ns.get_or_insert(ts_ns);
        if self.since.is_some_and(|t| ts_ns < t.resolve(start)) {
            self.before += 1;
            false
        } else if self.until.is_some_and(|t| ts_ns >= t.resolve(start)) {
            self.after += 1;
            false
        } else {
            true
        }
    }
}

/// How a batch run ended, before its final report.
#[derive(Debug)]
pub struct BatchEnd {
    /// Damage found in the capture after the frames read.
    pub damage: Option<CaptureError>,
    /// The window, with its counts of frames left out.
    pub window: Window,
    /// The first interval report that could not be written (reading stopped there).
    pub failed: Option<OutputError>,
}

/// A reader that reports end of input once a stop is asked for (by a signal, or by the driver).
struct UntilStopped<'a, R> {
    inner: R,
    stop: &'a Stop,
    halt: &'a AtomicBool,
}

impl<R: Read> Read for UntilStopped<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.stop.requested() || self.halt.load(Ordering::Relaxed) {
                return Ok(0);
            }
            match self.inner.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}

/// Feed the frames of `input` inside `window` into `engine`, calling `report(engine, ts)` at
/// the first frame `every_ns` of capture time after the last report (a new reporting interval
/// starts there); `report` returns false to stop reading. Returns the capture's damage.
pub fn feed<R: Read + Send>(
    input: R,
    engine: &mut Engine,
    every_ns: Option<u64>,
    window: &mut Window,
    stop: &Stop,
    mut report: impl FnMut(&mut Engine, u64) -> bool,
) -> Option<CaptureError> {
    let halt = AtomicBool::new(false);
    let input = UntilStopped {
        inner: input,
        stop,
        halt: &halt,
    };
    let mut next_report: Option<u64> = None;
    let end = {
        let engine = std::cell::RefCell::new(&mut *engine);
        read_capture(
            input,
            |iface| engine.borrow_mut().announce(&iface),
            |f| {
                if !window.keep(f.ts_ns) {
                    return;
                }
                let mut e = engine.borrow_mut();
                e.ingest(&f);
                let Some(every) = every_ns.filter(|n| *n > 0) else {
                    return;
                };
                let due = *next_report.get_or_insert(f.ts_ns.saturating_add(every));
                if f.ts_ns >= due {
                    if !report(&mut e, f.ts_ns) {
                        halt.store(true, Ordering::Relaxed);
                    }
                    e.begin_interval(f.ts_ns);
                    next_report = Some(f.ts_ns.saturating_add(every));
                }
            },
        )
    };
    engine.set_capture_summary(capture_summary(&end));
    end.error
}

/// Read `input` through `engine` on the batch schedule, the interval reports going through
/// `pipeline`; the final report is the caller's ([`Pipeline::finish`]), once it has said what
/// it has to say about the input.
pub fn run_batch<R: Read + Send>(
    input: R,
    engine: &mut Engine,
    pipeline: &mut Pipeline,
    batch: Batch,
    stop: &Stop,
    stdout: &mut dyn Write,
) -> BatchEnd {
    let mut window = batch.window;
    let mut failed = None;
    let damage = feed(input, engine, batch.every_ns, &mut window, stop, |e, ts| {
        if failed.is_some() {
            return false;
        }
        match pipeline.interval(e, ts, &[], None, stdout, false) {
            Ok(_) => true,
            Err(err) => {
                failed = Some(err);
                false
            }
        }
    });
    BatchEnd {
        damage,
        window,
        failed,
    }
}
