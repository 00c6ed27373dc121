//! The closing tables.

use std::fmt::Write as _;

use super::checks::Summary;

pub(super) fn flow_table(sums: &[Summary]) -> String {
    let rows: Vec<Vec<String>> = sums.iter().flat_map(|s| s.flow_rows.clone()).collect();
    if rows.is_empty() {
        return String::new();
    }
    let head = [
        "scenario",
        "flow",
        "observer",
        "pkts w/a/o",
        "retx w/a/o",
        "NAK w/a/o",
        "gaps w/a/o",
        "reordered w/a/o",
    ];
    format_table(&head, rows)
}

pub(super) fn table(sums: &[Summary]) -> String {
    let head = [
        "scenario",
        "time",
        "perftest",
        "pmtu",
        "wire c>s/s>c",
        "c.sent/s.rcvd",
        "s.sent/c.rcvd",
        "NAK wire/oos",
        "retx/dup(model)/dup_req",
        "gaps/naive4096",
        "netem drop",
    ];
    format_table(&head, sums.iter().map(|s| s.row.clone()).collect())
}

fn format_table(head: &[&str], body: Vec<Vec<String>>) -> String {
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    rows.extend(body);
    let w: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (n, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:<w$}", c, w = w[i]))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if n == 0 {
            let _ = writeln!(
                out,
                "{}",
                "-".repeat(w.iter().sum::<usize>() + 2 * (w.len() - 1))
            );
        }
    }
    out
}
