-- roce-observer fleet tables for ClickHouse: one table per log line kind (docs/log-schema.md).
-- Load log files with ingest.sql, or ship lines into roce.lines. Every table:
--   - is partitioned by day, so a time range reads only its days and TTL drops whole parts;
--   - is ordered for its queries. roce.flows by 15-minute bucket, then flow, then observer and
--     time: a time range reads only its buckets, and inside a bucket each flow's rows at every
--     point are together, so the loss queries read only the rows of the flows that lost. Of
--     the keys measured at 72 M rows it answers them 3-7x faster than observer then time
--     (flow first was as fast or a little faster, at twice the size) and is the smallest on
--     disk (docs/benchmarks.md, "Fleet store", which also says how to compare keys on a fleet
--     of your size). The other tables by observer, then time;
--   - keeps times as DateTime64(9) (ns, UTC), addresses as IPv6 (IPv4 as ::ffff:a.b.c.d),
--     repeated strings as LowCardinality;
--   - keeps rows 30 days (change the TTL to taste).
-- Run once: clickhouse-client --multiquery < docs/clickhouse/schema.sql

CREATE DATABASE IF NOT EXISTS roce;

-- `flow` lines: the per-interval change of each flow (delta_*) and its totals at `ts`.
CREATE TABLE IF NOT EXISTS roce.flows
(
    ts DateTime64(9, 'UTC'),
    host LowCardinality(String),
    full Bool,
    delta_since_ts DateTime64(9, 'UTC'),
    src_ip IPv6,
    dst_ip IPv6,
    dst_qp UInt32,
    iface LowCardinality(String),
    direction LowCardinality(String),
    -- The mirror source (JSON) of a flow seen inside switch mirrors, '' otherwise.
    mirror String,
    transport LowCardinality(String),
    packets UInt64,
    bytes UInt64,
    psn_gaps UInt64,
    psn_missing UInt64,
    retransmits UInt64,
    reordered UInt64,
    psn_holes UInt64,
    acks UInt64,
    cnp UInt64,
    ecn_ce UInt64,
    ecn_ect UInt64,
    dscp UInt8,
    pcp Nullable(UInt8),
    peer_qp Nullable(UInt32),
    udp_src_ports UInt64,
    rate_bps Float64,
    rtt_p50_ns Nullable(UInt64),
    rtt_p99_ns Nullable(UInt64),
    first_ts DateTime64(9, 'UTC'),
    last_ts DateTime64(9, 'UTC'),
    delta_packets UInt64,
    delta_bytes UInt64,
    delta_psn_gaps UInt64,
    delta_psn_missing UInt64,
    delta_retransmits UInt64,
    delta_reordered UInt64,
    delta_naks UInt64,
    delta_cnp UInt64,
    delta_ecn_ce UInt64,
    delta_ecn_ect UInt64,
    -- The request PSNs the interval brought and the runs it declared lost (docs/log-schema.md):
    -- lost_between_observers.sql joins points PSN by PSN with them.
    req_psn_first Nullable(UInt32),
    req_psn_highest Nullable(UInt32),
    psn_lost_runs Array(Tuple(first UInt32, count UInt32)),
    psn_lost_runs_truncated Bool
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (toStartOfFifteenMinutes(ts), src_ip, dst_ip, dst_qp, host, ts)
TTL toDateTime(ts) + INTERVAL 30 DAY;

-- The flows summed per minute, for the queries that read every flow of a time range
-- (bytes_per_point.sql, cnp_ce_by_host_pair.sql): filled from roce.flows at insert, six times
-- fewer rows at 10 s intervals. Rows of the same flow, point and minute are summed as parts
-- merge, so read it with sum().
CREATE TABLE IF NOT EXISTS roce.flow_minutes
(
    minute DateTime('UTC'),
    host LowCardinality(String),
    iface LowCardinality(String),
    direction LowCardinality(String),
    src_ip IPv6,
    dst_ip IPv6,
    dst_qp UInt32,
    delta_packets UInt64,
    delta_bytes UInt64,
    delta_cnp UInt64,
    delta_ecn_ce UInt64
)
ENGINE = SummingMergeTree
PARTITION BY toDate(minute)
ORDER BY (minute, host, iface, direction, src_ip, dst_ip, dst_qp)
TTL minute + INTERVAL 30 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS roce.flow_minutes_from_flows TO roce.flow_minutes AS
SELECT
    toStartOfMinute(ts) AS minute,
    host, iface, direction, src_ip, dst_ip, dst_qp,
    delta_packets, delta_bytes, delta_cnp, delta_ecn_ce
FROM roce.flows;

-- `pfc` lines: PFC (per priority) and 802.3x PAUSE (priority NULL) per sending MAC.
CREATE TABLE IF NOT EXISTS roce.pfc
(
    ts DateTime64(9, 'UTC'),
    host LowCardinality(String),
    full Bool,
    delta_since_ts DateTime64(9, 'UTC'),
    iface LowCardinality(String),
    direction LowCardinality(String),
    src_mac LowCardinality(String),
    priority Nullable(UInt8),
    pfc_kind LowCardinality(String),
    pause_frames UInt64,
    xon_frames UInt64,
    pause_quanta UInt64,
    paused_us Float64,
    paused_fraction Float64,
    storm Bool,
    storms UInt64,
    first_ts DateTime64(9, 'UTC'),
    last_ts DateTime64(9, 'UTC'),
    delta_pause_frames UInt64,
    delta_xon_frames UInt64,
    delta_pause_quanta UInt64
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (host, iface, ts)
TTL toDateTime(ts) + INTERVAL 30 DAY;

-- `mirror` lines: switch-mirror sessions (ERSPAN, VXLAN, GRE) and their sequence losses.
CREATE TABLE IF NOT EXISTS roce.mirrors
(
    ts DateTime64(9, 'UTC'),
    host LowCardinality(String),
    full Bool,
    iface LowCardinality(String),
    direction LowCardinality(String),
    encap LowCardinality(String),
    outer_src IPv6,
    outer_dst IPv6,
    frames UInt64,
    seq_lost UInt64,
    delta_frames UInt64,
    delta_seq_lost UInt64
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (host, ts)
TTL toDateTime(ts) + INTERVAL 30 DAY;

-- `alert` lines.
CREATE TABLE IF NOT EXISTS roce.alerts
(
    ts DateTime64(9, 'UTC'),
    host LowCardinality(String),
    full Bool,
    alert_kind LowCardinality(String),
    reason String,
    -- The subject (flow or PFC entry) as JSON.
    flow String,
    pfc String,
    count UInt64,
    delta_count UInt64
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (host, alert_kind, ts)
TTL toDateTime(ts) + INTERVAL 30 DAY;

-- `diagnosis` lines: training steps, path loss and PFC storm origin, kept as JSON text
-- (queries read them with JSONExtract*): they are nested and few.
CREATE TABLE IF NOT EXISTS roce.diagnosis
(
    ts DateTime64(9, 'UTC'),
    host LowCardinality(String),
    full Bool,
    steps String,
    paths String,
    pfc_origin String
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (host, ts)
TTL toDateTime(ts) + INTERVAL 30 DAY;

-- `summary` lines: one per observer and interval.
CREATE TABLE IF NOT EXISTS roce.summaries
(
    ts DateTime64(9, 'UTC'),
    host LowCardinality(String),
    full Bool,
    total_packets UInt64,
    roce_packets UInt64,
    pfc_frames UInt64,
    malformed UInt64,
    map_full UInt64,
    events_lost UInt64,
    flows UInt64,
    link_gbps Float64,
    interval_start_ts DateTime64(9, 'UTC'),
    interval_end_ts DateTime64(9, 'UTC'),
    log_records_lost UInt64
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (host, ts)
TTL toDateTime(ts) + INTERVAL 30 DAY;

-- Every line enters through roce.lines, one raw JSON line per row (ingest.sql for files;
-- shippers insert into it too, docs/operations.md "Fleet"). It keeps nothing itself (Null
-- engine); `kind` is read from each line once, at insert (a shipper inserts `line` alone), and
-- the materialized views below route each line kind to its table by it, converting times
-- (ns integers) to DateTime64(9) and addresses to IPv6, and keeping nested objects (mirror
-- source, alert subject, diagnosis) as JSON text. Fields a line lacks take their defaults;
-- fields a table does not keep are dropped.
CREATE TABLE IF NOT EXISTS roce.lines
(
    line String,
    kind LowCardinality(String) MATERIALIZED JSONExtractString(line, 'kind')
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS roce.flows_from_lines TO roce.flows AS
WITH JSONExtract(line, 'Tuple(kind String, ts UInt64, host String, full Bool, delta_since_ts UInt64, src_ip String, dst_ip String, dst_qp UInt32, iface String, direction String, transport String, packets UInt64, bytes UInt64, psn_gaps UInt64, psn_missing UInt64, retransmits UInt64, reordered UInt64, psn_holes UInt64, acks UInt64, cnp UInt64, ecn_ce UInt64, ecn_ect UInt64, dscp UInt8, pcp Nullable(UInt8), peer_qp Nullable(UInt32), udp_src_ports UInt64, rate_bps Float64, rtt_ns Tuple(p50 Nullable(UInt64), p99 Nullable(UInt64)), first_ts UInt64, last_ts UInt64, delta Tuple(packets UInt64, bytes UInt64, psn_gaps UInt64, psn_missing UInt64, retransmits UInt64, reordered UInt64, naks UInt64, cnp UInt64, ecn_ce UInt64, ecn_ect UInt64), req_psn_first Nullable(UInt32), req_psn_highest Nullable(UInt32), psn_lost_runs Array(Tuple(first UInt32, count UInt32)), psn_lost_runs_truncated Bool)') AS l
SELECT
    fromUnixTimestamp64Nano(toInt64(l.ts), 'UTC') AS ts,
    l.host AS host,
    l.full AS full,
    fromUnixTimestamp64Nano(toInt64(l.delta_since_ts), 'UTC') AS delta_since_ts,
    toIPv6(l.src_ip) AS src_ip,
    toIPv6(l.dst_ip) AS dst_ip,
    l.dst_qp AS dst_qp,
    l.iface AS iface,
    l.direction AS direction,
    if(JSONExtractRaw(line, 'mirror') IN ('', 'null'), '', JSONExtractRaw(line, 'mirror')) AS mirror,
    l.transport AS transport,
    l.packets AS packets,
    l.bytes AS bytes,
    l.psn_gaps AS psn_gaps,
    l.psn_missing AS psn_missing,
    l.retransmits AS retransmits,
    l.reordered AS reordered,
    l.psn_holes AS psn_holes,
    l.acks AS acks,
    l.cnp AS cnp,
    l.ecn_ce AS ecn_ce,
    l.ecn_ect AS ecn_ect,
    l.dscp AS dscp,
    l.pcp AS pcp,
    l.peer_qp AS peer_qp,
    l.udp_src_ports AS udp_src_ports,
    l.rate_bps AS rate_bps,
    l.rtt_ns.p50 AS rtt_p50_ns,
    l.rtt_ns.p99 AS rtt_p99_ns,
    fromUnixTimestamp64Nano(toInt64(l.first_ts), 'UTC') AS first_ts,
    fromUnixTimestamp64Nano(toInt64(l.last_ts), 'UTC') AS last_ts,
    l.delta.packets AS delta_packets,
    l.delta.bytes AS delta_bytes,
    l.delta.psn_gaps AS delta_psn_gaps,
    l.delta.psn_missing AS delta_psn_missing,
    l.delta.retransmits AS delta_retransmits,
    l.delta.reordered AS delta_reordered,
    l.delta.naks AS delta_naks,
    l.delta.cnp AS delta_cnp,
    l.delta.ecn_ce AS delta_ecn_ce,
    l.delta.ecn_ect AS delta_ecn_ect,
    l.req_psn_first AS req_psn_first,
    l.req_psn_highest AS req_psn_highest,
    l.psn_lost_runs AS psn_lost_runs,
    l.psn_lost_runs_truncated AS psn_lost_runs_truncated
FROM roce.lines
WHERE kind = 'flow';

CREATE MATERIALIZED VIEW IF NOT EXISTS roce.pfc_from_lines TO roce.pfc AS
WITH JSONExtract(line, 'Tuple(kind String, ts UInt64, host String, full Bool, delta_since_ts UInt64, iface String, direction String, src_mac String, priority Nullable(UInt8), pfc_kind String, pause_frames UInt64, xon_frames UInt64, pause_quanta UInt64, paused_us Float64, paused_fraction Float64, storm Bool, storms UInt64, first_ts UInt64, last_ts UInt64, delta_pause_frames UInt64, delta_xon_frames UInt64, delta_pause_quanta UInt64)') AS l
SELECT
    fromUnixTimestamp64Nano(toInt64(l.ts), 'UTC') AS ts,
    l.host AS host,
    l.full AS full,
    fromUnixTimestamp64Nano(toInt64(l.delta_since_ts), 'UTC') AS delta_since_ts,
    l.iface AS iface,
    l.direction AS direction,
    l.src_mac AS src_mac,
    l.priority AS priority,
    l.pfc_kind AS pfc_kind,
    l.pause_frames AS pause_frames,
    l.xon_frames AS xon_frames,
    l.pause_quanta AS pause_quanta,
    l.paused_us AS paused_us,
    l.paused_fraction AS paused_fraction,
    l.storm AS storm,
    l.storms AS storms,
    fromUnixTimestamp64Nano(toInt64(l.first_ts), 'UTC') AS first_ts,
    fromUnixTimestamp64Nano(toInt64(l.last_ts), 'UTC') AS last_ts,
    l.delta_pause_frames AS delta_pause_frames,
    l.delta_xon_frames AS delta_xon_frames,
    l.delta_pause_quanta AS delta_pause_quanta
FROM roce.lines
WHERE kind = 'pfc';

CREATE MATERIALIZED VIEW IF NOT EXISTS roce.mirrors_from_lines TO roce.mirrors AS
WITH JSONExtract(line, 'Tuple(kind String, ts UInt64, host String, full Bool, iface String, direction String, encap String, outer_src String, outer_dst String, frames UInt64, seq_lost UInt64, delta_frames UInt64, delta_seq_lost UInt64)') AS l
SELECT
    fromUnixTimestamp64Nano(toInt64(l.ts), 'UTC') AS ts,
    l.host AS host,
    l.full AS full,
    l.iface AS iface,
    l.direction AS direction,
    l.encap AS encap,
    toIPv6(l.outer_src) AS outer_src,
    toIPv6(l.outer_dst) AS outer_dst,
    l.frames AS frames,
    l.seq_lost AS seq_lost,
    l.delta_frames AS delta_frames,
    l.delta_seq_lost AS delta_seq_lost
FROM roce.lines
WHERE kind = 'mirror';

CREATE MATERIALIZED VIEW IF NOT EXISTS roce.alerts_from_lines TO roce.alerts AS
WITH JSONExtract(line, 'Tuple(kind String, ts UInt64, host String, full Bool, alert_kind String, reason String, count UInt64, delta_count UInt64)') AS l
SELECT
    fromUnixTimestamp64Nano(toInt64(l.ts), 'UTC') AS ts,
    l.host AS host,
    l.full AS full,
    l.alert_kind AS alert_kind,
    l.reason AS reason,
    if(JSONExtractRaw(line, 'flow') IN ('', 'null'), '', JSONExtractRaw(line, 'flow')) AS flow,
    if(JSONExtractRaw(line, 'pfc') IN ('', 'null'), '', JSONExtractRaw(line, 'pfc')) AS pfc,
    l.count AS count,
    l.delta_count AS delta_count
FROM roce.lines
WHERE kind = 'alert';

CREATE MATERIALIZED VIEW IF NOT EXISTS roce.diagnosis_from_lines TO roce.diagnosis AS
WITH JSONExtract(line, 'Tuple(kind String, ts UInt64, host String, full Bool)') AS l
SELECT
    fromUnixTimestamp64Nano(toInt64(l.ts), 'UTC') AS ts,
    l.host AS host,
    l.full AS full,
    if(JSONExtractRaw(line, 'steps') IN ('', 'null'), '', JSONExtractRaw(line, 'steps')) AS steps,
    if(JSONExtractRaw(line, 'paths') IN ('', 'null'), '', JSONExtractRaw(line, 'paths')) AS paths,
    if(JSONExtractRaw(line, 'pfc_origin') IN ('', 'null'), '', JSONExtractRaw(line, 'pfc_origin')) AS pfc_origin
FROM roce.lines
WHERE kind = 'diagnosis';

CREATE MATERIALIZED VIEW IF NOT EXISTS roce.summaries_from_lines TO roce.summaries AS
WITH JSONExtract(line, 'Tuple(kind String, ts UInt64, host String, full Bool, total_packets UInt64, roce_packets UInt64, pfc_frames UInt64, malformed UInt64, map_full UInt64, events_lost UInt64, flows UInt64, link_gbps Float64, interval_start_ts UInt64, interval_end_ts UInt64, log_records_lost UInt64)') AS l
SELECT
    fromUnixTimestamp64Nano(toInt64(l.ts), 'UTC') AS ts,
    l.host AS host,
    l.full AS full,
    l.total_packets AS total_packets,
    l.roce_packets AS roce_packets,
    l.pfc_frames AS pfc_frames,
    l.malformed AS malformed,
    l.map_full AS map_full,
    l.events_lost AS events_lost,
    l.flows AS flows,
    l.link_gbps AS link_gbps,
    fromUnixTimestamp64Nano(toInt64(l.interval_start_ts), 'UTC') AS interval_start_ts,
    fromUnixTimestamp64Nano(toInt64(l.interval_end_ts), 'UTC') AS interval_end_ts,
    l.log_records_lost AS log_records_lost
FROM roce.lines
WHERE kind = 'summary';

-- On a cluster: create the tables above ON CLUSTER as local tables (roce.flows_local, ...) on
-- every shard, and a Distributed table over each that queries and inserts go to. Sharding by
-- observer keeps one observer's rows on one shard; the cross-observer queries then read every
-- shard, which Distributed does in parallel.
--
-- CREATE TABLE roce.flows_local ON CLUSTER fabric AS roce.flows
--     ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/roce/flows', '{replica}')
--     PARTITION BY toDate(ts)
--     ORDER BY (toStartOfFifteenMinutes(ts), src_ip, dst_ip, dst_qp, host, ts)
--     TTL toDateTime(ts) + INTERVAL 30 DAY;
-- CREATE TABLE roce.flows_all ON CLUSTER fabric AS roce.flows_local
--     ENGINE = Distributed(fabric, roce, flows_local, cityHash64(host));
-- (the same for flow_minutes, pfc, mirrors, alerts, diagnosis and summaries; create roce.lines
-- and the materialized views on every shard, feeding the local tables, and let the queries
-- read the *_all tables)
