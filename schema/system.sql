-- mcpsub's own tables. Applied by mcpsubd at every start (idempotent).
-- Application tables live beside these in the same database file; names
-- starting with "audit_log", "mcp_session", "mcpsub_" or "sqlite_" are
-- never exported as resources.

-- The change feed. One row per INSERT, UPDATE or DELETE on an exported
-- table, written by triggers in the same transaction as the change, so
-- writers that are not mcpsubd (the sqlite3 CLI, applications) are covered.
-- seq is monotonic (AUTOINCREMENT never reuses a value, even after pruning).
CREATE TABLE IF NOT EXISTS audit_log (
  seq          INTEGER PRIMARY KEY AUTOINCREMENT,
  tbl          TEXT    NOT NULL,
  key          TEXT    NOT NULL,   -- primary key after the change (before it, for DELETE)
  op           TEXT    NOT NULL CHECK (op IN ('INSERT', 'UPDATE', 'DELETE')),
  old_row      TEXT,               -- JSON object, NULL for INSERT
  new_row      TEXT,               -- JSON object, NULL for DELETE
  committed_at INTEGER NOT NULL,   -- Unix time in milliseconds
  principal    TEXT                -- who wrote it through mcpsubd ("key:NAME"); NULL for others
);
-- A record's version is the seq of its last change; a collection's is the
-- seq of the last change to any of its rows.
CREATE INDEX IF NOT EXISTS audit_log_by_key ON audit_log (tbl, key, seq);
CREATE INDEX IF NOT EXISTS audit_log_by_table ON audit_log (tbl, seq);

-- One row per MCP session: what must outlive the process serving it.
CREATE TABLE IF NOT EXISTS mcp_session (
  id                  TEXT    PRIMARY KEY,
  created_at          INTEGER NOT NULL,   -- Unix time in milliseconds
  last_seen           INTEGER NOT NULL,   -- Unix time in milliseconds
  protocol_version    TEXT    NOT NULL,
  client_info         TEXT,               -- JSON object from initialize
  client_capabilities TEXT,               -- JSON object from initialize
  log_level           TEXT,               -- from logging/setLevel
  subscriptions       TEXT    NOT NULL DEFAULT '[]', -- unused since mcpsub_subscription (kept empty)
  principal           TEXT    NOT NULL DEFAULT 'anonymous', -- who created it: "key:NAME", ...
  subscription_count  INTEGER NOT NULL DEFAULT 0 -- its mcpsub_subscription rows (triggers keep it)
) WITHOUT ROWID;

-- A session's subscriptions, one row each, so that a subscribe writes one
-- row whatever the session holds. debounce: its io.mcpsub/debounce as JSON,
-- or NULL. They go with their session (the trigger).
CREATE TABLE IF NOT EXISTS mcpsub_subscription (
  session  TEXT NOT NULL,
  uri      TEXT NOT NULL,
  debounce TEXT,
  PRIMARY KEY (session, uri)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS mcpsub_subscription_gone AFTER DELETE ON mcp_session BEGIN
  DELETE FROM mcpsub_subscription WHERE session = old.id;
END;

-- Writes one worker sent to another (the write home) and the answers it
-- made, by the sender's (origin, seq), until the sender has them: a sender
-- whose answer was lost runs the write again, and the second run finds the
-- first here instead of writing twice. Rows go as the sender's later
-- writes say their answers came (or after an hour, for a sender gone).
CREATE TABLE IF NOT EXISTS mcpsub_once (
  origin   TEXT    NOT NULL,
  seq      INTEGER NOT NULL,
  at       INTEGER NOT NULL,   -- Unix time in milliseconds
  out_key  TEXT,               -- the written row's key
  created  INTEGER NOT NULL,
  changed  INTEGER NOT NULL,   -- a bulk write's rows
  PRIMARY KEY (origin, seq)
) WITHOUT ROWID;

-- Small named values mcpsub keeps about itself, e.g. 'audit_pruned_through':
-- the highest audit seq retention has deleted (resumption from below it
-- cannot be exact).
CREATE TABLE IF NOT EXISTS mcpsub_state (
  name  TEXT PRIMARY KEY,
  value INTEGER
) WITHOUT ROWID;
