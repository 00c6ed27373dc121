//! `roce-observer analyze FILE|-`: read a pcap/pcapng capture (file or stdin stream) through
//! the engine and print the table or the JSON document. Timestamps come from the capture, so
//! the output is deterministic.

use std::{
    fs::File,
    io::{BufWriter, Read},
    path::PathBuf,
    sync::atomic::{AtomicBool, Ordering},
};

use anyhow::Context;

use crate::report::{Beside, Snapshot};
use crate::{
    cli::{
        EngineArgs, OutputArgs,
        capture_time::{self, CaptureTime},
        exit::UsageError,
        values,
    },
    engine::{Engine, EngineConfig},
    fail_on::{self, FailOn},
    sink::outputs::{IntervalTables, OutputError, OutputPlan, Outputs},
    source::capture::capture_summary,
    wire::capture::{CaptureError, read_capture},
};

#[derive(Debug, Clone, clap::Args)]
pub struct AnalyzeArgs {
    /// Capture to read (pcap or pcapng; Ethernet, Linux cooked `tcpdump -i any` or raw IP
    /// link type); `-` reads a stream from stdin, e.g.
    /// `tcpdump -i mlx5_0 -w - | roce-observer analyze -`.
    #[arg(value_name = "FILE|-")]
    pub input: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
    /// For streams: print the table every SECS seconds of capture time (rates and paused
    /// fractions then cover each report's interval), then once more at the end.
    #[arg(long = "report-every", value_name = "SECS", conflicts_with = "json",
        value_parser = values::positive_seconds, allow_negative_numbers = true)]
    pub report_every: Option<std::time::Duration>,
    /// Analyze only the frames from this capture time on: seconds from the capture's first
    /// frame (`10`, `2.5`) or an RFC 3339 time (`2026-12-02T13:05:00Z`, with an offset or Z).
    #[arg(long, value_name = "TIME", value_parser = capture_time::parse)]
    pub since: Option<CaptureTime>,
    /// Analyze only the frames before this capture time (same forms as --since; a frame at
    /// exactly this time is left out, so `--until 10` and `--since 10` split a capture).
    #[arg(long, value_name = "TIME", value_parser = capture_time::parse)]
    pub until: Option<CaptureTime>,
    /// Exit with status 3 and a one-line reason when EXPR holds on the final report, after
    /// printing it (repeatable; any one that holds fails). EXPR is METRIC OP NUMBER[UNIT], e.g.
    /// `psn_gaps>0`, `cnp_rate>1000/s`, `pause_fraction>1%`, `rtt_p99>50us`, `stragglers>0`
    /// (docs/analyze.md lists the metrics).
    #[arg(long = "fail-on", value_name = "EXPR", value_parser = fail_on::parse)]
    pub fail_on: Vec<FailOn>,
    /// Flow table size: up to N flows (default 131072, ~2-3 KB of memory each); packets of new
    /// flows past it are counted in map_full, as the kernel counts them.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
        allow_negative_numbers = true)]
    pub max_flows: Option<u32>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Set by the first SIGINT/SIGTERM: end the input there and print what was read.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// On Ctrl-C (which also stops the `tcpdump` feeding the pipe) finish with the results so far
/// instead of dying silently. The handler is one-shot: a second Ctrl-C kills as usual.
fn stop_on_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is a valid value; the handler only stores to an atomic
        // (async-signal-safe); no SA_RESTART, so a blocked read() returns EINTR and the reader
        // below sees the flag.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// A reader that reports end of input once a stop signal arrived.
struct UntilStopped<R>(R);

impl<R: Read> Read for UntilStopped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if STOP.load(Ordering::Relaxed) {
                return Ok(0);
            }
            match self.0.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}

/// Errors of the analyze command.
#[derive(Debug, thiserror::Error)]
pub enum AnalyzeError {
    #[error("nothing could be read from {input}")]
    Unreadable {
        input: String,
        #[source]
        source: CaptureError,
    },
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
    fn keep(&mut self, ts_ns: u64) -> bool {
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

/// Feed a whole capture through a new engine. Returns the engine and the damage, if any.
pub fn analyze_reader<R: Read + Send>(
    input: R,
    cfg: EngineConfig,
) -> (Engine, Option<CaptureError>) {
    let (engine, damage, _) = analyze_reader_reporting(input, cfg, None, Window::default(), |_| {});
    (engine, damage)
}

/// [`analyze_reader`] over the frames inside `window`, calling `report` with a snapshot every
/// `every_ns` of capture time (and starting a new reporting interval after each). Returns the
/// window with its counts of frames left out.
pub fn analyze_reader_reporting<R: Read + Send>(
    input: R,
    cfg: EngineConfig,
    every_ns: Option<u64>,
    mut window: Window,
    mut report: impl FnMut(Snapshot),
) -> (Engine, Option<CaptureError>, Window) {
    let mut engine = Engine::new(cfg);
    let mut next_report: Option<u64> = None;
    let end = {
        let engine = std::cell::RefCell::new(&mut engine);
        read_capture(
            input,
            |iface| engine.borrow_mut().set_iface_name(iface.index, &iface.name),
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
                    report(e.snapshot(f.ts_ns));
                    e.begin_interval(f.ts_ns);
                    next_report = Some(f.ts_ns.saturating_add(every));
                }
            },
        )
    };
    engine.set_capture_summary(capture_summary(&end));
    (engine, end.error, window)
}

pub fn run(args: AnalyzeArgs) -> anyhow::Result<()> {
    let mut cfg = args.engine.engine_config()?;
    cfg.max_flows = crate::run::capture_max_flows(args.max_flows)?;
    let name = args.input.display().to_string();
    let every_ns = args
        .report_every
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let window = Window::new(args.since, args.until);
    if let (Some(since), Some(until)) = (args.since, args.until)
        && std::mem::discriminant(&since) == std::mem::discriminant(&until)
        && until.resolve(0) <= since.resolve(0)
    {
        return Err(UsageError(
            "--until must be later than --since: the window holds the frames from --since up to, \
             not including, --until"
                .into(),
        )
        .into());
    }
    let mut outputs = Outputs::open(OutputPlan {
        json: args.output.json,
        interval_tables: if every_ns.is_some() {
            IntervalTables::WithCaptureSpan
        } else {
            IntervalTables::Off
        },
        log_dir: args.output.log.config()?,
        prom_file: None,
        metrics: None,
        metrics_top_flows: crate::sink::metrics::DEFAULT_TOP_FLOWS,
    })?;
    stop_on_signals();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // The first failed interval write stops reading; it is returned once the reader is done.
    let mut failed: Option<OutputError> = None;
    // Interval reports are the base of the final report's rates (the rates it prints).
    let mut gate = fail_on::Judge::new(args.fail_on.clone());
    let report = |snap: Snapshot| {
        gate.note(&snap);
        if failed.is_none()
            && let Err(e) = outputs.interval(&snap, &mut out)
        {
            failed = Some(e);
            STOP.store(true, Ordering::Relaxed);
        }
        for warning in outputs.take_warnings() {
            eprintln!("roce-observer: {warning}");
        }
    };
    let (engine, damage, window) = if name == "-" {
        analyze_reader_reporting(
            UntilStopped(std::io::stdin()),
            cfg,
            every_ns,
            window,
            report,
        )
    } else {
        let file = File::open(&args.input).with_context(|| {
            format!("cannot open capture {name} (check the path and permissions)")
        })?;
        analyze_reader_reporting(UntilStopped(file), cfg, every_ns, window, report)
    };
    if window.is_set() {
        // On stderr: stdout stays the table or the JSON document.
        eprintln!(
            "roce-observer: --since/--until: {} frames before the window and {} from its end on \
             left out",
            window.before, window.after
        );
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    if STOP.load(Ordering::Relaxed) {
        eprintln!("interrupted: results cover the frames read so far");
    }
    let frames = engine.frames_seen();
    if let Some(err) = damage {
        if frames == 0 {
            return Err(AnalyzeError::Unreadable {
                input: name,
                source: err,
            }
            .into());
        }
        eprintln!("warning: {name}: {err}");
    }
    let snap = engine.report(
        engine.last_ts(),
        Beside {
            outputs: outputs.health(),
            ..Beside::default()
        },
    );
    outputs.finish(&snap, &mut BufWriter::new(out))?;
    // After the report, on stderr: the table or the document on stdout stays what it was.
    if let Some(hint) =
        crate::sink::hint::no_roce(&snap.summary, args.engine.roce_port, args.engine.vxlan_port)
    {
        eprintln!("roce-observer: {hint}");
    }
    gate.judge(&snap)?;
    Ok(())
}
