-- Where were a flow's PSNs lost, between {from} and {to}?
-- For a flow seen at several observation points (host, interface, direction), the points are
-- put in path order by what they counted as lost (a point downstream of a loss counts it, one
-- upstream does not; ties by the time each first saw the flow, which needs the observers'
-- clocks synchronised, e.g. by PTP or NTP): each row is a consecutive pair of
-- points and the PSNs that disappeared between them (the later point's count minus the
-- earlier's). One row per flow and link that lost: the link (or switch) between
-- `upstream` and `downstream` is where to look.
WITH per_point AS
(
    SELECT
        src_ip, dst_ip, dst_qp, host, iface, direction,
        sum(delta_psn_missing) AS lost,
        sum(delta_packets) AS packets,
        min(first_ts) AS first_seen
    FROM roce.flows
    WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)}
    GROUP BY src_ip, dst_ip, dst_qp, host, iface, direction
    HAVING packets > 0
),
ordered AS
(
    SELECT
        *,
        row_number() OVER w AS hop,
        lagInFrame(concat(host, ' ', iface, ' ', direction)) OVER w AS upstream_point,
        lagInFrame(host) OVER w AS upstream_host,
        lagInFrame(lost) OVER w AS upstream_lost
    FROM per_point
    WINDOW w AS (PARTITION BY src_ip, dst_ip, dst_qp ORDER BY lost ASC, first_seen ASC, host, iface
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT
    src_ip, dst_ip, dst_qp,
    upstream_host,
    host AS downstream_host,
    upstream_point AS upstream,
    concat(host, ' ', iface, ' ', direction) AS downstream,
    lost - upstream_lost AS psns_lost_between
FROM ordered
WHERE hop > 1 AND lost > upstream_lost
ORDER BY psns_lost_between DESC, src_ip, dst_ip, dst_qp
LIMIT 50
