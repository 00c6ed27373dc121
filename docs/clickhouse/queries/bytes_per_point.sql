-- How are the bytes spread over the observation points (uplinks), and how unbalanced is each
-- observer's set of points, between {from} and {to}?
-- `bytes` per (observer, interface, direction); `share` its part of the observer's bytes;
-- `imbalance` the observer's busiest point over its mean point (1 = even; with an observer per
-- switch, or a monitor host per switch's mirrors, this is the switch's uplink imbalance:
-- ECMP hashing a few large flows onto the same uplink shows as imbalance well above 1).
-- In whole minutes (roce.flow_minutes): from the minute {from} falls in, to {to}.
SELECT
    host, iface, direction,
    sum(delta_bytes) AS bytes,
    uniqExact(src_ip, dst_ip, dst_qp) AS flows,
    bytes / sum(bytes) OVER (PARTITION BY host) AS share,
    max(bytes) OVER (PARTITION BY host) / avg(bytes) OVER (PARTITION BY host) AS imbalance
FROM roce.flow_minutes
WHERE minute >= toStartOfMinute({from:DateTime64(9)}) AND minute < {to:DateTime64(9)}
GROUP BY host, iface, direction
ORDER BY imbalance DESC, host, bytes DESC
