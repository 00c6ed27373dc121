//! What to say when a report holds no RoCE: what was seen instead, and the likely fix. Read
//! from the report's summary only (the frame classes of docs/metrics.md), so the table, the
//! JSON run and a live capture replay give the same advice.

use crate::report::Summary;

/// The advice for a report without RoCE flows, or None when there are flows (or nothing to
/// advise on).
pub fn no_roce(s: &Summary) -> Option<String> {
    let (roce_port, vxlan_port) = (s.roce_port, s.vxlan_port);
    if s.flows > 0 || s.roce_packets > 0 {
        return None;
    }
    let held = s.capture.as_ref().map_or(s.total_packets, |c| c.frames);
    if s.total_packets == 0 {
        return Some(if held > 0 {
            format!(
                "no frames in the report: the capture holds {held}, none of them inside \
                 --since/--until"
            )
        } else {
            "no frames were read: the capture is empty, or the capture filter let nothing \
             through"
                .to_string()
        });
    }
    let mut seen = vec![format!("{} not RoCE", s.non_roce)];
    for (n, what) in [
        (s.pfc_frames, "PFC"),
        (s.pause_8023x, "802.3x pause"),
        (s.malformed, "malformed"),
        (s.ip_fragments, "IP fragments"),
        (s.unsupported, "in an unsupported encapsulation"),
    ] {
        if n > 0 {
            seen.push(format!("{n} {what}"));
        }
    }
    let frames = s.total_packets;
    let mut text = format!(
        "no RoCE flows: {frames} frame{} read, none RoCEv2 on UDP port {roce_port} ({}). ",
        if frames == 1 { "" } else { "s" },
        seen.join(", ")
    );
    text.push_str(&format!(
        "If RoCE uses another UDP port, pass --roce-port PORT; switch mirrors are unwrapped from \
         ERSPAN, GRE and VXLAN (UDP {vxlan_port}, --vxlan-port) only; a capture filter such as \
         `udp port {roce_port}` keeps only RoCE"
    ));
    if s.unsupported > 0 {
        text.push_str(
            "; frames with more than two VLAN tags or IPv6 extension headers are not read",
        );
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analyze::analyze_reader, engine::EngineConfig};

    fn summary(name: &str, cfg: EngineConfig) -> Summary {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name);
        let file = std::fs::File::open(&path).expect("fixture");
        let (mut engine, damage) = analyze_reader(file, cfg);
        assert!(damage.is_none());
        engine.snapshot(engine.last_ts()).summary
    }

    #[test]
    fn a_capture_without_roce_says_what_it_holds_and_what_to_try() {
        let s = summary("non_roce.pcap", EngineConfig::default());
        let hint = no_roce(&s).expect("advice");
        assert!(
            hint.contains(&format!(
                "{} frames read, none RoCEv2 on UDP port 4791",
                s.total_packets
            )),
            "{hint}"
        );
        assert!(
            hint.contains("--roce-port") && hint.contains("VXLAN"),
            "{hint}"
        );
    }

    #[test]
    fn roce_on_another_port_is_advice_and_roce_found_is_none() {
        let roce = summary("mixed_demo.pcap", EngineConfig::default());
        assert_eq!(no_roce(&roce), None);
        let elsewhere = summary(
            "mixed_demo.pcap",
            EngineConfig {
                roce_port: 4792,
                ..EngineConfig::default()
            },
        );
        let hint = no_roce(&elsewhere).expect("advice");
        assert!(hint.contains("none RoCEv2 on UDP port 4792"), "{hint}");
        assert!(
            hint.contains(&format!("{} PFC", elsewhere.pfc_frames)),
            "what was seen instead: {hint}"
        );
    }
}
