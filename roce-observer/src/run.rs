//! `roce-observer run`: the live pipeline. Kernel source (maps + ring buffer) -> engine ->
//! renderer (periodic table, or one JSON document at the end).

use std::{
    io::{IsTerminal as _, Write as _},
    os::fd::{AsRawFd, RawFd},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use roce_observer_common::{Counter, Direction};
use tokio::{
    io::{Interest, unix::AsyncFd},
    signal::unix::{SignalKind, signal},
};

use crate::{
    engine::{Engine, EngineConfig},
    sink,
    source::kernel::{KernelOptions, KernelSource},
    tui::{self, Action, App},
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
    /// Print one JSON document at the end instead of a table every interval.
    #[arg(long)]
    pub json: bool,
    /// Plain periodic tables instead of the terminal UI (the UI needs a terminal on stdout;
    /// without one, plain output is used anyway).
    #[arg(long)]
    pub no_tui: bool,
    /// Append every flow record to this file as JSON lines, once per interval (for leaving the
    /// observer running).
    #[arg(long, value_name = "PATH")]
    pub flow_log: Option<std::path::PathBuf>,
    /// Write Prometheus metrics to this file every interval (atomically replaced), for
    /// node_exporter's textfile collector.
    #[arg(long, value_name = "PATH")]
    pub prom_file: Option<std::path::PathBuf>,
    /// Seconds between two reports.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// RoCE path MTU used to size READ PSN reservations (256, 512, 1024, 2048 or 4096).
    #[arg(long, default_value_t = 4096, value_parser = parse_pmtu)]
    pub pmtu: u32,
    /// UDP destination port of RoCEv2.
    #[arg(long, default_value_t = roce_observer_common::ROCE_V2_PORT)]
    pub roce_port: u16,
    /// Flow table size in the kernel (flows past it are counted in map_full).
    #[arg(long, default_value_t = 16384)]
    pub max_flows: u32,
    /// XDP attach mode.
    #[arg(long, value_enum, default_value = "auto")]
    pub xdp_mode: XdpModeArg,
    /// Link speed in Gb/s, to turn PFC quanta into time.
    #[arg(long, default_value_t = 100.0)]
    pub link_speed: f64,
}

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

fn parse_pmtu(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v @ (256 | 512 | 1024 | 2048 | 4096)) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a RoCE path MTU: use 256, 512, 1024, 2048 or 4096"
        )),
    }
}

struct Fd(RawFd);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Copy the kernel's events and maps into the engine (map values are absolute).
pub fn refresh(src: &mut KernelSource, engine: &mut Engine) -> anyhow::Result<()> {
    src.drain_events(|ev| engine.ingest_event(ev));
    for (key, stats) in src.read_flows()? {
        engine.update_flow(&key, &stats);
    }
    for (key, stats) in src.read_pfc()? {
        engine.update_pfc(&key, &stats);
    }
    let counters = src.read_counters()?;
    for (dir, block) in [Direction::Ingress, Direction::Egress]
        .into_iter()
        .zip(counters)
    {
        for counter in Counter::ALL {
            engine.update_counter(dir, counter, block[counter as usize]);
        }
    }
    Ok(())
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.interval <= 0.0 || !args.interval.is_finite() {
        anyhow::bail!("--interval must be a positive number of seconds");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> anyhow::Result<()> {
    let opts = KernelOptions {
        roce_port: args.roce_port,
        pmtu: args.pmtu,
        max_flows: args.max_flows,
        xdp_mode: match args.xdp_mode {
            XdpModeArg::Auto => aya::programs::XdpMode::Default,
            XdpModeArg::Skb => aya::programs::XdpMode::Skb,
            XdpModeArg::Native => aya::programs::XdpMode::Driver,
        },
    };
    let mut src = KernelSource::load(&opts)?;
    let mut engine = Engine::new(EngineConfig {
        pmtu: args.pmtu,
        pmtu_explicit: true,
        link_gbps: args.link_speed,
        roce_port: args.roce_port,
        ..EngineConfig::default()
    });
    // Handlers first: a signal right after "attached" must stop us cleanly, not kill us.
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    for iface in &args.ifaces {
        let a = src.attach(iface, opts.xdp_mode)?;
        engine.set_iface_name(a.ifindex, &a.iface);
    }
    eprintln!(
        "roce-observer: attached to {} (XDP ingress + TC egress); Ctrl-C to stop",
        args.ifaces.join(", ")
    );

    // SAFETY: the ring buffer's fd belongs to `src`, which outlives `events` (declared later,
    // dropped first), and `Fd` always returns that same fd.
    let events =
        unsafe { AsyncFd::register_with_interest(Fd(src.events_fd()), Interest::READABLE) }
            .map_err(|e| anyhow::anyhow!("polling the ring buffer: {e}"))?;
    let mut flow_log = match &args.flow_log {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening the flow log {}", path.display()))?,
        ),
        None => None,
    };
    let use_tui = !args.json && !args.no_tui && std::io::stdout().is_terminal();
    let (keys_tx, mut keys) = tokio::sync::mpsc::unbounded_channel::<Action>();
    let mut ui = if use_tui {
        let terminal = ratatui::init();
        let guard = tui::TerminalGuard;
        tui::spawn_key_reader(keys_tx);
        let app = App::new(args.ifaces.join(", "), engine.snapshot(now_ns()));
        Some((terminal, guard, app))
    } else {
        drop(keys_tx);
        None
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(args.interval));
    let deadline = args
        .duration
        .map(|d| Instant::now() + Duration::from_secs_f64(d.max(0.0)));
    loop {
        tokio::select! {
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            guard = events.readable() => {
                let mut guard = guard.context("ring buffer poll")?;
                src.drain_events(|ev| engine.ingest_event(ev));
                guard.clear_ready();
            }
            Some(action) = keys.recv(), if ui.is_some() => {
                if let Some((terminal, _, app)) = ui.as_mut() {
                    app.update(action);
                    if app.quit {
                        break;
                    }
                    terminal.draw(|f| tui::view::draw(f, app)).context("drawing the UI")?;
                }
            }
            _ = tick.tick() => {
                refresh(&mut src, &mut engine)?;
                let now = now_ns();
                let snap = engine.snapshot(now);
                if let Some(path) = &args.prom_file {
                    sink::prometheus::write_file(path, &snap)
                        .with_context(|| format!("writing metrics to {}", path.display()))?;
                }
                if let Some(log) = flow_log.as_mut() {
                    sink::json::write_flow_log(&mut *log, &snap, now)
                        .context("writing the flow log")?;
                }
                match ui.as_mut() {
                    Some((terminal, _, app)) => {
                        app.update(Action::Snapshot(Box::new(snap)));
                        terminal.draw(|f| tui::view::draw(f, app)).context("drawing the UI")?;
                    }
                    None if !args.json => println!("{}", sink::table::render(&snap)),
                    None => {}
                }
                engine.begin_interval(now);
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
        }
    }
    // Leave the UI before the final report goes to the normal screen.
    drop(ui);
    refresh(&mut src, &mut engine)?;
    src.detach_all();
    let snap = engine.snapshot(now_ns());
    if let Some(path) = &args.prom_file {
        sink::prometheus::write_file(path, &snap)
            .with_context(|| format!("writing metrics to {}", path.display()))?;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        sink::json::write_document(&mut out, &snap).context("writing the JSON document")?;
    } else {
        writeln!(out, "{}", sink::table::render(&snap)).context("writing the report")?;
    }
    Ok(())
}
