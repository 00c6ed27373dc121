//! Training steps on the kernel path (`run -i`): collective-like traffic replayed in real time
//! (tcpreplay at the capture's timing, bursts with pauses between them) into a veth pair, the
//! observer's XDP program on the receiving end, and `tcpdump` on the same end. The kernel path
//! builds steps from activity runs (finished ones sixteen to a record, the ones not yet sent
//! and the open run read from the flow map); `analyze` of what tcpdump captured sees the same packets with their times, packet
//! by packet. The two must agree, and both must find the period that was sent.
//!
//! The frames are sent by this test at their times (a real-time thread, absolute deadlines):
//! tcpreplay's relative delays stretched the 1.2 s of traffic to 2 s on a busy machine.
//!
//! The traffic: 30 steps of 40 ms; four QPs (hosts .1-.4 to .10) send a 1,100-byte WRITE every
//! 250 us for 12 ms of each step, QP 0x100 for 4 ms more, its late packets CE-marked and answered
//! by CNPs; a background flow sends one packet every ~3 ms throughout (runs too short to be
//! sent as events: their bytes are spread between map reads).
//!
//! Tolerances, kernel path against `analyze` of the same packets:
//! - period within 0.5%: both are least-squares fits over the same ~30 onsets; spreading a
//!   run's bytes evenly over its bins can move an onset's threshold crossing by one 1 ms bin,
//!   which moves a fit over 30 steps by well under 0.5%; and each within 1% (what the docs
//!   promise) of the period as sent: the least-squares period of the steps' first frames in the
//!   capture, so that a sender delayed by a busy machine changes the expectation with the
//!   traffic (`as_sent`);
//! - `count` within 1: a step cut by the start or the end of the replay window may fall either
//!   side of the "shorter than most" rule when its first bin is spread differently;
//! - `comm_fraction` within 0.05: two 1 ms bins of a 40 ms period (a step's first and last bin
//!   are where even spreading and per-packet bins differ);
//! - the same single straggler (QP 0x100), late in as many steps within 2, its mean lag within
//!   0.5 ms of analyze's and within 1 ms of its lag as sent (4 ms scheduled; from the capture:
//!   its last frame per step against the median of the four QPs'): run ends are packet times on both
//!   paths (the kernel's precise clock, tcpdump's timestamps, microseconds apart); the slack is
//!   the steps counted differently at the window's edges;
//! - CE evidence within 10% and CNP evidence present on both (CNP times are spread over their
//!   signal run on the kernel path).

use std::{path::Path, time::Duration};

use integration_tests::{
    netns::{Observer, VethNs},
    require_root,
};
use roce_observer_common::{frames::RoceFrame, opcode::OP_CNP};
use serde_json::Value;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const PERIOD: u64 = 40 * MS;
const STEPS: u64 = 30;
const COMM: u64 = 12 * MS;
const DELAY: u64 = 4 * MS;
const QPS: u32 = 4;
// `as_sent` takes the median of the four QPs' ends as the mean of the middle two.
const _: () = assert!(QPS == 4);
/// Between two packets of one QP in its burst (under the 1 ms run gap; sparse enough for
/// tcpreplay to keep the capture's timing on a busy machine).
const GAP: u64 = 250 * US;

/// A frame of the traffic: when it is due (since the start), its bytes, and the step and QP
/// index of a burst's data frame (`None` for CNPs and the background flow).
struct Frame {
    at: u64,
    bytes: Vec<u8>,
    burst: Option<(u64, u32)>,
}

/// The frames, in time order.
fn traffic() -> Vec<Frame> {
    let mut out = Vec::new();
    let mut psn = [0u32; QPS as usize];
    for step in 0..STEPS {
        let start = step * PERIOD;
        for q in 0..QPS {
            let len = if q == 0 { COMM + DELAY } else { COMM };
            // A fixed stagger per QP, so the flows' packets interleave.
            let mut t = start + u64::from(q) * GAP / u64::from(QPS);
            while t < start + len {
                let late = q == 0 && t >= start + COMM;
                let frame = RoceFrame {
                    src_ip: [192, 0, 2, 1 + q as u8],
                    dst_ip: [192, 0, 2, 10],
                    tos: (26 << 2) | if late { 3 } else { 2 },
                    payload: 1024,
                    udp_sport: 49152 + q as u16,
                    ..RoceFrame::new(0x0a, 0x100 + q, psn[q as usize])
                }
                .build();
                out.push(Frame {
                    at: t,
                    bytes: frame,
                    burst: Some((step, q)),
                });
                if late && psn[q as usize].is_multiple_of(4) {
                    let cnp = RoceFrame {
                        src_ip: [192, 0, 2, 10],
                        dst_ip: [192, 0, 2, 1],
                        tos: 48 << 2,
                        ..RoceFrame::new(OP_CNP, 0x200, 0)
                    }
                    .build();
                    out.push(Frame {
                        at: t + 5 * US,
                        bytes: cnp,
                        burst: None,
                    });
                }
                psn[q as usize] += 1;
                t += GAP;
            }
        }
    }
    // Background: 192.0.2.9 -> .10, one small packet every 2.9-3.3 ms.
    let (mut t, mut psn, mut i) = (0, 0, 0u64);
    while t < STEPS * PERIOD {
        let frame = RoceFrame {
            src_ip: [192, 0, 2, 9],
            dst_ip: [192, 0, 2, 10],
            tos: (26 << 2) | 2,
            payload: 64,
            ..RoceFrame::new(0x0a, 0x99, psn)
        }
        .build();
        out.push(Frame {
            at: t,
            bytes: frame,
            burst: None,
        });
        psn += 1;
        i += 1;
        t += 2_900 * US + (i * 7919 % 5) * 100 * US;
    }
    out.sort_by_key(|f| f.at);
    out
}

/// The traffic as it went out, from the capture's timestamps (not from the observers): the
/// least-squares period of the steps' onsets (each step's first data frame), the steps seen,
/// and QP 0x100's mean lag (its last frame in a step against the median of the four QPs' last
/// frames: the engine's rule, docs/metrics.md "Training steps").
#[derive(Debug)]
struct AsSent {
    period_ms: f64,
    steps: u64,
    lag_ms: f64,
}

impl AsSent {
    /// Whether the traffic as sent is still the steps it is meant to be, for the comparison to
    /// mean anything: every step, the period within 5% of the schedule's, QP 0x100's lag
    /// within 1 ms of its scheduled 4 ms.
    fn kept_shape(&self) -> bool {
        let (period, delay) = (PERIOD as f64 / 1e6, DELAY as f64 / 1e6);
        self.steps == STEPS
            && (self.period_ms - period).abs() <= 0.05 * period
            && (self.lag_ms - delay).abs() <= 1.0
    }
}

/// `AsSent` of the capture tcpdump wrote (its frames and timestamps, read as `analyze` reads
/// them; the steps and the lag from the frames' own times, not from the observer's analysis),
/// each captured frame matched to the frame built by `traffic()` by its bytes.
fn as_sent(pcap: &Path, frames: &[Frame]) -> AsSent {
    let tag: std::collections::HashMap<&[u8], (u64, u32)> = frames
        .iter()
        .filter_map(|f| Some((f.bytes.as_slice(), f.burst?)))
        .collect();
    // Per step: onset and each QP's last frame, ns.
    let mut steps: std::collections::BTreeMap<u64, (u64, [u64; QPS as usize])> =
        std::collections::BTreeMap::new();
    let file = std::fs::File::open(pcap).expect("open the capture");
    let end = roce_observer::wire::capture::read_capture(
        file,
        |_| {},
        |f| {
            if let Some(&(step, q)) = tag.get(f.data) {
                let s = steps.entry(step).or_insert((u64::MAX, [0; QPS as usize]));
                s.0 = s.0.min(f.ts_ns);
                s.1[q as usize] = s.1[q as usize].max(f.ts_ns);
            }
        },
    );
    assert!(end.error.is_none(), "read the capture: {:?}", end.error);
    let n = steps.len() as f64;
    let (sk, ss) = steps
        .iter()
        .fold((0.0, 0.0), |a, (&k, s)| (a.0 + k as f64, a.1 + s.0 as f64));
    let (mk, ms) = (sk / n, ss / n);
    let (cov, var) = steps.iter().fold((0.0, 0.0), |a, (&k, s)| {
        let dk = k as f64 - mk;
        (a.0 + dk * (s.0 as f64 - ms), a.1 + dk * dk)
    });
    let lag_ns = steps
        .values()
        .map(|(_, ends)| {
            let mut sorted = *ends;
            sorted.sort_unstable();
            let median = (sorted[1] as f64 + sorted[2] as f64) / 2.0;
            ends[0] as f64 - median
        })
        .sum::<f64>()
        / n;
    AsSent {
        period_ms: cov / var / 1e6,
        steps: steps.len() as u64,
        lag_ms: lag_ns / 1e6,
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// One observation: tcpdump and `run -i` on the receiving end, the frames sent at their times.
/// Returns how many frames went out more than 1 ms late, and `run`'s final document; the
/// capture is in `captured`.
fn observe(ns: &VethNs, frames: &[Frame], captured: &Path) -> (usize, String) {
    let tcpdump = ns
        .tcpdump(&["-i", &ns.b, "-B", "65536", "-U", "-n"], captured)
        .expect("tcpdump starts");
    let observer = Observer::start(ns, &["-i", &ns.b, "--json", "--interval", "0.2"])
        .expect("observer attaches");
    // At the traffic's own timing: the pauses between bursts are the point.
    let timed: Vec<(u64, &str, &[u8])> = frames
        .iter()
        .map(|f| (f.at, ns.a.as_str(), f.bytes.as_slice()))
        .collect();
    let late = ns.send_timed(&timed).expect("send the frames");
    eprintln!(
        "frames sent more than 1 ms late: {late} of {}",
        frames.len()
    );
    // Let the receiving end finish with the last frames, and tcpdump write them: libpcap hands
    // over a partly filled buffer block after its 1 s timeout, and a stop before that lost the
    // last frames. (Immediate mode, a wakeup per frame, dropped three frames in four here.)
    std::thread::sleep(Duration::from_millis(1500));
    let out = observer.stop().expect("observer stops cleanly");
    // A clean stop flushes it.
    tcpdump.stop().expect("tcpdump stops cleanly");

    (late, out)
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn run_on_a_veth_reports_the_steps_analyze_finds() {
    require_root();
    let ns = VethNs::new().expect("namespace with a veth pair");
    let dir = std::env::temp_dir().join(format!("roce-observer-steps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let captured = dir.join("captured.pcap");
    let frames = traffic();

    // The observers are judged against the traffic as it went out (`AsSent`, from the
    // capture's own timestamps), so a sender delayed on a busy machine changes the expected
    // values with the traffic rather than failing the test (a clean-clone run once had every
    // attempt 13-22% of its frames more than 1 ms late: judged against the schedule, it
    // failed). An attempt is repeated, at most six times, a second apart, only when the capture
    // misses frames (tcpdump drops when it falls behind: the reference must hold every frame)
    // or when the traffic as sent lost its shape (`AsSent::kept_shape`); the last complete
    // attempt is judged.
    const ATTEMPTS: usize = 6;
    let mut best: Option<(usize, usize, Value, Value, AsSent)> = None;
    for attempt in 1..=ATTEMPTS {
        let (late, out) = observe(&ns, &frames, &captured);
        let live: Value = serde_json::from_str(&out).expect("run --json parses");
        let offline = integration_tests::analyze_json(&captured, &[]);
        let complete = offline["summary"]["total_packets"].as_u64() == Some(frames.len() as u64);
        let mut shape = String::new();
        if complete {
            let sent = as_sent(&captured, &frames);
            let kept = sent.kept_shape();
            shape = format!(", as sent {sent:?}");
            best = Some((attempt, late, live, offline.clone(), sent));
            if kept {
                break;
            }
        }
        eprintln!(
            "attempt {attempt}: {late} frames late, capture holds {} of {} frames{shape}{}",
            offline["summary"]["total_packets"],
            frames.len(),
            if attempt < ATTEMPTS { ": again" } else { "" }
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let (attempt, late, live, offline, sent) =
        best.expect("no attempt's capture held every frame (tcpdump dropped frames each time)");
    let _ = std::fs::remove_dir_all(&dir);
    let (k, a) = (&live["steps"], &offline["steps"]);
    let context = format!(
        "kernel path {k}\nanalyze {a}\n{late} frames sent late in attempt {attempt}; \
         as sent: {sent:?}; frames: {} sent, {} seen by run, {} captured",
        frames.len(),
        live["summary"]["total_packets"],
        offline["summary"]["total_packets"]
    );
    eprintln!("{context}");
    // First whether the traffic is what the comparison needs (else the steps' absence says
    // nothing about the observers).
    assert!(
        sent.kept_shape(),
        "the sender could not keep the traffic's shape (a machine too busy for this test)\n{context}"
    );
    assert!(a.is_object(), "analyze finds no steps\n{context}");
    assert!(k.is_object(), "run -i finds no steps\n{context}");
    let (kp, ap) = (f(&k["period_ms"]), f(&a["period_ms"]));
    assert!((kp - ap).abs() <= 0.005 * ap, "period\n{context}");
    for p in [kp, ap] {
        assert!(
            (p - sent.period_ms).abs() <= 0.01 * sent.period_ms,
            "period {p}\n{context}"
        );
    }
    let (kc, ac) = (k["count"].as_u64(), a["count"].as_u64());
    assert!(
        kc.zip(ac)
            .is_some_and(|(x, y)| x.abs_diff(y) <= 1 && y + 2 >= sent.steps),
        "count\n{context}"
    );
    assert!(
        (f(&k["comm_fraction"]) - f(&a["comm_fraction"])).abs() <= 0.05,
        "comm_fraction\n{context}"
    );

    let stragglers = |s: &Value| s["stragglers"].as_array().cloned().unwrap_or_default();
    let (ks, as_) = (stragglers(k), stragglers(a));
    assert_eq!((ks.len(), as_.len()), (1, 1), "stragglers\n{context}");
    let (kg, ag) = (&ks[0], &as_[0]);
    for g in [kg, ag] {
        assert_eq!(
            (g["src_ip"].as_str(), g["dst_qp"].as_u64()),
            (Some("192.0.2.1"), Some(0x100)),
            "straggler\n{context}"
        );
    }
    let late = |g: &Value| g["late_steps"].as_u64().unwrap_or(0);
    assert!(late(kg).abs_diff(late(ag)) <= 2, "late steps\n{context}");
    let (kl, al) = (f(&kg["mean_lag_ms"]), f(&ag["mean_lag_ms"]));
    assert!((kl - al).abs() <= 0.5, "lag\n{context}");
    assert!((kl - sent.lag_ms).abs() <= 1.0, "lag\n{context}");
    let (kce, ace) = (f(&kg["evidence"]["ce"]), f(&ag["evidence"]["ce"]));
    assert!(ace > 0.0 && (kce - ace).abs() <= 0.1 * ace, "CE\n{context}");
    assert!(
        f(&kg["evidence"]["cnp"]) > 0.0 && f(&ag["evidence"]["cnp"]) > 0.0,
        "CNP\n{context}"
    );
}
