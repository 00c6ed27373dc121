//! Reading what the VMs left in their shares: perftest's output, rxe's counters, status.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::wire::num;

pub(super) fn read_kv(path: &Path) -> BTreeMap<String, String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// hw_counters after - before.
pub(super) fn counter_deltas(vm: &Path) -> BTreeMap<String, i64> {
    let before = read_kv(&vm.join("counters_before.txt"));
    let after = read_kv(&vm.join("counters_after.txt"));
    after
        .iter()
        .filter_map(|(k, v)| {
            let a: i64 = v.parse().ok()?;
            let b: i64 = before.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
            Some((k.clone(), a - b))
        })
        .collect()
}

#[derive(Debug, Default, Clone)]
pub(super) struct Perftest {
    pub(super) rc: Option<i32>,
    pub(super) mtu: Option<u64>,
    pub(super) bytes: Option<u64>,
    pub(super) iterations: Option<u64>,
    pub(super) bw_avg_mb: Option<f64>,
    pub(super) msg_rate_mpps: Option<f64>,
    pub(super) lat_typical_us: Option<f64>,
    pub(super) lat_avg_us: Option<f64>,
    /// Initial PSN of this side's QP ("local address: ... PSN 0x...").
    pub(super) local_psn: Option<u32>,
}

pub(super) fn parse_perftest(vm: &Path, latency: bool) -> Perftest {
    let text = fs::read_to_string(vm.join("perftest.out")).unwrap_or_default();
    let status = read_kv(&vm.join("status.env"));
    let mut p = Perftest {
        rc: status.get("PERFTEST_RC").and_then(|v| v.parse().ok()),
        ..Default::default()
    };
    p.local_psn = text
        .lines()
        .find(|l| l.trim_start().starts_with("local address:"))
        .and_then(|l| l.split("PSN").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(num)
        .map(|v| v as u32);
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if let Some(rest) = l.trim().strip_prefix("Mtu") {
            p.mtu = rest
                .trim_start_matches([' ', ':'])
                .trim()
                .trim_end_matches("[B]")
                .parse()
                .ok();
        }
        if l.trim_start().starts_with("#bytes") {
            // header: #bytes #iterations ... ; the next line holds the figures
            if let Some(v) = lines.next() {
                let f: Vec<f64> = v
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if f.len() >= 2 {
                    p.bytes = Some(f[0] as u64);
                    p.iterations = Some(f[1] as u64);
                }
                if latency {
                    // #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
                    p.lat_typical_us = f.get(4).copied();
                    p.lat_avg_us = f.get(5).copied();
                } else {
                    // #bytes #iterations BW peak BW average MsgRate
                    p.bw_avg_mb = f.get(3).copied();
                    p.msg_rate_mpps = f.get(4).copied();
                }
            }
        }
    }
    p
}

pub(super) fn netem_dropped(vm: &Path) -> Option<i64> {
    let s = fs::read_to_string(vm.join("qdisc.txt")).ok()?;
    let i = s.find("(dropped ")?;
    s[i + 9..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

pub(super) fn tcpdump_kernel_drops(vm: &Path) -> Option<u64> {
    tcpdump_kernel_drops_in(vm, "tcpdump.err")
}

/// "N packets dropped by kernel" from a tcpdump's stderr kept in `vm`.
pub(super) fn tcpdump_kernel_drops_in(vm: &Path, file: &str) -> Option<u64> {
    let s = fs::read_to_string(vm.join(file)).ok()?;
    s.lines()
        .find(|l| l.contains("dropped by kernel"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
