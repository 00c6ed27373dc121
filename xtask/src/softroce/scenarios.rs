//! The scenarios: perftest program, message size, iterations, link MTU, netem loss.

pub(super) const SERVER_IP: &str = "192.0.2.1";
pub(super) const CLIENT_IP: &str = "192.0.2.2";

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Op {
    Write,
    Read,
    Send,
}

#[derive(Debug, Clone)]
pub(super) struct Scenario {
    pub name: &'static str,
    pub(super) perftest: &'static str,
    pub(super) op: Op,
    pub(super) latency: bool,
    pub(super) size: u64,
    pub(super) iters: u64,
    pub(super) mtu: u32,
    pub(super) loss: Option<&'static str>,
    pub(super) fast: bool,
}

pub(super) fn scenarios() -> Vec<Scenario> {
    let bw = |name, perftest, op, mtu, fast| Scenario {
        name,
        perftest,
        op,
        latency: false,
        size: 8192,
        iters: 100,
        mtu,
        loss: None,
        fast,
    };
    vec![
        bw("write_bw_mtu1500", "ib_write_bw", Op::Write, 1500, true),
        Scenario {
            name: "write_bw_mtu1500_loss2",
            loss: Some("2%"),
            ..bw("", "ib_write_bw", Op::Write, 1500, true)
        },
        Scenario {
            name: "write_lat_mtu1500",
            perftest: "ib_write_lat",
            op: Op::Write,
            latency: true,
            size: 2,
            iters: 100,
            mtu: 1500,
            loss: None,
            fast: true,
        },
        bw("read_bw_mtu1500", "ib_read_bw", Op::Read, 1500, true),
        bw("send_bw_mtu1500", "ib_send_bw", Op::Send, 1500, false),
        bw("write_bw_mtu9000", "ib_write_bw", Op::Write, 9000, false),
        bw("read_bw_mtu9000", "ib_read_bw", Op::Read, 9000, false),
        bw("send_bw_mtu9000", "ib_send_bw", Op::Send, 9000, false),
        Scenario {
            name: "read_bw_mtu1500_loss2",
            loss: Some("2%"),
            ..bw("", "ib_read_bw", Op::Read, 1500, false)
        },
    ]
}

impl Scenario {
    /// RoCE path MTU rxe uses for this link MTU (1024 at 1500 bytes, 4096 at 9000).
    pub(super) fn expected_pmtu(&self) -> u64 {
        if self.mtu >= 4096 + 100 { 4096 } else { 1024 }
    }
    pub(super) fn perftest_args(&self) -> String {
        format!("-s {} -n {}", self.size, self.iters)
    }
}
