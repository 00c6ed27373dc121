-- Where were a flow's PSNs lost, between {from} and {to}?
-- For a flow seen at several observation points (host, interface, direction), the points are
-- put in path order by what they declared lost (a point downstream of a loss declares it, one
-- upstream does not; ties by the time each first saw the flow, which needs the observers'
-- clocks synchronised, e.g. by PTP or NTP). For each consecutive pair, the request PSNs the
-- upstream point saw (inside its lines' [req_psn_first, req_psn_highest], not declared lost
-- there) and the downstream point declared lost: `psns_lost_between` of them, the first 32
-- named in `psns`. One row per flow and link that lost: the link (or switch) between
-- `upstream` and `downstream` is where to look.
-- PSN by PSN while every line of the pair listed all its runs and the range spans less than
-- one wrap of the flow's 24-bit PSNs (a PSN number then names one packet). Otherwise
-- (`from_counts`) the count is the difference of the points' counts, and `psns` lists what
-- the runs name.
WITH per_point AS
(
    SELECT
        src_ip, dst_ip, dst_qp, host, iface, direction,
        sum(delta_psn_missing) AS lost,
        sum(delta_packets) AS packets,
        min(first_ts) AS first_seen,
        groupArrayIf((assumeNotNull(req_psn_first), assumeNotNull(req_psn_highest)),
                     isNotNull(req_psn_first)) AS spans,
        -- Each run expanded to its PSNs, at most 4,096 per run (a longer run marks the point).
        arraySort(groupUniqArrayArray(arrayFlatten(arrayMap(
            r -> arrayMap(k -> (tupleElement(r, 'first') + k) % 16777216,
                          range(least(tupleElement(r, 'count'), 4096))),
            psn_lost_runs)))) AS lost_psns,
        max(psn_lost_runs_truncated
            OR arrayExists(r -> tupleElement(r, 'count') > 4096, psn_lost_runs)) AS truncated
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
        lagInFrame(lost) OVER w AS upstream_lost,
        lagInFrame(spans) OVER w AS upstream_spans,
        lagInFrame(lost_psns) OVER w AS upstream_lost_psns,
        lagInFrame(truncated) OVER w AS upstream_truncated
    FROM per_point
    WINDOW w AS (PARTITION BY src_ip, dst_ip, dst_qp ORDER BY lost ASC, first_seen ASC, host, iface
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
pairs AS
(
    SELECT
        *,
        -- Declared lost downstream, seen upstream: inside one of its spans (a span may wrap
        -- the PSN space), not declared lost there.
        arrayFilter(p -> NOT has(upstream_lost_psns, p) AND arrayExists(
            s -> if(s.1 <= s.2, p >= s.1 AND p <= s.2, p >= s.1 OR p <= s.2),
            upstream_spans), lost_psns) AS named,
        truncated OR upstream_truncated AS from_counts
    FROM ordered
    WHERE hop > 1
)
SELECT
    src_ip, dst_ip, dst_qp,
    upstream_host,
    host AS downstream_host,
    upstream_point AS upstream,
    concat(host, ' ', iface, ' ', direction) AS downstream,
    if(from_counts, toInt64(lost) - toInt64(upstream_lost), toInt64(length(named)))
        AS psns_lost_between,
    arraySlice(named, 1, 32) AS psns,
    from_counts
FROM pairs
WHERE psns_lost_between > 0
ORDER BY psns_lost_between DESC, src_ip, dst_ip, dst_qp
LIMIT 50
