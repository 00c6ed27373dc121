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
    report::Snapshot,
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
    /// The `host` of every line (None: the host name).
    pub observer_id: Option<String>,
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
    /// Length of its `file_start` line.
    start_len: u64,
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
    /// Whether the last full batch fitted in one file. When it does not, a new file begins
    /// with a change batch: otherwise every interval would write a full batch, split over
    /// files, and rotate.
    full_fits: bool,
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

/// Out of space on the device or of the user's quota.
fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
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
            host: cfg.observer_id.clone().unwrap_or_else(hostname),
            live: None,
            baseline: records::Baseline::default(),
            last_full_ts: None,
            health: LogHealth::default(),
            last_error: None,
            worker: None,
            full_fits: true,
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
            start_len: start.len() as u64,
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
        if due && self.rotate(ts) {
            self.spawn_retention();
        }
    }

    /// Rename the live file to a rotated name; the next file begins with a full batch when one
    /// fits in a file. On failure we keep appending and try again next interval.
    fn rotate(&mut self, ts: u64) -> bool {
        // Renaming within the directory is atomic.
        if rotate::rename_live(&self.cfg.dir, ts).is_err() {
            return false;
        }
        self.live = None;
        if self.full_fits {
            self.last_full_ts = None;
        }
        self.health.files_rotated += 1;
        true
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

    /// Wait for the running pass, so that this thread alone touches the rotated files.
    fn join_worker(&mut self) {
        if let Some(w) = self.worker.take()
            && let Ok(pass) = w.join()
        {
            self.note_pass(pass);
        }
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
        let mut result = self.write_batch(snap, ts);
        if let Err((e, _)) = &result
            && is_no_space(e)
            && self
                .live
                .as_ref()
                .is_some_and(|l| l.first_batch_ts.is_some())
            && self.fills_its_disk()
        {
            // The log itself filled the disk: rotate, then delete our oldest files until the
            // batch fits, as the limits would have had the disk been larger.
            self.join_worker();
            if self.rotate(ts) {
                let budget = self.cfg.max_bytes.saturating_mul(self.cfg.max_files as u64);
                let pass = rotate::retention(&self.cfg.dir, self.cfg.max_files, budget);
                self.note_pass(pass);
                loop {
                    result = self.write_batch(snap, ts);
                    match &result {
                        Err((e, _)) if is_no_space(e) && self.delete_oldest() => {}
                        _ => break,
                    }
                }
            }
        }
        match result {
            Ok(()) => self.last_error = None,
            Err((e, records)) => {
                self.health.records_lost += records;
                self.last_error = Some(e.to_string());
            }
        }
    }

    /// Build and append one batch; on failure the error and the lines lost.
    fn write_batch(&mut self, snap: &Snapshot, ts: u64) -> Result<(), (io::Error, u64)> {
        // Before building the batch: a file made here must begin with a full batch.
        let mut ready = self.ensure_live(ts).map(|_| ());
        let mut full = match self.last_full_ts {
            None => true,
            Some(last) => {
                self.cfg.full_every_ns > 0 && ts.saturating_sub(last) >= self.cfg.full_every_ns
            }
        };
        let mut batch = records::build(snap, ts, &self.host, full, &self.baseline, self.health);
        // A batch that would take the file past the limit goes to a new file, unless it is
        // too large for a file anyway (then it fills this one and goes on in new files).
        let start_len = self.live.as_ref().map_or(0, |l| l.start_len);
        let overflows = self.live.as_ref().is_some_and(|l| {
            l.first_batch_ts.is_some()
                && l.len + batch.text.len() as u64 > self.cfg.max_bytes
                && start_len + batch.text.len() as u64 <= self.cfg.max_bytes
        });
        if ready.is_ok() && overflows && self.rotate(ts) {
            // Rotating before the batch keeps the file within --log-max-bytes; the new file
            // begins with a full batch when one fits in a file.
            self.spawn_retention();
            ready = self.ensure_live(ts).map(|_| ());
            if self.last_full_ts.is_none() && !full {
                full = true;
                batch = records::build(snap, ts, &self.host, full, &self.baseline, self.health);
            }
        }
        if full {
            self.full_fits = start_len + batch.text.len() as u64 <= self.cfg.max_bytes;
        }
        match ready.and_then(|()| self.append(&batch.text, ts)) {
            Ok(()) => {
                self.health.records_written += batch.records;
                self.baseline.advance(batch.next);
                if full {
                    self.last_full_ts = Some(ts);
                }
                Ok(())
            }
            Err(e) => Err((e, batch.records)),
        }
    }

    /// Whether our own files hold at least half of what is used on the log's file system: a
    /// full disk is then ours to clear (a disk filled by something else is left alone, and the
    /// lines are counted as lost until space is free again).
    fn fills_its_disk(&self) -> bool {
        let Ok(c) = std::ffi::CString::new(self.cfg.dir.as_os_str().as_encoded_bytes()) else {
            return false;
        };
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: c is a valid NUL-terminated path and st is valid for writes of one statvfs.
        if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
            return false;
        }
        // SAFETY: statvfs returned 0, so it filled st.
        let st = unsafe { st.assume_init() };
        // fsblkcnt_t and c_ulong are 64-bit on the 64-bit targets the observer runs on.
        let used = st.f_blocks.saturating_sub(st.f_bfree) * st.f_frsize;
        let live = self.live.as_ref().map_or(0, |l| l.len);
        let rotated: u64 = rotate::list_rotated(&self.cfg.dir)
            .map(|r| r.iter().map(|(_, len)| len).sum())
            .unwrap_or(0);
        (live + rotated).saturating_mul(2) >= used
    }

    /// Delete our oldest rotated file; false when there is none left.
    fn delete_oldest(&mut self) -> bool {
        let oldest = rotate::list_rotated(&self.cfg.dir)
            .ok()
            .and_then(|r| r.into_iter().next());
        match oldest {
            Some((path, _)) if fs::remove_file(&path).is_ok() => {
                self.health.files_deleted += 1;
                true
            }
            _ => false,
        }
    }

    /// Append a batch, whole lines only, never past --log-max-bytes: a batch larger than what is
    /// left of the file goes on in new files (only a single line larger than a file makes a
    /// file larger). All of it or nothing: on failure every file it reached is cut back to
    /// where the batch began, so the files hold only complete lines.
    fn append(&mut self, text: &[u8], ts: u64) -> io::Result<()> {
        let mut reached: Vec<(File, u64)> = Vec::new();
        let mut pos = 0;
        let result = loop {
            let Some(live) = self.live.as_mut() else {
                break Err(io::Error::other("no live file"));
            };
            let rest = &text[pos..];
            let room = self.cfg.max_bytes.saturating_sub(live.len);
            let take = if rest.len() as u64 <= room {
                rest.len()
            } else {
                let fits = &rest[..usize::try_from(room).unwrap_or(rest.len())];
                match fits.iter().rposition(|&b| b == b'\n') {
                    Some(end) => end + 1,
                    // Not even one line fits: in a file that holds batches already, start a
                    // new one; in a new file, the line goes whole.
                    None if live.first_batch_ts.is_some() => 0,
                    None => rest
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(rest.len(), |e| e + 1),
                }
            };
            let start = live.len;
            if let Ok(dup) = live.file.try_clone() {
                reached.push((dup, start));
            }
            if let Err(e) = live.file.write_all(&rest[..take]) {
                break Err(e);
            }
            live.len += take as u64;
            live.first_batch_ts.get_or_insert(ts);
            pos += take;
            if pos == text.len() {
                break Ok(());
            }
            if !self.rotate(ts) {
                break Err(io::Error::other("cannot rotate the log file"));
            }
            match self.create_live(ts) {
                Ok(new) => self.live = Some(new),
                Err(e) => break Err(e),
            }
        };
        if result.is_err() {
            // Shrinking frees space, so this works on a full disk; if it fails too, drop the
            // file so the next interval starts a fresh one instead of appending after a torn
            // line.
            let cut = reached.iter().all(|(f, start)| f.set_len(*start).is_ok());
            if let Some(live) = self.live.as_mut()
                && let Some((_, start)) = reached.last()
            {
                live.len = *start;
            }
            if !cut {
                self.live = None;
            }
        } else if reached.len() > 1 {
            self.spawn_retention();
        }
        result
    }

    /// Flush to disk and finish compression and retention; called once at exit.
    pub fn finish(&mut self) {
        if let Some(live) = &self.live {
            let _ = live.file.sync_data();
        }
        self.join_worker();
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
