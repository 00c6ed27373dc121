//! Programs around roce-observer that are neither the product nor its tests: `roce-replay`
//! (the demo's traffic source, `cargo xtask demo`) and `kernel-bench` (the kernel per-packet
//! cost, `cargo xtask bench`). The library holds what they share with the integration tests.

use std::path::Path;

/// Every frame of a capture, in order (with the capture reader `analyze` uses).
pub fn read_frames(path: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let file = std::fs::File::open(path)?;
    let mut frames = Vec::new();
    let end =
        roce_observer::wire::capture::read_capture(file, |_| {}, |f| frames.push(f.data.to_vec()));
    if let Some(err) = end.error {
        anyhow::bail!("{}: {err}", path.display());
    }
    Ok(frames)
}
