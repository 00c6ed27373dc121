//! `roce-observer analyze FILE|-`: read a pcap/pcapng capture (file or stdin stream) through
//! the pipeline on its batch schedule ([`crate::live::batch`]) and print the table or the JSON
//! document. Timestamps come from the capture, so the output is deterministic.

use std::{
    fs::File,
    io::{BufWriter, Read},
    path::PathBuf,
};

use anyhow::Context;

use crate::{
    cli::{
        args::{EngineArgs, OutputArgs},
        capture_time::{self, CaptureTime},
        exit::UsageError,
        values,
    },
    engine::{Engine, EngineConfig},
    fail_on::{self, FailOn},
    live::{
        Gate, Pipeline,
        batch::{self, Batch, Window, run_batch},
        stop::Stop,
    },
    sink::outputs::{IntervalTables, OutputPlan, Outputs},
    wire::capture::CaptureError,
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

/// Feed a whole capture through a new engine (the batch schedule without reports). Returns
/// the engine and the damage, if any.
pub fn analyze_reader<R: Read + Send>(
    input: R,
    cfg: EngineConfig,
) -> (Engine, Option<CaptureError>) {
    let mut engine = Engine::new(cfg);
    let damage = batch::feed(
        input,
        &mut engine,
        None,
        &mut Window::default(),
        &Stop::never(),
        |_, _| true,
    );
    (engine, damage)
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
    let outputs = Outputs::open(OutputPlan {
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
    let mut pipeline = Pipeline {
        gate: Gate {
            judge: fail_on::Judge::new(args.fail_on.clone()),
            each_interval: false,
        },
        advise_empty: true,
        ..Pipeline::new(outputs)
    };
    let stop = Stop::batch();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut engine = Engine::new(cfg);
    let schedule = Batch { every_ns, window };
    let end = if name == "-" {
        run_batch(
            std::io::stdin(),
            &mut engine,
            &mut pipeline,
            schedule,
            &stop,
            &mut out,
        )
    } else {
        let file = File::open(&args.input).with_context(|| {
            format!("cannot open capture {name} (check the path and permissions)")
        })?;
        run_batch(file, &mut engine, &mut pipeline, schedule, &stop, &mut out)
    };
    let window = end.window;
    if window.is_set() {
        // On stderr: stdout stays the table or the JSON document.
        eprintln!(
            "roce-observer: --since/--until: {} frames before the window and {} from its end on \
             left out",
            window.before, window.after
        );
    }
    if let Some(e) = end.failed {
        return Err(e.into());
    }
    if stop.requested() {
        eprintln!("interrupted: results cover the frames read so far");
    }
    let frames = engine.frames_seen();
    if let Some(err) = end.damage {
        if frames == 0 {
            return Err(AnalyzeError::Unreadable {
                input: name,
                source: err,
            }
            .into());
        }
        eprintln!("warning: {name}: {err}");
    }
    let now = engine.last_ts();
    let verdict = pipeline.finish(&mut engine, now, &[], None, &mut BufWriter::new(out), false)?;
    match verdict {
        Some(gate) => Err(gate.into()),
        None => Ok(()),
    }
}
