/*
 * The store: every SQL statement mcpsub runs, behind one interface with two
 * backends (store_backend.h): SQLite (store_sqlite.c; a file path, the
 * embedded default: WAL mode with a busy timeout) and PostgreSQL
 * (store_pg.c; a postgres:// or postgresql:// URI, libpq). A handle is one
 * connection (never shared across fork). The store owns the system schema
 * (audit_log, mcp_session, mcpsub_*), the export of application tables as
 * resources, the audit triggers on those tables, and every SQL statement.
 * All SQL is parameterised; table and column names only ever come from the
 * schema this module read, and are quoted as identifiers.
 *
 * Functions return 0 or a negative errno-style code:
 *   -ENOENT  no such row / session
 *   -EINVAL  bad input (unknown column, value of the wrong shape); *err says why
 *   -EEXIST  a constraint (UNIQUE, NOT NULL, CHECK...) refused the write; *err says which
 *   -EBUSY   the database stayed locked past the busy timeout
 *   -ENOSPC  the database or the disk is full (SQLITE_FULL)
 *   -EACCES  a guarded write outside its row scope (store_write_as)
 *   -EIO     any other database failure (logged)
 *   -ENOTCONN the database server is unreachable (PostgreSQL; retried later)
 * Where a function takes `char *err, size_t errlen`, err may be NULL.
 */
#ifndef MCPSUB_STORE_H
#define MCPSUB_STORE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/mem.h"
#include "common/session_id.h"

typedef struct store store_t;

typedef struct store_column {
  char *name;
  char *decl_type; /* as declared, may be "" */
  bool notnull;
  bool generated; /* GENERATED ALWAYS AS: read like any column, never written (-EINVAL) */
  bool numeric;   /* values compare as numbers with a filter value that reads as one */
  bool untyped;   /* no type (SQLite's BLOB affinity): a number there equals no text */
  bool binary;    /* text compares byte by byte (SQLite's BINARY): a prefix is a range of it */
  bool nocase;    /* SQLite's NOCASE (ASCII letters compare folded): so is the folded prefix */
} store_column;

typedef struct store_table {
  char *name;
  store_column *cols;
  int n_cols;
  int key_col;      /* index of the single-column primary key, or -1 when the key is the rowid */
  bool key_integer; /* key is an INTEGER PRIMARY KEY or the rowid: compared and bound as an integer
                     */
} store_table;

/* Opening and schema --------------------------------------------------- */

/*
 * Opens (creating if needed) the database at path, sets WAL and a busy
 * timeout, applies the system schema, applies the file at schema_path when
 * the database has no application table yet (schema_path NULL or "" = never),
 * reads the exported tables and installs their audit triggers.
 * On failure *out is NULL and err holds a message.
 */
int store_open(const char *path, const char *schema_path, store_t **out, char *err,
               size_t errlen) MCPSUB_NODISCARD;
/* Which backend serves target: "sqlite" or "postgres" (by its form; nothing is opened). */
const char *store_backend_name(const char *target);
/* Opens read-only, for the CLI on a stopped server: no schema change, no triggers. */
int store_open_readonly(const char *path, store_t **out, char *err, size_t errlen) MCPSUB_NODISCARD;
void store_close(store_t *s); /* NULL is a no-op */
/*
 * From now on store_refresh_schema only reads the schema (in a read
 * transaction, never waiting for a writer) and leaves the audit triggers
 * to another connection that does install them.
 */
void store_leave_triggers(store_t *s);
/* The schema_version of the schema s last read (it moves with every schema change). */
int64_t store_schema_generation(const store_t *s);
/*
 * How long a call waits for a lock another connection holds (ms; 0: not
 * at all, -EBUSY at once). The default is STORE_BUSY_TIMEOUT_MS.
 */
void store_set_busy_timeout(store_t *s, int ms);
/*
 * Process-wide, before any store is opened: do PostgreSQL connections
 * prepare the statements they run more than once (default true)?
 * store_pg.c says what that changes.
 */
void store_pg_set_prepare(bool on);
/* The statements s's connection holds prepared (PostgreSQL; 0 for SQLite, whose are its own). */
int store_prepared_statements(store_t *s);
/* Statements every PostgreSQL connection of this process has prepared, in all (a counter). */
uint64_t store_pg_prepared_total(void);
/* Replaces the waiting with fn (SQLite's busy handler contract: non-zero to try again). */
void store_set_busy_handler(store_t *s, int (*fn)(void *data, int count), void *data);

/*
 * How a backend that talks over the network (store_pg) waits for its
 * socket, set by a worker whose loop must keep running meanwhile
 * (worker/lane.h). wait(data, fd, events, timeout_ms) returns 1 when fd is
 * ready for events (POLLIN, POLLOUT), 0 when timeout_ms passed, -1 when it
 * cannot wait for this caller, which then blocks in poll(2). may_use(data)
 * is false while another caller is in the middle of a call on the handle
 * (waiting, with its statements under way): the call then fails with
 * -EBUSY instead of disturbing it. Without a waiter, calls block.
 */
typedef struct store_waiter {
  int (*wait)(void *data, int fd, short events, int timeout_ms);
  bool (*may_use)(void *data);
  void *data;
} store_waiter;
void store_set_waiter(store_t *s, const store_waiter *waiter);

/*
 * Cheap when nothing changed. When the schema moved, re-reads the exported
 * tables and (unless read-only) reinstalls the audit triggers.
 * *tables_changed (may be NULL) is set when the set of exported tables or
 * their columns changed. Pointers to store_table from before a change are
 * invalid after it. SQLite sees every change (one PRAGMA schema_version);
 * PostgreSQL has no such counter, and looks at the catalog (milliseconds)
 * at most every 500 ms unless told the schema may be stale.
 */
int store_refresh_schema(store_t *s, bool *tables_changed) MCPSUB_NODISCARD;
/*
 * The next store_refresh_schema looks at the catalog whatever its pace (a
 * name was not found: the table may be new). Returns whether that changes
 * anything: false on SQLite, whose refreshes always look.
 */
bool store_schema_stale(store_t *s);
/* Exported tables, sorted by name. */
const store_table *store_tables(const store_t *s, int *n);
/* Exact name match; NULL when not exported. */
const store_table *store_find_table(const store_t *s, const char *name);
/* Index of the column named name in t, or -1. */
int store_column_index(const store_table *t, const char *name);

/* Reads ------------------------------------------------------------------ */

/* How a filter compares a column with its value (uri.h's operators, in that order). */
typedef enum store_op {
  STORE_EQ = 0, /* = value (IS NULL for null) */
  STORE_NE,     /* <> value: a NULL column never matches */
  STORE_GT,
  STORE_GE,
  STORE_LT,
  STORE_LE,
  STORE_SW, /* a text value starting with value */
  STORE_CT, /* a text value containing value */
  STORE_IN, /* equal to one of value's items (an array) */
} store_op;

typedef struct store_filter {
  int col;            /* column index in the table */
  const cJSON *value; /* string, number, bool or null (IS NULL); STORE_IN: an array of them */
  store_op op;
} store_filter;

/*
 * Does column col compare as a number (SQLite: INTEGER, REAL or NUMERIC
 * affinity by its rules on the declared type; PostgreSQL: a numeric type)?
 * Its values then compare as numbers with a filter value that reads as one.
 */
bool store_column_numeric(const store_table *t, int col);

/*
 * One record by key. *row gets a new JSON object of every column (the caller
 * frees it); *version the record's version (seq of its last audited change,
 * 0 when none is known). -ENOENT when there is no such row.
 *
 * Rows (here and in store_query) map INTEGER to a number (to a decimal
 * string beyond +-2^53), REAL to a number, TEXT to a string, BLOB to an
 * uppercase hex string, NULL to null. A rowid-keyed table's rows also carry
 * their key as member "rowid" (such a table never has a column of that
 * name: it is not exported). Keys of integer-keyed tables are canonical
 * base-10 text ("7", not "07" or "+7"); any other spelling is not found.
 */
int store_get_record(store_t *s, const store_table *t, const char *key, cJSON **row,
                     int64_t *version) MCPSUB_NODISCARD;
/*
 * store_get_record with the row appended to out as JSON text, byte for
 * byte what printing store_get_record's row writes (jsonrpc_print), for a
 * reader that only prints it: SQLite prints the columns as it reads them,
 * without the tree. Nothing is appended on failure.
 */
int store_get_record_text(store_t *s, const store_table *t, const char *key, buf_t *out,
                          int64_t *version) MCPSUB_NODISCARD;

/*
 * Rows matching every filter (equality), in key order, after after_key
 * (exclusive; NULL = from the start), at most limit. *rows gets a new JSON
 * array; *next_key a new string (caller frees) when more rows follow, else
 * NULL.
 */
int store_query(store_t *s, const store_table *t, const store_filter *filters, size_t n_filters,
                int limit, const char *after_key, cJSON **rows, char **next_key) MCPSUB_NODISCARD;

/*
 * The key of a row as returned by store_get_record/store_query, as text
 * (the same text the audit log records). New string; NULL when row lacks
 * its key member.
 */
char *store_row_key(const store_table *t, const cJSON *row);

/* How many rows of t match every filter (store_query's filters). -EINVAL for a bad value. */
int store_count_where(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                      int64_t *count) MCPSUB_NODISCARD;

/* Version of a collection: seq of the last audited change to any row of t (0 if none). */
int store_table_version(store_t *s, const store_table *t, int64_t *version) MCPSUB_NODISCARD;
/* Row count of t. */
int store_table_count(store_t *s, const store_table *t, int64_t *count) MCPSUB_NODISCARD;

/* Writes (each its own transaction; the audit triggers record them) ------ */

typedef enum store_write_mode {
  STORE_WRITE_REPLACE, /* PUT: insert, or replace every column; columns not given take their default
                        */
  STORE_WRITE_PATCH,   /* PATCH: update the given columns of an existing row; -ENOENT if none */
  STORE_WRITE_INSERT,  /* POST: insert a new row; key from obj or generated; -EEXIST if taken */
} store_write_mode;

/*
 * Writes obj (a JSON object of column -> value) to t. key is the record key
 * (required for REPLACE and PATCH; NULL for INSERT). A key column inside obj
 * must equal key when both are given (-EINVAL otherwise). Object and array
 * values are stored as JSON text; booleans as 0/1. *out_key (may be NULL)
 * gets the written row's key (new string); *created (may be NULL) whether a
 * row was inserted.
 */
int store_write(store_t *s, const store_table *t, const char *key, const cJSON *obj,
                store_write_mode mode, char **out_key, bool *created, char *err,
                size_t errlen) MCPSUB_NODISCARD;
/* Deletes the record; -ENOENT if there was none. */
int store_delete(store_t *s, const store_table *t, const char *key) MCPSUB_NODISCARD;

/* Who writes, and within what (see store_write_as). */
typedef struct store_guard {
  const char *principal;    /* recorded on the write's audit rows; NULL: none */
  const char *scope_column; /* a row scope: the column...; NULL: every row */
  const char *scope_value;  /* ...must equal this (as text) before and after the write */
} store_guard;

/*
 * store_write with a guard, checked in the write's own transaction: -EACCES
 * (err says why) when the row it replaces or changes, or the row it leaves,
 * is outside the guard's scope, and nothing is written; the audit rows of
 * the write carry guard->principal. guard may be NULL (= store_write).
 * With row not NULL, *row and *version get the record as this write left
 * it (as store_get_record would read it), read in the write's own
 * transaction: no read of its own afterwards, and no later write's row.
 * SQLite does; on PostgreSQL *row stays NULL (one more round trip inside
 * the transaction), and the caller reads the record after the commit.
 */
int store_write_as(store_t *s, const store_table *t, const char *key, const cJSON *obj,
                   store_write_mode mode, const store_guard *guard, char **out_key, bool *created,
                   cJSON **row, int64_t *version, char *err, size_t errlen) MCPSUB_NODISCARD;
/* store_delete with a guard, the same way. err may be NULL. */
int store_delete_as(store_t *s, const store_table *t, const char *key, const store_guard *guard,
                    char *err, size_t errlen) MCPSUB_NODISCARD;

/*
 * One transaction over every row of t matching the filters: sets the
 * columns of set (a JSON object; keys may not change) or, set NULL,
 * deletes the rows. The guard's principal is recorded on the audit rows;
 * its row scope must be among the filters (the caller adds it), and set
 * may not move a row out of it (-EACCES). *changed gets the number of
 * rows. -EINVAL (err says why) for a bad set or filter value.
 */
int store_bulk_as(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                  const cJSON *set, const store_guard *guard, int64_t *changed, char *err,
                  size_t errlen) MCPSUB_NODISCARD;

/* Audit log ---------------------------------------------------------------- */

/* The highest seq ever written (pruning never lowers it); 0 for an empty log. */
int store_audit_max_seq(store_t *s, int64_t *seq) MCPSUB_NODISCARD;

/*
 * One audit_log row. An UPDATE that changes a row's key is logged as a
 * DELETE of the old key followed by an INSERT of the new one, so key is
 * the only key a row names. The strings and JSON are valid only during the
 * callback.
 */
typedef struct store_audit_row {
  int64_t seq;
  const char *table;
  const char *key;
  const char *op;        /* "INSERT", "UPDATE" or "DELETE" */
  const char *old_json;  /* row image before the change; NULL for INSERT */
  const char *new_json;  /* row image after the change; NULL for DELETE */
  int64_t committed_at;  /* Unix ms */
  const char *principal; /* who wrote it through mcpsubd; NULL for other writers */
  /* Private: the images parsed by store_audit_row_images, freed after the callback. */
  cJSON *old_parsed, *new_parsed;
  bool parsed;
  /*
   * Private: PostgreSQL's store, whose images spell a numeric column's
   * non-finite value as a string (store_audit_row_images); else NULL.
   */
  const store_t *nonfinite_strings;
} store_audit_row;

/*
 * The row's images as JSON (each NULL when absent or not JSON), parsed on
 * the first call during the callback: a consumer that does not need them
 * (no filtered subscription on the table) pays nothing for them. In a
 * table's image an integer beyond +-2^53, which a double does not hold, is
 * a raw item (cJSON_IsRaw) of its digits, and a numeric column's infinity
 * or NaN (PostgreSQL's, which its JSON writes as the strings "Infinity",
 * "-Infinity" and "NaN") a number holding it.
 */
void store_audit_row_images(const store_audit_row *row, const cJSON **old_row,
                            const cJSON **new_row);

/*
 * Calls fn for each audit row with seq > after_seq, in seq order, at most
 * limit (1..10000) of them; fn returning non-zero stops early. *n (may be
 * NULL) gets the number of rows handed to fn. Commits are serialised by
 * SQLite, so a row never becomes visible after a row with a greater seq.
 */
int store_audit_read(store_t *s, int64_t after_seq, int limit,
                     int (*fn)(const store_audit_row *row, void *data), void *data,
                     int *n) MCPSUB_NODISCARD;

/*
 * The same for one table's rows (one record's, when key is not NULL) with
 * seq in (after_seq, upto_seq], for positions every reader has seen (a
 * resumption's gap): through the indexes, it costs the rows it yields, not
 * the log's.
 */
int store_audit_read_of(store_t *s, const char *table, const char *key, int64_t after_seq,
                        int64_t upto_seq, int limit,
                        int (*fn)(const store_audit_row *row, void *data), void *data,
                        int *n) MCPSUB_NODISCARD;

/*
 * The operator's view (mcpsubctl audit tail): the newest limit rows
 * (1..10000), oldest first; only table's rows unless table is NULL.
 */
int store_audit_list(store_t *s, const char *table, int limit,
                     int (*fn)(const store_audit_row *row, void *data),
                     void *data) MCPSUB_NODISCARD;

/*
 * Moves whenever another connection may have committed changes (SQLite:
 * PRAGMA data_version; PostgreSQL: a NOTIFY arrived on the wake-up socket,
 * which this call drains).
 */
int store_data_version(store_t *s, int64_t *version) MCPSUB_NODISCARD;
/*
 * A socket that becomes readable when another connection commits changes
 * (PostgreSQL's LISTEN connection), to poll on the loop; -1 when the
 * backend has none (SQLite: watch the file instead).
 */
int store_wake_fd(store_t *s);

/* Rows of mcp_session and of audit_log, for the operator. */
int store_counts(store_t *s, int64_t *sessions, int64_t *audit_rows) MCPSUB_NODISCARD;

/*
 * Retention: deletes audit rows beyond the newest retain_rows, and those
 * older than retain_ms up to the first that is not (0 disables either
 * bound; the log is read in seq order: committed_at has no index), but
 * never the newest change of a row that still exists (it carries the row's
 * version) nor the newest change of an exported table (the collection's
 * version must not move back).
 *
 * One call examines at most span rows (0: all) after the seq after, in one
 * transaction, so that a caller can go through a long log in steps and let
 * other writers in between: after moves to the last row examined, and more
 * says that span rows were examined (call again, with the bound it found:
 * finding it by age reads the old rows). A row still protected when
 * examined is not looked at again by a caller that goes on from after.
 */
typedef struct store_prune {
  int64_t retain_rows, retain_ms, now_ms; /* in */
  int64_t span;                           /* in: rows examined at most; 0: all */
  int64_t after;                          /* in: from the row after this seq; out: the last */
  int64_t bound;   /* in: the highest seq to delete, 0: find it (the bounds above); out: it */
  int64_t deleted; /* out */
  bool more;       /* out: span rows examined, more may be due */
} store_prune;

int store_audit_prune(store_t *s, store_prune *p) MCPSUB_NODISCARD;

/*
 * The highest seq retention has ever deleted (0 if none): changes at or
 * below it may be missing from the log, so a resumption from there cannot
 * be exact.
 */
int store_audit_pruned_through(store_t *s, int64_t *seq) MCPSUB_NODISCARD;

/* Sessions (mcp_session) ------------------------------------------------------ */

typedef struct store_session {
  char id[SESSION_ID_LEN + 1];
  int64_t created_at; /* Unix ms */
  int64_t last_seen;  /* Unix ms */
  char protocol_version[16];
  char *client_info;         /* JSON text or NULL */
  char *client_capabilities; /* JSON text or NULL */
  char *log_level;           /* or NULL */
  char *subscriptions;       /* JSON array text, never NULL after a load */
  char *principal; /* who created it ("anonymous", "key:NAME", ...); never NULL after a load */
} store_session;

void store_session_finish(store_session *ss); /* frees the strings */
int store_session_insert(store_t *s, const store_session *ss) MCPSUB_NODISCARD;
/* Fills *ss (release with store_session_finish). -ENOENT if unknown. */
int store_session_load(store_t *s, const char *id, store_session *ss) MCPSUB_NODISCARD;
int store_session_touch(store_t *s, const char *id, int64_t last_seen) MCPSUB_NODISCARD;
int store_session_set_log_level(store_t *s, const char *id, const char *level) MCPSUB_NODISCARD;
/*
 * The session's subscriptions (rows of mcpsub_subscription; a session's
 * row lists them as before: URIs, or {uri, debounce} objects). set replaces
 * them all with the JSON list json_array; put adds or replaces one (debounce
 * its JSON, or NULL); delete removes one. -ENOENT when the session has no
 * row.
 *
 * put and delete also append, in the same transaction, an audit row of
 * table STORE_SUBSCRIPTION_LOG: key the session id, op INSERT (new_row
 * {"uri", "key": topic_key, "debounce"}) or DELETE (old_row {"uri"}),
 * principal the connection's origin (store_set_origin). Every host's
 * tailer reads it in commit order, so the one holding the session's stream
 * subscribes it from exactly there, wherever the subscribe was served.
 */
#define STORE_SUBSCRIPTION_LOG "mcpsub_subscription"
int store_session_set_subscriptions(store_t *s, const char *id,
                                    const char *json_array) MCPSUB_NODISCARD;
int store_session_sub_put(store_t *s, const char *id, const char *uri, const char *debounce,
                          const char *topic_key) MCPSUB_NODISCARD;
int store_session_sub_delete(store_t *s, const char *id, const char *uri) MCPSUB_NODISCARD;
/*
 * A signal to the worker, on whichever host, that holds a call of a
 * session: one audit row of table STORE_SIGNAL_LOG, key the session id ("":
 * a call outside any session), op INSERT, new_row image (JSON text: what
 * the signal says), principal the origin; committed on its own (or with the
 * batch). Every host's tailer reads it. Wakes the other hosts' tailers.
 */
#define STORE_SIGNAL_LOG "mcpsub_signal"
int store_signal(store_t *s, const char *session, const char *image) MCPSUB_NODISCARD;
/* -ENOENT if unknown. */
int store_session_delete(store_t *s, const char *id) MCPSUB_NODISCARD;
/* Deletes rows with last_seen < before_ms. *deleted may be NULL. */
int store_session_prune(store_t *s, int64_t before_ms, int64_t *deleted) MCPSUB_NODISCARD;
/*
 * store_session_prune for one worker of n_slots: only rows of sessions its
 * slot minted (the id's first two hex digits), and for slot 0 also those of
 * slots >= n_slots, so that a session live on its worker never loses its
 * row to another worker's sweep.
 */
int store_session_prune_slot(store_t *s, int64_t before_ms, unsigned slot, unsigned n_slots,
                             int64_t *deleted) MCPSUB_NODISCARD;
/*
 * What principal holds: its sessions seen since since_ms (the live ones)
 * and their subscriptions, summed.
 */
int store_principal_usage(store_t *s, const char *principal, int64_t since_ms, int64_t *sessions,
                          int64_t *subscriptions) MCPSUB_NODISCARD;
/*
 * Calls fn for every row (limit > 0: for the first limit rows), newest
 * last_seen first, then by id; fn returning non-zero stops.
 */
int store_session_foreach(store_t *s, long limit, int (*fn)(const store_session *ss, void *data),
                          void *data) MCPSUB_NODISCARD;

/* Group commit ---------------------------------------------------------------------- */

/*
 * Several writes in one transaction: between store_batch_begin and
 * store_batch_end, each store call that writes runs in a savepoint of the
 * batch's transaction, so that a call that fails leaves nothing behind and
 * the others stand; nothing is durable (nor visible to other connections)
 * before store_batch_end commits. -ENOTSUP when the backend does not offer
 * it, -EBUSY when the write lock could not be had.
 */
int store_batch_begin(store_t *s) MCPSUB_NODISCARD;
/*
 * Several reads in one read transaction (one snapshot, and on SQLite one
 * WAL read lock for all of them), ended by store_batch_end: a store call
 * that would begin a transaction of its own takes a savepoint instead.
 * -ENOTSUP when the backend does not offer it.
 */
int store_batch_begin_read(store_t *s) MCPSUB_NODISCARD;
/*
 * Did the database abandon the batch's whole transaction (an I/O error, a
 * full disk)? What the calls since store_batch_begin wrote is then gone.
 */
bool store_batch_broken(store_t *s);
/*
 * May the open read batch be kept for reads that arrive now? True only
 * when nothing has been committed to the database, by any connection or
 * process, since the batch began (a read in it sees what a read begun now
 * would), and keeping it holds up nothing: on SQLite, the WAL is under the
 * size at which a checkpoint is due (a reader's mark keeps the WAL from
 * starting over). False when the backend cannot tell.
 */
bool store_batch_current(store_t *s);
/* Commits (commit true) or rolls back the batch. The commit's result: 0 or -errno. */
int store_batch_end(store_t *s, bool commit);

/*
 * Exactly-once writes. A write one worker sends another (the write home,
 * forward.h) may be run a second time by its sender when the answer was
 * lost (the other worker died): its once id, the sender's (origin, seq),
 * lets the second run find the first. Both calls belong inside a batch
 * (-EBUSY outside one: its lock was not had), on backends that offer them
 * (-ENOTSUP). store_once_begin opens a savepoint and looks the id up: 1
 * when a write with it committed before, *prior then its result (out_key
 * a new string or NULL) and the savepoint released; 0 when not, the write
 * to be made in the savepoint. It also forgets the origin's ids below
 * o->below (their answers arrived). store_once_end records the write's
 * result and releases the savepoint (ok), or rolls the savepoint back.
 */
typedef struct store_once {
  const char *origin; /* the sending worker's origin (worker.h) */
  int64_t seq;        /* its write's number */
  int64_t below;      /* every write of the origin before this one is answered */
} store_once;
typedef struct store_once_result {
  char *out_key;
  bool created;
  int64_t changed;
} store_once_result;
int store_once_begin(store_t *s, const store_once *o, store_once_result *prior) MCPSUB_NODISCARD;
int store_once_end(store_t *s, const store_once *o, const store_once_result *res,
                   bool ok) MCPSUB_NODISCARD;

/*
 * Checkpoints apart from commits: after store_defer_checkpoints, a commit
 * on s no longer copies the write-ahead log back into the database itself
 * (SQLite's auto-checkpoint, an fsync); store_checkpoint_due says when the
 * log has grown to the size at which it would have, and store_checkpoint
 * does it (passive: it waits for no reader or writer). So the commits of
 * a connection can be made where a long I/O must not happen, and its
 * checkpoints where it may. -ENOTSUP for a backend without such a log
 * (PostgreSQL checkpoints on its own).
 */
int store_defer_checkpoints(store_t *s) MCPSUB_NODISCARD;
bool store_checkpoint_due(store_t *s);
int store_checkpoint(store_t *s) MCPSUB_NODISCARD;

/* Who writes through s (at most 63 bytes; "" by default), as the subscription log records it. */
void store_set_origin(store_t *s, const char *origin);
/*
 * JSON text of a subscription log row's image: a put's new_row (uri, its
 * topic key, its debounce JSON or NULL), or with put false a delete's
 * old_row (the uri alone). New string (cJSON_free).
 */
char *store_subscription_image(bool put, const char *uri, const char *topic_key,
                               const char *debounce);

/* Unix time in milliseconds (CLOCK_REALTIME). */
int64_t store_now_ms(void);

#endif
