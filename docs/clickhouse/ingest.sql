-- Load one roce-observer log file into the tables of schema.sql. `{file}` stands for the file's
-- path: a rotated roce-observer-*.jsonl.gz (gzip is recognised by the name) or a plain .jsonl,
-- the live file included. The file is read once; each line goes to roce.lines, whose
-- materialized views route it to its kind's table.
--
--   for f in /var/log/roce-observer/roce-observer-*.jsonl.gz; do
--       sed "s|{file}|$f|g" docs/clickhouse/ingest.sql | clickhouse-client --multiquery
--   done
--
-- (clickhouse-client reads `file()` paths on the server, under its user_files_path; use
-- clickhouse-local for files on this host, or stream the lines: `zcat FILE |
-- clickhouse-client --query "INSERT INTO roce.lines FORMAT LineAsString"`.)
-- Load each rotated file once, when it appears. The live file is still being appended to: load
-- it once it is rotated, or follow it with a shipper (docs/operations.md, "Fleet").

INSERT INTO roce.lines SELECT line FROM file('{file}', 'LineAsString');
