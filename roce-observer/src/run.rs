//! `roce-observer run`: the live pipeline fed by the kernel programs (loaded and attached to
//! `-i` interfaces) or by a capture (`--capture FILE|-`), handed to [`crate::live`]
//! (engine -> terminal UI, periodic tables, or one JSON document at the end).

use std::{
    fs::File,
    future::Future,
    io::IsTerminal as _,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use crate::{
    cli::{
        args::{EngineArgs, MetricsArgs, OutputArgs, RdmaSysfsArgs},
        exit::UsageError,
        values,
    },
    color::ColorChoice,
    engine::Engine,
    fail_on::{self, FailOn},
    live::{Gate, Pipeline, Schedule, Ui, run_live, stop::Stop},
    sink::outputs::{IntervalTables, OutputPlan, Outputs},
    source::{
        LiveSource,
        capture::{CaptureSource, Pace},
        hw::{self, DeviceChoice, NicWatch},
        kernel::{KernelError, KernelOptions, KernelSource, ifindex},
        qp_owner::OwnerBook,
    },
};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum XdpModeArg {
    /// Let the kernel choose (native where the driver supports it).
    Auto,
    /// Generic XDP in the network stack (works everywhere, slower).
    Skb,
    /// Native XDP in the driver.
    Native,
}

#[derive(Args, Debug)]
#[command(
    group(clap::ArgGroup::new("source").args(["ifaces", "capture"]).required(true)),
    after_long_help = RUN_EXAMPLES
)]
pub struct RunArgs {
    /// Colour in the terminal UI: auto = on a terminal unless NO_COLOR is set (no-color.org).
    /// Problems are marked with `!` as well, so nothing is lost without colour.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        value_name = "WHEN",
        help_heading = "Output"
    )]
    pub color: ColorChoice,
    /// Interfaces to watch (comma-separated): XDP on ingress, TC on egress of each.
    #[arg(
        short = 'i',
        long = "iface",
        value_name = "IFACE",
        value_delimiter = ',',
        value_parser = parse_iface,
        help_heading = "Source"
    )]
    pub ifaces: Vec<String>,
    /// Feed the live pipeline from a pcap/pcapng capture instead of the kernel programs: a
    /// file, or `-` for a stream on stdin (`tcpdump -i mlx5_0 -w - | roce-observer run
    /// --capture -`; the UI then reads keys from the terminal). Needs no privileges.
    #[arg(
        long,
        value_name = "FILE|-",
        conflicts_with_all = ["ifaces", "xdp_mode", "kernel_log", "no_steps"],
        help_heading = "Source"
    )]
    pub capture: Option<PathBuf>,
    /// With --capture: replay frames at the pace they were recorded (default: as fast as
    /// possible).
    #[arg(long, requires = "capture", help_heading = "Source")]
    pub realtime: bool,
    /// RDMA device whose counters (hw_counters, ethtool PFC counters) are shown beside the
    /// wire view, or `none` [default: every device in /sys/class/infiniband, if any].
    #[arg(long = "rdma-dev", value_name = "NAME|none", help_heading = "Source")]
    pub rdma_dev: Option<DeviceChoice>,
    #[command(flatten)]
    pub rdma_sysfs: RdmaSysfsArgs,
    /// Stop after this many seconds (default: until Ctrl-C; 0: one report).
    #[arg(long, value_name = "SECS", value_parser = values::seconds,
        allow_negative_numbers = true, help_heading = "Output")]
    pub duration: Option<Duration>,
    /// Plain periodic tables instead of the terminal UI (the UI needs a terminal on stdout;
    /// without one, plain output is used anyway).
    #[arg(long, help_heading = "Output")]
    pub no_tui: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Write the same Prometheus metrics as --metrics to this file every interval (atomically
    /// replaced), for node_exporter's textfile collector.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub prom_file: Option<std::path::PathBuf>,
    /// Seconds between two reports.
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = values::positive_seconds,
        allow_negative_numbers = true, help_heading = "Output")]
    pub interval: Duration,
    /// Flow table size: in the kernel up to N IPv4 flows and up to N IPv6 flows (two maps;
    /// default 16384); with --capture up to N flows (default 131072, ~3 KB of memory each).
    /// Packets of new flows past it are counted in map_full.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
        allow_negative_numbers = true, help_heading = "Engine")]
    pub max_flows: Option<u32>,
    /// XDP attach mode.
    #[arg(
        long,
        value_name = "MODE",
        value_enum,
        default_value = "auto",
        help_heading = "Kernel"
    )]
    pub xdp_mode: XdpModeArg,
    /// Exit with status 3 and a one-line reason when EXPR holds (repeatable; any one that holds
    /// fails; the metrics of `analyze --fail-on`, docs/analyze.md). With --capture it is judged
    /// on the final report, when the capture ends. On interfaces it is judged on every interval
    /// report: the first that trips ends the run (programs detached, final report printed);
    /// it is judged on the final report too (Ctrl-C, --duration).
    #[arg(long = "fail-on", value_name = "EXPR", value_parser = fail_on::parse,
        help_heading = "Output")]
    pub fail_on: Vec<FailOn>,
    /// Log rare kernel-side events to stderr (after the UI closes when it is up): the flow
    /// table full, the event ring buffer full, the first frame of each header combination.
    /// Off by default; off, the kernel programs carry no logging code at all.
    #[arg(long, help_heading = "Kernel")]
    pub kernel_log: bool,
    /// Interfaces only: do not keep the activity runs that training steps are found from
    /// (`steps` is then null). Saves the precise clock read on every data packet (~15 ns of
    /// the kernel programs' per-packet time); for monitor hosts at line rate.
    #[arg(long, help_heading = "Kernel")]
    pub no_steps: bool,
    /// Interfaces only: turn the kernel's BPF run-time statistics on while the observer runs
    /// (off again when it exits), so that reports show each program's runs and ns per run
    /// (`summary.observer`). They cost every BPF program on the host two clock reads per
    /// run; without this flag they are shown only when `sysctl kernel.bpf_stats_enabled=1`.
    #[arg(long)]
    pub bpf_stats: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Examples at the end of `run --help` (and in the man page).
const RUN_EXAMPLES: &str = "\
Examples:
  roce-observer run --capture tests/fixtures/mixed_demo.pcap
      replay a bundled capture in the terminal UI (no privileges needed)
  sudo roce-observer run -i eth1,eth2
      watch two interfaces live (XDP ingress, TC egress)
  sudo roce-observer run -i eth1 --no-tui --duration 60 --json > report.json
      one minute, then one JSON document
  sudo roce-observer run -i eth1 --metrics 9470 --log-dir /var/log/roce-observer
      a long-running service: Prometheus on 127.0.0.1:9470 and rotating JSON Lines
  tcpdump -i eth1 -w - udp port 4791 | roce-observer run --capture -
      a live stream where XDP cannot see RoCE (a NIC that offloads it)

Exit status: 0 done, 1 runtime error, 2 command-line error, 3 a --fail-on condition held.";

/// Kept here for callers of the kernel source outside the crate (tests).
pub use crate::source::kernel::refresh;

/// An empty name is a configuration mistake (an unset variable in the service's environment
/// file, a stray comma), not an interface: say so instead of failing on a lookup of "".
fn parse_iface(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err(
            "an empty interface name: give interfaces as `-i eth1,eth2` (the \
                    service reads them from ROCE_OBSERVER_IFACES in /etc/default/roce-observer)"
                .into(),
        );
    }
    Ok(s.to_string())
}

/// Default of `--max-flows` for the kernel's two maps (preallocated: ~9 MiB for IPv4).
pub const KERNEL_MAX_FLOWS: u32 = 16384;
/// Default of `--max-flows` for captures (`analyze`, `run --capture`): at ~2-3 KB per flow
/// (the engine's record, its history and snapshot), a few hundred MB at most.
pub const CAPTURE_MAX_FLOWS: u32 = 131_072;

/// The engine's table size for a capture source.
pub fn capture_max_flows(n: Option<u32>) -> anyhow::Result<usize> {
    match n.unwrap_or(CAPTURE_MAX_FLOWS) {
        0 => anyhow::bail!("--max-flows must be at least 1"),
        n => Ok(n as usize),
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    crate::color::init(args.color);
    let (interval, duration) = (args.interval, args.duration);
    let nic = NicWatch::start(
        &args.rdma_sysfs.dir,
        args.rdma_dev.as_ref().unwrap_or(&DeviceChoice::All),
        true,
    )?;
    // QP owners where there are RDMA devices to own QPs (the NIC counters found some).
    let owners = nic.is_some().then(|| {
        OwnerBook::new(match &args.rdma_dev {
            Some(DeviceChoice::Only(name)) => Some(name.clone()),
            _ => None,
        })
    });
    let schedule = Schedule { interval, duration };
    let gate = Gate {
        judge: fail_on::Judge::new(args.fail_on.clone()),
        // A capture ends by itself and is judged then; the interfaces are watched until
        // stopped, so each interval is a verdict.
        each_interval: args.capture.is_none(),
    };
    let mut cfg = args.engine.engine_config()?;
    if args.capture.is_some() {
        cfg.max_flows = capture_max_flows(args.max_flows)?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut use_tui = !args.output.json && !args.no_tui && std::io::stdout().is_terminal();
    if use_tui && !std::io::stdin().is_terminal() && File::open("/dev/tty").is_err() {
        // Keys are read from the controlling terminal when stdin carries a capture.
        eprintln!("roce-observer: no terminal to read keys from (/dev/tty): plain tables instead");
        use_tui = false;
    }
    // Outputs first: an unusable --log-dir or a busy --metrics address fails before anything
    // is loaded or attached.
    let outputs = Outputs::open(OutputPlan {
        json: args.output.json,
        interval_tables: if args.output.json || use_tui {
            IntervalTables::Off
        } else {
            IntervalTables::Plain
        },
        log_dir: args.output.log.config()?,
        prom_file: args.prom_file.clone(),
        metrics: args.metrics.metrics,
        metrics_top_flows: args.metrics.metrics_top_flows,
    })?;
    let pipeline = Pipeline {
        outputs,
        nic,
        owners,
        gate,
        // A capture that holds no RoCE says why and what to try, as `analyze` does.
        advise_empty: args.capture.is_some(),
    };
    rt.block_on(async {
        // Handlers first: a signal right after "attached" must stop us cleanly, not kill us.
        let stop = Stop::live()?;
        let stop = async move { stop.wait().await };
        let live = Live {
            pipeline,
            use_tui,
            schedule,
            stop,
        };
        match &args.capture {
            Some(path) => run_capture(path, args.realtime, cfg, live).await,
            None => run_kernel(&args, cfg, live).await,
        }
    })
}

/// What both sources hand to the live pipeline.
struct Live<F> {
    pipeline: Pipeline,
    use_tui: bool,
    schedule: Schedule,
    stop: F,
}

impl<F: Future<Output = ()>> Live<F> {
    async fn run<S: LiveSource>(
        self,
        title: String,
        src: &mut S,
        mut engine: Engine,
    ) -> anyhow::Result<()> {
        let ui = self
            .use_tui
            .then(|| Ui::start(title, &mut engine, src.now_ns()));
        let mut stdout = std::io::stdout().lock();
        let ended = run_live(
            src,
            &mut engine,
            self.pipeline,
            ui,
            self.schedule,
            self.stop,
            &mut stdout,
        )
        .await?;
        for warning in ended.warnings {
            eprintln!("roce-observer: {warning}");
        }
        if !ended.gone.is_empty() {
            anyhow::bail!(
                "{} removed while watched (the programs on it went with it); the report covers \
                 what was seen until then. Exiting with an error so that the service manager \
                 restarts the observer (it attaches again once the interface is back)",
                ended
                    .gone
                    .iter()
                    .map(|i| format!("interface `{i}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        match ended.tripped {
            Some(gate) => Err(gate.into()),
            None => Ok(()),
        }
    }
}

async fn run_kernel<F: Future<Output = ()>>(
    args: &RunArgs,
    mut cfg: crate::engine::EngineConfig,
    live: Live<F>,
) -> anyhow::Result<()> {
    // The kernel programs reserve READ PSNs with a fixed path MTU: the engine cannot learn one.
    cfg.pmtu_explicit = true;
    let opts = KernelOptions {
        roce_port: args.engine.roce_port,
        vxlan_port: args.engine.vxlan_port,
        pmtu: args.engine.pmtu(),
        reorder_window: cfg.reorder_window,
        max_flows: args.max_flows.unwrap_or(KERNEL_MAX_FLOWS),
        xdp_mode: match args.xdp_mode {
            XdpModeArg::Auto => aya::programs::XdpMode::Default,
            XdpModeArg::Skb => aya::programs::XdpMode::Skb,
            XdpModeArg::Native => aya::programs::XdpMode::Driver,
        },
        burst_count: u32::try_from(cfg.burst_count).unwrap_or(u32::MAX),
        burst_window_ns: cfg.burst_window_ns,
        rtt_alert_ns: cfg.rtt_alert_ns,
        kernel_log: args.kernel_log,
        runs: !args.no_steps,
        bpf_stats: args.bpf_stats,
        ..KernelOptions::default()
    };
    // A misspelt interface is said before anything else: loading as a user without the
    // privilege would otherwise fail first, and the user would fix the wrong thing.
    if let Some(missing) = args.ifaces.iter().find(|i| ifindex(i).is_none()) {
        return Err(KernelError::NoSuchInterface(missing.clone()).into());
    }
    // Said once the programs are attached: a run that cannot load says one thing, what to fix.
    let mut speed_note = None;
    if !cfg.link_known {
        // Loads (ECN marking at low load) are judged only against a known speed: the
        // interfaces' own when they share one, as a NIC reports it (a veth reports none).
        speed_note = Some(
            match hw::shared_link_speed(Path::new(hw::NET_SYSFS), &args.ifaces) {
                Ok(gbps) => {
                    cfg.link_gbps = gbps;
                    cfg.link_known = true;
                    format!("link speed {gbps} Gb/s, as the interfaces report it")
                }
                Err(why) => format!(
                    "no link speed ({why}): ECN marking at low load is not judged and pause \
                     times assume {} Gb/s; give --link-speed",
                    cfg.link_gbps
                ),
            },
        );
    }
    let opts = KernelOptions {
        lossless_dscp: cfg.lossless_dscp,
        lossless_pcp: cfg.lossless_pcp,
        link_gbps: cfg.link_gbps,
        link_known: cfg.link_known,
        ..opts
    };
    let mut src = KernelSource::load(&opts)?;
    let mut engine = Engine::new(cfg);
    engine.lossless_from_kernel();
    for iface in &args.ifaces {
        let a = src.attach(iface, opts.xdp_mode)?;
        engine.set_iface_name(a.ifindex, &a.iface);
        for warning in src.take_warnings() {
            eprintln!("roce-observer: {warning}");
        }
    }
    if let Some(note) = speed_note {
        eprintln!("roce-observer: {note}");
    }
    // The variant loaded is always said: it tells a user what to expect of jumbo frames.
    eprintln!(
        "roce-observer: attached to {} (XDP ingress + TC egress; {}); Ctrl-C to stop",
        args.ifaces.join(", "),
        src.features().describe()
    );
    live.run(args.ifaces.join(", "), &mut src, engine).await
}

/// How long to wait for a capture's header before the UI starts (a stream that is not a
/// capture then fails on the normal screen); a slower stream is checked when its header comes.
const HEADER_WAIT: Duration = Duration::from_secs(2);

async fn run_capture<F: Future<Output = ()>>(
    path: &std::path::Path,
    realtime: bool,
    cfg: crate::engine::EngineConfig,
    live: Live<F>,
) -> anyhow::Result<()> {
    let pace = if realtime { Pace::Recorded } else { Pace::Fast };
    let mut src = if path.as_os_str() == "-" {
        if std::io::stdin().is_terminal() {
            return Err(UsageError(
                "--capture - reads a capture from stdin, but stdin is a terminal: pipe one in \
                 (`tcpdump -i mlx5_0 -w - | roce-observer run --capture -`) or give a file"
                    .into(),
            )
            .into());
        }
        CaptureSource::start("stdin".into(), std::io::stdin(), None, pace, HEADER_WAIT)?
    } else {
        let name = path.display().to_string();
        let file = File::open(path).with_context(|| {
            format!("cannot open capture {name} (check the path and permissions)")
        })?;
        // A regular file's size: the report says how much of it was read (not a pipe's).
        let size = file
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        CaptureSource::start(name, file, size, pace, HEADER_WAIT)?
    };
    let title = format!("capture {}", src.name());
    live.run(title, &mut src, Engine::new(cfg)).await
}
