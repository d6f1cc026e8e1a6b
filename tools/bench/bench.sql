-- The benchmark's application schema (tools/bench/run passes it as
-- mcpsubd's --schema), the same file for SQLite and PostgreSQL: one table
-- whose rows carry their commit time. The name is quoted so that
-- PostgreSQL keeps its case (the URIs are /Bench/...), and t is a BIGINT
-- (64 bits in both; PostgreSQL's INTEGER has 32, SQLite gives it the same
-- integer affinity as INTEGER). External writers give their own keys.
-- k is "<letter><n>": f for fan-out and latency commits, g for the storm's
-- gap, r for the record read, w and s for write throughput.
CREATE TABLE "Bench" (
  k TEXT PRIMARY KEY,
  t BIGINT NOT NULL DEFAULT 0,   -- commit time, CLOCK_MONOTONIC ns of the writer
  v TEXT
);
