//! `roce-observer counters`: the NIC's own RoCE and PFC counters, for hosts whose RDMA NIC
//! processes RoCE where XDP/TC cannot see it. Prints what changed each interval; `--json`
//! prints totals and changes over the whole run at the end.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::json;

use crate::{
    cli::{args::RdmaSysfsArgs, values},
    report::nic::KEY_COUNTERS,
    source::hw::{self, PortCounters},
};

#[derive(Args, Debug)]
#[command(after_long_help = COUNTERS_EXAMPLES)]
pub struct CountersArgs {
    #[command(flatten)]
    pub rdma_sysfs: RdmaSysfsArgs,
    /// Seconds between two reports.
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = values::positive_seconds,
        allow_negative_numbers = true)]
    pub interval: Duration,
    /// Stop after this many seconds (0: read once and print totals since the driver loaded).
    #[arg(long, value_name = "SECS", value_parser = values::seconds, allow_negative_numbers = true)]
    pub duration: Option<Duration>,
    /// Print one JSON document at the end.
    #[arg(long)]
    pub json: bool,
    /// Show every counter that changed, not only the key RoCE counters.
    #[arg(long)]
    pub all: bool,
    /// Do not run `ethtool -S` for PFC counters.
    #[arg(long)]
    pub no_ethtool: bool,
}

const COUNTERS_EXAMPLES: &str = "\
Examples:
  roce-observer counters
      the key RoCE counters of every RDMA device, each second
  roce-observer counters --duration 0 --all
      every counter's total since the driver loaded
  roce-observer counters --interval 10 --duration 60 --json
      changes over one minute as one JSON document

Exit status: 0 done, 1 runtime error, 2 command-line error.";

/// What a report's figures are: changes over an interval (with rates), or totals.
#[derive(Clone, Copy)]
enum Figures {
    Changes { secs: f64 },
    Totals,
}

/// One port's block: a header line (with the wall-clock time for interval reports), column
/// headers, one line per counter.
fn report(counters: &PortCounters, figures: Figures, all: bool, now_ns: u64) -> String {
    let port = format!(
        "{} port {}{}",
        counters.device,
        counters.port,
        counters
            .netdev
            .as_ref()
            .map_or(String::new(), |n| format!(" ({n})"))
    );
    let mut lines = match figures {
        Figures::Changes { secs } => vec![
            format!(
                "{} UTC  {port}  (last {secs:.3} s)",
                crate::format::clock(now_ns)
            ),
            format!(
                "  {:<28} {:>12} {:>14}  MEANING",
                "COUNTER", "CHANGE", "RATE"
            ),
        ],
        Figures::Totals => vec![
            format!("{port}  (totals since the driver loaded)"),
            format!("  {:<28} {:>12}  MEANING", "COUNTER", "TOTAL"),
        ],
    };
    let line = |name: &str, v: u64, what: &str| match figures {
        Figures::Changes { secs } => {
            let rate = format!("{:.1}/s", v as f64 / secs.max(1e-9));
            format!("  {name:<28} {v:>12} {rate:>14}  {what}")
        }
        Figures::Totals => format!("  {name:<28} {v:>12}  {what}"),
    };
    for (name, what) in KEY_COUNTERS {
        if let Some(v) = counters.rdma.get(*name) {
            lines.push(line(name, *v, what));
        }
    }
    for (name, v) in counters
        .rdma
        .iter()
        .filter(|(k, v)| all && **v > 0 && !KEY_COUNTERS.iter().any(|(key, _)| key == &k.as_str()))
    {
        lines.push(line(name, *v, ""));
    }
    for (name, v) in counters.pause.iter().filter(|(_, v)| all || **v > 0) {
        lines.push(line(name, *v, "(ethtool)"));
    }
    lines
        .iter()
        .map(|l| l.trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn run(args: CountersArgs) -> anyhow::Result<()> {
    if !args.rdma_sysfs.dir.is_dir() {
        bail!(
            "{} does not exist: this host has no RDMA devices (no RDMA stack or driver loaded); \
             on a monitor host use `roce-observer run`, or analyze a capture",
            args.rdma_sysfs.dir.display()
        );
    }
    let read = || {
        hw::read_ports(&args.rdma_sysfs.dir, !args.no_ethtool)
            .with_context(|| format!("reading {}", args.rdma_sysfs.dir.display()))
    };
    let first = read()?;
    if first.is_empty() {
        bail!("no RDMA ports under {}", args.rdma_sysfs.dir.display());
    }
    let start = Instant::now();
    // No --duration: report until interrupted.
    let deadline = args.duration.map(|d| start + d);
    let interval = args.interval;
    let mut prev = first.clone();
    let mut last = first.clone();
    // Rates are over the time between the two reads (the last interval of a --duration may
    // be shorter than --interval).
    let mut prev_at = Instant::now();
    while deadline.is_none_or(|d| Instant::now() < d) {
        let left = deadline.map_or(interval, |d| d.saturating_duration_since(Instant::now()));
        std::thread::sleep(interval.min(left));
        last = read()?;
        let read_at = Instant::now();
        let figures = Figures::Changes {
            secs: read_at.duration_since(prev_at).as_secs_f64(),
        };
        prev_at = read_at;
        if !args.json {
            let now = crate::sink::logdir::now_ns();
            for (before, after) in prev.iter().zip(&last) {
                println!(
                    "{}",
                    report(&hw::delta(before, after), figures, args.all, now)
                );
            }
            println!();
        }
        prev = last.clone();
    }
    let secs = start.elapsed().as_secs_f64();
    if args.json {
        let ports: Vec<_> = first
            .iter()
            .zip(&last)
            .map(|(a, b)| json!({"totals": b, "changed": hw::delta(a, b)}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"schema_version": 1, "seconds": secs, "ports": ports})
            )?
        );
    } else if secs == 0.0 || args.duration == Some(Duration::ZERO) {
        // One read: show the totals since the driver loaded.
        for p in &last {
            println!("{}", report(p, Figures::Totals, args.all, 0));
        }
    }
    Ok(())
}
