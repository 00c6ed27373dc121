-- Load one roce-observer log file into the tables of schema.sql. `{file}` stands for the file's
-- path: a rotated roce-observer-*.jsonl.gz (gzip is recognised by the name) or a plain .jsonl.
-- Each statement reads the file once and keeps one line kind; fields a line does not have
-- take their defaults, fields the table does not keep are skipped.
--
--   sed "s|{file}|$PWD/roce-observer-20261201T030405.678Z.jsonl.gz|g" ingest.sql \
--       | clickhouse-local --multiquery     # or clickhouse-client, with the file on the server
--
-- Load each rotated file once, when it appears. The live file roce-observer.jsonl is still
-- being appended to: load it only once it is rotated, or through a shipper that follows it
-- (docs/operations.md, "Fleet").

INSERT INTO roce.flows
SELECT
    fromUnixTimestamp64Nano(toInt64(ts), 'UTC'), host, full,
    fromUnixTimestamp64Nano(toInt64(delta_since_ts), 'UTC'),
    toIPv6(src_ip), toIPv6(dst_ip), dst_qp, iface, direction, mirror, transport,
    packets, bytes, psn_gaps, psn_missing, retransmits, reordered, psn_holes, acks, cnp,
    ecn_ce, ecn_ect, dscp, pcp, peer_qp, udp_src_ports, rate_bps,
    rtt_ns.p50, rtt_ns.p99,
    fromUnixTimestamp64Nano(toInt64(first_ts), 'UTC'),
    fromUnixTimestamp64Nano(toInt64(last_ts), 'UTC'),
    delta.packets, delta.bytes, delta.psn_gaps, delta.psn_missing, delta.retransmits,
    delta.reordered, delta.naks, delta.cnp, delta.ecn_ce, delta.ecn_ect
FROM file('{file}', 'JSONEachRow',
    'kind String, ts UInt64, host String, full Bool, delta_since_ts UInt64,
     src_ip String, dst_ip String, dst_qp UInt32, iface String, direction String,
     mirror String, transport String, packets UInt64, bytes UInt64, psn_gaps UInt64,
     psn_missing UInt64, retransmits UInt64, reordered UInt64, psn_holes UInt64, acks UInt64,
     cnp UInt64, ecn_ce UInt64, ecn_ect UInt64, dscp UInt8, pcp Nullable(UInt8),
     peer_qp Nullable(UInt32), udp_src_ports UInt64, rate_bps Float64,
     rtt_ns Tuple(p50 Nullable(UInt64), p99 Nullable(UInt64)),
     first_ts UInt64, last_ts UInt64,
     delta Tuple(packets UInt64, bytes UInt64, psn_gaps UInt64, psn_missing UInt64,
                 retransmits UInt64, reordered UInt64, naks UInt64, cnp UInt64,
                 ecn_ce UInt64, ecn_ect UInt64)')
WHERE kind = 'flow';

INSERT INTO roce.pfc
SELECT
    fromUnixTimestamp64Nano(toInt64(ts), 'UTC'), host, full,
    fromUnixTimestamp64Nano(toInt64(delta_since_ts), 'UTC'),
    iface, direction, src_mac, priority, pfc_kind, pause_frames, xon_frames, pause_quanta,
    paused_us, paused_fraction, storm, storms,
    fromUnixTimestamp64Nano(toInt64(first_ts), 'UTC'),
    fromUnixTimestamp64Nano(toInt64(last_ts), 'UTC'),
    delta_pause_frames, delta_xon_frames, delta_pause_quanta
FROM file('{file}', 'JSONEachRow',
    'kind String, ts UInt64, host String, full Bool, delta_since_ts UInt64, iface String,
     direction String, src_mac String, priority Nullable(UInt8), pfc_kind String,
     pause_frames UInt64, xon_frames UInt64, pause_quanta UInt64, paused_us Float64,
     paused_fraction Float64, storm Bool, storms UInt64, first_ts UInt64, last_ts UInt64,
     delta_pause_frames UInt64, delta_xon_frames UInt64, delta_pause_quanta UInt64')
WHERE kind = 'pfc';

INSERT INTO roce.mirrors
SELECT
    fromUnixTimestamp64Nano(toInt64(ts), 'UTC'), host, full, iface, direction, encap,
    toIPv6(outer_src), toIPv6(outer_dst), frames, seq_lost, delta_frames, delta_seq_lost
FROM file('{file}', 'JSONEachRow',
    'kind String, ts UInt64, host String, full Bool, iface String, direction String,
     encap String, outer_src String, outer_dst String, frames UInt64, seq_lost UInt64,
     delta_frames UInt64, delta_seq_lost UInt64')
WHERE kind = 'mirror';

INSERT INTO roce.alerts
SELECT
    fromUnixTimestamp64Nano(toInt64(ts), 'UTC'), host, full, alert_kind, reason, flow, pfc,
    count, delta_count
FROM file('{file}', 'JSONEachRow',
    'kind String, ts UInt64, host String, full Bool, alert_kind String, reason String,
     flow String, pfc String, count UInt64, delta_count UInt64')
WHERE kind = 'alert';

INSERT INTO roce.diagnosis
SELECT
    fromUnixTimestamp64Nano(toInt64(ts), 'UTC'), host, full, steps, paths, pfc_origin
FROM file('{file}', 'JSONEachRow',
    'kind String, ts UInt64, host String, full Bool, steps String, paths String,
     pfc_origin String')
WHERE kind = 'diagnosis';

INSERT INTO roce.summaries
SELECT
    fromUnixTimestamp64Nano(toInt64(ts), 'UTC'), host, full, total_packets, roce_packets,
    pfc_frames, malformed, map_full, events_lost, flows, link_gbps,
    fromUnixTimestamp64Nano(toInt64(interval_start_ts), 'UTC'),
    fromUnixTimestamp64Nano(toInt64(interval_end_ts), 'UTC'),
    log_records_lost
FROM file('{file}', 'JSONEachRow',
    'kind String, ts UInt64, host String, full Bool, total_packets UInt64,
     roce_packets UInt64, pfc_frames UInt64, malformed UInt64, map_full UInt64,
     events_lost UInt64, flows UInt64, link_gbps Float64, interval_start_ts UInt64,
     interval_end_ts UInt64, log_records_lost UInt64')
WHERE kind = 'summary';
