//! ECMP prescriptions: for the modelled collisions (elephant 5-tuples sharing one uplink), new
//! UDP source ports that spread them, or a number of QPs per connection (host pair) to split
//! them over, found with the same hash model as the modelled view, and the imbalance that model
//! predicts after the change (docs/metrics.md, "ECMP views", `advice`).
//! Deterministic: the same view gives the same advice (fixed orders, fixed port search).

use std::net::IpAddr;

use super::ecmp::balance::{FiveTuple, imbalance, jain};
use crate::report::{EcmpAdvice, ModelledView, PortChange, QpAdvice, QpCount};

/// Most QPs per connection the prescription considers (NCCL_IB_QPS_PER_CONNECTION and similar
/// settings go this far in practice).
pub const MAX_QPS: u32 = 16;
/// A count is good enough when its busiest path is within this factor of the best count's.
const GOOD_ENOUGH: f64 = 1.05;

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

/// The source ports the model gives `n` QPs of a connection: its lowest current elephant port
/// (one QP is the connection as it is) and the ports after it (wrapping within 49152..=65535,
/// or from 49152 for a port below that range), as NICs that derive the port from consecutive
/// QP numbers or flow labels roughly do; the real ports differ, so the spread holds as well as
/// the hash treats neighbouring ports.
fn qp_ports(first: u16, n: u32) -> Vec<u16> {
    let span = u32::from(u16::MAX - PORT_FIRST) + 1;
    let next = match first.checked_sub(PORT_FIRST) {
        Some(off) => u32::from(off) + 1,
        None => 0,
    };
    std::iter::once(first)
        .chain((0..n.saturating_sub(1)).map(|k| PORT_FIRST + ((next + k) % span) as u16))
        .take(n as usize)
        .collect()
}

/// The QP-count prescription for `view`, or `None` without collisions. Each connection (host
/// pair) with a colliding elephant has its elephant bytes split evenly over `n` QPs (ports
/// from [`qp_ports`]); connections are taken most bytes first (then by address), each given
/// the smallest `n` in 1..=[`MAX_QPS`] whose busiest path is within [`GOOD_ENOUGH`] of the best
/// `n`'s, with the connections before it already split.
pub fn qp_counts(view: &ModelledView, dport: u16) -> Option<QpAdvice> {
    if view.collisions.is_empty() || view.paths == 0 {
        return None;
    }
    // Connections: (src, dst) -> (bytes, QPs, lowest port, their elephants' (path, bytes)).
    type Conn = (u64, u64, u16, Vec<(u32, u64)>);
    let mut conns: std::collections::BTreeMap<(IpAddr, IpAddr), Conn> = Default::default();
    for c in &view.collisions {
        for e in &c.elephants {
            let conn = conns
                .entry((e.src_ip, e.dst_ip))
                .or_insert((0, 0, u16::MAX, Vec::new()));
            conn.0 += e.bytes;
            conn.1 += e.qps;
            conn.2 = conn.2.min(e.udp_src_port);
            conn.3.push((c.path, e.bytes));
        }
    }
    let mut order: Vec<((IpAddr, IpAddr), Conn)> = conns.into_iter().collect();
    order.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
    let mut loads = view.bytes_per_path.clone();
    let mut out = Vec::new();
    for ((src, dst), (bytes, qps_now, first, now)) in order {
        for (path, b) in &now {
            if let Some(l) = loads.get_mut(*path as usize) {
                *l -= (*b).min(*l);
            }
        }
        // The loads with this connection split over `n` QPs.
        let split = |n: u32| {
            let mut l = loads.clone();
            for (k, port) in qp_ports(first, n).into_iter().enumerate() {
                let share = bytes / u64::from(n) + u64::from((k as u64) < bytes % u64::from(n));
                let t = FiveTuple {
                    src,
                    dst,
                    sport: port,
                    dport,
                };
                l[view.hash.path(&t, view.seed, view.paths) as usize] += share;
            }
            l
        };
        let busiest = |n: u32| split(n).into_iter().max().unwrap_or(0);
        let best = (1..=MAX_QPS).map(busiest).min().unwrap_or(0);
        let n = (1..=MAX_QPS)
            .find(|&n| busiest(n) as f64 <= best as f64 * GOOD_ENOUGH)
            .unwrap_or(1);
        loads = split(n);
        out.push(QpCount {
            src_ip: src,
            dst_ip: dst,
            bytes,
            qps_now,
            qps: n,
            udp_src_ports: qp_ports(first, n),
        });
    }
    Some(QpAdvice {
        connections: out,
        imbalance_after: imbalance(&loads),
        jain_after: jain(&loads),
        bytes_per_path_after: loads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ecmp::balance::{FlowLoad, compute};
    use crate::report::EcmpHash;
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
            multipath: false,
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

    /// The QP-count prescription, applied to the flows (each connection's bytes split over its
    /// QPs and ports) and modelled again, gives exactly the predicted loads; it lowers the
    /// imbalance and is reproducible.
    #[test]
    fn qp_counts_split_connections_as_the_model_predicts() {
        for hash in [EcmpHash::Crc32, EcmpHash::Xor, EcmpHash::Toeplitz] {
            let flows = colliding(hash);
            let view = compute(&flows, hash, 8, 0).modelled.expect("model");
            let advice = qp_counts(&view, 4791).expect("collisions");
            assert_eq!(advice.connections.len(), 8, "{hash:?}");
            let mut split = Vec::new();
            for f in &flows {
                let c = advice
                    .connections
                    .iter()
                    .find(|c| (c.src_ip, c.dst_ip) == (f.tuple.src, f.tuple.dst))
                    .expect("every colliding connection has a count");
                assert_eq!((c.bytes, c.qps_now), (f.bytes, 1));
                assert_eq!(c.udp_src_ports.len(), c.qps as usize);
                assert!((1..=MAX_QPS).contains(&c.qps));
                let n = u64::from(c.qps);
                for (k, port) in c.udp_src_ports.iter().enumerate() {
                    let mut g = f.clone();
                    g.tuple.sport = *port;
                    g.bytes = f.bytes / n + u64::from((k as u64) < f.bytes % n);
                    split.push(g);
                }
            }
            let after = compute(&split, hash, 8, 0).modelled.expect("model");
            assert_eq!(
                after.bytes_per_path, advice.bytes_per_path_after,
                "{hash:?}"
            );
            assert!(
                advice.imbalance_after < view.imbalance / 2.0,
                "{hash:?}: {} -> {}",
                view.imbalance,
                advice.imbalance_after
            );
            assert_eq!(qp_counts(&view, 4791), Some(advice));
        }
    }

    #[test]
    fn qp_ports_wrap_within_the_range() {
        assert_eq!(qp_ports(65534, 3), [65534, 65535, 49152]);
        assert_eq!(qp_ports(50000, 2), [50000, 50001]);
        // One QP is the connection as it is; a port below the range (a NIC using a fixed
        // port) is followed by the start of the range.
        assert_eq!(qp_ports(4791, 1), [4791]);
        assert_eq!(qp_ports(4791, 3), [4791, 49152, 49153]);
    }

    #[test]
    fn no_collision_no_advice() {
        let view = compute(&[load(1, 50001, 10)], EcmpHash::Crc32, 8, 0)
            .modelled
            .expect("model");
        assert!(view.collisions.is_empty());
        assert_eq!(advise(&view, 4791), None);
        assert_eq!(qp_counts(&view, 4791), None);
        let empty = compute(&[], EcmpHash::Crc32, 8, 0).modelled.expect("model");
        assert_eq!(advise(&empty, 4791), None);
    }
}
