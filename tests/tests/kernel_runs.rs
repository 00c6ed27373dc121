//! Layer 1 for training steps on the kernel path: frames through the XDP and TC programs with
//! BPF_PROG_TEST_RUN, with pauses between them, and the activity runs the programs keep
//! (roce-observer-common/src/run.rs) read back: a data run of 8 packets finished by a packet
//! more than 1 ms later goes to the flow's batch (a map of its own) with its bytes, CE marks
//! and packets, and sixteen such runs are one ring-buffer record; a run of 2 packets is not
//! batched but counted in the flow record; the open run is in the flow record; a CNP run
//! finished by a CNP 2 ms later is one event. Only the real programs' clocks are used, so the pauses are sleeps of
//! 3 ms, well above the 1 ms gap, and the packets of one run are back to back (microseconds
//! apart), well below it. A batch whose record the full ring buffer loses is counted in the
//! flow record as short runs are, so its bytes are still there, and so is a run whose flow
//! finds no room for a batch.

use std::time::{Duration, Instant};

use integration_tests::{fill_event_ring, ipv6_roce_frame, require_root};
use roce_observer::source::kernel::{KernelOptions, KernelSource};
use roce_observer_common::{
    Counter, EventBody,
    frames::RoceFrame,
    opcode::OP_CNP,
    run::{DataRun, RUN_BATCH, RunBatch},
};

/// The batch of finished runs of the flow to `qp`, if it has one.
fn batch_of(src: &mut KernelSource, qp: u32) -> Option<RunBatch> {
    let batches = src.read_batches().expect("run batches");
    batches
        .into_iter()
        .find(|(k, _)| k.dst_qp == qp)
        .map(|(k, b)| {
            assert_eq!(b.head.flow, k, "the head names the flow");
            b
        })
}

fn data(psn: u32, ce: bool) -> Vec<u8> {
    RoceFrame {
        tos: (26 << 2) | if ce { 3 } else { 2 },
        payload: 1024,
        ..RoceFrame::new(0x0a, 0x11, psn)
    }
    .build()
}

fn cnp() -> Vec<u8> {
    RoceFrame {
        src_ip: [192, 0, 2, 2],
        dst_ip: [192, 0, 2, 1],
        tos: 48 << 2,
        ..RoceFrame::new(OP_CNP, 0x22, 0)
    }
    .build()
}

#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn runs_are_kept_in_the_flow_record_and_batched_when_they_finish() {
    require_root();
    for tc in [false, true] {
        // Frames built first: a burst is only test runs, back to back.
        let frames: Vec<Vec<u8>> = (0..11).map(|psn| data(psn, psn < 3)).collect();
        let cnp = cnp();
        let len = frames[0].len() as u64;
        // The programs' own clocks decide, so the scenario holds only if every burst took
        // under 1 ms (a busy machine can preempt this thread in the middle of one): an attempt
        // where one did not is repeated (at most five).
        let mut attempt = 0;
        let mut src = loop {
            attempt += 1;
            let src = KernelSource::load(&KernelOptions::default()).expect("programs load");
            let run = |frame: &[u8]| {
                if tc {
                    src.test_run_tc(frame)
                } else {
                    src.test_run_xdp(frame)
                }
                .expect("test run")
            };
            let burst = |frames: &[&Vec<u8>]| {
                let t = Instant::now();
                for f in frames {
                    run(f);
                }
                t.elapsed() < Duration::from_micros(900)
            };
            let pause = || std::thread::sleep(Duration::from_millis(3));
            // Run 1: 8 packets, 3 CE-marked. Run 2: 2 packets. Run 3: open, 1 packet.
            let mut ok = burst(&frames[..8].iter().collect::<Vec<_>>());
            pause();
            ok &= burst(&[&frames[8], &frames[9]]);
            pause();
            run(&frames[10]);
            // Signals: 2 CNPs, then one more after a pause.
            ok &= burst(&[&cnp, &cnp]);
            pause();
            run(&cnp);
            if ok || attempt == 5 {
                break src;
            }
        };

        let mut bodies = Vec::new();
        src.drain_events(|ev| {
            if let Some(body @ (EventBody::DataRuns { .. } | EventBody::SignalRun { .. })) =
                ev.body()
            {
                bodies.push((ev.flow.dst_qp, ev.ts_ns, body));
            }
        });
        let what = if tc { "tc" } else { "xdp" };
        // The data run is batched, not sent: only the signal run is an event.
        assert_eq!(bodies.len(), 1, "{what}: {bodies:?}");
        let EventBody::SignalRun {
            duration_ns,
            cnp,
            naks,
        } = bodies[0].2
        else {
            panic!("{what}: {bodies:?}")
        };
        assert_eq!((cnp, naks), (2, 0), "{what}");
        assert!(duration_ns < 1_000_000, "{what}: {duration_ns}");
        assert_eq!(bodies[0].0, 0x22);

        let flows = src.read_flows().expect("flow map");
        let (_, data_flow) = flows
            .iter()
            .find(|(k, _)| k.dst_qp == 0x11)
            .expect("data flow");
        let batch = batch_of(&mut src, 0x11).expect("the data flow's batch");
        assert!(
            batch_of(&mut src, 0x22).is_none(),
            "{what}: no data run, no batch"
        );
        let batched: Vec<DataRun> = batch.unsent().copied().collect();
        assert_eq!(batched.len(), 1, "{what}: {batched:?}");
        let run = batched[0];
        assert_eq!(
            (run.seq, run.bytes, run.packets, run.ce, run.retransmits),
            (0, 8 * len, 8, 3, 0),
            "{what}"
        );
        // Eight back-to-back test runs: well under the 1 ms gap; times converted to the epoch
        // like the flow's own.
        assert!(run.end_ns - run.start_ns < 1_000_000, "{what}: {run:?}");
        assert!(
            (data_flow.first_ns..data_flow.last_ns).contains(&run.end_ns),
            "{what}: {run:?}"
        );
        assert_eq!(
            (data_flow.runs_unsent, data_flow.run_bytes_unsent),
            (1, 2 * len),
            "{what}: run 2 counted, not sent"
        );
        assert_eq!(
            (data_flow.run.packets, data_flow.run.bytes),
            (1, len),
            "{what}: run 3 open"
        );
        // The open run's times are converted to the epoch like the flow's own.
        assert_eq!(data_flow.run.end_ns, data_flow.last_ns, "{what}");
        let (_, cnp_flow) = flows
            .iter()
            .find(|(k, _)| k.dst_qp == 0x22)
            .expect("CNP flow");
        assert_eq!(
            (cnp_flow.signals.cnp, cnp_flow.signals.naks),
            (1, 0),
            "{what}"
        );
    }
}

/// `run --no-steps` (`KernelOptions::runs` false): the same bursts leave no run events and no
/// run in the flow records, while the flow's own counters stay exact.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn no_runs_when_steps_are_off() {
    require_root();
    let frames: Vec<Vec<u8>> = (0..10).map(|psn| data(psn, false)).collect();
    let cnp = cnp();
    for tc in [false, true] {
        let what = if tc { "tc" } else { "xdp" };
        let mut src = KernelSource::load(&KernelOptions {
            runs: false,
            ..KernelOptions::default()
        })
        .expect("programs load");
        let run = |frame: &[u8]| {
            if tc {
                src.test_run_tc(frame)
            } else {
                src.test_run_xdp(frame)
            }
            .expect("test run")
        };
        for f in &frames[..8] {
            run(f);
        }
        run(&cnp);
        std::thread::sleep(Duration::from_millis(3));
        for f in &frames[8..] {
            run(f);
        }
        run(&cnp);
        let mut runs = 0;
        src.drain_events(|ev| {
            if let Some(EventBody::DataRuns { .. } | EventBody::SignalRun { .. }) = ev.body() {
                runs += 1;
            }
        });
        assert_eq!(runs, 0, "{what}: run events with runs off");
        let flows = src.read_flows().expect("flow map");
        let (_, flow) = flows
            .iter()
            .find(|(k, _)| k.dst_qp == 0x11)
            .expect("data flow");
        assert_eq!(flow.packets(), 10, "{what}: counters exact");
        assert_eq!(
            (flow.run.packets, flow.runs_unsent, flow.run_bytes_unsent),
            (0, 0, 0),
            "{what}: no run kept"
        );
        assert!(
            src.read_batches().expect("run batches").is_empty(),
            "{what}: no run batched"
        );
        let (_, signals) = flows
            .iter()
            .find(|(k, _)| k.dst_qp == 0x22)
            .expect("CNP flow");
        assert_eq!(signals.signals.cnp, 0, "{what}: no signal run kept");
    }
}

/// Sixteen finished runs of 8 packets fill the flow's batch: one ring-buffer record carries
/// them all. When the full ring buffer loses it, the flow record counts its runs with the short
/// runs (`runs_unsent`, `run_bytes_unsent`), so the flow's data bytes are all still accounted
/// for (sent + unsent + open = the flow's bytes), and `ringbuf_full` counts the lost record.
/// With the ring drained first (the control) the same runs are one record.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_full_batch_is_one_record_and_counted_in_the_flow_record_when_lost() {
    require_root();
    let runs = RUN_BATCH as u32;
    let frames: Vec<Vec<u8>> = (0..=8 * runs).map(|psn| data(psn, false)).collect();
    let len = frames[0].len() as u64;
    for tc in [false, true] {
        for ring_full in [false, true] {
            let what = format!(
                "{} {}",
                if tc { "tc" } else { "xdp" },
                if ring_full { "ring full" } else { "control" }
            );
            // As above: every burst must take under 1 ms of the programs' clock (at most five
            // attempts).
            let mut attempt = 0;
            let (mut src, before) = loop {
                attempt += 1;
                let src = KernelSource::load(&KernelOptions::default()).expect("programs load");
                let before = if ring_full {
                    fill_event_ring(&src)
                } else {
                    [0, 0]
                };
                let run = |frame: &[u8]| {
                    if tc {
                        src.test_run_tc(frame)
                    } else {
                        src.test_run_xdp(frame)
                    }
                    .expect("test run")
                };
                let mut ok = true;
                for burst in frames[..8 * runs as usize].chunks(8) {
                    let t = Instant::now();
                    for f in burst {
                        run(f);
                    }
                    ok &= t.elapsed() < Duration::from_micros(900);
                    std::thread::sleep(Duration::from_millis(3));
                }
                // Finishes the sixteenth run of 8.
                run(&frames[8 * runs as usize]);
                if ok || attempt == 5 {
                    break (src, before);
                }
            };
            let mut records = Vec::new();
            src.drain_records(|ev, runs| {
                if let Some(EventBody::DataRuns { first, count }) = ev.body() {
                    let got: Vec<(u32, u64, u32)> =
                        runs.iter().map(|r| (r.seq, r.bytes, r.packets)).collect();
                    records.push((first, count, ev.ts_ns, runs[0].start_ns, got));
                }
            });
            let d = usize::from(tc);
            let lost = src.read_counters().expect("counters")[d][Counter::RingbufFull as usize]
                - before[d];
            let flows = src.read_flows().expect("flow map");
            let (_, flow) = flows
                .iter()
                .find(|(k, _)| k.dst_qp == 0x11)
                .expect("data flow");
            assert_eq!(
                (flow.run.packets, flow.run.bytes),
                (1, len),
                "{what}: open run"
            );
            let batch = batch_of(&mut src, 0x11).expect("the data flow's batch");
            assert_eq!(batch.seq(), runs, "{what}");
            assert_eq!(batch.unsent().count(), 0, "{what}: all sent");
            let sent: u64 = if ring_full {
                assert!(records.is_empty(), "{what}: {records:?}");
                // The runs' record (a new flow sends none).
                assert_eq!(lost, 1, "{what}");
                assert_eq!(
                    (flow.runs_unsent, flow.run_bytes_unsent),
                    (u64::from(runs), u64::from(runs) * 8 * len),
                    "{what}: the lost runs counted"
                );
                0
            } else {
                assert_eq!(records.len(), 1, "{what}: {records:?}");
                let (first, count, ts, start, got) = &records[0];
                assert_eq!((*first, *count), (0, runs), "{what}");
                assert_eq!(
                    ts, start,
                    "{what}: the record's time is its first run's start"
                );
                let want: Vec<(u32, u64, u32)> = (0..runs).map(|n| (n, 8 * len, 8)).collect();
                assert_eq!(*got, want, "{what}");
                assert_eq!(lost, 0, "{what}");
                assert_eq!((flow.runs_unsent, flow.run_bytes_unsent), (0, 0), "{what}");
                got.iter().map(|r| r.1).sum()
            };
            // Every data byte is in a sent run, an unsent one or the open one.
            assert_eq!(
                sent + flow.run_bytes_unsent + flow.run.bytes,
                flow.bytes,
                "{what}"
            );
        }
    }
}

/// The batches of finished runs (`RUN_BATCHES`) are sized to --max-flows like each flow map:
/// with room for one, an IPv4 and an IPv6 flow (one in each flow map) that both finish a run of
/// 8 packets leave the second without a batch. Its run is then counted in its flow record with
/// the short runs (`runs_unsent`, `run_bytes_unsent`), so its bytes are all still there, and in
/// `map_full`. With room for two (the control) both runs are batched.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn a_run_that_finds_no_room_for_a_batch_is_counted_in_the_flow_record() {
    require_root();
    let v4: Vec<Vec<u8>> = (0..9).map(|psn| data(psn, false)).collect();
    let v6: Vec<Vec<u8>> = (0..9).map(|psn| ipv6_roce_frame(0x33, psn)).collect();
    let len6 = v6[0].len() as u64;
    for max_flows in [1, 2] {
        // As above: the burst must take under 1 ms of the programs' clock (at most five
        // attempts).
        let mut attempt = 0;
        let mut src = loop {
            attempt += 1;
            let src = KernelSource::load(&KernelOptions {
                max_flows,
                ..KernelOptions::default()
            })
            .expect("programs load");
            let run = |frame: &[u8]| src.test_run_xdp(frame).expect("test run");
            // A run of 8 on each flow, the IPv4 flow's finished first.
            let t = Instant::now();
            for f in v4[..8].iter().chain(&v6[..8]) {
                run(f);
            }
            let ok = t.elapsed() < Duration::from_micros(900);
            std::thread::sleep(Duration::from_millis(3));
            run(&v4[8]);
            run(&v6[8]);
            if ok || attempt == 5 {
                break src;
            }
        };
        let what = format!("max_flows {max_flows}");
        let full = src.read_counters().expect("counters")[0][Counter::MapFull as usize];
        let flows = src.read_flows().expect("flow map");
        let (_, flow6) = flows
            .iter()
            .find(|(k, _)| k.dst_qp == 0x33)
            .expect("the IPv6 flow");
        assert!(
            batch_of(&mut src, 0x11).is_some(),
            "{what}: the first batch"
        );
        let batch6 = batch_of(&mut src, 0x33);
        if max_flows == 1 {
            assert!(batch6.is_none(), "{what}: no room for a second batch");
            assert_eq!(full, 1, "{what}: the run without a batch");
            assert_eq!(
                (flow6.runs_unsent, flow6.run_bytes_unsent),
                (1, 8 * len6),
                "{what}: the run counted in the flow record"
            );
        } else {
            let batch6 = batch6.expect("the IPv6 flow's batch");
            let runs: Vec<(u64, u32)> = batch6.unsent().map(|r| (r.bytes, r.packets)).collect();
            assert_eq!(runs, [(8 * len6, 8)], "{what}");
            assert_eq!(full, 0, "{what}");
            assert_eq!(
                (flow6.runs_unsent, flow6.run_bytes_unsent),
                (0, 0),
                "{what}"
            );
        }
        // Every data byte is in a batched run, an unsent one or the open one.
        let batched: u64 = batch6
            .iter()
            .flat_map(|b| b.unsent())
            .map(|r| r.bytes)
            .sum();
        assert_eq!(
            batched + flow6.run_bytes_unsent + flow6.run.bytes,
            flow6.bytes,
            "{what}"
        );
    }
}
