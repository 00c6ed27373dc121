-- roce-observer fleet tables for ClickHouse: one table per log line kind (docs/log-schema.md).
-- Load lines with ingest.sql. Every table:
--   - is partitioned by day, so a time range reads only its days and TTL drops whole parts;
--   - is ordered by the observer first, then time: each observer's rows of a time range are
--     one contiguous run, which the per-observer queries and the per-flow joins read without
--     sorting (see docs/benchmarks.md, "Fleet store");
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
    delta_ecn_ect UInt64
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (host, ts, src_ip, dst_ip, dst_qp)
TTL toDateTime(ts) + INTERVAL 30 DAY;

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

-- On a cluster: create the tables above ON CLUSTER as local tables (roce.flows_local, ...) on
-- every shard, and a Distributed table over each that queries and inserts go to. Sharding by
-- observer keeps one observer's rows on one shard; the cross-observer queries then read every
-- shard, which Distributed does in parallel.
--
-- CREATE TABLE roce.flows_local ON CLUSTER fabric AS roce.flows
--     ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/roce/flows', '{replica}')
--     PARTITION BY toDate(ts)
--     ORDER BY (host, ts, src_ip, dst_ip, dst_qp)
--     TTL toDateTime(ts) + INTERVAL 30 DAY;
-- CREATE TABLE roce.flows_all ON CLUSTER fabric AS roce.flows_local
--     ENGINE = Distributed(fabric, roce, flows_local, cityHash64(host));
-- (the same for pfc, mirrors, alerts, diagnosis and summaries; point ingest.sql and the
-- queries at the *_all tables)
