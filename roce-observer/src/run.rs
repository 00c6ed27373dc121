//! `roce-observer run`: the live pipeline. Kernel source (maps + ring buffer) -> engine ->
//! renderer (periodic table, or one JSON document at the end).

use std::{
    os::fd::{AsRawFd, RawFd},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use roce_observer_common::{Counter, Direction};
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{SignalKind, signal},
};

use crate::{
    engine::{Engine, EngineConfig},
    sink,
    source::kernel::{KernelOptions, KernelSource},
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
    #[arg(short = 'i', long = "iface", value_delimiter = ',', required = true)]
    pub ifaces: Vec<String>,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Print one JSON document at the end instead of a table every interval.
    #[arg(long)]
    pub json: bool,
    /// Plain output instead of the terminal UI (the terminal UI is not built yet: plain output
    /// is what `run` does today).
    #[arg(long)]
    pub no_tui: bool,
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
    for (dir, block) in [Direction::Ingress, Direction::Egress].into_iter().zip(counters) {
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

    let events = AsyncFd::new(Fd(src.events_fd())).context("polling the ring buffer")?;
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
            _ = tick.tick() => {
                refresh(&mut src, &mut engine)?;
                if !args.json {
                    let snap = engine.snapshot(now_ns());
                    println!("{}", sink::table::render(&snap));
                }
                engine.begin_interval(now_ns());
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
        }
    }
    refresh(&mut src, &mut engine)?;
    src.detach_all();
    let snap = engine.snapshot(now_ns());
    if args.json {
        println!("{}", sink::json::to_string(&snap)?);
    } else {
        println!("{}", sink::table::render(&snap));
    }
    Ok(())
}
