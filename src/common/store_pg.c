/*
 * The PostgreSQL backend of the store (store_backend.h), for a target that
 * is a libpq URI (postgres://... or postgresql://...). It serves the same
 * contract as the SQLite backend for several mcpsubd hosts sharing one
 * database: exported tables are the tables of the connection's current
 * schema that have a single-column primary key; one PL/pgSQL trigger
 * function (schema/system_pg.sql) records every change, by anyone, in
 * audit_log and sends NOTIFY mcpsub_audit; a second connection, opened by
 * store_wake_fd, LISTENs for it so that the loop can poll its socket.
 *
 * What it must never do: splice a value into SQL text (values are always
 * bound as $n text parameters; only table and column names read from the
 * catalog are spliced, always double-quoted), run DDL when nothing changed
 * (a CREATE TRIGGER takes a lock that stops the table's writers), or skip
 * or repeat an audit row.
 *
 * Commit order. In SQLite commits are serialised, so rows become visible
 * in seq order. In PostgreSQL a transaction can take seq n, a second one
 * seq n+1 and commit first: a reader that saw n+1 and moved its cursor past
 * it with `WHERE seq > cursor` would never see n. So store_audit_read reads,
 * in one statement, the visible rows after the cursor together with that
 * statement's snapshot (pg_current_snapshot()), and hands them out only
 * while seq is consecutive. At a missing seq (a gap) it asks whether the
 * gap can still fill. Every audit row is written after its transaction
 * changed a row (by the trigger, or after the subscription row), so its
 * writer had its transaction id before it took its seq; and a seq below a
 * visible row was taken before that row. So once the reader holds a
 * transaction id A taken after it saw the visible row (its own,
 * pg_current_xact_id(), once per gap episode), every writer that can own
 * the gap has an id below A, and once a snapshot's xmin reaches A they have
 * all ended: a gap still missing then is permanent (a rollback, a sequence
 * value lost to a crash) and is skipped. Until then the read stops before
 * the gap. (The snapshot's own xmax cannot serve as A: it is one past the
 * newest *ended* transaction, and a running one may hold a greater id.)
 * Under constant load a gap settles as soon as the transactions that were
 * running when it was seen have ended. The handle keeps `settled`: every
 * seq at or below it is visible or gone for good; store_audit_max_seq
 * returns that horizon, not max(seq), because readers start from it.
 *
 * Rows are read as to_jsonb(row), the same form as the audit images, and
 * parsed by cJSON; a bigint or numeric beyond +-2^53 is read as a decimal
 * string (as the SQLite backend does), while audit images keep it as a JSON
 * number (a double to its readers, as with SQLite). Filters compare as the
 * C evaluator does (sub_index.c): numeric columns by value with values
 * that read as numbers, other columns as text by bytes (COLLATE "C").
 *
 * Blocking libpq calls: the store is called on a writer thread and, for
 * reads, on the loop; only the LISTEN connection is non-blocking.
 *
 * Prepared statements. A statement text the main connection runs a second
 * time is prepared (PG_STMTS at most a connection, the least recently used
 * deallocated to make room) and executed by name from then on: the server
 * parses and plans it once instead of at every call (a record read cost
 * the cluster about 2.5 times the CPU unprepared). A text made for one
 * call (a query's filters) runs unnamed, as every statement did before.
 * Preparing changes no outcome: a PREPARE that fails reports the error the
 * statement itself would have (parsing and analysis are the same), and
 * prepared statements outlive a rollback. They are forgotten with their
 * connection; deallocated when the schema changes; and when the server
 * has lost one (26000: a pooler handed over another session, DISCARD) or
 * its result type changed (0A000, after an ALTER TABLE), all of them are
 * deallocated, and a statement outside a transaction runs again unnamed,
 * so that its caller never sees it. store_pg_set_prepare(false) (mcpsubd
 * --db-no-prepare) runs everything unnamed: for a pooler in transaction
 * mode that does not keep prepared statements (PgBouncer before 1.21).
 *
 * Outages. A connection that broke (the server restarted, the network
 * went away) is made again by pg_redial: the first attempt at once, then
 * after PG_RETRY_MIN_MS doubling up to PG_RETRY_MAX_MS; until then every
 * call fails at once with -ENOTCONN, without touching the network. An
 * attempt is non-blocking (PQconnectStartParams): a call drives it for at
 * most PG_CONNECT_STEP_MS and leaves it to a later call, PG_CONNECT_GAP_MS
 * on, so a loop calling here is never held longer by a server that does
 * not answer; an attempt not done within PG_CONNECT_TIMEOUT_MS is dropped.
 * Once one handle of the process has reconnected, the others try at once.
 * Every call first looks (one zero-timeout poll) whether its idle
 * connection was ended by the server meanwhile, so that the first call
 * after a restart reconnects instead of failing. A query on a connection
 * whose peer vanished without a word is bounded only by TCP keepalives
 * and tcp_user_timeout (pg_conn_keys; the target's URI may override them);
 * a server that is alive but does not answer holds it. The LISTEN
 * connection is made again the same way (its own backoff, once the main
 * connection is back), LISTENs again, and moves data_version: the caller
 * reads what it missed meanwhile. Nothing here retries a statement: a call
 * that failed says so, and its caller decides.
 */
#include "common/store_backend.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/uri.h"

/* system_pg.sql's text, generated at build time by tools/dev/embed.py. */
extern const char store_system_pg_sql[];

/* pg_advisory_xact_lock key serialising schema work of starting stores ("mcpsubpg"). */
#define PG_SCHEMA_LOCK "7882267414021435495"
/* Every exported table's audit trigger (names are per table in PostgreSQL). */
#define PG_TRIGGER_NAME "mcpsub_audit_row"
#define PG_CHANNEL      "mcpsub_audit"
/* The row alias in generated SQL (a column of that name would be shadowed). */
#define PG_ROW "mcpsub_r"
/*
 * How often refresh_schema looks at the catalog: PostgreSQL has no cheap
 * schema version (SQLite's PRAGMA schema_version), and the fingerprint query
 * costs milliseconds, which callers that refresh before each request or
 * write would pay every time. Callers that miss a name say so
 * (store_schema_stale) and the next refresh looks at once; other changes
 * (a column, a dropped table) are seen within this.
 */
#define PG_SCHEMA_CHECK_MS 500
/*
 * The longest a statement may go unanswered before its connection is given
 * up: the workers' loops call the store synchronously, so this bounds how
 * long a server that stopped answering can hold one (as the TCP settings
 * bound a silent path). Longer than any statement mcpsub runs should take.
 */
#define PG_STATEMENT_DEADLINE_MS 10000
/* Prepared statements a connection keeps, and statement texts remembered as run once. */
#define PG_STMTS 128
#define PG_SEEN  128
/* How long store_audit_max_seq waits for an unknown horizon to settle. */
#define PG_HORIZON_WAIT_MS 500
/* How many gaps one store_audit_read looks at twice (each may cost one transaction id). */
#define PG_GAP_RETRIES 4
/* Seqs store_audit_max_seq scans at most to extend a known horizon. */
#define PG_HORIZON_SCAN 10000
/* Reconnection backoff (pg_redial): the first attempt at once, then these, doubling. */
#define PG_RETRY_MIN_MS 100
#define PG_RETRY_MAX_MS 5000
/*
 * How long one call drives a connection attempt (enough for a local or LAN
 * server to answer every step of it), and how long after that the next
 * call may go on with it: a server that does not answer holds a loop for
 * at most PG_CONNECT_STEP_MS at a time, a fifth of the time at most.
 */
#define PG_CONNECT_STEP_MS 50
#define PG_CONNECT_GAP_MS  200
/* An attempt still not connected after this is given up (and retried after the backoff). */
#define PG_CONNECT_TIMEOUT_MS 5000

/* The namespace of current_schema(), as SQL. */
#define PG_SQL_SCHEMA "(SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
/* Tables that are never application tables (see schema/system_pg.sql). */
#define PG_SQL_NOT_SYSTEM                                                                          \
  "c.relname NOT LIKE 'audit\\_log%' AND c.relname NOT LIKE 'mcp\\_session%' "                     \
  "AND c.relname NOT LIKE 'mcpsub\\_%'"

/* How a column's values compare in filters (see pg_sql_filter). */
typedef enum pg_kind {
  PG_KIND_TEXT,    /* text, varchar, char, name: by bytes */
  PG_KIND_NUMERIC, /* smallint .. double precision: by value */
  PG_KIND_BOOL,    /* boolean: 1/0, as SQLite stores it */
  PG_KIND_OTHER,   /* anything else: its JSON text (to_jsonb(col) #>> '{}') by bytes */
} pg_kind;

/* What this backend knows of a column beyond store_column. */
typedef struct pg_column_info {
  pg_kind kind;
  bool big;             /* bigint or numeric: may exceed 2^53, read as a string then */
  bool decimal;         /* numeric: may hold more digits than a double, read as a string then */
  bool identity_always; /* GENERATED ALWAYS AS IDENTITY: never SET on replace */
  bool defaulted;       /* has a default (DEFAULT, serial, identity) */
  /*
   * Text whose collation orders by bytes already ("C", "POSIX", or a default
   * that is one of them): compared and sorted as it is, without COLLATE
   * "C", so that an index on it serves a page's order and its cursor.
   */
  bool bytes;
} pg_column_info;

/* Parallel to store.tables. */
typedef struct pg_table_info {
  char *key_cast;   /* the key column's type without modifier, to cast a key parameter to */
  unsigned key_oid; /* the key's (base) type */
  pg_column_info *cols;
} pg_table_info;

/*
 * A connection being made again after it broke (see "Outages" at the top):
 * one attempt at a time, non-blocking, with a capped exponential backoff
 * between failed attempts.
 */
typedef struct pg_redial {
  const char *what;               /* "connection" or "LISTEN connection", for the log */
  PGconn *attempt;                /* being made, or NULL */
  PostgresPollingStatusType wait; /* what the attempt waits for (PQconnectPoll's last answer) */
  int64_t give_up_ms;             /* the attempt is dropped at this time (monotonic ms) */
  int64_t next_ms;                /* no step before this time */
  int delay_ms;                   /* the backoff after the next failure: 0, then doubling */
  unsigned failures;              /* attempts failed since the connection was lost */
  uint64_t back_seen;             /* pg_redials_made when the last attempt started */
  store_t *owner;                 /* whose wait hook the attempt waits with */
} pg_redial;

/*
 * Connections made again by any handle of this process (the loop's, the
 * writer thread's, a LISTEN one): the server is back, so a handle waiting
 * out its backoff tries at once instead of failing for seconds more.
 */
static atomic_uint_fast64_t pg_redials_made;

/* A statement prepared on a connection, named mcpsub_<id>. */
typedef struct pg_stmt {
  uint64_t hash; /* of sql */
  char *sql;
  uint64_t used; /* the connection's clock at its last use */
  unsigned id;
} pg_stmt;

/* Does a connection prepare the statements it runs more than once (store_pg_set_prepare)? */
static bool pg_prepare = true;
/* Statements this process's connections prepared (store_pg_prepared_total). */
static atomic_uint_fast64_t pg_prepared_total;

typedef struct pg_store {
  struct store base;
  PGconn *conn; /* never NULL; may be broken while lost */
  /* The main connection's prepared statements (see the top of the file). */
  pg_stmt stmts[PG_STMTS];
  int n_stmts;
  uint64_t seen[PG_SEEN]; /* hashes of texts run unnamed once (a ring) */
  unsigned seen_at;
  uint64_t stmt_clock;
  unsigned stmt_ids;  /* the last id given: a name is never used twice on a connection */
  bool stmts_discard; /* deallocate them all before the next statement */
  char *target;
  bool lost;  /* the connection broke: calls fail (-ENOTCONN) until redial makes a new one */
  bool batch; /* a group commit's transaction is open (store_batch_begin) */
  int depth;  /* savepoints open inside it (one per call) */
  pg_redial redial;
  int lock_timeout_ms;
  pg_table_info *info; /* parallel to base.tables */
  char fingerprint[40];
  int64_t fingerprint_ms; /* when it was last computed (monotonic ms) */
  char **warned;          /* tables already reported as not exported */
  int n_warned;

  /* Wake-ups: the LISTEN connection (store_wake_fd) and data_version's counter. */
  PGconn *listen;
  pg_redial listen_redial;
  int listen_fd;       /* our own dup of its socket: the number store_wake_fd hands out */
  int retired_fd;      /* the previous one, closed once wake_fd handed out the new */
  bool listen_wanted;  /* store_wake_fd was called */
  bool new_fd_pending; /* reconnected: wake_fd has not handed out the new socket yet */
  int64_t wake_count;

  /* Commit order (see the top of the file). */
  int64_t settled;      /* every seq <= settled is visible or gone for good */
  bool settled_known;   /* settled was established (not just 0 or the pruned seq) */
  bool pending;         /* a gap seen, waiting for the transactions of that time */
  int64_t pending_upto; /* every seq <= pending_upto was taken by a transaction... */
  uint64_t pending_xid; /* ...older than this one */
} pg_store;

static pg_store *pg_of(store_t *s) {
  return (pg_store *)s;
}

static const pg_table_info *pg_info(pg_store *p, const store_table *t) {
  return &p->info[t - p->base.tables];
}

/* SQL text ------------------------------------------------------------------------- */

typedef struct pg_str {
  char *data;
  size_t len, cap;
} pg_str;

static void pg_str_add(pg_str *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pg_str_add(pg_str *q, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = q->cap - q->len;
    int n = vsnprintf(q->data ? q->data + q->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    if ((size_t)n < room) {
      q->len += (size_t)n;
      return;
    }
    q->cap = q->cap * 2 + (size_t)n + 64;
    q->data = mem_realloc(q->data, q->cap);
  }
}

/* Appends name as a double-quoted identifier (embedded quotes doubled). */
static void pg_str_ident(pg_str *q, const char *name) {
  pg_str_add(q, "\"");
  for (const char *c = name; *c; c++) pg_str_add(q, *c == '"' ? "\"\"" : "%c", *c);
  pg_str_add(q, "\"");
}

/* Appends `mcpsub_r."col"`. */
static void pg_str_col(pg_str *q, const char *name) {
  pg_str_add(q, PG_ROW ".");
  pg_str_ident(q, name);
}

/* Text parameters: strings owned by the list; NULL for SQL NULL. */
typedef struct pg_params {
  char **v;
  int n, cap;
} pg_params;

/* Adds a copy of text (NULL: SQL NULL); returns its $ number. */
static int pg_param(pg_params *ps, const char *text) {
  if (ps->n == ps->cap) {
    ps->cap = ps->cap ? 2 * ps->cap : 8;
    ps->v = mem_realloc(ps->v, (size_t)ps->cap * sizeof(*ps->v));
  }
  ps->v[ps->n++] = text ? mem_strdup(text) : NULL;
  return ps->n;
}

static int pg_param_int(pg_params *ps, int64_t v) {
  char text[24];
  snprintf(text, sizeof(text), "%" PRId64, v);
  return pg_param(ps, text);
}

static void pg_params_finish(pg_params *ps) {
  for (int i = 0; i < ps->n; i++) free(ps->v[i]);
  free(ps->v);
  memset(ps, 0, sizeof(*ps));
}

/*
 * A JSON value as the text a parameter carries into a column: strings as
 * they are, whole numbers in decimal, other numbers with 17 digits, booleans
 * as 1/0 (PostgreSQL's boolean reads those too), objects and arrays as
 * compact JSON. NULL for null. New string.
 */
static char *pg_json_param_text(const cJSON *v) {
  if (cJSON_IsNull(v) || v == NULL) return NULL;
  const char *plain = jsonrpc_text(v); /* text, or an integer's digits */
  if (plain != NULL) return mem_strdup(plain);
  if (cJSON_IsBool(v)) return mem_strdup(cJSON_IsTrue(v) ? "1" : "0");
  if (cJSON_IsNumber(v)) {
    char text[64];
    if (store_double_is_int64(v->valuedouble))
      snprintf(text, sizeof(text), "%lld", (long long)v->valuedouble);
    else
      snprintf(text, sizeof(text), "%.17g", v->valuedouble);
    return mem_strdup(text);
  }
  char *text = jsonrpc_print_text(v); /* its numbers exact */
  if (text == NULL) abort();
  return text;
}

static int pg_param_json(pg_params *ps, const cJSON *v) {
  char *text = pg_json_param_text(v);
  int n = pg_param(ps, text);
  free(text);
  return n;
}

/* Errors and statements ------------------------------------------------------------- */

/* The main connection broke: logged once, and calls fail until pg_ready made a new one. */
static void pg_lose(pg_store *p, const char *why) {
  if (p->lost) return;
  char text[256];
  snprintf(text, sizeof(text), "%s", why != NULL ? why : "");
  text[strcspn(text, "\n")] = '\0';
  log_warn("lost the connection to postgres; calls fail until it is back", "error", text);
  p->lost = true;
}

/*
 * Maps a failed result (or, res NULL, the connection's state) to our errno
 * convention and copies the message into err. Constraint violations are
 * -EEXIST, lock and serialisation failures -EBUSY, a full disk -ENOSPC, a
 * value of the wrong shape -EINVAL, a lost connection -ENOTCONN (the next
 * call resets the connection once). Anything else is logged: -EIO.
 */
static int pg_error(pg_store *p, const PGresult *res, char *err, size_t errlen) {
  const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
  const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  if (msg == NULL) msg = PQerrorMessage(p->conn);
  store_set_err(err, errlen, "%s", msg);
  if (PQstatus(p->conn) != CONNECTION_OK || (state != NULL && strncmp(state, "08", 2) == 0)) {
    pg_lose(p, msg);
    return -ENOTCONN;
  }
  if (state == NULL) {
    log_warn("postgres error", "error", msg);
    return -EIO;
  }
  if (strncmp(state, "23", 2) == 0) return -EEXIST;
  if (strcmp(state, "55P03") == 0 || strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0 ||
      strcmp(state, "57014") == 0)
    return -EBUSY;
  if (strcmp(state, "53100") == 0) return -ENOSPC;
  if (strncmp(state, "22", 2) == 0 || strcmp(state, "42804") == 0) return -EINVAL;
  if (strcmp(state, "57P01") == 0 || strcmp(state, "57P02") == 0 || strcmp(state, "57P03") == 0) {
    pg_lose(p, msg);
    return -ENOTCONN;
  }
  log_warn("postgres error", "sqlstate", state, "error", msg);
  return -EIO;
}

static int64_t pg_monotonic_ms(void);

/*
 * Sends sql on c (with the parameters ps when params; else it may hold
 * several statements) and waits for its last result at most
 * PG_STATEMENT_DEADLINE_MS: a server that stops answering (a stopped
 * process, a path gone silent) costs the caller that long, never more.
 * c is non-blocking: what the send left unsent goes out as the socket
 * takes it, and the answer is read as it comes; every wait is the store's
 * (a worker's lane parks its job and keeps the loop running). Past the
 * deadline, NULL with *timed_out set; NULL without it when the query could
 * not be sent (the connection's message says why).
 */
static PGresult *pg_conn_answer(pg_store *p, PGconn *c, bool *timed_out);

static PGresult *pg_conn_roundtrip(pg_store *p, PGconn *c, const char *sql, const pg_params *ps,
                                   bool params, bool *timed_out) {
  *timed_out = false;
  int sent = params ? PQsendQueryParams(c, sql, ps ? ps->n : 0, NULL,
                                        ps ? (const char *const *)ps->v : NULL, NULL, NULL, 0)
                    : PQsendQuery(c, sql);
  return sent ? pg_conn_answer(p, c, timed_out) : NULL;
}

/* The last result of what was sent on c, as pg_conn_roundtrip says. */
static PGresult *pg_conn_answer(pg_store *p, PGconn *c, bool *timed_out) {
  *timed_out = false;
  int64_t deadline = pg_monotonic_ms() + PG_STATEMENT_DEADLINE_MS;
  PGresult *last = NULL, *r;
  int flushing = 1;
  for (;;) {
    for (;;) {
      if (flushing > 0 && (flushing = PQflush(c)) < 0) break;
      if (flushing == 0 && !PQisBusy(c)) break;
      int64_t left = deadline - pg_monotonic_ms();
      if (left <= 0) {
        PQclear(last);
        *timed_out = true;
        return NULL;
      }
      short events = flushing > 0 ? POLLIN | POLLOUT : POLLIN;
      int n = store_wait_fd(&p->base, PQsocket(c), events, (int)left);
      if (n < 0 || (n > 0 && !PQconsumeInput(c))) break;
    }
    /* After a broken connection PQgetResult reports it (an error result, then NULL). */
    if ((r = PQgetResult(c)) == NULL) break;
    PQclear(last); /* as PQexec: the last result (processing stops at an error) */
    last = r;
  }
  return last;
}

/* Prepared statements ------------------------------------------------------------------ */

void store_pg_set_prepare(bool on) {
  pg_prepare = on;
}

uint64_t store_pg_prepared_total(void) {
  return atomic_load_explicit(&pg_prepared_total, memory_order_relaxed);
}

static uint64_t pg_hash(const char *s) {
  uint64_t h = 14695981039346656037ULL; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static void pg_stmt_name(const pg_stmt *st, char name[24]) {
  snprintf(name, 24, "mcpsub_%u", st->id);
}

static int pg_prepared(store_t *s) {
  return pg_of(s)->n_stmts;
}

/* Forgets the main connection's prepared statements (it is new, or they were deallocated). */
static void pg_stmts_forget(pg_store *p) {
  for (int i = 0; i < p->n_stmts; i++) free(p->stmts[i].sql);
  p->n_stmts = 0;
  memset(p->seen, 0, sizeof(p->seen));
  p->stmts_discard = false;
}

/* Runs a statement of ours on the main connection (no parameters), for its effect only. */
static bool pg_roundtrip_quiet(pg_store *p, const char *sql, bool *timed_out) {
  PGresult *r = pg_conn_roundtrip(p, p->conn, sql, NULL, false, timed_out);
  bool ok = r != NULL && PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  return ok;
}

/*
 * The statement prepared for sql (with n parameters) on the main
 * connection, or NULL to run it unnamed: the first time a text is run, or
 * when preparing it failed (*failed then holds the PREPARE's result: the
 * statement's own error).
 */
static const pg_stmt *pg_stmt_for(pg_store *p, const char *sql, int n, PGresult **failed,
                                  bool *timed_out) {
  uint64_t h = pg_hash(sql);
  for (int i = 0; i < p->n_stmts; i++) {
    if (p->stmts[i].hash == h && strcmp(p->stmts[i].sql, sql) == 0) {
      p->stmts[i].used = ++p->stmt_clock;
      return &p->stmts[i];
    }
  }
  bool seen = false;
  for (int i = 0; i < PG_SEEN && !seen; i++) seen = p->seen[i] == h;
  if (!seen || PQtransactionStatus(p->conn) == PQTRANS_INERROR) { /* that fails either way */
    if (!seen) p->seen[p->seen_at++ % PG_SEEN] = h;
    return NULL;
  }
  char name[24];
  pg_stmt *st = &p->stmts[p->n_stmts];
  if (p->n_stmts == PG_STMTS) { /* the least recently used makes room */
    st = &p->stmts[0];
    for (int i = 1; i < PG_STMTS; i++)
      if (p->stmts[i].used < st->used) st = &p->stmts[i];
    char q[48];
    pg_stmt_name(st, name);
    snprintf(q, sizeof(q), "DEALLOCATE %s", name);
    if (!pg_roundtrip_quiet(p, q, timed_out)) {
      p->stmts_discard = true; /* the server has lost track of ours: start again */
      return NULL;
    }
    free(st->sql);
    *st = p->stmts[--p->n_stmts];
    st = &p->stmts[p->n_stmts];
  }
  *st = (pg_stmt){h, NULL, ++p->stmt_clock, ++p->stmt_ids};
  pg_stmt_name(st, name);
  if (!PQsendPrepare(p->conn, name, sql, n, NULL)) return NULL;
  PGresult *r = pg_conn_answer(p, p->conn, timed_out);
  if (r == NULL || PQresultStatus(r) != PGRES_COMMAND_OK) {
    *failed = r;
    return NULL;
  }
  PQclear(r);
  st->sql = mem_strdup(sql);
  p->n_stmts++;
  atomic_fetch_add_explicit(&pg_prepared_total, 1, memory_order_relaxed);
  return st;
}

/* Did r fail because the server lost a prepared statement, or its result type changed? */
static bool pg_stmt_lost(const PGresult *r) {
  const char *state = r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  return state != NULL && (strcmp(state, "26000") == 0 || strcmp(state, "0A000") == 0);
}

/*
 * Sends sql with ps on the main connection, prepared when it runs a second
 * time (above), and returns its result as pg_conn_roundtrip does.
 */
static PGresult *pg_prepared_roundtrip(pg_store *p, const char *sql, const pg_params *ps,
                                       bool *timed_out) {
  *timed_out = false;
  if (p->stmts_discard) { /* outside a transaction; inside, unnamed until then */
    if (PQtransactionStatus(p->conn) != PQTRANS_IDLE)
      return pg_conn_roundtrip(p, p->conn, sql, ps, true, timed_out);
    if (!pg_roundtrip_quiet(p, "DEALLOCATE ALL", timed_out)) return NULL;
    pg_stmts_forget(p);
  }
  int n = ps ? ps->n : 0;
  const char *const *v = ps ? (const char *const *)ps->v : NULL;
  PGresult *failed = NULL;
  const pg_stmt *st = pg_stmt_for(p, sql, n, &failed, timed_out);
  if (failed != NULL || *timed_out) return failed;
  if (st == NULL) return pg_conn_roundtrip(p, p->conn, sql, ps, true, timed_out);
  char name[24];
  pg_stmt_name(st, name);
  if (!PQsendQueryPrepared(p->conn, name, n, v, NULL, NULL, 0)) return NULL;
  PGresult *r = pg_conn_answer(p, p->conn, timed_out);
  if (!pg_stmt_lost(r)) return r;
  p->stmts_discard = true;
  if (PQtransactionStatus(p->conn) != PQTRANS_IDLE) return r; /* its transaction failed with it */
  PQclear(r);
  if (!pg_roundtrip_quiet(p, "DEALLOCATE ALL", timed_out)) return NULL;
  pg_stmts_forget(p);
  return pg_conn_roundtrip(p, p->conn, sql, ps, true, timed_out);
}

/* pg_conn_roundtrip on the main connection, which is given up past the deadline. */
static PGresult *pg_roundtrip(pg_store *p, const char *sql, const pg_params *ps, bool params,
                              bool *timed_out) {
  PGresult *r = params && pg_prepare ? pg_prepared_roundtrip(p, sql, ps, timed_out)
                                     : pg_conn_roundtrip(p, p->conn, sql, ps, params, timed_out);
  if (*timed_out) pg_lose(p, "no answer from postgres within the statement deadline");
  return r;
}

static int pg_begin(pg_store *p, char *err, size_t errlen);
static int pg_commit(pg_store *p, char *err, size_t errlen);
static void pg_rollback(pg_store *p);

/*
 * Runs sql with the text parameters ps (may be NULL). *res (may be NULL)
 * gets the result of a statement that returns rows (the caller PQclears
 * it). Returns 0 or pg_error's code.
 */
static int pg_run(pg_store *p, const char *sql, const pg_params *ps, PGresult **res, char *err,
                  size_t errlen) {
  if (p->batch && p->depth == 0) {
    /* A statement of its own inside a group commit: in a savepoint, so that it fails alone. */
    int ret = pg_begin(p, err, errlen);
    if (ret == 0) ret = pg_run(p, sql, ps, res, err, errlen);
    if (ret == 0) ret = pg_commit(p, err, errlen);
    if (ret < 0) {
      if (res != NULL) {
        PQclear(*res);
        *res = NULL;
      }
      pg_rollback(p);
    }
    return ret;
  }
  bool timed_out;
  if (res != NULL) *res = NULL;
  PGresult *r = pg_roundtrip(p, sql, ps, true, &timed_out);
  if (timed_out) {
    store_set_err(err, errlen, "no answer from postgres in time");
    return -ENOTCONN;
  }
  ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    int ret = pg_error(p, r, err, errlen);
    PQclear(r);
    return ret;
  }
  if (res != NULL)
    *res = r;
  else
    PQclear(r);
  return 0;
}

/* Runs sql (no parameters, may hold several statements) for its effect. */
static int pg_exec(pg_store *p, const char *sql, char *err, size_t errlen) {
  bool timed_out;
  PGresult *r = pg_roundtrip(p, sql, NULL, false, &timed_out);
  if (timed_out) {
    store_set_err(err, errlen, "no answer from postgres in time");
    return -ENOTCONN;
  }
  ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  int ret = 0;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) ret = pg_error(p, r, err, errlen);
  PQclear(r);
  return ret;
}

/* Runs sql, which yields one integer (NULL or no row: 0). */
static int pg_run_int64(pg_store *p, const char *sql, const pg_params *ps, int64_t *out, char *err,
                        size_t errlen) {
  PGresult *r;
  *out = 0;
  int ret = pg_run(p, sql, ps, &r, err, errlen);
  if (ret < 0) return ret;
  if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0)) *out = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return 0;
}

/* Runs a statement that changes rows; *changes (may be NULL) gets how many. */
static int pg_run_changes(pg_store *p, const char *sql, const pg_params *ps, int64_t *changes,
                          char *err, size_t errlen) {
  PGresult *r;
  int ret = pg_run(p, sql, ps, &r, err, errlen);
  if (ret < 0) return ret;
  if (changes != NULL) *changes = strtoll(PQcmdTuples(r), NULL, 10);
  PQclear(r);
  return 0;
}

/*
 * Rolls back the open transaction; inside a group commit, the call's
 * savepoint only (the batch goes on; store_batch_end ends it).
 */
static void pg_rollback(pg_store *p) {
  if (p->conn == NULL || p->lost || PQtransactionStatus(p->conn) == PQTRANS_IDLE ||
      PQstatus(p->conn) != CONNECTION_OK)
    return;
  bool timed_out;
  if (!p->batch) {
    PQclear(pg_roundtrip(p, "ROLLBACK", NULL, false, &timed_out));
  } else if (p->depth > 0) {
    PQclear(
        pg_roundtrip(p, "ROLLBACK TO mcpsub_call; RELEASE mcpsub_call", NULL, false, &timed_out));
    p->depth--;
  }
}

static int pg_apply_lock_timeout(pg_store *p) {
  char sql[64];
  snprintf(sql, sizeof(sql), "SET lock_timeout = %d", p->lock_timeout_ms);
  return pg_exec(p, sql, NULL, 0);
}

/* Connections ------------------------------------------------------------------------ */

/* Server notices (NOTICE: relation ... already exists) are not ours to print. */
static void pg_notice_ignore(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

static int64_t pg_monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * What every connection asks for unless the target says otherwise (it
 * comes after them, and its settings win): keepalives that notice a peer
 * gone silent within about 11 s (5 s idle, then 3 probes 2 s apart), and
 * sent data left unacknowledged given up after 10 s, so that a call on a
 * connection whose server vanished ends. connect_timeout bounds only the
 * blocking connect at start; later attempts have their own bounds
 * (pg_redial). client_encoding comes after the target: always UTF8.
 */
static const char *const pg_conn_keys[] = {"connect_timeout",
                                           "keepalives",
                                           "keepalives_idle",
                                           "keepalives_interval",
                                           "keepalives_count",
                                           "tcp_user_timeout",
                                           "dbname",
                                           "client_encoding",
                                           NULL};

/* A new connection to target: made now (blocking) or, start, only started (PQconnectStart). */
static PGconn *pg_conn_new(const char *target, bool start) {
  const char *const values[] = {"10", "1", "5", "2", "3", "10000", target, "UTF8", NULL};
  PGconn *c = start ? PQconnectStartParams(pg_conn_keys, values, 1)
                    : PQconnectdbParams(pg_conn_keys, values, 1);
  if (c != NULL) PQsetNoticeProcessor(c, pg_notice_ignore, NULL);
  return c;
}

/*
 * Is c still connected? An idle connection has nothing to read: when its
 * socket is readable, the server said something on its own (usually the
 * FATAL of a shutdown, then the close), which is read now.
 */
static bool pg_conn_alive(PGconn *c) {
  if (PQstatus(c) != CONNECTION_OK) return false;
  struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
  if (poll(&pfd, 1, 0) != 1) return true;
  return PQconsumeInput(c) == 1 && PQstatus(c) == CONNECTION_OK;
}

/* Drives r's attempt until it connects (0), fails (-ENOTCONN) or until_ms passes (-EINPROGRESS). */
static int pg_redial_drive(pg_redial *r, int64_t until_ms) {
  for (;;) {
    if (r->wait == PGRES_POLLING_OK) return 0;
    if (r->wait == PGRES_POLLING_FAILED || PQstatus(r->attempt) == CONNECTION_BAD) return -ENOTCONN;
    int64_t left = until_ms - pg_monotonic_ms();
    if (left <= 0) return -EINPROGRESS;
    int n = store_wait_fd(r->owner, PQsocket(r->attempt),
                          r->wait == PGRES_POLLING_READING ? POLLIN : POLLOUT, (int)left);
    if (n < 0) return -ENOTCONN;
    if (n > 0) r->wait = PQconnectPoll(r->attempt);
  }
}

/* An attempt failed (or what followed it did): the next one after the backoff. */
static void pg_redial_failed(pg_redial *r, const char *why) {
  char text[256];
  snprintf(text, sizeof(text), "%s", why != NULL && why[0] != '\0' ? why : "unknown error");
  text[strcspn(text, "\n")] = '\0';
  r->delay_ms = r->delay_ms == 0                     ? PG_RETRY_MIN_MS
                : r->delay_ms >= PG_RETRY_MAX_MS / 2 ? PG_RETRY_MAX_MS
                                                     : 2 * r->delay_ms;
  r->next_ms = pg_monotonic_ms() + r->delay_ms;
  char delay[24];
  snprintf(delay, sizeof(delay), "%d", r->delay_ms);
  /* Once per outage as a warning; each later attempt only in the debug log. */
  if (r->failures++ == 0)
    log_warn("cannot reach postgres; retrying with backoff", "what", r->what, "error", text);
  else
    log_debug("postgres still unreachable", "what", r->what, "retry_ms", delay, "error", text);
}

/*
 * One step of making a connection again: nothing before the backoff's
 * time; else starts an attempt (or goes on with one) for at most
 * PG_CONNECT_STEP_MS. Returns the new connection (the caller owns it) or
 * NULL: not yet, or failed (logged; the backoff grows).
 */
static PGconn *pg_redial_step(pg_redial *r, const char *target) {
  int64_t now = pg_monotonic_ms();
  bool back = atomic_load(&pg_redials_made) != r->back_seen;
  if (now < r->next_ms && !back) return NULL;
  if (back && r->attempt != NULL) {
    /* Started while the server was away (it may hang on a dead path): start afresh. */
    PQfinish(r->attempt);
    r->attempt = NULL;
  }
  if (r->attempt == NULL) {
    r->back_seen = atomic_load(&pg_redials_made);
    r->attempt = pg_conn_new(target, true);
    if (r->attempt == NULL) {
      pg_redial_failed(r, "out of memory");
      return NULL;
    }
    r->wait = PGRES_POLLING_WRITING; /* libpq's rule for the first wait */
    r->give_up_ms = now + PG_CONNECT_TIMEOUT_MS;
  }
  int64_t until =
      now + PG_CONNECT_STEP_MS < r->give_up_ms ? now + PG_CONNECT_STEP_MS : r->give_up_ms;
  int rc = pg_redial_drive(r, until);
  if (rc == 0) {
    PGconn *c = r->attempt;
    r->attempt = NULL;
    r->delay_ms = 0;
    r->next_ms = 0;
    r->failures = 0;
    r->back_seen = atomic_fetch_add(&pg_redials_made, 1) + 1;
    return c;
  }
  now = pg_monotonic_ms();
  if (rc == -EINPROGRESS && now < r->give_up_ms) {
    r->next_ms = now + PG_CONNECT_GAP_MS; /* the caller's loop runs meanwhile */
    return NULL;
  }
  pg_redial_failed(r, rc == -EINPROGRESS ? "connect timeout" : PQerrorMessage(r->attempt));
  PQfinish(r->attempt);
  r->attempt = NULL;
  return NULL;
}

static void pg_redial_finish(pg_redial *r) {
  PQfinish(r->attempt);
  r->attempt = NULL;
}

/*
 * The settings of a new main connection: non-blocking (pg_roundtrip),
 * lock_timeout, read-only for a read-only handle.
 */
static int pg_conn_setup(pg_store *p, char *err, size_t errlen) {
  if (PQsetnonblocking(p->conn, 1) != 0) {
    store_set_err(err, errlen, "%s", PQerrorMessage(p->conn));
    return -ENOTCONN;
  }
  int ret = pg_apply_lock_timeout(p);
  if (ret == 0 && p->base.readonly)
    ret = pg_exec(p, "SET default_transaction_read_only = on", err, errlen);
  return ret;
}

/*
 * Every public call starts here. Connected: 0 (after making sure no
 * transaction of ours is open). Lost: one step of pg_redial, and
 * -ENOTCONN until it made a new connection (set up like the first).
 */
static int pg_ready(pg_store *p) {
  if (!store_may_use(&p->base)) return -EBUSY; /* another caller is mid-call on this connection */
  if (!p->lost && pg_conn_alive(p->conn)) {
    /* A call that failed half-way never leaves a transaction open, but be sure. */
    if (!p->batch && PQtransactionStatus(p->conn) != PQTRANS_IDLE) pg_rollback(p);
    return 0;
  }
  if (p->batch) return -ENOTCONN; /* the batch's transaction went with the connection */
  pg_lose(p, PQerrorMessage(p->conn));
  PGconn *c = pg_redial_step(&p->redial, p->target);
  if (c == NULL) return -ENOTCONN;
  PQfinish(p->conn);
  p->conn = c;
  pg_stmts_forget(p);
  p->lost = false;
  char err[256] = "";
  int ret = pg_conn_setup(p, err, sizeof(err));
  if (ret < 0) {
    p->lost = true;
    pg_redial_failed(&p->redial, err);
    return -ENOTCONN;
  }
  log_info("reconnected to postgres");
  return 0;
}

/*
 * A transaction of one store call. Inside a group commit (store_batch_begin)
 * it is a savepoint of the batch's transaction instead: released on
 * success, rolled back alone on failure (pg_rollback), committed with the
 * batch. then (or NULL) is a statement sent with its opening.
 */
static int pg_begin_then(pg_store *p, const char *then, char *err, size_t errlen) {
  const char *open = p->batch ? "SAVEPOINT mcpsub_call" : "BEGIN";
  int ret;
  if (then == NULL) {
    ret = pg_exec(p, open, err, errlen);
  } else { /* in the same round trip */
    pg_str q = {0};
    pg_str_add(&q, "%s; %s", open, then);
    ret = pg_exec(p, q.data, err, errlen);
    free(q.data);
  }
  /* The savepoint stands when a statement after it failed: pg_rollback must undo it. */
  if (p->batch && (ret == 0 || (then != NULL && PQtransactionStatus(p->conn) == PQTRANS_INERROR)))
    p->depth++;
  return ret;
}

static int pg_begin(pg_store *p, char *err, size_t errlen) {
  return pg_begin_then(p, NULL, err, errlen);
}

static int pg_commit(pg_store *p, char *err, size_t errlen) {
  if (!p->batch) return pg_exec(p, "COMMIT", err, errlen);
  int ret = pg_exec(p, "RELEASE mcpsub_call", err, errlen);
  if (ret == 0) p->depth--;
  return ret;
}

/* Group commit: one transaction for the writer's queued calls, each in its savepoint. */
static int pg_batch_begin(store_t *s) {
  pg_store *p = pg_of(s);
  if (p->batch) return -EALREADY;
  int ret = pg_ready(p);
  if (ret == 0) ret = pg_exec(p, "BEGIN", NULL, 0);
  if (ret == 0) {
    p->batch = true;
    p->depth = 0;
  }
  return ret;
}

/* The transaction is gone or failed as a whole (a statement outside a savepoint, the connection).
 */
static bool pg_batch_broken(store_t *s) {
  pg_store *p = pg_of(s);
  return p->batch && (p->lost || PQtransactionStatus(p->conn) != PQTRANS_INTRANS);
}

static int pg_batch_end(store_t *s, bool commit) {
  pg_store *p = pg_of(s);
  if (!p->batch) return -EINVAL;
  p->batch = false;
  p->depth = 0;
  int ret = -EIO;
  if (!p->lost && PQtransactionStatus(p->conn) != PQTRANS_IDLE) {
    ret = commit ? pg_exec(p, "COMMIT", NULL, 0) : 0;
    pg_rollback(p); /* after a failed COMMIT, or without commit; nothing when it succeeded */
  } else if (!p->lost) {
    ret = 0; /* nothing was left to commit */
  }
  return commit ? ret : 0;
}

/* Schema: exported tables ------------------------------------------------------------ */

static void pg_info_free(pg_table_info *info, int n) {
  for (int i = 0; info != NULL && i < n; i++) {
    free(info[i].key_cast);
    free(info[i].cols);
  }
  free(info);
}

/* Logs once per handle and name that a table is not exported, and why. */
static void pg_warn_skipped(pg_store *p, const char *name, const char *why) {
  for (int i = 0; i < p->n_warned; i++)
    if (strcmp(p->warned[i], name) == 0) return;
  p->warned = mem_realloc(p->warned, (size_t)(p->n_warned + 1) * sizeof(*p->warned));
  p->warned[p->n_warned++] = mem_strdup(name);
  log_warn("table not exported", "table", name, "reason", why);
}

static pg_kind pg_kind_of(unsigned oid) {
  switch (oid) {
  case 20:  /* int8 */
  case 21:  /* int2 */
  case 23:  /* int4 */
  case 700: /* float4 */
  case 701: /* float8 */
  case 1700: /* numeric */ return PG_KIND_NUMERIC;
  case 16: return PG_KIND_BOOL;
  case 19:   /* name */
  case 25:   /* text */
  case 1042: /* bpchar */
  case 1043: /* varchar */ return PG_KIND_TEXT;
  default: return PG_KIND_OTHER;
  }
}

/*
 * One row per column of every candidate table, in table then column
 * order: the table, the column, its type as format_type prints it, NOT
 * NULL, generated, the base type's oid (through a domain), identity
 * ALWAYS, the type without modifier, the primary key's column count,
 * whether this column is its first, whether it has a default, and whether
 * its collation orders by bytes (libc "C" or "POSIX"; the database's for
 * the default one, whose provider column PostgreSQL 15 added).
 */
static const char pg_sql_columns[] =
    "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
    "a.attgenerated <> '', "
    "(CASE WHEN ty.typtype = 'd' THEN ty.typbasetype ELSE a.atttypid END)::int8, "
    "a.attidentity = 'a', format_type(a.atttypid, NULL), coalesce(i.indnkeyatts, 0), "
    "coalesce(i.indkey[0] = a.attnum, false), a.atthasdef OR a.attidentity <> '', "
    "coalesce((SELECT CASE WHEN co.oid = 100 THEN coalesce(to_jsonb(d) ->> 'datlocprovider', 'c') "
    "= 'c' AND d.datcollate IN ('C', 'POSIX') ELSE co.collprovider = 'c' AND co.collcollate "
    "IN ('C', 'POSIX') END FROM pg_collation co, pg_database d WHERE co.oid = a.attcollation "
    "AND d.datname = current_database()), false) "
    "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
    "AND NOT a.attisdropped JOIN pg_type ty ON ty.oid = a.atttypid "
    "LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary "
    "WHERE c.relnamespace = " PG_SQL_SCHEMA " AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
    "AND " PG_SQL_NOT_SYSTEM " ORDER BY c.relname, a.attnum";

/* Reads the exported tables (sorted by name) and their pg_table_info. */
static int pg_read_tables(pg_store *p, store_table **out, pg_table_info **out_info, int *n_out,
                          char *err, size_t errlen) {
  PGresult *r;
  int ret = pg_run(p, pg_sql_columns, NULL, &r, err, errlen);
  if (ret < 0) return ret;
  int rows = PQntuples(r), n = 0;
  store_table *tables = mem_calloc((size_t)rows + 1, sizeof(*tables));
  pg_table_info *info = mem_calloc((size_t)rows + 1, sizeof(*info));

  for (int i = 0; i < rows;) {
    const char *name = PQgetvalue(r, i, 0);
    int first = i;
    while (i < rows && strcmp(PQgetvalue(r, i, 0), name) == 0) i++;
    int n_pk = atoi(PQgetvalue(r, first, 8));
    if (n_pk != 1) {
      pg_warn_skipped(p, name, n_pk == 0 ? "no primary key" : "composite primary key");
      continue;
    }
    store_table *t = &tables[n];
    pg_table_info *ti = &info[n];
    n++;
    t->name = mem_strdup(name);
    t->n_cols = i - first;
    t->cols = mem_calloc((size_t)t->n_cols, sizeof(*t->cols));
    ti->cols = mem_calloc((size_t)t->n_cols, sizeof(*ti->cols));
    t->key_col = -1;
    for (int c = 0; c < t->n_cols; c++) {
      int row = first + c;
      store_column *col = &t->cols[c];
      unsigned oid = (unsigned)strtoul(PQgetvalue(r, row, 5), NULL, 10);
      col->name = mem_strdup(PQgetvalue(r, row, 1));
      col->decl_type = mem_strdup(PQgetvalue(r, row, 2));
      col->notnull = PQgetvalue(r, row, 3)[0] == 't';
      col->generated = PQgetvalue(r, row, 4)[0] == 't';
      ti->cols[c].kind = pg_kind_of(oid);
      ti->cols[c].big = oid == 20 || oid == 1700;
      ti->cols[c].decimal = oid == 1700;
      ti->cols[c].identity_always = PQgetvalue(r, row, 6)[0] == 't';
      ti->cols[c].defaulted = PQgetvalue(r, row, 10)[0] == 't';
      ti->cols[c].bytes = ti->cols[c].kind == PG_KIND_TEXT && PQgetvalue(r, row, 11)[0] == 't';
      col->numeric = ti->cols[c].kind == PG_KIND_NUMERIC;
      if (PQgetvalue(r, row, 9)[0] == 't') {
        t->key_col = c;
        t->key_integer = oid == 20 || oid == 21 || oid == 23;
        ti->key_cast = mem_strdup(PQgetvalue(r, row, 7));
        ti->key_oid = oid;
      }
    }
    if (t->key_col < 0) { /* cannot happen (a primary key is on columns); be safe */
      for (int c = 0; c < t->n_cols; c++) {
        free(t->cols[c].name);
        free(t->cols[c].decl_type);
      }
      free(t->cols);
      free(t->name);
      free(ti->cols);
      memset(t, 0, sizeof(*t));
      memset(ti, 0, sizeof(*ti));
      n--;
    }
  }
  PQclear(r);

  /* Sort tables and their info together. */
  store_table *sorted = mem_calloc((size_t)n + 1, sizeof(*sorted));
  memcpy(sorted, tables, (size_t)n * sizeof(*tables));
  store_tables_sort(sorted, n);
  pg_table_info *sorted_info = mem_calloc((size_t)n + 1, sizeof(*sorted_info));
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (tables[j].name == sorted[i].name) sorted_info[i] = info[j];
  free(tables);
  free(info);
  *out = sorted;
  *out_info = sorted_info;
  *n_out = n;
  return 0;
}

/*
 * A cheap fingerprint of what the exported tables depend on: the columns
 * and primary keys of the current schema's tables and the audit triggers.
 * PostgreSQL has no schema_version; this is one catalog query.
 */
static const char pg_sql_fingerprint[] =
    "SELECT md5(coalesce((SELECT string_agg(c.relname || '.' || a.attnum || '.' || a.attname || "
    "'.' || a.atttypid || '.' || a.atttypmod || '.' || a.attnotnull || '.' || a.attgenerated::text "
    "|| "
    "'.' || a.attidentity::text, ',' ORDER BY c.relname, a.attnum) "
    "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
    "AND NOT a.attisdropped WHERE c.relnamespace = " PG_SQL_SCHEMA
    " AND c.relkind IN ('r', 'p')), '') || '|' || "
    "coalesce((SELECT string_agg(i.indrelid || '.' || i.indkey::text, ',' ORDER BY i.indrelid) "
    "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE i.indisprimary "
    "AND c.relnamespace = " PG_SQL_SCHEMA "), '') || '|' || "
    "coalesce((SELECT string_agg(t.tgrelid || '.' || t.tgenabled::text || '.' || "
    "encode(t.tgargs, 'hex'), ',' ORDER BY t.tgrelid) FROM pg_trigger t "
    "WHERE t.tgname = '" PG_TRIGGER_NAME "'), '') || '|' || current_schema())";

static int pg_fingerprint(pg_store *p, char out[40], char *err, size_t errlen) {
  PGresult *r;
  int ret = pg_run(p, pg_sql_fingerprint, NULL, &r, err, errlen);
  if (ret < 0) return ret;
  snprintf(out, 40, "%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
  PQclear(r);
  return 0;
}

/* Schema: audit triggers -------------------------------------------------------------- */

/* Is hex (pg_trigger.tgargs in hex) exactly one argument, name? */
static bool pg_hex_arg_is(const char *hex, const char *name) {
  static const char digits[] = "0123456789abcdef";
  size_t n = strlen(name);
  if (strlen(hex) != 2 * n + 2) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (hex[2 * i] != digits[c >> 4] || hex[2 * i + 1] != digits[c & 15]) return false;
  }
  return hex[2 * n] == '0' && hex[2 * n + 1] == '0';
}

/*
 * Makes the mcpsub_audit_row triggers exactly one per exported table, on
 * the table's key column: creates missing ones, replaces ones with another
 * key or function, drops ones on tables no longer exported. No DDL at all
 * when they already match. Must run inside a transaction.
 */
static int pg_sync_triggers(pg_store *p, char *err, size_t errlen) {
  PGresult *r;
  int ret = pg_run(p,
                   "SELECT c.relname, encode(t.tgargs, 'hex'), "
                   "t.tgfoid = 'mcpsub_audit'::regproc AND t.tgtype = 29 AND t.tgenabled = 'O' "
                   "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                   "WHERE t.tgname = '" PG_TRIGGER_NAME "' AND t.tgparentid = 0 "
                   "AND c.relnamespace = " PG_SQL_SCHEMA,
                   NULL, &r, err, errlen);
  if (ret < 0) return ret;
  int rows = PQntuples(r);
  bool *present = mem_calloc((size_t)p->base.n_tables + 1, sizeof(*present));
  pg_str q = {0};

  for (int i = 0; i < rows && ret == 0; i++) {
    const char *table = PQgetvalue(r, i, 0);
    const char *args = PQgetvalue(r, i, 1); /* "keycol\0" in hex */
    bool good = PQgetvalue(r, i, 2)[0] == 't';
    const store_table *t = store_find_table(&p->base, table);
    if (t != NULL && good && pg_hex_arg_is(args, t->cols[t->key_col].name)) {
      present[t - p->base.tables] = true;
      continue;
    }
    q.len = 0;
    pg_str_add(&q, "DROP TRIGGER IF EXISTS " PG_TRIGGER_NAME " ON ");
    pg_str_ident(&q, table);
    ret = pg_exec(p, q.data, err, errlen);
  }
  for (int i = 0; i < p->base.n_tables && ret == 0; i++) {
    if (present[i]) continue;
    const store_table *t = &p->base.tables[i];
    const char *key = t->cols[t->key_col].name;
    q.len = 0;
    pg_str_add(&q, "CREATE OR REPLACE TRIGGER " PG_TRIGGER_NAME
                   " AFTER INSERT OR UPDATE OR DELETE ON ");
    pg_str_ident(&q, t->name);
    pg_str_add(&q, " FOR EACH ROW EXECUTE FUNCTION mcpsub_audit('");
    for (const char *c = key; *c; c++) pg_str_add(&q, *c == '\'' ? "''" : "%c", *c);
    pg_str_add(&q, "')");
    ret = pg_exec(p, q.data, err, errlen);
  }
  PQclear(r);
  free(present);
  free(q.data);
  return ret;
}

/*
 * Re-reads the exported tables and (unless read-only or leaving triggers
 * to others) brings the triggers in line, in the current transaction.
 * *changed (may be NULL) says whether the tables differ from before.
 */
static int pg_reload(pg_store *p, bool *changed, char *err, size_t errlen) {
  store_table *tables = NULL;
  pg_table_info *info = NULL;
  int n = 0;
  int ret = pg_read_tables(p, &tables, &info, &n, err, errlen);
  if (ret < 0) return ret;
  bool same = store_tables_equal(p->base.tables, p->base.n_tables, tables, n);
  store_tables_free(p->base.tables, p->base.n_tables);
  pg_info_free(p->info, p->base.n_tables);
  p->base.tables = tables;
  p->info = info;
  p->base.n_tables = n;
  if (changed != NULL) *changed = !same;
  if (!p->base.readonly && !p->base.no_triggers) {
    ret = pg_sync_triggers(p, err, errlen);
    if (ret < 0) return ret;
  }
  char fp[40];
  ret = pg_fingerprint(p, fp, err, errlen);
  if (ret < 0) return ret;
  if (strcmp(fp, p->fingerprint) != 0) {
    snprintf(p->fingerprint, sizeof(p->fingerprint), "%s", fp);
    p->base.schema_generation++;
    p->stmts_discard = p->n_stmts > 0; /* planned against the old schema */
  }
  return 0;
}

/* Opening ---------------------------------------------------------------------------- */

/* Applies the schema file at path when the schema has no application table yet. */
static int pg_apply_app_schema(pg_store *p, const char *path, char *err, size_t errlen) {
  int64_t n = 0;
  int ret = pg_run_int64(p,
                         "SELECT count(*) FROM pg_class c WHERE c.relnamespace = " PG_SQL_SCHEMA
                         " AND c.relkind IN ('r', 'p', 'v', 'm') AND " PG_SQL_NOT_SYSTEM,
                         NULL, &n, err, errlen);
  if (ret < 0 || n > 0) return ret;
  char *text = NULL;
  ret = store_read_file(path, &text, err, errlen);
  if (ret < 0) return ret;
  char msg[512];
  ret = pg_exec(p, text, msg, sizeof(msg));
  if (ret < 0) store_set_err(err, errlen, "schema %s: %s", path, msg);
  free(text);
  return ret;
}

static void pg_free(pg_store *p) {
  if (p == NULL) return;
  pg_stmts_forget(p);
  if (p->conn) PQfinish(p->conn);
  if (p->listen) PQfinish(p->listen);
  pg_redial_finish(&p->redial);
  pg_redial_finish(&p->listen_redial);
  if (p->listen_fd >= 0) close(p->listen_fd);
  if (p->retired_fd >= 0) close(p->retired_fd);
  store_tables_free(p->base.tables, p->base.n_tables);
  pg_info_free(p->info, p->base.n_tables);
  for (int i = 0; i < p->n_warned; i++) free(p->warned[i]);
  free(p->warned);
  free(p->target);
  free(p);
}

static void pg_close(store_t *s) {
  pg_free(pg_of(s));
}

/* Connects to target with the settings every handle has. */
static int pg_connect(const char *target, bool readonly, pg_store **out, char *err, size_t errlen) {
  pg_store *p = mem_calloc(1, sizeof(*p));
  p->base.ops = &store_pg_ops;
  p->base.readonly = readonly;
  p->target = mem_strdup(target);
  p->lock_timeout_ms = STORE_BUSY_TIMEOUT_MS;
  p->listen_fd = p->retired_fd = -1;
  p->redial.what = "connection";
  p->listen_redial.what = "LISTEN connection";
  p->redial.owner = p->listen_redial.owner = &p->base;
  *out = NULL;
  p->conn = pg_conn_new(target, false);
  if (p->conn == NULL || PQstatus(p->conn) != CONNECTION_OK) {
    store_set_err(err, errlen, "cannot connect to postgres: %s",
                  p->conn ? PQerrorMessage(p->conn) : "out of memory");
    /* The message ends with a newline; drop it. */
    if (err != NULL) err[strcspn(err, "\n")] = '\0';
    pg_free(p);
    return -ENOTCONN;
  }
  int ret = pg_conn_setup(p, err, errlen);
  if (ret < 0) {
    store_set_err(err, errlen, "cannot set up the postgres connection: %s",
                  PQerrorMessage(p->conn));
    pg_free(p);
    return ret;
  }
  *out = p;
  return 0;
}

static int pg_open(const char *target, const char *schema_path, store_t **out, char *err,
                   size_t errlen) {
  pg_store *p;
  *out = NULL;
  int ret = pg_connect(target, false, &p, err, errlen);
  if (ret < 0) return ret;
  /* One transaction under one lock: concurrent starters apply schemas and triggers once. */
  ret = pg_begin(p, err, errlen);
  if (ret == 0) ret = pg_exec(p, "SELECT pg_advisory_xact_lock(" PG_SCHEMA_LOCK ")", err, errlen);
  if (ret == 0) ret = pg_exec(p, store_system_pg_sql, err, errlen);
  if (ret == 0 && schema_path != NULL && schema_path[0] != '\0')
    ret = pg_apply_app_schema(p, schema_path, err, errlen);
  if (ret == 0) ret = pg_reload(p, NULL, err, errlen);
  if (ret == 0) ret = pg_commit(p, err, errlen);
  if (ret < 0) {
    pg_rollback(p);
    pg_free(p);
    return ret;
  }
  *out = &p->base;
  return 0;
}

static int pg_open_readonly(const char *target, store_t **out, char *err, size_t errlen) {
  pg_store *p;
  *out = NULL;
  int ret = pg_connect(target, true, &p, err, errlen);
  if (ret < 0) return ret;
  ret = pg_begin(p, err, errlen);
  if (ret == 0) ret = pg_reload(p, NULL, err, errlen);
  if (ret == 0) ret = pg_commit(p, err, errlen);
  if (ret < 0) {
    pg_rollback(p);
    pg_free(p);
    return ret;
  }
  *out = &p->base;
  return 0;
}

/* ms 0: do not wait at all (lock_timeout 0 would mean forever; 1 ms is the least). */
static void pg_set_busy_timeout(store_t *s, int ms) {
  pg_store *p = pg_of(s);
  p->lock_timeout_ms = ms <= 0 ? 1 : ms;
  if (pg_ready(p) == 0 && pg_apply_lock_timeout(p) < 0) log_warn("cannot set lock_timeout");
}

static bool pg_schema_stale(store_t *s) {
  pg_of(s)->fingerprint_ms = INT64_MIN / 2;
  return true;
}

static int pg_refresh_schema(store_t *s, bool *tables_changed) {
  pg_store *p = pg_of(s);
  char err[256], fp[40];
  if (tables_changed != NULL) *tables_changed = false;
  int64_t now = pg_monotonic_ms();
  if (p->fingerprint[0] != '\0' && now - p->fingerprint_ms < PG_SCHEMA_CHECK_MS) return 0;
  int ret = pg_ready(p);
  if (ret == 0) ret = pg_fingerprint(p, fp, err, sizeof(err));
  if (ret == 0) p->fingerprint_ms = now;
  if (ret < 0 || strcmp(fp, p->fingerprint) == 0) return ret;
  bool write = !p->base.readonly && !p->base.no_triggers;
  ret = pg_begin(p, err, sizeof(err));
  if (ret == 0 && write)
    ret = pg_exec(p, "SELECT pg_advisory_xact_lock(" PG_SCHEMA_LOCK ")", err, sizeof(err));
  if (ret == 0) ret = pg_reload(p, tables_changed, err, sizeof(err));
  if (ret == 0) ret = pg_commit(p, err, sizeof(err));
  if (ret < 0) {
    log_warn("schema refresh failed", "error", err);
    pg_rollback(p);
    p->fingerprint[0] = '\0'; /* try again next time */
  }
  return ret;
}

/* Values and filters ------------------------------------------------------------------ */

/*
 * Appends t's row as JSON (to_jsonb, with bigint and numeric values beyond
 * +-2^53 as decimal strings, as the SQLite backend reads them; and a
 * numeric value that a double does not hold, its shortest text not reading
 * back as the same value, as its digits too: 0.1 and 1.50 stay numbers,
 * 0.123456789012345678901 is not rounded to 17 digits).
 */
static void pg_sql_row(pg_str *q, const store_table *t, const pg_table_info *ti) {
  pg_str_add(q, "to_jsonb(" PG_ROW ")");
  for (int c = 0; c < t->n_cols; c++) {
    if (!ti->cols[c].big) continue;
    pg_str_add(q, " || jsonb_build_object('");
    for (const char *ch = t->cols[c].name; *ch; ch++) pg_str_add(q, *ch == '\'' ? "''" : "%c", *ch);
    pg_str_add(q, "', CASE WHEN ");
    pg_str_col(q, t->cols[c].name);
    pg_str_add(q, " NOT BETWEEN -9007199254740992 AND 9007199254740992");
    if (ti->cols[c].decimal) {
      pg_str_add(q, " OR ");
      pg_str_col(q, t->cols[c].name);
      pg_str_add(q, " <> ");
      pg_str_col(q, t->cols[c].name);
      pg_str_add(q, "::float8::text::numeric");
    }
    pg_str_add(q, " THEN to_jsonb(");
    pg_str_col(q, t->cols[c].name);
    pg_str_add(q, "::text) ELSE to_jsonb(");
    pg_str_col(q, t->cols[c].name);
    pg_str_add(q, ") END)");
  }
}

/* Appends the key's text, as the audit trigger writes it (its JSON text). */
static void pg_sql_key_text(pg_str *q, const store_table *t) {
  pg_str_add(q, "(to_jsonb(");
  pg_str_col(q, t->cols[t->key_col].name);
  pg_str_add(q, ") #>> '{}')");
}

/* Appends `mcpsub_r."key" = $n::type` for the key text in parameter n. */
static void pg_sql_key_eq(pg_str *q, const store_table *t, const pg_table_info *ti, int n) {
  pg_str_col(q, t->cols[t->key_col].name);
  pg_str_add(q, " = $%d::%s", n, ti->key_cast);
}

/*
 * 0 when key can name a row of t: an integer key in its type's range, a
 * key its type reads (a uuid, a date...); -ENOENT when it cannot (checked
 * before any transaction: a failed cast would abort one).
 */
static int pg_key_check(pg_store *p, const store_table *t, const char *key) {
  const pg_table_info *ti = pg_info(p, t);
  int64_t v;
  if (!store_key_valid(t, key)) return -ENOENT;
  if (t->key_integer) {
    if (!store_parse_int_key(key, &v)) return -ENOENT;
    if (ti->key_oid == 21 && (v < -32768 || v > 32767)) return -ENOENT;
    if (ti->key_oid == 23 && (v < INT32_MIN || v > INT32_MAX)) return -ENOENT;
    return 0;
  }
  if (ti->cols[t->key_col].kind != PG_KIND_OTHER) return 0;
  pg_str q = {0};
  pg_params ps = {0};
  pg_str_add(&q, "SELECT $%d::%s", pg_param(&ps, key), ti->key_cast);
  int ret = pg_run(p, q.data, &ps, NULL, NULL, 0);
  pg_params_finish(&ps);
  free(q.data);
  return ret == -EINVAL ? -ENOENT : ret;
}

/* Appends `SELECT <key text>, <row> FROM "t" AS mcpsub_r`. */
static void pg_sql_select(pg_str *q, const store_table *t, const pg_table_info *ti) {
  pg_str_add(q, "SELECT ");
  pg_sql_key_text(q, t);
  pg_str_add(q, ", ");
  pg_sql_row(q, t, ti);
  pg_str_add(q, " FROM ");
  pg_str_ident(q, t->name);
  pg_str_add(q, " AS " PG_ROW);
}

/* Parses a row as pg_sql_row wrote it. */
static cJSON *pg_row_json(const char *text) {
  cJSON *row = cJSON_Parse(text);
  if (row == NULL) {
    fprintf(stderr, "mcpsub: unreadable row JSON from postgres (or out of memory)\n");
    abort();
  }
  return row;
}

/*
 * Appends column col as a text comparison sees it (PG_KIND_TEXT and
 * PG_KIND_OTHER): the column itself, or its JSON text, by bytes.
 */
static void pg_sql_text_expr(pg_str *q, const store_table *t, const pg_table_info *ti, int col) {
  if (ti->cols[col].kind == PG_KIND_TEXT) {
    pg_str_col(q, t->cols[col].name);
    pg_str_add(q, "::text");
  } else if (ti->cols[col].kind == PG_KIND_BOOL) {
    pg_str_add(q, "(");
    pg_str_col(q, t->cols[col].name);
    pg_str_add(q, "::int)::text");
  } else {
    pg_str_add(q, "(to_jsonb(");
    pg_str_col(q, t->cols[col].name);
    pg_str_add(q, ") #>> '{}')");
  }
}

/*
 * The number a filter value reads as (sub_index.c's rule): numbers, 1/0 for
 * booleans, strings as SQLite's numeric affinity reads them (uri_number: an
 * integer beyond 2^53 exactly; 1e999 an infinity, which PostgreSQL's own
 * infinities equal).
 */
static bool pg_value_number(const cJSON *v, uri_num *n) {
  if (cJSON_IsNumber(v)) {
    *n = uri_num_of(v->valuedouble);
    return !isnan(n->d);
  }
  if (cJSON_IsBool(v)) {
    *n = uri_num_of(cJSON_IsTrue(v) ? 1 : 0);
    return true;
  }
  /* a string, or an integer's digits (jsonrpc_exact_integers) */
  const char *text = jsonrpc_text(v);
  return text != NULL && uri_number(text, n);
}

/* Appends a number parameter, typed so that integer columns keep their index. */
static void pg_sql_number_param(pg_str *q, pg_params *ps, const uri_num *n) {
  char text[64];
  if (n->is_int || store_double_is_int64(n->d)) {
    snprintf(text, sizeof(text), "%lld", n->is_int ? (long long)n->i : (long long)n->d);
    pg_str_add(q, "$%d::int8", pg_param(ps, text));
  } else {
    snprintf(text, sizeof(text), "%.17g", n->d);
    pg_str_add(q, "$%d::float8", pg_param(ps, text));
  }
}

static const char *const pg_cmp[] = {
    [STORE_EQ] = "=",  [STORE_NE] = "<>", [STORE_GT] = ">",
    [STORE_GE] = ">=", [STORE_LT] = "<",  [STORE_LE] = "<=",
};

/*
 * Appends one comparison of column col with a scalar value v (op is not
 * STORE_IN), as sub_index.c's evaluator decides it: a NULL column matches
 * nothing; a numeric column compares by value with a value that reads as a
 * number, and otherwise sorts before any text (so <> < <= hold, = > >= do
 * not); sw/ct hold for text only; a text column compares bytes with the
 * value's text; a boolean column is 1/0 and sorts before text.
 */
static void pg_sql_compare(pg_str *q, pg_params *ps, const store_table *t, const pg_table_info *ti,
                           int col, store_op op, const cJSON *v) {
  pg_kind kind = ti->cols[col].kind;
  uri_num d;
  if (op == STORE_EQ && cJSON_IsNull(v)) {
    pg_str_col(q, t->cols[col].name);
    pg_str_add(q, " IS NULL");
    return;
  }
  if (kind == PG_KIND_NUMERIC || kind == PG_KIND_BOOL) {
    bool number = pg_value_number(v, &d);
    /* A boolean column's ordering is numeric only against a JSON number (sub_index.c). */
    if (kind == PG_KIND_BOOL && op != STORE_EQ && op != STORE_NE && !cJSON_IsNumber(v))
      number = false;
    if (op == STORE_SW || op == STORE_CT) {
      pg_str_add(q, "false");
    } else if (number) {
      if (kind == PG_KIND_BOOL) pg_str_add(q, "(");
      pg_str_col(q, t->cols[col].name);
      pg_str_add(q, kind == PG_KIND_BOOL ? ")::int %s " : " %s ", pg_cmp[op]);
      pg_sql_number_param(q, ps, &d);
    } else if (op == STORE_NE || op == STORE_LT || op == STORE_LE) {
      pg_str_col(q, t->cols[col].name);
      pg_str_add(q, " IS NOT NULL");
    } else {
      pg_str_add(q, "false");
    }
    return;
  }
  char *text = store_json_key_text(v);
  int n = pg_param(ps, text);
  free(text);
  if (op == STORE_SW) {
    pg_str_add(q, "starts_with(");
    pg_sql_text_expr(q, t, ti, col);
    pg_str_add(q, ", $%d::text)", n);
  } else if (op == STORE_CT) {
    pg_str_add(q, "strpos(");
    pg_sql_text_expr(q, t, ti, col);
    pg_str_add(q, ", $%d::text) > 0", n);
  } else {
    /*
     * Equality is by bytes in any deterministic collation; order needs "C"
     * (then no index serves it), unless the column's own collation is one.
     */
    bool as_is = op == STORE_EQ || op == STORE_NE || ti->cols[col].bytes;
    pg_sql_text_expr(q, t, ti, col);
    pg_str_add(q, "%s %s $%d::text", as_is ? "" : " COLLATE \"C\"", pg_cmp[op], n);
  }
}

/* Appends " WHERE <filters, ANDed>" (nothing without filters). Values must be valid. */
static void pg_sql_where(pg_str *q, pg_params *ps, const store_table *t, const pg_table_info *ti,
                         const store_filter *filters, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const store_filter *f = &filters[i];
    pg_str_add(q, i == 0 ? " WHERE (" : " AND (");
    if (f->op == STORE_IN) {
      const cJSON *v;
      bool first = true;
      cJSON_ArrayForEach(v, f->value) {
        pg_str_add(q, first ? "(" : " OR (");
        pg_sql_compare(q, ps, t, ti, f->col, STORE_EQ, v);
        pg_str_add(q, ")");
        first = false;
      }
    } else {
      pg_sql_compare(q, ps, t, ti, f->col, f->op, f->value);
    }
    pg_str_add(q, ")");
  }
}

/* Reads -------------------------------------------------------------------------------- */

static int pg_get_record(store_t *s, const store_table *t, const char *key, cJSON **row,
                         int64_t *version) {
  pg_store *p = pg_of(s);
  const pg_table_info *ti = pg_info(p, t);
  pg_str q = {0};
  pg_params ps = {0};
  PGresult *r = NULL;

  *row = NULL;
  *version = 0;
  int ret = pg_ready(p);
  if (ret == 0) ret = pg_key_check(p, t, key);
  if (ret < 0) return ret;
  /* One statement, one snapshot: the version belongs to the row read. */
  pg_str_add(&q, "SELECT k, j::text, (SELECT max(seq) FROM audit_log WHERE tbl = $2 AND key = k) "
                 "FROM (");
  pg_sql_select(&q, t, ti);
  pg_str_add(&q, " WHERE ");
  pg_param(&ps, key);
  pg_param(&ps, t->name);
  pg_sql_key_eq(&q, t, ti, 1);
  pg_str_add(&q, ") AS mcpsub_s (k, j)");
  ret = pg_run(p, q.data, &ps, &r, NULL, 0);
  if (ret == 0 && PQntuples(r) == 0) ret = -ENOENT;
  if (ret == 0) {
    *row = pg_row_json(PQgetvalue(r, 0, 1));
    *version = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
  }
  PQclear(r);
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

/*
 * Appends the key as ORDER BY and > compare it: text keys by bytes, as
 * SQLite. A key whose collation is not a bytes one is sorted under COLLATE
 * "C", which its primary key index cannot serve: every page then reads
 * the whole table (an index on (key COLLATE "C") serves it; operations.md).
 */
static void pg_sql_key_order(pg_str *q, const store_table *t, const pg_table_info *ti) {
  pg_str_col(q, t->cols[t->key_col].name);
  const pg_column_info *key = &ti->cols[t->key_col];
  if (key->kind == PG_KIND_TEXT && !key->bytes) pg_str_add(q, " COLLATE \"C\"");
}

static int pg_query(store_t *s, const store_table *t, const store_filter *filters, size_t n_filters,
                    int limit, const char *after_key, cJSON **rows, char **next_key) {
  pg_store *p = pg_of(s);
  const pg_table_info *ti = pg_info(p, t);
  pg_str q = {0};
  pg_params ps = {0};
  PGresult *r = NULL;

  *rows = NULL;
  *next_key = NULL;
  if (limit < 1) limit = 1;
  if (limit > STORE_QUERY_MAX_LIMIT) limit = STORE_QUERY_MAX_LIMIT;
  if (after_key != NULL && !store_key_valid(t, after_key)) return -EINVAL;
  if (!store_filters_valid(t, filters, n_filters)) return -EINVAL;
  int ret = pg_ready(p);
  if (ret == 0 && after_key != NULL && (ret = pg_key_check(p, t, after_key)) == -ENOENT)
    ret = -EINVAL;
  if (ret < 0) return ret;

  pg_sql_select(&q, t, ti);
  pg_sql_where(&q, &ps, t, ti, filters, n_filters);
  if (after_key != NULL) {
    pg_str_add(&q, n_filters == 0 ? " WHERE " : " AND ");
    pg_sql_key_order(&q, t, ti);
    pg_str_add(&q, " > $%d::%s", pg_param(&ps, after_key), ti->key_cast);
  }
  pg_str_add(&q, " ORDER BY ");
  pg_sql_key_order(&q, t, ti);
  pg_str_add(&q, " LIMIT $%d::int8", pg_param_int(&ps, limit + 1));
  ret = pg_run(p, q.data, &ps, &r, NULL, 0);
  if (ret == 0) {
    int n = PQntuples(r);
    cJSON *result = store_json_checked(cJSON_CreateArray());
    for (int i = 0; i < n && i < limit; i++)
      cJSON_AddItemToArray(result, pg_row_json(PQgetvalue(r, i, 1)));
    if (n > limit) *next_key = mem_strdup(PQgetvalue(r, limit - 1, 0));
    *rows = result;
  }
  PQclear(r);
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

static int pg_count_where(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                          int64_t *count) {
  pg_store *p = pg_of(s);
  *count = 0;
  if (!store_filters_valid(t, filters, n)) return -EINVAL;
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  pg_str q = {0};
  pg_params ps = {0};
  pg_str_add(&q, "SELECT count(*) FROM ");
  pg_str_ident(&q, t->name);
  pg_str_add(&q, " AS " PG_ROW);
  pg_sql_where(&q, &ps, t, pg_info(p, t), filters, n);
  ret = pg_run_int64(p, q.data, &ps, count, NULL, 0);
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

static int pg_table_version(store_t *s, const store_table *t, int64_t *version) {
  pg_store *p = pg_of(s);
  *version = 0;
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  pg_params ps = {0};
  pg_param(&ps, t->name);
  ret = pg_run_int64(p, "SELECT max(seq) FROM audit_log WHERE tbl = $1", &ps, version, NULL, 0);
  pg_params_finish(&ps);
  return ret;
}

static int pg_table_count(store_t *s, const store_table *t, int64_t *count) {
  pg_store *p = pg_of(s);
  *count = 0;
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  pg_str q = {0};
  pg_str_add(&q, "SELECT count(*) FROM ");
  pg_str_ident(&q, t->name);
  ret = pg_run_int64(p, q.data, NULL, count, NULL, 0);
  free(q.data);
  return ret;
}

/* Writes --------------------------------------------------------------------------------- */

static int pg_row_exists(pg_store *p, const store_table *t, const char *key, bool *exists,
                         char *err, size_t errlen) {
  pg_str q = {0};
  pg_params ps = {0};
  int64_t found = 0;
  pg_str_add(&q, "SELECT count(*) FROM ");
  pg_str_ident(&q, t->name);
  pg_str_add(&q, " AS " PG_ROW " WHERE ");
  pg_sql_key_eq(&q, t, pg_info(p, t), pg_param(&ps, key));
  int ret = pg_run_int64(p, q.data, &ps, &found, err, errlen);
  *exists = found > 0;
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

/*
 * PUT: one upsert on the key; columns not given take their default, as on
 * insert. Whether the row was there is counted in the upsert's own
 * snapshot (a WITH query sees the table as the statement began), not in a
 * round trip of its own.
 */
static int pg_write_replace(pg_store *p, const store_table *t, const char *key,
                            const store_assign *assigns, int n, bool *created, char *err,
                            size_t errlen) {
  const pg_table_info *ti = pg_info(p, t);
  pg_str q = {0};
  pg_params ps = {0};
  PGresult *r = NULL;
  pg_param(&ps, key);
  pg_str_add(&q, "WITH mcpsub_prior AS (SELECT count(*) AS n FROM ");
  pg_str_ident(&q, t->name);
  pg_str_add(&q, " AS " PG_ROW " WHERE ");
  pg_sql_key_eq(&q, t, ti, 1);
  pg_str_add(&q, ") INSERT INTO ");
  pg_str_ident(&q, t->name);
  pg_str_add(&q, " (");
  pg_str_ident(&q, t->cols[t->key_col].name);
  for (int i = 0; i < n; i++) {
    pg_str_add(&q, ", ");
    pg_str_ident(&q, t->cols[assigns[i].col].name);
  }
  pg_str_add(&q, ")%s VALUES ($1",
             ti->cols[t->key_col].identity_always ? " OVERRIDING SYSTEM VALUE" : "");
  for (int i = 0; i < n; i++) pg_str_add(&q, ", $%d", pg_param_json(&ps, assigns[i].value));
  pg_str_add(&q, ") ON CONFLICT (");
  pg_str_ident(&q, t->cols[t->key_col].name);
  pg_str_add(&q, ") DO ");
  bool any = false;
  for (int c = 0; c < t->n_cols; c++) {
    if (c == t->key_col || t->cols[c].generated || ti->cols[c].identity_always) continue;
    pg_str_add(&q, any ? ", " : "UPDATE SET ");
    pg_str_ident(&q, t->cols[c].name);
    pg_str_add(&q, " = excluded.");
    pg_str_ident(&q, t->cols[c].name);
    any = true;
  }
  if (!any) pg_str_add(&q, "NOTHING");
  pg_str_add(&q, " RETURNING (SELECT n FROM mcpsub_prior)");
  int ret = pg_run(p, q.data, &ps, &r, err, errlen);
  /* DO NOTHING returns no row for a row that was there. */
  *created = ret == 0 && PQntuples(r) > 0 && strcmp(PQgetvalue(r, 0, 0), "0") == 0;
  PQclear(r);
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

/* PATCH: the given columns of an existing row. */
static int pg_write_patch(pg_store *p, const store_table *t, const char *key,
                          const store_assign *assigns, int n, char *err, size_t errlen) {
  bool exists;
  int ret = pg_row_exists(p, t, key, &exists, err, errlen);
  if (ret < 0) return ret;
  if (!exists) {
    store_set_err(err, errlen, "no record %s in table %s", key, t->name);
    return -ENOENT;
  }
  if (n == 0) return 0;
  pg_str q = {0};
  pg_params ps = {0};
  pg_param(&ps, key);
  pg_str_add(&q, "UPDATE ");
  pg_str_ident(&q, t->name);
  pg_str_add(&q, " AS " PG_ROW);
  for (int i = 0; i < n; i++) {
    pg_str_add(&q, i == 0 ? " SET " : ", ");
    pg_str_ident(&q, t->cols[assigns[i].col].name);
    pg_str_add(&q, " = $%d", pg_param_json(&ps, assigns[i].value));
  }
  pg_str_add(&q, " WHERE ");
  pg_sql_key_eq(&q, t, pg_info(p, t), 1);
  ret = pg_run(p, q.data, &ps, NULL, err, errlen);
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

/*
 * POST: a new row; the key from obj or from the column's default (identity,
 * serial). An integer key without a default takes the greatest key + 1, as
 * SQLite gives a rowid: the same schema file serves both stores (a
 * concurrent insert that took the same key fails -EEXIST, like any other).
 */
static int pg_write_insert(pg_store *p, const store_table *t, const cJSON *key_value,
                           const store_assign *assigns, int n, char **new_key, char *err,
                           size_t errlen) {
  const pg_table_info *ti = pg_info(p, t);
  pg_str q = {0};
  pg_params ps = {0};
  PGresult *r = NULL;
  pg_str_add(&q, "INSERT INTO ");
  pg_str_ident(&q, t->name);
  pg_str_add(&q, " AS " PG_ROW);
  bool next_key = key_value == NULL && t->key_integer && !ti->cols[t->key_col].defaulted;
  bool with_key = key_value != NULL || next_key;
  if (!with_key && n == 0) {
    pg_str_add(&q, " DEFAULT VALUES");
  } else {
    pg_str_add(&q, " (");
    if (with_key) pg_str_ident(&q, t->cols[t->key_col].name);
    for (int i = 0; i < n; i++) {
      if (with_key || i > 0) pg_str_add(&q, ", ");
      pg_str_ident(&q, t->cols[assigns[i].col].name);
    }
    pg_str_add(&q, ")%s VALUES (",
               key_value != NULL && ti->cols[t->key_col].identity_always
                   ? " OVERRIDING SYSTEM VALUE"
                   : "");
    if (key_value != NULL) {
      pg_str_add(&q, "$%d", pg_param_json(&ps, key_value));
    } else if (next_key) {
      pg_str_add(&q, "(SELECT coalesce(max(");
      pg_str_ident(&q, t->cols[t->key_col].name);
      pg_str_add(&q, "), 0) + 1 FROM ");
      pg_str_ident(&q, t->name);
      pg_str_add(&q, ")");
    }
    for (int i = 0; i < n; i++)
      pg_str_add(&q, "%s$%d", with_key || i > 0 ? ", " : "", pg_param_json(&ps, assigns[i].value));
    pg_str_add(&q, ")");
  }
  pg_str_add(&q, " RETURNING ");
  pg_sql_key_text(&q, t);
  int ret = pg_run(p, q.data, &ps, &r, err, errlen);
  if (ret == 0) *new_key = mem_strdup(PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
  PQclear(r);
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

/*
 * The guard's row scope on the row with key (NULL key: nothing to check):
 * 0 when the row is absent or in scope, -EACCES when another's.
 */
static int pg_guard_check(pg_store *p, const store_table *t, const char *key, const store_guard *g,
                          char *err, size_t errlen) {
  if (g == NULL || g->scope_column == NULL || key == NULL) return 0;
  int col = store_column_index(t, g->scope_column);
  if (col < 0) {
    store_set_err(err, errlen, "the row scope's column %s is not in table %s", g->scope_column,
                  t->name);
    return -EACCES;
  }
  const pg_table_info *ti = pg_info(p, t);
  pg_str q = {0};
  pg_params ps = {0};
  PGresult *r = NULL;
  pg_str_add(&q, "SELECT ");
  pg_sql_text_expr(&q, t, ti, col);
  pg_str_add(&q, " FROM ");
  pg_str_ident(&q, t->name);
  pg_str_add(&q, " AS " PG_ROW " WHERE ");
  pg_sql_key_eq(&q, t, ti, pg_param(&ps, key));
  int ret = pg_run(p, q.data, &ps, &r, err, errlen);
  if (ret == 0 && PQntuples(r) > 0 &&
      (PQgetisnull(r, 0, 0) || strcmp(PQgetvalue(r, 0, 0), g->scope_value) != 0)) {
    store_set_err(err, errlen, "record %s of %s is outside your row scope", key, t->name);
    ret = -EACCES;
  }
  PQclear(r);
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

/*
 * Opens a write transaction (its savepoint in a group commit) whose audit
 * rows carry the guard's principal, set in the same round trip: one query
 * of two statements, the principal a quoted literal.
 */
static int pg_begin_write(pg_store *p, const store_guard *g, char *err, size_t errlen) {
  const char *who = g != NULL ? g->principal : NULL;
  /* In a group commit the setting lasts to the batch's end: a write without one clears it. */
  if (who == NULL && !p->batch) return pg_begin(p, err, errlen);
  if (p->lost || p->conn == NULL) return -ENOTCONN; /* its callers were pg_ready just before */
  char *lit = PQescapeLiteral(p->conn, who != NULL ? who : "", who != NULL ? strlen(who) : 0);
  if (lit == NULL) {
    store_set_err(err, errlen, "%s", PQerrorMessage(p->conn));
    return -ENOMEM;
  }
  pg_str q = {0};
  pg_str_add(&q, "SELECT set_config('mcpsub.principal', %s, true)", lit);
  PQfreemem(lit);
  int ret = pg_begin_then(p, q.data, err, errlen);
  free(q.data);
  return ret;
}

/*
 * The written row is not read here (row stays NULL: its caller reads it
 * after the commit). In the write's transaction it would be one more round
 * trip inside it: a fifth fewer writes on one connection.
 */
static int pg_write_as(store_t *s, const store_table *t, const char *key, const cJSON *obj,
                       store_write_mode mode, const store_guard *guard, char **out_key,
                       bool *created, cJSON **row, int64_t *version, char *err, size_t errlen) {
  (void)row;
  (void)version;
  pg_store *p = pg_of(s);
  store_assign *assigns = mem_calloc((size_t)t->n_cols + 1, sizeof(*assigns));
  const cJSON *key_value = NULL;
  char *new_key = NULL;
  bool was_created = false, in_txn = false;
  int n = 0, ret;

  if (out_key != NULL) *out_key = NULL;
  if (created != NULL) *created = false;
  if (mode != STORE_WRITE_INSERT) {
    if (key == NULL) {
      store_set_err(err, errlen, "a record key is required");
      ret = -EINVAL;
      goto done;
    }
    ret = pg_ready(p);
    if (ret == 0) ret = pg_key_check(p, t, key);
    if (ret == -ENOENT) {
      if (mode == STORE_WRITE_REPLACE) {
        store_set_err(err, errlen, "key %s is not a valid %s", key, pg_info(p, t)->key_cast);
        ret = -EINVAL;
      } else {
        store_set_err(err, errlen, "no record %s in table %s", key, t->name);
        ret = -ENOENT;
      }
    }
    if (ret < 0) goto done;
  } else {
    key = NULL;
  }
  ret = store_write_parse(t, key, obj, assigns, &n, &key_value, err, errlen);
  if (ret == 0) ret = pg_ready(p);
  if (ret < 0) goto done;

  ret = pg_begin_write(p, guard, err, errlen);
  in_txn = true;
  if (ret == 0) ret = pg_guard_check(p, t, key, guard, err, errlen);
  if (ret < 0) goto done;
  switch (mode) {
  case STORE_WRITE_REPLACE:
    ret = pg_write_replace(p, t, key, assigns, n, &was_created, err, errlen);
    if (ret == 0) new_key = mem_strdup(key);
    break;
  case STORE_WRITE_PATCH:
    ret = pg_write_patch(p, t, key, assigns, n, err, errlen);
    if (ret == 0) new_key = mem_strdup(key);
    break;
  case STORE_WRITE_INSERT:
    ret = pg_write_insert(p, t, key_value, assigns, n, &new_key, err, errlen);
    was_created = ret == 0;
    break;
  default: store_set_err(err, errlen, "unknown write mode"); ret = -EINVAL;
  }
  /* What was written must be in the scope too: nobody writes rows into another's. */
  if (ret == 0) ret = pg_guard_check(p, t, new_key, guard, err, errlen);
  if (ret == 0) ret = pg_commit(p, err, errlen);
  if (ret < 0) goto done;
  in_txn = false;
  if (out_key != NULL) {
    *out_key = new_key;
    new_key = NULL;
  }
  if (created != NULL) *created = was_created;

done:
  if (in_txn) pg_rollback(p);
  free(new_key);
  free(assigns);
  return ret;
}

/* DELETE of one row in the current transaction (or its own); -ENOENT when there was none. */
static int pg_delete_row(pg_store *p, const store_table *t, const char *key, char *err,
                         size_t errlen) {
  pg_str q = {0};
  pg_params ps = {0};
  int64_t changes = 0;
  pg_str_add(&q, "DELETE FROM ");
  pg_str_ident(&q, t->name);
  pg_str_add(&q, " AS " PG_ROW " WHERE ");
  pg_sql_key_eq(&q, t, pg_info(p, t), pg_param(&ps, key));
  int ret = pg_run_changes(p, q.data, &ps, &changes, err, errlen);
  if (ret == 0 && changes == 0) ret = -ENOENT;
  pg_params_finish(&ps);
  free(q.data);
  return ret;
}

static int pg_delete_as(store_t *s, const store_table *t, const char *key, const store_guard *guard,
                        char *err, size_t errlen) {
  pg_store *p = pg_of(s);
  int ret = pg_ready(p);
  if (ret == 0) ret = pg_key_check(p, t, key);
  if (ret < 0) return ret;
  if (guard == NULL) return pg_delete_row(p, t, key, err, errlen);
  ret = pg_begin_write(p, guard, err, errlen);
  if (ret == 0) ret = pg_guard_check(p, t, key, guard, err, errlen);
  if (ret == 0) ret = pg_delete_row(p, t, key, err, errlen);
  if (ret == 0) ret = pg_commit(p, err, errlen);
  if (ret < 0) pg_rollback(p);
  return ret;
}

static int pg_bulk_as(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                      const cJSON *set, const store_guard *guard, int64_t *changed, char *err,
                      size_t errlen) {
  pg_store *p = pg_of(s);
  store_assign *assigns = NULL;
  int n_assign = 0, ret = 0;
  pg_str q = {0};
  pg_params ps = {0};

  *changed = 0;
  ret = store_bulk_parse(t, filters, n, set, guard, &assigns, &n_assign, err, errlen);
  if (ret < 0) goto done;
  ret = pg_ready(p);
  if (ret < 0) goto done;

  if (set == NULL) {
    pg_str_add(&q, "DELETE FROM ");
    pg_str_ident(&q, t->name);
    pg_str_add(&q, " AS " PG_ROW);
  } else {
    pg_str_add(&q, "UPDATE ");
    pg_str_ident(&q, t->name);
    pg_str_add(&q, " AS " PG_ROW);
    for (int i = 0; i < n_assign; i++) {
      pg_str_add(&q, i == 0 ? " SET " : ", ");
      pg_str_ident(&q, t->cols[assigns[i].col].name);
      pg_str_add(&q, " = $%d", pg_param_json(&ps, assigns[i].value));
    }
  }
  pg_sql_where(&q, &ps, t, pg_info(p, t), filters, n);
  ret = pg_begin_write(p, guard, err, errlen);
  if (ret == 0) ret = pg_run_changes(p, q.data, &ps, changed, err, errlen);
  if (ret == 0) ret = pg_commit(p, err, errlen);
  if (ret < 0) {
    pg_rollback(p);
    *changed = 0;
  }
done:
  pg_params_finish(&ps);
  free(q.data);
  free(assigns);
  return ret;
}

/* Audit log: commit order ---------------------------------------------------------------- */

/* A pg_snapshot's text "xmin:xmax:xip,...": its oldest transaction still running. */
static bool pg_snapshot_xmin(const char *text, uint64_t *xmin) {
  char *end;
  *xmin = strtoull(text, &end, 10);
  return *end == ':';
}

static int pg_current_xmin(pg_store *p, uint64_t *xmin) {
  PGresult *r;
  int ret = pg_run(p, "SELECT pg_current_snapshot()::text", NULL, &r, NULL, 0);
  if (ret < 0) return ret;
  if (PQntuples(r) != 1 || !pg_snapshot_xmin(PQgetvalue(r, 0, 0), xmin)) ret = -EIO;
  PQclear(r);
  return ret;
}

/*
 * What a snapshot with this xmin settles: the remembered gap, once every
 * transaction older than the remembered id has ended. (xmin is the oldest
 * transaction the snapshot saw running; one that got its id after the
 * snapshot's xmax is not listed, but its id is above xmin too.)
 */
static void pg_settle(pg_store *p, uint64_t xmin) {
  if (p->pending && xmin >= p->pending_xid) {
    if (p->pending_upto > p->settled) p->settled = p->pending_upto;
    p->pending = false;
    p->settled_known = true;
  }
}

/*
 * Remembers that every seq <= upto was taken by a transaction that already
 * had its id: upto must have been read (a visible row, the sequence's
 * value) before this call. The bound is a transaction id newer than all of
 * those, our own: pg_current_xact_id() in its own statement (one xid and
 * one commit record, once per gap episode). A snapshot's xmax would not
 * do: it is one past the newest *ended* transaction, and a transaction
 * still running may hold a greater id. One memory at a time: the older one
 * is kept, since replacing it would postpone it under load.
 */
static int pg_remember_gap(pg_store *p, int64_t upto) {
  if (p->pending) return 0;
  int64_t xid = 0;
  int ret = pg_run_int64(p, "SELECT pg_current_xact_id()::text", NULL, &xid, NULL, 0);
  if (ret < 0) return ret;
  p->pending = true;
  p->pending_upto = upto;
  p->pending_xid = (uint64_t)xid;
  return 0;
}

/* The highest seq the audit_log sequence has handed out (0: none). */
static int pg_seq_last(pg_store *p, int64_t *last) {
  return pg_run_int64(p,
                      "SELECT pg_sequence_last_value(pg_get_serial_sequence('audit_log', 'seq'))",
                      NULL, last, NULL, 0);
}

/*
 * Extends p->settled along the visible rows that follow it without a gap,
 * up to last; at most PG_HORIZON_SCAN seqs. Returns 0 or an error.
 */
static int pg_extend_settled(pg_store *p, int64_t last) {
  pg_params ps = {0};
  int64_t end = 0;
  pg_param_int(&ps, p->settled);
  pg_param_int(&ps, last);
  pg_param_int(&ps, PG_HORIZON_SCAN);
  /* The rows of the unbroken run after $1 are those whose seq - rank is $1. */
  int ret = pg_run_int64(p,
                         "SELECT max(seq) FROM (SELECT seq, seq - row_number() OVER (ORDER BY seq) "
                         "AS base FROM (SELECT seq FROM audit_log WHERE seq > $1::int8 AND seq <= "
                         "$2::int8 ORDER BY seq LIMIT $3::int8) AS a) AS b WHERE base = $1::int8",
                         &ps, &end, NULL, 0);
  pg_params_finish(&ps);
  if (ret == 0 && end > p->settled) p->settled = end;
  return ret;
}

/*
 * pg_extend_settled over any distance: when every seq up to last is visible
 * (one count on the index), at once; else run by run up to the first gap.
 */
static int pg_extend_settled_to(pg_store *p, int64_t last) {
  pg_params ps = {0};
  int64_t n = 0;
  pg_param_int(&ps, p->settled);
  pg_param_int(&ps, last);
  int ret =
      pg_run_int64(p, "SELECT count(*) FROM audit_log WHERE seq > $1::int8 AND seq <= $2::int8",
                   &ps, &n, NULL, 0);
  pg_params_finish(&ps);
  if (ret == 0 && n == last - p->settled) {
    p->settled = last;
    return 0;
  }
  for (int64_t before = -1; ret == 0 && p->settled < last && p->settled != before;) {
    before = p->settled;
    ret = pg_extend_settled(p, last);
  }
  return ret;
}

/*
 * The horizon: the highest seq at or below which no audit row can still
 * appear (see "Commit order" at the top); readers start from it. Known the
 * horizon, it is extended along the visible rows up to the sequence's last
 * value, and stops before a gap that may still fill. A handle that knows
 * none yet (a fresh one) waits, up to PG_HORIZON_WAIT_MS, for the
 * transactions running now to end. Pruning never lowers it: the sequence
 * never goes back.
 */
static int pg_audit_max_seq(store_t *s, int64_t *seq) {
  pg_store *p = pg_of(s);
  int64_t last = 0, pruned = 0;
  uint64_t xmin;
  *seq = 0;
  int ret = pg_ready(p);
  if (ret == 0 && !p->settled_known)
    ret = pg_run_int64(p, "SELECT value FROM mcpsub_state WHERE name = 'audit_pruned_through'",
                       NULL, &pruned, NULL, 0);
  if (ret == 0) ret = pg_seq_last(p, &last);
  if (ret < 0) return ret;
  /* Retention deletes only below a horizon (pg_audit_prune): below it all is settled. */
  if (pruned > p->settled) p->settled = pruned;
  for (int waited = 0;; waited += 5) {
    if (p->settled < last) {
      /* From the database, not from how far a reader has read (a big commit may be far ahead). */
      ret = pg_extend_settled_to(p, last);
      if (ret < 0) return ret;
    }
    if (p->settled >= last) {
      p->settled_known = true;
      break;
    }
    ret = pg_remember_gap(p, last);
    if (ret == 0) ret = pg_current_xmin(p, &xmin);
    if (ret < 0) return ret;
    pg_settle(p, xmin);
    if (p->settled >= last) continue; /* settled at once: extend and stop */
    if (p->settled_known) break;      /* stop before the gap */
    if (waited >= PG_HORIZON_WAIT_MS) {
      /* Long transactions: trust all but the newest PG_HORIZON_SCAN seqs, and say so. */
      log_warn("audit horizon unknown: transactions stay open; changes they commit below the "
               "newest seqs may be missed by readers starting now");
      if (last - PG_HORIZON_SCAN > p->settled) p->settled = last - PG_HORIZON_SCAN;
      ret = pg_extend_settled(p, last);
      if (ret < 0) return ret;
      break;
    }
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  *seq = p->settled < last ? p->settled : last;
  return 0;
}

/* The columns of an audit row, for pg_audit_row_call. */
#define PG_AUDIT_COLUMNS "seq, tbl, key, op, old_row::text, new_row::text, committed_at, principal"

/* Hands row i of r (PG_AUDIT_COLUMNS from column first) to fn; returns fn's answer. */
static int pg_audit_row_call(pg_store *p, PGresult *r, int i, int first,
                             int (*fn)(const store_audit_row *row, void *data), void *data) {
  store_audit_row row = {
      .nonfinite_strings = &p->base,
      .seq = strtoll(PQgetvalue(r, i, first), NULL, 10),
      .table = PQgetvalue(r, i, first + 1),
      .key = PQgetvalue(r, i, first + 2),
      .op = PQgetvalue(r, i, first + 3),
      .old_json = PQgetisnull(r, i, first + 4) ? NULL : PQgetvalue(r, i, first + 4),
      .new_json = PQgetisnull(r, i, first + 5) ? NULL : PQgetvalue(r, i, first + 5),
      .committed_at = strtoll(PQgetvalue(r, i, first + 6), NULL, 10),
      .principal = PQgetisnull(r, i, first + 7) ? NULL : PQgetvalue(r, i, first + 7),
  };
  int stop = fn(&row, data);
  cJSON_Delete(row.old_parsed);
  cJSON_Delete(row.new_parsed);
  return stop;
}

/*
 * Never skips a row and never hands one out twice, though PostgreSQL may
 * commit a lower seq after a higher one (see "Commit order" at the top):
 * one statement reads the visible rows after after_seq together with its
 * own snapshot; rows go out while their seqs follow each other; at a gap,
 * the read goes on past it only when the gap can no longer fill (every
 * transaction that had an id when the gap was first seen has ended), and
 * otherwise stops there. A gap seen for the first time is remembered and
 * checked once more at once (a rollback with nothing else running settles
 * immediately), then the read resumes; up to PG_GAP_RETRIES gaps per call.
 */
static int pg_audit_read(store_t *s, int64_t after_seq, int limit,
                         int (*fn)(const store_audit_row *row, void *data), void *data, int *n) {
  pg_store *p = pg_of(s);
  int count = 0, retries = 0;

  if (n != NULL) *n = 0;
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  for (;;) {
    pg_params ps = {0};
    PGresult *r = NULL;
    uint64_t xmin;
    pg_param_int(&ps, after_seq);
    pg_param_int(&ps, limit - count);
    ret = pg_run(p,
                 "SELECT pg_current_snapshot()::text, a.* FROM (SELECT 1) AS one LEFT JOIN "
                 "LATERAL (SELECT " PG_AUDIT_COLUMNS " FROM audit_log WHERE seq > $1::int8 "
                 "ORDER BY seq LIMIT $2::int8) AS a ON true",
                 &ps, &r, NULL, 0);
    pg_params_finish(&ps);
    if (ret < 0) break;
    if (!pg_snapshot_xmin(PQgetvalue(r, 0, 0), &xmin)) {
      PQclear(r);
      ret = -EIO;
      break;
    }
    pg_settle(p, xmin);
    int rows = PQgetisnull(r, 0, 1) ? 0 : PQntuples(r);
    int64_t newest = rows > 0 ? strtoll(PQgetvalue(r, rows - 1, 1), NULL, 10) : 0;
    int64_t gap_end = 0; /* the last seq of a gap that stopped the read */
    bool stop = false;
    /* Whether the rows handed out extend the settled horizon (they follow it without a gap). */
    bool chained = after_seq <= p->settled;
    for (int i = 0; i < rows && !stop; i++) {
      int64_t seq = strtoll(PQgetvalue(r, i, 1), NULL, 10);
      if (seq != after_seq + 1 && seq - 1 > p->settled) {
        gap_end = seq - 1;
        break;
      }
      if (chained && seq > p->settled) p->settled = seq;
      after_seq = seq;
      count++;
      stop = pg_audit_row_call(p, r, i, 1, fn, data) != 0;
    }
    PQclear(r);
    if (stop || gap_end == 0 || retries == PG_GAP_RETRIES || count >= limit) break;
    /* A gap: remember it, and look once more at once. */
    retries++;
    ret = pg_remember_gap(p, newest);
    if (ret == 0) ret = pg_current_xmin(p, &xmin);
    if (ret < 0) break;
    pg_settle(p, xmin);
    if (gap_end > p->settled) break;
  }
  if (n != NULL) *n = count;
  return count > 0 ? 0 : ret;
}

/* Hands r's rows (PG_AUDIT_COLUMNS) to fn until it returns non-zero: the number handed. */
static int pg_audit_rows(pg_store *p, PGresult *r,
                         int (*fn)(const store_audit_row *row, void *data), void *data) {
  int i = 0;
  while (i < PQntuples(r))
    if (pg_audit_row_call(p, r, i++, 0, fn, data) != 0) break;
  return i;
}

/* Positions below the tailer's are settled: no gap to wait for, as pg_audit_read must. */
static int pg_audit_read_of(store_t *s, const char *table, const char *key, int64_t after_seq,
                            int64_t upto_seq, int limit,
                            int (*fn)(const store_audit_row *row, void *data), void *data, int *n) {
  pg_store *p = pg_of(s);
  pg_params ps = {0};
  PGresult *r = NULL;
  int count = 0;
  if (n != NULL) *n = 0;
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  pg_param(&ps, table);
  pg_param(&ps, key);
  pg_param_int(&ps, after_seq);
  pg_param_int(&ps, upto_seq);
  pg_param_int(&ps, limit);
  ret = pg_run(p,
               key != NULL ? "SELECT " PG_AUDIT_COLUMNS " FROM audit_log WHERE tbl = $1 AND "
                             "key = $2 AND seq > $3::int8 AND seq <= $4::int8 ORDER BY seq "
                             "LIMIT $5::int8"
                           : "SELECT " PG_AUDIT_COLUMNS " FROM audit_log WHERE tbl = $1 AND "
                             "$2::text IS NULL AND seq > $3::int8 AND seq <= $4::int8 "
                             "ORDER BY seq LIMIT $5::int8",
               &ps, &r, NULL, 0);
  pg_params_finish(&ps);
  if (ret == 0) count = pg_audit_rows(p, r, fn, data);
  PQclear(r);
  if (n != NULL) *n = count;
  return ret;
}

/* The newest limit rows (of table, unless NULL), oldest first: the operator's view. */
static int pg_audit_list(store_t *s, const char *table, int limit,
                         int (*fn)(const store_audit_row *row, void *data), void *data) {
  pg_store *p = pg_of(s);
  pg_params ps = {0};
  PGresult *r = NULL;
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  pg_param(&ps, table);
  pg_param_int(&ps, limit);
  ret = pg_run(p,
               "SELECT * FROM (SELECT " PG_AUDIT_COLUMNS " FROM audit_log "
               "WHERE ($1::text IS NULL OR tbl = $1) ORDER BY seq DESC LIMIT $2::int8) AS a "
               "ORDER BY seq",
               &ps, &r, NULL, 0);
  pg_params_finish(&ps);
  if (ret == 0) pg_audit_rows(p, r, fn, data);
  PQclear(r);
  return ret;
}

/* Audit log: wake-ups -------------------------------------------------------------------- */

/*
 * One step of (re)making the LISTEN connection (pg_redial: nothing before
 * its backoff's time), then LISTEN on it and make it non-blocking. NULL
 * when not (yet) made; a failure is logged and backs off.
 */
static PGconn *pg_listen_open(pg_store *p) {
  PGconn *c = pg_redial_step(&p->listen_redial, p->target);
  if (c == NULL) return NULL;
  bool timed_out = false;
  PGresult *r = PQsetnonblocking(c, 1) == 0
                    ? pg_conn_roundtrip(p, c, "LISTEN " PG_CHANNEL, NULL, false, &timed_out)
                    : NULL;
  bool ok = r != NULL && PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  if (ok) return c;
  pg_redial_failed(&p->listen_redial, PQerrorMessage(c));
  PQfinish(c);
  return NULL;
}

/*
 * (Re)opens the LISTEN connection and a duplicate of its socket, which is
 * what the caller polls: libpq closes its own descriptor the moment it sees
 * the connection end, and a new connection could then get the same number
 * while the caller still polls it. Our duplicate keeps the number taken
 * until the caller has moved to the new one (pg_data_version). Returns
 * whether it is open.
 */
static bool pg_listen_connect(pg_store *p) {
  p->listen = pg_listen_open(p);
  p->listen_fd = -1;
  if (p->listen == NULL) return false;
  p->listen_fd = fcntl(PQsocket(p->listen), F_DUPFD_CLOEXEC, 0);
  if (p->listen_fd < 0) {
    log_warn("cannot duplicate the LISTEN socket", "error", strerror(errno));
    PQfinish(p->listen);
    p->listen = NULL;
    return false;
  }
  return true;
}

/*
 * The LISTEN connection's socket, opened on the first call. After a
 * reconnection (data_version) it is another socket: the caller polls the
 * new one; the old is closed only on the next data_version, so that the
 * caller can stop polling it first. -1 when not connected (data_version
 * makes it again, after a backoff, and then moves).
 */
static int pg_wake_fd(store_t *s) {
  pg_store *p = pg_of(s);
  if (p->listen == NULL && !p->listen_wanted) {
    pg_listen_connect(p);
    p->wake_count++; /* whatever came before the LISTEN: the caller reads once more */
  }
  p->listen_wanted = true;
  p->new_fd_pending = false;
  return p->listen_fd;
}

/*
 * Reads what the LISTEN connection c received; *moved is set when a
 * notification was among it. False when c is broken. A server that ends
 * the connection first sends an error, then closes: while the socket
 * stays readable after a read, read again, so that the close is seen now
 * and not on the next wake-up (which would never come).
 */
static bool pg_listen_drain(PGconn *c, bool *moved) {
  for (int round = 0; round < 4; round++) {
    if (PQconsumeInput(c) == 0 || PQstatus(c) != CONNECTION_OK) return false;
    PGnotify *note;
    while ((note = PQnotifies(c)) != NULL) {
      PQfreemem(note);
      *moved = true;
    }
    struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
    if (poll(&pfd, 1, 0) != 1) return true;
  }
  return true;
}

/*
 * Moves when a NOTIFY arrived on the LISTEN connection (drained here), and
 * when that connection was made again after it broke (what was committed
 * meanwhile notified nobody: the caller reads to catch up). A broken one
 * is made again once the main connection is back, after its own backoff;
 * its old socket stays open until wake_fd handed out the next (the caller
 * may still poll it, and it reads as end of file). Before store_wake_fd is
 * ever called it moves on every call: the caller then always reads, which
 * is safe and cheap.
 */
static int pg_data_version(store_t *s, int64_t *version) {
  pg_store *p = pg_of(s);
  if (p->retired_fd >= 0 && !p->new_fd_pending) {
    close(p->retired_fd);
    p->retired_fd = -1;
  }
  if (!p->listen_wanted) {
    *version = ++p->wake_count;
    return 0;
  }
  bool moved = false;
  if (p->listen != NULL && !pg_listen_drain(p->listen, &moved)) {
    char text[256];
    snprintf(text, sizeof(text), "%s", PQerrorMessage(p->listen));
    text[strcspn(text, "\n")] = '\0';
    log_warn("lost the LISTEN connection to postgres; reconnecting", "error", text);
    if (p->retired_fd >= 0) close(p->retired_fd);
    p->retired_fd = p->listen_fd;
    p->listen_fd = -1;
    PQfinish(p->listen);
    p->listen = NULL;
    p->new_fd_pending = true;
    moved = true;
  }
  if (p->listen == NULL && pg_ready(p) == 0 && pg_listen_connect(p)) {
    log_info("listening to postgres for changes");
    p->new_fd_pending = true;
    moved = true;
  }
  if (moved) p->wake_count++;
  *version = p->wake_count;
  return 0;
}

/* Audit log: retention ------------------------------------------------------------------- */

/*
 * As the SQLite backend: never the newest change of a row that still
 * exists nor the newest change of an existing table. Only rows at or below
 * the horizon are deleted, so that audit_pruned_through never passes a seq
 * that could still appear.
 */
static int pg_audit_prune(store_t *s, store_prune *pr) {
  pg_store *p = pg_of(s);
  int64_t horizon = 0;
  pg_params ps = {0};
  PGresult *r = NULL;
  int ret = pg_audit_max_seq(s, &horizon);
  if (ret < 0) return ret;
  pg_param_int(&ps, pr->retain_rows > 0 ? pr->retain_rows : 0);
  pg_param_int(&ps, pr->retain_ms > 0 ? pr->retain_ms : 0);
  pg_param_int(&ps, pr->now_ms);
  pg_param_int(&ps, horizon);
  pg_param_int(&ps, pr->after);
  pg_param_int(&ps, pr->span > 0 ? pr->span : INT64_MAX);
  pg_param_int(&ps, pr->bound);
  ret = pg_begin(p, NULL, 0);
  /* The range as SQLite's (sq_audit_prune_range): the log read in seq order, never whole. */
  if (ret == 0)
    ret = pg_run(
        p,
        "WITH bound AS (SELECT CASE WHEN $7::int8 > 0 THEN $7::int8 ELSE greatest(CASE WHEN "
        "$1::int8 > 0 THEN m - $1::int8 ELSE 0 END, CASE WHEN $2::int8 > 0 THEN coalesce(("
        "SELECT seq FROM audit_log WHERE committed_at >= $3::int8 - $2::int8 ORDER BY seq "
        "LIMIT 1), m + 1) - 1 ELSE 0 END) END AS b "
        "FROM (SELECT coalesce(max(seq), 0) AS m FROM audit_log) AS newest), "
        "chunk AS (SELECT seq FROM audit_log WHERE seq > $5::int8 AND seq <= $4::int8 "
        "AND seq <= (SELECT b FROM bound) ORDER BY seq LIMIT $6::int8), "
        "span AS (SELECT coalesce(max(seq), $5::int8) AS hi, count(*) AS n FROM chunk), "
        "gone AS (DELETE FROM audit_log AS a WHERE a.seq > $5::int8 AND "
        "a.seq <= (SELECT hi FROM span) "
        "AND NOT (EXISTS (SELECT 1 FROM pg_class c WHERE c.relname = a.tbl AND c.relnamespace "
        "= " PG_SQL_SCHEMA " AND c.relkind IN ('r', 'p')) AND ("
        " a.seq = (SELECT max(t.seq) FROM audit_log AS t WHERE t.tbl = a.tbl)"
        " OR (a.op <> 'DELETE' AND a.seq = (SELECT max(k.seq) FROM audit_log AS k"
        "  WHERE k.tbl = a.tbl AND k.key = a.key)))) RETURNING a.seq), "
        "noted AS (INSERT INTO mcpsub_state (name, value) "
        "SELECT 'audit_pruned_through', max(seq) FROM gone HAVING count(*) > 0 "
        "ON CONFLICT (name) DO UPDATE SET value = greatest(mcpsub_state.value, excluded.value)) "
        "SELECT (SELECT count(*) FROM gone), hi, n, (SELECT b FROM bound) FROM span",
        &ps, &r, NULL, 0);
  if (ret == 0) ret = pg_commit(p, NULL, 0);
  if (ret == 0) {
    int64_t examined = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
    pr->deleted = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    pr->after = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    pr->bound = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
    pr->more = pr->span > 0 && examined == pr->span;
  }
  if (ret < 0) pg_rollback(p);
  PQclear(r);
  pg_params_finish(&ps);
  return ret;
}

static int pg_audit_pruned_through(store_t *s, int64_t *seq) {
  pg_store *p = pg_of(s);
  *seq = 0;
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  return pg_run_int64(p, "SELECT value FROM mcpsub_state WHERE name = 'audit_pruned_through'", NULL,
                      seq, NULL, 0);
}

static int pg_counts(store_t *s, int64_t *sessions, int64_t *audit_rows) {
  pg_store *p = pg_of(s);
  PGresult *r;
  *sessions = *audit_rows = 0;
  int ret = pg_ready(p);
  if (ret == 0)
    ret = pg_run(p, "SELECT (SELECT count(*) FROM mcp_session), (SELECT count(*) FROM audit_log)",
                 NULL, &r, NULL, 0);
  if (ret < 0) return ret;
  *sessions = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  *audit_rows = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
  PQclear(r);
  return 0;
}

/* Sessions ------------------------------------------------------------------------------------ */

/* The subscriptions as the JSON list they were stored as before: URIs, or {uri, debounce}. */
#define PG_SESSION_COLUMNS                                                                         \
  "id, created_at, last_seen, protocol_version, client_info, client_capabilities, log_level, "     \
  "(SELECT coalesce(json_agg(CASE WHEN debounce IS NULL THEN to_json(uri) ELSE "                   \
  "json_build_object('uri', uri, 'debounce', debounce::json) END ORDER BY uri COLLATE \"C\"), "    \
  "'[]') FROM mcpsub_subscription WHERE session = mcp_session.id)::text, principal"

static char *pg_value_strdup(PGresult *r, int row, int col) {
  return PQgetisnull(r, row, col) ? NULL : mem_strdup(PQgetvalue(r, row, col));
}

/* Fills ss from row of a PG_SESSION_COLUMNS result. */
static void pg_session_from_row(PGresult *r, int row, store_session *ss) {
  memset(ss, 0, sizeof(*ss));
  snprintf(ss->id, sizeof(ss->id), "%s", PQgetvalue(r, row, 0));
  ss->created_at = strtoll(PQgetvalue(r, row, 1), NULL, 10);
  ss->last_seen = strtoll(PQgetvalue(r, row, 2), NULL, 10);
  snprintf(ss->protocol_version, sizeof(ss->protocol_version), "%s", PQgetvalue(r, row, 3));
  ss->client_info = pg_value_strdup(r, row, 4);
  ss->client_capabilities = pg_value_strdup(r, row, 5);
  ss->log_level = pg_value_strdup(r, row, 6);
  ss->subscriptions = pg_value_strdup(r, row, 7);
  if (ss->subscriptions == NULL) ss->subscriptions = mem_strdup("[]");
  ss->principal = pg_value_strdup(r, row, 8);
  if (ss->principal == NULL) ss->principal = mem_strdup("anonymous");
}

/* Runs sql with parameters a, b, c (each may be NULL; only the first n used); *changes may be NULL.
 */
static int pg_run3(pg_store *p, const char *sql, int n, const char *a, const char *b, const char *c,
                   int64_t *changes) {
  pg_params ps = {0};
  const char *v[3] = {a, b, c};
  for (int i = 0; i < n; i++) pg_param(&ps, v[i]);
  int ret = pg_run_changes(p, sql, &ps, changes, NULL, 0);
  pg_params_finish(&ps);
  return ret;
}

/* pg_run3 as a call of its own (not inside a transaction of ours). */
static int pg_run3_ready(pg_store *p, const char *sql, int n, const char *a, const char *b,
                         const char *c, int64_t *changes) {
  int ret = pg_ready(p);
  return ret < 0 ? ret : pg_run3(p, sql, n, a, b, c, changes);
}

static int pg_session_set_subscriptions(store_t *s, const char *id, const char *json_array);

static int pg_session_insert(store_t *s, const store_session *ss) {
  pg_store *p = pg_of(s);
  pg_params ps = {0};
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  pg_param(&ps, ss->id);
  pg_param_int(&ps, ss->created_at);
  pg_param_int(&ps, ss->last_seen);
  pg_param(&ps, ss->protocol_version);
  pg_param(&ps, ss->client_info);
  pg_param(&ps, ss->client_capabilities);
  pg_param(&ps, ss->log_level);
  pg_param(&ps, ss->principal ? ss->principal : "anonymous");
  ret = pg_run(p,
               "INSERT INTO mcp_session (id, created_at, last_seen, protocol_version, "
               "client_info, client_capabilities, log_level, principal) "
               "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
               &ps, NULL, NULL, 0);
  pg_params_finish(&ps);
  if (ret == 0 && ss->subscriptions != NULL && strcmp(ss->subscriptions, "[]") != 0)
    ret = pg_session_set_subscriptions(s, ss->id, ss->subscriptions);
  return ret;
}

static int pg_session_load(store_t *s, const char *id, store_session *ss) {
  pg_store *p = pg_of(s);
  pg_params ps = {0};
  PGresult *r;
  memset(ss, 0, sizeof(*ss));
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  pg_param(&ps, id);
  ret = pg_run(p, "SELECT " PG_SESSION_COLUMNS " FROM mcp_session WHERE id = $1", &ps, &r, NULL, 0);
  pg_params_finish(&ps);
  if (ret < 0) return ret;
  if (PQntuples(r) == 0)
    ret = -ENOENT;
  else
    pg_session_from_row(r, 0, ss);
  PQclear(r);
  return ret;
}

static int pg_session_touch(store_t *s, const char *id, int64_t last_seen) {
  char text[24];
  int64_t n = 0;
  snprintf(text, sizeof(text), "%" PRId64, last_seen);
  int ret = pg_run3_ready(pg_of(s), "UPDATE mcp_session SET last_seen = $2 WHERE id = $1", 2, id,
                          text, NULL, &n);
  return ret < 0 ? ret : n == 0 ? -ENOENT : 0;
}

static int pg_session_set_log_level(store_t *s, const char *id, const char *level) {
  int64_t n = 0;
  int ret = pg_run3_ready(pg_of(s), "UPDATE mcp_session SET log_level = $2 WHERE id = $1", 2, id,
                          level, NULL, &n);
  return ret < 0 ? ret : n == 0 ? -ENOENT : 0;
}

/* -ENOENT unless the session has a row. */
static int pg_session_exists(pg_store *p, const char *id) {
  pg_params ps = {0};
  int64_t n = 0;
  pg_param(&ps, id);
  int ret = pg_run_int64(p, "SELECT count(*) FROM mcp_session WHERE id = $1", &ps, &n, NULL, 0);
  pg_params_finish(&ps);
  return ret < 0 ? ret : n == 0 ? -ENOENT : 0;
}

static int pg_session_set_subscriptions(store_t *s, const char *id, const char *json_array) {
  pg_store *p = pg_of(s);
  int ret = pg_ready(p);
  if (ret == 0) ret = pg_begin(p, NULL, 0);
  if (ret == 0) ret = pg_session_exists(p, id);
  if (ret == 0)
    ret = pg_run3(p, "DELETE FROM mcpsub_subscription WHERE session = $1", 1, id, NULL, NULL, NULL);
  /* The last of a repeated URI wins, as SQLite's INSERT OR REPLACE has it. */
  if (ret == 0)
    ret = pg_run3(p,
                  "INSERT INTO mcpsub_subscription (session, uri, debounce) "
                  "SELECT DISTINCT ON (uri) $1, uri, debounce FROM (SELECT CASE jsonb_typeof(j) "
                  "WHEN 'string' THEN j #>> '{}' ELSE j ->> 'uri' END AS uri, "
                  "CASE jsonb_typeof(j -> 'debounce') WHEN 'string' THEN j ->> 'debounce' "
                  "WHEN 'null' THEN NULL ELSE (j -> 'debounce')::text END AS debounce, o "
                  "FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS e (j, o) "
                  "WHERE jsonb_typeof(j) = 'string' OR jsonb_typeof(j -> 'uri') = 'string') AS x "
                  "ORDER BY uri, o DESC",
                  2, id, json_array != NULL ? json_array : "[]", NULL, NULL);
  if (ret == 0) ret = pg_commit(p, NULL, 0);
  if (ret < 0) pg_rollback(p);
  return ret;
}

/*
 * Appends an audit row of mcpsub's own (table tbl: the subscription log or
 * the signal log, store.h) in the current transaction, which must have its
 * transaction id already (a row it changed, or pg_current_xact_id()): the
 * commit-order rule relies on the id being taken before this row's seq.
 * Also wakes the other hosts' tailers.
 */
static int pg_log_row(pg_store *p, const char *tbl, const char *id, bool put, const char *image) {
  pg_params ps = {0};
  pg_param(&ps, tbl);
  pg_param(&ps, id);
  pg_param(&ps, put ? "INSERT" : "DELETE");
  pg_param(&ps, put ? NULL : image);
  pg_param(&ps, put ? image : NULL);
  pg_param(&ps, p->base.origin);
  int ret =
      pg_run(p,
             "INSERT INTO audit_log (tbl, key, op, old_row, new_row, committed_at, principal) "
             "VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, "
             "(extract(epoch FROM clock_timestamp()) * 1000)::int8, $6)",
             &ps, NULL, NULL, 0);
  if (ret == 0) ret = pg_exec(p, "SELECT pg_notify('" PG_CHANNEL "', '')", NULL, 0);
  pg_params_finish(&ps);
  return ret;
}

static int pg_session_sub_put(store_t *s, const char *id, const char *uri, const char *debounce,
                              const char *topic_key) {
  pg_store *p = pg_of(s);
  int64_t n = 0;
  int ret = pg_ready(p);
  if (ret == 0) ret = pg_begin(p, NULL, 0);
  if (ret == 0)
    ret = pg_run3(p,
                  "INSERT INTO mcpsub_subscription (session, uri, debounce) "
                  "SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM mcp_session WHERE id = $1) "
                  "ON CONFLICT (session, uri) DO UPDATE SET debounce = excluded.debounce",
                  3, id, uri, debounce, &n);
  if (ret == -EEXIST || (ret == 0 && n == 0)) ret = -ENOENT; /* no session (or it just went) */
  if (ret == 0) {
    char *image = store_subscription_image(true, uri, topic_key, debounce);
    ret = pg_log_row(p, STORE_SUBSCRIPTION_LOG, id, true, image);
    cJSON_free(image);
  }
  if (ret == 0) ret = pg_commit(p, NULL, 0);
  if (ret < 0) pg_rollback(p);
  return ret;
}

static int pg_signal(store_t *s, const char *session, const char *image) {
  pg_store *p = pg_of(s);
  int64_t xid;
  int ret = pg_ready(p);
  if (ret == 0) ret = pg_begin(p, NULL, 0);
  /* The transaction's id before the row's seq (pg_log_row). */
  if (ret == 0) ret = pg_run_int64(p, "SELECT pg_current_xact_id()::text", NULL, &xid, NULL, 0);
  if (ret == 0) ret = pg_log_row(p, STORE_SIGNAL_LOG, session, true, image);
  if (ret == 0) ret = pg_commit(p, NULL, 0);
  if (ret < 0) pg_rollback(p);
  return ret;
}

static int pg_session_sub_delete(store_t *s, const char *id, const char *uri) {
  pg_store *p = pg_of(s);
  int64_t n = 0;
  int ret = pg_ready(p);
  if (ret == 0) ret = pg_begin(p, NULL, 0);
  if (ret == 0)
    ret = pg_run3(p, "DELETE FROM mcpsub_subscription WHERE session = $1 AND uri = $2", 2, id, uri,
                  NULL, &n);
  if (ret == 0 && n > 0) {
    char *image = store_subscription_image(false, uri, NULL, NULL);
    ret = pg_log_row(p, STORE_SUBSCRIPTION_LOG, id, false, image);
    cJSON_free(image);
  }
  if (ret == 0) ret = pg_session_exists(p, id);
  if (ret == 0) ret = pg_commit(p, NULL, 0);
  if (ret < 0) pg_rollback(p);
  return ret;
}

static int pg_session_delete(store_t *s, const char *id) {
  int64_t n = 0;
  int ret = pg_run3_ready(pg_of(s), "DELETE FROM mcp_session WHERE id = $1", 1, id, NULL, NULL, &n);
  return ret < 0 ? ret : n == 0 ? -ENOENT : 0;
}

static int pg_session_prune_slot(store_t *s, int64_t before_ms, unsigned slot, unsigned n_slots,
                                 int64_t *deleted) {
  char before[24], own[3], foreign[3];
  int64_t n = 0;
  if (deleted != NULL) *deleted = 0;
  snprintf(before, sizeof(before), "%" PRId64, before_ms);
  snprintf(own, sizeof own, "%02x", slot & 0xff);
  /* Slot 0 also prunes slots no worker runs any more ("zz" sorts after every id). */
  if (slot == 0 && n_slots < 256)
    snprintf(foreign, sizeof foreign, "%02x", n_slots);
  else
    snprintf(foreign, sizeof foreign, "zz");
  int ret = pg_run3_ready(pg_of(s),
                          "DELETE FROM mcp_session WHERE last_seen < $1::int8 AND "
                          "(substr(id, 1, 2) = $2 OR substr(id, 1, 2) COLLATE \"C\" >= $3)",
                          3, before, own, foreign, &n);
  if (ret == 0 && deleted != NULL) *deleted = n;
  return ret;
}

static int pg_session_prune(store_t *s, int64_t before_ms, int64_t *deleted) {
  char before[24];
  int64_t n = 0;
  if (deleted != NULL) *deleted = 0;
  snprintf(before, sizeof(before), "%" PRId64, before_ms);
  int ret = pg_run3_ready(pg_of(s), "DELETE FROM mcp_session WHERE last_seen < $1::int8", 1, before,
                          NULL, NULL, &n);
  if (ret == 0 && deleted != NULL) *deleted = n;
  return ret;
}

static int pg_principal_usage(store_t *s, const char *principal, int64_t since_ms,
                              int64_t *sessions, int64_t *subscriptions) {
  pg_store *p = pg_of(s);
  pg_params ps = {0};
  PGresult *r;
  *sessions = *subscriptions = 0;
  int ret = pg_ready(p);
  if (ret < 0) return ret;
  pg_param(&ps, principal);
  pg_param_int(&ps, since_ms);
  ret = pg_run(p,
               "SELECT count(*), coalesce(sum(subscription_count), 0) "
               "FROM mcp_session WHERE principal = $1 AND last_seen >= $2::int8",
               &ps, &r, NULL, 0);
  pg_params_finish(&ps);
  if (ret < 0) return ret;
  *sessions = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  *subscriptions = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
  PQclear(r);
  return 0;
}

/*
 * fn may call other store functions (even delete the session it is given):
 * the rows are all read first. ss is valid only during the call.
 */
static int pg_session_foreach(store_t *s, long limit,
                              int (*fn)(const store_session *ss, void *data), void *data) {
  pg_store *p = pg_of(s);
  PGresult *r;
  pg_params ps = {0};
  if (limit > 0)
    pg_param_int(&ps, limit);
  else
    pg_param(&ps, NULL); /* LIMIT NULL is none */
  int ret = pg_ready(p);
  if (ret == 0)
    ret = pg_run(p,
                 "SELECT " PG_SESSION_COLUMNS
                 " FROM mcp_session ORDER BY last_seen DESC, id LIMIT $1::int8",
                 &ps, &r, NULL, 0);
  pg_params_finish(&ps);
  if (ret < 0) return ret;
  for (int i = 0; i < PQntuples(r); i++) {
    store_session ss;
    pg_session_from_row(r, i, &ss);
    int stop = fn(&ss, data);
    store_session_finish(&ss);
    if (stop != 0) break;
  }
  PQclear(r);
  return 0;
}

/*
 * No busy handler: PostgreSQL waits for locks itself, up to lock_timeout
 * (store_set_busy_timeout); the slot is NULL and store_set_busy_handler is
 * a no-op.
 */
const store_ops store_pg_ops = {
    .name = "postgres",
    .open = pg_open,
    .open_readonly = pg_open_readonly,
    .close = pg_close,
    .set_busy_timeout = pg_set_busy_timeout,
    .set_busy_handler = NULL,
    .refresh_schema = pg_refresh_schema,
    .schema_stale = pg_schema_stale,
    .prepared = pg_prepared,
    .get_record = pg_get_record,
    .query = pg_query,
    .count_where = pg_count_where,
    .table_version = pg_table_version,
    .table_count = pg_table_count,
    .write_as = pg_write_as,
    .delete_as = pg_delete_as,
    .bulk_as = pg_bulk_as,
    .audit_max_seq = pg_audit_max_seq,
    .audit_read = pg_audit_read,
    .audit_read_of = pg_audit_read_of,
    .audit_list = pg_audit_list,
    .data_version = pg_data_version,
    .wake_fd = pg_wake_fd,
    .audit_prune = pg_audit_prune,
    .audit_pruned_through = pg_audit_pruned_through,
    .counts = pg_counts,
    .session_insert = pg_session_insert,
    .session_load = pg_session_load,
    .session_touch = pg_session_touch,
    .session_set_log_level = pg_session_set_log_level,
    .session_set_subscriptions = pg_session_set_subscriptions,
    .session_sub_put = pg_session_sub_put,
    .session_sub_delete = pg_session_sub_delete,
    .signal = pg_signal,
    .session_delete = pg_session_delete,
    .session_prune_slot = pg_session_prune_slot,
    .session_prune = pg_session_prune,
    .principal_usage = pg_principal_usage,
    .session_foreach = pg_session_foreach,
    .batch_begin = pg_batch_begin,
    .batch_broken = pg_batch_broken,
    .batch_end = pg_batch_end,
};
