//! ECMP prescriptions: for the modelled collisions (elephant 5-tuples sharing one uplink), new
//! UDP source ports that spread them, found with the same hash model as the modelled view, and
//! the imbalance that model predicts after the change (docs/metrics.md, "ECMP prescriptions").
//! Deterministic: the same view gives the same advice (fixed orders, fixed port search).

use std::net::IpAddr;

use super::{
    ecmp::{FiveTuple, imbalance, jain},
    snapshot::{EcmpAdvice, ModelledView, PortChange},
};

/// First UDP source port tried: the start of the range RoCE NICs draw source ports from.
pub const PORT_FIRST: u16 = 49152;
/// Ports tried per move (from [`PORT_FIRST`] up).
pub const PORT_TRIES: u16 = 16384;

/// Advice for `view` (RoCE destination port `dport`), or `None` without collisions.
pub fn advise(view: &ModelledView, dport: u16) -> Option<EcmpAdvice> {
    if view.collisions.is_empty() || view.paths == 0 {
        return None;
    }
    let mut loads = view.bytes_per_path.clone();
    // Every elephant that shares a path, biggest first; on each colliding path the biggest
    // stays, the others move.
    let mut movers: Vec<(u32, IpAddr, IpAddr, u16, u64)> = Vec::new();
    for c in &view.collisions {
        for e in c.elephants.iter().skip(1) {
            movers.push((c.path, e.src_ip, e.dst_ip, e.udp_src_port, e.bytes));
        }
    }
    movers.sort_by(|a, b| {
        b.4.cmp(&a.4)
            .then_with(|| (a.1, a.2, a.3).cmp(&(b.1, b.2, b.3)))
    });
    let mut changes = Vec::new();
    for (from, src, dst, sport, bytes) in movers {
        let Some(from_load) = loads.get_mut(from as usize) else {
            continue;
        };
        *from_load -= bytes.min(*from_load);
        // The least-loaded path (lowest index on ties) is the target; the first port that
        // hashes there wins.
        let target = (0..loads.len()).min_by_key(|&p| (loads[p], p)).unwrap_or(0) as u32;
        let tuple = |port: u16| FiveTuple {
            src,
            dst,
            sport: port,
            dport,
        };
        let found = (0..PORT_TRIES)
            .map(|k| PORT_FIRST.wrapping_add(k))
            .find(|&port| view.hash.path(&tuple(port), view.seed, view.paths) == target);
        let (to, port) = match found {
            Some(port) if target != from => (target, port),
            // Already on the best path, or no port reaches it: leave the tuple where it is.
            _ => {
                loads[from as usize] += bytes;
                continue;
            }
        };
        loads[to as usize] += bytes;
        changes.push(PortChange {
            src_ip: src,
            dst_ip: dst,
            udp_src_port: sport,
            new_udp_src_port: port,
            bytes,
            from_path: from,
            to_path: to,
        });
    }
    Some(EcmpAdvice {
        imbalance_after: imbalance(&loads),
        jain_after: jain(&loads),
        bytes_per_path_after: loads,
        changes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ecmp::{FlowLoad, compute};
    use crate::engine::snapshot::EcmpHash;
    use std::net::Ipv4Addr;

    fn load(src: u8, sport: u16, bytes: u64) -> FlowLoad {
        FlowLoad {
            tuple: FiveTuple {
                src: IpAddr::V4(Ipv4Addr::new(192, 0, 2, src)),
                dst: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 100)),
                sport,
                dport: 4791,
            },
            // One QP per test flow.
            dst_qp: u32::from(src) << 16 | u32::from(sport),
            point: "pcap/capture".into(),
            bytes,
            sports: [sport, 0, 0, 0],
        }
    }

    /// Eight equal elephants whose source ports all hash to path 0 of 8 (found by search).
    fn colliding(hash: EcmpHash) -> Vec<FlowLoad> {
        let mut out = Vec::new();
        let mut port = 50000u16;
        for src in 1..=8u8 {
            loop {
                port += 1;
                let f = load(src, port, 1_000_000);
                if hash.path(&f.tuple, 0, 8) == 0 {
                    out.push(f);
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn colliding_elephants_get_ports_that_spread_them_under_the_same_hash() {
        for hash in [EcmpHash::Crc32, EcmpHash::Xor, EcmpHash::Toeplitz] {
            let flows = colliding(hash);
            let view = compute(&flows, hash, 8, 0).modelled.expect("model");
            assert_eq!(view.imbalance, 8.0, "{hash:?}: all on one path");
            let advice = advise(&view, 4791).expect("collisions");
            assert_eq!(advice.changes.len(), 7, "{hash:?}");
            // Applying the advice to the flows and recomputing the model gives the prediction.
            let moved: Vec<FlowLoad> = flows
                .iter()
                .map(|f| {
                    let mut f = f.clone();
                    if let Some(c) = advice
                        .changes
                        .iter()
                        .find(|c| (c.src_ip, c.udp_src_port) == (f.tuple.src, f.tuple.sport))
                    {
                        f.tuple.sport = c.new_udp_src_port;
                    }
                    f
                })
                .collect();
            let after = compute(&moved, hash, 8, 0).modelled.expect("model");
            assert_eq!(
                after.bytes_per_path, advice.bytes_per_path_after,
                "{hash:?}"
            );
            assert_eq!(
                advice.imbalance_after, 1.0,
                "{hash:?}: one elephant per path"
            );
            assert!(after.collisions.is_empty());
            // Reproducible.
            assert_eq!(advise(&view, 4791), Some(advice));
        }
    }

    #[test]
    fn no_collision_no_advice() {
        let view = compute(&[load(1, 50001, 10)], EcmpHash::Crc32, 8, 0)
            .modelled
            .expect("model");
        assert!(view.collisions.is_empty());
        assert_eq!(advise(&view, 4791), None);
        let empty = compute(&[], EcmpHash::Crc32, 8, 0).modelled.expect("model");
        assert_eq!(advise(&empty, 4791), None);
    }
}
