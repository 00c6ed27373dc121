//! `--log-dir DIR`: a rotating directory of JSON Lines for leaving the observer running for
//! weeks (schema: docs/log-schema.md).
//!
//! - `roce-observer.jsonl` is the live file, plain text, appended once per interval (for
//!   `tail -f` and log shippers). It rotates when it holds `max_bytes` or is `max_age` old, at
//!   the next interval boundary; rotated files are gzip-compressed on a background thread and
//!   the oldest are deleted to keep `max_files` files and about `max_files x max_bytes` bytes.
//! - Every file starts with a `file_start` line and a full batch, so it stands alone; a full
//!   batch is also written every `full_every_ns`.
//! - Never fatal after start: a batch that cannot be written whole (full disk, removed
//!   directory, lost permission) is cut back out of the file, its lines are counted in
//!   `records_lost`, and the next interval tries again (recreating the directory and file if
//!   they vanished). Only an unusable directory at start is an error.
//! - Never follows a link planted in the directory: the live file is created exclusively,
//!   temporary files have random names, and a file with one of our names that is not a
//!   regular file of ours is never opened (a live path is moved aside, rotated ones are left
//!   alone); each is counted in `files_refused` and named once in a warning.

mod records;
mod rotate;

use std::{
    collections::BTreeSet,
    fs::{self, File},
    io::{self, Write as _},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    thread::JoinHandle,
};

pub use records::{LOG_SCHEMA_VERSION, LogHealth};
pub use rotate::{LIVE_NAME, utc_stamp};

use crate::{
    engine::snapshot::Snapshot,
    sink::files::{self, Refusal},
};

/// Settings of the log directory.
#[derive(Clone, Debug, PartialEq)]
pub struct LogDirConfig {
    pub dir: PathBuf,
    /// Rotate the live file once it holds this many bytes.
    pub max_bytes: u64,
    /// Files kept, the live one included (at least 2).
    pub max_files: usize,
    /// Rotate the live file once it is this old (ns of log time).
    pub max_age_ns: u64,
    /// Write a full batch this often (ns of log time; 0: only at the start of each file).
    pub full_every_ns: u64,
}

pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
pub const DEFAULT_MAX_FILES: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum LogDirError {
    /// The OS error is part of the message, not a source: printed with its cause chain it
    /// would otherwise appear twice.
    #[error(
        "cannot use the log directory {dir}: {cause} (create it, make it writable for this user, or pass another --log-dir)"
    )]
    Unusable { dir: PathBuf, cause: io::Error },
    #[error(
        "--log-dir {dir} is a file, not a directory: give a directory (created if missing), e.g. --log-dir /var/log/roce-observer"
    )]
    NotADirectory { dir: PathBuf },
    #[error("--log-max-files must be at least 2 (the live file and one rotated file)")]
    TooFewFiles,
    #[error("--log-max-bytes must be at least 4096")]
    TooFewBytes,
}

/// The live file and what is known about it.
struct Live {
    file: File,
    /// (device, inode) of the open file, to notice when the path no longer leads to it.
    id: (u64, u64),
    len: u64,
    /// Log time of the first batch in the file (the age for rotation counts from there, so a
    /// capture's clock works as well as the wall clock).
    first_batch_ts: Option<u64>,
}

/// The log directory writer.
pub struct LogDir {
    cfg: LogDirConfig,
    host: String,
    live: Option<Live>,
    baseline: records::Baseline,
    last_full_ts: Option<u64>,
    health: LogHealth,
    /// The last failure, for the status line (cleared by the next written batch).
    last_error: Option<String>,
    worker: Option<JoinHandle<rotate::Pass>>,
    /// Paths refused so far (each is warned about and counted once).
    refused: BTreeSet<PathBuf>,
    /// Warnings not yet taken by [`LogDir::take_warnings`].
    warnings: Vec<String>,
}

pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

fn file_id(m: &fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

impl LogDir {
    /// Create the directory if needed and check that a file can be written there; a live file
    /// left by an earlier run is rotated first. Errors here are the user's to fix.
    pub fn open(cfg: LogDirConfig, ts: u64) -> Result<LogDir, LogDirError> {
        if cfg.max_files < 2 {
            return Err(LogDirError::TooFewFiles);
        }
        if cfg.max_bytes < 4096 {
            return Err(LogDirError::TooFewBytes);
        }
        if fs::metadata(&cfg.dir).is_ok_and(|m| !m.is_dir()) {
            return Err(LogDirError::NotADirectory { dir: cfg.dir });
        }
        let unusable = |cause| LogDirError::Unusable {
            dir: cfg.dir.clone(),
            cause,
        };
        fs::create_dir_all(&cfg.dir).map_err(unusable)?;
        let mut log = LogDir {
            host: hostname(),
            live: None,
            baseline: records::Baseline::default(),
            last_full_ts: None,
            health: LogHealth::default(),
            last_error: None,
            worker: None,
            refused: BTreeSet::new(),
            warnings: Vec::new(),
            cfg,
        };
        log.clear_live_path(ts)
            .map_err(|cause| LogDirError::Unusable {
                dir: log.cfg.dir.clone(),
                cause,
            })?;
        let live = log.create_live(ts).map_err(|cause| LogDirError::Unusable {
            dir: log.cfg.dir.clone(),
            cause,
        })?;
        log.live = Some(live);
        log.spawn_retention();
        Ok(log)
    }

    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }

    pub fn health(&self) -> LogHealth {
        self.health
    }

    /// Warnings since the last call (files refused), one line each.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Count and name a refused file, once per path it stays at.
    fn refuse(&mut self, path: &Path, why: Refusal, moved_to: Option<&Path>) {
        if !self.refused.insert(moved_to.unwrap_or(path).to_path_buf()) {
            return;
        }
        self.health.files_refused += 1;
        let moved = moved_to.map_or(String::new(), |to| {
            format!(" (moved aside to {})", to.display())
        });
        self.warnings.push(format!(
            "log directory: {} {why}: not opened{moved}; remove it, and keep --log-dir writable \
             only by this user",
            path.display()
        ));
    }

    /// Make room for a new live file: a live file left by an earlier run (or replaced under
    /// us) is rotated like any other; anything else there is moved aside unread.
    fn clear_live_path(&mut self, ts: u64) -> io::Result<()> {
        let path = self.live_path();
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        match files::check_ours(&meta) {
            Ok(()) => {
                rotate::rename_live(&self.cfg.dir, ts)?;
            }
            Err(why) => {
                let to = rotate::move_aside(&self.cfg.dir, ts)?;
                self.refuse(&path, why, Some(&to));
            }
        }
        Ok(())
    }

    fn note_pass(&mut self, pass: rotate::Pass) {
        self.health.files_deleted += pass.deleted;
        for (path, why) in pass.refused {
            self.refuse(&path, why, None);
        }
    }

    /// Why the last batch was lost, while writing has not recovered.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    fn live_path(&self) -> PathBuf {
        self.cfg.dir.join(LIVE_NAME)
    }

    /// A new live file with its `file_start` line.
    fn create_live(&self, ts: u64) -> io::Result<Live> {
        let path = self.live_path();
        let mut file = files::create_exclusive(&path)?;
        let start =
            records::file_start_line(ts, &self.host, self.cfg.max_bytes, self.cfg.max_files);
        if let Err(e) = file.write_all(&start) {
            drop(file);
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        let id = file_id(&file.metadata()?);
        Ok(Live {
            file,
            id,
            len: start.len() as u64,
            first_batch_ts: None,
        })
    }

    /// The live file if the path still leads to the one we hold; otherwise a fresh one (the
    /// directory was removed or the file deleted or moved by someone else).
    fn ensure_live(&mut self, ts: u64) -> io::Result<&mut Live> {
        let path = self.live_path();
        // The path itself, not what a link there leads to.
        let intact = match (&self.live, fs::symlink_metadata(&path)) {
            (Some(live), Ok(m)) => m.file_type().is_file() && file_id(&m) == live.id,
            _ => false,
        };
        if !intact {
            self.live = None;
            // A new file must begin with a full batch to stand alone.
            self.last_full_ts = None;
            fs::create_dir_all(&self.cfg.dir)?;
            self.clear_live_path(ts)?;
            self.live = Some(self.create_live(ts)?);
        }
        self.live
            .as_mut()
            .ok_or_else(|| io::Error::other("live file missing"))
    }

    /// Rotate when the live file is full or old enough (at a batch boundary).
    fn rotate_if_due(&mut self, ts: u64) {
        let due = self.live.as_ref().is_some_and(|l| {
            l.len >= self.cfg.max_bytes
                || (self.cfg.max_age_ns > 0
                    && l.first_batch_ts
                        .is_some_and(|t| ts.saturating_sub(t) >= self.cfg.max_age_ns))
        });
        if !due {
            return;
        }
        // Renaming within the directory is atomic; on failure we keep appending and try again
        // next interval.
        if rotate::rename_live(&self.cfg.dir, ts).is_ok() {
            self.live = None;
            self.last_full_ts = None;
            self.health.files_rotated += 1;
            self.spawn_retention();
        }
    }

    /// Compress and prune on a background thread, one at a time: gzip of a 64 MiB file takes
    /// about a second, which the event loop must not wait for.
    fn spawn_retention(&mut self) {
        if self.worker.as_ref().is_some_and(|w| !w.is_finished()) {
            // The running pass finishes; the next rotation picks up what it left.
            return;
        }
        self.collect_worker();
        let dir = self.cfg.dir.clone();
        let max_files = self.cfg.max_files;
        let budget = self.cfg.max_bytes.saturating_mul(max_files as u64);
        self.worker = std::thread::Builder::new()
            .name("log-retention".into())
            .spawn(move || rotate::retention(&dir, max_files, budget))
            .ok();
    }

    fn collect_worker(&mut self) {
        if let Some(w) = self.worker.take_if(|w| w.is_finished())
            && let Ok(pass) = w.join()
        {
            self.note_pass(pass);
        }
    }

    /// Log one interval's snapshot taken at `ts` (ns since the epoch; log time for rotation by
    /// age and for full batches). Never fails: losses are counted in [`LogDir::health`].
    pub fn write(&mut self, snap: &Snapshot, ts: u64) {
        self.collect_worker();
        self.rotate_if_due(ts);
        // Before building the batch: a file made here must begin with a full batch.
        let ready = self.ensure_live(ts).map(|_| ());
        let full = match self.last_full_ts {
            None => true,
            Some(last) => {
                self.cfg.full_every_ns > 0 && ts.saturating_sub(last) >= self.cfg.full_every_ns
            }
        };
        let batch = records::build(snap, ts, full, &self.baseline, self.health);
        match ready.and_then(|()| self.append(&batch.text, ts)) {
            Ok(()) => {
                self.health.records_written += batch.records;
                self.baseline.advance(batch.next);
                if full {
                    self.last_full_ts = Some(ts);
                }
                self.last_error = None;
            }
            Err(e) => {
                self.health.records_lost += batch.records;
                self.last_error = Some(e.to_string());
            }
        }
    }

    /// Append a whole batch or nothing: a partial write is cut back so the file holds only
    /// complete lines.
    fn append(&mut self, text: &[u8], ts: u64) -> io::Result<()> {
        let Some(live) = self.live.as_mut() else {
            return Err(io::Error::other("no live file"));
        };
        let start = live.len;
        match live.file.write_all(text) {
            Ok(()) => {
                live.len += text.len() as u64;
                live.first_batch_ts.get_or_insert(ts);
                Ok(())
            }
            Err(e) => {
                // Shrinking frees space, so this works on a full disk; if it fails too, drop
                // the file so the next interval starts a fresh one instead of appending after a
                // torn line.
                if live.file.set_len(start).is_err() {
                    self.live = None;
                }
                Err(e)
            }
        }
    }

    /// Flush to disk and finish compression and retention; called once at exit.
    pub fn finish(&mut self) {
        if let Some(live) = &self.live {
            let _ = live.file.sync_data();
        }
        if let Some(w) = self.worker.take()
            && let Ok(pass) = w.join()
        {
            self.note_pass(pass);
        }
        // Rotations that happened while a pass was running left their files for the next pass.
        let pass = rotate::retention(
            &self.cfg.dir,
            self.cfg.max_files,
            self.cfg.max_bytes.saturating_mul(self.cfg.max_files as u64),
        );
        self.note_pass(pass);
    }
}

#[cfg(test)]
mod tests;
