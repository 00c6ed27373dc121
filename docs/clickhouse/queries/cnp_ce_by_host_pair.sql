-- Which host pairs are throttled by congestion control, between {from} and {to}?
-- Per (source IP, destination IP): CE-marked packets and CNPs per second, and the CE fraction.
-- A flow seen at several points is counted once, at the point that saw the most. CNPs travel
-- from the receiver back to the sender, so a pair's `cnp` is on its reverse flows' row: a pair
-- with CE marks one way and CNPs the other is being slowed by DCQCN. In whole minutes
-- (roce.flow_minutes): from the minute {from} falls in, to {to}.
SELECT
    src_ip, dst_ip,
    sum(ce) AS ecn_ce,
    sum(cnps) AS cnp,
    sum(pkts) AS packets,
    if(packets = 0, 0, ecn_ce / packets) AS ce_fraction,
    ecn_ce / greatest(dateDiff('second', {from:DateTime64(9)}, {to:DateTime64(9)}), 1) AS ce_per_s,
    cnp / greatest(dateDiff('second', {from:DateTime64(9)}, {to:DateTime64(9)}), 1) AS cnp_per_s
FROM
(
    SELECT src_ip, dst_ip, dst_qp, max(ce) AS ce, max(cnps) AS cnps, max(pkts) AS pkts
    FROM
    (
        SELECT
            src_ip, dst_ip, dst_qp, host, iface, direction,
            sum(delta_ecn_ce) AS ce, sum(delta_cnp) AS cnps, sum(delta_packets) AS pkts
        FROM roce.flow_minutes
        WHERE minute >= toStartOfMinute({from:DateTime64(9)}) AND minute < {to:DateTime64(9)}
        GROUP BY src_ip, dst_ip, dst_qp, host, iface, direction
    )
    GROUP BY src_ip, dst_ip, dst_qp
)
GROUP BY src_ip, dst_ip
HAVING ecn_ce > 0 OR cnp > 0
ORDER BY cnp + ecn_ce DESC, src_ip, dst_ip
LIMIT 50
