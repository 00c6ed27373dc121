//! Figures the renderers derive from the report for display (the table and the TUI show them
//! the same way): a flow's rate over its active time. Reads the report only.

use crate::report::{FlowSnapshot, Snapshot};

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
}
