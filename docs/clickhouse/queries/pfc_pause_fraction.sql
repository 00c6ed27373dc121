-- How much of the time was each priority paused, per observer, interface and priority, between
-- {from} and {to}, by minute?
-- `paused_fraction` is the largest over the interval reports of the minute and the sending MACs
-- (1 = paused for a whole interval); `pause_frames` the XOFFs sent in the minute; `storm` whether
-- any sender of that priority was in a storm. A priority near 1 on many ports is a storm; the
-- one it started from is in pfc_storm_first_source.sql.
SELECT
    toStartOfMinute(ts) AS minute,
    host, iface, priority,
    max(paused_fraction) AS paused_fraction,
    sum(delta_pause_frames) AS pause_frames,
    max(storm) AS storm
FROM roce.pfc
WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)}
GROUP BY minute, host, iface, priority
ORDER BY minute, host, iface, priority
