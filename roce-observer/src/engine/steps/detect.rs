//! Step detection on the retained window, run when a snapshot is taken:
//! 1. the period: the autocorrelation of the 1 ms byte series (mean removed, by FFT, each lag
//!    normalised by its overlap); the first peak after the first zero crossing that reaches 80%
//!    of the highest one, refined by parabolic interpolation; below [`MIN_CONFIDENCE`] the
//!    series is smoothed ([`SMOOTHING`]) and tried again, and failing every width the traffic is
//!    not periodic;
//! 2. the steps: bins above Otsu's threshold form bursts (gaps under a tenth of the period
//!    closed); burst onsets are fitted to a grid `a + k x period` starting from the biggest
//!    burst, off-grid onsets (background traffic, splits inside a burst) are dropped, and the
//!    period is refined by least squares over every onset kept, so the error shrinks with the
//!    number of steps; idle stretches just leave grid slots empty;
//! 3. stragglers: per step, each followed flow's last data time in the step's window; the flow
//!    that ends last, and its lag behind the median flow.

use std::collections::{BTreeMap, HashMap};

use roce_observer_common::FlowKey;

use super::{BIN_NS, Signal, Steps};
use crate::engine::flows::FastHash;
use crate::report::{StepSpan, StepsSnapshot, Straggler, StragglerEvidence, show_ip};

/// Fewer steps than this on the grid: not reported.
pub const MIN_STEPS: usize = 5;
/// Normalised autocorrelation the period must reach.
pub const MIN_CONFIDENCE: f64 = 0.3;
/// Shortest period, bins: below this a 1 ms series cannot show compute and communication.
const MIN_PERIOD_BINS: f64 = 4.0;
/// Box-filter widths, bins, the series is smoothed with (through its spectrum) when the raw
/// autocorrelation (width 1) stays under [`MIN_CONFIDENCE`]; the width giving the highest
/// confidence wins. Packets that arrive in clumps (a virtual
/// NIC delivering a batch at a time: Soft-RoCE under qemu TCG puts 10-50 packets in one 1 ms
/// bin, then nothing for several) make the 1 ms series so spiky that a plain 500 ms step period
/// has a normalised autocorrelation of 0.2; a 16 ms box brings it to 0.55. A period found at
/// width `w` must be at least `4 w` bins: the smoothing correlates lags up to `w` by itself.
const SMOOTHING: [usize; 4] = [1, 4, 16, 64];
/// A peak near half the picked lag that reaches this share of it is taken as the period
/// (the octave check in `peak`).
const OCTAVE: f64 = 0.7;
/// A flow is compared in a step only when it carries at least this share of the bytes of the
/// step's biggest flow (its peers). Collective flows carry comparable shares (a ring or tree
/// step moves about the same bytes on every QP); the flows that answer or start them carry a
/// hundredth (READ requests: 8 x 78 B against 64 x 1,100 B of responses). A tenth keeps an order
/// of magnitude from both.
const PEER_SHARE: f64 = 0.1;
/// The finer-grid check on the onsets tries the period divided by 2 up to this.
const MAX_DIVISOR: usize = 4;
/// Steps listed in `recent`.
const RECENT: usize = 10;
/// Stragglers listed.
const MAX_STRAGGLERS: usize = 20;

/// In-place radix-2 FFT (`re.len()` a power of two); `inverse` is unnormalised.
pub(super) fn fft(re: &mut [f64], im: &mut [f64], inverse: bool) {
    let n = re.len();
    let mut j = 0;
    for i in 1..n {
        let mut bit = n >> 1;
        while j & bit != 0 {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if i < j {
            re.swap(i, j);
            im.swap(i, j);
        }
    }
    let sign = if inverse { 1.0 } else { -1.0 };
    // Twiddles exp(+-2 pi i k / n), computed once and directly (a recurrence drifts over half a
    // million steps); a stage of length `len` uses every (n / len)-th.
    let twiddles: Vec<(f64, f64)> = (0..n / 2)
        .map(|k| {
            let (s, c) = (sign * 2.0 * std::f64::consts::PI * k as f64 / n as f64).sin_cos();
            (c, s)
        })
        .collect();
    let mut len = 2;
    while len <= n {
        let stride = n / len;
        for start in (0..n).step_by(len) {
            for k in 0..len / 2 {
                let (wr, wi) = twiddles[k * stride];
                let (a, b) = (start + k, start + k + len / 2);
                let tr = re[b] * wr - im[b] * wi;
                let ti = re[b] * wi + im[b] * wr;
                re[b] = re[a] - tr;
                im[b] = im[a] - ti;
                re[a] += tr;
                im[a] += ti;
            }
        }
        len <<= 1;
    }
}

/// The period of `x` in bins (fractional) and the normalised autocorrelation there (of the
/// smoothed series when smoothing was needed), or `None` when `x` is not periodic.
pub fn period(x: &[f64]) -> Option<(f64, f64)> {
    let n = x.len();
    if n < 2 * MIN_PERIOD_BINS as usize + 2 {
        return None;
    }
    let mean = x.iter().sum::<f64>() / n as f64;
    let m = (2 * n).next_power_of_two();
    let mut re = vec![0.0; m];
    let mut im = vec![0.0; m];
    for (r, v) in re.iter_mut().zip(x) {
        *r = v - mean;
    }
    fft(&mut re, &mut im, false);
    for (r, i) in re.iter_mut().zip(im.iter_mut()) {
        *r = *r * *r + *i * *i;
        *i = 0.0;
    }
    // The circular autocorrelation, once. A `w`-bin box filter multiplies the power spectrum by
    // its squared gain, i.e. convolves this autocorrelation with a triangle of half-width `w`:
    // done here on the lags the pick reads (two running sums, O(n) a width) instead of an
    // inverse transform of all `m` points a width (an aperiodic full window: 4 inverse FFTs
    // of 2^20 points before).
    fft(&mut re, &mut im, true);
    let lags = n / 2 + 1;
    let at = |w: usize| {
        let r = smoothed(&re, w, lags);
        peak(&r, n).filter(|&(p, _)| p >= (4 * w) as f64)
    };
    // The raw series when it is periodic enough (no smoothing then); else the smoothed one with
    // the highest confidence. Not the first width that passes: on a spiky series the peaks at
    // the period and its multiples are of random heights at light smoothing, and the 80% rule
    // can then pick twice the period (a 500 ms step read as 1 s at 4 bins on a real capture);
    // at the widest valid width those peaks are even and the first one is the period.
    at(SMOOTHING[0]).or_else(|| {
        SMOOTHING[1..]
            .iter()
            .filter_map(|&w| at(w))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    })
}

/// Lags `0..len` of the circular autocorrelation `re` (all its points) of a series, as the
/// autocorrelation of that series after a `w`-bin moving average would be: `re` convolved
/// with the triangle `(w - |j|) / w^2`, `|j| < w` (a box convolved with its mirror image),
/// as a moving sum of a moving sum.
pub(super) fn smoothed(re: &[f64], w: usize, len: usize) -> Vec<f64> {
    if w <= 1 {
        return re[..len.min(re.len())].to_vec();
    }
    let m = re.len() as isize;
    let at = |i: isize| re[i.rem_euclid(m) as usize];
    let lo = 1 - w as isize;
    // once[i - lo] = re[i] + ... + re[i + w - 1], for i in lo..len
    let mut once = Vec::with_capacity(len + w - 1);
    let mut acc: f64 = (lo..lo + w as isize).map(at).sum();
    for i in lo..len as isize {
        once.push(acc);
        acc += at(i + w as isize) - at(i);
    }
    // out[k] = once[k - w + 1] + ... + once[k], i.e. once[k - lo - w + 1 ..= k - lo]
    let scale = 1.0 / (w * w) as f64;
    let mut acc: f64 = once[..w].iter().sum();
    let mut out = Vec::with_capacity(len);
    for k in 0..len {
        out.push(acc * scale);
        if k + w < once.len() {
            acc += once[k + w] - once[k];
        }
    }
    out
}

/// The period pick on an unnormalised circular autocorrelation `re` of an `n`-bin series.
fn peak(re: &[f64], n: usize) -> Option<(f64, f64)> {
    let r0 = re[0];
    if r0.is_nan() || r0 <= 0.0 {
        return None;
    }
    // Lags up to half the series: at least two periods overlap.
    let max_lag = n / 2;
    let r: Vec<f64> = (0..=max_lag)
        .map(|k| re[k] / r0 * n as f64 / (n - k) as f64)
        .collect();
    let start = r.iter().position(|&v| v < 0.0)?;
    let vmax = r[start..max_lag].iter().copied().fold(f64::MIN, f64::max);
    if vmax < MIN_CONFIDENCE {
        return None;
    }
    let is_peak = |k: usize| r[k] >= r[k - 1] && r[k] >= r[k + 1];
    let mut k = (start.max(1)..max_lag).find(|&k| r[k] >= 0.8 * vmax && is_peak(k))?;
    while k + 1 < max_lag && r[k + 1] > r[k] {
        k += 1;
    }
    // Octave check: steps whose shape alternates (every other step alike) correlate better at
    // twice the period than at the period, and the 80% rule then reads 2P (a 500 ms Soft-RoCE
    // step read as 1 s: 0.58 at 502 ms against 0.74 at 1004 ms). A peak near half the pick
    // that reaches `OCTAVE` of it is the period.
    loop {
        let half = k / 2;
        let tol = (half / 10).max(2);
        if half < MIN_PERIOD_BINS as usize + tol || half <= start {
            break;
        }
        let best = (half - tol..=half + tol)
            .filter(|&j| j > start && is_peak(j))
            .max_by(|&a, &b| r[a].total_cmp(&r[b]));
        match best {
            Some(j) if r[j] >= OCTAVE * r[k] && r[j] >= MIN_CONFIDENCE => k = j,
            _ => break,
        }
    }
    let (a, b, c) = (r[k - 1], r[k], r[k + 1]);
    let den = a - 2.0 * b + c;
    let shift = if den < 0.0 { 0.5 * (a - c) / den } else { 0.0 };
    let p = k as f64 + shift.clamp(-0.5, 0.5);
    (p >= MIN_PERIOD_BINS).then_some((p, b.min(1.0)))
}

/// Otsu's threshold over a 256-bucket histogram (values clipped at the 99.5th percentile, so
/// that one spike does not squeeze every other bin into the first bucket).
fn otsu(x: &[f64]) -> f64 {
    let mut sorted = x.to_vec();
    sorted.sort_by(f64::total_cmp);
    let top = sorted[((sorted.len() - 1) as f64 * 0.995) as usize];
    if top <= 0.0 {
        return f64::INFINITY;
    }
    const B: usize = 256;
    let mut hist = [0f64; B];
    for v in x {
        hist[((v / top).min(1.0) * (B - 1) as f64) as usize] += 1.0;
    }
    let total = x.len() as f64;
    let sum_all: f64 = hist.iter().enumerate().map(|(i, h)| i as f64 * h).sum();
    let (mut w_lo, mut sum_lo, mut best, mut best_t) = (0.0, 0.0, -1.0, 0);
    for (t, h) in hist.iter().enumerate() {
        w_lo += h;
        let w_hi = total - w_lo;
        if w_lo == 0.0 {
            continue;
        }
        if w_hi == 0.0 {
            break;
        }
        sum_lo += t as f64 * h;
        let d = sum_lo / w_lo - (sum_all - sum_lo) / w_hi;
        let between = w_lo * w_hi * d * d;
        if between > best {
            best = between;
            best_t = t;
        }
    }
    (best_t + 1) as f64 / (B - 1) as f64 * top
}

/// Least squares of onset `s` (bins) against grid index `k`.
#[derive(Default)]
struct Fit {
    n: f64,
    sk: f64,
    ss: f64,
    skk: f64,
    sks: f64,
}

impl Fit {
    fn add(&mut self, k: f64, s: f64) {
        self.n += 1.0;
        self.sk += k;
        self.ss += s;
        self.skk += k * k;
        self.sks += k * s;
    }

    /// (intercept, period), or `None` with fewer than two distinct indices.
    fn line(&self) -> Option<(f64, f64)> {
        let var = self.n * self.skk - self.sk * self.sk;
        if self.n < 2.0 || var <= 0.0 {
            return None;
        }
        let p = (self.n * self.sks - self.sk * self.ss) / var;
        Some(((self.ss - p * self.sk) / self.n, p))
    }
}

/// A burst of bins above the threshold: [start, end) in bins, bytes.
type Burst = (usize, usize, f64);

/// The bursts of `x`, gaps shorter than `close` bins closed.
fn bursts(x: &[f64], thr: f64, close: usize) -> Vec<Burst> {
    let mut out: Vec<Burst> = Vec::new();
    for (i, &v) in x.iter().enumerate() {
        if v < thr {
            continue;
        }
        match out.last_mut() {
            Some(b) if i - b.1 < close => {
                b.1 = i + 1;
                b.2 += v;
            }
            _ => out.push((i, i + 1, v)),
        }
    }
    out
}

/// The grid index `k` whose step start `a + k p` (bins) is nearest to bin `start`, and how far
/// `start` is from it.
fn nearest_step(start: usize, a: f64, p: f64) -> (i64, f64) {
    let k = ((start as f64 - a) / p).round();
    (k as i64, (start as f64 - (a + k * p)).abs())
}

/// Grid slot -> index of the earliest burst on it; and the refined (intercept, period) in bins.
///
/// Slots are chained outward from the anchor, each step's onset measured from the previous
/// step's, not from a line fitted as it goes: a fit over the first two or three onsets takes
/// their jitter for a period error and carries it outward (a Soft-RoCE control run with steps
/// 479-568 ms apart and an autocorrelation period of 488 ms: the onsets next to the biggest
/// burst gave a slope of 435 ms and every farther step fell off that line, so 4 of 12 steps
/// were kept and `steps` was null). Bursts are in time order.
/// The grid goes through burst `anchor` (the biggest burst when `None`).
fn grid(
    bursts: &[Burst],
    p0: f64,
    anchor: Option<usize>,
) -> Option<(BTreeMap<i64, usize>, f64, f64)> {
    let anchor = anchor
        .or_else(|| (0..bursts.len()).max_by(|&a, &b| bursts[a].2.total_cmp(&bursts[b].2)))?;
    let mut slots: BTreeMap<i64, usize> = BTreeMap::new();
    slots.insert(0, anchor);
    let forward: Vec<usize> = (anchor + 1..bursts.len()).collect();
    let backward: Vec<usize> = (0..anchor).rev().collect();
    for (order, dir) in [(forward, 1i64), (backward, -1i64)] {
        // The current slot and the burst that opened it (the first reached going outward).
        let (mut k, mut opener) = (0i64, bursts[anchor].0 as f64);
        for j in order {
            let s = bursts[j].0 as f64;
            let d = (s - opener) * dir as f64;
            let m = (d / p0).round();
            let off = (d - m * p0).abs();
            if off > p0 / 4.0 {
                // Off the grid: background traffic, a split inside a step.
                continue;
            }
            if m == 0.0 {
                // The same step: going backward, an earlier onset of it.
                if dir < 0 {
                    slots.insert(k, j);
                }
                continue;
            }
            k += dir * m as i64;
            opener = s;
            slots.insert(k, j);
        }
    }
    // Fit the chain, then give every burst the slot of that line (within a quarter period,
    // the earliest per slot): a step the chain skipped because the onset it was measured from
    // came late (a late first burst of a step and an early next one, 137 ms apart from the
    // 488 ms expected in the same control run) is on the line. Then once more without the
    // onsets far off the line (more than 4 robust deviations and a bin: a step cut by the start
    // of the capture, a burst of other traffic just before a step).
    let fit_of = |slots: &BTreeMap<i64, usize>| {
        let mut fit = Fit::default();
        for (&k, &j) in slots {
            fit.add(k as f64, bursts[j].0 as f64);
        }
        fit.line()
    };
    let (a, p) = fit_of(&slots)?;
    let mut slots: BTreeMap<i64, usize> = BTreeMap::new();
    for (j, b) in bursts.iter().enumerate() {
        let (k, off) = nearest_step(b.0, a, p);
        if off <= p / 4.0 {
            // Bursts are in time order: the first on a slot is its earliest.
            slots.entry(k).or_insert(j);
        }
    }
    let (a, p) = fit_of(&slots)?;
    let residual = |k: i64, j: usize| (bursts[j].0 as f64 - (a + k as f64 * p)).abs();
    let mut dev: Vec<f64> = slots.iter().map(|(&k, &j)| residual(k, j)).collect();
    dev.sort_by(f64::total_cmp);
    let limit = (4.0 * 1.4826 * dev[dev.len() / 2]).max(1.0);
    slots.retain(|&k, &mut j| residual(k, j) <= limit);
    let (a, p) = fit_of(&slots)?;
    ((p - p0).abs() <= 0.1 * p0).then_some((slots, a, p))
}

/// Analyses of the window's latest part tried when the whole holds no single period: its
/// latest half, then its latest quarter.
const RECENT_PARTS: u32 = 2;

/// The steps of the retained window, or `None` when the traffic is not periodic.
/// `name` gives a flow's interface name and direction.
///
/// When the whole window holds no single period, its latest half and then its latest quarter
/// are analysed: after the step time changed (300 ms steps, then 420 ms: the case an engineer
/// looks at) the window holds two periods, and what matters is the current one. `window_s`
/// says how much was analysed.
pub fn analyse(
    steps: &Steps,
    name: impl Fn(&FlowKey) -> (String, &'static str),
) -> Option<StepsSnapshot> {
    let (first_bin, bins) = steps.series();
    let lo = bins.iter().position(|&b| b > 0)?;
    let hi = bins.iter().rposition(|&b| b > 0)?;
    let x: Vec<f64> = bins.range(lo..=hi).map(|&b| b as f64).collect();
    let origin = (first_bin + lo as u64) * BIN_NS;
    let mut from = 0;
    for part in 0..=RECENT_PARTS {
        if part > 0 {
            from += (x.len() - from) / 2;
        }
        let start = origin + from as u64 * BIN_NS;
        // A part must hold 10 steps at a confidence of 0.5: trying more windows
        // is more chances for random bursts to look periodic (3 of 16 short aperiodic captures
        // did at 5 steps, one still at 10 steps and 0.32).
        if let Some(mut found) = analyse_series(steps, &x[from..], start, &name)
            && (part == 0
                || (found.count >= RECENT_MIN_STEPS && found.confidence >= RECENT_MIN_CONFIDENCE))
        {
            found.retained_s = x.len() as f64 * BIN_NS as f64 / 1e9;
            return Some(found);
        }
    }
    None
}

/// The confidence a grid must reach when most bursts are off it (`analyse_series`).
const DENSE_MIN_CONFIDENCE: f64 = 0.5;

/// Steps a latest part of the window must hold to be reported, and the confidence it must reach.
const RECENT_MIN_STEPS: u64 = 10;
const RECENT_MIN_CONFIDENCE: f64 = 0.5;

/// The confidence `count` steps must reach below 10 steps (`MIN_CONFIDENCE` x sqrt(10 /
/// count)): the fewer the steps, the higher random bursts' autocorrelation peaks (Poisson
/// bursts 100 ms apart on average gave 6 "steps" of 1.16 s at 0.34 over a 7 s capture). From
/// 10 steps on nothing beyond `period`'s own rule (the highest peak at [`MIN_CONFIDENCE`]):
/// the pick may be a lower peak (the 80% rule, the octave check), and real Soft-RoCE captures
/// of 12 steps 499-501 ms apart were picked at 0.25-0.26 on the smoothed series.
fn confidence_needed(count: usize) -> f64 {
    if count >= 10 {
        return 0.0;
    }
    MIN_CONFIDENCE * (10.0 / count.clamp(1, 10) as f64).sqrt()
}

/// The steps of series `x` (1 ms bins from `origin`, ns), or `None` when it is not periodic.
/// The stages, and why each is there: docs/design/steps.md.
fn analyse_series(
    steps: &Steps,
    x: &[f64],
    origin: u64,
    name: &impl Fn(&FlowKey) -> (String, &'static str),
) -> Option<StepsSnapshot> {
    let (p0, confidence) = period(x)?;
    let thr = otsu(x);
    let close = ((p0 / 10.0).round() as usize).max(1);
    let g = StepGrid::fit(x, thr, close, p0)?;
    if !g.periodic(confidence) {
        return None;
    }
    let spans = g.spans(x, thr, close);
    let comm_fraction = comm_fraction(&spans, g.p);
    let bin_ms = BIN_NS as f64 / 1e6;
    let recent = spans
        .iter()
        .skip(spans.len().saturating_sub(RECENT))
        .map(|s| StepSpan {
            start: origin + s.start as u64 * BIN_NS,
            duration_ms: (s.end - s.start) as f64 * bin_ms,
        })
        .collect();
    let grid_ns = Grid {
        a: origin as f64 + g.a * BIN_NS as f64,
        p: g.p * BIN_NS as f64,
    };
    // The first packets of a step may fall in the bin before the threshold is reached.
    let lead = (g.p / 10.0 * BIN_NS as f64) as u64;
    let spans_ns: Vec<(i64, u64, u64)> = spans
        .iter()
        .map(|s| {
            (
                s.step,
                (origin + s.start as u64 * BIN_NS).saturating_sub(lead),
                origin + (s.end + close) as u64 * BIN_NS,
            )
        })
        .collect();
    let stragglers = stragglers(steps, &spans_ns, comm_fraction, &grid_ns, &name);
    Some(StepsSnapshot {
        period_ms: g.p * bin_ms,
        count: g.slots.len() as u64,
        comm_fraction,
        window_s: x.len() as f64 * bin_ms / 1e3,
        retained_s: x.len() as f64 * bin_ms / 1e3,
        confidence,
        recent,
        stragglers,
    })
}

/// The bursts of a series and the step grid through their onsets: step `k` starts at bin
/// `a + k p`; `slots` maps each step on the grid to its onset burst in `found`.
struct StepGrid {
    found: Vec<Burst>,
    slots: BTreeMap<i64, usize>,
    a: f64,
    p: f64,
}

/// One step's communication on the series, in bins: `[start, end)`, `comm` bins of it in its
/// phases; `cut`: it runs to the end of the window.
struct BinSpan {
    step: i64,
    start: usize,
    end: usize,
    comm: usize,
    cut: bool,
}

impl StepGrid {
    /// The grid of the bursts over `thr` (gaps under `close` bins closed), for the
    /// autocorrelation's period `p0` (bins): a burst cut by the window's start set aside, the
    /// finest grid the onsets fill, the step start when steps come in phases, and the cut
    /// burst taken back when it sits on the grid like an onset.
    fn fit(x: &[f64], thr: f64, close: usize, p0: f64) -> Option<StepGrid> {
        let mut found = bursts(x, thr, close);
        let mut lengths: Vec<usize> = found.iter().map(|b| b.1 - b.0).collect();
        lengths.sort_unstable();
        let typical = lengths.get(lengths.len() / 2).copied().unwrap_or(0) as f64;
        let mut cut = None;
        if found.len() > 1 && found[0].0 == 0 && ((found[0].1 - found[0].0) as f64) < 0.8 * typical
        {
            cut = Some(found.remove(0));
        }
        let (mut slots, mut a, mut p) = grid(&found, p0, None)?;
        // Onsets at every `d`-th of the period too (d = 4, 3, 2; at least 0.9 d times the
        // steps on that grid), the finest first, repeatedly: steps that alternate in shape
        // correlate better at twice the period.
        while let Some(finer) = (2..=MAX_DIVISOR).rev().find_map(|d| {
            let q = p / d as f64;
            (q >= MIN_PERIOD_BINS)
                .then(|| grid(&found, q, None))
                .flatten()
                .filter(|g| g.0.len() * 10 >= slots.len() * 9 * d)
        }) {
            (slots, a, p) = finer;
        }
        if let Some(j) = step_start(&found, a, p, close)
            && let Some((s2, a2, p2)) = grid(&found, p, Some(j))
            && s2.len() >= MIN_STEPS
        {
            (slots, a, p) = (s2, a2, p2);
        }
        // The cut burst is a step when it is on the grid before the first step and as long as
        // most onsets.
        if let (Some(b), Some(&first)) = (cut, slots.keys().next()) {
            let mut onsets: Vec<usize> = slots.values().map(|&j| found[j].1 - found[j].0).collect();
            onsets.sort_unstable();
            let (k, off) = nearest_step(b.0, a, p);
            if off <= p / 10.0
                && k < first
                && (b.1 - b.0) as f64 >= 0.8 * onsets[onsets.len() / 2] as f64
            {
                found.insert(0, b);
                for j in slots.values_mut() {
                    *j += 1;
                }
                slots.insert(k, 0);
            }
        }
        Some(StepGrid { found, slots, a, p })
    }

    /// Whether the grid says periodic at the autocorrelation's `confidence`: enough steps for
    /// it, and not most bursts off the grid unless the autocorrelation is strong (dense random
    /// bursts find a burst near every slot by chance).
    fn periodic(&self, confidence: f64) -> bool {
        if self.slots.len() < MIN_STEPS || confidence < confidence_needed(self.slots.len()) {
            return false;
        }
        let off = self
            .found
            .iter()
            .filter(|b| nearest_step(b.0, self.a, self.p).1 > self.p / 10.0)
            .count();
        !(off * 10 > self.found.len() * 6 && confidence < DENSE_MIN_CONFIDENCE)
    }

    /// Each step's span: from its onset while the bins stay at or above the idle level (gaps
    /// under `close` bins bridged), at most 0.9 period; after a gap of `close` bins, a bin
    /// over `thr` starts another phase of the same step.
    fn spans(&self, x: &[f64], thr: f64, close: usize) -> Vec<BinSpan> {
        let idle = idle_level(x, thr);
        self.slots
            .iter()
            .map(|(&step, &j)| {
                let start = self.found[j].0;
                let limit = ((start as f64 + 0.9 * self.p) as usize).min(x.len());
                let (mut end, mut phase_start, mut comm) = (self.found[j].1, start, 0);
                for (i, &v) in x.iter().enumerate().take(limit).skip(end) {
                    if i - end < close {
                        if v >= idle {
                            end = i + 1;
                        }
                    } else if v >= thr {
                        comm += end - phase_start;
                        (phase_start, end) = (i, i + 1);
                    }
                }
                comm += end - phase_start;
                BinSpan {
                    step,
                    start,
                    end,
                    comm,
                    cut: end >= x.len(),
                }
            })
            .collect()
    }
}

/// The idle level: below the burst threshold `thr`, since the tail of a step carried by one
/// late flow is still communication (3 x the mean of the bins under `thr`, at least 5% of the
/// mean burst bin).
fn idle_level(x: &[f64], thr: f64) -> f64 {
    let (lo_sum, lo_n, hi_sum, hi_n) = x.iter().fold((0f64, 0f64, 0f64, 0f64), |a, &v| {
        if v < thr {
            (a.0 + v, a.1 + 1.0, a.2, a.3)
        } else {
            (a.0, a.1, a.2 + v, a.3 + 1.0)
        }
    });
    (3.0 * lo_sum / lo_n.max(1.0))
        .max(0.05 * hi_sum / hi_n.max(1.0))
        .min(thr)
}

/// The mean communication time of the steps not cut by the window's end, as a fraction of
/// the period `p` (bins).
fn comm_fraction(spans: &[BinSpan], p: f64) -> f64 {
    let whole: Vec<f64> = spans
        .iter()
        .filter(|s| !s.cut)
        .map(|s| s.comm as f64)
        .collect();
    if whole.is_empty() {
        0.0
    } else {
        (whole.iter().sum::<f64>() / whole.len() as f64 / p).min(1.0)
    }
}

/// Where a step starts when it communicates in several phases (bursts at several offsets of
/// the period `p`, grid intercept `a`, in bins): the grid goes through the biggest burst, which
/// may be a later phase; a step then spans one phase and the next step's earlier ones, and a
/// flow late in the later phase is not last at the step's end. The step starts with the phase
/// that follows the longest quiet time (the compute between two steps' communication): the
/// bursts are grouped by their offset in the period (within `close` bins), and the group
/// whose median gap before its bursts is the longest wins. Returns one of its bursts (the
/// biggest) to anchor the grid on, or `None` with a single phase.
fn step_start(bursts: &[Burst], a: f64, p: f64, close: usize) -> Option<usize> {
    let offset = |j: usize| (bursts[j].0 as f64 - a).rem_euclid(p);
    let mut order: Vec<usize> = (0..bursts.len()).collect();
    order.sort_by(|&x, &y| offset(x).total_cmp(&offset(y)));
    // Groups of bursts with neighbouring offsets; the last joins the first across the wrap.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &j in &order {
        match groups.last_mut() {
            Some(g) if offset(j) - offset(g[g.len() - 1]) <= close as f64 => g.push(j),
            _ => groups.push(vec![j]),
        }
    }
    if groups.len() > 1 {
        let (first, last) = (offset(groups[0][0]), offset(*order.last()?));
        if first + p - last <= close as f64 {
            let tail = groups.pop()?;
            groups[0].extend(tail);
        }
    }
    let groups: Vec<Vec<usize>> = groups
        .into_iter()
        .filter(|g| g.len() >= MIN_STEPS)
        .collect();
    if groups.len() < 2 {
        return None;
    }
    let gap_before = |j: usize| {
        j.checked_sub(1)
            .map(|i| bursts[j].0.saturating_sub(bursts[i].1))
            .unwrap_or(0)
    };
    let median_gap = |g: &Vec<usize>| {
        let mut gaps: Vec<usize> = g.iter().map(|&j| gap_before(j)).collect();
        gaps.sort_unstable();
        gaps[gaps.len() / 2]
    };
    let best = groups.iter().max_by_key(|g| median_gap(g))?;
    best.iter()
        .copied()
        .max_by(|&x, &y| bursts[x].2.total_cmp(&bursts[y].2))
}

/// The step grid in ns: step `k` starts at `a + k p`; its window is
/// `[start - p/10, start + 0.9 p)`.
struct Grid {
    a: f64,
    p: f64,
}

impl Grid {
    fn slot(&self, t: u64) -> i64 {
        ((t as f64 - self.a + self.p / 10.0) / self.p).floor() as i64
    }
}

#[derive(Default)]
struct Tally {
    compared: u64,
    late: Vec<i64>,
    lag_ns: f64,
}

/// The step whose communication span `[start, end)` (ns, sorted) holds `t`.
fn span_of(spans: &[(i64, u64, u64)], t: u64) -> Option<i64> {
    let i = spans.partition_point(|s| s.1 <= t).checked_sub(1)?;
    (t < spans[i].2).then_some(spans[i].0)
}

/// Flows compared per step: those whose data runs start in the step's communication span
/// (`spans`: step, start, end in ns, bridged gaps included) and that carry at least
/// [`PEER_SHARE`] of the bytes the step's biggest flow carries in it. A flow that sends outside
/// the spans as much as a steady flow would (less than `(1 + comm_fraction) / 2` of its bytes
/// in them) is background traffic and is not compared.
fn stragglers(
    steps: &Steps,
    spans: &[(i64, u64, u64)],
    comm_fraction: f64,
    grid: &Grid,
    name: &impl Fn(&FlowKey) -> (String, &'static str),
) -> Vec<Straggler> {
    let flows: Vec<(&FlowKey, &super::FlowActivity)> = steps.flows().collect();
    // Per step: (flow, its last data time in the step and its bytes in the step).
    // foldhash, not SipHash: these maps take an entry per flow and step (a third of the
    // analysis's instructions with the default hasher).
    let mut ends: BTreeMap<i64, HashMap<usize, (u64, u64), FastHash>> = BTreeMap::new();
    let first = spans.first().map(|s| s.1).unwrap_or(0);
    for (fi, (_, act)) in flows.iter().enumerate() {
        let (mut inside, mut total) = (0u64, 0u64);
        let mut mine: Vec<(i64, u64, u64)> = Vec::new();
        for run in act.all_runs().filter(|r| r.start >= first) {
            total += run.bytes;
            // A run longer than a step is background traffic, not a step's burst.
            if (run.end - run.start) as f64 > 0.9 * grid.p {
                continue;
            }
            if let Some(k) = span_of(spans, run.start) {
                inside += run.bytes;
                mine.push((k, run.end, run.bytes));
            }
        }
        if (inside as f64) < total as f64 * (1.0 + comm_fraction) / 2.0 {
            continue;
        }
        for (k, end, bytes) in mine {
            let e = ends.entry(k).or_default().entry(fi).or_insert((end, 0));
            e.0 = e.0.max(end);
            e.1 += bytes;
        }
    }
    let mut tally: HashMap<usize, Tally, FastHash> = HashMap::default();
    for (&k, step) in &mut ends {
        // Peers only: a flow that carries a small share of the step (READ requests, which end
        // at the step's onset; control messages) is not a part of the step's transfer that
        // could hold it up, and counting its early end pulls the median down and inflates
        // every lag (a Soft-RoCE control run: three request flows of ~700 B per step next to
        // three response flows of ~70 KB).
        let biggest = step.values().map(|e| e.1).max().unwrap_or(0);
        step.retain(|_, e| e.1 as f64 >= PEER_SHARE * biggest as f64);
        if step.len() < 2 {
            continue;
        }
        let mut sorted: Vec<u64> = step.values().map(|e| e.0).collect();
        sorted.sort_unstable();
        let mid = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) {
            (sorted[mid - 1] as f64 + sorted[mid] as f64) / 2.0
        } else {
            sorted[mid] as f64
        };
        let last = sorted[sorted.len() - 1];
        // Ties: the lowest flow index, so that the result does not depend on hash order.
        let last_flow = step
            .iter()
            .filter(|(_, e)| e.0 == last)
            .map(|(f, _)| *f)
            .min();
        for (&fi, &(end, _)) in step.iter() {
            let t = tally.entry(fi).or_default();
            t.compared += 1;
            t.lag_ns += end as f64 - median;
            if Some(fi) == last_flow {
                t.late.push(k);
            }
        }
    }
    let min_lag_ns = (grid.p * 0.01).max(100_000.0);
    let mut out: Vec<Straggler> = tally
        .into_iter()
        .filter_map(|(fi, t)| {
            let lag = t.lag_ns / t.compared as f64;
            let late = t.late.len() as u64;
            if late < 2 || late * 4 < t.compared || lag < min_lag_ns {
                return None;
            }
            let (key, act) = flows[fi];
            let (iface, direction) = name(key);
            Some(Straggler {
                src_ip: show_ip(key.src_ip),
                dst_ip: show_ip(key.dst_ip),
                dst_qp: key.dst_qp,
                iface,
                direction,
                late_steps: late,
                steps: t.compared,
                mean_lag_ms: lag / 1e6,
                evidence: evidence(steps, key, act, &t.late, grid),
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.mean_lag_ms
            .total_cmp(&a.mean_lag_ms)
            .then_with(|| (a.src_ip, a.dst_ip, a.dst_qp).cmp(&(b.src_ip, b.dst_ip, b.dst_qp)))
    });
    out.truncate(MAX_STRAGGLERS);
    out
}

/// What was seen in the windows of `late` steps: the flow's CE marks and retransmissions, the
/// CNPs and NAKs its destination host sent its source host, and every XOFF's pause time.
fn evidence(
    steps: &Steps,
    key: &FlowKey,
    act: &super::FlowActivity,
    late: &[i64],
    grid: &Grid,
) -> StragglerEvidence {
    let in_late = |t: u64| late.binary_search(&grid.slot(t)).is_ok();
    let mut ev = StragglerEvidence::default();
    for run in act.all_runs().filter(|r| in_late(r.start)) {
        ev.ce += run.ce;
        ev.retransmits += run.retransmits;
    }
    for (k, a) in steps.flows() {
        if k.src_ip != key.dst_ip || k.dst_ip != key.src_ip {
            continue;
        }
        for (_, s) in a.all_signals().filter(|(t, _)| in_late(*t)) {
            match s {
                Signal::Cnp => ev.cnp += 1,
                Signal::Nak => ev.naks += 1,
            }
        }
    }
    ev.pause_us = steps
        .pauses()
        .filter(|(t, _)| in_late(*t))
        // A fold, not `sum`: an empty f64 sum is -0.0.
        .fold(0.0, |acc, (_, ns)| acc + *ns as f64 / 1e3);
    ev
}
