-- Which flows were late in the training steps, per observer, between {from} and {to}?
-- From each observer's latest `diagnosis` line in the range with steps: the step period, the
-- steps found, and each straggler (the flow that most often finished last among its peers in
-- a step, docs/metrics.md "Training steps") with the steps it was late in and its mean lag. The
-- same flow late at several observers is the slow rank; different flows at each point a slow
-- link.
SELECT
    host,
    JSONExtractFloat(latest, 'period_ms') AS period_ms,
    JSONExtractUInt(latest, 'count') AS step_count,
    JSONExtractString(s, 'src_ip') AS src_ip,
    JSONExtractString(s, 'dst_ip') AS dst_ip,
    JSONExtractUInt(s, 'dst_qp') AS dst_qp,
    JSONExtractString(s, 'iface') AS iface,
    JSONExtractUInt(s, 'late_steps') AS late_steps,
    JSONExtractUInt(s, 'steps') AS compared_steps,
    JSONExtractFloat(s, 'mean_lag_ms') AS mean_lag_ms
FROM
(
    SELECT host, argMax(steps, ts) AS latest
    FROM roce.diagnosis
    WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)}
      AND steps NOT IN ('', 'null')
    GROUP BY host
)
ARRAY JOIN JSONExtractArrayRaw(latest, 'stragglers') AS s
ORDER BY host, mean_lag_ms DESC
