#!/usr/bin/env python3
"""The fleet store at full size (docs/benchmarks.md, "Fleet store"): load a sample of observers'
logs through the shipped schema.sql and ingest.sql (the real ingestion path, timed), replicate
the sample's flow rows inside ClickHouse to REPLICAS times as many observers, then copy the
flows into one table per candidate ordering key and time every docs/clickhouse/queries/*.sql
on each, over the whole time range and over its last 5 minutes. Prints a table (stderr is the
progress).

usage: chdb_scale.py SESSION_DIR REPLICAS FILE...
       chdb_scale.py SESSION_DIR      (again on a session loaded before: the key comparison only)

Replication (synthetic): replica j (1..REPLICAS-1) of a sample row gets the host
'<host>.r<j>' and its source and destination addresses moved by j * 2^18 (10.a.b.c becomes
10.(a + 4j).b.c), so every replica is another group of observers watching its own flows; the
times, counters, PSNs and lost runs are the sample's. Only roce.flows is replicated (and
roce.flow_minutes, filled from it at insert); the other tables keep the sample's rows.
"""
import os
import re
import sys
import time

from chdb import session

from chdb_load import DOCS, TABLES, load, rows, statements

SHIPPED = "(toStartOfFifteenMinutes(ts), src_ip, dst_ip, dst_qp, host, ts)"
CANDIDATES = {
    "15-min bucket, flow, observer, time": None,  # the shipped table itself
    "observer, time, flow": "(host, ts, src_ip, dst_ip, dst_qp)",
    "flow, observer, time": "(src_ip, dst_ip, dst_qp, host, ts)",
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def timed(s, sql, params=None):
    t0 = time.monotonic()
    got = rows(s, sql, params)
    return got, time.monotonic() - t0


def flows_bytes(s, table):
    return rows(
        s,
        "SELECT sum(bytes_on_disk) AS b, sum(rows) AS r, count() AS parts FROM system.parts "
        f"WHERE database = 'roce' AND table = '{table}' AND active",
    )[0]


def main():
    sess_dir = sys.argv[1]
    s = session.Session(sess_dir)
    s.query("SET output_format_json_quote_64bit_integers = 0")
    report = []
    if len(sys.argv) > 2:
        report = load_and_replicate(s, int(sys.argv[2]), sys.argv[3:])
    compare(s, report)


def load_and_replicate(s, replicas, files):
    schema = open(os.path.join(DOCS, "schema.sql")).read()
    assert "ORDER BY " + SHIPPED in schema, "the flows ordering key moved: update CANDIDATES"
    # 1. The sample, through the shipped ingestion path.
    load_s = load(s, files)
    counts = {t: rows(s, f"SELECT count() AS n FROM roce.{t}")[0]["n"] for t in TABLES}
    lines = sum(counts.values())
    sample_flows = counts["flows"]
    hosts = rows(s, "SELECT uniqExact(host) AS n FROM roce.flows")[0]["n"]
    report = [
        f"sample: {len(files)} files of {hosts} observers, {lines:,} lines ({sample_flows:,} flow "
        f"rows) loaded with ingest.sql in {load_s:.1f} s: {lines / load_s:,.0f} lines/s",
    ]
    log(report[-1])

    # 2. Synthetic replication to REPLICAS times the observers.
    t0 = time.monotonic()
    s.query(
        "INSERT INTO roce.flows SELECT * REPLACE ("
        "concat(host, '.r', toString(j)) AS host, "
        "toIPv6(toUInt128(src_ip) + j * 262144) AS src_ip, "
        "toIPv6(toUInt128(dst_ip) + j * 262144) AS dst_ip) "
        f"FROM roce.flows ARRAY JOIN range(1, {replicas}) AS j"
    )
    rep_s = time.monotonic() - t0
    total = rows(s, "SELECT count() AS n, uniqExact(host) AS h FROM roce.flows")[0]
    report.append(
        f"replicated x{replicas} inside ClickHouse (INSERT ... SELECT) in {rep_s:.1f} s: "
        f"{total['n']:,} flow rows, {total['h']} observers"
    )
    log(report[-1])
    return report


def compare(s, report):
    total = rows(s, "SELECT count() AS n, uniqExact(host) AS h FROM roce.flows")[0]
    # The per-minute table, merged as a settled table is (one part per partition).
    s.query("OPTIMIZE TABLE roce.flow_minutes FINAL")
    minutes = flows_bytes(s, "flow_minutes")
    report.append(
        f"roce.flow_minutes (filled at insert, merged): {minutes['r']:,} rows, {minutes['b']:,} B "
        "on disk; the queries that read it read the same table under every key below"
    )
    log(report[-1])
    span = rows(
        s,
        "SELECT toString(min(ts)) AS lo, toString(max(ts) + INTERVAL 1 SECOND) AS hi, "
        "toString(max(ts) - INTERVAL 5 MINUTE) AS last5 FROM roce.flows",
    )[0]
    ranges = {
        "whole range": {"from": span["lo"], "to": span["hi"]},
        "last 5 min": {"from": span["last5"], "to": span["hi"]},
    }

    # 3. One table per candidate key, merged to one part per partition (as a settled table).
    qdir = os.path.join(DOCS, "queries")
    queries = {
        n: statements(open(os.path.join(qdir, n)).read())[0]
        for n in sorted(os.listdir(qdir))
        if n.endswith(".sql")
    }
    results = {}
    for name, order in CANDIDATES.items():
        table = "flows"
        t0 = time.monotonic()
        if order is not None:
            table = "flows_k" + str(len(results))
            s.query(f"DROP TABLE IF EXISTS roce.{table} SYNC")
            s.query(
                f"CREATE TABLE roce.{table} AS roce.flows ENGINE = MergeTree "
                f"PARTITION BY toDate(ts) ORDER BY {order}"
            )
            s.query(f"INSERT INTO roce.{table} SELECT * FROM roce.flows")
        # Merged once (merging a merged part again can write it larger).
        merged = rows(
            s,
            "SELECT count() = uniqExact(partition) AS m FROM system.parts "
            f"WHERE database = 'roce' AND table = '{table}' AND active",
        )[0]["m"]
        if not merged:
            s.query(f"OPTIMIZE TABLE roce.{table} FINAL")
        build_s = time.monotonic() - t0
        size = flows_bytes(s, table)
        res = {"key": order or SHIPPED, "build_s": build_s, "bytes": size["b"], "q": {}}
        log(f"{name}: {res['key']}: built in {build_s:.1f} s, {size['b']:,} B, {size['parts']} parts")
        for qn, sql in queries.items():
            sql_t = re.sub(r"\broce\.flows\b", f"roce.{table}", sql)
            for rn, params in ranges.items():
                got, secs = timed(s, sql_t, params)
                res["q"][(qn, rn)] = (secs, len(got))
                log(f"  {qn} [{rn}]: {secs:.2f} s, {len(got)} rows")
        results[name] = res
        if table != "flows":
            s.query(f"DROP TABLE roce.{table} SYNC")

    # The table.
    names = list(results)
    out = report + [""]
    out.append("| | " + " | ".join(f"`{results[n]['key']}`" for n in names) + " |")
    out.append("|---" * (len(names) + 1) + "|")
    out.append(
        "| flows on disk, B per flow-interval | "
        + " | ".join(
            f"{results[n]['bytes'] / total['n']:.1f} ({results[n]['bytes'] / 1e6:,.0f} MB)"
            for n in names
        )
        + " |"
    )
    for qn in queries:
        for rn in ranges:
            cells = []
            for n in names:
                secs, nrows = results[n]["q"][(qn, rn)]
                cells.append(f"{secs:.2f} s ({nrows} rows)")
            out.append(f"| `{qn}`, {rn} | " + " | ".join(cells) + " |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
