//! `analyze --since/--until`: a point in capture time, given as seconds from the capture's
//! first frame (`10`, `2.5`, `90s`) or as an absolute RFC 3339 time
//! (`2026-12-02T13:05:00Z`, `2026-12-02T14:05:00.250+01:00`), and the window two of them make.
//!
//! The window is half-open: a frame at `--since` is in it, a frame at `--until` is not, so
//! `--since 0 --until 10` and `--since 10 --until 20` split a capture without overlap.

/// A point in capture time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureTime {
    /// Nanoseconds after the capture's first frame.
    FromStart(u64),
    /// Nanoseconds since the Unix epoch (capture timestamps are UTC).
    Absolute(u64),
}

impl CaptureTime {
    /// The time in ns since the epoch, for a capture whose first frame is at `start_ns`.
    pub fn resolve(self, start_ns: u64) -> u64 {
        match self {
            CaptureTime::FromStart(ns) => start_ns.saturating_add(ns),
            CaptureTime::Absolute(ns) => ns,
        }
    }
}

/// The value parser of `--since` and `--until`.
pub fn parse(s: &str) -> Result<CaptureTime, String> {
    let t = s.trim();
    let secs = t.strip_suffix('s').unwrap_or(t);
    if let Ok(v) = secs.parse::<f64>() {
        return match v {
            v if (0.0..1e10).contains(&v) => Ok(CaptureTime::FromStart((v * 1e9).round() as u64)),
            _ => Err(format!(
                "`{s}` is not a capture time: seconds from the first frame must be 0 or more"
            )),
        };
    }
    rfc3339(t).map(CaptureTime::Absolute).ok_or_else(|| {
        format!(
            "`{s}` is not a capture time: give seconds from the capture's first frame (`10`, \
             `2.5`) or an RFC 3339 time (`2026-12-02T13:05:00Z`, `2026-12-02T14:05:00.25+01:00`)"
        )
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)` as ns since the epoch (`t`, `z` and a
/// space for `T` are accepted, as RFC 3339 allows). Times before 1970 are not capture times.
fn rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = s.get(19..)?;
    let mut frac_ns: i64 = 0;
    if let Some(after_dot) = rest.strip_prefix('.') {
        let digits = after_dot.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        // Nanoseconds: the first nine digits count, further ones are below the resolution.
        let kept = &after_dot[..digits.min(9)];
        frac_ns = kept.parse::<i64>().ok()? * 10_i64.pow(9 - kept.len() as u32);
        rest = &after_dot[digits..];
    }
    let offset_s = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digit = |c: &u8| c.is_ascii_digit().then(|| i64::from(c - b'0'));
            let h = digit(h1)? * 10 + digit(h2)?;
            let m = digit(m1)? * 10 + digit(m2)?;
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            if *sign == b'+' { off } else { -off }
        }
        _ => return None,
    };
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return None,
    };
    // A leap second (:60) is the last second of its minute.
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second.min(59)
            - offset_s;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(frac_ns).ok()?)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_from_the_first_frame() {
        assert_eq!(parse("0"), Ok(CaptureTime::FromStart(0)));
        assert_eq!(parse("2.5"), Ok(CaptureTime::FromStart(2_500_000_000)));
        assert_eq!(parse("90s"), Ok(CaptureTime::FromStart(90_000_000_000)));
        assert_eq!(parse("0.000001"), Ok(CaptureTime::FromStart(1_000)));
        for bad in ["-1", "NaN", "inf", "1e30", "soon", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(CaptureTime::FromStart(5).resolve(100), 105);
        assert_eq!(CaptureTime::Absolute(5).resolve(100), 5);
    }

    #[test]
    fn absolute_rfc3339_times() {
        // 1700000000 s is 2023-11-14T22:13:20Z (`date -u -d @1700000000`).
        let at = |s| match parse(s) {
            Ok(CaptureTime::Absolute(ns)) => ns,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(at("2023-11-14T22:13:20Z"), 1_700_000_000_000_000_000);
        assert_eq!(at("2023-11-14t22:13:20z"), 1_700_000_000_000_000_000);
        assert_eq!(at("2023-11-14 22:13:20Z"), 1_700_000_000_000_000_000);
        assert_eq!(
            at("2023-11-14T23:13:20.25+01:00"),
            1_700_000_000_250_000_000
        );
        assert_eq!(
            at("2023-11-14T20:13:20.000000001-02:00"),
            1_700_000_000_000_000_001
        );
        // Digits below a nanosecond are dropped, not rounded into the next one.
        assert_eq!(
            at("2023-11-14T22:13:20.9999999999Z"),
            1_700_000_000_999_999_999
        );
        assert_eq!(at("1970-01-01T00:00:00Z"), 0);
        assert_eq!(at("2000-02-29T23:59:59Z"), 951_868_799_000_000_000);
        for bad in [
            "2023-11-14T22:13:20",       // no offset: local time is not a capture time
            "2023-11-14T22:13Z",         // no seconds
            "2023-02-29T00:00:00Z",      // not a leap year
            "2023-13-01T00:00:00Z",      // month 13
            "2023-11-14T24:00:00Z",      // hour 24
            "2023-11-14T22:13:20.Z",     // a dot without digits
            "2023-11-14T22:13:20+0100",  // offset without a colon
            "1969-12-31T23:59:59Z",      // before the epoch
            "2023-11-14T22:13:20Z junk", // trailing text
            "２023-11-14T22:13:20Z",     // not ASCII digits
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
