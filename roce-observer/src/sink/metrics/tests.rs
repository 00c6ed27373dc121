use std::collections::BTreeSet;

use super::*;
use crate::engine::{Engine, EngineConfig};

pub(crate) fn fixture_snapshot(names: &[&str]) -> Snapshot {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut engine = Engine::new(EngineConfig::default());
    let mut resolution = 1;
    for name in names {
        let file = std::fs::File::open(dir.join(format!("{name}.pcap"))).expect("fixture");
        crate::wire::capture::read_capture(
            file,
            |i| resolution = resolution.max(i.ts_resolution_ns),
            |f| engine.ingest_frame(f.ts_ns, f.data, f.orig_len, f.iface),
        );
    }
    engine.set_ts_resolution(resolution);
    engine.snapshot(0)
}

/// What a live run on a host with an RDMA device adds: one QP owned by a process (the first
/// flow goes into it) and one port's counters (every renderer reads them).
pub(crate) fn with_host(mut snap: Snapshot) -> Snapshot {
    use crate::report::{NicCounter, NicPortSnapshot, QpOwner};
    let into = snap.flows[0].dst_qp;
    snap.qp_owners = vec![QpOwner {
        device: "rxe0".into(),
        port: Some(1),
        lqpn: into,
        rqpn: Some(0x1234),
        sq_psn: Some(70),
        rq_psn: Some(90),
        state: Some("RTS"),
        pid: Some(4242),
        comm: "ib_write_bw".into(),
        gone: false,
    }];
    crate::report::owners::label_flows(&snap.qp_owners, &mut snap.flows);
    let c = |total, delta| NicCounter {
        total,
        delta,
        per_s: delta as f64 / 2.0,
    };
    snap.nic = vec![NicPortSnapshot {
        device: "rxe0".into(),
        port: 1,
        netdev: Some("eth0".into()),
        interval_s: 2.0,
        rdma: [
            ("out_of_seq_request".to_string(), c(12, 4)),
            ("sent_pkts".to_string(), c(900, 300)),
        ]
        .into(),
        pause: [("rx_pause_ctrl_phy".to_string(), c(5, 0))].into(),
    }];
    snap
}

/// Owners: one info series per flow with series that has an owner, with the flow's labels;
/// NIC counters: total and rate per device, port and counter.
#[test]
fn owners_and_nic_counters_have_series() {
    let snap = with_host(fixture_snapshot(&["rc_send_write_read"]));
    let f = &snap.flows[0];
    let text = render(&snap, DEFAULT_TOP_FLOWS, &Health::default());
    let info: Vec<_> = samples(&text)
        .into_iter()
        .filter(|(n, _, _)| n == "roce_flow_owner_info")
        .collect();
    assert_eq!(info.len(), 1, "{text}");
    let labels = &info[0].1;
    for want in [
        format!("qp=\"{}\"", f.dst_qp),
        format!("direction=\"{}\"", f.direction),
        "comm=\"ib_write_bw\"".into(),
        "pid=\"4242\"".into(),
        "device=\"rxe0\"".into(),
        format!("local_qp=\"{}\"", f.dst_qp),
    ] {
        assert!(labels.contains(&want), "{want} in {labels}");
    }
    let l =
        |c: &str, src: &str| format!("device=\"rxe0\",port=\"1\",source=\"{src}\",counter=\"{c}\"");
    assert_eq!(
        value(&text, "roce_nic_stat_total", &l("sent_pkts", "rdma")),
        900.0
    );
    assert_eq!(
        value(&text, "roce_nic_stat_rate", &l("sent_pkts", "rdma")),
        150.0
    );
    assert_eq!(
        value(
            &text,
            "roce_nic_stat_total",
            &l("rx_pause_ctrl_phy", "pause")
        ),
        5.0
    );
    // Without a host: no such series.
    let bare = render(
        &fixture_snapshot(&["rc_send_write_read"]),
        DEFAULT_TOP_FLOWS,
        &Health::default(),
    );
    assert!(!bare.contains("roce_flow_owner_info{") && !bare.contains("roce_nic_stat_total{"));
}

/// `name{labels} value` lines as (name, labels, value).
fn samples(text: &str) -> Vec<(String, String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("`series value`");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let value = value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("bad value in {l}"));
            (name.to_string(), labels.to_string(), value)
        })
        .collect()
}

fn value(text: &str, name: &str, labels: &str) -> f64 {
    samples(text)
        .into_iter()
        .find(|(n, l, _)| n == name && l == labels)
        .map(|(_, _, v)| v)
        .unwrap_or_else(|| panic!("no {name}{{{labels}}} in\n{text}"))
}

/// The cumulative count of histogram `name` at bound `le` (compared as numbers: the encoder
/// writes Go's float format, `1e-06`).
fn bucket(text: &str, name: &str, labels: &str, le: f64) -> f64 {
    let prefix = format!("{labels},le=\"");
    samples(text)
        .into_iter()
        .find(|(n, l, _)| {
            n == name
                && l.strip_prefix(&prefix)
                    .and_then(|b| b.trim_end_matches('"').parse::<f64>().ok())
                    .is_some_and(|b| b == le)
        })
        .map(|(_, _, v)| v)
        .unwrap_or_else(|| panic!("no {name}{{{labels},le={le}}} in\n{text}"))
}

#[test]
fn families_carry_the_snapshot_values() {
    let snap = fixture_snapshot(&["nak_go_back_n", "pfc", "rc_send_write_read"]);
    let text = render(&snap, DEFAULT_TOP_FLOWS, &Health::default());
    let flow = r#"src="192.0.2.1",dst="192.0.2.2",qp="18",iface="if0",direction="capture""#;
    assert_eq!(value(&text, "roce_flow_retransmits_total", flow), 7.0);
    assert_eq!(value(&text, "roce_frames_total", r#"class="pfc""#), 8.0);
    assert_eq!(
        value(&text, "roce_frames_total", r#"class="roce""#),
        snap.summary.roce_packets as f64
    );
    assert_eq!(
        value(&text, "roce_naks_total", r#"class="psn_seq_err""#),
        1.0
    );
    assert!(
        text.contains("# TYPE roce_flow_latency_seconds histogram"),
        "{text}"
    );
    assert!(text.contains("# TYPE roce_pfc_pause_quanta_total counter"));
    // The histogram's count equals the JSON document's sample count, per flow and per point.
    let total_samples: u64 = snap.flows.iter().map(|f| f.rtt_ns.count).sum();
    assert!(total_samples > 0);
    let point = r#"iface="if0",direction="capture""#;
    assert_eq!(
        value(&text, "roce_point_latency_seconds_count", point),
        total_samples as f64
    );
    assert_eq!(
        value(
            &text,
            "roce_point_latency_seconds_bucket",
            &format!(r#"{point},le="+Inf""#)
        ),
        total_samples as f64
    );
    for f in snap.flows.iter().filter(|f| f.rtt_ns.count > 0) {
        let labels = format!(
            r#"src="{}",dst="{}",qp="{}",iface="{}",direction="{}""#,
            f.src_ip, f.dst_ip, f.dst_qp, f.iface, f.direction
        );
        assert_eq!(
            value(&text, "roce_flow_latency_seconds_count", &labels),
            f.rtt_ns.count as f64
        );
        // Buckets are cumulative and end at the count; the max sample lies in the first bucket
        // that holds every sample.
        let mut last = 0.0;
        let max_s = f.rtt_ns.max.expect("max") as f64 / 1e9;
        for ns in LATENCY_BUCKETS_NS {
            let le = ns as f64 / 1e9;
            let v = bucket(&text, "roce_flow_latency_seconds_bucket", &labels, le);
            assert!(v >= last);
            assert_eq!(
                v == f.rtt_ns.count as f64,
                le >= max_s,
                "le {le} max {max_s}"
            );
            last = v;
        }
    }
    // PFC per priority: the fixture pauses priority 3 (and others) from one MAC on one port.
    let pfc_total: u64 = snap.pfc.iter().map(|p| p.pause_frames).sum();
    let pfc_metric: f64 = samples(&text)
        .iter()
        .filter(|(n, _, _)| n == "roce_pfc_pause_frames_total")
        .map(|(_, _, v)| v)
        .sum();
    assert_eq!(pfc_metric, pfc_total as f64);
    assert_eq!(value(&text, "roce_observer_events_lost_total", ""), 0.0);
}

#[test]
fn per_flow_series_are_bounded_to_top_flows_plus_problem_flows() {
    let base = fixture_snapshot(&["rc_send_write_read"]);
    let template = FlowSnapshot::clone(&base.flows[0]);
    let mut snap = base.clone();
    snap.flows = (0..5000u32)
        .map(|i| {
            let mut f = template.clone();
            f.dst_qp = i;
            f.bytes = u64::from(i) * 10;
            f.psn_gaps = 0;
            f.retransmits = u64::from(i % 1000 == 7);
            f.naks = crate::report::NakCounts::default();
            std::sync::Arc::new(f)
        })
        .collect();
    snap.summary.flows = 5000;
    let text = render(&snap, 10, &Health::default());
    let qps: BTreeSet<String> = samples(&text)
        .into_iter()
        .filter(|(n, _, _)| n == "roce_flow_bytes_total")
        .map(|(_, l, _)| {
            l.split("qp=\"")
                .nth(1)
                .expect("qp")
                .split('"')
                .next()
                .expect("qp")
                .to_string()
        })
        .collect();
    let expected: BTreeSet<String> = (4990..5000)
        .chain([7, 1007, 2007, 3007, 4007])
        .map(|q: u32| q.to_string())
        .collect();
    assert_eq!(qps, expected);
    assert_eq!(
        value(&text, "roce_observer_metrics_flows_omitted", ""),
        4985.0
    );
    // Aggregates still count every flow.
    let point = format!(
        r#"iface="{}",direction="{}""#,
        template.iface, template.direction
    );
    assert_eq!(value(&text, "roce_point_flows", &point), 5000.0);
    let all: u64 = snap.flows.iter().map(|f| f.bytes).sum();
    assert_eq!(value(&text, "roce_point_bytes_total", &point), all as f64);
    // Series count stays far below one per flow per counter.
    assert!(
        samples(&text).len() < 2000,
        "{} series",
        samples(&text).len()
    );
}

#[test]
fn health_appears_when_known() {
    let snap = fixture_snapshot(&["psn_gap"]);
    let health = Health {
        log_records_lost: Some(12),
        log_records_written: Some(30),
        last_scrape_seconds: Some(0.002),
        scrapes: 4,
    };
    let text = render(&snap, 1, &health);
    assert_eq!(
        value(&text, "roce_observer_log_records_lost_total", ""),
        12.0
    );
    assert_eq!(
        value(&text, "roce_observer_log_records_written_total", ""),
        30.0
    );
    assert_eq!(value(&text, "roce_observer_scrapes_total", ""), 4.0);
    assert_eq!(
        value(&text, "roce_observer_last_scrape_duration_seconds", ""),
        0.002
    );
    let without = render(&snap, 1, &Health::default());
    assert!(!without.contains("roce_observer_log_records_lost_total"));
}

/// `promtool check metrics` (Debian package `prometheus`, installed by `cargo xtask setup`)
/// lints names, units, `_total` suffixes and histogram shapes. The Prometheus scrape test in
/// tests/ runs it too and requires it; here it runs when promtool is installed.
#[test]
fn promtool_finds_nothing_to_lint() {
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("promtool not installed: lint checked by the Prometheus scrape test only");
        return;
    };
    let snap = with_host(fixture_snapshot(&[
        "mixed_demo",
        "pfc",
        "pause_8023x",
        "nak_go_back_n",
        "mirror_loss",
    ]));
    let health = Health {
        log_records_lost: Some(1),
        log_records_written: Some(2),
        last_scrape_seconds: Some(0.1),
        scrapes: 1,
    };
    let text = render(&snap, DEFAULT_TOP_FLOWS, &health);
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(text.as_bytes()).expect("feed promtool");
    }
    let out = child.wait_with_output().expect("promtool runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool: {report}"
    );
}

/// The worst case for a default run: a full 16,384-flow kernel table, every flow with
/// problems, every flow between its own pair of hosts, two observation points, PFC on all 8
/// priorities of two ports.
#[test]
fn series_stay_bounded_for_a_full_flow_table() {
    let base = fixture_snapshot(&["mixed_demo", "pfc"]);
    let template = base
        .flows
        .iter()
        .find(|f| f.rtt_ns.count > 0)
        .map(|f| (**f).clone())
        .expect("a flow with samples");
    let mut snap = base.clone();
    snap.flows = (0..16_384u32)
        .map(|i| {
            let mut f = template.clone();
            f.src_ip = std::net::IpAddr::V4(std::net::Ipv4Addr::from(0xc000_0200 + i));
            f.dst_qp = i;
            f.bytes = u64::from(i);
            f.psn_gaps = 1;
            f.direction = if i % 2 == 0 { "ingress" } else { "egress" };
            std::sync::Arc::new(f)
        })
        .collect();
    snap.summary.flows = 16_384;
    let text = render(&snap, DEFAULT_TOP_FLOWS, &Health::default());
    let n = samples(&text).len();
    eprintln!("series for a full table: {n}");
    assert!(n < 10_000, "{n} series");
    assert_eq!(
        value(&text, "roce_observer_metrics_flows_omitted", ""),
        16_184.0
    );
}

/// Mirror sessions get their own counters, and a mirrored flow names its mirror source (two
/// switches mirroring one QP are two flows): the mirror_loss fixture.
#[test]
fn mirror_sessions_and_mirrored_flows() {
    let snap = fixture_snapshot(&["mirror_loss"]);
    let text = render(&snap, DEFAULT_TOP_FLOWS, &Health::default());
    let session = r#"encap="erspan2",outer_src="198.51.100.1",outer_dst="198.51.100.2",id="session 7",iface="if0",direction="capture""#;
    assert_eq!(value(&text, "roce_mirror_frames_total", session), 8.0);
    assert_eq!(value(&text, "roce_mirror_seq_lost_total", session), 2.0);
    assert_eq!(value(&text, "roce_mirror_seq_late_total", session), 2.0);
    let wrap = r#"encap="gre",outer_src="198.51.100.1",outer_dst="198.51.100.2",id="key 42",iface="if0",direction="capture""#;
    assert_eq!(value(&text, "roce_mirror_seq_lost_total", wrap), 1.0);
    let flow = |mirror: &str| {
        format!(
            r#"src="192.0.2.1",dst="192.0.2.2",qp="18",iface="if0",direction="capture",mirror="{mirror}""#
        )
    };
    assert_eq!(
        value(
            &text,
            "roce_flow_packets_total",
            &flow("erspan2 198.51.100.1 session 7")
        ),
        5.0
    );
    // The same QP through the other switch: its own series (PSN 4 skipped there, a hole that
    // no later packet declared lost: no loss counted).
    let other = flow("erspan3 198.51.100.3 session 8");
    assert_eq!(value(&text, "roce_flow_packets_total", &other), 5.0);
    assert_eq!(value(&text, "roce_flow_psn_gaps_total", &other), 0.0);
}

#[test]
fn the_textfile_never_writes_through_a_planted_link() {
    use std::os::unix::fs::symlink;
    let dir = std::env::temp_dir().join(format!(
        "roce-observer-promfile-links-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("outside")).expect("temp dir");
    let victim = dir.join("outside/root-only");
    std::fs::write(&victim, b"do not overwrite").expect("write");
    let prom = dir.join("roce.prom");
    // The fixed temporary name used to be FILE.prom.tmp; the file itself may be a link too.
    symlink(&victim, dir.join("roce.prom.tmp")).expect("plant link");
    symlink(&victim, dir.join("roce.prom.prom.tmp")).expect("plant link");
    symlink(&victim, &prom).expect("plant link");
    write_textfile(&prom, "roce_frames_total 1\n").expect("write");
    assert_eq!(
        std::fs::read(&victim).expect("read victim"),
        b"do not overwrite"
    );
    // The link at FILE was replaced by a file of ours; no temporary file is left.
    let meta = std::fs::symlink_metadata(&prom).expect("lstat");
    assert!(meta.file_type().is_file());
    assert_eq!(
        std::fs::read_to_string(&prom).expect("read"),
        "roce_frames_total 1\n"
    );
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "outside",
            "roce.prom",
            "roce.prom.prom.tmp",
            "roce.prom.tmp"
        ]
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
