//! The fan-out from snapshots to every requested renderer, shared by `run` and `analyze`:
//! built once from the arguments, called once per report interval and once at the end.
//!
//! One policy for both commands:
//! - everything that can be refused is opened when the command starts: the log directory
//!   (created if missing) and the metrics address (bound), so a mistake fails before any work;
//! - the log directory never ends the command afterwards: lines that cannot be written (full
//!   disk, removed directory, lost permission) are counted ([`Outputs::health`], the next
//!   report's `summary.log_records_lost`)
//!   (shown in the TUI header, the JSON document and the metrics) and writing resumes by itself;
//! - nor does the metrics file (`--prom-file`): a failed write is counted in
//!   `summary.prom_file_errors` (and `roce_observer_prom_file_errors_total`), its temporary
//!   file removed, and the next interval writes it again; the failure and the recovery are
//!   each said once on stderr;
//! - the first failed write to stdout ends the command with an error that names it.

use std::{
    io::Write,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
};

use crate::{
    report::{OutputHealth, Snapshot},
    sink::{
        json,
        logdir::{LogDir, LogDirConfig, LogDirError},
        metrics::{
            self, Health,
            server::{MetricsServer, ServeError},
        },
        table,
    },
};

/// What is printed on stdout every interval (the final report is always printed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntervalTables {
    /// Nothing (JSON at the end, or the terminal UI draws the intervals).
    Off,
    /// The table.
    Plain,
    /// A line saying which stretch of the capture the table covers, then the table.
    WithCaptureSpan,
}

/// Which outputs a command wants.
#[derive(Clone, Debug)]
pub struct OutputPlan {
    /// One JSON document at the end instead of the final table.
    pub json: bool,
    pub interval_tables: IntervalTables,
    /// The rotating JSON Lines directory, written every interval and at the end.
    pub log_dir: Option<LogDirConfig>,
    /// Prometheus text file, replaced every interval and at the end.
    pub prom_file: Option<PathBuf>,
    /// Serve `/metrics` on this address (`run` only: needs the live loop's runtime).
    pub metrics: Option<SocketAddr>,
    /// Per-flow series for this many flows (and as many problem flows), file and endpoint.
    pub metrics_top_flows: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(transparent)]
    LogDir(#[from] LogDirError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error(
        "cannot write the metrics file {}: {source} (create its directory, make it writable for this user, or pass another --prom-file)",
        .path.display()
    )]
    PromFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing the {what} to stdout")]
    Stdout {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The open outputs of one command.
pub struct Outputs {
    json: bool,
    interval_tables: IntervalTables,
    log: Option<LogDir>,
    prom_file: Option<PromFile>,
    server: Option<MetricsServer>,
    top_flows: usize,
    /// Warnings not yet taken (printed by `finish` if never taken).
    warnings: Vec<String>,
}

/// The `--prom-file` textfile and its failed writes.
struct PromFile {
    path: PathBuf,
    errors: u64,
    /// The error of the last write while writing fails (said once, until it changes).
    failing: Option<String>,
}

impl PromFile {
    /// A file that cannot be created in the directory at start is the user's to fix.
    fn open(path: PathBuf) -> Result<PromFile, OutputError> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let probe = crate::sink::files::create_temp(dir, ".roce-observer-probe.", ".tmp")
            .and_then(|(_, tmp)| std::fs::remove_file(tmp));
        match probe {
            Ok(()) => Ok(PromFile {
                path,
                errors: 0,
                failing: None,
            }),
            Err(source) => Err(OutputError::PromFile { path, source }),
        }
    }

    /// Replace the file; a failure is counted and said (once), never returned.
    fn write(&mut self, text: &str, warnings: &mut Vec<String>) {
        match metrics::write_textfile(&self.path, text) {
            Ok(()) => {
                if self.failing.take().is_some() {
                    hold_warnings(
                        warnings,
                        vec![format!(
                            "the metrics file {} is written again ({} failed writes so far)",
                            self.path.display(),
                            self.errors
                        )],
                    );
                }
            }
            Err(e) => {
                self.errors += 1;
                let msg = e.to_string();
                if self.failing.as_deref() != Some(msg.as_str()) {
                    hold_warnings(
                        warnings,
                        vec![format!(
                            "cannot write the metrics file {}: {msg}; counted in \
                             prom_file_errors and tried again every interval (free space on its \
                             file system or make its directory writable for this user)",
                            self.path.display()
                        )],
                    );
                }
                self.failing = Some(msg);
            }
        }
    }
}

/// Warnings kept while nobody takes them (the terminal UI is up): the first ones say enough.
const MAX_HELD_WARNINGS: usize = 100;

impl Outputs {
    /// Open what needs opening (the log directory, the metrics address), so that a bad path or
    /// a busy port fails before any work.
    pub fn open(plan: OutputPlan) -> Result<Outputs, OutputError> {
        let log = match plan.log_dir {
            Some(cfg) => Some(LogDir::open(cfg, crate::sink::logdir::now_ns())?),
            None => None,
        };
        let prom_file = plan.prom_file.map(PromFile::open).transpose()?;
        let server = match plan.metrics {
            Some(addr) => Some(MetricsServer::bind(addr, plan.metrics_top_flows)?),
            None => None,
        };
        Ok(Outputs {
            json: plan.json,
            interval_tables: plan.interval_tables,
            log,
            prom_file,
            server,
            top_flows: plan.metrics_top_flows,
            warnings: Vec::new(),
        })
    }

    /// Warnings since the last call (files refused in the log directory), one line each, for
    /// stderr. Those not taken are printed by [`Outputs::finish`].
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Start serving `/metrics` on the current tokio runtime (the live loop calls this once it
    /// runs); returns the address served, if any.
    pub fn serve(&mut self) -> Result<Option<SocketAddr>, OutputError> {
        match self.server.as_mut() {
            Some(server) => Ok(Some(server.serve()?)),
            None => Ok(None),
        }
    }

    /// What the outputs say about themselves in the next report.
    pub fn health(&self) -> OutputHealth {
        OutputHealth {
            log_records_lost: self.log.as_ref().map(|log| log.health().records_lost),
            prom_file_errors: self.prom_file.as_ref().map(|prom| prom.errors),
        }
    }

    /// The end of one report interval.
    pub fn interval(&mut self, snap: &Snapshot, stdout: &mut dyn Write) -> Result<(), OutputError> {
        self.files(snap);
        let stdout_err = |source| OutputError::Stdout {
            what: "interval table",
            source,
        };
        match self.interval_tables {
            IntervalTables::Off => return Ok(()),
            IntervalTables::Plain => {}
            IntervalTables::WithCaptureSpan => writeln!(
                stdout,
                "--- {:.3} s of capture, up to {} ns ---",
                snap.summary.interval_s, snap.summary.interval_end_ts
            )
            .map_err(stdout_err)?,
        }
        writeln!(
            stdout,
            "{}",
            table::render_for(snap, table::terminal_width())
        )
        .and_then(|()| stdout.flush())
        .map_err(stdout_err)
    }

    /// The final report: files first (so they are complete even if stdout is a closed pipe),
    /// then the JSON document or the table.
    pub fn finish(mut self, snap: &Snapshot, stdout: &mut dyn Write) -> Result<(), OutputError> {
        self.files(snap);
        if let Some(log) = self.log.as_mut() {
            log.finish();
            hold_warnings(&mut self.warnings, log.take_warnings());
            for warning in self.warnings.drain(..) {
                eprintln!("roce-observer: {warning}");
            }
            let health = log.health();
            if let Some(err) = log.last_error() {
                eprintln!(
                    "roce-observer: {} log lines could not be written to {}: {err}",
                    health.records_lost,
                    log.dir().display()
                );
            }
        }
        let result = if self.json {
            json::write_document(&mut *stdout, snap).map_err(|source| OutputError::Stdout {
                what: "JSON document",
                source,
            })
        } else {
            stdout
                .write_all(table::render_for(snap, table::terminal_width()).as_bytes())
                .map_err(|source| OutputError::Stdout {
                    what: "table",
                    source,
                })
        };
        result?;
        stdout.flush().map_err(|source| OutputError::Stdout {
            what: "report",
            source,
        })
    }

    /// The log directory, the endpoint's snapshot and the metrics file: never fails.
    fn files(&mut self, snap: &Snapshot) {
        let mut health = Health::default();
        if let Some(log) = self.log.as_mut() {
            log.write(snap, snap.summary.interval_end_ts);
            let h = log.health();
            hold_warnings(&mut self.warnings, log.take_warnings());
            health.log_records_lost = Some(h.records_lost);
            health.log_records_written = Some(h.records_written);
        }
        if let Some(server) = &self.server {
            server.publish(
                Arc::new(snap.clone()),
                health.log_records_lost.zip(health.log_records_written),
            );
        }
        if let Some(prom) = self.prom_file.as_mut() {
            prom.write(
                &metrics::render(snap, self.top_flows, &health),
                &mut self.warnings,
            );
        }
    }
}

fn hold_warnings(held: &mut Vec<String>, new: Vec<String>) {
    let room = MAX_HELD_WARNINGS.saturating_sub(held.len());
    held.extend(new.into_iter().take(room));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        engine::{Engine, EngineConfig},
        report::Beside,
    };

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "roce-observer-outputs-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        dir
    }

    fn plan() -> OutputPlan {
        OutputPlan {
            json: true,
            interval_tables: IntervalTables::Off,
            log_dir: None,
            prom_file: None,
            metrics: None,
            metrics_top_flows: metrics::DEFAULT_TOP_FLOWS,
        }
    }

    /// The engine's report with the outputs' health, as the pipeline assembles it.
    fn report(engine: &mut Engine, outputs: &Outputs, now: u64) -> Snapshot {
        engine.report(
            now,
            Beside {
                outputs: outputs.health(),
                ..Beside::default()
            },
        )
    }

    #[test]
    fn log_dir_and_metrics_file_get_every_report_and_the_lost_count_reaches_the_summary() {
        let dir = temp_dir("files");
        let logs = dir.join("logs");
        let prom = dir.join("roce.prom");
        let mut outputs = Outputs::open(OutputPlan {
            log_dir: Some(LogDirConfig {
                dir: logs.clone(),
                max_bytes: crate::sink::logdir::DEFAULT_MAX_BYTES,
                max_files: 4,
                max_age_ns: 0,
                full_every_ns: 0,
                observer_id: None,
            }),
            prom_file: Some(prom.clone()),
            ..plan()
        })
        .expect("open");
        let mut engine = Engine::new(EngineConfig::default());
        let mut stdout = Vec::new();
        let snap = report(&mut engine, &outputs, 5);
        outputs.interval(&snap, &mut stdout).expect("interval");
        assert_eq!(outputs.health().log_records_lost, Some(0));
        let snap = report(&mut engine, &outputs, 6);
        outputs.finish(&snap, &mut stdout).expect("finish");
        let doc: serde_json::Value = serde_json::from_slice(&stdout).expect("JSON on stdout");
        assert_eq!(doc["summary"]["log_records_lost"], 0);
        let text = std::fs::read_to_string(logs.join(crate::sink::logdir::LIVE_NAME))
            .expect("live log file");
        let kinds: Vec<String> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
                v["kind"].as_str().expect("kind").to_string()
            })
            .collect();
        assert_eq!(kinds, ["file_start", "ecmp", "summary", "summary"]);
        let metrics = std::fs::read_to_string(&prom).expect("metrics file");
        assert!(
            metrics.contains("\nroce_observer_log_records_lost_total 0\n"),
            "{metrics}"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_failing_metrics_file_is_counted_and_written_again_never_fatal() {
        let dir = temp_dir("prom-errors");
        let prom_dir = dir.join("textfiles");
        std::fs::create_dir_all(&prom_dir).expect("create");
        let prom = prom_dir.join("roce.prom");
        let mut outputs = Outputs::open(OutputPlan {
            prom_file: Some(prom.clone()),
            ..plan()
        })
        .expect("open");
        let mut engine = Engine::new(EngineConfig::default());
        let mut stdout = Vec::new();
        let snap = report(&mut engine, &outputs, 1);
        outputs.interval(&snap, &mut stdout).expect("interval");
        assert_eq!(outputs.health().prom_file_errors, Some(0));
        assert!(outputs.take_warnings().is_empty());
        // The directory goes away: two intervals fail, are counted, and said once.
        std::fs::remove_dir_all(&prom_dir).expect("remove");
        for n in 1..=2 {
            let snap = report(&mut engine, &outputs, 1 + n);
            outputs
                .interval(&snap, &mut stdout)
                .expect("a failed metrics file write does not stop the command");
            assert_eq!(outputs.health().prom_file_errors, Some(n));
        }
        let warnings = outputs.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&prom.display().to_string())
                && warnings[0].contains("prom_file_errors")
                && warnings[0].contains("tried again"),
            "{warnings:?}"
        );
        // Back: written again, with the count, and the recovery is said.
        std::fs::create_dir_all(&prom_dir).expect("create");
        let snap = report(&mut engine, &outputs, 5);
        outputs.interval(&snap, &mut stdout).expect("interval");
        let text = std::fs::read_to_string(&prom).expect("metrics file");
        assert!(
            text.contains("\nroce_observer_prom_file_errors_total 2\n"),
            "{text}"
        );
        let warnings = outputs.take_warnings();
        assert!(
            warnings.len() == 1 && warnings[0].contains("written again"),
            "{warnings:?}"
        );
        let snap = report(&mut engine, &outputs, 6);
        outputs.finish(&snap, &mut stdout).expect("finish");
        let doc: serde_json::Value = serde_json::from_slice(&stdout).expect("JSON on stdout");
        assert_eq!(doc["summary"]["prom_file_errors"], 2);
        let left: Vec<_> = std::fs::read_dir(&prom_dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, ["roce.prom"], "no temporary file is left");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn unusable_log_dir_or_busy_address_fails_before_any_work_and_says_what() {
        let dir = temp_dir("unusable");
        let file = dir.join("a-file");
        std::fs::write(&file, b"").expect("write");
        let err = Outputs::open(OutputPlan {
            log_dir: Some(LogDirConfig {
                dir: file.clone(),
                max_bytes: 1 << 20,
                max_files: 2,
                max_age_ns: 0,
                full_every_ns: 0,
                observer_id: None,
            }),
            ..plan()
        })
        .err()
        .expect("a file is not a directory");
        assert!(
            err.to_string().contains(&file.display().to_string()),
            "{err}"
        );
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("addr");
        let err = Outputs::open(OutputPlan {
            metrics: Some(addr),
            ..plan()
        })
        .err()
        .expect("address in use");
        assert!(err.to_string().contains("already in use"), "{err}");
        let missing = dir.join("no-such-dir/roce.prom");
        let err = Outputs::open(OutputPlan {
            prom_file: Some(missing.clone()),
            ..plan()
        })
        .err()
        .expect("a metrics file in a missing directory");
        let msg = err.to_string();
        assert!(
            msg.contains(&missing.display().to_string()) && msg.contains("--prom-file"),
            "{msg}"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn interval_tables_carry_the_capture_span_only_when_asked() {
        let snap = Engine::new(EngineConfig::default()).snapshot(0);
        for (style, header) in [
            (IntervalTables::Plain, false),
            (IntervalTables::WithCaptureSpan, true),
            (IntervalTables::Off, false),
        ] {
            let mut outputs = Outputs::open(OutputPlan {
                json: false,
                interval_tables: style,
                ..plan()
            })
            .expect("nothing to open");
            let mut stdout = Vec::new();
            outputs.interval(&snap, &mut stdout).expect("interval");
            let text = String::from_utf8(stdout).expect("utf-8");
            assert_eq!(text.contains("s of capture"), header, "{style:?}: {text}");
            assert_eq!(text.contains("SRC > DST"), style != IntervalTables::Off);
        }
    }
}
