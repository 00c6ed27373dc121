//! `roce-observer counters`: the NIC's own RoCE and PFC counters, for hosts whose RDMA NIC
//! processes RoCE where XDP/TC cannot see it. Prints what changed each interval; `--json`
//! prints totals and changes over the whole run at the end.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::json;

use crate::{
    report::nic::KEY_COUNTERS,
    source::hw::{self, PortCounters},
};

#[derive(Args, Debug)]
pub struct CountersArgs {
    /// Where the RDMA core exposes its devices.
    #[arg(long, default_value = "/sys/class/infiniband")]
    pub sysfs: PathBuf,
    /// Seconds between two reports.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many seconds (0: read once and print totals).
    #[arg(long)]
    pub duration: Option<f64>,
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

fn report(delta: &PortCounters, secs: f64, all: bool) -> String {
    let mut lines = vec![format!(
        "{} port {}{}",
        delta.device,
        delta.port,
        delta
            .netdev
            .as_ref()
            .map_or(String::new(), |n| format!(" ({n})"))
    )];
    let rate = |v: u64| v as f64 / secs.max(1e-9);
    for (name, what) in KEY_COUNTERS {
        if let Some(v) = delta.rdma.get(*name) {
            lines.push(format!("  {name:<28} {v:>12} {:>12.1}/s  {what}", rate(*v)));
        }
    }
    for (name, v) in delta
        .rdma
        .iter()
        .filter(|(k, v)| all && **v > 0 && !KEY_COUNTERS.iter().any(|(key, _)| key == &k.as_str()))
    {
        lines.push(format!("  {name:<28} {v:>12} {:>12.1}/s", rate(*v)));
    }
    for (name, v) in delta.pause.iter().filter(|(_, v)| all || **v > 0) {
        lines.push(format!(
            "  {name:<28} {v:>12} {:>12.1}/s  (ethtool)",
            rate(*v)
        ));
    }
    lines.join("\n")
}

pub fn run(args: CountersArgs) -> anyhow::Result<()> {
    if !args.sysfs.is_dir() {
        bail!(
            "{} does not exist: this host has no RDMA devices (no RDMA stack or driver loaded); \
             on a monitor host use `roce-observer run`, or analyze a capture",
            args.sysfs.display()
        );
    }
    if args.interval <= 0.0 || !args.interval.is_finite() {
        bail!("--interval must be a positive number of seconds");
    }
    if args.duration.is_some_and(|d| d < 0.0 || !d.is_finite()) {
        bail!("--duration must be a number of seconds, 0 or more");
    }
    let read = || {
        hw::read_ports(&args.sysfs, !args.no_ethtool)
            .with_context(|| format!("reading {}", args.sysfs.display()))
    };
    let first = read()?;
    if first.is_empty() {
        bail!("no RDMA ports under {}", args.sysfs.display());
    }
    let start = Instant::now();
    // No --duration: report until interrupted.
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let interval = Duration::from_secs_f64(args.interval);
    let mut prev = first.clone();
    let mut last = first.clone();
    while deadline.is_none_or(|d| Instant::now() < d) {
        let left = deadline.map_or(interval, |d| d.saturating_duration_since(Instant::now()));
        std::thread::sleep(interval.min(left));
        last = read()?;
        if !args.json {
            for (before, now) in prev.iter().zip(&last) {
                println!(
                    "{}",
                    report(&hw::delta(before, now), args.interval, args.all)
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
    } else if secs == 0.0 || args.duration == Some(0.0) {
        // One read: show the totals since the driver loaded.
        for p in &last {
            println!("{}", report(p, 1.0, args.all).replace("/s", "  "));
        }
    }
    Ok(())
}
