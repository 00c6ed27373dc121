//! Human formatting of numbers, rates, durations, sizes and identifiers, shared by the table
//! (crate::sink::table) and the terminal UI so that both print the same value the same way.
//!
//! The convention: a space between value and unit; at most four significant characters before
//! the unit (exact below 10,000; one decimal after scaling); SI prefixes for counts and rates,
//! IEC (KiB, MiB) for byte sizes; microseconds written `us`.

/// `v` divided by the largest of `scales` (smallest first) it reaches, with one decimal and that
/// scale's unit; the last scale takes whatever is left. Values that would round up to 1000.0
/// move to the next unit ("1.0 M", never "1000.0 k").
fn scaled(v: f64, scales: &[(f64, &str)], sep: &str) -> Option<String> {
    let mut pick = None;
    for &(scale, unit) in scales {
        if v >= scale * 0.99995 {
            pick = Some((scale, unit));
        }
    }
    pick.map(|(scale, unit)| format!("{:.1}{sep}{unit}", v / scale))
}

/// 12.3 Gb/s, 850.0 Mb/s, 12.0 kb/s, 0 b/s.
pub fn rate(bps: f64) -> String {
    let units = [(1e3, "kb/s"), (1e6, "Mb/s"), (1e9, "Gb/s"), (1e12, "Tb/s")];
    scaled(bps, &units, " ").unwrap_or_else(|| format!("{bps:.0} b/s"))
}

/// 1234 -> 1234, 12345 -> 12.3k, 12_345_678 -> 12.3M, 12_345_678_901 -> 12.3G.
pub fn count(n: u64) -> String {
    if n < 10_000 {
        return n.to_string();
    }
    let units = [(1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")];
    scaled(n as f64, &units, "").unwrap_or_else(|| n.to_string())
}

/// 512 B, 2.0 KiB, 1.5 MiB ... TiB.
pub fn bytes(n: u64) -> String {
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

/// 850 ns, 12.3 us, 4.1 ms, 1.20 s; "-" without a value.
pub fn ns(v: Option<u64>) -> String {
    let Some(v) = v else {
        return "-".into();
    };
    let v = v as f64;
    if v >= 1e9 * 0.99995 {
        format!("{:.2} s", v / 1e9)
    } else {
        scaled(v, &[(1e3, "us"), (1e6, "ms")], " ").unwrap_or_else(|| format!("{v:.0} ns"))
    }
}

/// A duration given in (fractional) microseconds, as [`ns`] prints it.
pub fn us(v: f64) -> String {
    ns(Some((v.max(0.0) * 1e3).round() as u64))
}

/// `1 QP`, `2 QPs`, `0 QPs`: a count with its noun in the right number.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A latency measured with timestamps of `resolution_ns` (a microsecond pcap: 1000): values
/// below the resolution print `< 1 us` instead of a false `0 ns`; others as [`ns`].
pub fn latency(v: Option<u64>, resolution_ns: u64) -> String {
    match v {
        Some(v) if resolution_ns > 1 && v < resolution_ns => {
            // A resolution is a power of ten: written whole (`1 us`, `10 us`, `1 ms`).
            let (scale, unit) = match resolution_ns {
                0..1_000 => (1, "ns"),
                1_000..1_000_000 => (1_000, "us"),
                1_000_000..1_000_000_000 => (1_000_000, "ms"),
                _ => (1_000_000_000, "s"),
            };
            format!("< {} {unit}", resolution_ns / scale)
        }
        _ => ns(v),
    }
}

/// QPs are shown in hex, six digits (24 bits), as RDMA tools print them.
pub fn qp(q: u32) -> String {
    format!("0x{q:06x}")
}

/// A timestamp (ns since the epoch) as the UTC time of day with milliseconds, 13:05:42.123:
/// captures carry their own times, so the date is left to the report's header.
pub fn clock(ts_ns: u64) -> String {
    let ms = ts_ns / 1_000_000;
    let s = ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60,
        ms % 1000
    )
}

/// Shorten `s` to `w` characters, keeping both ends (addresses differ at either end).
pub fn shorten(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    let keep = w.saturating_sub(1);
    let head: String = s.chars().take(keep / 2).collect();
    let tail: String = s.chars().skip(n - (keep - keep / 2)).collect();
    format!("{head}~{tail}")
}

/// A character a terminal would act on instead of showing: C0 and C1 controls, DEL, and the
/// bidirectional embeddings, overrides and isolates that reorder what is shown.
fn acts_on_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape_for_terminal(s: &str, keep_newlines: bool) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    let escaped = |c: char| acts_on_terminal(c) && !(keep_newlines && c == '\n');
    if !s.chars().any(escaped) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if !escaped(c) {
            out.push(c);
        } else if u32::from(c) < 0x100 {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `s` safe to print on a terminal, for one field: text from a capture or from another
/// process (interface names, process names) may hold escape sequences that would retitle,
/// clear or reprogram the terminal; those characters are shown as `\x1b`, `\u{202e}`.
pub fn terminal(s: &str) -> std::borrow::Cow<'_, str> {
    escape_for_terminal(s, false)
}

/// [`terminal`] for a multi-line text: newlines are kept.
pub fn terminal_lines(s: &str) -> std::borrow::Cow<'_, str> {
    escape_for_terminal(s, true)
}

/// [`terminal`] of an owned string, without copying when nothing needs escaping.
pub fn terminal_owned(s: String) -> String {
    if let std::borrow::Cow::Owned(escaped) = terminal(&s) {
        return escaped;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_follow_the_count() {
        assert_eq!(plural(1, "QP", "QPs"), "1 QP");
        assert_eq!(plural(0, "QP", "QPs"), "0 QPs");
        assert_eq!(plural(2, "NAK", "NAKs"), "2 NAKs");
        assert_eq!(plural(1, "PSN gap", "PSN gaps"), "1 PSN gap");
    }

    #[test]
    fn latency_below_the_timestamp_resolution_is_not_zero() {
        assert_eq!(latency(Some(0), 1000), "< 1 us");
        assert_eq!(latency(Some(999), 1000), "< 1 us");
        assert_eq!(latency(Some(5), 10_000), "< 10 us");
        assert_eq!(latency(Some(1000), 1000), "1.0 us");
        assert_eq!(
            latency(Some(0), 1),
            "0 ns",
            "nanosecond timestamps: 0 ns is measured"
        );
        assert_eq!(latency(None, 1000), "-");
    }

    #[test]
    fn clock_is_the_utc_time_of_day() {
        // 2023-11-14T22:13:20.000Z, plus 1.234567 s.
        assert_eq!(
            clock(1_700_000_000_000_000_000 + 1_234_567_000),
            "22:13:21.234"
        );
        assert_eq!(clock(0), "00:00:00.000");
    }

    #[test]
    fn rates_scale_at_each_thousand() {
        assert_eq!(rate(0.0), "0 b/s");
        assert_eq!(rate(999.0), "999 b/s");
        assert_eq!(rate(999.96e6), "1.0 Gb/s");
        assert_eq!(rate(1e3), "1.0 kb/s");
        assert_eq!(rate(850e6), "850.0 Mb/s");
        assert_eq!(rate(12.34e9), "12.3 Gb/s");
        assert_eq!(rate(1.5e12), "1.5 Tb/s");
    }

    #[test]
    fn counts_are_exact_below_ten_thousand_then_scaled() {
        assert_eq!(count(0), "0");
        assert_eq!(count(9_999), "9999");
        assert_eq!(count(12_345), "12.3k");
        assert_eq!(count(999_949), "999.9k");
        assert_eq!(count(999_999), "1.0M");
        assert_eq!(count(1_000_000), "1.0M");
        assert_eq!(count(12_345_678), "12.3M");
        assert_eq!(count(12_345_678_901), "12.3G");
    }

    #[test]
    fn byte_sizes_are_binary() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(2048), "2.0 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn durations_change_unit_at_each_thousand() {
        assert_eq!(ns(None), "-");
        assert_eq!(ns(Some(0)), "0 ns");
        assert_eq!(ns(Some(850)), "850 ns");
        assert_eq!(ns(Some(999)), "999 ns");
        assert_eq!(ns(Some(999_960)), "1.0 ms");
        assert_eq!(ns(Some(999_999_999)), "1.00 s");
        assert_eq!(ns(Some(1_500)), "1.5 us");
        assert_eq!(ns(Some(12_300)), "12.3 us");
        assert_eq!(ns(Some(4_100_000)), "4.1 ms");
        assert_eq!(ns(Some(1_200_000_000)), "1.20 s");
        assert_eq!(us(52.44), "52.4 us");
        assert_eq!(us(0.5), "500 ns");
        assert_eq!(us(-1.0), "0 ns");
    }

    #[test]
    fn identifiers_and_shortening() {
        assert_eq!(qp(0x11), "0x000011");
        assert_eq!(qp(0xff_ffff), "0xffffff");
        assert_eq!(shorten("abcdefghij", 5), "ab~ij");
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("2001:db8::1 > 2001:db8::2", 12), "2001:~db8::2");
    }

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        let name = "eth\x1b]0;pwned\x07\x1b[2J\u{9b}x\u{202e}";
        assert_eq!(
            terminal(name),
            "eth\\x1b]0;pwned\\x07\\x1b[2J\\x9bx\\u{202e}"
        );
        assert!(matches!(terminal("eth0 ü"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(terminal("a\nb\tc"), "a\\x0ab\\x09c");
        assert_eq!(terminal_lines("a\x1b\nb\n"), "a\\x1b\nb\n");
        assert_eq!(terminal_owned("plain".to_string()), "plain");
    }
}
