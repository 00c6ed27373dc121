//! The live pipeline: a [`LiveSource`] -> the engine -> the outputs (or the terminal UI), one
//! report per interval and a final one. Independent of where the data comes from, so it is
//! tested here against a scripted source, without root.

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
    engine::Engine,
    sink::outputs::Outputs,
    source::{LiveSource, SourceState},
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
    pub fn start(title: String, engine: &Engine, now_ns: u64) -> Ui {
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
        let app = &self.app;
        self.terminal
            .draw(|f| tui::view::draw(f, app))
            .context("drawing the UI")?;
        Ok(())
    }
}

/// Timing of a live run.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub interval: Duration,
    /// Stop at the first report after this long (default: until stopped or the input ends).
    pub duration: Option<Duration>,
}

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

/// Run until `stop` completes, the duration is over, the user quits the UI, or the source ends;
/// then stop the source and write the final report. Returns the source's warnings.
pub async fn run_live<S: LiveSource>(
    src: &mut S,
    engine: &mut Engine,
    mut outputs: Outputs,
    mut ui: Option<Ui>,
    schedule: Schedule,
    stop: impl Future<Output = ()>,
    stdout: &mut dyn Write,
) -> anyhow::Result<Vec<String>> {
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
    if let Some(addr) = outputs.serve()? {
        eprintln!("roce-observer: metrics at http://{addr}/metrics");
    }
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(schedule.interval);
    let deadline = schedule.duration.map(|d| Instant::now() + d);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            ready = readable(events.as_ref()) => {
                ready.context("polling the source")?;
                if src.pump(engine)? == SourceState::Ended {
                    break;
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
            _ = tick.tick() => {
                let state = src.refresh(engine)?;
                let now = src.now_ns();
                let mut snap = engine.snapshot(now);
                outputs.interval(&mut snap, stdout)?;
                if let Some(ui) = ui.as_mut() {
                    ui.app.update(Action::Snapshot(Box::new(snap)));
                    ui.draw()?;
                }
                engine.begin_interval(now);
                if state == SourceState::Ended || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
        }
    }
    // Leave the UI before the final report goes to the normal screen.
    drop(ui);
    drop(events);
    let refreshed = src.refresh(engine);
    let warnings = src.stop();
    refreshed?;
    let mut snap = engine.snapshot(src.now_ns());
    outputs.finish(&mut snap, stdout)?;
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use roce_observer_common::{FlowKey, FlowStats};

    use super::*;
    use crate::{
        engine::EngineConfig,
        sink::outputs::{IntervalTables, OutputPlan},
    };

    /// A source that replays scripted flow-map contents, one step per report, then ends.
    struct Scripted {
        steps: Vec<(u64, Vec<(FlowKey, FlowStats)>)>,
        next: usize,
        now: u64,
        stopped: bool,
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
    }

    const SEC: u64 = 1_000_000_000;

    fn flow(qp: u32, packets: u64, bytes: u64, last: u64) -> (FlowKey, FlowStats) {
        let mut key = FlowKey::zeroed();
        key.src_ip[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
        key.dst_ip[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 2]);
        key.dst_qp = qp;
        let mut stats = FlowStats::zeroed();
        stats.init(SEC);
        stats.packets = packets;
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
        let warnings = rt
            .block_on(run_live(
                src,
                &mut engine,
                outputs,
                None,
                schedule,
                std::future::pending(),
                &mut stdout,
            ))
            .expect("live run");
        (String::from_utf8(stdout).expect("utf-8"), warnings)
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

    #[test]
    fn json_mode_prints_one_document_at_the_end_only() {
        let mut src = Scripted {
            steps: vec![(2 * SEC, vec![flow(0x11, 10, 10_000, 2 * SEC)])],
            next: 0,
            now: 0,
            stopped: false,
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
