//! The human table: summary, flows, PFC, latency, ECMP and alerts, aligned and readable in a
//! 120-column terminal. Long addresses are shortened in the middle; everything is also in the
//! JSON document.

use std::fmt::Write as _;

use crate::{
    format::{self, shorten as fit},
    report::{
        FlowSnapshot, ModelledView, QpOwner, RttSummary, Snapshot, StepsSnapshot, Summary,
        steps::steps_window,
    },
    severity::Severity,
};

/// Flows listed (busiest first); the rest are counted.
pub const MAX_FLOW_ROWS: usize = 50;

/// p50/p99, `< 1 us` below the timestamp resolution `res_ns`.
fn rtt(r: &RttSummary, res_ns: u64) -> String {
    if r.count == 0 {
        "-".into()
    } else {
        format!(
            "{}/{}",
            format::latency(r.p50, res_ns),
            format::latency(r.p99, res_ns)
        )
    }
}

/// Columns of the flow table; a row is 119 characters when every value fits its column (counts
/// up to 99.9k, packets up to 999.9k).
const FLOW_HEADER: [&str; 12] = [
    "SRC > DST",
    "QP",
    "PKTS",
    "BYTES",
    "RATE",
    "GAPS",
    "RETX",
    "NAKS",
    "CNP",
    "CE",
    "D/P",
    "RTT p50/p99",
];

/// The flow table's column widths at the fixed width (119 columns).
const FLOW_WIDTHS: [usize; 12] = [29, 8, 6, 10, 10, 5, 5, 4, 5, 5, 4, 17];

/// Which columns go first on a narrow terminal, first dropped first: the problem counts
/// (gaps, NAKs, retransmissions, CNP, CE) stay longest.
const FLOW_DROP_ORDER: [usize; 7] = [10, 2, 3, 11, 4, 6, 9];

/// The flow table's shape: which columns are shown and how wide the addresses are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowLayout {
    shown: [bool; 12],
    widths: [usize; 12],
    /// Timestamp resolution of the report (`summary.ts_resolution_ns`): latencies below it
    /// read `< 1 us`.
    resolution_ns: u64,
    /// The width prose lines (reasons, stragglers, lost PSNs) are wrapped at.
    text: usize,
}

impl FlowLayout {
    /// 119 columns, whatever the output: files, pipes and CI logs stay the same.
    pub const FIXED: FlowLayout = FlowLayout {
        shown: [true; 12],
        widths: FLOW_WIDTHS,
        resolution_ns: 1,
        text: 118,
    };

    /// Fitted to a terminal `width` columns wide: narrower drops whole columns (the problem
    /// counts last), wider gives the addresses room up to `longest` characters.
    pub fn fit(width: usize, longest: usize) -> FlowLayout {
        let mut l = FlowLayout::FIXED;
        let total = |l: &FlowLayout| {
            let n = l.shown.iter().filter(|s| **s).count();
            (0..12)
                .filter(|i| l.shown[*i])
                .map(|i| l.widths[i])
                .sum::<usize>()
                + n.saturating_sub(1)
        };
        for col in FLOW_DROP_ORDER {
            if total(&l) <= width {
                break;
            }
            l.shown[col] = false;
        }
        let room = width.saturating_sub(total(&l));
        l.widths[0] += room.min(longest.saturating_sub(l.widths[0]));
        l.text = width.min(FlowLayout::FIXED.text);
        l
    }

    /// Width of a row.
    pub fn width(&self) -> usize {
        let n = self.shown.iter().filter(|s| **s).count();
        (0..12)
            .filter(|i| self.shown[*i])
            .map(|i| self.widths[i])
            .sum::<usize>()
            + n.saturating_sub(1)
    }
}

/// The terminal's width when stdout is one (the table then fits it), `None` otherwise.
pub fn terminal_width() -> Option<u16> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    ratatui::crossterm::terminal::size().ok().map(|(w, _)| w)
}

fn flow_line(out: &mut String, cols: [&str; 12], layout: &FlowLayout) {
    let mut line = String::new();
    for (i, text) in cols.iter().enumerate() {
        if !layout.shown[i] {
            continue;
        }
        if !line.is_empty() {
            line.push(' ');
        }
        let w = layout.widths[i];
        if i == 0 {
            let _ = write!(line, "{:<w$}", fit(text, w));
        } else {
            let _ = write!(line, "{text:>w$}");
        }
    }
    let _ = writeln!(out, "{line}");
}

/// `at_point`: a flow was seen at more than one observation point, so each row says where
/// (a capture of several interfaces, `tcpdump -i any` of a forwarding host, `run -i` on two
/// interfaces): otherwise one QP seen at two points is two rows that look alike.
fn flow_row(
    out: &mut String,
    f: &FlowSnapshot,
    (at_point, capture): (bool, bool),
    layout: &FlowLayout,
) {
    let naks = f.naks.total();
    let class = match f.pcp {
        Some(p) => format!("{}/{}", f.dscp, p),
        None => format!("{}/-", f.dscp),
    };
    // A capture's flows are rated over their own active time (a flow busy for 0.5 ms of a
    // 10 s capture is not averaged over the 10 s); a live interval's over the interval.
    let rate = if capture {
        crate::derived::active_bps(f).map_or("-".into(), format::rate)
    } else {
        format::rate(f.rate_bps)
    };
    flow_line(
        out,
        [
            &format!("{} > {}", f.src_ip, f.dst_ip),
            &format::qp(f.dst_qp),
            &format::count(f.packets),
            &format::bytes(f.bytes),
            &rate,
            &format::count(f.psn_gaps),
            &format::count(f.retransmits),
            &format::count(naks),
            &format::count(f.cnp),
            &format::count(f.ecn_ce),
            &class,
            &rtt(&f.rtt_ns, layout.resolution_ns),
        ],
        layout,
    );
    // A flow seen inside switch mirrors: its mirror source on its own line (one per mirror
    // source: the same QP mirrored by two switches is two rows).
    match (&f.mirror, at_point) {
        (Some(m), true) => {
            let _ = writeln!(out, "  at {}/{} via {}", f.iface, f.direction, m.label());
        }
        (Some(m), false) => {
            let _ = writeln!(out, "  via {}", m.label());
        }
        (None, true) => {
            let _ = writeln!(out, "  at {}/{}", f.iface, f.direction);
        }
        (None, false) => {}
    }
    reordering_line(out, f);
}

/// A flow whose packets arrived out of order: how many, how late, and the NAKs it caused.
fn reordering_line(out: &mut String, f: &FlowSnapshot) {
    if f.reordered == 0 && f.reorder_naks == 0 && f.psn_holes == 0 {
        return;
    }
    let mut line = format!(
        "  reordered {} (at most {} late)",
        format::count(f.reordered),
        format::plural(f.reorder_distance_max, "PSN", "PSNs")
    );
    if f.reorder_naks > 0 {
        let naks = format::plural(f.reorder_naks, "NAK", "NAKs");
        let _ = write!(line, ", {naks} caused by reordering");
    }
    if f.psn_holes > 0 {
        let holes = format::plural(f.psn_holes, "PSN", "PSNs");
        let _ = write!(line, ", {holes} skipped and not arrived yet");
    }
    let _ = writeln!(out, "{line}");
}

/// The owners of the flows listed above (live runs on a host with RDMA devices): process,
/// device and port, the local QP with its state and the NIC's SQ/RQ PSNs.
fn owners(out: &mut String, flows: &[&FlowSnapshot]) {
    let owned: Vec<(&FlowSnapshot, &QpOwner)> = flows
        .iter()
        .filter_map(|f| Some((*f, f.owner.as_deref()?)))
        .collect();
    if owned.is_empty() {
        return;
    }
    let line = |out: &mut String, c: [&str; 8]| {
        let _ = writeln!(
            out,
            "{:<29} {:>8} {:<7} {:<24} {:<12} {:>8} {:<5} {:>17}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        );
    };
    let _ = writeln!(out);
    line(
        out,
        [
            "QP OWNER: SRC > DST",
            "QP",
            "DIR",
            "PROCESS",
            "DEVICE/PORT",
            "LOCAL QP",
            "STATE",
            "NIC SQ/RQ PSN",
        ],
    );
    let opt = |v: Option<u32>| v.map_or("-".into(), |v| v.to_string());
    for (f, o) in owned {
        let process = match o.pid {
            Some(pid) => format!("{}/{pid}", o.comm),
            None => o.comm.clone(),
        };
        line(
            out,
            [
                &fit(&format!("{} > {}", f.src_ip, f.dst_ip), 29),
                &format::qp(f.dst_qp),
                f.direction,
                &fit(&process, 24),
                &fit(&format!("{}/{}", o.device, opt(o.port)), 12),
                &format::qp(o.lqpn),
                if o.gone {
                    "gone"
                } else {
                    o.state.unwrap_or("?")
                },
                &format!("{}/{}", opt(o.sq_psn), opt(o.rq_psn)),
            ],
        );
    }
}

/// The RDMA NIC counters of the interval (live runs on a host with RDMA devices): the key RoCE
/// counters, the others that changed, and the pause counters that are not zero.
fn nic(out: &mut String, s: &Snapshot) {
    let rows = crate::report::nic::nic_rows(s);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<22} {:<32} {:>14} {:>12}  MEANING",
        "NIC PORT", "COUNTER", "TOTAL", "PER S"
    );
    for r in rows {
        let line = format!(
            "{:<22} {:<32} {:>14} {:>12.1}  {}",
            fit(&r.port, 22),
            fit(r.name, 32),
            r.counter.total,
            r.counter.per_s,
            fit(r.meaning, 33)
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// Word-wrap `text` to `width` columns, each line prefixed with `indent`.
fn wrap(out: &mut String, text: &str, indent: &str, width: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
}

/// `line` as it is at the fixed width (files and pipes keep their lines); on a narrower
/// terminal, when it does not fit, broken between its items (separated by two spaces, or by
/// one in prose), continuation lines indented by two more spaces than `indent`.
fn fit_line(out: &mut String, indent: &str, line: &str, width: usize) {
    if width >= FlowLayout::FIXED.text || indent.len() + line.chars().count() <= width {
        let _ = writeln!(out, "{indent}{line}");
        return;
    }
    let sep = if line.contains("  ") { "  " } else { " " };
    let mut current = String::from(indent);
    for item in line.split(sep).filter(|i| !i.is_empty()) {
        if current.trim().is_empty() {
            current.push_str(item);
        } else if current.chars().count() + sep.len() + item.chars().count() <= width {
            current.push_str(sep);
            current.push_str(item);
        } else {
            let _ = writeln!(out, "{current}");
            current = format!("{indent}  {item}");
        }
    }
    let _ = writeln!(out, "{current}");
}

/// Training steps and their stragglers.
fn steps(out: &mut String, st: &StepsSnapshot, width: usize) {
    let line = format!(
        "steps: period {:.2} ms, {} steps in {}, communicating {:.0}% of a step (confidence {:.2})",
        st.period_ms,
        st.count,
        steps_window(st),
        st.comm_fraction * 100.0,
        st.confidence
    );
    fit_line(out, "", &line, width);
    for g in st.stragglers.iter().take(5) {
        let e = &g.evidence;
        let text = format!(
            "straggler {} > {} qp {} at {}/{}: last in {}/{} steps, {:.2} ms behind the median flow; \
             in those steps CE {}, CNP {}, retransmits {}, NAKs {}, pause {}",
            g.src_ip,
            g.dst_ip,
            format::qp(g.dst_qp),
            g.iface,
            g.direction,
            g.late_steps,
            g.steps,
            g.mean_lag_ms,
            e.ce,
            e.cnp,
            e.retransmits,
            e.naks,
            format::us(e.pause_us)
        );
        wrap(out, &text, "  ", width);
    }
}

/// The report as text for a terminal or a pipe. Text that comes from a capture or another
/// process (interface names, process names) is printed with its control characters escaped.
/// The table at the fixed width (files, pipes, tests).
pub fn render(s: &Snapshot) -> String {
    render_for(s, None)
}

/// The table fitted to a terminal `width` columns wide, or at the fixed width without one.
pub fn render_for(s: &Snapshot, width: Option<u16>) -> String {
    let mut layout = match width {
        Some(w) => FlowLayout::fit(
            usize::from(w).saturating_sub(1),
            s.flows
                .iter()
                .map(|f| f.src_ip.to_string().len() + f.dst_ip.to_string().len() + 3)
                .max()
                .unwrap_or(0),
        ),
        None => FlowLayout::FIXED,
    };
    layout.resolution_ns = s.summary.ts_resolution_ns;
    let out = render_text(s, &layout);
    if let std::borrow::Cow::Owned(escaped) = crate::format::terminal_lines(&out) {
        return escaped;
    }
    out
}

/// What watching costs: events (and their kinds), and for live runs the process's CPU and
/// memory, the ring buffer's fill and the programs' ns per run.
fn observer_line(m: &Summary) -> String {
    let kinds: Vec<String> = m
        .events_by_kind
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let mut line = format!(
        "events {} ({:.4} per frame{}{})",
        m.events,
        m.events_per_packet,
        if kinds.is_empty() { "" } else { ": " },
        kinds.join(", ")
    );
    if let Some(c) = &m.observer {
        let _ = write!(
            line,
            "  cpu {:.1}% of a core  rss {}",
            c.cpu_fraction * 100.0,
            format::bytes(c.rss_bytes)
        );
        if let Some(k) = &c.kernel {
            let _ = write!(
                line,
                "  ring buffer {:.1}% full  {}",
                k.ringbuf_fill * 100.0,
                format::program_cost(k)
            );
        }
    }
    line
}

fn render_text(s: &Snapshot, layout: &FlowLayout) -> String {
    let mut out = String::new();
    summary(&mut out, &s.summary, layout.text);
    let _ = writeln!(out);
    flows(&mut out, s, layout);
    nic(&mut out, s);
    mirror_sessions(&mut out, s, layout.text);
    pfc(&mut out, s, layout.text);
    pfc_origin(&mut out, s);
    latency(&mut out, s, layout.text);
    ecmp(&mut out, s, layout.text);
    path_loss(&mut out, s, layout.text);
    if let Some(st) = &s.steps {
        let _ = writeln!(out);
        steps(&mut out, st, layout.text);
    }
    if !s.alerts.is_empty() {
        let _ = writeln!(out);
        alerts(&mut out, &s.alerts, layout.text);
    }
    out
}

/// The frame classes, the interval, what watching costs, and what the source lost or cut.
fn summary(out: &mut String, m: &Summary, width: usize) {
    let frames = format!(
        "frames {}  roce {}  pfc {}  pause {}  non-roce {}  malformed {}  fragments {}  unsupported {}",
        m.total_packets,
        m.roce_packets,
        m.pfc_frames,
        m.pause_8023x,
        m.non_roce,
        m.malformed,
        m.ip_fragments,
        m.unsupported,
    );
    fit_line(out, "", &frames, width);
    let flows = format!(
        "flows {}  interval {:.3} s  path MTU {}{}  link {} Gb/s",
        m.flows,
        m.interval_s,
        m.pmtu,
        if m.pmtu_learned { " (learned)" } else { "" },
        m.link_gbps,
    );
    fit_line(out, "", &flows, width);
    wrap(out, &observer_line(m), "", width);
    if m.map_full + m.ringbuf_full + m.pending_full + m.tail_call_failed > 0 {
        let _ = writeln!(
            out,
            "lost: map_full {}  ringbuf_full {}  pending_full {}  tail_call_failed {}",
            m.map_full, m.ringbuf_full, m.pending_full, m.tail_call_failed
        );
    }
    if let Some(c) = &m.capture
        && (c.snap_truncated + c.skipped_link_type > 0 || c.error.is_some())
    {
        let text = format!(
            "capture: {} frames, {} cut by the snap length, {} on interfaces of unsupported link types skipped{}",
            c.frames,
            c.snap_truncated,
            c.skipped_link_type,
            c.error
                .as_ref()
                .map(|e| format!("; {e}"))
                .unwrap_or_default()
        );
        wrap(out, &text, "", width);
    }
    if let Some(c) = &m.capture {
        for u in &c.unseen {
            wrap(out, &format!("capture {u}"), "", width);
        }
    }
}

/// The flow table, problems first, and the owners of the flows it lists.
fn flows(out: &mut String, s: &Snapshot, layout: &FlowLayout) {
    let capture = s.summary.capture.is_some();
    let mut header = FLOW_HEADER;
    if capture {
        header[4] = "ACT RATE";
    }
    flow_line(out, header, layout);
    // The rows shown: problems first (crate::severity, the order every renderer uses), then
    // most bytes, ties in snapshot order. Selected, then only they are sorted: sorting every
    // flow for 50 rows was measurable at 100,000 flows.
    let mut rows: Vec<(std::cmp::Reverse<(Severity, u64)>, usize)> = s
        .flows
        .iter()
        .enumerate()
        .map(|(i, f)| (std::cmp::Reverse((Severity::of_flow(f), f.bytes)), i))
        .collect();
    if rows.len() > MAX_FLOW_ROWS {
        rows.select_nth_unstable(MAX_FLOW_ROWS);
        rows.truncate(MAX_FLOW_ROWS);
    }
    rows.sort_unstable();
    // Rows say where only when one flow has rows at several points (they would read as
    // duplicates); the request and response flows of one interface's two directions do not.
    let mut seen = std::collections::HashMap::new();
    let at_point = s.flows.iter().any(|f| {
        let point = (f.iface.as_str(), f.direction);
        *seen.entry((f.src_ip, f.dst_ip, f.dst_qp)).or_insert(point) != point
    });
    for (_, i) in &rows {
        flow_row(out, &s.flows[*i], (at_point, capture), layout);
    }
    if s.flows.len() > MAX_FLOW_ROWS {
        let _ = writeln!(
            out,
            "... {} (use --json for all)",
            format::plural(
                (s.flows.len() - MAX_FLOW_ROWS) as u64,
                "more flow",
                "more flows"
            ),
        );
    }
    let listed: Vec<&FlowSnapshot> = rows.iter().map(|(_, i)| &*s.flows[*i]).collect();
    owners(out, &listed);
}

/// One column of a section with fixed columns: its header, width, alignment, and its rank
/// when the terminal is too narrow (the highest rank is dropped first; 0 is never dropped).
struct Col {
    name: &'static str,
    width: usize,
    left: bool,
    drop: u8,
}

impl Col {
    const fn left(name: &'static str, width: usize, drop: u8) -> Col {
        Col {
            name,
            width,
            left: true,
            drop,
        }
    }

    const fn right(name: &'static str, width: usize, drop: u8) -> Col {
        Col {
            name,
            width,
            left: false,
            drop,
        }
    }
}

/// A section with fixed columns, one space apart: at the fixed width every column; on a
/// narrower terminal whole columns are dropped, highest `drop` first, until a row fits `width`.
fn columns(out: &mut String, cols: &[Col], rows: &[Vec<String>], width: usize) {
    let mut shown = vec![true; cols.len()];
    let total = |shown: &[bool]| -> usize {
        let (n, w): (usize, usize) = cols
            .iter()
            .zip(shown)
            .filter(|(_, s)| **s)
            .fold((0, 0), |(n, w), (c, _)| (n + 1, w + c.width));
        w + n.saturating_sub(1)
    };
    let mut ranks: Vec<u8> = cols.iter().map(|c| c.drop).filter(|d| *d > 0).collect();
    ranks.sort_unstable_by(|a, b| b.cmp(a));
    for rank in ranks {
        if total(&shown) <= width {
            break;
        }
        for (s, c) in shown.iter_mut().zip(cols) {
            if c.drop == rank {
                *s = false;
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut line = String::new();
        for ((c, text), _) in cols.iter().zip(cells).zip(&shown).filter(|(_, s)| **s) {
            if !line.is_empty() {
                line.push(' ');
            }
            if c.left {
                let _ = write!(line, "{text:<w$}", w = c.width);
            } else {
                let _ = write!(line, "{text:>w$}", w = c.width);
            }
        }
        line
    };
    let _ = writeln!(out, "{}", line(&mut cols.iter().map(|c| c.name)));
    for row in rows {
        let _ = writeln!(out, "{}", line(&mut row.iter().map(String::as_str)));
    }
}

/// The switch-mirror sessions and the frames lost on the mirror path.
fn mirror_sessions(out: &mut String, s: &Snapshot, width: usize) {
    const COLS: [Col; 7] = [
        Col::left("MIRROR SESSION", 40, 0),
        Col::left("TO", 16, 2),
        Col::right("FRAMES", 10, 0),
        Col::right("SEQ LOST", 10, 0),
        Col::right("SEQ LATE", 10, 1),
        Col::right("RESYNCS", 8, 3),
        Col::left("SEEN", 16, 4),
    ];
    if s.mirror.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let rows: Vec<Vec<String>> = s
        .mirror
        .iter()
        .map(|session| {
            let seq = |n: u64| {
                if session.sequenced {
                    n.to_string()
                } else {
                    "-".into()
                }
            };
            vec![
                fit(&session.source.label(), 40),
                fit(&session.outer_dst.to_string(), 16),
                session.frames.to_string(),
                seq(session.seq_lost),
                seq(session.seq_late),
                seq(session.seq_resyncs),
                fit(&format!("{}/{}", session.iface, session.direction), 16),
            ]
        })
        .collect();
    columns(out, &COLS, &rows, width);
    let _ = writeln!(
        out,
        "mirror frames lost in transit (sum of SEQ LOST): {}",
        s.summary.mirror_seq_lost
    );
}

/// PFC and PAUSE per interface, source MAC and priority.
fn pfc(out: &mut String, s: &Snapshot, width: usize) {
    const COLS: [Col; 9] = [
        Col::left("PFC IFACE", 16, 0),
        Col::left("SRC MAC", 17, 2),
        Col::right("PRIO", 4, 0),
        Col::right("XOFF", 8, 0),
        Col::right("XON", 8, 3),
        Col::right("QUANTA", 11, 4),
        Col::right("PAUSED", 12, 0),
        Col::right("FRACTION", 8, 1),
        Col::right("STORM", 5, 0),
    ];
    if s.pfc.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let rows: Vec<Vec<String>> = s
        .pfc
        .iter()
        .map(|p| {
            vec![
                fit(&format!("{}/{}", p.iface, p.direction), 16),
                p.src_mac.to_string(),
                p.priority
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "link".into()),
                p.pause_frames.to_string(),
                p.xon_frames.to_string(),
                p.pause_quanta.to_string(),
                format::us(p.paused_us),
                format!("{:.2}%", p.paused_fraction * 100.0),
                if p.storm { "YES" } else { "no" }.to_string(),
            ]
        })
        .collect();
    columns(out, &COLS, &rows, width);
}

/// Where a PFC storm started, and the sources it paused in order.
fn pfc_origin(out: &mut String, s: &Snapshot) {
    if let Some(o) = &s.pfc_origin {
        let prio = |p: Option<u8>| p.map(|v| v.to_string()).unwrap_or_else(|| "link".into());
        match (&o.origin, o.origin_index) {
            (Some(origin), Some(index)) => {
                let _ = writeln!(
                    out,
                    "pfc storm origin: #{} {}/{} {} prio {}, {} more paused after it (chain of {} hops); {} sources paused within {:.1} ms:",
                    index + 1,
                    origin.iface,
                    origin.direction,
                    origin.src_mac,
                    prio(origin.priority),
                    o.reached,
                    o.hops,
                    o.sources.len(),
                    o.spread_ms
                );
            }
            _ => {
                let _ = writeln!(
                    out,
                    "pfc storm origin: none, the pauses form a deadlock cycle (see lossless); {} sources paused within {:.1} ms:",
                    o.sources.len(),
                    o.spread_ms
                );
            }
        }
        for (i, src) in o.sources.iter().enumerate().take(8) {
            let by = match (src.paused_by, src.evidence) {
                (Some(p), Some(ev)) => format!("  after #{} ({ev})", p + 1),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  #{:<2} +{:>9.3} ms  {:<16} {:<17} prio {:>4}  paused {:>6.2}%{}{by}",
                i + 1,
                (src.first_xoff_ts - o.sources[0].first_xoff_ts) as f64 / 1e6,
                fit(
                    &format!("{}/{}", src.source.iface, src.source.direction),
                    16
                ),
                src.source.src_mac,
                prio(src.source.priority),
                src.paused_fraction * 100.0,
                if src.storm { "  storm" } else { "" }
            );
        }
    }
}

/// The latency seen at the observation point over all flows.
fn latency(out: &mut String, s: &Snapshot, width: usize) {
    let l = &s.latency.overall;
    let lat = |v| format::latency(v, s.summary.ts_resolution_ns);
    if l.count > 0 {
        let _ = writeln!(out);
        let head = format!("latency at the observation point, {} samples:", l.count);
        let values = format!(
            "min {} p50 {} p90 {} p99 {} p99.9 {} max {}",
            lat(l.min),
            lat(l.p50),
            lat(l.p90),
            lat(l.p99),
            lat(l.p999),
            lat(l.max)
        );
        // One line at the fixed width; on a narrow terminal the values go on a line of their
        // own (a value is never parted from its unit).
        if width >= FlowLayout::FIXED.text || head.len() + 1 + values.len() <= width {
            let _ = writeln!(out, "{head} {values}");
        } else {
            let _ = writeln!(out, "{head}\n  {values}");
        }
    }
}

/// ECMP balance: measured, modelled, the remedies, and the entropy per host pair.
fn ecmp(out: &mut String, s: &Snapshot, width: usize) {
    let e = &s.ecmp;
    if !e.measured.paths.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "ecmp measured: {}  max/mean {:.2}  jain {:.3}",
            format::plural(
                e.measured.paths.len() as u64,
                "observation point",
                "observation points"
            ),
            e.measured.imbalance,
            e.measured.jain
        );
        if let Some(mdl) = &e.modelled {
            ecmp_modelled(out, mdl, width);
        }
        for p in e.entropy.iter().take(5) {
            let text = format!(
                "{} > {}: {} on {}, busiest 5-tuple {:.0}% of bytes",
                p.src_ip,
                p.dst_ip,
                format::plural(p.qps, "QP", "QPs"),
                format::plural(p.udp_src_ports, "UDP source port", "UDP source ports"),
                p.busiest_tuple_share * 100.0
            );
            wrap(out, &text, "  ", width);
        }
    }
}

/// The modelled hash's balance over the paths, the flows it leaves out, and the elephants that
/// share a path.
fn ecmp_modelled(out: &mut String, mdl: &ModelledView, width: usize) {
    let _ = writeln!(
        out,
        "ecmp modelled ({} paths, {} seed {}): max/mean {:.2}  jain {:.3}",
        mdl.paths,
        mdl.hash.name(),
        mdl.seed,
        mdl.imbalance,
        mdl.jain,
    );
    if mdl.multipath_flows > 0 {
        let line = format!(
            "left out: {} flows ({}) whose packets arrive reordered: the fabric sprays them over several paths, no 5-tuple hash decides theirs",
            mdl.multipath_flows,
            format::bytes(mdl.multipath_bytes)
        );
        fit_line(out, "  ", &line, width);
    }
    let total: u64 = mdl.bytes_per_path.iter().sum();
    let shares: Vec<String> = mdl
        .bytes_per_path
        .iter()
        .take(24)
        .map(|b| format!("{:.0}%", *b as f64 * 100.0 / total.max(1) as f64))
        .collect();
    let more = if mdl.bytes_per_path.len() > 24 {
        " ..."
    } else {
        ""
    };
    let _ = writeln!(out, "  byte share per path: {}{more}", shares.join(" "));
    for c in mdl.collisions.iter().take(3) {
        let _ = writeln!(
            out,
            "  path {} carries {} elephant 5-tuples ({})",
            c.path,
            c.elephants.len(),
            format::bytes(c.bytes)
        );
    }
    ecmp_remedies(out, mdl);
}

/// The remedies for a modelled imbalance: new UDP source ports, or QPs per connection.
fn ecmp_remedies(out: &mut String, mdl: &ModelledView) {
    if let Some(a) = mdl.advice.as_ref().filter(|a| !a.changes.is_empty()) {
        let _ = writeln!(
            out,
            "  advice: move {} 5-tuples to new UDP source ports: max/mean {:.2} -> {:.2}",
            a.changes.len(),
            mdl.imbalance,
            a.imbalance_after
        );
        for c in a.changes.iter().take(5) {
            let _ = writeln!(
                out,
                "    {} > {} sport {} -> {} (path {} -> {}, {})",
                c.src_ip,
                c.dst_ip,
                c.udp_src_port,
                c.new_udp_src_port,
                c.from_path,
                c.to_path,
                format::bytes(c.bytes)
            );
        }
    }
    if let Some(q) = &mdl.qp_advice {
        // The connections whose QP count changes (the JSON lists every one).
        let changed: Vec<_> = q
            .connections
            .iter()
            .filter(|c| u64::from(c.qps) != c.qps_now)
            .collect();
        let mut counts: Vec<String> = changed
            .iter()
            .take(5)
            .map(|c| {
                format!(
                    "{} > {} {} (now {})",
                    c.src_ip,
                    c.dst_ip,
                    format::plural(u64::from(c.qps), "QP", "QPs"),
                    c.qps_now
                )
            })
            .collect();
        if changed.len() > 5 {
            counts.push(format!("{} more", changed.len() - 5));
        }
        if !counts.is_empty() {
            let _ = writeln!(
                out,
                "  or QPs per connection: max/mean {:.2} -> {:.2}: {}",
                mdl.imbalance,
                q.imbalance_after,
                counts.join(", ")
            );
        }
    }
}

/// Request PSNs lost between two observation points.
fn path_loss(out: &mut String, s: &Snapshot, width: usize) {
    let lossy: Vec<_> = s
        .paths
        .iter()
        .filter(|p| p.missing + p.downstream_retransmits_unseen > 0)
        .collect();
    if !lossy.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "lost between observation points (request PSNs):");
        for p in lossy.iter().take(10) {
            // A point inside switch mirrors is named by its mirror source.
            let point = |r: &crate::report::PointRef| match &r.mirror {
                Some(m) => format!("{}/{} via {}", r.iface, r.direction, m.label()),
                None => format!("{}/{}", r.iface, r.direction),
            };
            let text = format!(
                "{} > {} qp {}: {} -> {}: {} missing of {} seen upstream{}",
                p.src_ip,
                p.dst_ip,
                format::qp(p.dst_qp),
                point(&p.upstream),
                point(&p.downstream),
                p.missing,
                p.missing + p.both,
                if p.downstream_retransmits_unseen > 0 {
                    format!(
                        "; {} retransmissions downstream of PSNs it never saw",
                        p.downstream_retransmits_unseen
                    )
                } else {
                    String::new()
                },
            );
            let text = if p.incomplete {
                format!("{text} (at least: path events over the per-flow limit were not sent)")
            } else {
                text
            };
            wrap(out, &text, "  ", width);
        }
    }
}

/// Lines of an alert list: groups by kind, problems first; per group its first lines.
const ALERT_LINES: usize = 5;

/// The alerts grouped by kind with their counts, worst first (crate::severity); advice one line
/// per host pair or observation point.
fn alerts(out: &mut String, alerts: &[crate::report::AlertSnapshot], width: usize) {
    let _ = writeln!(out, "alerts:");
    for g in crate::severity::group_alerts(alerts) {
        let mark = if g.severity.is_problem() { "!" } else { " " };
        let what = if g.severity == Severity::Advice {
            "advice"
        } else if g.severity.is_problem() {
            "problem"
        } else {
            "information"
        };
        let _ = writeln!(
            out,
            "{mark} {} ({what}): {}, {}",
            g.kind,
            format::plural(g.alerts as u64, "alert", "alerts"),
            format::plural(g.count, "occurrence", "occurrences"),
        );
        for e in g.entries.iter().take(ALERT_LINES) {
            let _ = writeln!(out, "    {} (x{})", fit(&e.subject.text(), 100), e.count);
            wrap(out, &e.alert.reason, "      ", width);
        }
        if g.entries.len() > ALERT_LINES {
            let _ = writeln!(
                out,
                "    ... {} more (use --json)",
                g.entries.len() - ALERT_LINES
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An interface name and a process name as a hostile capture or local user could make
    /// them: set the terminal's title, then clear the screen.
    pub(crate) const HOSTILE: &str = "\x1b]0;pwned\x07\x1b[2J";
    pub(crate) const HOSTILE_SHOWN: &str = "\\x1b]0;pwned\\x07\\x1b[2J";

    /// One pcapng block: type, total length, body padded to 4 bytes, total length.
    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let padded = body.len().div_ceil(4) * 4;
        let total = (12 + padded) as u32;
        out.extend(kind.to_le_bytes());
        out.extend(total.to_le_bytes());
        out.extend(body);
        out.resize(out.len() + padded - body.len(), 0);
        out.extend(total.to_le_bytes());
    }

    /// A pcapng capture of one RoCE WRITE on an interface named `{HOSTILE}eth0`, read as
    /// `analyze` reads it, with the flow owned by a process named `{HOSTILE}job`.
    pub(crate) fn hostile_snapshot() -> Snapshot {
        use roce_observer_common::frames::RoceFrame;
        let mut cap = Vec::new();
        let mut shb = Vec::new();
        shb.extend(0x1A2B_3C4Du32.to_le_bytes());
        shb.extend(1u16.to_le_bytes());
        shb.extend(0u16.to_le_bytes());
        shb.extend((-1i64).to_le_bytes());
        block(&mut cap, 0x0A0D_0D0A, &shb);
        let name = format!("{HOSTILE}eth0");
        let mut idb = Vec::new();
        idb.extend(1u16.to_le_bytes()); // LINKTYPE_ETHERNET
        idb.extend(0u16.to_le_bytes());
        idb.extend(65535u32.to_le_bytes());
        idb.extend(2u16.to_le_bytes()); // if_name
        idb.extend((name.len() as u16).to_le_bytes());
        idb.extend(name.as_bytes());
        idb.resize(idb.len().div_ceil(4) * 4, 0);
        idb.extend([0u8; 4]); // opt_endofopt
        block(&mut cap, 1, &idb);
        let frame = RoceFrame {
            payload: 64,
            ..RoceFrame::new(0x0a, 0x11, 0)
        }
        .build();
        let mut epb = Vec::new();
        epb.extend(0u32.to_le_bytes());
        epb.extend(0u32.to_le_bytes());
        epb.extend(1_000_000u32.to_le_bytes());
        epb.extend((frame.len() as u32).to_le_bytes());
        epb.extend((frame.len() as u32).to_le_bytes());
        epb.extend(&frame);
        block(&mut cap, 6, &epb);
        let (mut engine, err) =
            crate::analyze::analyze_reader(&cap[..], crate::engine::EngineConfig::default());
        assert!(err.is_none(), "{err:?}");
        let mut snap = crate::sink::metrics::tests::with_host(engine.snapshot(0));
        snap.qp_owners[0].comm = format!("{HOSTILE}job");
        snap.nic.clear();
        crate::report::owners::label_flows(&snap.qp_owners, &mut snap.flows);
        assert_eq!(snap.flows.len(), 1);
        assert_eq!(
            snap.flows[0].iface, name,
            "the capture's name reaches the snapshot"
        );
        snap
    }

    /// Escape sequences in names never reach the terminal: they are printed visibly; JSON keeps
    /// the name itself (escaped as JSON escapes it).
    #[test]
    fn escape_sequences_in_names_are_printed_escaped() {
        let mut snap = hostile_snapshot();
        // Rows say where only for flows seen at several points: a second point shows the name.
        let mut other = crate::report::FlowSnapshot::clone(&snap.flows[0]);
        other.iface = "if1".into();
        snap.flows.push(std::sync::Arc::new(other));
        let out = render(&snap);
        assert!(
            !out.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reaches the terminal:\n{out:?}"
        );
        assert!(
            out.contains(&format!("at {HOSTILE_SHOWN}eth0/capture")),
            "{out}"
        );
        assert!(out.contains(&format!("{HOSTILE_SHOWN}job/4242")), "{out}");
        let mut json = Vec::new();
        crate::sink::json::write_document(&mut json, &snap).expect("JSON");
        let doc: serde_json::Value = serde_json::from_slice(&json).expect("parses");
        assert_eq!(doc["flows"][0]["iface"], format!("{HOSTILE}eth0"));
    }

    /// A SEND with an ACK 400 ns later, in a pcap of microsecond (`ns` false) or nanosecond
    /// timestamps, or in a pcapng whose interface has `if_tsresol` `tsresol`.
    fn timed_exchange(container: &str, tsresol: u8) -> Vec<u8> {
        use roce_observer_common::frames::RoceFrame;
        let req = RoceFrame {
            ack_req: true,
            payload: 64,
            ..RoceFrame::new(0x04, 0x12, 100)
        }
        .build();
        let ack = RoceFrame {
            src_ip: [192, 0, 2, 2],
            dst_ip: [192, 0, 2, 1],
            ..RoceFrame::new(0x11, 0x11, 100)
        }
        .build();
        // 1_700_000_000.000_001_200 s, then 400 ns later.
        let frames = [(1_200u64, req), (1_600, ack)];
        let mut cap = Vec::new();
        if container == "pcapng" {
            let mut shb = Vec::new();
            shb.extend(0x1A2B_3C4Du32.to_le_bytes());
            shb.extend(1u16.to_le_bytes());
            shb.extend(0u16.to_le_bytes());
            shb.extend((-1i64).to_le_bytes());
            block(&mut cap, 0x0A0D_0D0A, &shb);
            let mut idb = Vec::new();
            idb.extend(1u16.to_le_bytes());
            idb.extend(0u16.to_le_bytes());
            idb.extend(65535u32.to_le_bytes());
            idb.extend(9u16.to_le_bytes()); // if_tsresol
            idb.extend(1u16.to_le_bytes());
            idb.extend([tsresol, 0, 0, 0]);
            idb.extend([0u8; 4]);
            block(&mut cap, 1, &idb);
            let per_s = 10u64.pow(u32::from(tsresol));
            for (ns, f) in &frames {
                let t = 1_700_000_000 * per_s + ns * per_s / 1_000_000_000;
                let mut epb = Vec::new();
                epb.extend(0u32.to_le_bytes());
                epb.extend(((t >> 32) as u32).to_le_bytes());
                epb.extend((t as u32).to_le_bytes());
                epb.extend((f.len() as u32).to_le_bytes());
                epb.extend((f.len() as u32).to_le_bytes());
                epb.extend(f);
                block(&mut cap, 6, &epb);
            }
            return cap;
        }
        let ns = container == "pcap-ns";
        cap.extend(if ns { 0xa1b2_3c4du32 } else { 0xa1b2_c3d4u32 }.to_le_bytes());
        cap.extend(2u16.to_le_bytes());
        cap.extend(4u16.to_le_bytes());
        cap.extend([0u8; 8]);
        cap.extend(65535u32.to_le_bytes());
        cap.extend(1u32.to_le_bytes());
        for (t, f) in &frames {
            cap.extend(1_700_000_000u32.to_le_bytes());
            let frac = if ns { *t } else { t / 1000 };
            cap.extend((frac as u32).to_le_bytes());
            cap.extend((f.len() as u32).to_le_bytes());
            cap.extend((f.len() as u32).to_le_bytes());
            cap.extend(f);
        }
        cap
    }

    /// The timestamp resolution comes from the capture header: a microsecond pcap cannot
    /// measure 400 ns (both frames read the same microsecond), so the latency reads `< 1 us`,
    /// never `0 ns`; a nanosecond pcap and a nanosecond pcapng interface measure it.
    #[test]
    fn latency_below_the_capture_resolution_reads_less_than_it() {
        for (container, tsresol, resolution, shown) in [
            ("pcap-us", 0, 1000, "< 1 us/< 1 us"),
            ("pcap-ns", 0, 1, "400 ns/400 ns"),
            ("pcapng", 6, 1000, "< 1 us/< 1 us"),
            ("pcapng", 9, 1, "400 ns/400 ns"),
        ] {
            let cap = timed_exchange(container, tsresol);
            let (mut engine, err) =
                crate::analyze::analyze_reader(&cap[..], crate::engine::EngineConfig::default());
            assert!(err.is_none(), "{container}: {err:?}");
            let snap = engine.snapshot(engine.last_ts());
            assert_eq!(
                snap.summary.ts_resolution_ns, resolution,
                "{container} {tsresol}"
            );
            let out = render(&snap);
            let row = out
                .lines()
                .find(|l| l.starts_with("192.0.2.1 > 192.0.2.2"))
                .unwrap_or_else(|| panic!("the request flow in\n{out}"));
            assert!(row.ends_with(shown), "{container} {tsresol}: {row}");
        }
    }

    fn analyzed(name: &str) -> Snapshot {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(format!("{name}.pcap"));
        let file = std::fs::File::open(path).expect("fixture");
        let (mut engine, err) =
            crate::analyze::analyze_reader(file, crate::engine::EngineConfig::default());
        assert!(err.is_none(), "{err:?}");
        engine.snapshot(0)
    }

    /// The reordering line under a flow counts in the right number.
    #[test]
    fn reordering_lines_use_singulars() {
        let out = render(&analyzed("reorder_duplicate"));
        assert!(
            out.contains("  reordered 1 (at most 1 PSN late), 1 NAK caused by reordering"),
            "{out}"
        );
        assert!(
            !out.contains(" 1 PSNs") && !out.contains(" 1 NAKs"),
            "{out}"
        );
    }

    /// One QP seen at two points is two rows: each says where when the flows were seen at
    /// more than one point, and none does otherwise.
    #[test]
    fn rows_say_where_when_flows_were_seen_at_several_points() {
        let out = render(&analyzed("sll2_forwarding"));
        for at in ["if3/ingress", "if5/egress", "if3/egress", "if5/ingress"] {
            assert!(out.contains(&format!("\n  at {at}\n")), "{at} in\n{out}");
        }
        let one = render(&analyzed("psn_gap"));
        assert!(!one.contains("  at "), "{one}");
    }

    #[test]
    fn flow_rows_are_119_columns_wide() {
        let mut out = String::new();
        flow_line(
            &mut out,
            [
                &fit("2001:db8:1::10 > 2001:db8:2::20", 29),
                &format::qp(0xff_ffff),
                &format::count(999_949),
                &format::bytes(1000 << 20),
                &format::rate(999.9e9),
                &format::count(99_949),
                &format::count(99_949),
                &format::count(9_999),
                &format::count(99_949),
                &format::count(99_949),
                "63/7",
                &format!(
                    "{}/{}",
                    format::ns(Some(999_000)),
                    format::ns(Some(999_000))
                ),
            ],
            &FlowLayout::FIXED,
        );
        assert_eq!(out.trim_end_matches('\n').chars().count(), 119, "{out}");
    }

    /// On a terminal the table fits its width: at 80 columns whole columns go, the problem
    /// counts (gaps, NAKs, CNP, CE) last; wider, the addresses get room instead of `~`.
    #[test]
    fn flow_table_fits_the_terminal() {
        let narrow = FlowLayout::fit(79, 40);
        assert!(narrow.width() <= 79, "{narrow:?}");
        for kept in [0, 1, 5, 7, 8, 9] {
            assert!(
                narrow.shown[kept],
                "{} dropped at 80 columns",
                FLOW_HEADER[kept]
            );
        }
        let wide = FlowLayout::fit(199, 60);
        assert!(wide.shown.iter().all(|s| *s));
        assert_eq!(wide.widths[0], 60, "addresses as wide as the longest pair");
        assert_eq!(FlowLayout::fit(119, 29), FlowLayout::FIXED);
        let snap = analyzed("psn_gap");
        let text = render_for(&snap, Some(80));
        let table: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("SRC > DST"))
            .take(2)
            .collect();
        assert!(table.iter().all(|l| l.chars().count() <= 79), "{table:?}");
        assert!(
            table[0].contains("NAKS") && table[0].contains("GAPS"),
            "{table:?}"
        );
    }

    /// On an 80-column terminal the summary, latency, ECMP, steps and alert lines fit too (the
    /// PFC and mirror tables keep their fixed columns); files and pipes keep one line each.
    #[test]
    fn prose_and_summary_lines_fit_a_narrow_terminal() {
        for name in [
            "reorder_duplicate",
            "mixed_demo",
            "loss_nak_go_back_n",
            "mirror_loss",
        ] {
            let snap = analyzed(name);
            let narrow = render_for(&snap, Some(80));
            for header in ["PFC IFACE", "MIRROR SESSION"] {
                let section: Vec<&str> = narrow
                    .lines()
                    .skip_while(|l| !l.starts_with(header))
                    .take_while(|l| !l.is_empty())
                    .collect();
                assert!(
                    section.iter().all(|l| l.chars().count() <= 80),
                    "{name}: {section:#?}"
                );
            }
            let wide: Vec<&str> = narrow.lines().filter(|l| l.chars().count() > 80).collect();
            // Flow rows of a long capture path may not fit; every other line, the PFC and
            // mirror sections' too, fits the terminal.
            assert!(
                wide.iter().all(|l| l.contains("/capture ")),
                "{name}: {wide:#?}"
            );
            let fixed = render(&snap);
            assert!(
                fixed
                    .lines()
                    .any(|l| l.starts_with("frames ") && l.contains("unsupported")),
                "{name}: one summary line at the fixed width:\n{fixed}"
            );
        }
    }

    /// On a host with an RDMA device the table gains the owners of the listed flows and the
    /// NIC counters, within 120 columns; elsewhere neither section.
    #[test]
    fn owners_and_nic_sections() {
        use crate::sink::metrics::tests::{fixture_snapshot, with_host};
        let bare = render(&fixture_snapshot(&["rc_send_write_read"]));
        assert!(!bare.contains("QP OWNER") && !bare.contains("NIC PORT"));
        let snap = with_host(fixture_snapshot(&["rc_send_write_read"]));
        let out = render(&snap);
        let f = &snap.flows[0];
        let owner_line = out
            .lines()
            .skip_while(|l| !l.starts_with("QP OWNER"))
            .nth(1)
            .unwrap_or_else(|| panic!("owners section in\n{out}"));
        for want in [
            format::qp(f.dst_qp).as_str(),
            f.direction,
            "ib_write_bw/4242",
            "rxe0/1",
            "RTS",
            "70/90",
        ] {
            assert!(owner_line.contains(want), "{want} in {owner_line}");
        }
        let nic: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.starts_with("NIC PORT"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        // The key counter first (with its meaning), then the one that changed, then pause.
        assert_eq!(nic.len(), 3, "{out}");
        assert!(nic[0].contains("out_of_seq_request") && nic[0].contains("2.0"));
        assert!(nic[1].contains("sent_pkts") && nic[1].contains("150.0"));
        assert!(nic[2].contains("rx_pause_ctrl_phy"));
        for l in out.lines() {
            assert!(l.chars().count() <= 120, "{l}");
        }
        assert!(!nic[1].ends_with(' '), "{:?}", nic[1]);
    }

    /// The QP-count remedy lists the connections whose count changes, not every connection:
    /// eight elephants on four modelled paths, one path with three, one with one.
    #[test]
    fn qp_advice_lists_only_the_connections_that_change() {
        use crate::engine::{Engine, EngineConfig};
        use roce_observer_common::frames::RoceFrame;
        let mut e = Engine::new(EngineConfig {
            ecmp_paths: 4,
            ..EngineConfig::default()
        });
        let ports = [49321u16, 51234, 60001, 55555, 50505, 61111, 49999, 53333];
        for n in 0..2000u32 {
            for (q, &port) in ports.iter().enumerate() {
                let f = RoceFrame {
                    src_ip: [192, 0, 2, 1 + q as u8],
                    dst_ip: [192, 0, 2, 100],
                    payload: 1024,
                    udp_sport: port,
                    ..RoceFrame::new(0x0a, 0x100 + q as u32, n)
                }
                .build();
                let t = 1_700_000_000_000_000_000 + u64::from(n) * 20_000 + q as u64;
                e.ingest_frame(t, &f, f.len() as u32, 0);
            }
        }
        let snap = e.snapshot(1_700_000_000_100_000_000);
        let advice = snap.ecmp.modelled.as_ref();
        let q = advice
            .and_then(|m| m.qp_advice.as_ref())
            .expect("a QP-count remedy for the collision");
        let changed = q
            .connections
            .iter()
            .filter(|c| u64::from(c.qps) != c.qps_now)
            .count();
        assert!(changed >= 1 && changed < q.connections.len(), "{q:?}");
        let out = render(&snap);
        let line = out
            .lines()
            .find(|l| l.contains("or QPs per connection"))
            .unwrap_or_else(|| panic!("the remedy in\n{out}"));
        assert_eq!(line.matches("QPs (now").count(), changed, "{line}");
        assert!(!line.contains(" 1 QPs (now 1)"), "{line}");
    }
}
