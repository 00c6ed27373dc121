//! ECMP path balance, three views (docs/metrics.md, "ECMP") computed from each flow's
//! [`FlowLoad`]: measured bytes per observed interface, a model of how a switch hash spreads
//! the flows' UDP 5-tuples over N uplinks (the hashes are here; [`EcmpHash`] itself is part of
//! the snapshot), and the 5-tuple entropy per host pair. The views' types are in the report
//! schema (crate::report).

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    sync::Arc,
};

use roce_observer_common::{FlowKey, FlowStats};

use crate::engine::flows::FastHash;
pub use crate::report::EcmpHash;
use crate::report::{
    Collision, EcmpSnapshot, HostPairEntropy, MeasuredView, ModelledView, PathLoad, TupleLoad,
    show_ip,
};

/// The UDP 5-tuple of a RoCE flow (protocol 17, destination port = the RoCE port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiveTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
}

fn ip_bytes(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The Microsoft RSS verification key.
const RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Toeplitz hash of `input` under `key` (the key must be at least `input.len() + 4` bytes).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let mut result = 0u32;
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (next, &byte) in (4..).zip(input) {
        for bit in (0..8).rev() {
            if byte & (1 << bit) != 0 {
                result ^= window;
            }
            let k = key.get(next).copied().unwrap_or(0);
            window = (window << 1) | u32::from((k >> bit) & 1);
        }
    }
    result
}

impl EcmpHash {
    pub fn hash(self, t: &FiveTuple, seed: u32) -> u32 {
        match self {
            EcmpHash::Crc32 => {
                let mut h = crc32fast::Hasher::new();
                h.update(&seed.to_be_bytes());
                h.update(&ip_bytes(&t.src));
                h.update(&ip_bytes(&t.dst));
                h.update(&[17]);
                h.update(&t.sport.to_be_bytes());
                h.update(&t.dport.to_be_bytes());
                h.finalize()
            }
            EcmpHash::Xor => {
                let mut x = seed ^ 17;
                for ip in [&t.src, &t.dst] {
                    for w in ip_bytes(ip).chunks(4) {
                        x ^= u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                    }
                }
                x ^= (u32::from(t.sport) << 16) | u32::from(t.dport);
                (x >> 16) ^ (x & 0xffff)
            }
            EcmpHash::Toeplitz => {
                let mut key = RSS_KEY;
                for (k, s) in key.iter_mut().zip(seed.to_be_bytes()) {
                    *k ^= s;
                }
                let mut input = ip_bytes(&t.src);
                input.extend(ip_bytes(&t.dst));
                input.extend(t.sport.to_be_bytes());
                input.extend(t.dport.to_be_bytes());
                // IPv6 needs a 36 + 4 byte key: the 40-byte key covers it exactly.
                toeplitz(&key, &input)
            }
        }
    }

    /// The uplink (0 .. paths) this 5-tuple is hashed to.
    pub fn path(self, t: &FiveTuple, seed: u32, paths: u32) -> u32 {
        if paths == 0 {
            0
        } else {
            self.hash(t, seed) % paths
        }
    }
}

/// max / mean of `loads` (1.0 is perfect balance; 0 when empty or idle).
pub fn imbalance(loads: &[u64]) -> f64 {
    let total: u64 = loads.iter().sum();
    if loads.is_empty() || total == 0 {
        return 0.0;
    }
    let mean = total as f64 / loads.len() as f64;
    loads.iter().copied().max().unwrap_or(0) as f64 / mean
}

/// Jain's fairness index (Σx)² / (n·Σx²): 1 when equal, 1/n when one path carries all.
pub fn jain(loads: &[u64]) -> f64 {
    let sum: f64 = loads.iter().map(|&x| x as f64).sum();
    let sq: f64 = loads.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if loads.is_empty() || sq == 0.0 {
        return 0.0;
    }
    sum * sum / (loads.len() as f64 * sq)
}

/// One flow's contribution to the ECMP views.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowLoad {
    pub tuple: FiveTuple,
    /// The flow's destination QP: a QP seen at several observation points counts once.
    pub dst_qp: u32,
    /// "iface/direction" where the flow was observed (shared by the flows seen there).
    pub point: Arc<str>,
    pub bytes: u64,
    /// Distinct UDP source ports of the flow (exact up to 4), as the flow table keeps them:
    /// 0 for none (inline, not a vector: one allocation per flow per report was measurable at
    /// 100,000 flows).
    pub sports: [u16; roce_observer_common::MAX_SPORTS],
    /// Its packets arrived reordered: the fabric spreads it over several paths (adaptive
    /// routing, packet spraying), so a per-5-tuple hash says nothing about where it goes.
    pub multipath: bool,
}

impl FlowLoad {
    /// The load of flow `k` with counters `s`, seen at `point`; RoCE goes to `roce_port`.
    pub fn new(k: &FlowKey, s: &FlowStats, point: Arc<str>, roce_port: u16) -> FlowLoad {
        FlowLoad {
            dst_qp: k.dst_qp,
            tuple: FiveTuple {
                src: show_ip(k.src_ip),
                dst: show_ip(k.dst_ip),
                sport: s.udp_sports[0],
                dport: roce_port,
            },
            point,
            bytes: s.bytes,
            sports: s.udp_sports,
            multipath: roce_observer_common::sequence::reordering(s).0 > 0,
        }
    }
}

/// A 5-tuple is an elephant only from this many bytes on (besides its share of the total):
/// a capture of a few packets has no elephants to move.
pub const ELEPHANT_MIN_BYTES: u64 = 1_000_000;

/// Host pairs listed in the entropy view (`EcmpSnapshot::entropy`).
pub const MAX_PAIRS: usize = 1000;

/// Compute the three views. `paths == 0` disables the model.
pub fn compute(flows: &[FlowLoad], hash: EcmpHash, paths: u32, seed: u32) -> EcmpSnapshot {
    // Measured: per observation point.
    let mut points: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for f in flows {
        let e = points.entry(&*f.point).or_default();
        e.0 += f.bytes;
        e.1 += 1;
    }
    let loads: Vec<u64> = points.values().map(|v| v.0).collect();
    let measured = MeasuredView {
        paths: points
            .iter()
            .map(|(p, (b, n))| PathLoad {
                path: (*p).to_string(),
                bytes: *b,
                flows: *n,
            })
            .collect(),
        imbalance: imbalance(&loads),
        jain: jain(&loads),
    };

    // 5-tuples: a flow's bytes go to its 5-tuple (its first source port). Flows sprayed over
    // several paths are left out of the model, and counted.
    let mut tuples: HashMap<FiveTuple, (u64, u64), FastHash> = HashMap::default();
    let (mut multipath_flows, mut multipath_bytes) = (0u64, 0u64);
    for f in flows {
        if f.multipath {
            multipath_flows += 1;
            multipath_bytes += f.bytes;
            continue;
        }
        let e = tuples.entry(f.tuple).or_default();
        e.0 += f.bytes;
        e.1 += 1;
    }
    let tuple_load = |t: &FiveTuple, (bytes, qps): (u64, u64)| TupleLoad {
        src_ip: t.src,
        dst_ip: t.dst,
        udp_src_port: t.sport,
        bytes,
        qps,
    };

    let modelled = (paths > 0).then(|| {
        let n = paths as usize;
        let mut bytes = vec![0u64; n];
        let mut count = vec![0u64; n];
        let total: u64 = tuples.values().map(|v| v.0).sum();
        let mut elephants: BTreeMap<u32, Vec<TupleLoad>> = BTreeMap::new();
        for (t, v) in &tuples {
            let p = hash.path(t, seed, paths);
            bytes[p as usize] += v.0;
            count[p as usize] += 1;
            if v.0 >= ELEPHANT_MIN_BYTES && (v.0 as u128) * 2 * (paths as u128) >= total as u128 {
                elephants.entry(p).or_default().push(tuple_load(t, *v));
            }
        }
        let mut collisions: Vec<Collision> = elephants
            .into_iter()
            .filter(|(_, e)| e.len() >= 2)
            .map(|(path, mut e)| {
                e.sort_by(|a, b| {
                    b.bytes
                        .cmp(&a.bytes)
                        .then((a.src_ip, a.dst_ip, a.udp_src_port).cmp(&(
                            b.src_ip,
                            b.dst_ip,
                            b.udp_src_port,
                        )))
                });
                Collision {
                    path,
                    bytes: e.iter().map(|t| t.bytes).sum(),
                    elephants: e,
                }
            })
            .collect();
        collisions.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.path.cmp(&b.path)));
        collisions.truncate(10);
        ModelledView {
            hash,
            seed,
            paths,
            imbalance: imbalance(&bytes),
            jain: jain(&bytes),
            bytes_per_path: bytes,
            tuples_per_path: count,
            collisions,
            multipath_flows,
            multipath_bytes,
            advice: None,
            qp_advice: None,
        }
    });

    // Entropy per (src, dst) host pair.
    #[derive(Default)]
    struct Pair {
        bytes: u64,
        // Only counted: hash sets (a tree insert per flow was measurable at 100,000 flows).
        qps: std::collections::HashSet<u32, FastHash>,
        ports: std::collections::HashSet<u16, FastHash>,
        busiest: u64,
    }
    let mut pairs: HashMap<(IpAddr, IpAddr), Pair, FastHash> = HashMap::default();
    for f in flows {
        let p = pairs.entry((f.tuple.src, f.tuple.dst)).or_default();
        p.bytes += f.bytes;
        p.qps.insert(f.dst_qp);
        p.ports.extend(f.sports.iter().copied().filter(|p| *p != 0));
    }
    for (t, v) in &tuples {
        if let Some(p) = pairs.get_mut(&(t.src, t.dst)) {
            p.busiest = p.busiest.max(v.0);
        }
    }
    let mut entropy: Vec<HostPairEntropy> = pairs
        .into_iter()
        .map(|((src, dst), p)| HostPairEntropy {
            src_ip: src,
            dst_ip: dst,
            bytes: p.bytes,
            qps: p.qps.len() as u64,
            udp_src_ports: p.ports.len() as u64,
            busiest_tuple_share: if p.bytes == 0 {
                0.0
            } else {
                p.busiest as f64 / p.bytes as f64
            },
        })
        .collect();
    entropy.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(a.src_ip.cmp(&b.src_ip))
            .then(a.dst_ip.cmp(&b.dst_ip))
    });
    entropy.truncate(MAX_PAIRS);

    EcmpSnapshot {
        measured,
        modelled,
        entropy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn toeplitz_matches_the_rss_verification_suite() {
        // Microsoft "Verifying the RSS Hash Calculation", IPv4 with TCP/UDP ports.
        let input = |src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16| {
            let mut v = src.to_vec();
            v.extend(dst);
            v.extend(sp.to_be_bytes());
            v.extend(dp.to_be_bytes());
            v
        };
        assert_eq!(
            toeplitz(
                &RSS_KEY,
                &input([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766)
            ),
            0x51cc_c178
        );
        assert_eq!(
            toeplitz(
                &RSS_KEY,
                &input([199, 92, 111, 2], [65, 69, 140, 83], 14230, 4739)
            ),
            0xc626_b0ea
        );
        // IPv4 only (2-tuple).
        assert_eq!(
            toeplitz(&RSS_KEY, &[66, 9, 149, 187, 161, 142, 100, 80]),
            0x323e_8fc2
        );
    }

    #[test]
    fn fairness_measures() {
        assert_eq!(imbalance(&[10, 10, 10, 10]), 1.0);
        assert_eq!(jain(&[10, 10, 10, 10]), 1.0);
        assert_eq!(imbalance(&[40, 0, 0, 0]), 4.0);
        assert_eq!(jain(&[40, 0, 0, 0]), 0.25);
        assert_eq!(imbalance(&[]), 0.0);
    }

    fn load(dst_qp: u32, sport: u16, bytes: u64) -> FlowLoad {
        FlowLoad {
            dst_qp,
            tuple: FiveTuple {
                src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                sport,
                dport: 4791,
            },
            point: "pcap/capture".into(),
            bytes,
            sports: [sport, 0, 0, 0],
            multipath: false,
        }
    }

    #[test]
    fn views() {
        // Two QPs pinned on one 5-tuple, one on another.
        let flows = [load(1, 1000, 100), load(2, 1000, 100), load(3, 2000, 200)];
        let s = compute(&flows, EcmpHash::Crc32, 4, 0);
        assert_eq!(s.measured.paths.len(), 1);
        assert_eq!(s.measured.jain, 1.0);
        let m = s.modelled.expect("model");
        assert_eq!(m.bytes_per_path.iter().sum::<u64>(), 400);
        assert_eq!(m.tuples_per_path.iter().sum::<u64>(), 2);
        assert_eq!(s.entropy.len(), 1);
        assert_eq!(s.entropy[0].udp_src_ports, 2);
        assert_eq!(s.entropy[0].qps, 3);
        // One QP seen at both ends of a link (two observation points) is one QP.
        let mut other_end = load(1, 1000, 100);
        other_end.point = "veth1/ingress".into();
        let seen_twice = compute(&[load(1, 1000, 100), other_end], EcmpHash::Crc32, 4, 0);
        assert_eq!(seen_twice.entropy[0].qps, 1);
        assert_eq!(s.entropy[0].busiest_tuple_share, 0.5);
        // Deterministic hashes, different per seed for some tuple.
        let t = flows[0].tuple;
        for h in [EcmpHash::Crc32, EcmpHash::Xor, EcmpHash::Toeplitz] {
            assert_eq!(h.hash(&t, 1), h.hash(&t, 1));
            assert_ne!(h.hash(&t, 0), h.hash(&t, 0x1234_5678));
            assert!(h.path(&t, 0, 8) < 8);
        }
    }

    #[test]
    fn collisions_list_elephants_sharing_a_path() {
        // xor folds the source port into the low bits: ports of equal parity share a path.
        let mb = ELEPHANT_MIN_BYTES;
        let flows = [load(1, 2, 5 * mb), load(2, 4, 4 * mb), load(3, 3, 1)];
        let m = compute(&flows, EcmpHash::Xor, 2, 0)
            .modelled
            .expect("model");
        assert_eq!(m.collisions.len(), 1);
        assert_eq!(m.collisions[0].elephants.len(), 2);
        assert_eq!(m.collisions[0].bytes, 9 * mb);
        // The same shares in a few packets' worth of bytes: no elephants, nothing to move.
        let small = [load(1, 2, 5000), load(2, 4, 4000), load(3, 3, 1)];
        let m = compute(&small, EcmpHash::Xor, 2, 0)
            .modelled
            .expect("model");
        assert!(m.collisions.is_empty());
    }

    #[test]
    fn sprayed_flows_are_left_out_of_the_hash_model_and_counted() {
        let mb = ELEPHANT_MIN_BYTES;
        let mut flows = vec![load(1, 2, 5 * mb), load(2, 4, 4 * mb)];
        for f in &mut flows {
            f.multipath = true;
        }
        flows.push(load(3, 3, mb));
        let m = compute(&flows, EcmpHash::Xor, 2, 0)
            .modelled
            .expect("model");
        assert!(
            m.collisions.is_empty(),
            "sprayed flows do not collide on a hash path"
        );
        assert_eq!((m.multipath_flows, m.multipath_bytes), (2, 9 * mb));
        assert_eq!(m.bytes_per_path.iter().sum::<u64>(), mb);
    }
}
