-- Where did each PFC storm start, between {from} and {to}?
-- A storm window is a minute in which some entry was in a storm; its first source is the
-- (observer, interface, sending MAC, priority) whose pause frames appeared first in that minute,
-- to the resolution of the observers' intervals. Within one observer the `diagnosis` lines'
-- `pfc_origin` orders the sources to the frame; across observers this is the fleet's order
-- (observer clocks must be synchronised, e.g. by PTP or NTP, for it to mean anything).
SELECT
    toStartOfMinute(ts) AS window,
    argMin(host, ts) AS first_host,
    argMin(iface, ts) AS first_iface,
    argMin(src_mac, ts) AS first_src_mac,
    argMin(priority, ts) AS first_priority,
    min(ts) AS first_pause_ts,
    uniqExact(host, iface, src_mac, priority) AS sources
FROM roce.pfc
WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)}
  AND delta_pause_frames > 0
  AND toStartOfMinute(ts) IN
  (
      SELECT toStartOfMinute(ts) FROM roce.pfc
      WHERE ts >= {from:DateTime64(9)} AND ts < {to:DateTime64(9)} AND storm
  )
GROUP BY window
ORDER BY window
