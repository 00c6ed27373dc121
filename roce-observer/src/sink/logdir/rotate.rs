//! Rotated files of the log directory: their names, gzip compression, and the retention that
//! keeps the directory within `--log-max-files` and `max_files x max_bytes` bytes.
//!
//! A rotated file is first renamed to `roce-observer-<UTC time>.jsonl`, then compressed to
//! `<same>.jsonl.gz` through a temporary file with a random name, and the plain file is removed
//! once the compressed one is complete. When compression fails (full disk) the plain file stays
//! and counts against the budget like any other.
//!
//! Only regular files owned by this user are compressed, counted or deleted: anything else
//! with one of our names (a link, a FIFO, another user's file) is reported and left alone
//! (see `sink::files`).

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use flate2::{Compression, write::GzEncoder};

use crate::sink::files::{self, OpenError, Refusal};

/// Name of the file being written (plain text, for `tail -f` and log shippers).
pub const LIVE_NAME: &str = "roce-observer.jsonl";
const ROTATED_PREFIX: &str = "roce-observer-";
/// Temporary files of a compression: `<rotated>.jsonl.gz.<random>.tmp`.
const TEMP_INFIX: &str = ".jsonl.gz.";
const TEMP_SUFFIX: &str = ".tmp";
/// Where a live path that is not ours is moved: `roce-observer.jsonl.refused-<UTC time>`.
const REFUSED_INFIX: &str = ".refused-";

/// `YYYYMMDDTHHMMSS.mmmZ` for `ns` since the Unix epoch (UTC; sorts by time).
pub fn utc_stamp(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let millis = (ns / 1_000_000) % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian, H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{millis:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// A rotated file of ours (compressed or not yet).
fn is_rotated(name: &str) -> bool {
    name.starts_with(ROTATED_PREFIX) && (name.ends_with(".jsonl") || name.ends_with(".jsonl.gz"))
}

/// A temporary file of a compression (left behind only when the process died during one).
fn is_temp(name: &str) -> bool {
    name.starts_with(ROTATED_PREFIX) && name.contains(TEMP_INFIX) && name.ends_with(TEMP_SUFFIX)
}

/// Whether anything, a dangling link included, is at `path`.
fn occupied(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Rename the live file to a stamped name that does not exist yet; returns the new path.
/// Renaming moves a link itself, never its target.
pub fn rename_live(dir: &Path, ts: u64) -> io::Result<PathBuf> {
    let stamp = utc_stamp(ts);
    let mut target = dir.join(format!("{ROTATED_PREFIX}{stamp}.jsonl"));
    let mut n = 1;
    while occupied(&target) || occupied(&target.with_extension("jsonl.gz")) {
        target = dir.join(format!("{ROTATED_PREFIX}{stamp}-{n}.jsonl"));
        n += 1;
    }
    fs::rename(dir.join(LIVE_NAME), &target)?;
    Ok(target)
}

/// Move a live path that is not ours out of the way, to a name retention never touches;
/// returns the new path.
pub fn move_aside(dir: &Path, ts: u64) -> io::Result<PathBuf> {
    let stamp = utc_stamp(ts);
    let mut target = dir.join(format!("{LIVE_NAME}{REFUSED_INFIX}{stamp}"));
    let mut n = 1;
    while occupied(&target) {
        target = dir.join(format!("{LIVE_NAME}{REFUSED_INFIX}{stamp}-{n}"));
        n += 1;
    }
    fs::rename(dir.join(LIVE_NAME), &target)?;
    Ok(target)
}

/// Compress `plain` to `plain.gz` and remove `plain`. On failure nothing but `plain` remains;
/// a `plain` that is not a regular file of ours is refused without being read.
pub fn compress(plain: &Path) -> Result<PathBuf, OpenError> {
    let gz = plain.with_extension("jsonl.gz");
    let mut input = files::open_ours(plain)?;
    let dir = plain.parent().unwrap_or(Path::new("."));
    let name = plain
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!("{name}.gz.");
    let (out, tmp) = files::create_temp(dir, &prefix, TEMP_SUFFIX)?;
    let result = (|| {
        let mut enc = GzEncoder::new(io::BufWriter::new(out), Compression::default());
        io::copy(&mut input, &mut enc)?;
        let out = enc.finish()?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        // A link planted at the .gz name is replaced, not followed.
        fs::rename(&tmp, &gz)
    })();
    match result {
        Ok(()) => {
            fs::remove_file(plain)?;
            Ok(gz)
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e.into())
        }
    }
}

/// What a retention pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    pub compressed: u64,
    pub deleted: u64,
    /// Files with our names that are not regular files of ours: never opened nor deleted.
    pub refused: Vec<(PathBuf, Refusal)>,
}

/// Compress rotated plain files, then delete the oldest rotated files until at most
/// `max_files - 1` remain beside the live file and all of ours fit in `budget` bytes.
pub fn retention(dir: &Path, max_files: usize, budget: u64) -> Pass {
    let mut pass = Pass::default();
    let Ok(scan) = scan(dir) else {
        return pass;
    };
    // A compression that died with the process: only this pass writes such files.
    for tmp in &scan.temps {
        let _ = fs::remove_file(tmp);
    }
    pass.refused = scan.refused;
    for (path, _) in &scan.rotated {
        if path.extension().is_some_and(|e| e == "jsonl") {
            match compress(path) {
                Ok(_) => pass.compressed += 1,
                // Swapped for something else since the scan: report it like the others.
                Err(OpenError::Refused(why)) => pass.refused.push((path.clone(), why)),
                Err(OpenError::Io(_)) => {}
            }
        }
    }
    let Ok(mut rotated) = list_rotated(dir) else {
        return pass;
    };
    let live = fs::symlink_metadata(dir.join(LIVE_NAME))
        .ok()
        .filter(|m| files::check_ours(m).is_ok())
        .map_or(0, |m| m.len());
    let mut total: u64 = live + rotated.iter().map(|(_, len)| len).sum::<u64>();
    // Oldest first (the names sort by time).
    rotated.reverse();
    while let Some((path, len)) = rotated.pop() {
        if rotated.len() + 2 <= max_files && total <= budget {
            break;
        }
        if fs::remove_file(&path).is_ok() {
            pass.deleted += 1;
            total -= len;
        }
    }
    pass
}

/// The directory's files with our names, sorted by name.
#[derive(Debug, Default)]
struct Scan {
    /// Rotated regular files of ours with their sizes, oldest first.
    rotated: Vec<(PathBuf, u64)>,
    temps: Vec<PathBuf>,
    refused: Vec<(PathBuf, Refusal)>,
}

fn scan(dir: &Path) -> io::Result<Scan> {
    let mut scan = Scan::default();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let rotated = is_rotated(&name);
        if !rotated && !is_temp(&name) {
            continue;
        }
        // The entry's own metadata: a link is not followed.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        match files::check_ours(&meta) {
            Ok(()) if rotated => scan.rotated.push((entry.path(), meta.len())),
            Ok(()) => scan.temps.push(entry.path()),
            Err(why) => scan.refused.push((entry.path(), why)),
        }
    }
    scan.rotated.sort();
    scan.refused.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(scan)
}

/// Our rotated files with their sizes, oldest first (regular files of ours only).
pub fn list_rotated(dir: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
    Ok(scan(dir)?.rotated)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_and_sort_by_time() {
        assert_eq!(utc_stamp(0), "19700101T000000.000Z");
        // 2026-12-01 03:04:05.678 UTC
        assert_eq!(utc_stamp(1_796_094_245_678_000_000), "20261201T030405.678Z");
        // 2000-02-29 (leap day) 23:59:59
        assert_eq!(utc_stamp(951_868_799_000_000_000), "20000229T235959.000Z");
        assert!(utc_stamp(1_000_000_000) < utc_stamp(10_000_000_000));
    }

    #[test]
    fn retention_keeps_the_newest_within_count_and_bytes() {
        let dir = tempdir("retention");
        fs::write(dir.join(LIVE_NAME), b"live\n").expect("write");
        for i in 0..5u64 {
            fs::write(
                dir.join(format!(
                    "{ROTATED_PREFIX}{}.jsonl",
                    utc_stamp(i * 1_000_000_000)
                )),
                vec![b'x'; 1000],
            )
            .expect("write");
        }
        fs::write(dir.join("unrelated.txt"), b"keep me").expect("write");
        let pass = retention(&dir, 3, u64::MAX);
        assert_eq!(
            pass,
            Pass {
                compressed: 5,
                deleted: 3,
                refused: Vec::new(),
            }
        );
        let left: Vec<String> = list_rotated(&dir)
            .expect("list")
            .into_iter()
            .map(|(p, _)| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        // The two newest remain, compressed; the live file and foreign files are never touched.
        assert_eq!(
            left,
            [
                format!("{ROTATED_PREFIX}{}.jsonl.gz", utc_stamp(3_000_000_000)),
                format!("{ROTATED_PREFIX}{}.jsonl.gz", utc_stamp(4_000_000_000)),
            ]
        );
        assert!(dir.join(LIVE_NAME).exists() && dir.join("unrelated.txt").exists());
        // A byte budget smaller than the two compressed files leaves one or none.
        let pass = retention(&dir, 3, 10);
        assert!(pass.deleted >= 1, "{pass:?}");
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn compressed_file_decompresses_to_the_original() {
        use std::io::Read as _;
        let dir = tempdir("gzip");
        let plain = dir.join(format!("{ROTATED_PREFIX}{}.jsonl", utc_stamp(0)));
        let text = "{\"schema_version\":1,\"kind\":\"flow\"}\n".repeat(1000);
        fs::write(&plain, &text).expect("write");
        let gz = compress(&plain).expect("compress");
        assert!(!plain.exists());
        let mut back = String::new();
        flate2::read::GzDecoder::new(fs::File::open(&gz).expect("open"))
            .read_to_string(&mut back)
            .expect("gunzip");
        assert_eq!(back, text);
        assert!(fs::metadata(&gz).expect("stat").len() < text.len() as u64 / 10);
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    pub(crate) fn tempdir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "roce-observer-logdir-{tag}-{}-{}",
            std::process::id(),
            utc_stamp(super::super::now_ns())
        ));
        fs::create_dir_all(&dir).expect("temp dir");
        dir
    }
}
