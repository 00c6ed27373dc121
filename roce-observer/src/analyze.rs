//! `roce-observer analyze FILE|-`: read a pcap/pcapng capture (file or stdin stream) through
//! the engine and print the table or the JSON document. Timestamps come from the capture, so
//! the output is deterministic.

use std::{
    fs::File,
    io::{BufWriter, Read, Write},
    path::PathBuf,
    sync::atomic::{AtomicBool, Ordering},
};

use anyhow::Context;

use crate::{
    engine::{
        Engine, EngineConfig,
        ecmp::EcmpHash,
        snapshot::{CaptureSummary, Snapshot},
    },
    sink,
    wire::capture::{CaptureError, read_capture},
};

#[derive(Debug, Clone, clap::Args)]
pub struct AnalyzeArgs {
    /// Capture to read (pcap or pcapng, Ethernet link type); `-` reads a stream from stdin,
    /// e.g. `tcpdump -i mlx5_0 -w - | roce-observer analyze -`.
    #[arg(value_name = "FILE|-")]
    pub input: PathBuf,
    /// Print the JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Path MTU in bytes for READ PSN reservations [default: 4096, or learned from READ
    /// responses]. Giving it turns learning off.
    #[arg(long, value_name = "BYTES", value_parser = parse_pmtu)]
    pub pmtu: Option<u32>,
    /// Link speed for PFC pause time, Gb/s.
    #[arg(long = "link-speed", value_name = "GBPS", default_value_t = 100.0)]
    pub link_speed: f64,
    /// RoCEv2 UDP destination port.
    #[arg(long = "roce-port", default_value_t = roce_observer_common::ROCE_V2_PORT)]
    pub roce_port: u16,
    /// Uplinks in the modelled ECMP view (0 turns the model off).
    #[arg(long = "ecmp-paths", value_name = "N", default_value_t = 8)]
    pub ecmp_paths: u32,
    /// Switch hash for the modelled ECMP view.
    #[arg(long = "ecmp-hash", value_enum, default_value_t = EcmpHash::Crc32)]
    pub ecmp_hash: EcmpHash,
    /// Hash seed for the modelled ECMP view.
    #[arg(long = "ecmp-seed", value_name = "S", default_value_t = 0)]
    pub ecmp_seed: u32,
    /// DSCP of the lossless class RoCE data should use.
    #[arg(long = "lossless-dscp", default_value_t = 26, value_parser = clap::value_parser!(u8).range(0..64))]
    pub lossless_dscp: u8,
    /// 802.1p priority of the lossless class (checked on tagged frames).
    #[arg(long = "lossless-pcp", default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..8))]
    pub lossless_pcp: u8,
    /// DSCP CNPs should use.
    #[arg(long = "cnp-dscp", default_value_t = 48, value_parser = clap::value_parser!(u8).range(0..64))]
    pub cnp_dscp: u8,
    /// Alert on latency samples above this many microseconds.
    #[arg(long = "rtt-alert-us", value_name = "US")]
    pub rtt_alert_us: Option<u64>,
    /// PFC storm: paused fraction (percent) that must be exceeded over a whole window.
    #[arg(
        long = "storm-threshold",
        value_name = "PERCENT",
        default_value_t = 50.0
    )]
    pub storm_threshold: f64,
    /// PFC storm window, milliseconds.
    #[arg(long = "storm-window-ms", value_name = "MS", default_value_t = 1000)]
    pub storm_window_ms: u64,
    /// For streams: print the table every SECS seconds of capture time (rates and paused
    /// fractions then cover each report's interval), then once more at the end.
    #[arg(long = "report-every", value_name = "SECS", conflicts_with = "json")]
    pub report_every: Option<f64>,
    #[command(flatten)]
    pub log: sink::cli::LogDirArgs,
}

fn parse_pmtu(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v @ (256 | 512 | 1024 | 2048 | 4096)) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a RoCE path MTU: use 256, 512, 1024, 2048 or 4096"
        )),
    }
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

impl AnalyzeArgs {
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            pmtu: self.pmtu.unwrap_or(roce_observer_common::DEFAULT_PMTU),
            pmtu_explicit: self.pmtu.is_some(),
            link_gbps: self.link_speed,
            roce_port: self.roce_port,
            ecmp_paths: self.ecmp_paths,
            ecmp_hash: self.ecmp_hash,
            ecmp_seed: self.ecmp_seed,
            lossless_dscp: self.lossless_dscp,
            lossless_pcp: self.lossless_pcp,
            cnp_dscp: self.cnp_dscp,
            rtt_alert_ns: self.rtt_alert_us.map(|us| us.saturating_mul(1000)),
            storm_threshold: (self.storm_threshold / 100.0).clamp(0.0, 1.0),
            storm_window_ns: self.storm_window_ms.saturating_mul(1_000_000),
            ..EngineConfig::default()
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
    #[error("--link-speed must be a positive number of Gb/s (got {0})")]
    LinkSpeed(f64),
    #[error("--report-every must be a positive number of seconds (got {0})")]
    ReportEvery(f64),
}

/// Feed a whole capture through a new engine. Returns the engine and the damage, if any.
pub fn analyze_reader<R: Read + Send>(
    input: R,
    cfg: EngineConfig,
) -> (Engine, Option<CaptureError>) {
    analyze_reader_reporting(input, cfg, None, |_| {})
}

/// [`analyze_reader`], calling `report` with a snapshot every `every_ns` of capture time (and
/// starting a new reporting interval after each).
pub fn analyze_reader_reporting<R: Read + Send>(
    input: R,
    cfg: EngineConfig,
    every_ns: Option<u64>,
    mut report: impl FnMut(&Snapshot),
) -> (Engine, Option<CaptureError>) {
    let mut engine = Engine::new(cfg);
    let mut next_report: Option<u64> = None;
    let end = {
        let engine = std::cell::RefCell::new(&mut engine);
        read_capture(
            input,
            |iface| engine.borrow_mut().set_iface_name(iface.index, &iface.name),
            |f| {
                let mut e = engine.borrow_mut();
                e.ingest_frame(f.ts_ns, f.data, f.orig_len, f.iface);
                let Some(every) = every_ns.filter(|n| *n > 0) else {
                    return;
                };
                let due = *next_report.get_or_insert(f.ts_ns.saturating_add(every));
                if f.ts_ns >= due {
                    report(&e.snapshot(f.ts_ns));
                    e.begin_interval(f.ts_ns);
                    next_report = Some(f.ts_ns.saturating_add(every));
                }
            },
        )
    };
    engine.set_capture_summary(CaptureSummary {
        format: if end.stats.format.is_empty() {
            "unknown"
        } else {
            end.stats.format
        },
        frames: end.stats.frames,
        snap_truncated: end.stats.snap_truncated,
        skipped_link_type: end.stats.skipped_link_type,
        error: end.error.as_ref().map(|e| e.to_string()),
    });
    (engine, end.error)
}

pub fn run(args: AnalyzeArgs) -> anyhow::Result<()> {
    if !(args.link_speed > 0.0 && args.link_speed.is_finite()) {
        return Err(AnalyzeError::LinkSpeed(args.link_speed).into());
    }
    let cfg = args.engine_config();
    let name = args.input.display().to_string();
    stop_on_signals();
    let every_ns = match args.report_every {
        Some(secs) if secs > 0.0 && secs.is_finite() => Some((secs * 1e9) as u64),
        Some(secs) => return Err(AnalyzeError::ReportEvery(secs).into()),
        None => None,
    };
    // Log time is capture time: files rotate by age and get full batches on the capture's clock.
    let mut log_dir = match args.log.config()? {
        Some(cfg) => Some(sink::logdir::LogDir::open(cfg, sink::logdir::now_ns())?),
        None => None,
    };
    let report = |snap: &Snapshot| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "--- {:.3} s of capture, up to {} ns ---",
            snap.summary.interval_s, snap.summary.interval_end_ts
        );
        let _ = out.write_all(sink::table::render(snap).as_bytes());
        let _ = writeln!(out);
        let _ = out.flush();
        if let Some(log) = log_dir.as_mut() {
            log.write(snap, snap.summary.interval_end_ts);
        }
    };
    let (engine, damage) = if name == "-" {
        analyze_reader_reporting(UntilStopped(std::io::stdin()), cfg, every_ns, report)
    } else {
        let file = File::open(&args.input).with_context(|| {
            format!("cannot open capture {name} (check the path and permissions)")
        })?;
        analyze_reader_reporting(UntilStopped(file), cfg, every_ns, report)
    };
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
    let mut snap = engine.snapshot(engine.last_ts());
    if let Some(log) = log_dir.as_mut() {
        log.write(&snap, snap.summary.interval_end_ts);
        log.finish();
        let health = log.health();
        snap.summary.log_records_lost = Some(health.records_lost);
        if health.records_lost > 0 {
            eprintln!(
                "warning: {} log lines could not be written to {} ({})",
                health.records_lost,
                log.dir().display(),
                log.last_error().unwrap_or("see earlier errors")
            );
        }
    }
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if args.json {
        sink::json::write_document(&mut out, &snap)
            .context("writing the JSON document to stdout")?;
    } else {
        out.write_all(sink::table::render(&snap).as_bytes())
            .context("writing the table to stdout")?;
    }
    out.flush().context("writing to stdout")?;
    Ok(())
}
