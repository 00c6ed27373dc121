//! UI tests: state transitions, and snapshot tests of the views on ratatui's TestBackend with
//! a deterministic snapshot (a fixture capture analysed with capture timestamps).

use std::sync::Arc;

use ratatui::{Terminal, backend::TestBackend};

use super::{Action, App, Tab, view};
use crate::{
    engine::{Engine, EngineConfig},
    wire,
};

fn fixture_snapshot(name: &str) -> crate::report::Snapshot {
    fixture_snapshot_with(name, EngineConfig::default())
}

fn fixture_snapshot_with(name: &str, config: EngineConfig) -> crate::report::Snapshot {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(format!("{name}.pcap"));
    let file = std::fs::File::open(&path).expect("fixture exists");
    let mut engine = Engine::new(config);
    let mut last = 0;
    let mut resolution = 1;
    let end = wire::capture::read_capture(
        file,
        |i| resolution = resolution.max(i.ts_resolution_ns),
        |f| {
            last = f.ts_ns;
            engine.ingest_frame(f.ts_ns, f.data, f.orig_len, f.iface);
        },
    );
    assert!(end.error.is_none(), "fixture reads cleanly");
    engine.set_ts_resolution(resolution);
    engine.snapshot(last)
}

/// The view titled `title`.
fn tab(title: &str) -> Tab {
    Tab::titled(title).expect("a view of that title")
}

fn render(app: &App) -> String {
    render_at(app, 80, 24)
}

fn render_at(app: &App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    terminal.draw(|f| view::draw(f, app)).expect("draw");
    format!("{}", terminal.backend())
}

#[test]
fn navigation_and_sorting() {
    let mut app = App::new("test".into(), fixture_snapshot("mixed_demo"));
    let flows = app.snapshot.flows.len();
    assert!(flows > 3);
    app.update(Action::Bottom);
    assert_eq!(app.selected, flows - 1);
    app.update(Action::Down);
    assert_eq!(app.selected, flows - 1, "the cursor stays on the last row");
    app.update(Action::Top);
    app.update(Action::Up);
    assert_eq!(app.selected, 0);
    // Problems first (then by bytes).
    assert_eq!(app.table.sort.name(), "problems");
    let marks: Vec<bool> = app
        .table
        .order
        .iter()
        .map(|i| app.table.problem[*i])
        .collect();
    assert!(marks.contains(&true) && marks.contains(&false), "{marks:?}");
    assert!(marks.windows(2).all(|w| w[0] >= w[1]), "{marks:?}");
    app.update(Action::CycleSort);
    // Sorted by bytes, largest first.
    let bytes: Vec<u64> = app
        .table
        .order
        .iter()
        .map(|i| app.snapshot.flows[*i].bytes)
        .collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]));
    app.update(Action::CycleSort);
    assert_eq!(app.table.sort.name(), "packets");
    app.update(Action::NextTab);
    assert_eq!(app.tab, tab("PFC"));
    app.update(Action::PrevTab);
    app.update(Action::PrevTab);
    assert_eq!(app.tab, *Tab::all().last().expect("tabs"), "wraps around");
    app.update(Action::Quit);
    assert!(app.quit);
}

#[test]
fn header_shows_lost_log_lines_only_with_a_log_directory() {
    let mut snap = fixture_snapshot("psn_gap");
    let without = render(&App::new("test".into(), snap.clone()));
    assert!(!without.contains("log lost"), "{without}");
    snap.summary.log_records_lost = Some(0);
    let none_lost = render_at(&App::new("test".into(), snap.clone()), 120, 24);
    assert!(none_lost.contains("log lost 0 "), "{none_lost}");
    // Lines lost are kept on an 80-column terminal, where other counters are dropped.
    snap.summary.log_records_lost = Some(7);
    let lost = render(&App::new("test".into(), snap));
    assert!(lost.contains("log lost !7"), "{lost}");
}

#[test]
fn pause_freezes_the_view() {
    let snap = fixture_snapshot("psn_gap");
    let mut app = App::new("test".into(), snap.clone());
    app.update(Action::TogglePause);
    app.update(Action::Snapshot(Box::new(fixture_snapshot("pfc"))));
    assert_eq!(app.snapshot, snap);
    app.update(Action::TogglePause);
    app.update(Action::Snapshot(Box::new(fixture_snapshot("pfc"))));
    assert_ne!(app.snapshot, snap);
}

#[test]
fn flows_view_80x24() {
    let mut app = App::new("veth0, veth1".into(), fixture_snapshot("mixed_demo"));
    app.update(Action::ToggleDetail);
    insta::assert_snapshot!(render_at(&app, 80, 24));
}

#[test]
fn flows_view_200x50() {
    let mut app = App::new("veth0, veth1".into(), fixture_snapshot("mixed_demo"));
    app.update(Action::ToggleDetail);
    insta::assert_snapshot!(render_at(&app, 200, 50));
}

/// Values are never cut: at any width every QP and every p99 shown is shown whole, and columns
/// appear whole or not at all.
#[test]
fn narrow_terminals_drop_columns_instead_of_cutting_values() {
    let app = App::new("veth0, veth1".into(), fixture_snapshot("mixed_demo"));
    for width in [60u16, 80, 100, 130, 200] {
        let screen = render_at(&app, width, 40);
        let table: Vec<&str> = screen.lines().skip(5).take(app.table.order.len()).collect();
        for (row, i) in table.iter().zip(&app.table.order) {
            let f = &app.snapshot.flows[*i];
            assert!(
                row.contains(&crate::format::qp(f.dst_qp)),
                "{width} columns: QP cut in {row}"
            );
        }
        let header = screen.lines().nth(4).expect("table header");
        let p99_shown = header.contains("p99");
        if p99_shown {
            for (row, i) in table.iter().zip(&app.table.order) {
                let p99 = crate::format::ns(app.snapshot.flows[*i].rtt_ns.p99);
                assert!(row.contains(&p99), "{width} columns: p99 cut in {row}");
            }
        }
        if width >= 200 {
            assert!(
                header.contains("peer") && header.contains("p50"),
                "{header}"
            );
        }
        if width <= 80 {
            assert!(
                !header.contains("peer"),
                "the least useful column goes first"
            );
        }
    }
    assert!(!app.table.order.is_empty());
}

#[test]
fn pfc_view_80x24() {
    let mut app = App::new("veth0".into(), fixture_snapshot("pfc"));
    app.update(Action::SelectTab(tab("PFC")));
    insta::assert_snapshot!(render_at(&app, 80, 24));
}

#[test]
fn pfc_view_200x50() {
    let mut app = App::new("veth0".into(), fixture_snapshot("pfc"));
    app.update(Action::SelectTab(tab("PFC")));
    insta::assert_snapshot!(render_at(&app, 200, 50));
}

/// One stream mirrored by two switches: the flows view names each flow's mirror source in
/// `seen`, the mirror view each session's frames and sequence losses (mirror_loss fixture).
#[test]
fn mirror_views() {
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    let mut app = App::new("veth0".into(), fixture_snapshot("mirror_loss"));
    let flows = render_at(&app, 160, 12);
    assert!(flows.contains("erspan2:198.51.100.1#7"), "{flows}");
    assert!(flows.contains("erspan3:198.51.100.3#8"), "{flows}");
    // The filter matches the mirror source.
    app.update(Action::StartFilter);
    for c in "198.51.100.3".chars() {
        app.update(Action::Key(KeyCode::Char(c), KeyModifiers::NONE));
    }
    app.update(Action::Key(KeyCode::Enter, KeyModifiers::NONE));
    assert_eq!(
        app.table.order.len(),
        2,
        "the two flows mirrored by 198.51.100.3"
    );
    app.update(Action::SelectTab(tab("Mirrors")));
    insta::assert_snapshot!(render_at(&app, 120, 14));
}

/// The mixed_demo fabric: four hosts, several QPs per host pair, one QP whose UDP source port
/// changes, over the default model of 8 uplinks.
#[test]
fn ecmp_view() {
    let snap = fixture_snapshot("mixed_demo");
    assert!(snap.ecmp.modelled.is_some(), "the model runs by default");
    assert!(snap.ecmp.entropy.len() > 2, "several host pairs");
    let mut app = App::new("veth0, veth1".into(), snap);
    app.update(Action::SelectTab(tab("ECMP")));
    insta::assert_snapshot!(render(&app));
}

/// The mixed_demo capture has PSN gaps, retransmissions, a NAK, CNPs and CE marks: the alert
/// list names exactly the flows the flow table marks as problems.
#[test]
fn alerts_name_every_problem_flow() {
    let snap = fixture_snapshot("mixed_demo");
    let app = App::new("veth0".into(), snap.clone());
    let mut marked: Vec<String> = snap
        .flows
        .iter()
        .filter(|f| super::flow_table::FlowTable::is_problem(f))
        .map(|f| format!("{} {} {}", f.src_ip, f.dst_ip, f.dst_qp))
        .collect();
    // Problem alerts only: advice (not_ect, ...) marks no flow.
    let mut named: Vec<String> = snap
        .alerts
        .iter()
        .filter(|a| crate::severity::Severity::of_alert(a.kind).is_problem())
        .filter_map(|a| a.flow.as_ref())
        .map(|f| format!("{} {} {}", f.src_ip, f.dst_ip, f.dst_qp))
        .collect();
    marked.sort();
    named.sort();
    named.dedup();
    assert!(marked.len() >= 4, "{marked:?}");
    assert_eq!(marked, named);
    assert_eq!(
        app.table.problem.iter().filter(|p| **p).count(),
        marked.len()
    );
    let mut app = app;
    app.update(Action::SelectTab(tab("Alerts")));
    insta::assert_snapshot!(render(&app));
}

/// Alert rows raised by the engine's rules on the ipv6 fixture: a frame on DSCP 34 (outside
/// the lossless class), a Not-ECT one, a CE mark (congestion) no CNP answers, and, with a latency threshold
/// of 22 us, its 25 us READ response.
#[test]
fn alerts_view_with_alerts() {
    let snap = fixture_snapshot_with(
        "ipv6",
        EngineConfig {
            rtt_alert_ns: Some(22_000),
            ..EngineConfig::default()
        },
    );
    let mut kinds: Vec<&str> = snap.alerts.iter().map(|a| a.kind).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "ce_without_cnp",
            "congestion",
            "high_latency",
            "non_lossless_class",
            "not_ect"
        ]
    );
    let mut app = App::new("veth0".into(), snap);
    app.update(Action::SelectTab(tab("Alerts")));
    insta::assert_snapshot!(render(&app));
}

#[test]
fn help_overlay() {
    let mut app = App::new("veth0".into(), fixture_snapshot("psn_gap"));
    app.update(Action::ToggleHelp);
    insta::assert_snapshot!(render(&app));
}

/// The end of a capture: the last snapshot stays, the header says the capture ended, and keys
/// still work.
#[test]
fn ended_capture_is_marked_and_keeps_its_state() {
    let snap = fixture_snapshot("psn_gap");
    let mut app = App::new("capture stdin".into(), fixture_snapshot("pfc"));
    app.update(Action::Snapshot(Box::new(snap.clone())));
    assert!(!render(&app).contains("capture ended"));
    app.update(Action::SourceEnded);
    assert!(app.ended);
    assert_eq!(app.snapshot, snap);
    assert!(render_at(&app, 120, 24).contains("capture ended (q to quit)"));
    // At 80 columns the banner is short and the header keeps its counts.
    let narrow = render(&app);
    assert!(narrow.contains("capture ended "), "{narrow}");
    for count in ["flows ", "RoCE ", "PFC "] {
        assert!(
            narrow.lines().next().is_some_and(|l| l.contains(count)),
            "{count}: {narrow}"
        );
    }
    app.update(Action::SelectTab(tab("PFC")));
    assert!(render(&app).contains("capture ended "));
    app.update(Action::Quit);
    assert!(app.quit);
}

/// A snapshot that arrives while paused (e.g. the last one of a capture) is shown on resume.
#[test]
fn resume_shows_what_arrived_while_paused() {
    let first = fixture_snapshot("psn_gap");
    let last = fixture_snapshot("pfc");
    let mut app = App::new("test".into(), first.clone());
    app.update(Action::TogglePause);
    app.update(Action::Snapshot(Box::new(last.clone())));
    assert_eq!(app.snapshot, first);
    app.update(Action::TogglePause);
    assert_eq!(app.snapshot, last);
}

/// `/` filters the flows by address, QP or interface; Enter keeps the filter, Esc clears it;
/// keys typed into the filter are not commands.
#[test]
fn slash_filters_flows() {
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    let key = |c| Action::Key(KeyCode::Char(c), KeyModifiers::NONE);
    let mut app = App::new("test".into(), fixture_snapshot("mixed_demo"));
    let all = app.table.order.len();
    let target = app.snapshot.flows[0].dst_ip.to_string();
    app.update(key('/'));
    assert!(app.typing_filter);
    for c in target.chars() {
        app.update(key(c));
    }
    // 'q' while typing is text, not quit.
    app.update(key('q'));
    assert!(!app.quit);
    assert!(
        app.table.order.is_empty(),
        "no address contains \"{target}q\""
    );
    app.update(Action::Key(KeyCode::Backspace, KeyModifiers::NONE));
    app.update(Action::Key(KeyCode::Enter, KeyModifiers::NONE));
    assert!(!app.typing_filter);
    assert!(!app.table.order.is_empty() && app.table.order.len() < all);
    for i in &app.table.order {
        let f = &app.snapshot.flows[*i];
        assert!(
            f.src_ip.to_string().contains(&target) || f.dst_ip.to_string().contains(&target),
            "{f:?}"
        );
    }
    assert!(render(&app).contains(&format!("matching \"{target}\"")));
    // By QP, as shown in hex.
    app.update(key('/'));
    app.update(Action::Key(KeyCode::Esc, KeyModifiers::NONE));
    assert_eq!(app.table.order.len(), all, "esc clears the filter");
    let qp = crate::format::qp(app.snapshot.flows[2].dst_qp);
    app.update(key('/'));
    for c in qp.chars() {
        app.update(key(c));
    }
    assert!(
        app.table
            .order
            .iter()
            .all(|i| crate::format::qp(app.snapshot.flows[*i].dst_qp) == qp
                || app.snapshot.flows[*i].peer_qp.map(crate::format::qp) == Some(qp.clone())),
    );
    assert!(!app.table.order.is_empty());
}

/// A fixture cut into `parts` report intervals by frame count, as the live loop would see it:
/// a snapshot at the end of each, then a new interval.
fn interval_snapshots(name: &str, parts: usize) -> Vec<crate::report::Snapshot> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(format!("{name}.pcap"));
    let mut resolution = 1;
    let frames = {
        let mut v = Vec::new();
        let end = wire::capture::read_capture(
            std::fs::File::open(&path).expect("fixture"),
            |i| resolution = resolution.max(i.ts_resolution_ns),
            |f| v.push((f.ts_ns, f.data.to_vec(), f.orig_len, f.iface)),
        );
        assert!(end.error.is_none());
        v
    };
    let mut engine = Engine::new(EngineConfig::default());
    engine.set_ts_resolution(resolution);
    let per = frames.len().div_ceil(parts);
    let mut out = Vec::new();
    for chunk in frames.chunks(per) {
        for (ts, data, len, iface) in chunk {
            engine.ingest_frame(*ts, data, *len, *iface);
        }
        let now = chunk.last().map_or(0, |f| f.0);
        out.push(engine.snapshot(now));
        engine.begin_interval(now);
    }
    out
}

/// The history keeps one sample per interval; counters become per-interval increments that
/// add up to the flow's total, and the detail pane draws them as sparklines.
#[test]
fn detail_pane_charts_the_selected_flow_over_intervals() {
    let snaps = interval_snapshots("mixed_demo", 8);
    let mut app = App::new("veth0, veth1".into(), snaps[0].clone());
    for s in &snaps[1..] {
        app.update(Action::Snapshot(Box::new(s.clone())));
    }
    let last = snaps.last().expect("snapshots");
    for f in &last.flows {
        let h = &app.history.flows[&super::history::flow_id(f)];
        assert_eq!(h.rate_bps.len(), snaps.len().min(8));
        assert_eq!(h.ce.last(100).iter().sum::<u64>(), f.ecn_ce, "{f:?}");
        assert_eq!(h.cnp.last(100).iter().sum::<u64>(), f.cnp);
        assert_eq!(h.retransmits.last(100).iter().sum::<u64>(), f.retransmits);
    }
    assert_eq!(app.history.total_bps.len(), snaps.len());
    app.update(Action::ToggleDetail);
    let screen = render_at(&app, 100, 30);
    assert!(screen.contains("rate ") && screen.contains("CE/CNP ") && screen.contains("p99 "));
    insta::assert_snapshot!(screen);
}

#[test]
fn pfc_view_shows_pause_time_per_interval() {
    let snaps = interval_snapshots("pfc", 4);
    let mut app = App::new("veth0".into(), snaps[0].clone());
    for s in &snaps[1..] {
        app.update(Action::Snapshot(Box::new(s.clone())));
    }
    for p in &snaps.last().expect("snapshots").pfc {
        let series = &app.history.pfc_paused_us[&super::history::pfc_id(p)];
        assert!(series.len() <= snaps.len() && !series.is_empty());
    }
    app.update(Action::SelectTab(tab("PFC")));
    insta::assert_snapshot!(render_at(&app, 120, 24));
}

/// `m` merges the observation points of each QP: a capture seen at both ends of a link (every
/// frame on two interfaces) shows the rows and counts of one end, marked with both names.
#[test]
fn merge_key_shows_one_row_per_qp() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/mixed_demo.pcap");
    let mut both = Engine::new(EngineConfig::default());
    both.set_iface_name(0, "veth0");
    both.set_iface_name(1, "veth1");
    let mut last = 0;
    let end = wire::capture::read_capture(
        std::fs::File::open(&path).expect("fixture"),
        |_| {},
        |f| {
            last = f.ts_ns;
            both.ingest_frame(f.ts_ns, f.data, f.orig_len, 0);
            both.ingest_frame(f.ts_ns, f.data, f.orig_len, 1);
        },
    );
    assert!(end.error.is_none());
    let one = fixture_snapshot("mixed_demo");
    let mut app = App::new("veth0, veth1".into(), both.snapshot(last));
    assert_eq!(app.flows().len(), 2 * one.flows.len());
    app.update(Action::Key(
        ratatui::crossterm::event::KeyCode::Char('m'),
        ratatui::crossterm::event::KeyModifiers::NONE,
    ));
    assert!(app.table.merged);
    assert_eq!(app.flows().len(), one.flows.len());
    for (m, f) in app.flows().iter().zip(&one.flows) {
        assert_eq!(
            (m.dst_qp, m.packets, m.psn_gaps, m.cnp),
            (f.dst_qp, f.packets, f.psn_gaps, f.cnp)
        );
        assert_eq!(m.iface, "veth0+veth1");
    }
    assert!(render_at(&app, 120, 30).contains("one row per QP"));
    app.update(Action::ToggleMerge);
    assert_eq!(app.flows().len(), 2 * one.flows.len());
}

/// A merged row has charts too: per interval the largest any of its points saw (the points
/// count the same packets), drawn in the detail pane.
#[test]
fn merged_rows_have_their_history_in_the_detail_pane() {
    // Every flow seen at a second point that saw half its throughput.
    let snaps: Vec<_> = interval_snapshots("mixed_demo", 6)
        .into_iter()
        .map(|mut s| {
            s.flows = s
                .flows
                .iter()
                .flat_map(|f| {
                    let mut other = (**f).clone();
                    other.iface = "veth1".into();
                    other.rate_bps = f.rate_bps / 2.0;
                    [f.clone(), Arc::new(other)]
                })
                .collect();
            s
        })
        .collect();
    let mut app = App::new("veth0, veth1".into(), snaps[0].clone());
    for s in &snaps[1..] {
        app.update(Action::Snapshot(Box::new(s.clone())));
    }
    app.update(Action::ToggleMerge);
    app.update(Action::ToggleDetail);
    let row = app.selected_flow().expect("a row").clone();
    assert!(row.iface.contains('+'), "{row:?}");
    let own = snaps
        .last()
        .expect("snapshots")
        .flows
        .iter()
        .find(|f| (f.src_ip, f.dst_ip, f.dst_qp) == (row.src_ip, row.dst_ip, row.dst_qp))
        .expect("the row's first point")
        .clone();
    let merged = app.history.of(&row, true).expect("a merged history");
    let first = app.history.of(&own, false).expect("the point's history");
    assert_eq!(merged.rate_bps, first.rate_bps);
    assert_eq!(merged.ce, first.ce);
    assert!(app.history.of(&row, false).is_none());
    let screen = render_at(&app, 100, 30);
    assert!(
        screen.contains("rate ") && screen.contains("CE/CNP ") && screen.contains("p99 "),
        "{screen}"
    );
}

/// The NIC view: key RoCE counters first with their meaning, then other counters that changed,
/// then pause counters; rates from a fake sysfs tree read twice.
#[test]
fn nic_view_shows_counter_rates() {
    use crate::source::hw::{DeviceChoice, NicWatch};
    let root = std::env::temp_dir().join(format!("roce-tui-nic-{}", std::process::id()));
    let port = root.join("mlx5_0/ports/1/hw_counters");
    std::fs::create_dir_all(&port).expect("mkdir");
    for (name, v) in [
        ("np_cnp_sent", 10),
        ("out_of_sequence", 2),
        ("rx_write_requests", 5),
    ] {
        std::fs::write(port.join(name), format!("{v}\n")).expect("write");
    }
    let mut watch = NicWatch::start(&root, &DeviceChoice::All, false)
        .expect("ok")
        .expect("a device");
    for (name, v) in [("np_cnp_sent", 40), ("rx_write_requests", 9)] {
        std::fs::write(port.join(name), format!("{v}\n")).expect("write");
    }
    let mut snap = fixture_snapshot("psn_gap");
    snap.nic = watch.sample();
    let _ = std::fs::remove_dir_all(&root);
    let rows = crate::report::nic::nic_rows(&snap);
    let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
    assert_eq!(
        names,
        ["np_cnp_sent", "out_of_sequence", "rx_write_requests"]
    );
    assert_eq!(rows[0].counter.delta, 30);
    let mut app = App::new("capture stdin".into(), snap);
    app.update(Action::SelectTab(tab("NIC")));
    let screen = render_at(&app, 80, 24);
    assert!(screen.contains("CNPs sent"), "{screen}");
    // Rates depend on the wall clock: check the layout, not the numbers.
    assert!(screen.contains("np_cnp_sent") && screen.contains("per s"));
    let mut none = App::new("x".into(), fixture_snapshot("psn_gap"));
    none.update(Action::SelectTab(tab("NIC")));
    insta::assert_snapshot!(render_at(&none, 80, 24));
}

/// QP owners (from RDMA netlink in a live run) label the flows into and out of local QPs: the
/// process column, the detail pane with the NIC's PSNs, and `/` by command.
#[test]
fn qp_owners_label_flows_and_filter_by_process() {
    use crate::report::QpOwner;
    let mut snap = fixture_snapshot("psn_gap");
    let into = snap.flows[0].dst_qp;
    snap.qp_owners = vec![QpOwner {
        device: "rxe0".into(),
        port: Some(1),
        lqpn: into,
        rqpn: Some(0xabcdef),
        sq_psn: Some(7),
        rq_psn: Some(9),
        state: Some("RTS"),
        pid: Some(4242),
        comm: "ib_write_bw".into(),
        gone: false,
    }];
    crate::report::owners::label_flows(&snap.qp_owners, &mut snap.flows);
    let mut app = App::new("capture".into(), snap);
    let screen = render_at(&app, 200, 20);
    assert!(screen.contains("ib_write_bw/4242"), "{screen}");
    app.update(Action::SelectTab(tab("Flows")));
    for c in "/ib_write".chars() {
        app.update(Action::Key(
            ratatui::crossterm::event::KeyCode::Char(c),
            ratatui::crossterm::event::KeyModifiers::NONE,
        ));
    }
    assert_eq!(app.table.order.len(), 1);
    assert_eq!(app.flows()[app.table.order[0]].dst_qp, into);
    app.update(Action::ToggleDetail);
    let screen = render_at(&app, 120, 30);
    assert!(
        screen.contains("owner ib_write_bw/4242 on rxe0/1")
            && screen.contains("NIC SQ PSN 7 RQ PSN 9"),
        "{screen}"
    );
}

/// Synthetic traffic through the engine for the diagnosis views, at three observation points:
/// 20 training steps of 100 ms on leaf1 (four flows communicating 20 ms, QP 0x100 5 ms late
/// with CE marks and CNPs); one flow seen on leaf1 and spine1 with four PSNs lost between them,
/// one on spine1 and leaf2 without loss; a PFC storm that starts on leaf1 and spreads along
/// those flows to spine1 (20 ms later) and leaf2 (45 ms).
fn diagnosis_snapshot() -> crate::report::Snapshot {
    use roce_observer_common::{
        frames::{RoceFrame, pfc_frame},
        opcode::OP_CNP,
    };
    const T0: u64 = 1_700_000_000_000_000_000;
    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;
    let host = |n: u8| [192, 0, 2, n];
    let mut frames: Vec<(u64, u32, Vec<u8>)> = Vec::new();
    let mut psn = [0u32; 4];
    for step in 0..20u64 {
        let start = T0 + step * 100 * MS;
        for f in 0..4u8 {
            let late = if f == 0 { 5 * MS } else { 0 };
            // A fixed per-flow offset, so that the flows do not end in lock step.
            let mut t = start + u64::from(f) * 150 * US;
            while t < start + 20 * MS + late {
                let ce = f == 0 && t > start + 20 * MS;
                let data = RoceFrame {
                    src_ip: host(f + 1),
                    dst_ip: host(f + 2),
                    tos: (26 << 2) | if ce { 3 } else { 2 },
                    payload: 1024,
                    ..RoceFrame::new(0x0a, 0x100 + u32::from(f), psn[f as usize])
                };
                frames.push((t, 1, data.build()));
                if ce && psn[f as usize].is_multiple_of(8) {
                    let cnp = RoceFrame {
                        src_ip: host(f + 2),
                        dst_ip: host(f + 1),
                        tos: 48 << 2,
                        ..RoceFrame::new(OP_CNP, 0x200, 0)
                    };
                    frames.push((t + 5 * US, 1, cnp.build()));
                }
                psn[f as usize] += 1;
                t += 200 * US;
            }
        }
    }
    // Path loss: PSNs 1000..1400 sent past leaf1 (TC egress in a kernel run, interface 1 of a
    // pcapng capture here) and spine1; four never reach spine1.
    let lost = [1010u32, 1200, 1201, 1202];
    for (k, p) in (1000u32..1400).enumerate() {
        let t = T0 + 10 * MS + k as u64 * 50 * US;
        let f = RoceFrame {
            src_ip: host(50),
            dst_ip: host(51),
            tos: (26 << 2) | 2,
            payload: 256,
            ..RoceFrame::new(0x0a, 0x12, p)
        }
        .build();
        frames.push((t, 1, f.clone()));
        if !lost.contains(&p) {
            frames.push((t + 3 * US, 2, f));
        }
    }
    // A flow through spine1 and leaf2: the storm's second hop follows it.
    for k in 0..10u32 {
        let f = RoceFrame {
            src_ip: host(60),
            dst_ip: host(61),
            tos: (26 << 2) | 2,
            ..RoceFrame::new(0x0a, 0x34, k)
        }
        .build();
        let t = T0 + 30 * MS + u64::from(k) * 100 * US;
        frames.push((t, 2, f.clone()));
        frames.push((t + 2 * US, 3, f));
    }
    // The storm: 0xffff quanta refreshed every 300 us.
    for k in 0..1000u64 {
        let t = T0 + 500 * MS + k * 300 * US;
        frames.push((t, 1, pfc_frame(1, 0x08, [0xffff; 8])));
        if t >= T0 + 520 * MS {
            frames.push((t + US, 2, pfc_frame(2, 0x08, [0xffff; 8])));
        }
        if t >= T0 + 545 * MS && k % 2 == 0 {
            frames.push((t + 2 * US, 3, pfc_frame(3, 0x08, [0xffff; 8])));
        }
    }
    frames.sort_by_key(|f| (f.0, f.1));
    let mut engine = Engine::new(EngineConfig {
        storm_window_ns: 100 * MS,
        ..EngineConfig::default()
    });
    for (i, name) in [(1, "leaf1"), (2, "spine1"), (3, "leaf2")] {
        engine.set_iface_name(i, name);
    }
    for (t, iface, f) in &frames {
        engine.ingest_frame(*t, f, f.len() as u32, *iface);
    }
    engine.snapshot(T0 + 2000 * MS)
}

fn diagnosis_app(tab: Tab) -> App {
    let snap = diagnosis_snapshot();
    let mut app = App::new("capture diagnosis.pcapng".into(), snap);
    app.update(Action::SelectTab(tab));
    app
}

#[test]
fn steps_view_80x24() {
    let app = diagnosis_app(tab("Steps"));
    let st = app.snapshot.steps.as_ref().expect("steps detected");
    assert!((st.period_ms - 100.0).abs() < 1.0, "{}", st.period_ms);
    assert_eq!(st.stragglers.first().map(|g| g.dst_qp), Some(0x100));
    let screen = render_at(&app, 80, 24);
    assert!(screen.contains("0x000100"), "{screen}");
    insta::assert_snapshot!(screen);
}

#[test]
fn steps_view_200x50() {
    insta::assert_snapshot!(render_at(&diagnosis_app(tab("Steps")), 200, 50));
}

#[test]
fn paths_view_80x24() {
    let app = diagnosis_app(tab("Paths"));
    let screen = render_at(&app, 80, 24);
    assert!(screen.contains("1010 1200 1201 1202"), "{screen}");
    insta::assert_snapshot!(screen);
}

#[test]
fn paths_view_200x50() {
    insta::assert_snapshot!(render_at(&diagnosis_app(tab("Paths")), 200, 50));
}

#[test]
fn storm_view_80x24() {
    let app = diagnosis_app(tab("Storm"));
    let o = app.snapshot.pfc_origin.as_ref().expect("a storm");
    assert_eq!(o.origin.as_ref().expect("origin").iface, "leaf1");
    assert_eq!((o.reached, o.hops), (2, 2));
    insta::assert_snapshot!(render_at(&app, 80, 24));
}

#[test]
fn storm_view_200x50() {
    insta::assert_snapshot!(render_at(&diagnosis_app(tab("Storm")), 200, 50));
}

/// Three ports (a, b, c) whose flows form a loop pause priority 3 for 1.5 s after the data
/// stopped: a PFC deadlock. The storm view names no origin and the alerts view lists it.
fn deadlock_app(tab: Tab) -> App {
    use roce_observer_common::frames::{RoceFrame, pfc_frame};
    let mut engine = Engine::new(EngineConfig {
        storm_window_ns: 100_000_000,
        ..EngineConfig::default()
    });
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        engine.set_iface_name(i as u32, name);
    }
    let t0 = 1_700_000_000_000_000_000u64;
    for i in 0..250u64 {
        for (f, (from, to)) in [(0, 1), (1, 2), (2, 0)].into_iter().enumerate() {
            let frame = RoceFrame {
                src_ip: [192, 0, 2, f as u8 + 1],
                dst_ip: [192, 0, 2, 100],
                tos: (26 << 2) | 2,
                ..RoceFrame::new(0x0a, 0x20 + f as u32, i as u32)
            }
            .build();
            let t = t0 + i * 200_000 + f as u64 * 50_000;
            engine.ingest_frame(t, &frame, frame.len() as u32, from);
            engine.ingest_frame(t + 20_000, &frame, frame.len() as u32, to);
        }
    }
    let mut quanta = [0u16; 8];
    quanta[3] = 0xffff;
    for k in 0..5000u64 {
        for port in 0..3u32 {
            let f = pfc_frame(port as u8 + 1, 1 << 3, quanta);
            let t = t0 + 60_000_000 + u64::from(port) * 1_000_000 + k * 300_000;
            engine.ingest_frame(t, &f, f.len() as u32, port);
        }
    }
    let snap = engine.snapshot(t0 + 1_600_000_000);
    let mut app = App::new("capture deadlock.pcapng".into(), snap);
    app.update(Action::SelectTab(tab));
    app
}

#[test]
fn storm_view_of_a_deadlock_names_no_origin() {
    let app = deadlock_app(tab("Storm"));
    let o = app.snapshot.pfc_origin.as_ref().expect("a storm");
    assert!(o.deadlock && o.origin.is_none());
    let screen = render_at(&app, 80, 24);
    assert!(screen.contains("no origin"), "{screen}");
    // No member of a cycle is called its root, along the chain either.
    assert!(!screen.contains("root"), "{screen}");
    insta::assert_snapshot!(screen);
    // The deadlock is the last line: reasons are wrapped in their rows, so select it.
    let mut app = deadlock_app(tab("Alerts"));
    app.update(Action::Bottom);
    let alerts = render_at(&app, 80, 24);
    assert!(
        alerts.contains("deadlock") && alerts.contains("a -> b -> c"),
        "{alerts}"
    );
    insta::assert_snapshot!(alerts);
}

/// Without steps, paths or a storm, each view says why it is empty.
#[test]
fn diagnosis_views_without_data_say_why() {
    let mut app = App::new("test".into(), fixture_snapshot("psn_gap"));
    for (tab, needle) in [
        (tab("Steps"), "No training steps"),
        (tab("Paths"), "two observation points"),
        (tab("Storm"), "No PFC storm"),
    ] {
        app.update(Action::SelectTab(tab));
        let screen = render_at(&app, 80, 24);
        assert!(screen.contains(needle), "{screen}");
    }
}

/// A snapshot of `n` flows (one RC WRITE each, a different QP and size per flow, so the order by
/// bytes is known): more than a screen holds.
fn many_flows_snapshot(n: u32) -> crate::report::Snapshot {
    use roce_observer_common::frames::RoceFrame;
    let mut engine = Engine::new(EngineConfig::default());
    let mut t = 1_700_000_000_000_000_000u64;
    for qp in 0..n {
        let frame = RoceFrame {
            payload: 64 + qp as usize,
            ..RoceFrame::new(0x0a, 0x100 + qp, 0)
        }
        .build();
        t += 1_000;
        engine.ingest_frame(t, &frame, frame.len() as u32, 0);
    }
    engine.snapshot(t)
}

#[test]
fn window_scrolls_as_ratatui_does() {
    use super::views::window;
    // From the top until the selection passes the last visible row...
    assert_eq!(window(0, 100, 10), 0..10);
    assert_eq!(window(9, 100, 10), 0..10);
    // ...then with the selection on the last row.
    assert_eq!(window(10, 100, 10), 1..11);
    assert_eq!(window(99, 100, 10), 90..100);
    // Fewer rows than the screen holds, none at all, a zero-height area.
    assert_eq!(window(2, 3, 10), 0..3);
    assert_eq!(window(0, 0, 10), 0..0);
    assert_eq!(window(5, 100, 0), 5..6);
}

/// With more flows than rows on the screen, the table shows exactly the window around the
/// selection, in the sort order, with the selected flow highlighted: only those rows are
/// formatted, so a frame costs the same at 100,000 flows as at 30.
#[test]
fn long_flow_lists_draw_the_rows_around_the_selection() {
    let mut app = App::new("test".into(), many_flows_snapshot(300));
    app.update(Action::CycleSort); // by bytes: the order is known (the biggest first)
    assert_eq!(app.table.order.len(), 300);
    let (width, height) = (160u16, 30u16);
    let qp_of = |app: &App, row: usize| crate::format::qp(app.flows()[app.table.order[row]].dst_qp);
    for target in [0usize, 10, 150, 299] {
        while app.selected < target {
            app.update(Action::Down);
        }
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|f| view::draw(f, &app)).expect("draw");
        let screen = format!("{}", terminal.backend());
        let lines: Vec<&str> = screen.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.contains("source -> destination"))
            .expect("table header");
        let rows: Vec<&str> = lines[header + 1..]
            .iter()
            .copied()
            .take_while(|l| l.contains("192.0.2."))
            .collect();
        assert!(rows.len() >= 5, "a screenful of rows: {screen}");
        // The selected flow is on screen, and the rows are consecutive in the sort order.
        let first = (0..app.table.order.len())
            .find(|r| rows[0].contains(&format!(" {} ", qp_of(&app, *r))))
            .expect("the first row is a flow of the order");
        for (k, row) in rows.iter().enumerate() {
            assert!(
                row.contains(&format!(" {} ", qp_of(&app, first + k))),
                "row {k} after {first}: {row}"
            );
        }
        assert!(
            (first..first + rows.len()).contains(&target),
            "selection {target} on screen (rows {first}..{})",
            first + rows.len()
        );
        // Highlighted: the selected row is drawn reversed.
        let buf = terminal.backend().buffer();
        let y = (header + 1 + target - first) as u16;
        let cell = &buf[(1, y)];
        assert!(
            cell.modifier.contains(ratatui::style::Modifier::REVERSED)
                || cell.bg != ratatui::style::Color::Reset,
            "row {target} highlighted"
        );
    }
}

/// A pair whose path events went over the kernel's per-flow limit shows its missing count as a
/// lower bound ("N+") in the Paths view and says so in the table; a complete pair does not.
#[test]
fn incomplete_path_pairs_are_marked_as_lower_bounds() {
    let mut snap = diagnosis_snapshot();
    let lossy = snap
        .paths
        .iter()
        .position(|p| p.missing > 0)
        .expect("the diagnosis traffic has a lossy pair");
    let missing = snap.paths[lossy].missing;
    let table = crate::sink::table::render(&snap);
    assert!(!table.contains("(at least:"), "{table}");
    let mut app = App::new("test".into(), snap.clone());
    app.update(Action::SelectTab(tab("Paths")));
    assert!(!render_at(&app, 200, 50).contains(&format!("{missing}+")));

    snap.paths[lossy].incomplete = true;
    let table = crate::sink::table::render(&snap);
    assert!(table.contains("(at least:"), "{table}");
    let mut app = App::new("test".into(), snap);
    app.update(Action::SelectTab(tab("Paths")));
    let screen = render_at(&app, 200, 50);
    assert!(screen.contains(&format!("{missing}+ ")), "{screen}");
}

/// Escape sequences in a capture's interface name and a process name are shown escaped in the
/// flows view and the detail pane (ratatui alone would drop the control characters silently,
/// leaving the rest of the sequence as if it were the name).
#[test]
fn escape_sequences_in_names_are_shown_escaped() {
    use crate::sink::table::tests::{HOSTILE_SHOWN, hostile_snapshot};
    let mut app = App::new("capture.pcapng".into(), hostile_snapshot());
    app.update(Action::ToggleDetail);
    let screen = render_at(&app, 200, 50);
    assert!(
        screen.contains(&format!("{HOSTILE_SHOWN}eth0/ca")),
        "{screen}"
    );
    assert!(
        screen.contains(&format!("owner {HOSTILE_SHOWN}job/4242")),
        "{screen}"
    );
    assert!(
        screen.contains(&format!("on {HOSTILE_SHOWN}eth0 capture")),
        "{screen}"
    );
}

/// 300 flows from three hosts, all Not-ECT (an advice alert each), one RC WRITE stream each;
/// every 33rd flow (9 of them) loses one PSN (then sends on past the reorder window, which
/// declares it lost) and carries the fewest bytes, so that an order by bytes would put them
/// last.
fn lossy_among_many() -> (crate::report::Snapshot, Vec<u32>) {
    use roce_observer_common::frames::RoceFrame;
    let mut engine = Engine::new(EngineConfig::default());
    let mut t = 1_700_000_000_000_000_000u64;
    let mut lossy = Vec::new();
    for i in 0..300u32 {
        let qp = 0x1000 + i;
        let loses = i % 33 == 32;
        if loses {
            lossy.push(qp);
        }
        for psn in 0..if loses { 80u32 } else { 12 } {
            if loses && psn == 5 {
                continue;
            }
            let frame = RoceFrame {
                src_ip: [192, 0, 2, 1 + (i % 3) as u8],
                payload: if loses { 64 } else { 1024 },
                ..RoceFrame::new(0x0a, qp, psn)
            }
            .build();
            t += 1_000;
            engine.ingest_frame(t, &frame, frame.len() as u32, 0);
        }
    }
    (engine.snapshot(t), lossy)
}

/// The 9 lossy flows of 300 are on the first screen at 80x24, each marked, and no clean flow
/// is marked although every flow has a not_ect alert.
#[test]
fn lossy_flows_among_300_are_on_the_first_screen() {
    let (snap, lossy) = lossy_among_many();
    assert_eq!(snap.flows.len(), 300);
    assert_eq!(lossy.len(), 9);
    assert!(snap.alerts.iter().filter(|a| a.kind == "not_ect").count() >= 300);
    let app = App::new(
        "/very/long/path/to/captures/of/the/fabric/lossy.pcap".into(),
        snap,
    );
    let screen = render_at(&app, 80, 24);
    let rows: Vec<&str> = screen.lines().collect();
    for qp in &lossy {
        let shown = crate::format::qp(*qp);
        let row = rows
            .iter()
            .find(|r| r.contains(&shown))
            .unwrap_or_else(|| panic!("lossy QP {shown} not on the first screen:\n{screen}"));
        assert!(row.contains('!'), "{row}");
    }
    assert_eq!(
        app.table.problem.iter().filter(|p| **p).count(),
        9,
        "only the lossy flows are marked"
    );
    // The header keeps its counts at 80 columns; the path gives way.
    assert!(
        rows[0].contains("RoCE") && rows[0].contains("PFC"),
        "{}",
        rows[0]
    );
    assert!(
        rows[0].contains("lossy.pcap") && !rows[0].contains("/very/"),
        "{}",
        rows[0]
    );
}

/// The analyze table lists the lossy flows first, and its alerts are grouped by kind: the loss
/// first, not_ect once per host pair (3) rather than once per flow (300).
#[test]
fn table_lists_problems_first_and_groups_advice() {
    let (snap, lossy) = lossy_among_many();
    let text = crate::sink::table::render(&snap);
    for qp in &lossy {
        assert!(
            text.contains(&crate::format::qp(*qp)),
            "{qp:#x} missing:\n{text}"
        );
    }
    let alerts = &text[text.find("alerts:").expect("an alerts section")..];
    let loss = alerts.find("packet_loss").expect("loss listed");
    let advice = alerts.find("not_ect").expect("advice listed");
    assert!(loss < advice, "{alerts}");
    assert!(alerts.contains("not_ect (advice): 300 alerts"), "{alerts}");
    let pairs = alerts[advice..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .filter(|l| l.contains("(100 QPs)"))
        .count();
    assert_eq!(pairs, 3, "{alerts}");
}

/// Every view of the 300-flow capture at the three sizes users run.
#[test]
fn every_view_at_three_sizes() {
    let (snap, _) = lossy_among_many();
    for tab in Tab::all() {
        for (w, h) in [(80u16, 24u16), (120, 40), (200, 50)] {
            let mut app = App::new("lossy.pcap".into(), snap.clone());
            app.update(Action::SelectTab(tab));
            insta::assert_snapshot!(
                format!("many_{}_{w}x{h}", tab.title().to_lowercase()),
                render_at(&app, w, h)
            );
        }
    }
}

#[test]
fn esc_closes_help_then_detail_then_filter_and_never_quits() {
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    let esc = || Action::Key(KeyCode::Esc, KeyModifiers::NONE);
    let mut app = App::new("test".into(), fixture_snapshot("mixed_demo"));
    let all = app.table.order.len();
    app.table.filter = app.snapshot.flows[0].dst_ip.to_string();
    app.update(Action::Redraw);
    app.update(Action::ToggleDetail);
    app.update(Action::ToggleHelp);
    app.update(esc());
    assert!(!app.help && app.detail && !app.table.filter.is_empty());
    app.update(esc());
    assert!(!app.detail && !app.table.filter.is_empty());
    app.update(Action::Key(KeyCode::Char('/'), KeyModifiers::NONE));
    app.update(Action::Key(KeyCode::Enter, KeyModifiers::NONE));
    app.update(esc());
    assert!(app.table.filter.is_empty());
    assert_eq!(app.table.order.len(), all);
    app.update(esc());
    assert!(!app.quit, "Esc never quits");
    app.update(Action::Key(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert!(app.quit, "Ctrl-C quits");
    let mut app = App::new("test".into(), fixture_snapshot("mixed_demo"));
    app.update(Action::Key(KeyCode::Char('q'), KeyModifiers::NONE));
    assert!(app.quit, "q quits");
}

/// A QP is found by the filter as shown (`0x001101`), as hex without padding (`0x1101`,
/// `1101`) and in decimal (`4353`, as JSON and Prometheus write it); nothing found says so.
#[test]
fn filter_matches_every_qp_form_and_says_no_match() {
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    let (snap, _) = lossy_among_many();
    let mut app = App::new("test".into(), snap);
    let find = |app: &mut App, text: &str| {
        app.update(Action::Key(KeyCode::Char('/'), KeyModifiers::NONE));
        app.table.filter.clear();
        for c in text.chars() {
            app.update(Action::Key(KeyCode::Char(c), KeyModifiers::NONE));
        }
        app.update(Action::Key(KeyCode::Enter, KeyModifiers::NONE));
        app.table
            .order
            .iter()
            .map(|i| app.flows()[*i].dst_qp)
            .collect::<Vec<u32>>()
    };
    for form in ["0x001101", "0x1101", "1101", "4353"] {
        assert_eq!(find(&mut app, form), [0x1101], "{form}");
    }
    assert!(find(&mut app, "0x9999").is_empty());
    assert!(render(&app).contains("no match"), "{}", render(&app));
}

/// Sorting by a column: largest first, `S` reverses, the sorted column's title is marked.
#[test]
fn sort_by_column_in_both_directions_marks_the_column() {
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    let mut app = App::new("test".into(), fixture_snapshot("mixed_demo"));
    while app.table.sort != super::flow_table::SortKey::Packets {
        app.update(Action::CycleSort);
    }
    let packets = |app: &App| -> Vec<u64> {
        app.table
            .order
            .iter()
            .map(|i| app.snapshot.flows[*i].packets)
            .collect()
    };
    assert!(
        packets(&app).windows(2).all(|w| w[0] >= w[1]),
        "{:?}",
        packets(&app)
    );
    assert!(render_at(&app, 120, 30).contains("pkts▼"));
    app.update(Action::Key(KeyCode::Char('S'), KeyModifiers::NONE));
    assert!(
        packets(&app).windows(2).all(|w| w[0] <= w[1]),
        "{:?}",
        packets(&app)
    );
    assert!(render_at(&app, 120, 30).contains("pkts▲"));
}

#[test]
fn page_keys_move_by_a_page_and_digits_select_views() {
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    let (snap, _) = lossy_among_many();
    let mut app = App::new("test".into(), snap);
    app.page = 18;
    app.update(Action::Key(KeyCode::PageDown, KeyModifiers::NONE));
    assert_eq!(app.selected, 18);
    app.update(Action::Key(KeyCode::PageUp, KeyModifiers::NONE));
    assert_eq!(app.selected, 0);
    for (i, tab) in Tab::all().iter().enumerate() {
        let digit = super::digit_for_view(i).expect("a digit for each of the first ten views");
        app.update(Action::Key(KeyCode::Char(digit), KeyModifiers::NONE));
        assert_eq!(app.tab, *tab);
    }
    assert_eq!(super::view_for_digit('0'), Some(9), "0 is the tenth view");
    // The help lists every view by its key.
    app.update(Action::ToggleHelp);
    let help = render_at(&app, 120, 40);
    for tab in Tab::all() {
        assert!(help.contains(tab.title()), "{help}");
    }
    assert!(
        help.contains("PgUp/PgDn") && help.contains("Home/g, End/G"),
        "{help}"
    );
}

/// After a capture ends, rates are averages over the flows' active time, labelled, not 0 b/s.
#[test]
fn ended_capture_shows_average_rates_not_zero() {
    let (mut snap, _) = lossy_among_many();
    for f in &mut snap.flows {
        Arc::make_mut(f).rate_bps = 0.0;
    }
    let mut app = App::new("test".into(), snap);
    app.update(Action::SourceEnded);
    let screen = render_at(&app, 200, 50);
    assert!(screen.contains("avg rate"), "{screen}");
    assert!(!screen.contains(" 0 b/s"), "{screen}");
}

/// `w` writes the report on screen as the JSON document to a new file, never over an existing
/// one, and says where.
#[test]
fn write_report_creates_a_new_json_file_each_time() {
    let dir = std::env::temp_dir().join(format!("roce-observer-w-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let snap = fixture_snapshot("psn_gap");
    let first = super::write_report(&snap, &dir).expect("written");
    let second = super::write_report(&snap, &dir).expect("written again");
    assert_ne!(first, second, "an existing report is never overwritten");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&first).expect("read")).expect("JSON");
    assert_eq!(v["summary"]["flows"], snap.summary.flows);
    let mut app = App::new("test".into(), snap);
    app.update(Action::Key(
        ratatui::crossterm::event::KeyCode::Char('w'),
        ratatui::crossterm::event::KeyModifiers::NONE,
    ));
    assert!(app.write_requested, "the run loop is asked to write it");
    app.status = Some(format!("report written to {}", first.display()));
    assert!(render_at(&app, 200, 24).contains("report written to"));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// A capture without RoCE: the empty flow table says what was read and what to try, with the
/// ports the run looked on (the advice `analyze` prints).
#[test]
fn empty_flows_view_advises_on_the_ports_looked_on() {
    let snap = fixture_snapshot_with(
        "mixed_demo",
        EngineConfig {
            roce_port: 4792,
            ..EngineConfig::default()
        },
    );
    assert!(snap.flows.is_empty());
    let mut app = App::new("tests/fixtures/mixed_demo.pcap".into(), snap);
    app.update(Action::SourceEnded);
    let screen = render_at(&app, 80, 24);
    assert!(screen.contains("none RoCEv2 on UDP port 4792"), "{screen}");
    assert!(screen.contains("--roce-port"), "{screen}");
    insta::assert_snapshot!(screen);
    // While the capture is still read, the advice is about what came so far.
    let mut app = App::new(
        "tests/fixtures/mixed_demo.pcap".into(),
        app.snapshot.clone(),
    );
    app.update(Action::Redraw);
    let screen = render_at(&app, 80, 24);
    assert!(screen.contains("So far no RoCE flows"), "{screen}");
    // Before anything was read it says so, not that the capture is empty.
    let mut waiting = fixture_snapshot("mixed_demo");
    waiting.summary.total_packets = 0;
    waiting.summary.roce_packets = 0;
    waiting.flows.clear();
    let screen = render_at(&App::new("stdin".into(), waiting), 80, 24);
    assert!(screen.contains("no frame read so far"), "{screen}");
}

/// A replay of a capture file shows its clock, frames and the share of the file read; a
/// stream shows no share.
#[test]
fn header_shows_the_share_of_a_capture_file_read() {
    let mut snap = fixture_snapshot("psn_gap");
    snap.summary.capture = None;
    snap.summary.capture_read = Some(0.376);
    let screen = render_at(&App::new("big.pcap".into(), snap.clone()), 120, 24);
    assert!(screen.contains("(37% read)"), "{screen}");
    assert!(
        screen.contains(&format!("frames {}", snap.summary.total_packets)),
        "{screen}"
    );
    // A long path gives way to the progress, at 120 columns as at 80.
    let long = "capture /var/tmp/captures/2026-12-04/rack7/leaf3-uplink-mirror-session-2.pcap";
    for width in [80, 120] {
        let screen = render_at(&App::new(long.into(), snap.clone()), width, 24);
        assert!(screen.contains("(37% read)"), "{width}: {screen}");
    }
    snap.summary.capture_read = Some(0.999);
    let screen = render_at(&App::new("big.pcap".into(), snap.clone()), 120, 24);
    assert!(
        screen.contains("(99% read)"),
        "not 100% before the end: {screen}"
    );
    snap.summary.capture_read = None;
    let screen = render_at(&App::new("stdin".into(), snap), 120, 24);
    assert!(!screen.contains("% read"), "{screen}");
}

/// A report without alerts says so in the Alerts view instead of an empty table.
#[test]
fn alerts_view_without_alerts_says_so() {
    let snap = fixture_snapshot("mirrors");
    assert!(snap.alerts.is_empty());
    let mut app = App::new("mirrors.pcap".into(), snap);
    app.update(Action::SelectTab(tab("Alerts")));
    let screen = render_at(&app, 80, 24);
    assert!(screen.contains("No alerts"), "{screen}");
}
