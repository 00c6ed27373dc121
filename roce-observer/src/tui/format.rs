//! Human formatting of rates, counts and durations for narrow table cells.

/// 12.3 Gb/s, 850 Mb/s, 12 kb/s.
pub fn rate(bps: f64) -> String {
    let units = [(1e12, "Tb/s"), (1e9, "Gb/s"), (1e6, "Mb/s"), (1e3, "kb/s")];
    for (scale, unit) in units {
        if bps >= scale {
            return format!("{:.1} {unit}", bps / scale);
        }
    }
    format!("{bps:.0} b/s")
}

/// 1234 -> 1234, 12345 -> 12.3k, 12_345_678 -> 12.3M.
pub fn count(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.1}G", n as f64 / 1e9),
    }
}

/// 850 ns, 12.3 us, 4.1 ms, 1.20 s; "-" without a value.
pub fn ns(v: Option<u64>) -> String {
    let Some(v) = v else {
        return "-".into();
    };
    let v = v as f64;
    if v < 1e3 {
        format!("{v:.0} ns")
    } else if v < 1e6 {
        format!("{:.1} us", v / 1e3)
    } else if v < 1e9 {
        format!("{:.1} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// QPs are shown in hex, as RDMA tools print them.
pub fn qp(q: u32) -> String {
    format!("0x{q:06x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(rate(0.0), "0 b/s");
        assert_eq!(rate(12.34e9), "12.3 Gb/s");
        assert_eq!(count(999), "999");
        assert_eq!(count(12_345), "12.3k");
        assert_eq!(count(12_345_678), "12.3M");
        assert_eq!(ns(None), "-");
        assert_eq!(ns(Some(850)), "850 ns");
        assert_eq!(ns(Some(12_300)), "12.3 us");
        assert_eq!(qp(0x11), "0x000011");
    }
}
