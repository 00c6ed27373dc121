//! `analyze --fail-on EXPR` and `run --fail-on EXPR`: a CI gate over a snapshot (analyze: the
//! final one; run: see [`crate::live::Gate`]). An expression is one metric, one
//! comparison and one number with an optional unit: `psn_gaps>0`, `cnp_rate>1000/s`,
//! `pause_fraction>1%`, `rtt_p99>50us`, `stragglers>0` (docs/analyze.md lists every metric).
//! Parsed by clap (a bad expression is a usage error that lists what is allowed), judged on the
//! snapshot once the report is printed.

use std::fmt;

use crate::engine::snapshot::{FlowSnapshot, RttSummary, Snapshot};

/// What a metric measures, which decides the units it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A plain count or number (no unit).
    Count,
    /// Per second: no unit or `/s`, also `/ms`, `/us`.
    Rate,
    /// Nanoseconds: no unit (ns) or `ns`, `us`, `ms`, `s`.
    Time,
    /// 0..1: no unit, or `%`.
    Fraction,
}

impl Kind {
    fn units(self) -> &'static str {
        match self {
            Kind::Count => "no unit",
            Kind::Rate => "no unit (per second), /s, /ms or /us",
            Kind::Time => "no unit (nanoseconds), ns, us, ms or s",
            Kind::Fraction => "no unit (0 to 1) or %",
        }
    }

    /// The factor that turns a number written with `unit` into the metric's base unit.
    fn scale(self, unit: &str) -> Option<f64> {
        match (self, unit) {
            (_, "") => Some(1.0),
            (Kind::Rate, "/s") => Some(1.0),
            (Kind::Rate, "/ms") => Some(1e3),
            (Kind::Rate, "/us") => Some(1e6),
            (Kind::Time, "ns") => Some(1.0),
            (Kind::Time, "us") => Some(1e3),
            (Kind::Time, "ms") => Some(1e6),
            (Kind::Time, "s") => Some(1e9),
            (Kind::Fraction, "%") => Some(0.01),
            _ => None,
        }
    }
}

/// Sum of a per-flow count over every flow.
fn flow_sum(s: &Snapshot, f: fn(&FlowSnapshot) -> u64) -> f64 {
    s.flows.iter().map(|flow| f(flow)).sum::<u64>() as f64
}

fn xoff_frames(s: &Snapshot) -> f64 {
    s.pfc.iter().map(|p| p.pause_frames).sum::<u64>() as f64
}

/// Lossless-class findings of one kind (points and priorities; a deadlock: cycles).
fn findings(s: &Snapshot, kind: &str) -> f64 {
    s.lossless.iter().filter(|f| f.kind == kind).count() as f64
}

fn rtt(s: &Snapshot, q: fn(&RttSummary) -> Option<u64>) -> Option<f64> {
    q(&s.latency.overall).map(|v| v as f64)
}

/// How a metric's value is read from a snapshot.
#[derive(Clone, Copy)]
enum Value {
    /// Read as is.
    Of(fn(&Snapshot) -> Option<f64>),
    /// A count (a total since the start) per second: its growth since the previous judged
    /// report over the time since then, or over the report's interval for the first.
    PerSecond(fn(&Snapshot) -> f64),
}

/// One metric: its name in expressions, its kind (the units it takes), its value.
struct Metric {
    name: &'static str,
    kind: Kind,
    value: Value,
}

const fn metric(name: &'static str, kind: Kind, value: fn(&Snapshot) -> Option<f64>) -> Metric {
    Metric {
        name,
        kind,
        value: Value::Of(value),
    }
}

const fn rate(name: &'static str, count: fn(&Snapshot) -> f64) -> Metric {
    Metric {
        name,
        kind: Kind::Rate,
        value: Value::PerSecond(count),
    }
}

/// Every metric an expression may name. Keep docs/analyze.md in step (a test checks the names).
const METRICS: &[Metric] = &[
    metric("psn_gaps", Kind::Count, |s| {
        Some(flow_sum(s, |f| f.psn_gaps))
    }),
    metric("psn_missing", Kind::Count, |s| {
        Some(flow_sum(s, |f| f.psn_missing))
    }),
    metric("retransmits", Kind::Count, |s| {
        Some(flow_sum(s, |f| f.retransmits))
    }),
    metric("naks", Kind::Count, |s| {
        Some(flow_sum(s, |f| f.naks.total()))
    }),
    metric("reordered", Kind::Count, |s| {
        Some(flow_sum(s, |f| f.reordered))
    }),
    metric("reorder_naks", Kind::Count, |s| {
        Some(flow_sum(s, |f| f.reorder_naks))
    }),
    metric("cnp", Kind::Count, |s| Some(flow_sum(s, |f| f.cnp))),
    metric("ecn_ce", Kind::Count, |s| Some(flow_sum(s, |f| f.ecn_ce))),
    metric("pause_frames", Kind::Count, |s| Some(xoff_frames(s))),
    rate("psn_gap_rate", |s| flow_sum(s, |f| f.psn_gaps)),
    rate("retransmit_rate", |s| flow_sum(s, |f| f.retransmits)),
    rate("nak_rate", |s| flow_sum(s, |f| f.naks.total())),
    rate("cnp_rate", |s| flow_sum(s, |f| f.cnp)),
    rate("ecn_ce_rate", |s| flow_sum(s, |f| f.ecn_ce)),
    rate("pause_rate", xoff_frames),
    metric("pause_fraction", Kind::Fraction, |s| {
        Some(s.pfc.iter().map(|p| p.paused_fraction).fold(0.0, f64::max))
    }),
    metric("pfc_storms", Kind::Count, |s| {
        Some(s.pfc.iter().map(|p| p.storms).sum::<u64>() as f64)
    }),
    metric("rtt_p50", Kind::Time, |s| rtt(s, |r| r.p50)),
    metric("rtt_p90", Kind::Time, |s| rtt(s, |r| r.p90)),
    metric("rtt_p99", Kind::Time, |s| rtt(s, |r| r.p99)),
    metric("rtt_p999", Kind::Time, |s| rtt(s, |r| r.p999)),
    metric("rtt_max", Kind::Time, |s| rtt(s, |r| r.max)),
    metric("steps", Kind::Count, |s| {
        s.steps.as_ref().map(|st| st.count as f64)
    }),
    metric("step_period", Kind::Time, |s| {
        s.steps.as_ref().map(|st| st.period_ms * 1e6)
    }),
    metric("comm_fraction", Kind::Fraction, |s| {
        s.steps.as_ref().map(|st| st.comm_fraction)
    }),
    metric("stragglers", Kind::Count, |s| {
        s.steps.as_ref().map(|st| st.stragglers.len() as f64)
    }),
    metric("straggler_lag", Kind::Time, |s| {
        s.steps
            .as_ref()
            .and_then(|st| st.stragglers.first())
            .map(|g| g.mean_lag_ms * 1e6)
    }),
    metric("path_missing", Kind::Count, |s| {
        Some(s.paths.iter().map(|p| p.missing).sum::<u64>() as f64)
    }),
    metric("malformed", Kind::Count, |s| {
        Some(s.summary.malformed as f64)
    }),
    metric("flows", Kind::Count, |s| Some(s.summary.flows as f64)),
    metric("alerts", Kind::Count, |s| Some(s.alerts.len() as f64)),
    metric("pfc_before_ecn", Kind::Count, |s| {
        Some(findings(s, "pfc_before_ecn"))
    }),
    metric("ecn_at_low_load", Kind::Count, |s| {
        Some(findings(s, "ecn_at_low_load"))
    }),
    metric("deadlock", Kind::Count, |s| Some(findings(s, "deadlock"))),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

impl Op {
    /// Longest first, so that `>=` is not read as `>` followed by `=1`.
    const ALL: [(&'static str, Op); 6] = [
        (">=", Op::Ge),
        ("<=", Op::Le),
        ("==", Op::Eq),
        ("!=", Op::Ne),
        (">", Op::Gt),
        ("<", Op::Lt),
    ];

    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Eq => a == b,
            Op::Ne => a != b,
        }
    }
}

/// One parsed `--fail-on` expression.
#[derive(Clone, Debug, PartialEq)]
pub struct FailOn {
    /// As written (trimmed), for the reason line.
    text: String,
    metric: usize,
    op: Op,
    /// The threshold in the metric's base unit.
    threshold: f64,
}

/// Why an expression was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FailOnError {
    #[error(
        "`{0}` has no comparison: write METRIC OP NUMBER[UNIT] with OP one of > >= < <= == != (e.g. psn_gaps>0)"
    )]
    NoOperator(String),
    #[error("unknown metric `{name}`: use one of {}", metric_names())]
    UnknownMetric { name: String },
    #[error("`{0}` is not a number followed by an optional unit (e.g. 0, 1000/s, 50us, 1%)")]
    BadNumber(String),
    #[error(
        "`{0}` holds more than one comparison: give one --fail-on per condition (repeat the flag; the command fails when any of them holds)"
    )]
    Combined(String),
    #[error("`{metric}` does not take the unit `{unit}`: use {allowed}")]
    BadUnit {
        metric: &'static str,
        unit: String,
        allowed: &'static str,
    },
}

fn metric_names() -> String {
    METRICS
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl std::str::FromStr for FailOn {
    type Err = FailOnError;

    fn from_str(s: &str) -> Result<FailOn, FailOnError> {
        let text: String = s.split_whitespace().collect();
        let (at, sym, op) = Op::ALL
            .iter()
            .filter_map(|(sym, op)| text.find(sym).map(|at| (at, *sym, *op)))
            // The leftmost operator; at one position the longer one (listed first) wins.
            .min_by_key(|(at, _, _)| *at)
            .ok_or_else(|| FailOnError::NoOperator(s.trim().to_string()))?;
        let name = &text[..at];
        let rhs = &text[at + sym.len()..];
        let metric = METRICS.iter().position(|m| m.name == name).ok_or_else(|| {
            FailOnError::UnknownMetric {
                name: name.to_string(),
            }
        })?;
        let split = rhs
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-'))
            .unwrap_or(rhs.len());
        // `1e3us`: the exponent stays with the number; an `e` that starts a unit does not exist.
        let (number, unit) = rhs.split_at(split);
        // `a>0 || b>0`, `a>0,b>0`, `a>0 and b>0`: the language has no boolean operators.
        if unit.contains(|c: char| "|&<>=!,;()".contains(c)) {
            return Err(FailOnError::Combined(s.trim().to_string()));
        }
        let value: f64 = number
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| FailOnError::BadNumber(rhs.to_string()))?;
        let m = &METRICS[metric];
        let scale = m.kind.scale(unit).ok_or_else(|| FailOnError::BadUnit {
            metric: m.name,
            unit: unit.to_string(),
            allowed: m.kind.units(),
        })?;
        Ok(FailOn {
            text,
            metric,
            op,
            threshold: value * scale,
        })
    }
}

/// For clap: `--fail-on` values are parsed (and refused) with the other arguments.
pub fn parse(s: &str) -> Result<FailOn, String> {
    s.parse().map_err(|e: FailOnError| e.to_string())
}

/// A condition that held, with the value that made it hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Triggered {
    pub expr: String,
    pub metric: &'static str,
    pub value: f64,
}

impl fmt::Display for Triggered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} = {})", self.expr, self.metric, self.value)
    }
}

/// A report's end and the counts of the rate metrics of each expression then.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    end_ts: u64,
    counts: Vec<f64>,
}

impl FailOn {
    /// The metric's value on `snap`; for a rate, over the time since `since` (the end of an
    /// earlier report and the count then), else over the report's interval.
    fn value(&self, snap: &Snapshot, since: Option<(u64, f64)>) -> Option<f64> {
        match METRICS[self.metric].value {
            Value::Of(f) => f(snap),
            Value::PerSecond(count) => {
                let n = count(snap);
                let (dt_ns, grown) = match since {
                    Some((t0, n0)) => (
                        snap.summary.interval_end_ts.saturating_sub(t0),
                        // A flow table that dropped flows can shrink a total: no negative rate.
                        (n - n0).max(0.0),
                    ),
                    None => ((snap.summary.interval_s * 1e9) as u64, n),
                };
                (dt_ns > 0).then(|| grown / (dt_ns as f64 / 1e9))
            }
        }
    }

    /// The count a rate metric grows from (0 for other metrics).
    fn count(&self, snap: &Snapshot) -> f64 {
        match METRICS[self.metric].value {
            Value::Of(_) => 0.0,
            Value::PerSecond(count) => count(snap),
        }
    }

    fn check_since(&self, snap: &Snapshot, since: Option<(u64, f64)>) -> Option<Triggered> {
        let value = self.value(snap, since)?;
        self.op.holds(value, self.threshold).then(|| Triggered {
            expr: self.text.clone(),
            metric: METRICS[self.metric].name,
            value,
        })
    }

    /// The condition on `snap` alone (rates over its interval); a metric without a value (no
    /// latency samples, no steps, an empty interval for a rate) never holds.
    pub fn check(&self, snap: &Snapshot) -> Option<Triggered> {
        self.check_since(snap, None)
    }
}

/// Judges the expressions on the successive reports of one command. Counts in a report are
/// totals since the start, so a rate is the growth of its count since the latest earlier report
/// seen (judged, or only [noted](Judge::note)) over the time since then; with no earlier report,
/// the count over the report's interval (for `analyze` without `--report-every`, the capture).
#[derive(Clone, Debug, Default)]
pub struct Judge {
    exprs: Vec<FailOn>,
    /// The latest report seen, and the latest one that ended before it (a final report can end
    /// where the last interval report did: its rates then go back to the one before).
    latest: Option<Seen>,
    before: Option<Seen>,
}

impl Judge {
    pub fn new(exprs: Vec<FailOn>) -> Judge {
        Judge {
            exprs,
            ..Judge::default()
        }
    }

    /// Remember `snap` as the base of later rates, without judging it.
    pub fn note(&mut self, snap: &Snapshot) {
        let seen = Seen {
            end_ts: snap.summary.interval_end_ts,
            counts: self.exprs.iter().map(|e| e.count(snap)).collect(),
        };
        match &self.latest {
            Some(l) if l.end_ts >= seen.end_ts => self.latest = Some(seen),
            _ => self.before = self.latest.replace(seen),
        }
    }

    /// Judge every expression on `snap` (and note it); an error listing those that held, if any.
    pub fn judge(&mut self, snap: &Snapshot) -> Result<(), GateFailed> {
        let end = snap.summary.interval_end_ts;
        let base = [&self.latest, &self.before]
            .into_iter()
            .flatten()
            .find(|s| s.end_ts < end)
            .cloned();
        let held: Vec<Triggered> = self
            .exprs
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let since = base.as_ref().map(|b| (b.end_ts, b.counts[i]));
                e.check_since(snap, since)
            })
            .collect();
        self.note(snap);
        if held.is_empty() {
            Ok(())
        } else {
            Err(GateFailed(held))
        }
    }
}

/// The gate tripped: every condition that held, on one line.
#[derive(Debug, thiserror::Error)]
#[error("--fail-on: {}", .0.iter().map(|t| t.to_string()).collect::<Vec<_>>().join("; "))]
pub struct GateFailed(pub Vec<Triggered>);

/// Exit status of a tripped gate (1 stays for errors such as an unreadable capture).
pub const EXIT_GATE: u8 = 3;

/// Metric names, for the docs test.
#[cfg(test)]
pub(crate) fn names() -> impl Iterator<Item = &'static str> {
    METRICS.iter().map(|m| m.name)
}

#[cfg(test)]
mod tests;
