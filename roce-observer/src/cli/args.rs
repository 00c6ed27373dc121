//! Argument groups shared by the commands that feed the engine (`run` and `analyze`): declared
//! once, flattened into each command, validated once into an [`EngineConfig`].

use std::path::PathBuf;

use clap::Args;

use crate::engine::{EngineConfig, ecmp::EcmpHash};

/// How the engine analyses what it is fed (the same for live and capture input).
#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    /// RoCE path MTU in bytes used to size READ PSN reservations (256, 512, 1024, 2048 or 4096)
    /// [default: 4096; `analyze` learns it from READ responses unless it is given].
    #[arg(long, value_name = "BYTES", value_parser = parse_pmtu)]
    pub pmtu: Option<u32>,
    /// Link speed in Gb/s, to turn PFC pause quanta into time.
    #[arg(long = "link-speed", value_name = "GBPS", default_value_t = 100.0)]
    pub link_speed: f64,
    /// UDP destination port of RoCEv2.
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
}

/// Where the results go besides stdout (shared by `run` and `analyze`).
#[derive(Args, Clone, Debug)]
pub struct OutputArgs {
    /// Print one JSON document at the end instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write every flow record as JSON lines (one object per flow, stamped `ts`) to FILE, once
    /// per report interval and at the end. An existing file is appended to, never truncated; a
    /// failed write (here, to stdout or to any output file) ends the command with an error.
    #[arg(long = "flow-log", value_name = "FILE")]
    pub flow_log: Option<PathBuf>,
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
        if !(self.link_speed > 0.0 && self.link_speed.is_finite()) {
            return Err(EngineArgsError::LinkSpeed(self.link_speed));
        }
        if !(0.0..=100.0).contains(&self.storm_threshold) {
            return Err(EngineArgsError::StormThreshold(self.storm_threshold));
        }
        Ok(EngineConfig {
            pmtu: self.pmtu(),
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
    fn bad_values_are_refused_with_the_option_named() {
        let err = parse(&["--pmtu", "1500"]).expect_err("1500 is not a RoCE MTU");
        assert!(err.to_string().contains("not a RoCE path MTU"), "{err}");
        for (args, needle) in [
            (&["--link-speed", "0"][..], "--link-speed"),
            (&["--link-speed", "NaN"][..], "--link-speed"),
            (&["--storm-threshold", "150"][..], "--storm-threshold"),
        ] {
            let err = parse(args)
                .expect("parses")
                .engine_config()
                .expect_err("refused");
            assert!(err.to_string().contains(needle), "{err}");
        }
    }
}
