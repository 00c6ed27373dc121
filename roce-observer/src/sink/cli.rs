//! Command-line options of the long-running outputs: the log directory (`run`, `analyze`) and
//! the metrics endpoint (`run`), flattened into each command's arguments.

use std::{net::SocketAddr, path::PathBuf};

use clap::Args;

use super::{
    logdir::{DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, LogDirConfig},
    metrics::{DEFAULT_TOP_FLOWS, server::parse_listen},
};

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
    /// Replaced by --log-dir (rotating JSON Lines).
    #[arg(long, value_name = "PATH", hide = true)]
    pub flow_log: Option<PathBuf>,
}

const _: () = assert!(DEFAULT_MAX_BYTES == 64 << 20);

impl LogDirArgs {
    /// The log directory settings, or None without --log-dir.
    pub fn config(&self) -> anyhow::Result<Option<LogDirConfig>> {
        if let Some(path) = &self.flow_log {
            anyhow::bail!(
                "--flow-log {} was replaced by --log-dir DIR: rotating, compressed JSON Lines with a schema version on every line (docs/log-schema.md)",
                path.display()
            );
        }
        Ok(self.log_dir.as_ref().map(|dir| LogDirConfig {
            dir: dir.clone(),
            max_bytes: self.log_max_bytes,
            max_files: self.log_max_files,
            max_age_ns: self.log_max_age.saturating_mul(1_000_000_000),
            full_every_ns: self.log_full_every.saturating_mul(1_000_000_000),
        }))
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
    use super::*;

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
