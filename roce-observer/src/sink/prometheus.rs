//! Prometheus text exposition of a snapshot, written as a file for node_exporter's textfile
//! collector (`run --prom-file DIR/roce.prom`): no listening socket, atomic replace each
//! interval. Counters are cumulative since the observer started.

use std::{fmt::Write as _, io, path::Path};

use crate::engine::snapshot::{FlowSnapshot, Snapshot};

/// Label value escaping per the exposition format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn flow_labels(f: &FlowSnapshot) -> String {
    format!(
        "src=\"{}\",dst=\"{}\",qp=\"{}\",iface=\"{}\",direction=\"{}\"",
        f.src_ip,
        f.dst_ip,
        f.dst_qp,
        esc(&f.iface),
        f.direction
    )
}

/// Render the exposition text.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in rows {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {v}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {v}");
            }
        }
    };
    type Field = fn(&FlowSnapshot) -> u64;
    let flow_counters: [(&str, &str, Field); 9] = [
        ("roce_flow_packets_total", "RoCE packets of the flow", |f| {
            f.packets
        }),
        ("roce_flow_bytes_total", "Frame bytes of the flow", |f| {
            f.bytes
        }),
        (
            "roce_flow_psn_gaps_total",
            "PSN gaps (docs/metrics.md)",
            |f| f.psn_gaps,
        ),
        ("roce_flow_psn_missing_total", "PSNs skipped by gaps", |f| {
            f.psn_missing
        }),
        (
            "roce_flow_retransmits_total",
            "Requests and READ responses resent",
            |f| f.retransmits,
        ),
        ("roce_flow_acks_total", "ACKs", |f| f.acks),
        (
            "roce_flow_cnp_total",
            "Congestion notification packets",
            |f| f.cnp,
        ),
        ("roce_flow_ecn_ce_total", "Packets marked ECN CE", |f| {
            f.ecn_ce
        }),
        (
            "roce_flow_ecn_ect_total",
            "Packets marked ECT(0) or ECT(1)",
            |f| f.ecn_ect,
        ),
    ];
    for (name, help, get) in flow_counters {
        let rows = s
            .flows
            .iter()
            .map(|f| (flow_labels(f), get(f) as f64))
            .collect();
        family(name, "counter", help, rows);
    }
    let mut naks = Vec::new();
    for f in &s.flows {
        for (class, v) in f.naks.by_class() {
            naks.push((format!("{},class=\"{class}\"", flow_labels(f)), v as f64));
        }
    }
    family("roce_flow_naks_total", "counter", "NAKs by class", naks);
    let mut rtt = Vec::new();
    for f in &s.flows {
        for (q, v) in [("0.5", f.rtt_ns.p50), ("0.99", f.rtt_ns.p99)] {
            if let Some(v) = v {
                rtt.push((
                    format!("{},quantile=\"{q}\"", flow_labels(f)),
                    v as f64 / 1e9,
                ));
            }
        }
    }
    family(
        "roce_flow_latency_seconds",
        "gauge",
        "Request to answer latency at the observation point",
        rtt,
    );
    let pfc_rows = |get: fn(&crate::engine::snapshot::PfcSnapshot) -> u64| {
        s.pfc
            .iter()
            .map(|p| {
                let prio = p.priority.map_or("link".to_string(), |v| v.to_string());
                (
                    format!(
                        "iface=\"{}\",direction=\"{}\",src_mac=\"{}\",priority=\"{prio}\"",
                        esc(&p.iface),
                        p.direction,
                        p.src_mac
                    ),
                    get(p) as f64,
                )
            })
            .collect::<Vec<_>>()
    };
    family(
        "roce_pfc_pause_frames_total",
        "counter",
        "PFC/PAUSE XOFF frames (non-zero time)",
        pfc_rows(|p| p.pause_frames),
    );
    family(
        "roce_pfc_xon_frames_total",
        "counter",
        "PFC/PAUSE XON frames (time 0)",
        pfc_rows(|p| p.xon_frames),
    );
    family(
        "roce_pfc_pause_quanta_total",
        "counter",
        "Requested pause time in quanta of 512 bit times",
        pfc_rows(|p| p.pause_quanta),
    );
    let m = &s.summary;
    let frames = [
        ("roce", m.roce_packets),
        ("pfc", m.pfc_frames),
        ("pause_8023x", m.pause_8023x),
        ("non_roce", m.non_roce),
        ("malformed", m.malformed),
        ("ip_fragment", m.ip_fragments),
        ("unsupported", m.unsupported),
    ];
    family(
        "roce_frames_total",
        "counter",
        "Frames seen, by class",
        frames
            .iter()
            .map(|(c, v)| (format!("class=\"{c}\""), *v as f64))
            .collect(),
    );
    family(
        "roce_observer_errors_total",
        "counter",
        "Kernel-side losses: flow table full, ring buffer full (events lost)",
        vec![
            ("kind=\"map_full\"".into(), m.map_full as f64),
            ("kind=\"ringbuf_full\"".into(), m.ringbuf_full as f64),
        ],
    );
    out
}

/// Replace `path` with the exposition atomically (write a sibling, then rename).
pub fn write_file(path: &Path, s: &Snapshot) -> io::Result<()> {
    let tmp = path.with_extension("prom.tmp");
    std::fs::write(&tmp, render(s))?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig};

    #[test]
    fn exposition_has_flow_pfc_and_frame_families() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        let mut engine = Engine::new(EngineConfig::default());
        for name in ["nak_go_back_n", "pfc"] {
            let file = std::fs::File::open(dir.join(format!("{name}.pcap"))).expect("fixture");
            crate::wire::capture::read_capture(
                file,
                |_| {},
                |f| engine.ingest_frame(f.ts_ns, f.data, f.orig_len, f.iface),
            );
        }
        let text = render(&engine.snapshot(0));
        assert!(text.contains(
            "roce_flow_retransmits_total{src=\"192.0.2.1\",dst=\"192.0.2.2\",qp=\"18\",iface=\"if0\",direction=\"capture\"} 7"
        ), "{text}");
        assert!(text.contains("class=\"psn_seq_err\"} 1"), "{text}");
        assert!(
            text.contains("roce_frames_total{class=\"pfc\"} 8"),
            "{text}"
        );
        assert!(text.contains("# TYPE roce_pfc_pause_quanta_total counter"));
        // Every sample line parses as `name{labels} value` or `name value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().expect("value");
            assert!(value.parse::<f64>().is_ok(), "bad line {line}");
        }
    }
}
