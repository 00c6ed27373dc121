//! The report: the output contract every renderer (table, JSON, logs, metrics, terminal UI)
//! reads, and the presentation helpers they share. Field names are the JSON names
//! (docs/metrics.md). The engine assembles a report section by section, with the sections that
//! come from beside it ([`Beside`]: the host's NIC counters and QP owners, the watched
//! interfaces, the outputs' own health) passed into that same assembly; once assembled, a
//! report is only read.
//!
//! Modules: `schema` (the types), `hint` (the advice for a report without RoCE), `nic` (the
//! NIC section's rows), `owners` (which process owns a flow), `steps` (the steps section in
//! words).

use std::collections::BTreeMap;

pub mod hint;
pub mod nic;
pub mod owners;
mod schema;
pub mod steps;

pub use schema::*;

/// What the outputs say about themselves in a report (null without that output), as of the
/// report's assembly: a failure while writing this report's own lines counts in the next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputHealth {
    /// Log lines `--log-dir` could not write.
    pub log_records_lost: Option<u64>,
    /// Failed writes of the `--prom-file` textfile.
    pub prom_file_errors: Option<u64>,
}

/// The sections of a report that do not come from the engine's analyses.
#[derive(Clone, Debug, Default)]
pub struct Beside {
    /// The host's RDMA NIC counters over the interval (live runs on a host with RDMA devices).
    pub nic: Vec<NicPortSnapshot>,
    /// The host's QPs and their owners; each flow is labelled with its owner.
    pub qp_owners: Vec<QpOwner>,
    /// The interfaces `run -i` watches and whether each is still there.
    pub interfaces_up: BTreeMap<String, bool>,
    pub outputs: OutputHealth,
    /// What watching costs (live runs).
    pub observer: Option<ObserverCost>,
}

/// Write the whole report as the JSON document, pretty-printed, with a final newline.
pub fn write_document<W: std::io::Write>(w: W, snap: &Snapshot) -> std::io::Result<()> {
    use std::io::Write as _;
    // A buffer of a known type in front of `w`: the serializer writes a token at a time, and
    // through a `&mut dyn Write` every token was a call (a report of many flows has millions).
    let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
    serde_json::to_writer_pretty(&mut w, snap)?;
    writeln!(w)?;
    // Hands the rest to `w` (which the caller flushes).
    w.into_inner().map_err(|e| e.into_error())?;
    Ok(())
}
