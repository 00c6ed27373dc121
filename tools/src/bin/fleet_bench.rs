//! `fleet-bench OUT [OBSERVERS] [INTERVALS] [FLOWS]`: a synthetic fleet written by the real log
//! writer, for sizing the ClickHouse store (tests/fleet/chdb_scale.py loads it and times the
//! queries; docs/benchmarks.md, "Fleet store").
//!
//! Every observer sees the same FLOWS RC WRITE flows (one path through all observers; ECN
//! capable, DSCP 26, as RoCE with DCQCN sends them), ten requests per flow per 10 s interval,
//! ending at the present; every 50th flow loses one PSN per interval between observer 1 and
//! observer 2, so the loss queries have something to find. Observers 2 to N see the same
//! packets, so one engine stands for them and each writes its own log directory `OUT/obs-N`
//! (`--observer-id obs-N`) with the real log writer: the cost is the writers', not N engines'.

use std::path::PathBuf;

use anyhow::Context as _;
use roce_observer::{
    engine::{Engine, EngineConfig},
    sink::logdir::{LogDir, LogDirConfig, now_ns},
};
use roce_observer_common::{frames::RoceFrame, opcode::RDMA_WRITE_ONLY};

const INTERVAL_NS: u64 = 10_000_000_000;
const PER_INTERVAL: u32 = 10;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = PathBuf::from(
        args.first()
            .context("usage: fleet-bench OUT [OBSERVERS=20] [INTERVALS=360] [FLOWS=1000]")?,
    );
    let num = |i: usize, default: u64| -> anyhow::Result<u64> {
        args.get(i)
            .map_or(Ok(default), |s| s.parse().context("a number"))
    };
    let (observers, intervals, flows) = (num(1, 20)?, num(2, 360)?, num(3, 1000)?);
    let start = now_ns().saturating_sub(intervals * INTERVAL_NS);
    let t0 = std::time::Instant::now();
    let mut frame = Vec::new();
    // Engine 0 is observer 1's; engine 1 stands for every observer after the loss.
    let mut engines = [
        Engine::new(EngineConfig::default()),
        Engine::new(EngineConfig::default()),
    ];
    let mut logs = (1..=observers)
        .map(|obs| {
            LogDir::open(
                LogDirConfig {
                    dir: out.join(format!("obs-{obs}")),
                    max_bytes: 64 << 20,
                    max_files: 1000,
                    max_age_ns: 3600 * 1_000_000_000,
                    full_every_ns: 600 * 1_000_000_000,
                    observer_id: Some(format!("obs-{obs}")),
                },
                start,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    for i in 0..intervals {
        let base = start + i * INTERVAL_NS;
        for (e, engine) in engines.iter_mut().enumerate() {
            for f in 0..flows {
                let lossy = e == 1 && f % 50 == 0;
                for k in 0..PER_INTERVAL {
                    // The third request of the interval never reaches this observer.
                    if lossy && k == 2 {
                        continue;
                    }
                    let psn = (i as u32 * PER_INTERVAL + k) & 0xff_ffff;
                    let qp = 0x100 + f as u32;
                    let mut r = RoceFrame::new(RDMA_WRITE_ONLY, qp, psn);
                    r.dma_len = 1024;
                    r.payload = 64;
                    r.tos = (26 << 2) | 2;
                    r.src_ip = [10, (f >> 8) as u8, f as u8, 1];
                    r.dst_ip = [10, (f >> 8) as u8, f as u8, 2];
                    frame.clear();
                    r.build_into(&mut frame);
                    let ts = base + f * 1000 + u64::from(k) * 100_000_000;
                    engine.ingest_frame(ts, &frame, frame.len() as u32, 1);
                }
            }
        }
        let ts = base + INTERVAL_NS - 1;
        let snaps = [engines[0].snapshot(ts), engines[1].snapshot(ts)];
        for (n, log) in logs.iter_mut().enumerate() {
            log.write(&snaps[usize::from(n > 0)], ts);
        }
        if (i + 1) % 6 == 0 {
            eprintln!(
                "{} of {intervals} intervals ({:.0} s so far)",
                i + 1,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let mut lines = 0;
    for log in &mut logs {
        log.finish();
        lines += log.health().records_written;
    }
    println!(
        "fleet: {observers} observers x {intervals} intervals x {flows} flows, {lines} lines \
         written in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
