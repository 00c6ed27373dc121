//! The report tick's read of only the flows the kernel listed as changed
//! (`KernelSource::read_flow_changes`; roce-observer-common/src/changes.rs): frames run through
//! the XDP program with BPF_PROG_TEST_RUN between reads, then what a tick hands over is checked
//! against a whole read of the maps, and the report of an engine fed by ticks against one fed by
//! whole reads. Then the fallbacks to a whole read (a list without room, too many changes), and
//! two CPUs changing the same flows while ticks read them.

use std::collections::HashMap;

use integration_tests::{ipv6_roce_frame, netns::VethNs, require_root};
use roce_observer::{
    engine::{Engine, EngineConfig},
    source::kernel::{FlowRead, KernelOptions, KernelSource},
};
use roce_observer_common::{FlowKey, FlowStats, frames::RoceFrame};

/// An RC SEND_ONLY of 16 bytes to `qp` with `psn`, IPv4.
fn frame(qp: u32, psn: u32) -> Vec<u8> {
    RoceFrame {
        payload: 16,
        tos: 0x6a,
        ..RoceFrame::new(0x04, qp, psn)
    }
    .build()
}

/// One frame with `psn` on each of the first `n` IPv4 flows (QP 0x100 on).
fn flows(n: u32, psn: u32) -> Vec<Vec<u8>> {
    (0..n).map(|i| frame(0x100 + i, psn)).collect()
}

/// A loaded source (`max_flows`) whose first `n` IPv4 flows have one frame each, read until a
/// tick reads the lists alone; on this thread, pinned to CPU 0.
fn started(max_flows: u32, n: u32) -> (KernelSource, Readers) {
    require_root();
    pin_to_cpu0();
    let mut src = load(max_flows);
    let mut r = Readers::new();
    run(&src, &flows(n, 0));
    settle(&mut src, &mut r);
    (src, r)
}

/// Keep this thread on CPU 0, so that every test run lists its flows in one CPU's lists.
fn pin_to_cpu0() {
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: adds a CPU to the valid set above.
    unsafe { libc::CPU_SET(0, &mut set) };
    // SAFETY: pins the calling thread; `set` is valid.
    let pinned = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(pinned, 0, "sched_setaffinity");
}

fn load(max_flows: u32) -> KernelSource {
    KernelSource::load(&KernelOptions {
        max_flows,
        ..KernelOptions::default()
    })
    .expect("BPF programs load (run as root)")
}

fn run(src: &KernelSource, frames: &[Vec<u8>]) {
    for f in frames {
        assert_eq!(src.test_run_xdp(f).expect("test run"), 2, "XDP_PASS");
    }
}

/// Two engines, one fed by ticks, one by whole reads of the same maps at the same moments.
struct Readers {
    ticked: Engine,
    whole: Engine,
}

impl Readers {
    fn new() -> Readers {
        let engine = || {
            let mut e = Engine::new(EngineConfig::default());
            e.set_iface_name(1, "lo");
            e
        };
        Readers {
            ticked: engine(),
            whole: engine(),
        }
    }

    /// One tick: how it read, and what it handed over (sorted by key).
    fn tick(&mut self, src: &mut KernelSource) -> (FlowRead, Vec<(FlowKey, FlowStats)>) {
        let mut handed = Vec::new();
        let read = src
            .read_flow_changes(self.ticked.id(), |k, v| {
                handed.push((*k, *v));
                self.ticked.update_flow(k, v);
            })
            .expect("flows read");
        for (k, v) in src.read_flows().expect("whole read") {
            self.whole.update_flow(&k, &v);
        }
        handed.sort_by_key(|(k, _)| *k);
        (read, handed)
    }

    /// Both engines report the same.
    fn assert_same_report(&mut self) {
        let ticked = serde_json::to_value(self.ticked.snapshot(0)).expect("serializes");
        let whole = serde_json::to_value(self.whole.snapshot(0)).expect("serializes");
        assert_eq!(
            ticked, whole,
            "the ticked engine reports as the one fed whole reads"
        );
    }
}

/// The flows of `keys` as a whole read finds them now.
fn now_of(src: &mut KernelSource, keys: &[FlowKey]) -> Vec<(FlowKey, FlowStats)> {
    let mut v: Vec<_> = src
        .read_flows()
        .expect("whole read")
        .into_iter()
        .filter(|(k, _)| keys.contains(k))
        .collect();
    v.sort_by_key(|(k, _)| *k);
    v
}

/// Ticks until one reads only the lists (the first ticks read whole: no history, then the
/// lists of the epochs that made every flow).
fn settle(src: &mut KernelSource, r: &mut Readers) {
    for _ in 0..5 {
        if r.tick(src).0 == (FlowRead::Changed { listed: 0 }) {
            return;
        }
    }
    panic!("no tick read the lists alone");
}

#[test]
#[ignore = "kernel test: needs root (BPF)"]
fn a_tick_hands_over_exactly_the_changed_flows_and_reports_as_a_whole_read() {
    require_root();
    pin_to_cpu0();
    let mut src = load(4096);
    let mut r = Readers::new();
    let mut first: Vec<Vec<u8>> = (0..100).map(|i| frame(0x100 + i, 0)).collect();
    first.extend((0..4).map(|i| ipv6_roce_frame(0x900 + i, 0)));
    run(&src, &first);
    let (read, handed) = r.tick(&mut src);
    assert_eq!(
        read,
        FlowRead::Whole { flows: 104 },
        "a reader's first tick"
    );
    assert_eq!(handed.len(), 104);
    settle(&mut src, &mut r);
    r.assert_same_report();

    // Two IPv4 flows and one IPv6 flow move on.
    run(
        &src,
        &[frame(0x103, 1), frame(0x107, 1), ipv6_roce_frame(0x901, 1)],
    );
    let (read, handed) = r.tick(&mut src);
    assert_eq!(read, FlowRead::Changed { listed: 3 });
    let keys: Vec<FlowKey> = handed.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        handed,
        now_of(&mut src, &keys),
        "the changed flows' values now"
    );
    assert!(handed.iter().all(|(_, v)| v.packets() == 2));
    let v6 = keys
        .iter()
        .filter(|k| k.src_ip[..4] == [0x20, 0x01, 0x0d, 0xb8])
        .count();
    assert_eq!(
        v6, 1,
        "the IPv6 flow is listed with the IPv4 ones: {keys:?}"
    );
    r.assert_same_report();

    // The next tick hands them again (the epoch before, read once more), unchanged; then none.
    let (read, again) = r.tick(&mut src);
    assert_eq!(read, FlowRead::Changed { listed: 3 });
    assert_eq!(again, handed);
    assert_eq!(r.tick(&mut src), (FlowRead::Changed { listed: 0 }, vec![]));
    r.assert_same_report();

    // A new flow is listed as a change.
    run(&src, &[frame(0x555, 0)]);
    let (read, handed) = r.tick(&mut src);
    assert_eq!(read, FlowRead::Changed { listed: 1 });
    assert_eq!(handed.len(), 1);
    assert_eq!(handed[0].0.dst_qp, 0x555);
    r.assert_same_report();
}

#[test]
#[ignore = "kernel test: needs root (BPF)"]
fn a_list_without_room_makes_the_tick_read_the_whole_table() {
    // 64 keys per list (changes::capacity of 1024).
    let (mut src, mut r) = started(1024, 400);
    // 80 flows change on one CPU: 16 more than its list holds (and less than a quarter).
    run(&src, &flows(80, 1));
    let (read, handed) = r.tick(&mut src);
    assert_eq!(read, FlowRead::Whole { flows: 400 });
    assert_eq!(handed.len(), 80, "the changed flows, no others");
    r.assert_same_report();
    // The next tick reads that epoch's lists again: whole again; then the lists serve.
    assert_eq!(r.tick(&mut src).0, FlowRead::Whole { flows: 400 });
    run(&src, &[frame(0x100, 2)]);
    assert_eq!(r.tick(&mut src).0, FlowRead::Changed { listed: 1 });
    r.assert_same_report();
}

#[test]
#[ignore = "kernel test: needs root (BPF)"]
fn a_quarter_of_the_flows_changed_is_read_whole() {
    let (mut src, mut r) = started(16384, 200);
    run(&src, &flows(60, 1));
    assert_eq!(r.tick(&mut src).0, FlowRead::Whole { flows: 200 });
    assert_eq!(r.tick(&mut src).0, FlowRead::Whole { flows: 200 });
    run(&src, &flows(40, 2));
    assert_eq!(r.tick(&mut src).0, FlowRead::Changed { listed: 40 });
    r.assert_same_report();
}

/// Both senders send every frame at the same times, from CPU 0 and CPU 1 through a two-queue
/// veth (the receiving end's XDP program runs on each sender's CPU), while ticks read the flows
/// as fast as they can: what the ticks handed over, last value per flow, is what a whole read
/// finds at the end, and every count is exact.
#[test]
#[ignore = "kernel test: needs root (BPF, network namespaces)"]
fn ticks_keep_up_with_two_cpus_changing_the_same_flows() {
    require_root();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cpus >= 2,
        "this test needs two CPUs; this machine has {cpus}"
    );
    // A frame every 500 us from each sender: the senders (real-time threads that spin the last
    // 100 us before each frame) leave the ticks most of both CPUs.
    const FLOWS: u32 = 200;
    const FRAMES: u32 = 4_000;
    let ns = VethNs::with_queues(2).expect("namespace with a two-queue veth pair");
    ns.pin_tx_queues(2).expect("XPS: CPU i -> TX queue i");
    let mut src = load(16384);
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::fd::AsRawFd as _;
            let netns = std::fs::File::open(format!("/run/netns/{}", ns.name)).expect("netns");
            // SAFETY: setns on a namespace file we opened; only this scoped thread moves.
            let entered = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(entered, 0, "setns");
            src.attach(&ns.b, aya::programs::XdpMode::Default)
                .expect("XDP attaches to the veth");
        })
        .join()
        .expect("attach thread");
    });
    let frames: Vec<(u64, Vec<u8>)> = (0..FRAMES)
        .map(|i| (u64::from(i) * 500_000, frame(0x100 + i % FLOWS, i / FLOWS)))
        .collect();
    let timed: Vec<(u64, &str, &[u8])> = frames
        .iter()
        .map(|(at, f)| (*at, ns.a.as_str(), f.as_slice()))
        .collect();
    let reader = 7;
    let mut seen: HashMap<FlowKey, FlowStats> = HashMap::new();
    let (mut ticks, mut listed_ticks) = (0, 0);
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            ns.send_timed_on(
                &timed,
                None,
                std::time::Duration::from_secs(1),
                &[Some(0), Some(1)],
            )
        });
        while !sender.is_finished() {
            let read = src
                .read_flow_changes(reader, |k, v| {
                    seen.insert(*k, *v);
                })
                .expect("tick");
            ticks += 1;
            listed_ticks += usize::from(matches!(read, FlowRead::Changed { .. }));
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        sender.join().expect("sender").expect("frames sent");
    });
    // The receiving end's softirqs finish with the last frames.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let last = src
        .read_flow_changes(reader, |k, v| {
            seen.insert(*k, *v);
        })
        .expect("tick");
    assert!(
        matches!(last, FlowRead::Changed { .. }) && listed_ticks * 2 > ticks,
        "{listed_ticks} of {ticks} ticks read the lists alone, the last one {last:?}"
    );
    let whole: HashMap<FlowKey, FlowStats> =
        src.read_flows().expect("whole read").into_iter().collect();
    assert_eq!(whole.len(), FLOWS as usize);
    let per_flow = 2 * u64::from(FRAMES / FLOWS);
    for (k, v) in &whole {
        assert_eq!(
            v.packets(),
            per_flow,
            "every packet of both CPUs counted: {k:?}"
        );
        assert_eq!(
            seen.get(k),
            Some(v),
            "the ticks' last value of {k:?} is the map's"
        );
    }
    assert_eq!(seen.len(), whole.len());
    eprintln!(
        "{ticks} ticks ({listed_ticks} of the lists alone) while two CPUs sent {FRAMES} frames \
         each over {FLOWS} flows"
    );
}

/// An answer changes its request flow too (the flow learns its peer QP on the first latency
/// match, through the flow map's `get`): that flow is listed with the answer's own.
#[test]
#[ignore = "kernel test: needs root (BPF)"]
fn an_answer_lists_the_request_flow_it_changes() {
    require_root();
    pin_to_cpu0();
    let mut src = load(4096);
    let mut r = Readers::new();
    let request = RoceFrame {
        ack_req: true,
        payload: 16,
        ..RoceFrame::new(0x04, 0x11, 5)
    }
    .build();
    run(&src, &[request]);
    // Other flows, so that two changed are few.
    run(&src, &flows(100, 0));
    r.tick(&mut src);
    settle(&mut src, &mut r);
    let ack = RoceFrame {
        src_ip: [192, 0, 2, 2],
        dst_ip: [192, 0, 2, 1],
        syndrome: 0x1f,
        ..RoceFrame::new(0x11, 0x22, 5)
    }
    .build();
    run(&src, &[ack]);
    let (read, handed) = r.tick(&mut src);
    assert_eq!(read, FlowRead::Changed { listed: 2 });
    let request_flow = handed
        .iter()
        .find(|(k, _)| k.dst_qp == 0x11)
        .expect("the request flow is handed over");
    assert_eq!(request_flow.1.peer_qp(), Some(0x22));
    r.assert_same_report();
}
