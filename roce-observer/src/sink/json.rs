//! The JSON document (`{"schema_version": 1, "flows": [...], "pfc": [...], "summary": {...},
//! "latency": {...}, "ecmp": {...}, "alerts": [...], "steps": {...} or null, "paths": [...],
//! "pfc_origin": {...} or null}`), straight from a [`crate::report::Snapshot`]. The JSON Lines log is
//! `sink::logdir`.

pub use crate::report::write_document;

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
    }
}
