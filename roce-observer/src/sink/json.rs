//! The JSON document (`{"schema_version": 1, "flows": [...], "pfc": [...], "summary": {...},
//! "latency": {...}, "ecmp": {...}, "alerts": [...], "steps": {...} or null, "paths": [...]}`) and the JSONL flow log (one flow record
//! per line), both straight from a [`Snapshot`].

use std::io::Write;

use serde::Serialize;

use crate::engine::snapshot::{FlowSnapshot, Snapshot};

/// Write the whole document, pretty-printed, with a final newline.
pub fn write_document<W: Write>(mut w: W, snap: &Snapshot) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut w, snap)?;
    writeln!(w)
}

/// One flow-log line: the snapshot time and the flow record.
#[derive(Serialize)]
struct FlowLogLine<'a> {
    ts: u64,
    #[serde(flatten)]
    flow: &'a FlowSnapshot,
}

/// Append every flow of `snap` as one JSON object per line, stamped with `ts` (ns since epoch).
pub fn write_flow_log<W: Write>(mut w: W, snap: &Snapshot, ts: u64) -> std::io::Result<()> {
    for flow in &snap.flows {
        serde_json::to_writer(&mut w, &FlowLogLine { ts, flow })?;
        writeln!(w)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig};

    #[test]
    fn empty_document_has_the_top_level_sections() {
        let snap = Engine::new(EngineConfig::default()).snapshot(0);
        let mut out = Vec::new();
        write_document(&mut out, &snap).expect("write to a Vec");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["schema_version"], 1);
        for k in [
            "flows", "pfc", "summary", "latency", "ecmp", "alerts", "steps", "paths",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["summary"]["total_packets"], 0);
        let mut log = Vec::new();
        write_flow_log(&mut log, &snap, 1).expect("write to a Vec");
        assert!(log.is_empty());
    }
}
