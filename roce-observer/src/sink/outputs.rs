//! The fan-out from snapshots to every requested renderer, shared by `run` and `analyze`:
//! built once from the arguments, called once per report interval and once at the end.
//!
//! One policy for both commands:
//! - the flow log is opened when the command starts, created if missing and appended to
//!   otherwise (never truncated: it is meant to outlive single runs);
//! - the first failed write (stdout, flow log, metrics file) ends the command with an error that
//!   names the file; nothing is dropped silently.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use crate::{
    engine::snapshot::Snapshot,
    sink::{json, prometheus, table},
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
    /// JSON lines, appended every interval and at the end.
    pub flow_log: Option<PathBuf>,
    /// Prometheus text file, replaced every interval and at the end.
    pub prom_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot open the flow log {}", .path.display())]
    OpenFlowLog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the flow log {}", .path.display())]
    FlowLog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing metrics to {}", .path.display())]
    Metrics {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the {what} to stdout")]
    Stdout {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

struct FlowLog {
    path: PathBuf,
    file: BufWriter<File>,
}

impl FlowLog {
    fn write(&mut self, snap: &Snapshot) -> Result<(), OutputError> {
        // Each batch is flushed so that a reader tailing the file sees whole intervals.
        json::write_flow_log(&mut self.file, snap, snap.summary.interval_end_ts)
            .and_then(|()| self.file.flush())
            .map_err(|source| OutputError::FlowLog {
                path: self.path.clone(),
                source,
            })
    }
}

/// The open outputs of one command.
pub struct Outputs {
    json: bool,
    interval_tables: IntervalTables,
    flow_log: Option<FlowLog>,
    prom_file: Option<PathBuf>,
}

impl Outputs {
    /// Open what needs opening (the flow log), so that a bad path fails before any work.
    pub fn open(plan: OutputPlan) -> Result<Outputs, OutputError> {
        let flow_log = match plan.flow_log {
            Some(path) => {
                let file = File::options()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|source| OutputError::OpenFlowLog {
                        path: path.clone(),
                        source,
                    })?;
                Some(FlowLog {
                    path,
                    file: BufWriter::new(file),
                })
            }
            None => None,
        };
        Ok(Outputs {
            json: plan.json,
            interval_tables: plan.interval_tables,
            flow_log,
            prom_file: plan.prom_file,
        })
    }

    /// The end of one report interval.
    pub fn interval(&mut self, snap: &Snapshot, stdout: &mut dyn Write) -> Result<(), OutputError> {
        self.files(snap)?;
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
        writeln!(stdout, "{}", table::render(snap))
            .and_then(|()| stdout.flush())
            .map_err(stdout_err)
    }

    /// The final report: files first (so they are complete even if stdout is a closed pipe),
    /// then the JSON document or the table.
    pub fn finish(mut self, snap: &Snapshot, stdout: &mut dyn Write) -> Result<(), OutputError> {
        self.files(snap)?;
        let result = if self.json {
            json::write_document(&mut *stdout, snap).map_err(|source| OutputError::Stdout {
                what: "JSON document",
                source,
            })
        } else {
            stdout
                .write_all(table::render(snap).as_bytes())
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

    fn files(&mut self, snap: &Snapshot) -> Result<(), OutputError> {
        if let Some(path) = &self.prom_file {
            write_metrics(path, snap)?;
        }
        if let Some(log) = self.flow_log.as_mut() {
            log.write(snap)?;
        }
        Ok(())
    }
}

fn write_metrics(path: &Path, snap: &Snapshot) -> Result<(), OutputError> {
    prometheus::write_file(path, snap).map_err(|source| OutputError::Metrics {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig};

    fn temp_path(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("roce-observer-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        path
    }

    #[test]
    fn flow_log_is_appended_not_truncated() {
        let path = temp_path("append.jsonl");
        std::fs::write(&path, "{\"earlier\":true}\n").expect("seed the log");
        let outputs = Outputs::open(OutputPlan {
            json: true,
            interval_tables: IntervalTables::Off,
            flow_log: Some(path.clone()),
            prom_file: None,
        })
        .expect("open");
        let snap = Engine::new(EngineConfig::default()).snapshot(5);
        let mut stdout = Vec::new();
        outputs.finish(&snap, &mut stdout).expect("finish");
        let text = std::fs::read_to_string(&path).expect("read back");
        assert_eq!(
            text, "{\"earlier\":true}\n",
            "no flows: nothing added, nothing lost"
        );
        let doc: serde_json::Value = serde_json::from_slice(&stdout).expect("JSON on stdout");
        assert_eq!(doc["summary"]["interval_end_ts"], 5);
    }

    #[test]
    fn unopenable_flow_log_fails_before_any_work_and_names_the_path() {
        let path = temp_path("missing-dir").join("log.jsonl");
        let err = Outputs::open(OutputPlan {
            json: false,
            interval_tables: IntervalTables::Plain,
            flow_log: Some(path.clone()),
            prom_file: None,
        })
        .err()
        .expect("a file in a missing directory cannot be opened");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
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
                flow_log: None,
                prom_file: None,
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
