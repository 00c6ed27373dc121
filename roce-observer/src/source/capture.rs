//! A capture fed live (`run --capture FILE|-`): the streaming pcap/pcapng reader
//! ([`crate::wire::capture::read_capture`], the one `analyze` uses) runs on a thread of its own
//! and hands frames to the live pipeline through a bounded channel; an eventfd tells the run
//! loop that frames are waiting. The engine then takes them through its capture path, exactly
//! as `analyze` does, so both commands count the same.
//!
//! Frames are copied out of the reader's buffer into one shared [`BytesMut`] arena and handed on
//! as [`Bytes`] views of it: one allocation per arena chunk rather than one per frame, and the
//! chunk is freed when the engine has taken the last frame in it.

use std::{
    cell::Cell,
    io::Read,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, sync_channel},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use bytes::{Bytes, BytesMut};

use crate::{
    engine::Engine,
    report::CaptureSummary,
    source::{LiveSource, SourceState},
    wire::{
        Link,
        capture::{CaptureEnd, CaptureIface, CapturedFrame, read_capture_at},
    },
};
use roce_observer_common::Direction;

/// Frames in flight between the reader thread and the engine (back-pressure for files read
/// as fast as possible: the reader waits for the engine).
const CHANNEL_FRAMES: usize = 8192;
/// Frames taken per wake-up, so that keys and reports are served while a big file streams.
const PUMP_BUDGET: usize = 4096;
/// Arena chunk the frames are copied into.
const ARENA_CHUNK: usize = 256 << 10;

/// How fast a capture is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// As fast as the engine takes frames.
    Fast,
    /// At the pace the frames were recorded (timestamps relative to the first frame).
    Recorded,
}

enum Message {
    Iface(CaptureIface),
    Frame {
        ts_ns: u64,
        data: Bytes,
        orig_len: u32,
        iface: u32,
        direction: Direction,
        link: Link,
        /// Bytes of the input up to the end of this frame's record.
        read_to: u64,
    },
    End(CaptureEnd),
}

/// Shared between the reader thread and the source.
struct Signal {
    /// Becomes readable when messages are waiting.
    event: OwnedFd,
    /// Set once the eventfd was written and not yet drained: the reader writes it only on the
    /// first message after a drain, not once per frame.
    raised: AtomicBool,
    /// Set by [`LiveSource::stop`]: the reader stops at its next read or frame.
    stop: AtomicBool,
}

impl Signal {
    fn raise(&self) {
        if !self.raised.swap(true, Ordering::AcqRel) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to an eventfd we own. A failed write can
            // only mean the counter is saturated, i.e. already readable.
            unsafe { libc::write(self.event.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }

    fn lower(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd; EAGAIN (nothing
        // to read) is fine.
        unsafe { libc::read(self.event.as_raw_fd(), (&raw mut n).cast(), 8) };
        self.raised.store(false, Ordering::Release);
    }
}

/// A reader that reports end of input once the source is stopped.
struct UntilStopped<R> {
    inner: R,
    signal: Arc<Signal>,
}

impl<R: Read> Read for UntilStopped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.signal.stop.load(Ordering::Relaxed) {
            return Ok(0);
        }
        self.inner.read(buf)
    }
}

/// A capture stream or file as a live source.
pub struct CaptureSource {
    name: String,
    signal: Arc<Signal>,
    messages: Receiver<Message>,
    /// The first message, read by [`CaptureSource::start`] to fail early on a non-capture.
    first: Option<Message>,
    ended: bool,
    /// Timestamp of the newest frame taken.
    last_ts: u64,
    pace: Pace,
    /// At the recorded pace: the first frame's timestamp and when it was taken, so that the
    /// capture clock runs on between frames.
    origin: Option<(u64, Instant)>,
    /// The size of a regular file (none for a stream): the report says how much of it the
    /// engine has taken.
    size: Option<u64>,
}

impl CaptureSource {
    /// Start reading `input` (named `name` in messages, `size` bytes long when it is a regular
    /// file) on a thread. Waits up to `wait` for the capture header, so that a stream that is
    /// not a capture fails here, before a UI takes the terminal; a slower stream's header is
    /// checked as soon as it arrives.
    pub fn start<R: Read + Send + 'static>(
        name: String,
        input: R,
        size: Option<u64>,
        pace: Pace,
        wait: Duration,
    ) -> anyhow::Result<CaptureSource> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("creating an eventfd");
        }
        let signal = Arc::new(Signal {
            // SAFETY: `fd` is a fresh descriptor owned by nobody else.
            event: unsafe { OwnedFd::from_raw_fd(fd) },
            raised: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let (tx, messages) = sync_channel(CHANNEL_FRAMES);
        let input = UntilStopped {
            inner: input,
            signal: signal.clone(),
        };
        let thread_signal = signal.clone();
        std::thread::Builder::new()
            .name("capture-reader".into())
            .spawn(move || read_into(input, tx, pace, &thread_signal))
            .context("starting the capture reader thread")?;
        let mut src = CaptureSource {
            name,
            signal,
            messages,
            first: None,
            ended: false,
            last_ts: 0,
            pace,
            origin: None,
            size,
        };
        match src.messages.recv_timeout(wait) {
            Ok(Message::End(end)) => src.first = Some(Message::End(src.check_end(end)?)),
            Ok(m) => src.first = Some(m),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
        Ok(src)
    }

    /// What the capture is called in messages ("stdin" or the path).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An end with nothing read is an error; any other end is reported with the results.
    fn check_end(&self, end: CaptureEnd) -> anyhow::Result<CaptureEnd> {
        match &end.error {
            Some(err) if end.stats.frames == 0 => {
                anyhow::bail!("nothing could be read from {}: {err}", self.name)
            }
            _ => Ok(end),
        }
    }

    fn apply(&mut self, engine: &mut Engine, message: Message) -> anyhow::Result<()> {
        match message {
            Message::Iface(iface) => engine.announce(&iface),
            Message::Frame {
                ts_ns,
                data,
                orig_len,
                iface,
                direction,
                link,
                read_to,
            } => {
                if let Some(size) = self.size {
                    engine.set_capture_read(read_to as f64 / size.max(1) as f64);
                }
                self.last_ts = self.last_ts.max(ts_ns);
                if self.pace == Pace::Recorded && self.origin.is_none() {
                    self.origin = Some((ts_ns, Instant::now()));
                }
                engine.ingest(&CapturedFrame {
                    ts_ns,
                    data: &data,
                    orig_len,
                    iface,
                    direction,
                    link,
                });
            }
            Message::End(end) => {
                let end = self.check_end(end)?;
                if self.size.is_some() {
                    engine.set_capture_read(1.0);
                }
                engine.set_capture_summary(capture_summary(&end));
                self.ended = true;
            }
        }
        Ok(())
    }

    /// Move up to `budget` waiting messages into the engine.
    fn drain(&mut self, engine: &mut Engine, budget: usize) -> anyhow::Result<SourceState> {
        if let Some(m) = self.first.take() {
            self.apply(engine, m)?;
        }
        let mut taken = 0;
        while !self.ended && taken < budget {
            match self.messages.try_recv() {
                Ok(m) => self.apply(engine, m)?,
                Err(TryRecvError::Empty) => break,
                // The reader always sends an end before leaving; without one it panicked.
                Err(TryRecvError::Disconnected) => {
                    anyhow::bail!("the capture reader for {} stopped unexpectedly", self.name)
                }
            }
            taken += 1;
        }
        if taken == budget && !self.ended {
            // More is waiting: wake the loop again after it has served keys and reports.
            self.signal.raise();
        }
        Ok(if self.ended {
            SourceState::Ended
        } else {
            SourceState::Open
        })
    }
}

/// The capture's own counts as the snapshot shows them (`analyze` and `run --capture`).
pub fn capture_summary(end: &CaptureEnd) -> CaptureSummary {
    CaptureSummary {
        format: if end.stats.format.is_empty() {
            "unknown"
        } else {
            end.stats.format
        },
        frames: end.stats.frames,
        snap_truncated: end.stats.snap_truncated,
        skipped_link_type: end.stats.skipped_link_type,
        link_types: end.stats.link_types.iter().map(|l| l.name()).collect(),
        unseen: end
            .stats
            .link_types
            .iter()
            .filter_map(|l| l.unseen().map(|u| format!("{}: {u}", l.name())))
            .collect(),
        error: end.error.as_ref().map(|e| e.to_string()),
    }
}

/// The reader thread: the whole capture through `read_capture`, each frame copied into the
/// arena and sent on; then the end (counts and damage).
fn read_into<R: Read + Send>(input: R, tx: SyncSender<Message>, pace: Pace, signal: &Signal) {
    // Set when the receiver is gone (the run ended): read no further.
    let closed = Cell::new(false);
    let send = |m: Message| {
        if closed.get() || tx.send(m).is_err() {
            closed.set(true);
        } else {
            signal.raise();
        }
    };
    let mut arena = BytesMut::new();
    let mut clock: Option<(u64, Instant)> = None;
    let position = std::cell::Cell::new(0);
    let end = read_capture_at(
        input,
        |iface| send(Message::Iface(iface)),
        |f| {
            if closed.get() || signal.stop.load(Ordering::Relaxed) {
                return;
            }
            if pace == Pace::Recorded {
                wait_for(&mut clock, f.ts_ns, signal);
            }
            if arena.capacity() < f.data.len() {
                arena.reserve(ARENA_CHUNK.max(f.data.len()));
            }
            arena.extend_from_slice(f.data);
            send(Message::Frame {
                ts_ns: f.ts_ns,
                data: arena.split().freeze(),
                orig_len: f.orig_len,
                iface: f.iface,
                direction: f.direction,
                link: f.link,
                read_to: position.get(),
            });
        },
        &position,
    );
    send(Message::End(end));
}

/// Sleep until frame time `ts_ns` is due at the recorded pace (the first frame sets the
/// origin; a timestamp that goes back is due at once). Wakes early when stopped.
fn wait_for(clock: &mut Option<(u64, Instant)>, ts_ns: u64, signal: &Signal) {
    let (first, start) = *clock.get_or_insert((ts_ns, Instant::now()));
    let due = start + Duration::from_nanos(ts_ns.saturating_sub(first));
    while !signal.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= due {
            return;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(100)));
    }
}

impl LiveSource for CaptureSource {
    fn ready_fd(&self) -> Option<RawFd> {
        Some(self.signal.event.as_raw_fd())
    }

    fn pump(&mut self, engine: &mut Engine) -> anyhow::Result<SourceState> {
        self.signal.lower();
        self.drain(engine, PUMP_BUDGET)
    }

    fn refresh(&mut self, engine: &mut Engine) -> anyhow::Result<SourceState> {
        // Whatever is waiting now, but no more than the channel holds: a fast reader must not
        // hold the report back forever.
        self.drain(engine, CHANNEL_FRAMES)
    }

    /// Capture time, so that rates cover capture time whatever the reading pace: the newest
    /// frame's timestamp, or at the recorded pace the capture clock (first frame + time since),
    /// which also runs while no frame comes.
    fn now_ns(&self) -> u64 {
        match self.origin {
            Some((first, at)) if !self.ended => {
                let running = first.saturating_add(at.elapsed().as_nanos() as u64);
                running.max(self.last_ts)
            }
            _ => self.last_ts,
        }
    }

    fn stop(&mut self) -> Vec<String> {
        self.signal.stop.store(true, Ordering::Relaxed);
        // The reader thread is not joined: it may be blocked reading a pipe, and it ends with
        // the process (or at its next read, for a file).
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;

    /// The report says how much of a capture file the engine has taken: after the first frame,
    /// the header and that frame's record; at the end, all of it. A stream has no share.
    #[test]
    fn the_share_of_a_file_read_follows_the_frames_taken() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/mixed_demo.pcap");
        let bytes = std::fs::read(&path).expect("fixture");
        let size = bytes.len() as u64;
        // A pcap's file header is 24 bytes, each record's header 16, then its captured bytes.
        let first_record = 24
            + 16
            + u64::from(u32::from_le_bytes(
                bytes[32..36].try_into().expect("a record header"),
            ));
        let mut src = CaptureSource::start(
            "fixture".into(),
            std::io::Cursor::new(bytes.clone()),
            Some(size),
            Pace::Fast,
            Duration::from_secs(5),
        )
        .expect("a capture");
        let mut engine = Engine::new(EngineConfig::default());
        // The header was read by start; frames come one message at a time.
        while engine.frames_seen() == 0 {
            src.drain(&mut engine, 1).expect("drain");
        }
        let share = engine.snapshot(0).summary.capture_read.expect("a share");
        assert_eq!(share, first_record as f64 / size as f64);
        while src.drain(&mut engine, CHANNEL_FRAMES).expect("drain") == SourceState::Open {}
        assert_eq!(engine.snapshot(0).summary.capture_read, Some(1.0));

        let mut stream = CaptureSource::start(
            "stdin".into(),
            std::io::Cursor::new(bytes),
            None,
            Pace::Fast,
            Duration::from_secs(5),
        )
        .expect("a capture");
        let mut engine = Engine::new(EngineConfig::default());
        while stream.drain(&mut engine, CHANNEL_FRAMES).expect("drain") == SourceState::Open {}
        assert!(engine.frames_seen() > 0);
        assert_eq!(engine.snapshot(0).summary.capture_read, None);
    }
}
