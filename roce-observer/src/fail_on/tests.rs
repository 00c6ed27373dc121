use roce_observer_common::{frames::RoceFrame, opcode::OP_CNP};

use super::*;
use crate::engine::{Engine, EngineConfig};

const T0: u64 = 1_700_000_000_000_000_000;

/// A CNP from 192.0.2.2 to QP 0x11 of 192.0.2.1 at `t`.
fn cnp(e: &mut Engine, t: u64) {
    let f = RoceFrame {
        src_ip: [192, 0, 2, 2],
        dst_ip: [192, 0, 2, 1],
        tos: 48 << 2,
        ..RoceFrame::new(OP_CNP, 0x11, 0)
    }
    .build();
    e.ingest_frame(t, &f, f.len() as u32, 0);
}

/// One second of capture: SENDs with PSNs 1, 2, 5..=70 (3 and 4 skipped, declared lost once
/// the flow is past the reorder window: one loss event, two PSNs), 1 again (a
/// retransmission), 72 then 71 (one reordered) and two CNPs back.
fn snapshot() -> Snapshot {
    let mut e = Engine::new(EngineConfig::default());
    let sends: Vec<u32> = [1u32, 2]
        .into_iter()
        .chain(5..=70)
        .chain([1, 72, 71])
        .collect();
    for (i, psn) in sends.iter().enumerate() {
        let f = RoceFrame {
            tos: (26 << 2) | 2,
            ..RoceFrame::new(0x04, 0x12, *psn)
        }
        .build();
        e.ingest_frame(T0 + i as u64 * 1000, &f, f.len() as u32, 0);
    }
    for i in 0..2u64 {
        cnp(&mut e, T0 + 500_000_000 + i);
    }
    e.snapshot(T0 + 1_000_000_000)
}

fn holds(expr: &str, snap: &Snapshot) -> bool {
    let f: FailOn = expr.parse().expect(expr);
    f.check(snap).is_some()
}

#[test]
fn counts_rates_and_comparisons() {
    let s = snapshot();
    for (expr, want) in [
        ("psn_gaps>0", true),
        ("psn_gaps > 1", false),
        ("psn_gaps>=1", true),
        ("psn_gaps==1", true),
        ("psn_gaps!=1", false),
        ("psn_missing==2", true),
        ("retransmits<1", false),
        ("retransmits==1", true),
        ("reordered==1", true),
        ("reorder_naks>0", false),
        ("cnp==2", true),
        // 2 CNPs over 1 s of capture.
        ("cnp_rate>1/s", true),
        ("cnp_rate>2/s", false),
        ("cnp_rate>=2", true),
        ("cnp_rate>0.001/ms", true),
        ("cnp_rate>0.002/ms", false),
        ("pause_fraction>0", false),
        ("pause_fraction>=0%", true),
        ("flows==2", true),
    ] {
        assert_eq!(holds(expr, &s), want, "{expr}");
    }
}

#[test]
fn a_metric_without_a_value_never_holds() {
    let s = snapshot();
    assert_eq!(s.latency.overall.count, 0);
    assert!(!holds("rtt_p99>0", &s));
    assert!(!holds("rtt_p99<1s", &s));
    let empty = Engine::new(EngineConfig::default()).snapshot(0);
    assert!(!holds("cnp_rate>=0", &empty), "no interval, no rate");
    assert!(holds("cnp>=0", &empty));
}

#[test]
fn units_scale_to_the_base_unit() {
    for (expr, threshold) in [
        ("rtt_p99>50us", 50_000.0),
        ("rtt_p99>50", 50.0),
        ("rtt_p99>1.5ms", 1_500_000.0),
        ("rtt_max<=2s", 2e9),
        ("pause_fraction>1%", 0.01),
        ("pause_fraction>0.01", 0.01),
        ("cnp_rate>1e3/s", 1000.0),
        ("cnp_rate>2/us", 2e6),
    ] {
        let f: FailOn = expr.parse().expect(expr);
        assert!(
            (f.threshold - threshold).abs() < 1e-9,
            "{expr}: {}",
            f.threshold
        );
    }
}

#[test]
fn bad_expressions_say_what_is_allowed() {
    for (expr, needle) in [
        ("psn_gaps", "no comparison"),
        ("psn_gaps=0", "no comparison"),
        ("psngaps>0", "use one of psn_gaps"),
        (">0", "unknown metric ``"),
        ("psn_gaps>", "not a number"),
        ("psn_gaps>lots", "not a number"),
        ("psn_gaps>1us", "does not take the unit `us`: use no unit"),
        ("rtt_p99>50/s", "ns, us, ms or s"),
        ("cnp_rate>5%", "/s, /ms or /us"),
        ("pause_fraction>1ms", "or %"),
        ("psn_gaps>0 || naks>0", "one --fail-on per condition"),
        ("psn_gaps>0 and naks>=1", "one --fail-on per condition"),
        ("psn_gaps>0,naks>0", "one --fail-on per condition"),
    ] {
        let err = parse(expr).expect_err(expr);
        assert!(err.contains(needle), "{expr}: {err}");
    }
}

#[test]
fn the_reason_is_one_line_naming_each_condition_and_value() {
    let s = snapshot();
    let exprs: Vec<FailOn> = ["psn_gaps > 0", "cnp_rate>1/s", "retransmits>5"]
        .iter()
        .map(|e| e.parse().expect(e))
        .collect();
    let err = Judge::new(exprs.clone())
        .judge(&s)
        .expect_err("two conditions hold");
    let line = err.to_string();
    assert_eq!(
        line,
        "--fail-on: psn_gaps>0 (psn_gaps = 1); cnp_rate>1/s (cnp_rate = 2)"
    );
    assert!(Judge::new(exprs[2..].to_vec()).judge(&s).is_ok());
}

#[test]
fn every_metric_is_documented() {
    let doc = include_str!("../../../docs/analyze.md");
    for name in names() {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/analyze.md lacks `{name}`"
        );
    }
}

/// Counts in successive reports are totals: a rate is the growth since the previous report over
/// the time since then, and a report that ends where the previous one did goes back one more.
#[test]
fn rates_over_successive_reports_cover_the_time_since_the_previous_one() {
    let mut e = Engine::new(EngineConfig::default());
    const SEC: u64 = 1_000_000_000;
    // 10 CNPs in the first second, 2 in the next two.
    for i in 0..10 {
        cnp(&mut e, T0 + i * 1000);
    }
    cnp(&mut e, T0 + SEC + 5);
    cnp(&mut e, T0 + 2 * SEC + 5);
    let mut judge = Judge::new(vec!["cnp_rate>1/s".parse().expect("expr")]);
    // The first report, from an engine that saw only the first second.
    let first = {
        let mut e1 = Engine::new(EngineConfig::default());
        for i in 0..10 {
            cnp(&mut e1, T0 + i * 1000);
        }
        e1.snapshot(T0 + SEC)
    };
    let err = judge
        .judge(&first)
        .expect_err("10 CNPs in the first second");
    assert_eq!(err.0[0].value, 10.0, "over the first report's interval");
    let last = e.snapshot(T0 + 3 * SEC);
    assert_eq!(last.flows.iter().map(|f| f.cnp).sum::<u64>(), 12);
    // 2 more CNPs over the 2 s since the first report: 1/s, which does not exceed 1/s.
    assert!(judge.judge(&last).is_ok());
    // The same end again (a final report after the last interval report): still 1/s.
    assert!(judge.judge(&last).is_ok());
    let mut strict = Judge::new(vec!["cnp_rate>=1/s".parse().expect("expr")]);
    strict.note(&first);
    let held = strict.judge(&last).expect_err("1/s >= 1/s");
    assert_eq!(held.0[0].value, 1.0);
    let held = strict.judge(&last).expect_err("the same report again");
    assert_eq!(held.0[0].value, 1.0);
}
