//! Where was it lost, on known drops: the loss scenarios capture the client's eth0 egress at two
//! points, before netem (pre.pcap: a clsact egress matchall filter mirrors to a dummy device)
//! and after it (cap.pcap). Both are merged into one pcapng with two interfaces (`mergecap -I
//! none`: pre.pcap is `if0`, cap.pcap `if1`) and `analyze --json` must name, in `paths`, exactly
//! the request PSNs the first capture saw sent the first time and the second did not (computed
//! here from tshark's fields), with nothing missing the other way; netem's own drop count
//! must equal the frames the two captures differ by.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::Value;

use super::check::Checks;
use super::outputs::{netem_dropped, tcpdump_kernel_drops_in};
use super::scenarios::{CLIENT_IP, SERVER_IP, Scenario};
use super::wire::{Pkt, is_request, psn_diff, tshark_packets};
use crate::util::output_checked;

/// The interfaces `analyze` names the merged capture's two interface blocks (no if_name in a
/// pcap: the pcapng index).
const PRE_IF: &str = "if0";
const POST_IF: &str = "if1";
/// `missing_psns` lists the first this many (docs/metrics.md).
const LISTED: usize = 16;

/// Request PSNs of one flow that a point saw sent the first time (newer than every PSN it saw
/// of the flow before), in capture order.
fn first_sends(pkts: &[Pkt], qp: u32) -> Vec<u32> {
    let mut highest: Option<u32> = None;
    let mut v = Vec::new();
    for p in pkts
        .iter()
        .filter(|p| p.src == CLIENT_IP && p.dst == SERVER_IP && p.dest_qp == qp)
        .filter(|p| is_request(p.opcode))
    {
        if highest.is_none_or(|h| psn_diff(p.psn, h) > 0) {
            highest = Some(p.psn);
            v.push(p.psn);
        }
    }
    v
}

/// PSNs sent the first time upstream and never downstream, among those downstream saw PSNs
/// before and after (its first PSN is not newer, its highest is newer), oldest first.
pub(super) fn expected_missing(up: &[u32], down: &[u32]) -> Vec<u32> {
    let (Some(&d_first), Some(&u_first)) = (down.first(), up.first()) else {
        return Vec::new();
    };
    let d_high = down
        .iter()
        .copied()
        .fold(d_first, |h, p| if psn_diff(p, h) > 0 { p } else { h });
    let seen: HashSet<u32> = down.iter().copied().collect();
    let mut m: Vec<u32> = up
        .iter()
        .copied()
        .filter(|p| !seen.contains(p) && psn_diff(*p, d_first) >= 0 && psn_diff(d_high, *p) > 0)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    m.sort_by_key(|p| psn_diff(*p, u_first));
    m
}

/// What the two captures and netem say, computed without the observer.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Truth {
    pub(super) qp: u32,
    /// Request PSNs sent the first time before netem and missing after it, oldest first.
    pub(super) missing: Vec<u32>,
    /// Frames eth0 sent in pre.pcap and in cap.pcap (every protocol), and netem's drop count.
    pub(super) frames_pre: u64,
    pub(super) frames_post: u64,
    pub(super) netem_dropped: Option<i64>,
}

fn pair<'a>(doc: &'a Value, qp: u32, up: &str, down: &str) -> Option<&'a Value> {
    doc["paths"].as_array()?.iter().find(|p| {
        p["src_ip"] == CLIENT_IP
            && p["dst_ip"] == SERVER_IP
            && p["dst_qp"] == qp
            && p["upstream"]["iface"] == up
            && p["downstream"]["iface"] == down
    })
}

/// The checks on `analyze --json`'s document of the merged capture against the truth.
pub(super) fn path_view_checks(ck: &mut Checks, doc: &Value, t: &Truth) {
    let name = |w: &str| format!("path view, qp {} before -> after netem: {w}", t.qp);
    let fwd = pair(doc, t.qp, PRE_IF, POST_IF);
    ck.truth(
        &name("paths lists the pair"),
        "present",
        if fwd.is_some() { "present" } else { "absent" }.into(),
        fwd.is_some(),
    );
    let fwd = fwd.cloned().unwrap_or(Value::Null);
    ck.eq(
        &name("missing == PSNs in pre.pcap and not in cap.pcap (tshark)"),
        t.missing.len() as i64,
        fwd["missing"].as_i64().unwrap_or(-1),
    );
    let listed: Vec<u32> = fwd["missing_psns"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u32)
                .collect()
        })
        .unwrap_or_default();
    let want: Vec<u32> = t.missing.iter().take(LISTED).copied().collect();
    ck.eq(
        &name("missing_psns == the first 16 of them"),
        format!("{want:?}"),
        format!("{listed:?}"),
    );
    let back = pair(doc, t.qp, POST_IF, PRE_IF);
    ck.eq(
        &format!("path view, qp {} after -> before netem: missing", t.qp),
        0,
        back.and_then(|b| b["missing"].as_i64()).unwrap_or(-1),
    );
    // the drops are known: netem's count is exactly the frames the captures differ by, and
    // the request PSNs lost are among them (the rest: retransmissions, TCP of perftest)
    ck.eq(
        "netem dropped == frames before netem - frames after (pre.pcap - cap.pcap)",
        t.netem_dropped.unwrap_or(-1),
        t.frames_pre as i64 - t.frames_post as i64,
    );
    ck.range(
        &name("missing <= netem dropped"),
        0,
        t.netem_dropped.unwrap_or(-1),
        t.missing.len() as i64,
    );
}

/// eth0's MAC address, from `ip -s link show dev eth0` (vm-client/link.txt).
fn eth0_mac(cdir: &Path) -> Result<String> {
    let s = std::fs::read_to_string(cdir.join("link.txt")).context("vm-client/link.txt")?;
    s.split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .map(str::to_string)
        .context("no link/ether in vm-client/link.txt")
}

/// Frames sent by `mac` in a capture (cap.pcap holds both directions; pre.pcap can hold the
/// dummy device's own packets).
fn frames_from(cap: &Path, mac: &str) -> Result<u64> {
    let out = output_checked(
        Command::new("tshark")
            .arg("-n")
            .arg("-r")
            .arg(cap)
            .args(["-T", "fields", "-e", "eth.src"]),
    )?;
    Ok(out.lines().filter(|l| l.trim() == mac).count() as u64)
}

/// Merge pre.pcap and cap.pcap, run `analyze --json` on them, and check its `paths`.
pub(super) fn path_checks(ck: &mut Checks, sc: &Scenario, bin: &Path, cap: &Path, cdir: &Path) {
    let pre = cdir.join("pre.pcap");
    ck.truth(
        "pre-netem capture (vm-client/pre.pcap)",
        "present",
        if pre.exists() {
            "present"
        } else {
            "absent (see vm-client/init.log)"
        }
        .into(),
        pre.exists(),
    );
    ck.eq(
        "pre-netem tcpdump: packets dropped by kernel",
        0,
        tcpdump_kernel_drops_in(cdir, "tcpdump-pre.err").map_or(-1, |d| d as i64),
    );
    let merged = cdir.join("paths.pcapng");
    let run = || -> Result<(Value, Vec<Truth>)> {
        output_checked(
            Command::new("mergecap")
                .args(["-I", "none", "-F", "pcapng", "-w"])
                .arg(&merged)
                .arg(&pre)
                .arg(cap),
        )?;
        let doc: Value = serde_json::from_str(&output_checked(
            Command::new(bin)
                .args([
                    "analyze",
                    "--json",
                    "--pmtu",
                    &sc.expected_pmtu().to_string(),
                ])
                .arg(&merged),
        )?)
        .context("analyze --json output")?;
        let (a, b) = (tshark_packets(&pre)?, tshark_packets(cap)?);
        let qps: BTreeSet<u32> = a
            .iter()
            .filter(|p| p.src == CLIENT_IP && is_request(p.opcode))
            .map(|p| p.dest_qp)
            .collect();
        let mac = eth0_mac(cdir)?;
        let (fa, fb) = (frames_from(&pre, &mac)?, frames_from(cap, &mac)?);
        let truths = qps
            .into_iter()
            .map(|qp| Truth {
                qp,
                missing: expected_missing(&first_sends(&a, qp), &first_sends(&b, qp)),
                frames_pre: fa,
                frames_post: fb,
                netem_dropped: netem_dropped(cdir),
            })
            .collect();
        Ok((doc, truths))
    };
    match run() {
        Ok((doc, truths)) => {
            ck.truth(
                "request flows in pre.pcap",
                ">= 1",
                truths.len().to_string(),
                !truths.is_empty(),
            );
            for t in &truths {
                path_view_checks(ck, &doc, t);
            }
        }
        Err(e) => ck.truth(
            "mergecap pre.pcap cap.pcap + analyze --json",
            "runs",
            format!("{e:#}"),
            false,
        ),
    }
}

#[cfg(test)]
mod unit {
    use super::*;
    use serde_json::json;

    #[test]
    fn expected_missing_is_first_sends_absent_downstream_within_its_range() {
        // 5 lost and retransmitted (downstream sees it, but not sent the first time)
        assert_eq!(
            expected_missing(&[1, 2, 3, 4, 5, 6, 7], &[2, 3, 4, 6]),
            vec![5]
        );
        // 1 before downstream's first, 7 after its highest: not blamed
        assert_eq!(expected_missing(&[1, 2, 3, 7], &[2, 3]), Vec::<u32>::new());
        // across the 24-bit wrap, oldest first
        let top = (1 << 24) - 2;
        assert_eq!(
            expected_missing(&[top, top + 1, 0, 1, 2], &[top, 1, 2]),
            vec![top + 1, 0]
        );
    }

    fn doc(missing: &[u32], back: u64) -> Value {
        let p = |up: &str, down: &str, m: &[u32]| {
            json!({"src_ip": CLIENT_IP, "dst_ip": SERVER_IP, "dst_qp": 17,
                "upstream": {"iface": up}, "downstream": {"iface": down},
                "both": 100, "missing": m.len(), "missing_psns": m})
        };
        let mut b = p(POST_IF, PRE_IF, &[]);
        b["missing"] = json!(back);
        json!({"paths": [p(PRE_IF, POST_IF, missing), b]})
    }

    fn failed(doc: &Value, t: &Truth) -> Vec<String> {
        let mut ck = Checks(Vec::new());
        path_view_checks(&mut ck, doc, t);
        ck.0.iter()
            .filter(|c| !c.ok)
            .map(|c| c.name.clone())
            .collect()
    }

    #[test]
    fn path_view_checks_pass_on_truth_and_fail_on_wrong_data() {
        let t = Truth {
            qp: 17,
            missing: vec![5, 9],
            frames_pre: 110,
            frames_post: 107,
            netem_dropped: Some(3),
        };
        assert!(failed(&doc(&[5, 9], 0), &t).is_empty());
        // a PSN not lost, one lost PSN not named, something lost the other way
        assert_eq!(failed(&doc(&[5, 8], 0), &t).len(), 1);
        assert_eq!(failed(&doc(&[5], 0), &t).len(), 2);
        assert_eq!(failed(&doc(&[5, 9], 1), &t).len(), 1);
        // the pair absent, another QP
        assert!(failed(&json!({"paths": []}), &t).len() >= 3);
        assert!(
            !failed(
                &doc(&[5, 9], 0),
                &Truth {
                    qp: 18,
                    ..t.clone()
                }
            )
            .is_empty()
        );
        // netem's count not matching the captures, or fewer drops than missing PSNs
        let off = Truth {
            netem_dropped: Some(4),
            ..t.clone()
        };
        assert_eq!(failed(&doc(&[5, 9], 0), &off).len(), 1);
        let few = Truth {
            netem_dropped: Some(1),
            frames_post: 109,
            ..t.clone()
        };
        assert_eq!(failed(&doc(&[5, 9], 0), &few).len(), 1);
        // more than 16 lost: the count is all of them, the list the first 16
        let many: Vec<u32> = (100..120).collect();
        let t = Truth {
            missing: many.clone(),
            frames_post: 90,
            netem_dropped: Some(20),
            ..t
        };
        let mut d = doc(&many[..16], 0);
        d["paths"][0]["missing"] = json!(20);
        assert!(failed(&d, &t).is_empty());
        d["paths"][0]["missing_psns"] = json!(many[4..].to_vec());
        assert_eq!(failed(&d, &t).len(), 1);
    }
}
