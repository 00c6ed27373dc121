#!/usr/bin/env python3
"""Load roce-observer log files into chDB (ClickHouse's engine, in process) with the shipped
docs/clickhouse/schema.sql and ingest.sql, run every docs/clickhouse/queries/*.sql, and print
one JSON object: rows per table, each query's rows and time, and per-point flow totals.

usage: chdb_load.py SESSION_DIR FROM TO FILE...   (FROM/TO: 'YYYY-MM-DD hh:mm:ss' UTC)

(The bench at fleet size, comparing ordering keys: chdb_scale.py.)
"""
import json
import os
import sys
import time

from chdb import session

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "clickhouse")


def statements(text):
    """The statements of a .sql file (split at ';' ending a line), comments left out."""
    out = []
    for chunk in text.split(";\n"):
        body = "\n".join(l for l in chunk.splitlines() if not l.strip().startswith("--")).strip()
        if body:
            out.append(body.rstrip(";"))
    return out


def rows(s, sql, params=None):
    text = s.query(sql, "JSONEachRow", params=params or {}).bytes().decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


TABLES = ["flows", "pfc", "mirrors", "alerts", "diagnosis", "summaries"]


def load(s, files):
    """Create the tables with schema.sql and load each file with ingest.sql; the seconds the
    files took."""
    for st in statements(open(os.path.join(DOCS, "schema.sql")).read()):
        s.query(st)
    ingest = open(os.path.join(DOCS, "ingest.sql")).read()
    t0 = time.monotonic()
    for f in files:
        for st in statements(ingest.replace("{file}", os.path.abspath(f))):
            s.query(st)
    return time.monotonic() - t0


def main():
    sess_dir, t_from, t_to, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    s = session.Session(sess_dir)
    # Counts as JSON numbers, not strings.
    s.query("SET output_format_json_quote_64bit_integers = 0")
    load_s = load(s, files)
    out = {"load_s": load_s, "files": len(files), "tables": {}, "queries": {}}
    for t in TABLES:
        out["tables"][t] = rows(s, f"SELECT count() AS n FROM roce.{t}")[0]["n"]
    out["flows_bytes_on_disk"] = rows(
        s,
        "SELECT sum(bytes_on_disk) AS b FROM system.parts WHERE database = 'roce' "
        "AND table = 'flows' AND active",
    )[0]["b"]
    qdir = os.path.join(DOCS, "queries")
    params = {"from": t_from, "to": t_to}
    for name in sorted(os.listdir(qdir)):
        if not name.endswith(".sql"):
            continue
        [sql] = statements(open(os.path.join(qdir, name)).read())
        t0 = time.monotonic()
        got = rows(s, sql, params)
        out["queries"][name] = {"rows": got, "s": time.monotonic() - t0}
    out["point_totals"] = rows(
        s,
        "SELECT host, toString(src_ip) AS src_ip, toString(dst_ip) AS dst_ip, dst_qp, iface, "
        "direction, sum(delta_packets) AS sum_packets, sum(delta_bytes) AS sum_bytes, "
        "sum(delta_psn_missing) AS sum_psn_missing, argMax(packets, ts) AS last_packets "
        "FROM roce.flows GROUP BY host, src_ip, dst_ip, dst_qp, iface, direction "
        "ORDER BY host, src_ip, dst_ip, dst_qp, iface, direction",
    )
    # The figures, for people (the bench); the JSON on stdout is for the test.
    flows = out["tables"]["flows"]
    print(
        f"{len(files)} files loaded in {load_s:.1f} s; rows: "
        + ", ".join(f"{t} {n:,}" for t, n in out["tables"].items())
        + f"; flows on disk {out['flows_bytes_on_disk']:,} B"
        + (f" = {out['flows_bytes_on_disk'] / flows:.1f} B per flow-interval" if flows else ""),
        file=sys.stderr,
    )
    for name, q in out["queries"].items():
        print(f"  {name}: {q['s']:.2f} s, {len(q['rows'])} rows", file=sys.stderr)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
