//! The scenarios: perftest program, message size, iterations, link MTU, netem loss; the steps
//! scenarios add periodic bursts over several QPs, one of them optionally slowed.

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
    /// QPs of the perftest process (`-q`); every other figure is per QP.
    pub(super) qps: u32,
    /// Training-step-like traffic (periodic bursts on every QP at once), see [`StepsSpec`].
    pub(super) steps: Option<StepsSpec>,
    /// netem reordering on one VM's egress, see [`Reorder`].
    pub(super) reorder: Option<Reorder>,
}

/// Real reordering: netem `delay .. reorder ..` on one VM's eth0 egress. netem sends
/// `reorder`% of the packets at once and delays the others, so a packet sent less than the
/// delay after a delayed one overtakes it; nothing is dropped. rxe does not tolerate it: its
/// responder NAKs every PSN that arrives ahead of the expected one and drops it, its requester
/// retries a READ whose responses come out of order, so the NAKs, go-back-N resends and READ
/// retries on the wire are real.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Reorder {
    /// netem's arguments (after `netem`).
    pub(super) netem: &'static str,
    /// On the server's egress (the client's XDP ingress and capture see the reordered
    /// packets, the observer's kernel path sees what the capture sees), else on the client's
    /// (its requests: TC egress sees them in rxe's order, before netem; the capture after it;
    /// pre.pcap, captured before netem, is then the kernel path's truth).
    pub(super) on_server: bool,
}

/// netem of the reordering scenarios: 30% of the packets (25% correlated) leave at once, the
/// others 1 ms later. The limit keeps netem from dropping in a go-back-N storm (its default is
/// 1000 packets).
pub(super) const REORDER_NETEM: &str = "delay 1ms reorder 30% 25% limit 100000";

/// Periodic bursts over `qps` QPs of one ib_read_bw process, through perftest's software rate
/// limiter: with `-t per_step` (at most that many READs outstanding per QP) and `--burst_size
/// = qps x per_step`, a burst posts `per_step` READs on every QP back to back (each QP stops at
/// its tx depth, the next one continues the burst), then nothing until the next burst is due.
/// perftest 4.5-0.17 computes the burst interval as 1 s / (rate / burst_size) with integer
/// division, so the rate is `per_second x burst_size` messages per second.
/// READ, so that the data (the READ responses) flows server -> client: netem on the server's
/// egress then delays one QP's data before the client's XDP ingress and capture see it (TC
/// egress would see a WRITE before the client's own netem).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StepsSpec {
    /// READs per QP and step.
    pub(super) per_step: u64,
    /// Bursts per second (the nominal period is 1000 / this ms); 0: no rate limiter, the QPs
    /// read back to back for `per_step x steps` READs each (steady traffic, no period).
    pub(super) per_second: u64,
    /// Steps run (-n = per_step x steps).
    pub(super) steps: u64,
    /// The slowed QP: its index in perftest's creation order (0-based; the client VM numbers
    /// its QPs from 17 in that order, checked against `rdma resource show qp`) and the netem
    /// delay in ms on the server's packets to it.
    pub(super) slow: Option<(u32, u32)>,
}

/// The netem delay of the slowed QP in the straggler scenarios, ms.
pub(super) const STRAGGLER_DELAY_MS: u32 = 30;

/// rxe's first user QP number in a VM that created none before (the client VM).
pub(super) const FIRST_QPN: u32 = 17;

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
        qps: 1,
        steps: None,
        reorder: None,
    };
    let steps = |name, slow, per_second, fast| {
        let spec = StepsSpec {
            // 8 READs of 8 KiB per QP and step: 192 KiB a step, ~50 ms of communication at
            // the rate rxe reaches under TCG, so that a loaded host (a step taking 2-3 times
            // longer) still ends a step well before the next is due; 16 (384 KiB) let steps
            // overrun the period under load and perftest's bursts then came late
            per_step: 8,
            per_second,
            // steady (aperiodic): 50 x 8 READs a QP, ~2.5 s at rxe's rate under TCG
            steps: if per_second == 0 { 50 } else { 12 },
            slow,
        };
        Scenario {
            name,
            perftest: "ib_read_bw",
            op: Op::Read,
            latency: false,
            size: 8192,
            iters: spec.per_step * spec.steps,
            mtu: 1500,
            loss: None,
            fast,
            qps: 3,
            steps: Some(spec),
            reorder: None,
        }
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
            qps: 1,
            steps: None,
            reorder: None,
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
        steps("steps_straggler", Some((1, STRAGGLER_DELAY_MS)), 2, false),
        steps("steps_control", None, 2, false),
        steps(
            "steps_straggler_other_qp",
            Some((2, STRAGGLER_DELAY_MS)),
            2,
            false,
        ),
        steps("steps_aperiodic", None, 0, false),
        // 300 WRITEs of 4 KiB (4 PSNs each), the client's requests reordered
        Scenario {
            name: "write_bw_mtu1500_reorder",
            size: 4096,
            iters: 300,
            reorder: Some(Reorder {
                netem: REORDER_NETEM,
                on_server: false,
            }),
            ..bw("", "ib_write_bw", Op::Write, 1500, false)
        },
        // 300 READs of 4 KiB, the server's READ responses reordered
        Scenario {
            name: "read_bw_mtu1500_reorder",
            size: 4096,
            iters: 300,
            reorder: Some(Reorder {
                netem: REORDER_NETEM,
                on_server: true,
            }),
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
        let mut a = format!("-s {} -n {}", self.size, self.iters);
        if self.qps > 1 {
            a += &format!(" -q {}", self.qps);
        }
        if let Some(st) = self.steps.filter(|s| s.per_second == 0) {
            // the same QPs and READs and the same -u 20 as below, no rate limiter
            a += &format!(" -u 20 -t {}", st.per_step);
        } else if let Some(st) = self.steps {
            let burst = st.per_step * u64::from(self.qps);
            // -u 20: QP timeout 4.096 us x 2^20 = 4.3 s, instead of perftest's 14 (67 ms): the
            // delayed QP's responses arrive 30 ms late plus what TCG adds under load, and rxe's
            // requester timing out and re-reading delayed the next bursts (a 500 ms period came
            // out as 707, 974, 936 ms steps on a loaded machine)
            a += &format!(
                " -u 20 -t {} --burst_size={burst} --rate_limit={} --rate_units=p --rate_limit_type=SW",
                st.per_step,
                burst * st.per_second
            );
        }
        a
    }
    /// The slowed QP as the client VM numbers it, and the delay in ms.
    pub(super) fn slow_qpn(&self) -> Option<(u32, u32)> {
        self.steps
            .and_then(|s| s.slow)
            .map(|(i, ms)| (FIRST_QPN + i, ms))
    }
}
