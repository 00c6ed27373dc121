//! The NIC section as people read it: per port, the counters that explain RoCE trouble first.
//! Shared by the periodic table, the `counters` command and the terminal UI.

use super::{NicCounter, Snapshot};

/// The counters that explain RoCE trouble, in the order a person reads them.
pub const KEY_COUNTERS: &[(&str, &str)] = &[
    ("np_cnp_sent", "CNPs sent (this host saw CE marks)"),
    (
        "rp_cnp_handled",
        "CNPs handled (this host was told to slow down)",
    ),
    (
        "np_ecn_marked_roce_packets",
        "RoCE packets received with ECN CE",
    ),
    ("out_of_sequence", "out-of-sequence packets received"),
    ("packet_seq_err", "NAK sequence errors received"),
    ("duplicate_request", "duplicate requests received"),
    ("implied_nak_seq_err", "implied NAK sequence errors"),
    (
        "local_ack_timeout_err",
        "ACK timeouts (retransmission after silence)",
    ),
    ("rnr_nak_retry_err", "RNR NAK retries exceeded"),
    ("roce_adp_retrans", "adaptive retransmissions"),
    ("out_of_seq_request", "out-of-sequence requests (rxe)"),
    ("rcvd_seq_err", "sequence errors received (rxe)"),
    ("completer_retry_err", "completer retries (rxe)"),
];

/// One line of the NIC view (TUI) and of the NIC section of the periodic table.
pub struct NicRow<'a> {
    /// "mlx5_0/1 (ens1f0)".
    pub port: String,
    pub name: &'a str,
    pub counter: &'a NicCounter,
    /// What the counter means, for the key RoCE counters; "ethtool" for pause counters.
    pub meaning: &'static str,
}

/// The NIC view's rows: per port, the key RoCE counters first (in the order a person reads
/// them), then every other counter that changed in the interval, then the pause counters that
/// changed or are not zero.
pub fn nic_rows(snap: &Snapshot) -> Vec<NicRow<'_>> {
    let mut rows = Vec::new();
    for p in &snap.nic {
        let port = match &p.netdev {
            Some(nd) => format!("{}/{} ({nd})", p.device, p.port),
            None => format!("{}/{}", p.device, p.port),
        };
        for (name, meaning) in KEY_COUNTERS {
            if let Some((name, counter)) = p.rdma.get_key_value(*name) {
                rows.push(NicRow {
                    port: port.clone(),
                    name,
                    counter,
                    meaning,
                });
            }
        }
        for (name, counter) in &p.rdma {
            if counter.delta > 0 && !KEY_COUNTERS.iter().any(|(k, _)| k == name) {
                rows.push(NicRow {
                    port: port.clone(),
                    name,
                    counter,
                    meaning: "",
                });
            }
        }
        for (name, counter) in &p.pause {
            if counter.total > 0 {
                rows.push(NicRow {
                    port: port.clone(),
                    name,
                    counter,
                    meaning: "ethtool -S",
                });
            }
        }
    }
    rows
}
