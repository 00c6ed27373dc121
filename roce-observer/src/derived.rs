//! Figures the renderers derive from the report for display (the table and the TUI show them
//! the same way): a flow's rate over its active time, and the timestamp resolution latencies
//! were measured with. Reads the report only.

use crate::engine::snapshot::{FlowSnapshot, Snapshot};

/// Bits per second over the flow's active time (first to last packet), `None` for a flow seen
/// at one instant. A flow active for 0.5 ms of a 10 s capture reads its own rate, not the
/// capture span's average.
pub fn active_bps(f: &FlowSnapshot) -> Option<f64> {
    let span = f.last_ts.checked_sub(f.first_ts).filter(|s| *s > 0)?;
    Some(f.bytes as f64 * 8.0 * 1e9 / span as f64)
}

/// All flows' bits per second over the time RoCE was seen (first packet of any flow to the
/// last): what a finished capture's header shows instead of its empty last interval.
pub fn total_active_bps(s: &Snapshot) -> f64 {
    let first = s.flows.iter().map(|f| f.first_ts).min();
    let last = s.flows.iter().map(|f| f.last_ts).max();
    match (first, last) {
        (Some(a), Some(b)) if b > a => {
            s.flows.iter().map(|f| f.bytes).sum::<u64>() as f64 * 8.0 * 1e9 / (b - a) as f64
        }
        _ => 0.0,
    }
}

/// The coarsest power of ten (in ns, up to 1 s) that divides every flow's first and last
/// timestamp: 1000 for a microsecond pcap, 1 for nanosecond timestamps. A latency below it
/// was not measurable (`format::latency` prints `< 1 us`). 1 without flows.
pub fn timestamp_resolution_ns(s: &Snapshot) -> u64 {
    let mut res = 1_000_000_000u64;
    let mut any = false;
    for f in &s.flows {
        for ts in [f.first_ts, f.last_ts] {
            any = true;
            while res > 1 && ts % res != 0 {
                res /= 10;
            }
        }
        if res == 1 {
            break;
        }
    }
    if any { res } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_rate_is_over_the_flows_own_time() {
        let snap = crate::sink::metrics::tests::fixture_snapshot(&["psn_gap"]);
        let f = snap
            .flows
            .iter()
            .find(|f| f.last_ts > f.first_ts)
            .expect("a flow with a span");
        let bps = active_bps(f).expect("a span");
        let expected = f.bytes as f64 * 8.0 / ((f.last_ts - f.first_ts) as f64 / 1e9);
        assert!(
            (bps - expected).abs() < 1e-6 * expected,
            "{bps} vs {expected}"
        );
        let mut one = FlowSnapshot::clone(f);
        one.last_ts = one.first_ts;
        assert_eq!(active_bps(&one), None, "a single instant has no rate");
    }

    #[test]
    fn resolution_is_the_coarsest_power_of_ten_dividing_every_timestamp() {
        let mut snap = crate::sink::metrics::tests::fixture_snapshot(&["psn_gap"]);
        let f = std::sync::Arc::make_mut(&mut snap.flows[0]);
        f.first_ts = 1_700_000_000_123_456_000;
        f.last_ts = 1_700_000_000_123_457_000;
        snap.flows.truncate(1);
        assert_eq!(timestamp_resolution_ns(&snap), 1000);
        std::sync::Arc::make_mut(&mut snap.flows[0]).last_ts += 1;
        assert_eq!(timestamp_resolution_ns(&snap), 1);
        snap.flows.clear();
        assert_eq!(timestamp_resolution_ns(&snap), 1);
    }
}
