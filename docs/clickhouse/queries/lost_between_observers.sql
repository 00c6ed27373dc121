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
        -- The PSNs the point saw: its lines' spans, split where one wraps the 24-bit PSN
        -- space, sorted and merged where they touch (a few ranges per point, not one per line).
        arrayFold((acc, s) -> if(notEmpty(acc) AND s.1 <= acc[-1].2 + 1,
                                 arrayPushBack(arrayPopBack(acc),
                                               (acc[-1].1, greatest(acc[-1].2, s.2))),
                                 arrayPushBack(acc, s)),
                  arraySort(arrayFlatten(arrayMap(
                      s -> if(s.1 <= s.2, [s], [(s.1, toUInt32(16777215)), (toUInt32(0), s.2)]),
                      groupArrayIf((assumeNotNull(req_psn_first), assumeNotNull(req_psn_highest)),
                                   isNotNull(req_psn_first))))),
                  CAST([], 'Array(Tuple(UInt32, UInt32))')) AS spans,
        -- Each run expanded to its PSNs, at most 4,096 per run (a longer run marks the point).
        arraySort(groupUniqArrayArray(arrayFlatten(arrayMap(
            r -> arrayMap(k -> (tupleElement(r, 'first') + k) % 16777216,
                          range(least(tupleElement(r, 'count'), 4096))),
            psn_lost_runs)))) AS lost_psns,
        max(psn_lost_runs_truncated
            OR arrayExists(r -> tupleElement(r, 'count') > 4096, psn_lost_runs)) AS truncated
    FROM roce.flows
    WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)}
      -- Only the flows some point declared PSNs lost for in the range: no other flow can have
      -- lost any between two points. They are few, and the flows table's ordering key finds
      -- their rows without reading the others' (schema.sql).
      AND (src_ip, dst_ip, dst_qp) IN
      (
          SELECT src_ip, dst_ip, dst_qp FROM roce.flows
          WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)}
            AND (delta_psn_missing > 0 OR notEmpty(psn_lost_runs))
      )
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
        -- Declared lost downstream, seen upstream: not declared lost there (arrayEnumerateUniq
        -- numbers each PSN's copies in upstream's list then this one's, so 1 marks a PSN
        -- upstream did not declare: linear, where has() per PSN would be quadratic) and
        -- inside one of its ranges.
        arrayFilter((p, copy) -> copy = 1
                        AND arrayExists(s -> p >= s.1 AND p <= s.2, upstream_spans),
                    lost_psns,
                    arraySlice(arrayEnumerateUniq(arrayConcat(upstream_lost_psns, lost_psns)),
                               length(upstream_lost_psns) + 1)) AS named,
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
