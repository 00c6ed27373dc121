//! The pipeline: a source -> the engine -> the outputs (or the terminal UI), an interval report
//! now and then and a final one, on one of two schedules:
//! - live ([`run_live`]): any [`LiveSource`] (the kernel programs, a capture fed by a reader
//!   thread), reported every interval of wall-clock time (`run`);
//! - batch ([`batch::run_batch`]): a capture read to its end in the calling thread, reported
//!   every N seconds of capture time, so that the output depends on the capture only
//!   (`analyze`).
//!
//! Both assemble their reports, write them, judge `--fail-on` and give the empty-result advice
//! through one [`Pipeline`], and stop on SIGINT/SIGTERM through one [`stop::Stop`]. Independent
//! of where the data comes from, so the live loop is tested here against a scripted source,
//! without root.

pub mod batch;
pub mod stop;

use std::{
    future::Future,
    io::Write,
    os::fd::{AsRawFd, RawFd},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use ratatui::DefaultTerminal;
use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc::UnboundedReceiver,
};

use crate::{
    cost::CostMeter,
    engine::Engine,
    fail_on::{GateFailed, Judge},
    report::{Beside, ObserverCost, Snapshot},
    sink::outputs::{OutputError, Outputs},
    source::{LiveSource, SourceState, hw::NicWatch, qp_owner::OwnerBook},
    tui::{self, Action, App, TerminalGuard},
};

/// The terminal UI of a live run: drawn every interval and on every key.
pub struct Ui {
    terminal: DefaultTerminal,
    _guard: TerminalGuard,
    app: App,
    keys: UnboundedReceiver<Action>,
}

impl Ui {
    /// Take over the terminal (restored when the `Ui` is dropped, or on panic).
    pub fn start(title: String, engine: &mut Engine, now_ns: u64) -> Ui {
        let terminal = ratatui::init();
        let guard = TerminalGuard;
        let (keys_tx, keys) = tokio::sync::mpsc::unbounded_channel();
        tui::spawn_key_reader(keys_tx);
        Ui {
            terminal,
            _guard: guard,
            app: App::new(title, engine.snapshot(now_ns)),
            keys,
        }
    }

    fn draw(&mut self) -> anyhow::Result<()> {
        // A page key moves by the flow table's height (less header, tabs, footer and borders).
        if let Ok(size) = self.terminal.size() {
            self.app.page = usize::from(size.height.saturating_sub(6)).max(1);
        }
        if std::mem::take(&mut self.app.write_requested) {
            let dir = std::env::current_dir().unwrap_or_else(|_| ".".into());
            self.app.status = Some(match tui::write_report(&self.app.snapshot, &dir) {
                Ok(path) => format!("report written to {}", path.display()),
                Err(e) => format!(
                    "{}report not written to {}: {e}",
                    tui::view::MARK,
                    dir.display()
                ),
            });
        }
        let app = &self.app;
        self.terminal
            .draw(|f| tui::view::draw(f, app))
            .context("drawing the UI")?;
        Ok(())
    }
}

/// Timing of the live schedule.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub interval: Duration,
    /// Stop at the first report after this long (default: until stopped or the input ends).
    pub duration: Option<Duration>,
}

/// What both schedules share: what is read beside the source at every report, where reports
/// go, how they are judged, and what is said after the last one.
pub struct Pipeline {
    pub outputs: Outputs,
    /// The host's RDMA NIC counters, attached to every report (`nic` in the JSON).
    pub nic: Option<NicWatch>,
    /// The host's QP owners, read over RDMA netlink for every report and every
    /// [`OWNER_POLL`] between them (`qp_owners`, and each flow's `owner`).
    pub owners: Option<OwnerBook>,
    /// `--fail-on`: judged on the final report always, and on every interval report too
    /// when [`Gate::each_interval`] is set (the kernel source).
    pub gate: Gate,
    /// A capture source: after the final report (and without the terminal UI), say on stderr
    /// why a report holds no RoCE and what to try ([`crate::report::hint`]).
    pub advise_empty: bool,
}

impl Pipeline {
    /// Reports to `outputs` only: nothing read beside the source, no gate, no advice.
    pub fn new(outputs: Outputs) -> Pipeline {
        Pipeline {
            outputs,
            nic: None,
            owners: None,
            gate: Gate::default(),
            advise_empty: false,
        }
    }

    /// The report at `now`: the engine's sections, the NIC counters and QP owners read now,
    /// the watched interfaces and the outputs' health.
    fn report(
        &mut self,
        engine: &mut Engine,
        now: u64,
        interfaces: &[(String, bool)],
        observer: Option<ObserverCost>,
    ) -> Snapshot {
        let nic = self.nic.as_mut().map(NicWatch::sample).unwrap_or_default();
        let qp_owners = match self.owners.as_mut() {
            Some(book) => {
                // A host whose RDMA netlink cannot be read (no RDMA core) simply has no owners.
                let _ = book.refresh();
                book.owners()
            }
            None => Vec::new(),
        };
        engine.report(
            now,
            Beside {
                nic,
                qp_owners,
                interfaces_up: interfaces.iter().cloned().collect(),
                outputs: self.outputs.health(),
                observer,
            },
        )
    }

    /// The end of one reporting interval at `now`: the report goes to every output (its
    /// warnings to stderr unless the terminal UI is up) and to the gate. Returns the report
    /// and, when the gate judges every interval, the conditions that held. The caller starts
    /// the next interval.
    pub fn interval(
        &mut self,
        engine: &mut Engine,
        now: u64,
        interfaces: &[(String, bool)],
        observer: Option<ObserverCost>,
        stdout: &mut dyn Write,
        ui_up: bool,
    ) -> Result<(Snapshot, Option<GateFailed>), OutputError> {
        let snap = self.report(engine, now, interfaces, observer);
        self.outputs.interval(&snap, stdout)?;
        // Under the terminal UI they wait for the final report.
        if !ui_up {
            for warning in self.outputs.take_warnings() {
                eprintln!("roce-observer: {warning}");
            }
        }
        let tripped = if self.gate.each_interval {
            self.gate.judge.judge(&snap).err()
        } else {
            self.gate.judge.note(&snap);
            None
        };
        Ok((snap, tripped))
    }

    /// The final report at `now`, to every output; then, on stderr, the advice for a capture
    /// without RoCE (unless `ui_shown`: the terminal UI said what it had). Returns the
    /// conditions of the gate that hold on it.
    pub fn finish(
        mut self,
        engine: &mut Engine,
        now: u64,
        interfaces: &[(String, bool)],
        observer: Option<ObserverCost>,
        stdout: &mut dyn Write,
        ui_shown: bool,
    ) -> anyhow::Result<Option<GateFailed>> {
        let snap = self.report(engine, now, interfaces, observer);
        self.outputs.finish(&snap, stdout)?;
        // After the report, on stderr: the table or the document on stdout stays what it was.
        if self.advise_empty
            && !ui_shown
            && let Some(hint) = crate::report::hint::no_roce(&snap.summary)
        {
            eprintln!("roce-observer: {hint}");
        }
        Ok(self.gate.judge.judge(&snap).err())
    }
}

/// The `--fail-on` expressions of a run and when they are judged.
#[derive(Clone, Debug, Default)]
pub struct Gate {
    pub judge: Judge,
    /// Judge every interval report, and end the run at the first that trips (a kernel run has
    /// no end of its own); otherwise only the final report is judged (a capture has one).
    pub each_interval: bool,
}

/// How a live run ended.
#[derive(Debug)]
pub struct Ended {
    /// The source's warnings.
    pub warnings: Vec<String>,
    /// The `--fail-on` conditions that held: on the interval report that ended the run, or
    /// on the final report.
    pub tripped: Option<GateFailed>,
    /// Watched interfaces that were removed: the run ended because of them.
    pub gone: Vec<String>,
}

/// The watched interfaces that are gone.
fn gone_interfaces(ifaces: &[(String, bool)]) -> Vec<String> {
    ifaces
        .iter()
        .filter(|(_, up)| !up)
        .map(|(name, _)| name.clone())
        .collect()
}

/// How often QP owners are read between reports: a QP that lives this long (a short perftest
/// run, a job that fails at start) is still caught and its flows labelled.
pub const OWNER_POLL: Duration = Duration::from_millis(200);

struct Fd(RawFd);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

async fn readable(fd: Option<&AsyncFd<Fd>>) -> std::io::Result<()> {
    match fd {
        Some(fd) => fd.readable().await.map(|mut guard| guard.clear_ready()),
        None => std::future::pending().await,
    }
}

async fn next_key(ui: &mut Option<Ui>) -> Option<Action> {
    match ui {
        Some(ui) => ui.keys.recv().await,
        None => std::future::pending().await,
    }
}

/// Run until `stop` completes, the duration is over, the user quits the UI, the source ends, or
/// an interval report trips the gate (see [`Gate`]); then stop the source (detaching the
/// kernel programs) and write the final report. Returns the source's warnings and the verdict
/// of the gate.
///
/// When the source ends (a capture was read to its end) under the UI, the final state stays on
/// screen, marked as ended, until the user quits; without a UI the run ends with the input.
pub async fn run_live<S: LiveSource>(
    src: &mut S,
    engine: &mut Engine,
    mut pipeline: Pipeline,
    mut ui: Option<Ui>,
    schedule: Schedule,
    stop: impl Future<Output = ()>,
    stdout: &mut dyn Write,
) -> anyhow::Result<Ended> {
    let events = match src.ready_fd() {
        // SAFETY: the fd belongs to `src`, which is borrowed for the whole function and so
        // outlives `events`; `Fd` always returns that same fd.
        Some(fd) => Some(
            unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) }
                .context("polling the source")?,
        ),
        None => None,
    };
    // The metrics endpoint was bound when the command started; it serves from this runtime.
    if let Some(addr) = pipeline.outputs.serve()? {
        eprintln!("roce-observer: metrics at http://{addr}/metrics");
    }
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(schedule.interval);
    let mut owner_tick = tokio::time::interval(OWNER_POLL.min(schedule.interval));
    let deadline = schedule.duration.map(|d| Instant::now() + d);
    // Set once the source has ended and its last state is on screen.
    let mut ended = false;
    let mut tripped: Option<GateFailed> = None;
    let mut gone: Vec<String> = Vec::new();
    // The source's log lines while the terminal UI is up, shown once it is gone.
    let mut held_log = Vec::new();
    let mut meter = CostMeter::default();
    let ui_shown = ui.is_some();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            ready = readable(events.as_ref()), if !ended => {
                ready.context("polling the source")?;
                if src.pump(engine)? == SourceState::Ended {
                    if !show_end(src, engine, ui.as_mut(), &mut pipeline)? {
                        break;
                    }
                    ended = true;
                }
            }
            Some(action) = next_key(&mut ui) => {
                if let Some(ui) = ui.as_mut() {
                    ui.app.update(action);
                    if ui.app.quit {
                        break;
                    }
                    ui.draw()?;
                }
            }
            _ = owner_tick.tick(), if pipeline.owners.is_some() && !ended => {
                if let Some(book) = pipeline.owners.as_mut() {
                    let _ = book.refresh();
                }
            }
            _ = tick.tick(), if !ended => {
                let state = src.refresh(engine)?;
                source_log(src, ui.is_some(), &mut held_log);
                let now = src.now_ns();
                let interfaces = src.interfaces();
                let observer = Some(meter.interval(src.kernel_cost()));
                let (snap, verdict) = pipeline.interval(
                    engine, now, &interfaces, observer, stdout, ui.is_some())?;
                tripped = verdict;
                gone = gone_interfaces(&interfaces);
                // Its programs went with it: nothing more can be seen there. The unit
                // restarts the observer on the failure this ends with.
                // Under the terminal UI the header says so until the user quits.
                if tripped.is_some() || (!gone.is_empty() && ui.is_none()) {
                    break;
                }
                if let Some(ui) = ui.as_mut() {
                    ui.app.update(Action::Snapshot(Box::new(snap)));
                    ui.draw()?;
                }
                // A source whose clock has not started (a capture before its first frame) has
                // no interval to end yet.
                if now > 0 {
                    engine.begin_interval(now);
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if state == SourceState::Ended {
                    if !show_end(src, engine, ui.as_mut(), &mut pipeline)? {
                        break;
                    }
                    ended = true;
                }
            }
        }
    }
    // Leave the UI before the final report goes to the normal screen.
    drop(ui);
    drop(events);
    let refreshed = src.refresh(engine);
    source_log(src, false, &mut held_log);
    // Before stopping: a stopped kernel source has nothing attached to report on.
    let ifaces = src.interfaces();
    let kernel_cost = src.kernel_cost();
    let warnings = src.stop();
    refreshed?;
    // The final report analyses the steps of everything seen (no reused analysis).
    engine.forget_steps_analysis();
    let observer = Some(meter.interval(kernel_cost));
    let verdict = pipeline.finish(engine, src.now_ns(), &ifaces, observer, stdout, ui_shown)?;
    // The interval that ended the run is the reason; else the final report is judged.
    let tripped = tripped.or(verdict);
    Ok(Ended {
        warnings,
        tripped,
        gone,
    })
}

/// The source's log lines (`run --kernel-log`) go to stderr, except while the terminal UI is
/// up: writing there would tear the screen, so they wait (the last 1000) for it to close.
fn source_log<S: LiveSource>(src: &mut S, ui_up: bool, held: &mut Vec<String>) {
    held.extend(src.take_log());
    if ui_up {
        let excess = held.len().saturating_sub(1000);
        held.drain(..excess);
        return;
    }
    for line in held.drain(..) {
        eprintln!("roce-observer: kernel: {line}");
    }
}

/// The source has ended: put its last state on screen, marked as ended. Returns false when
/// there is no UI to keep open (the run then ends).
fn show_end<S: LiveSource>(
    src: &mut S,
    engine: &mut Engine,
    ui: Option<&mut Ui>,
    pipeline: &mut Pipeline,
) -> anyhow::Result<bool> {
    let Some(ui) = ui else {
        return Ok(false);
    };
    src.refresh(engine)?;
    engine.forget_steps_analysis();
    let snap = pipeline.report(engine, src.now_ns(), &src.interfaces(), None);
    ui.app.update(Action::Snapshot(Box::new(snap)));
    ui.app.update(Action::SourceEnded);
    ui.draw()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use roce_observer_common::{FlowKey, FlowStats};

    use super::*;
    use crate::{
        engine::EngineConfig,
        report::{KernelCost, ProgramCost},
        sink::outputs::{IntervalTables, OutputPlan},
    };

    /// A source that replays scripted flow-map contents, one step per report, then ends.
    struct Scripted {
        steps: Vec<(u64, Vec<(FlowKey, FlowStats)>)>,
        next: usize,
        now: u64,
        stopped: bool,
        /// The watched interface is removed once this many steps were read.
        removed_after: Option<usize>,
    }

    impl LiveSource for Scripted {
        fn ready_fd(&self) -> Option<RawFd> {
            None
        }
        fn pump(&mut self, _: &mut Engine) -> anyhow::Result<SourceState> {
            Ok(SourceState::Open)
        }
        fn refresh(&mut self, engine: &mut Engine) -> anyhow::Result<SourceState> {
            let Some((now, flows)) = self.steps.get(self.next) else {
                return Ok(SourceState::Ended);
            };
            self.next += 1;
            self.now = *now;
            for (key, stats) in flows {
                engine.update_flow(key, stats);
            }
            Ok(if self.next == self.steps.len() {
                SourceState::Ended
            } else {
                SourceState::Open
            })
        }
        fn now_ns(&self) -> u64 {
            self.now
        }
        fn stop(&mut self) -> Vec<String> {
            self.stopped = true;
            vec!["scripted warning".into()]
        }
        fn interfaces(&self) -> Vec<(String, bool)> {
            let up = self.removed_after.is_none_or(|n| self.next < n);
            vec![("veth-gone".into(), up), ("veth-kept".into(), true)]
        }
        fn kernel_cost(&mut self) -> Option<KernelCost> {
            Some(KernelCost {
                ringbuf_bytes: 1 << 20,
                ringbuf_fill: 0.25,
                bpf_stats: true,
                programs: vec![ProgramCost {
                    name: "roce_observer_xdp".into(),
                    hook: "xdp",
                    run_count: 4,
                    run_time_ns: 1000,
                    ns_per_run: Some(250.0),
                }],
            })
        }
    }

    /// Every report carries what watching costs: the process's CPU and memory as measured,
    /// and the source's kernel side as it gave it, in the JSON document and in Prometheus.
    #[test]
    fn the_observers_own_cost_is_in_the_reports() {
        let mut src = three_intervals();
        let prom = temp_log("cost.prom");
        let plan = OutputPlan {
            prom_file: Some(prom.clone()),
            ..plan_off()
        };
        let (stdout, _) = run_gated(&mut src, plan, Gate::default());
        let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
        let cost = &doc["summary"]["observer"];
        assert!(cost["rss_bytes"].as_u64().expect("rss") > 1 << 20, "{cost}");
        assert!(cost["cpu_seconds"].as_f64().expect("cpu") > 0.0, "{cost}");
        assert!(
            cost["cpu_fraction"].as_f64().expect("fraction") >= 0.0,
            "{cost}"
        );
        assert_eq!(cost["kernel"]["ringbuf_fill"], 0.25);
        assert_eq!(cost["kernel"]["programs"][0]["ns_per_run"], 250.0);
        let text = std::fs::read_to_string(&prom).expect("metrics file");
        for line in [
            "\nroce_observer_ringbuf_fill_ratio 0.25\n",
            "\nroce_observer_bpf_stats_enabled 1\n",
            "\nroce_observer_program_runs_total{program=\"roce_observer_xdp\",hook=\"xdp\"} 4\n",
            "\nroce_observer_program_run_seconds_total{program=\"roce_observer_xdp\",hook=\"xdp\"} 0.000001\n",
            "\nroce_observer_events_total{kind=\"path\"} 0\n",
            "\nroce_observer_events_per_packet 0.0\n",
        ] {
            assert!(text.contains(line), "{line} not in {text}");
        }
        assert!(
            text.contains("\nroce_observer_resident_memory_bytes "),
            "{text}"
        );
        assert!(
            text.contains("\nroce_observer_cpu_seconds_total "),
            "{text}"
        );
    }

    const SEC: u64 = 1_000_000_000;

    fn flow(qp: u32, packets: u64, bytes: u64, last: u64) -> (FlowKey, FlowStats) {
        let mut key = FlowKey::zeroed();
        key.src_ip[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
        key.dst_ip[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 2]);
        key.dst_qp = qp;
        let mut stats = FlowStats::zeroed();
        stats.init(SEC);
        // packets of SEND_ONLY (transport RC, operation 4): FlowStats::packets sums opcodes.
        stats.transport = 0;
        stats.opcodes[4] = packets;
        stats.bytes = bytes;
        stats.last_ns = last;
        (key, stats)
    }

    fn temp_log(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("roce-observer-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        path
    }

    fn run(src: &mut Scripted, plan: OutputPlan) -> (String, Vec<String>) {
        let (stdout, ended) = run_gated(src, plan, Gate::default());
        (stdout, ended.warnings)
    }

    fn run_gated(src: &mut Scripted, plan: OutputPlan, gate: Gate) -> (String, Ended) {
        let mut engine = Engine::new(EngineConfig::default());
        let outputs = Outputs::open(plan).expect("outputs open");
        let mut stdout = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let schedule = Schedule {
            interval: Duration::from_millis(1),
            duration: None,
        };
        let pipeline = Pipeline {
            gate,
            ..Pipeline::new(outputs)
        };
        let ended = rt
            .block_on(run_live(
                src,
                &mut engine,
                pipeline,
                None,
                schedule,
                std::future::pending(),
                &mut stdout,
            ))
            .expect("live run");
        (String::from_utf8(stdout).expect("utf-8"), ended)
    }

    #[test]
    fn each_interval_and_the_end_reach_every_output() {
        let logs = temp_log("logs");
        let _ = std::fs::remove_dir_all(&logs);
        let mut src = Scripted {
            steps: vec![
                (2 * SEC, vec![flow(0x11, 10, 10_000, 2 * SEC)]),
                (
                    3 * SEC,
                    vec![flow(0x11, 30, 30_000, 3 * SEC), flow(0x22, 5, 500, 3 * SEC)],
                ),
            ],
            next: 0,
            now: 0,
            stopped: false,
            removed_after: None,
        };
        let (stdout, warnings) = run(
            &mut src,
            OutputPlan {
                json: false,
                interval_tables: IntervalTables::Plain,
                log_dir: Some(crate::sink::logdir::LogDirConfig {
                    dir: logs.clone(),
                    max_bytes: 1 << 20,
                    max_files: 2,
                    max_age_ns: 0,
                    full_every_ns: 0,
                    observer_id: None,
                }),
                prom_file: None,
                metrics: None,
                metrics_top_flows: 10,
            },
        );
        assert!(src.stopped, "the source is stopped before the final report");
        assert_eq!(warnings, ["scripted warning"]);
        // Two interval tables, then the final one.
        assert_eq!(stdout.matches("SRC > DST").count(), 3, "{stdout}");
        let lines: Vec<serde_json::Value> =
            std::fs::read_to_string(logs.join(crate::sink::logdir::LIVE_NAME))
                .expect("log written")
                .lines()
                .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
                .collect();
        // The first interval's flow, then the two that changed in the second; the end adds
        // no flow (nothing changed) but a third summary.
        let flows: Vec<(u64, u64, u64, u64)> = lines
            .iter()
            .filter(|v| v["kind"] == "flow")
            .map(|v| {
                (
                    v["ts"].as_u64().expect("ts"),
                    v["dst_qp"].as_u64().expect("dst_qp"),
                    v["packets"].as_u64().expect("packets"),
                    v["delta"]["packets"].as_u64().expect("delta"),
                )
            })
            .collect();
        assert_eq!(
            flows,
            [
                (2 * SEC, 0x11, 10, 10),
                (3 * SEC, 0x11, 30, 20),
                (3 * SEC, 0x22, 5, 5)
            ]
        );
        assert_eq!(lines.iter().filter(|v| v["kind"] == "summary").count(), 3);
    }

    /// A capture file through the live pipeline ends with the capture and reports every frame
    /// (the same counts as `analyze`, which reads it with the same reader and engine path).
    #[test]
    fn a_capture_source_ends_the_run_with_every_frame_counted() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/mixed_demo.pcap");
        let open = || std::fs::File::open(&path).expect("fixture");
        let (mut batch, _) = crate::analyze::analyze_reader(open(), EngineConfig::default());
        let want = batch.snapshot(batch.last_ts());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let mut src = crate::source::capture::CaptureSource::start(
            "fixture".into(),
            open(),
            Some(std::fs::metadata(&path).expect("fixture").len()),
            crate::source::capture::Pace::Fast,
            Duration::from_secs(5),
        )
        .expect("a capture");
        let mut engine = Engine::new(EngineConfig::default());
        let outputs = Outputs::open(OutputPlan {
            json: true,
            interval_tables: IntervalTables::Off,
            log_dir: None,
            prom_file: None,
            metrics: None,
            metrics_top_flows: 10,
        })
        .expect("outputs");
        let mut stdout = Vec::new();
        rt.block_on(run_live(
            &mut src,
            &mut engine,
            Pipeline::new(outputs),
            None,
            Schedule {
                interval: Duration::from_millis(1),
                duration: None,
            },
            std::future::pending(),
            &mut stdout,
        ))
        .expect("live run ends with the capture");
        let got = engine.snapshot(engine.last_ts());
        assert_eq!(got.summary.total_packets, want.summary.total_packets);
        assert_eq!(got.summary.capture, want.summary.capture);
        let counts = |s: &crate::report::Snapshot| {
            s.flows
                .iter()
                .map(|f| (f.dst_qp, f.packets, f.psn_gaps, f.cnp))
                .collect::<Vec<_>>()
        };
        assert_eq!(counts(&got), counts(&want));
        let doc: serde_json::Value = serde_json::from_slice(&stdout).expect("one JSON document");
        assert_eq!(doc["summary"]["total_packets"], want.summary.total_packets);
    }

    fn three_intervals() -> Scripted {
        Scripted {
            steps: vec![
                (2 * SEC, vec![flow(0x11, 10, 10_000, 2 * SEC)]),
                (3 * SEC, vec![flow(0x22, 5, 500, 3 * SEC)]),
                (4 * SEC, vec![flow(0x33, 5, 500, 4 * SEC)]),
            ],
            next: 0,
            now: 0,
            stopped: false,
            removed_after: None,
        }
    }

    fn run_judged(src: &mut Scripted, expr: &str, each_interval: bool) -> (String, Ended) {
        let plan = OutputPlan {
            json: false,
            interval_tables: IntervalTables::Plain,
            log_dir: None,
            prom_file: None,
            metrics: None,
            metrics_top_flows: 10,
        };
        let gate = Gate {
            judge: Judge::new(vec![expr.parse().expect("expression")]),
            each_interval,
        };
        run_gated(src, plan, gate)
    }

    /// The kernel source's gate: the first interval report where the condition holds ends the
    /// run (source stopped, final report printed), and that interval's value is the reason.
    #[test]
    fn a_gate_judged_each_interval_ends_the_run_at_the_first_that_trips() {
        let mut src = three_intervals();
        let (stdout, ended) = run_judged(&mut src, "flows>=2", true);
        let tripped = ended.tripped.expect("the gate tripped");
        assert_eq!(
            tripped.to_string(),
            "--fail-on: flows>=2 (flows = 2)",
            "judged on the second interval"
        );
        assert!(src.stopped);
        // Two interval tables, then the final report (which drains the source once more).
        assert_eq!(stdout.matches("SRC > DST").count(), 3, "{stdout}");
        let (_, ended) = run_judged(&mut three_intervals(), "flows>=4", true);
        assert!(ended.tripped.is_none());
    }

    /// A capture's gate: interval reports are not judged; the final report is.
    #[test]
    fn a_gate_judged_at_the_end_only_sees_the_final_report() {
        let mut src = three_intervals();
        let (stdout, ended) = run_judged(&mut src, "flows>=2", false);
        assert_eq!(
            ended.tripped.expect("the gate tripped").to_string(),
            "--fail-on: flows>=2 (flows = 3)"
        );
        assert_eq!(stdout.matches("SRC > DST").count(), 4, "{stdout}");
        let (_, ended) = run_judged(&mut three_intervals(), "flows<2", false);
        assert!(ended.tripped.is_none());
    }

    /// A watched interface removed mid-run ends the run (without a UI) at that interval: the
    /// interval's outputs and the final report say which one, and the caller learns it.
    #[test]
    fn a_removed_interface_ends_the_run_and_is_reported() {
        let mut src = Scripted {
            steps: (2..12)
                .map(|t| (t * SEC, vec![flow(0x11, t, 1000 * t, t * SEC)]))
                .collect(),
            removed_after: Some(2),
            ..three_intervals()
        };
        let prom = temp_log("gone.prom");
        let plan = OutputPlan {
            json: true,
            interval_tables: IntervalTables::Off,
            log_dir: None,
            prom_file: Some(prom.clone()),
            metrics: None,
            metrics_top_flows: 10,
        };
        let (stdout, ended) = run_gated(&mut src, plan, Gate::default());
        assert_eq!(ended.gone, ["veth-gone"]);
        assert!(src.stopped);
        // Two intervals, then the final report's read: not the ten steps the source had.
        assert_eq!(src.next, 3);
        let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
        assert_eq!(
            doc["summary"]["interfaces_up"],
            serde_json::json!({"veth-gone": false, "veth-kept": true})
        );
        let text = std::fs::read_to_string(&prom).expect("metrics file");
        assert!(
            text.contains("\nroce_observer_interface_up{iface=\"veth-gone\"} 0\n")
                && text.contains("\nroce_observer_interface_up{iface=\"veth-kept\"} 1\n"),
            "{text}"
        );
        let (_, ended) = run_gated(&mut three_intervals(), plan_off(), Gate::default());
        assert!(ended.gone.is_empty());
    }

    fn plan_off() -> OutputPlan {
        OutputPlan {
            json: true,
            interval_tables: IntervalTables::Off,
            log_dir: None,
            prom_file: None,
            metrics: None,
            metrics_top_flows: 10,
        }
    }

    #[test]
    fn json_mode_prints_one_document_at_the_end_only() {
        let mut src = Scripted {
            steps: vec![(2 * SEC, vec![flow(0x11, 10, 10_000, 2 * SEC)])],
            next: 0,
            now: 0,
            stopped: false,
            removed_after: None,
        };
        let (stdout, _) = run(
            &mut src,
            OutputPlan {
                json: true,
                interval_tables: IntervalTables::Off,
                log_dir: None,
                prom_file: None,
                metrics: None,
                metrics_top_flows: 10,
            },
        );
        let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON document");
        assert_eq!(doc["summary"]["interval_end_ts"], 2 * SEC);
        assert_eq!(doc["flows"][0]["packets"], 10);
        assert_eq!(doc["flows"].as_array().map(Vec::len), Some(1));
    }
}
