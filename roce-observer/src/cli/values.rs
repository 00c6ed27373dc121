//! Value parsers for numbers the command line takes. A bad value is refused while the command
//! line is parsed, so it is a clap usage error: one message naming the option, exit status 2
//! (what the systemd unit's `RestartPreventExitStatus=2` relies on), the same message for
//! `--interval -1` and `--interval=-1` (the options that take these parsers accept a leading
//! `-` as a value, so that the parser, not the option splitter, judges it).

use std::time::Duration;

/// Seconds, more than zero: `1`, `0.5`, `2.5` (`--interval`, `--report-every`).
pub fn positive_seconds(s: &str) -> Result<Duration, String> {
    match number(s) {
        Some(v) if v > 0.0 => Duration::try_from_secs_f64(v)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("`{s}` is too small or too large a number of seconds")),
        _ => Err(format!(
            "`{s}` is not a positive number of seconds (e.g. 1 or 0.5)"
        )),
    }
}

/// Seconds, zero or more (`--duration`; 0 means one report).
pub fn seconds(s: &str) -> Result<Duration, String> {
    match number(s) {
        Some(v) if v >= 0.0 => Duration::try_from_secs_f64(v)
            .map_err(|_| format!("`{s}` is too large a number of seconds")),
        _ => Err(format!(
            "`{s}` is not a number of seconds, 0 or more (e.g. 60 or 0.5)"
        )),
    }
}

/// A link speed in Gb/s, more than zero (`--link-speed`).
pub fn gbps(s: &str) -> Result<f64, String> {
    match number(s) {
        Some(v) if v > 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a link speed: give a positive number of Gb/s (e.g. 100 or 25)"
        )),
    }
}

/// A percentage from 0 to 100 (`--storm-threshold`).
pub fn percent(s: &str) -> Result<f64, String> {
    match number(s.trim_end_matches('%')) {
        Some(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a percentage from 0 to 100")),
    }
}

/// A finite number (`NaN` and `inf` are not values anybody means).
fn number(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_forms() {
        assert_eq!(positive_seconds("1"), Ok(Duration::from_secs(1)));
        assert_eq!(positive_seconds("0.5"), Ok(Duration::from_millis(500)));
        for bad in ["0", "-1", "NaN", "inf", "1e-12", "soon", ""] {
            assert!(positive_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        assert_eq!(seconds("60"), Ok(Duration::from_secs(60)));
        for bad in ["-5", "-0.1", "NaN", "1e30"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn speeds_and_percentages() {
        assert_eq!(gbps("25"), Ok(25.0));
        for bad in ["0", "-100", "NaN", "fast"] {
            assert!(gbps(bad).is_err(), "{bad}");
        }
        assert_eq!(percent("50"), Ok(50.0));
        assert_eq!(percent("5%"), Ok(5.0));
        assert_eq!(percent("0"), Ok(0.0));
        for bad in ["150", "-1", "NaN"] {
            assert!(percent(bad).is_err(), "{bad}");
        }
    }
}
