//! The human table: summary, flows, PFC, latency, ECMP and alerts, aligned and readable in a
//! 120-column terminal. Long addresses are shortened in the middle; everything is also in the
//! JSON document.

use std::fmt::Write as _;

use crate::engine::snapshot::{FlowSnapshot, RttSummary, Snapshot};

/// Flows listed (busiest first); the rest are counted.
pub const MAX_FLOW_ROWS: usize = 50;

fn human_count(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=9_999_999 => format!("{:.1}k", n as f64 / 1e3),
        10_000_000..=9_999_999_999 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.1}G", n as f64 / 1e9),
    }
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn human_rate(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gb/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} Mb/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kb/s", bps / 1e3)
    } else {
        format!("{bps:.0} b/s")
    }
}

fn human_ns(ns: Option<u64>) -> String {
    match ns {
        None => "-".into(),
        Some(v) if v < 10_000 => format!("{v}ns"),
        Some(v) if v < 10_000_000 => format!("{:.1}us", v as f64 / 1e3),
        Some(v) => format!("{:.1}ms", v as f64 / 1e6),
    }
}

/// Shorten `s` to `w` characters, keeping both ends.
fn fit(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    let keep = w.saturating_sub(1);
    let head: String = s.chars().take(keep / 2).collect();
    let tail: String = s.chars().skip(n - (keep - keep / 2)).collect();
    format!("{head}~{tail}")
}

fn rtt(r: &RttSummary) -> String {
    if r.count == 0 {
        "-".into()
    } else {
        format!("{}/{}", human_ns(r.p50), human_ns(r.p99))
    }
}

/// Columns of the flow table; each row is at most 118 characters.
const FLOW_HEADER: [&str; 12] = [
    "SRC > DST",
    "QP",
    "PKTS",
    "BYTES",
    "RATE",
    "GAPS",
    "RETX",
    "NAKS",
    "CNP",
    "CE",
    "D/P",
    "RTT p50/p99",
];

fn flow_line(out: &mut String, cols: [&str; 12]) {
    let _ = writeln!(
        out,
        "{:<33} {:>8} {:>6} {:>9} {:>10} {:>5} {:>5} {:>4} {:>5} {:>5} {:>4} {:>13}",
        cols[0],
        cols[1],
        cols[2],
        cols[3],
        cols[4],
        cols[5],
        cols[6],
        cols[7],
        cols[8],
        cols[9],
        cols[10],
        cols[11]
    );
}

fn flow_row(out: &mut String, f: &FlowSnapshot) {
    let naks = f.naks.psn_seq_err
        + f.naks.rnr
        + f.naks.invalid_request
        + f.naks.remote_access
        + f.naks.remote_op
        + f.naks.other;
    let class = match f.pcp {
        Some(p) => format!("{}/{}", f.dscp, p),
        None => format!("{}/-", f.dscp),
    };
    flow_line(
        out,
        [
            &fit(&format!("{} > {}", f.src_ip, f.dst_ip), 33),
            &format!("{:#x}", f.dst_qp),
            &human_count(f.packets),
            &human_bytes(f.bytes),
            &human_rate(f.rate_bps),
            &human_count(f.psn_gaps),
            &human_count(f.retransmits),
            &human_count(naks),
            &human_count(f.cnp),
            &human_count(f.ecn_ce),
            &class,
            &rtt(&f.rtt_ns),
        ],
    );
}

/// Word-wrap `text` to `width` columns, each line prefixed with `indent`.
fn wrap(out: &mut String, text: &str, indent: &str, width: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
}

/// Render the snapshot as text.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    let m = &s.summary;
    let _ = writeln!(
        out,
        "frames {}  roce {}  pfc {}  pause {}  non-roce {}  malformed {}  fragments {}  unsupported {}",
        m.total_packets,
        m.roce_packets,
        m.pfc_frames,
        m.pause_8023x,
        m.non_roce,
        m.malformed,
        m.ip_fragments,
        m.unsupported,
    );
    let _ = writeln!(
        out,
        "flows {}  interval {:.3} s  path MTU {}{}  link {} Gb/s",
        m.flows,
        m.interval_s,
        m.pmtu,
        if m.pmtu_learned { " (learned)" } else { "" },
        m.link_gbps,
    );
    if m.map_full + m.ringbuf_full + m.pending_full > 0 {
        let _ = writeln!(
            out,
            "lost: map_full {}  ringbuf_full {}  pending_full {}",
            m.map_full, m.ringbuf_full, m.pending_full
        );
    }
    if let Some(c) = &m.capture
        && (c.snap_truncated + c.skipped_link_type > 0 || c.error.is_some())
    {
        let text = format!(
            "capture: {} frames, {} cut by the snap length, {} on non-Ethernet interfaces skipped{}",
            c.frames,
            c.snap_truncated,
            c.skipped_link_type,
            c.error
                .as_ref()
                .map(|e| format!("; {e}"))
                .unwrap_or_default()
        );
        wrap(&mut out, &text, "", 118);
    }

    let _ = writeln!(out);
    flow_line(&mut out, FLOW_HEADER);
    let mut flows: Vec<&FlowSnapshot> = s.flows.iter().collect();
    flows.sort_by_key(|f| std::cmp::Reverse(f.bytes));
    for f in flows.iter().take(MAX_FLOW_ROWS) {
        flow_row(&mut out, f);
    }
    if flows.len() > MAX_FLOW_ROWS {
        let _ = writeln!(
            out,
            "... {} more flows (use --json for all)",
            flows.len() - MAX_FLOW_ROWS
        );
    }

    if !s.pfc.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<16} {:<17} {:>4} {:>8} {:>8} {:>11} {:>12} {:>8} {:>5}",
            "PFC IFACE", "SRC MAC", "PRIO", "XOFF", "XON", "QUANTA", "PAUSED", "FRACTION", "STORM"
        );
        for p in &s.pfc {
            let _ = writeln!(
                out,
                "{:<16} {:<17} {:>4} {:>8} {:>8} {:>11} {:>12} {:>7.2}% {:>5}",
                fit(&format!("{}/{}", p.iface, p.direction), 16),
                p.src_mac,
                p.priority
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "link".into()),
                p.pause_frames,
                p.xon_frames,
                p.pause_quanta,
                format!("{:.1}us", p.paused_us),
                p.paused_fraction * 100.0,
                if p.storm { "YES" } else { "no" }
            );
        }
    }

    let l = &s.latency.overall;
    if l.count > 0 {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "latency at the observation point, {} samples: min {} p50 {} p90 {} p99 {} p99.9 {} max {}",
            l.count,
            human_ns(l.min),
            human_ns(l.p50),
            human_ns(l.p90),
            human_ns(l.p99),
            human_ns(l.p999),
            human_ns(l.max)
        );
    }

    let e = &s.ecmp;
    if !e.measured.paths.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "ecmp measured: {} observation points  max/mean {:.2}  jain {:.3}",
            e.measured.paths.len(),
            e.measured.imbalance,
            e.measured.jain
        );
        if let Some(mdl) = &e.modelled {
            let _ = writeln!(
                out,
                "ecmp modelled ({} paths, {} seed {}): max/mean {:.2}  jain {:.3}",
                mdl.paths,
                mdl.hash.name(),
                mdl.seed,
                mdl.imbalance,
                mdl.jain,
            );
            let total: u64 = mdl.bytes_per_path.iter().sum();
            let shares: Vec<String> = mdl
                .bytes_per_path
                .iter()
                .take(24)
                .map(|b| format!("{:.0}%", *b as f64 * 100.0 / total.max(1) as f64))
                .collect();
            let more = if mdl.bytes_per_path.len() > 24 {
                " ..."
            } else {
                ""
            };
            let _ = writeln!(out, "  byte share per path: {}{more}", shares.join(" "));
            for c in mdl.collisions.iter().take(3) {
                let _ = writeln!(
                    out,
                    "  path {} carries {} elephant 5-tuples ({})",
                    c.path,
                    c.elephants.len(),
                    human_bytes(c.bytes)
                );
            }
        }
        for p in e.entropy.iter().take(5) {
            let _ = writeln!(
                out,
                "  {} > {}: {} QPs on {} UDP source ports, busiest 5-tuple {:.0}% of bytes",
                p.src_ip,
                p.dst_ip,
                p.qps,
                p.udp_src_ports,
                p.busiest_tuple_share * 100.0
            );
        }
    }

    if !s.alerts.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "alerts:");
        for a in s.alerts.iter().take(20) {
            let subject = match (&a.flow, &a.pfc) {
                (Some(f), _) => format!("{} > {} qp {:#x}", f.src_ip, f.dst_ip, f.dst_qp),
                (None, Some(p)) => format!(
                    "{} {} prio {}",
                    p.iface,
                    p.src_mac,
                    p.priority
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "link".into())
                ),
                _ => String::new(),
            };
            let _ = writeln!(out, "  {:<18} {} (x{})", a.kind, fit(&subject, 80), a.count);
            wrap(&mut out, &a.reason, "      ", 118);
        }
        if s.alerts.len() > 20 {
            let _ = writeln!(
                out,
                "  ... {} more alerts (use --json)",
                s.alerts.len() - 20
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(fit("abcdefghij", 5), "ab~ij");
        assert_eq!(fit("abc", 5), "abc");
        assert_eq!(human_count(12_345), "12.3k");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(human_ns(Some(1500)), "1500ns");
        assert_eq!(human_ns(Some(15_000)), "15.0us");
    }
}
