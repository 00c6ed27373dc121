-- Which QPs lost the most request PSNs between {from} and {to}?
-- Per flow, the PSNs declared lost (delta_psn_missing summed over the intervals) at the
-- observation point that counted the most: each point counts what was lost upstream of it, so
-- the last point on the path counts them all. `points` > 1: lost_between_observers.sql says
-- between which two points they disappeared.
SELECT
    src_ip, dst_ip, dst_qp,
    max(lost) AS psns_lost,
    argMax(point, lost) AS counted_at,
    count() AS points,
    max(packets) AS packets
FROM
(
    SELECT
        src_ip, dst_ip, dst_qp,
        concat(host, ' ', iface, ' ', direction) AS point,
        sum(delta_psn_missing) AS lost,
        sum(delta_packets) AS packets
    FROM roce.flows
    WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)}
      -- Only the flows some point declared PSNs lost for in the range (no other flow ranks):
      -- they are few, and the flows table's ordering key finds their rows without reading the
      -- others' (schema.sql).
      AND (src_ip, dst_ip, dst_qp) IN
      (
          SELECT src_ip, dst_ip, dst_qp FROM roce.flows
          WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)}
            AND (delta_psn_missing > 0 OR notEmpty(psn_lost_runs))
      )
    GROUP BY src_ip, dst_ip, dst_qp, host, iface, direction
)
GROUP BY src_ip, dst_ip, dst_qp
HAVING psns_lost > 0
ORDER BY psns_lost DESC, src_ip, dst_ip, dst_qp
LIMIT 20
