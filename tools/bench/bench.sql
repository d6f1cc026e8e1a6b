-- The benchmark's application schema (tools/bench/run passes it as
-- mcpsubd's --schema): one table whose rows carry their commit time.
-- k is "<letter><n>": f for fan-out and latency commits, g for the storm's
-- gap, r for the record read, w and s for write throughput.
CREATE TABLE Bench (
  k TEXT PRIMARY KEY,
  t INTEGER NOT NULL DEFAULT 0,   -- commit time, CLOCK_MONOTONIC ns of the writer
  v TEXT
);
