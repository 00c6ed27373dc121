//! Rotated files of the log directory: their names, gzip compression, and the retention that
//! keeps the directory within `--log-max-files` and `max_files x max_bytes` bytes.
//!
//! A rotated file is first renamed to `roce-observer-<UTC time>.jsonl`, then compressed to
//! `<same>.jsonl.gz` through a `.tmp` file, and the plain file is removed once the compressed
//! one is complete. When compression fails (full disk) the plain file stays and counts
//! against the budget like any other.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use flate2::{Compression, write::GzEncoder};

/// Name of the file being written (plain text, for `tail -f` and log shippers).
pub const LIVE_NAME: &str = "roce-observer.jsonl";
const ROTATED_PREFIX: &str = "roce-observer-";

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

/// Rename the live file to a stamped name that does not exist yet; returns the new path.
pub fn rename_live(dir: &Path, ts: u64) -> io::Result<PathBuf> {
    let stamp = utc_stamp(ts);
    let mut target = dir.join(format!("{ROTATED_PREFIX}{stamp}.jsonl"));
    let mut n = 1;
    while target.exists() || target.with_extension("jsonl.gz").exists() {
        target = dir.join(format!("{ROTATED_PREFIX}{stamp}-{n}.jsonl"));
        n += 1;
    }
    fs::rename(dir.join(LIVE_NAME), &target)?;
    Ok(target)
}

/// Compress `plain` to `plain.gz` and remove `plain`. On failure nothing but `plain` remains.
pub fn compress(plain: &Path) -> io::Result<PathBuf> {
    let gz = plain.with_extension("jsonl.gz");
    let tmp = plain.with_extension("jsonl.gz.tmp");
    let result = (|| {
        let mut input = fs::File::open(plain)?;
        let out = fs::File::create(&tmp)?;
        let mut enc = GzEncoder::new(io::BufWriter::new(out), Compression::default());
        io::copy(&mut input, &mut enc)?;
        let out = enc.finish()?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        fs::rename(&tmp, &gz)
    })();
    match result {
        Ok(()) => {
            fs::remove_file(plain)?;
            Ok(gz)
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// What a retention pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    pub compressed: u64,
    pub deleted: u64,
}

/// Compress rotated plain files, then delete the oldest rotated files until at most
/// `max_files - 1` remain beside the live file and all of ours fit in `budget` bytes.
pub fn retention(dir: &Path, max_files: usize, budget: u64) -> Pass {
    let mut pass = Pass::default();
    let Ok(rotated) = list_rotated(dir) else {
        return pass;
    };
    for (path, _) in &rotated {
        if path.extension().is_some_and(|e| e == "jsonl") && compress(path).is_ok() {
            pass.compressed += 1;
        }
    }
    let Ok(mut rotated) = list_rotated(dir) else {
        return pass;
    };
    let live = fs::metadata(dir.join(LIVE_NAME)).map_or(0, |m| m.len());
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

/// Our rotated files with their sizes, oldest first.
pub fn list_rotated(dir: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if is_rotated(&name.to_string_lossy()) {
            let len = entry.metadata().map_or(0, |m| m.len());
            files.push((entry.path(), len));
        }
    }
    files.sort();
    Ok(files)
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
                deleted: 3
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
