//! Argument groups shared by the commands that feed the engine (`run` and `analyze`): declared
//! once, flattened into each command, validated once into an [`EngineConfig`].

use std::{net::SocketAddr, path::PathBuf};

use clap::Args;

use super::values;
use crate::{
    engine::{DEFAULT_LINK_GBPS, EngineConfig, ecmp::EcmpHash},
    sink::{
        logdir::{DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, LogDirConfig},
        metrics::{DEFAULT_TOP_FLOWS, server::parse_listen},
    },
};

/// How the engine analyses what it is fed (the same for live and capture input).
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "Engine")]
pub struct EngineArgs {
    /// RoCE path MTU in bytes used to size READ PSN reservations (256, 512, 1024, 2048 or 4096)
    /// [default: 4096; `analyze` learns it from READ responses unless it is given].
    #[arg(long, value_name = "BYTES", value_parser = parse_pmtu)]
    pub pmtu: Option<u32>,
    /// Reorder window in PSNs: a skipped PSN whose first copy has not arrived by the time the
    /// flow is this many PSNs further is declared lost (a NAK for it, or a resend run starting
    /// with it, declares it lost sooner); a later first copy is reordering, not loss (1-64).
    #[arg(long = "reorder-window", value_name = "PSNS",
        default_value_t = roce_observer_common::sequence::DEFAULT_REORDER_WINDOW,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(roce_observer_common::sequence::MAX_REORDER_WINDOW)))]
    pub reorder_window: u32,
    /// Link speed in Gb/s, to turn PFC pause quanta into time [default: `run -i`: the speed
    /// the interfaces report in /sys/class/net/IFACE/speed when they share one, else 100].
    /// Given or reported, it also lets the lossless diagnosis judge whether CE marks come at
    /// low load.
    #[arg(long = "link-speed", value_name = "GBPS",
        value_parser = values::gbps, allow_negative_numbers = true)]
    pub link_speed: Option<f64>,
    /// UDP destination port of RoCEv2.
    #[arg(long = "roce-port", value_name = "PORT", default_value_t = roce_observer_common::ROCE_V2_PORT,
        value_parser = clap::value_parser!(u16).range(1..), allow_negative_numbers = true)]
    pub roce_port: u16,
    /// UDP destination port of VXLAN: mirrored frames inside are unwrapped.
    #[arg(long = "vxlan-port", value_name = "PORT", default_value_t = roce_observer_common::headers::VXLAN_PORT,
        value_parser = clap::value_parser!(u16).range(1..), allow_negative_numbers = true)]
    pub vxlan_port: u16,
    /// Uplinks in the modelled ECMP view (0 turns the model off).
    #[arg(long = "ecmp-paths", value_name = "N", default_value_t = 8)]
    pub ecmp_paths: u32,
    /// Switch hash for the modelled ECMP view.
    #[arg(long = "ecmp-hash", value_enum, default_value_t = EcmpHash::Crc32)]
    pub ecmp_hash: EcmpHash,
    /// Hash seed for the modelled ECMP view.
    #[arg(long = "ecmp-seed", value_name = "SEED", default_value_t = 0)]
    pub ecmp_seed: u32,
    /// DSCP of the lossless class RoCE data should use.
    #[arg(long = "lossless-dscp", value_name = "DSCP", default_value_t = 26, value_parser = clap::value_parser!(u8).range(0..64))]
    pub lossless_dscp: u8,
    /// 802.1p priority of the lossless class (checked on tagged frames).
    #[arg(long = "lossless-pcp", value_name = "PCP", default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..8))]
    pub lossless_pcp: u8,
    /// DSCP CNPs should use.
    #[arg(long = "cnp-dscp", value_name = "DSCP", default_value_t = 48, value_parser = clap::value_parser!(u8).range(0..64))]
    pub cnp_dscp: u8,
    /// Alert on latency samples above this many microseconds.
    #[arg(long = "rtt-alert-us", value_name = "US")]
    pub rtt_alert_us: Option<u64>,
    /// PFC storm: paused fraction (percent) that must be exceeded over a whole window.
    #[arg(
        long = "storm-threshold",
        value_name = "PERCENT",
        default_value_t = 50.0,
        value_parser = values::percent,
        allow_negative_numbers = true
    )]
    pub storm_threshold: f64,
    /// PFC storm window, milliseconds.
    #[arg(long = "storm-window-ms", value_name = "MS", default_value_t = 1000)]
    pub storm_window_ms: u64,
}

/// Where the RDMA core exposes its devices (`run` and `counters`).
#[derive(Args, Clone, Debug)]
pub struct RdmaSysfsArgs {
    /// Where the RDMA core exposes its devices.
    #[arg(
        id = "rdma_sysfs",
        long = "rdma-sysfs",
        // The old name on `counters`, kept for existing scripts.
        alias = "sysfs",
        value_name = "DIR",
        default_value = "/sys/class/infiniband",
        help_heading = "Source"
    )]
    pub dir: PathBuf,
}

/// Where the results go besides stdout (shared by `run` and `analyze`).
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// Print one JSON document at the end instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub log: LogDirArgs,
}

/// Engine arguments that cannot be turned into a configuration.
#[derive(Debug, thiserror::Error)]
pub enum EngineArgsError {
    #[error("--link-speed must be a positive number of Gb/s (got {0})")]
    LinkSpeed(f64),
    #[error("--storm-threshold must be a percentage from 0 to 100 (got {0})")]
    StormThreshold(f64),
}

impl EngineArgs {
    /// The engine configuration these arguments describe, or what is wrong with them.
    pub fn engine_config(&self) -> Result<EngineConfig, EngineArgsError> {
        let link_gbps = self.link_speed.unwrap_or(DEFAULT_LINK_GBPS);
        if !(link_gbps > 0.0 && link_gbps.is_finite()) {
            return Err(EngineArgsError::LinkSpeed(link_gbps));
        }
        if !(0.0..=100.0).contains(&self.storm_threshold) {
            return Err(EngineArgsError::StormThreshold(self.storm_threshold));
        }
        Ok(EngineConfig {
            pmtu: self.pmtu(),
            pmtu_explicit: self.pmtu.is_some(),
            reorder_window: self.reorder_window,
            link_gbps,
            link_known: self.link_speed.is_some(),
            roce_port: self.roce_port,
            vxlan_port: self.vxlan_port,
            ecmp_paths: self.ecmp_paths,
            ecmp_hash: self.ecmp_hash,
            ecmp_seed: self.ecmp_seed,
            lossless_dscp: self.lossless_dscp,
            lossless_pcp: self.lossless_pcp,
            cnp_dscp: self.cnp_dscp,
            rtt_alert_ns: self.rtt_alert_us.map(|us| us.saturating_mul(1000)),
            storm_threshold: self.storm_threshold / 100.0,
            storm_window_ns: self.storm_window_ms.saturating_mul(1_000_000),
            ..EngineConfig::default()
        })
    }

    /// The path MTU given, or the default.
    pub fn pmtu(&self) -> u32 {
        self.pmtu.unwrap_or(roce_observer_common::DEFAULT_PMTU)
    }
}

fn parse_pmtu(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v @ (256 | 512 | 1024 | 2048 | 4096)) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a RoCE path MTU: use 256, 512, 1024, 2048 or 4096"
        )),
    }
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct LogDirArgs {
    /// Write JSON Lines to this directory, rotated and compressed (docs/log-schema.md): the
    /// live file `roce-observer.jsonl` for `tail -f` and log shippers, and gzipped rotated
    /// files. A full disk or a removed directory never stops the observer: lost lines are
    /// counted and writing resumes by itself.
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Rotate the live file at this size (suffixes K, M, G: powers of 1024).
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = parse_size)]
    pub log_max_bytes: u64,
    /// Files kept in the log directory, the live one included; older rotated files are deleted.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_FILES)]
    pub log_max_files: usize,
    /// Rotate the live file when it is this many seconds old (0: by size only).
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub log_max_age: u64,
    /// Write every flow, not only those that changed, this often (seconds; 0: only at the start
    /// of each file, which always begins with every flow).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub log_full_every: u64,
    /// The name of this observer on every log line (`host`), for a fleet store that joins many
    /// observers' logs: 1 to 128 characters of letters, digits and `.-_:` (default: the host
    /// name).
    #[arg(long, value_name = "ID", value_parser = parse_observer_id)]
    pub observer_id: Option<String>,
    /// Replaced by --log-dir (rotating JSON Lines).
    #[arg(long, value_name = "PATH", hide = true)]
    pub flow_log: Option<PathBuf>,
}

const _: () = assert!(DEFAULT_MAX_BYTES == 64 << 20);

impl LogDirArgs {
    /// The log directory settings, or None without --log-dir.
    pub fn config(&self) -> anyhow::Result<Option<LogDirConfig>> {
        if let Some(path) = &self.flow_log {
            return Err(super::exit::UsageError(format!(
                "--flow-log {} was replaced by --log-dir DIR: rotating, compressed JSON Lines with a schema version on every line (docs/log-schema.md)",
                path.display()
            ))
            .into());
        }
        Ok(self.log_dir.as_ref().map(|dir| LogDirConfig {
            dir: dir.clone(),
            max_bytes: self.log_max_bytes,
            max_files: self.log_max_files,
            max_age_ns: self.log_max_age.saturating_mul(1_000_000_000),
            full_every_ns: self.log_full_every.saturating_mul(1_000_000_000),
            observer_id: self.observer_id.clone(),
        }))
    }
}

/// An observer id: what a fleet table's rows are grouped and joined by, so nothing that needs
/// quoting or escaping anywhere.
fn parse_observer_id(s: &str) -> Result<String, String> {
    let ok = (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "`{s}` is not an observer id: use 1 to 128 letters, digits, `.`, `-`, `_` or `:` (for example the host name)"
        ))
    }
}

/// `4096`, `64K`, `64M`, `1G` (powers of 1024; an optional trailing `B` or `iB`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches(['B', 'b']).trim_end_matches('i');
    let (digits, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("`{s}` is not a size: give bytes, or a number with K, M or G"))
}

#[derive(Args, Debug, Clone, PartialEq)]
#[command(next_help_heading = "Output")]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics. A bare PORT listens on loopback only
    /// (127.0.0.1:PORT); give an address to listen elsewhere, e.g. 0.0.0.0:9470 for a
    /// Prometheus server on another host.
    #[arg(long, value_name = "ADDR", value_parser = parse_metrics_addr)]
    pub metrics: Option<SocketAddr>,
    /// Per-flow series for this many flows with the most bytes, plus up to as many flows with
    /// problems (PSN gaps, retransmissions, NAKs); aggregates always cover every flow.
    #[arg(long, value_name = "K", default_value_t = DEFAULT_TOP_FLOWS)]
    pub metrics_top_flows: usize,
}

fn parse_metrics_addr(s: &str) -> Result<SocketAddr, String> {
    parse_listen(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        engine: EngineArgs,
    }

    fn parse(args: &[&str]) -> Result<EngineArgs, clap::Error> {
        Cmd::try_parse_from(std::iter::once("cmd").chain(args.iter().copied())).map(|c| c.engine)
    }

    #[test]
    fn observer_ids_are_plain_names() {
        for ok in ["gpu-17", "rack3.mon_a", "10.0.0.1", "fe80::1"] {
            assert_eq!(parse_observer_id(ok).as_deref(), Ok(ok));
        }
        let long = "x".repeat(129);
        for bad in ["", "a b", "a\"b", "a,b", "\u{1b}]0;x", long.as_str()] {
            let err = parse_observer_id(bad).expect_err(bad);
            assert!(err.contains("not an observer id"), "{err}");
        }
    }

    #[test]
    fn defaults_match_the_engine_defaults_and_learn_the_pmtu() {
        let cfg = parse(&[])
            .expect("no arguments parse")
            .engine_config()
            .expect("defaults are valid");
        let def = EngineConfig::default();
        assert!(!cfg.pmtu_explicit);
        assert_eq!(cfg.pmtu, roce_observer_common::DEFAULT_PMTU);
        assert_eq!(cfg.ecmp_paths, 8);
        assert_eq!(cfg.storm_threshold, 0.5);
        assert_eq!(cfg.storm_window_ns, 1_000_000_000);
        // Without --link-speed the speed is assumed, so loads are not judged against it.
        assert_eq!((cfg.link_gbps, cfg.link_known), (DEFAULT_LINK_GBPS, false));
        let given = parse(&["--link-speed", "400"])
            .expect("parses")
            .engine_config();
        assert_eq!(
            given.map(|c| (c.link_gbps, c.link_known)).ok(),
            Some((400.0, true))
        );
        assert_eq!(
            (cfg.lossless_dscp, cfg.lossless_pcp, cfg.cnp_dscp),
            (def.lossless_dscp, def.lossless_pcp, def.cnp_dscp)
        );
    }

    #[test]
    fn given_values_reach_the_config() {
        let cfg = parse(&[
            "--pmtu",
            "1024",
            "--ecmp-paths",
            "4",
            "--ecmp-seed",
            "7",
            "--rtt-alert-us",
            "20",
            "--storm-threshold",
            "25",
        ])
        .expect("valid arguments")
        .engine_config()
        .expect("valid config");
        assert!(cfg.pmtu_explicit);
        assert_eq!(cfg.pmtu, 1024);
        assert_eq!((cfg.ecmp_paths, cfg.ecmp_seed), (4, 7));
        assert_eq!(cfg.rtt_alert_ns, Some(20_000));
        assert_eq!(cfg.storm_threshold, 0.25);
    }

    #[test]
    fn bad_values_are_refused_while_parsing_with_the_option_named() {
        for (args, needle) in [
            (&["--pmtu", "1500"][..], "not a RoCE path MTU"),
            (&["--link-speed", "0"][..], "--link-speed"),
            (&["--link-speed", "-25"][..], "--link-speed"),
            (&["--link-speed", "NaN"][..], "--link-speed"),
            (&["--storm-threshold", "150"][..], "--storm-threshold"),
            (&["--storm-threshold=-1"][..], "--storm-threshold"),
            (&["--roce-port", "0"][..], "--roce-port"),
            (&["--vxlan-port", "0"][..], "--vxlan-port"),
        ] {
            let err = parse(args).expect_err("refused");
            assert!(err.to_string().contains(needle), "{args:?}: {err}");
            assert_eq!(err.exit_code(), 2, "{args:?}: a command-line error");
        }
    }

    #[test]
    fn a_config_built_by_hand_is_still_checked() {
        let mut args = parse(&[]).expect("defaults");
        args.link_speed = Some(0.0);
        assert!(matches!(
            args.engine_config(),
            Err(EngineArgsError::LinkSpeed(_))
        ));
        args.link_speed = Some(100.0);
        args.storm_threshold = 150.0;
        assert!(matches!(
            args.engine_config(),
            Err(EngineArgsError::StormThreshold(_))
        ));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999G").is_err());
    }
}
