//! `roce-observer run`: the live pipeline fed by the kernel programs. Loads and attaches them,
//! then hands the source to [`crate::live`] (engine -> terminal UI, periodic tables, or one
//! JSON document at the end).

use std::{io::IsTerminal as _, time::Duration};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    cli::{EngineArgs, OutputArgs},
    engine::Engine,
    live::{Schedule, Ui, run_live},
    sink::outputs::{IntervalTables, OutputPlan, Outputs},
    source::{
        LiveSource,
        kernel::{KernelOptions, KernelSource},
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
pub struct RunArgs {
    /// Interfaces to watch (comma-separated): XDP on ingress, TC on egress of each.
    #[arg(short = 'i', long = "iface", value_delimiter = ',', required = true, value_parser = parse_iface)]
    pub ifaces: Vec<String>,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Plain periodic tables instead of the terminal UI (the UI needs a terminal on stdout;
    /// without one, plain output is used anyway).
    #[arg(long)]
    pub no_tui: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Write Prometheus metrics to this file every interval (atomically replaced), for
    /// node_exporter's textfile collector.
    #[arg(long, value_name = "PATH")]
    pub prom_file: Option<std::path::PathBuf>,
    /// Seconds between two reports.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Flow table size in the kernel (flows past it are counted in map_full).
    #[arg(long, default_value_t = 16384)]
    pub max_flows: u32,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
    #[command(flatten)]
    pub engine: EngineArgs,
}

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

fn seconds(name: &str, secs: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("--{name} must be a positive number of seconds (got {secs})"))
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let interval = seconds("interval", args.interval)?;
    let duration = match args.duration {
        // A zero duration still gives one report.
        Some(d) => Some(Duration::try_from_secs_f64(d.max(0.0)).context("--duration")?),
        None => None,
    };
    let mut cfg = args.engine.engine_config()?;
    // The kernel programs reserve READ PSNs with a fixed path MTU: the engine cannot learn one.
    cfg.pmtu_explicit = true;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let use_tui = !args.output.json && !args.no_tui && std::io::stdout().is_terminal();
    // Outputs first: a bad --flow-log path fails before anything is loaded or attached.
    let outputs = Outputs::open(OutputPlan {
        json: args.output.json,
        interval_tables: if args.output.json || use_tui {
            IntervalTables::Off
        } else {
            IntervalTables::Plain
        },
        flow_log: args.output.flow_log.clone(),
        prom_file: args.prom_file.clone(),
    })?;
    rt.block_on(async {
        let opts = KernelOptions {
            roce_port: args.engine.roce_port,
            pmtu: args.engine.pmtu(),
            max_flows: args.max_flows,
            xdp_mode: match args.xdp_mode {
                XdpModeArg::Auto => aya::programs::XdpMode::Default,
                XdpModeArg::Skb => aya::programs::XdpMode::Skb,
                XdpModeArg::Native => aya::programs::XdpMode::Driver,
            },
        };
        let mut src = KernelSource::load(&opts)?;
        let mut engine = Engine::new(cfg);
        // Handlers first: a signal right after "attached" must stop us cleanly, not kill us.
        let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
        let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
        for iface in &args.ifaces {
            let a = src.attach(iface, opts.xdp_mode)?;
            engine.set_iface_name(a.ifindex, &a.iface);
            for warning in src.take_warnings() {
                eprintln!("roce-observer: {warning}");
            }
        }
        // The variant loaded is always said: it tells a user what to expect of jumbo frames.
        eprintln!(
            "roce-observer: attached to {} (XDP ingress + TC egress; {}); Ctrl-C to stop",
            args.ifaces.join(", "),
            src.features().describe()
        );
        let ui = use_tui.then(|| Ui::start(args.ifaces.join(", "), &engine, src.now_ns()));
        let stop = async move {
            tokio::select! {
                _ = sigint.recv() => {}
                _ = sigterm.recv() => {}
            }
        };
        let mut stdout = std::io::stdout().lock();
        let warnings = run_live(
            &mut src,
            &mut engine,
            outputs,
            ui,
            Schedule { interval, duration },
            stop,
            &mut stdout,
        )
        .await?;
        for warning in warnings {
            eprintln!("roce-observer: {warning}");
        }
        Ok(())
    })
}
