/*
 * The SQLite backend of the store (store_backend.h), the embedded default.
 * Each worker (and the CLI) opens its own connection after fork; nothing
 * here is shared between processes except the database file itself, which
 * runs in WAL mode with a busy timeout so that workers and external writers
 * (the sqlite3 CLI, applications) can write concurrently.
 *
 * Three jobs live here. (1) Schema: apply system.sql, apply the application
 * schema once, read which tables are exported as resources and keep one set
 * of audit triggers per exported table current, so that every committed
 * change -- ours or an external writer's -- lands in audit_log in the same
 * transaction. (2) Records: read, query and write rows of exported tables,
 * converting between JSON values and SQLite values. (3) The audit log's
 * retention and the mcp_session rows.
 *
 * What it must never do: splice a value into SQL text (values are always
 * bound; only table and column names read from the schema are spliced, and
 * always quoted), run DDL when nothing changed (every other connection
 * would see a schema change and reload -- workers would wake each other up
 * forever), or keep a statement alive across store_close().
 *
 * Prepared statements are cached by SQL text (LRU, SQLITE_PREPARE_PERSISTENT)
 * and reset after each use; generated statements (built from table names)
 * go through the same cache. SQL text is built with SQLite's own string
 * builder, whose %w and %q conversions quote identifiers and literals; an
 * out-of-memory there aborts, like mem_alloc.
 */
#include "common/store_backend.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "common/jsonrpc.h"
#include "common/log.h"

/* system.sql's text, generated at build time by tools/dev/embed.py. */
extern const char store_system_sql[];

#define STORE_STMT_CACHE_SIZE 64
/*
 * Columns per json_object() call in the audit triggers: SQLite caps a
 * function call at 127 arguments (SQLITE_MAX_FUNCTION_ARG), so wider tables
 * are serialised in chunks that are spliced together.
 */
#define STORE_JSON_CHUNK     50
#define STORE_TRIGGER_PREFIX "mcpsub_audit_"

/* WAL frames at which a deferred checkpoint is due: SQLite's auto-checkpoint default. */
#define STORE_CHECKPOINT_PAGES 1000

/*
 * The wal-index (the -shm file every connection to a WAL database maps) begins
 * with its header, twice; the first copy's words, of which mxFrame (the WAL's
 * last committed frame) is the fifth. A commit rewrites it (its change
 * counter moves with every one), and so does the WAL's starting over
 * (https://sqlite.org/walformat.html; its layout is shared by every SQLite
 * since 3.7.0, so it does not change). Its first region is mapped in 32 KiB.
 */
#define SQ_WAL_HDR_WORDS   12
#define SQ_WAL_HDR_MXFRAME 4
#define SQ_WAL_INDEX_PAGE  32768

/* Unix milliseconds, as SQL, for audit_log.committed_at. */
#define STORE_SQL_NOW_MS "CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"
/* Tables that are never application tables (see schema/system.sql). */
#define STORE_SQL_NOT_SYSTEM                                                                       \
  "name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'mcpsub\\_%' ESCAPE '\\' "             \
  "AND name NOT LIKE 'audit\\_log%' ESCAPE '\\' AND name NOT LIKE 'mcp\\_session%' ESCAPE '\\'"

typedef struct store_stmt_slot {
  char *sql;
  uint64_t hash; /* of sql: most lookups compare this, not the text */
  sqlite3_stmt *stmt;
  uint64_t last_used;
  uint64_t gen; /* which filling of the slot: a store_stmt_hint names one */
  bool busy;    /* handed out and not yet put back */
} store_stmt_slot;

/*
 * Where a statement was last found in the cache, for a caller that asks
 * for the same text again and again (a record read's): its slot is
 * checked first, and only if it holds another filling now is the text
 * hashed and looked up.
 */
typedef struct store_stmt_hint {
  int slot;
  uint64_t gen; /* 0: none */
} store_stmt_hint;

typedef struct sq {
  struct store base; /* first: a store_t * is an sq_t * */
  sqlite3 *db;
  int schema_version; /* PRAGMA schema_version after our last reload */
  store_stmt_slot cache[STORE_STMT_CACHE_SIZE];
  int n_cache;
  uint64_t clock;
  char **get_sql; /* per exported table (by index), its store_get_record statement's text */
  store_stmt_hint *get_hint; /* per exported table, where that statement was last found */
  uint64_t stmt_gens;        /* fillings of cache slots so far */
  bool batch;                /* a group commit's transaction is open (store_batch_begin) */
  int depth;                 /* savepoints open inside it */
  int wal_pages;             /* frames in the WAL after our last commit (store_defer_checkpoints) */
  uint64_t once_recorded;    /* store_once_end's records, for the sweep of old ones */
  /* The batch is a read batch (store_batch_begin_read), and has its schema been looked at? */
  bool read_batch, schema_looked;
  /* The wal-index header as it was when the read batch began (sq_batch_current). */
  const volatile uint32_t *wal_index; /* NULL: not mapped (not WAL; not looked for yet) */
  bool wal_index_looked;
  uint32_t batch_hdr[SQ_WAL_HDR_WORDS];
} sq_t;

static inline sq_t *sq(store_t *s) {
  return (sq_t *)s;
}

/* Errors --------------------------------------------------------------------- */

/*
 * Maps the SQLite result code rc of the call that just failed on sq(s)->db to
 * our errno convention and copies the connection's message into err. Must
 * run before any other call on the connection (a ROLLBACK would replace the
 * message). Unexpected failures are logged.
 */
static int store_error(store_t *s, int rc, char *err, size_t errlen) {
  const char *msg = sqlite3_errmsg(sq(s)->db);
  store_set_err(err, errlen, "%s", msg);
  switch (rc & 0xff) {
  case SQLITE_CONSTRAINT: return -EEXIST;
  case SQLITE_BUSY:
  case SQLITE_LOCKED: return -EBUSY;
  case SQLITE_MISMATCH:
  case SQLITE_TOOBIG: return -EINVAL;
  case SQLITE_FULL: return -ENOSPC; /* the caller says so, once per episode */
  default: log_warn("sqlite error", "code", sqlite3_errstr(rc), "error", msg); return -EIO;
  }
}

/* SQL text ------------------------------------------------------------------ */

static sqlite3_str *store_sql_new(store_t *s) {
  return sqlite3_str_new(sq(s)->db);
}

/* Returns the built text (release with sqlite3_free); aborts on OOM. */
static char *store_sql_finish(sqlite3_str *q) {
  if (sqlite3_str_errcode(q) != SQLITE_OK) {
    fprintf(stderr, "mcpsub: out of memory building SQL\n");
    abort();
  }
  char *sql = sqlite3_str_finish(q);
  if (sql == NULL) {
    fprintf(stderr, "mcpsub: out of memory building SQL\n");
    abort();
  }
  return sql;
}

/* Appends name as a double-quoted identifier (embedded quotes doubled). */
static void store_sql_ident(sqlite3_str *q, const char *name) {
  sqlite3_str_appendf(q, "\"%w\"", name);
}

/* Appends the expression naming t's key: its key column, or rowid. */
static void store_sql_key(sqlite3_str *q, const store_table *t) {
  if (t->key_col < 0)
    sqlite3_str_appendall(q, "rowid");
  else
    store_sql_ident(q, t->cols[t->key_col].name);
}

/* Statement cache ------------------------------------------------------------ */

/*
 * A statement's text hashed eight bytes at a step (a read's statement is
 * 170 bytes and more, hashed on every use: byte by byte it was 2% of a
 * read's CPU). Only a filter for the cache: equal hashes still compare
 * the texts.
 */
static uint64_t store_sql_hash(const char *sql) {
  size_t len = strlen(sql), i = 0;
  uint64_t h = 0x9e3779b97f4a7c15u ^ len, w;
  for (; i + 8 <= len; i += 8) {
    memcpy(&w, sql + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdu;
    h ^= h >> 32;
  }
  w = 0;
  memcpy(&w, sql + i, len - i);
  h = (h ^ w) * 0xff51afd7ed558ccdu;
  return h ^ (h >> 32);
}

/*
 * Hands out a prepared statement for sql in *out (put it back with
 * store_stmt_put). When the cached statement for sql is already in use up
 * the stack, a private one is prepared and finalized on put.
 */
static int store_stmt_get_hinted(store_t *s, const char *sql, store_stmt_hint *hint,
                                 sqlite3_stmt **out, char *err, size_t errlen) {
  bool cacheable = true;
  *out = NULL;
  if (hint != NULL && hint->gen != 0 && hint->slot < sq(s)->n_cache) {
    store_stmt_slot *slot = &sq(s)->cache[hint->slot];
    if (slot->gen == hint->gen && !slot->busy) {
      slot->busy = true;
      slot->last_used = ++sq(s)->clock;
      *out = slot->stmt;
      return 0;
    }
  }
  uint64_t hash = store_sql_hash(sql);
  for (int i = 0; i < sq(s)->n_cache; i++) {
    store_stmt_slot *slot = &sq(s)->cache[i];
    if (slot->hash != hash || strcmp(slot->sql, sql) != 0) continue;
    if (!slot->busy) {
      slot->busy = true;
      slot->last_used = ++sq(s)->clock;
      if (hint != NULL) *hint = (store_stmt_hint){i, slot->gen};
      *out = slot->stmt;
      return 0;
    }
    cacheable = false;
    break;
  }

  sqlite3_stmt *stmt = NULL;
  int rc = sqlite3_prepare_v3(sq(s)->db, sql, -1, cacheable ? SQLITE_PREPARE_PERSISTENT : 0, &stmt,
                              NULL);
  if (rc != SQLITE_OK) {
    int ret = store_error(s, rc, err, errlen);
    sqlite3_finalize(stmt);
    return ret;
  }
  if (cacheable) {
    store_stmt_slot *slot = NULL;
    if (sq(s)->n_cache < STORE_STMT_CACHE_SIZE) {
      slot = &sq(s)->cache[sq(s)->n_cache++];
    } else {
      for (int i = 0; i < sq(s)->n_cache; i++) {
        store_stmt_slot *c = &sq(s)->cache[i];
        if (!c->busy && (slot == NULL || c->last_used < slot->last_used)) slot = c;
      }
      if (slot != NULL) {
        sqlite3_finalize(slot->stmt);
        free(slot->sql);
      }
    }
    if (slot != NULL) {
      slot->sql = mem_strdup(sql);
      slot->hash = hash;
      slot->stmt = stmt;
      slot->busy = true;
      slot->last_used = ++sq(s)->clock;
      slot->gen = ++sq(s)->stmt_gens;
      if (hint != NULL) *hint = (store_stmt_hint){(int)(slot - sq(s)->cache), slot->gen};
    }
  }
  *out = stmt;
  return 0;
}

static int store_stmt_get(store_t *s, const char *sql, sqlite3_stmt **out, char *err,
                          size_t errlen) {
  return store_stmt_get_hinted(s, sql, NULL, out, err, errlen);
}

/* Resets a statement from store_stmt_get and makes it available again. NULL is a no-op. */
static void store_stmt_put(store_t *s, sqlite3_stmt *stmt) {
  if (stmt == NULL) return;
  for (int i = 0; i < sq(s)->n_cache; i++) {
    if (sq(s)->cache[i].stmt == stmt) {
      sqlite3_reset(stmt);
      sqlite3_clear_bindings(stmt);
      sq(s)->cache[i].busy = false;
      return;
    }
  }
  sqlite3_finalize(stmt);
}

/* Finalizes every cached statement not in use (after a schema change, at close). */
static void store_stmt_clear(store_t *s) {
  int kept = 0;
  for (int i = 0; i < sq(s)->n_cache; i++) {
    store_stmt_slot *slot = &sq(s)->cache[i];
    if (slot->busy) {
      sq(s)->cache[kept++] = *slot;
      continue;
    }
    sqlite3_finalize(slot->stmt);
    free(slot->sql);
  }
  sq(s)->n_cache = kept;
}

/* Runs a statement without parameters to completion, ignoring any rows. */
static int store_exec(store_t *s, const char *sql, char *err, size_t errlen) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(s, sql, &st, err, errlen);
  if (ret < 0) return ret;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    ;
  if (rc != SQLITE_DONE) ret = store_error(s, rc, err, errlen);
  store_stmt_put(s, st);
  return ret;
}

/* Runs a statement, already bound, that yields one integer (NULL or no row = 0). */
static int store_step_int64(store_t *s, sqlite3_stmt *st, int64_t *out, char *err, size_t errlen) {
  int rc = sqlite3_step(st);
  *out = 0;
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int64(st, 0);
    return 0;
  }
  if (rc == SQLITE_DONE) return 0;
  return store_error(s, rc, err, errlen);
}

/* Runs a statement, already bound, that changes rows; *changes may be NULL. */
static int store_step_done(store_t *s, sqlite3_stmt *st, int64_t *changes, char *err,
                           size_t errlen) {
  int rc = sqlite3_step(st);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return store_error(s, rc, err, errlen);
  if (changes != NULL) *changes = sqlite3_changes64(sq(s)->db);
  return 0;
}

/*
 * A transaction of one store call. Inside a group commit (store_batch_begin)
 * it is a savepoint of the batch's transaction instead: released on
 * success, rolled back alone on failure, committed with the batch.
 */
static int store_begin(store_t *s, bool write, char *err, size_t errlen) {
  if (!sq(s)->batch) return store_exec(s, write ? "BEGIN IMMEDIATE" : "BEGIN", err, errlen);
  int ret = store_exec(s, "SAVEPOINT mcpsub_call", err, errlen);
  if (ret == 0) sq(s)->depth++;
  return ret;
}

static int store_commit(store_t *s, char *err, size_t errlen) {
  if (!sq(s)->batch) return store_exec(s, "COMMIT", err, errlen);
  int ret = store_exec(s, "RELEASE mcpsub_call", err, errlen);
  if (ret == 0) sq(s)->depth--;
  return ret;
}

/* Rolls back the open transaction (or savepoint), if SQLite has not already done so. */
static void store_rollback(store_t *s) {
  int ret = 0;
  if (sqlite3_get_autocommit(sq(s)->db)) return;
  if (!sq(s)->batch) {
    ret = store_exec(s, "ROLLBACK", NULL, 0);
  } else if (sq(s)->depth > 0) {
    ret = store_exec(s, "ROLLBACK TO mcpsub_call", NULL, 0);
    if (ret == 0) ret = store_exec(s, "RELEASE mcpsub_call", NULL, 0);
    sq(s)->depth--;
  }
  (void)ret;
}

/*
 * The connection's mapping of the wal-index, through its VFS (the mapping
 * SQLite itself reads, for as long as the connection is open), or NULL:
 * not a WAL database, or a VFS without shared memory. Looked for once.
 */
static const volatile uint32_t *sq_wal_index(store_t *s) {
  sqlite3_file *f = NULL;
  sqlite3_stmt *st;
  void volatile *p = NULL;
  bool wal = false;

  if (sq(s)->wal_index_looked) return sq(s)->wal_index;
  sq(s)->wal_index_looked = true;
  if (sqlite3_prepare_v2(sq(s)->db, "PRAGMA journal_mode", -1, &st, NULL) != SQLITE_OK) return NULL;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    wal = mode != NULL && strcmp(mode, "wal") == 0;
  }
  sqlite3_finalize(st);
  if (!wal || sqlite3_file_control(sq(s)->db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK ||
      f == NULL || f->pMethods == NULL || f->pMethods->iVersion < 2 || f->pMethods->xShmMap == NULL)
    return NULL;
  /* Not extended: the region exists once any connection has read the database in WAL mode. */
  if (f->pMethods->xShmMap(f, 0, SQ_WAL_INDEX_PAGE, 0, &p) != SQLITE_OK || p == NULL) return NULL;
  sq(s)->wal_index = (const volatile uint32_t *)p;
  return sq(s)->wal_index;
}

static void sq_wal_hdr(const volatile uint32_t *wal_index, uint32_t hdr[SQ_WAL_HDR_WORDS]) {
  for (int i = 0; i < SQ_WAL_HDR_WORDS; i++) hdr[i] = wal_index[i];
}

static int sq_batch_open(store_t *s, bool write) {
  if (sq(s)->batch) return -EALREADY;
  /*
   * Read before the snapshot is (the batch's first statement takes it): a
   * commit in between makes the batch look older than it is, never newer.
   */
  const volatile uint32_t *wi = write ? NULL : sq_wal_index(s);
  if (wi != NULL) sq_wal_hdr(wi, sq(s)->batch_hdr);
  int ret = store_exec(s, write ? "BEGIN IMMEDIATE" : "BEGIN", NULL, 0);
  if (ret == 0) {
    sq(s)->batch = true;
    sq(s)->depth = 0;
    sq(s)->read_batch = !write;
    sq(s)->schema_looked = false;
  }
  return ret;
}

static int sq_batch_begin(store_t *s) {
  return sq_batch_open(s, true);
}

/* Deferred: the read lock is taken by the first read, and held to the end. */
static int sq_batch_begin_read(store_t *s) {
  return sq_batch_open(s, false);
}

static bool sq_batch_broken(store_t *s) {
  /* SQLite rolls a whole transaction back on some errors (SQLITE_FULL, an I/O error). */
  return sq(s)->batch && sqlite3_get_autocommit(sq(s)->db);
}

/*
 * A read batch is current while the wal-index header is the one read before
 * it began: every commit, by any connection of any process, rewrites the
 * header before it returns, so a request that arrived after a commit was
 * acknowledged finds it changed. Read without a lock: a header caught
 * while a commit writes it differs from the one kept (the batch ends,
 * which is only a cost), unless the bytes read are all still the old ones,
 * and then that commit had not returned. A WAL at the checkpoint's size is
 * let go: a writer starts it over only when no reader holds a mark in it.
 */
static bool sq_batch_current(store_t *s) {
  uint32_t now[SQ_WAL_HDR_WORDS];
  if (!sq(s)->read_batch || sq(s)->wal_index == NULL || sqlite3_get_autocommit(sq(s)->db))
    return false;
  sq_wal_hdr(sq(s)->wal_index, now);
  return memcmp(now, sq(s)->batch_hdr, sizeof(now)) == 0 &&
         now[SQ_WAL_HDR_MXFRAME] < STORE_CHECKPOINT_PAGES;
}

static int sq_batch_end(store_t *s, bool commit) {
  if (!sq(s)->batch) return -EINVAL;
  int ret = -EIO;
  sq(s)->batch = sq(s)->read_batch = false;
  if (!sqlite3_get_autocommit(sq(s)->db)) {
    ret = commit ? store_exec(s, "COMMIT", NULL, 0) : 0;
    store_rollback(s); /* after a failed COMMIT; nothing when it succeeded */
  }
  return commit ? ret : 0;
}

/*
 * Deferred checkpoints: the WAL hook replaces SQLite's auto-checkpoint
 * (which is itself a WAL hook) and only notes the log's size; the
 * checkpoint is due at the size auto-checkpoint uses by default.
 */
static int sq_wal_hook(void *arg, sqlite3 *db, const char *name, int pages) {
  (void)db;
  (void)name;
  sq(arg)->wal_pages = pages;
  return SQLITE_OK;
}

static int sq_defer_checkpoints(store_t *s) {
  sqlite3_wal_hook(sq(s)->db, sq_wal_hook, s);
  return 0;
}

static bool sq_checkpoint_due(store_t *s) {
  return sq(s)->wal_pages >= STORE_CHECKPOINT_PAGES;
}

static int sq_checkpoint(store_t *s) {
  sq(s)->wal_pages = 0;
  int rc = sqlite3_wal_checkpoint_v2(sq(s)->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  return rc == SQLITE_OK ? 0 : store_error(s, rc, NULL, 0);
}

static int store_schema_version(store_t *s, int *version, char *err, size_t errlen) {
  sqlite3_stmt *st;
  int64_t v = 0;
  int ret = store_stmt_get(s, "PRAGMA schema_version", &st, err, errlen);
  if (ret < 0) return ret;
  ret = store_step_int64(s, st, &v, err, errlen);
  store_stmt_put(s, st);
  *version = (int)v;
  return ret;
}

/* Values -------------------------------------------------------------------- */

/*
 * Binds a JSON value: string -> TEXT, whole number -> INTEGER, other
 * number -> REAL, bool -> 1/0, null -> NULL, object/array -> compact JSON
 * TEXT; an integer's digits (a raw item) -> INTEGER exactly, or REAL beyond
 * 64 bits (as SQLite reads such a literal). v must satisfy
 * store_json_storable. Returns a SQLite result code.
 */
static int store_bind_json(sqlite3_stmt *st, int idx, const cJSON *v) {
  int64_t i;
  bool in_range;
  if (cJSON_IsString(v)) return sqlite3_bind_text(st, idx, v->valuestring, -1, SQLITE_TRANSIENT);
  if (jsonrpc_raw_integer(v, &i, &in_range))
    return in_range ? sqlite3_bind_int64(st, idx, i)
                    : sqlite3_bind_double(st, idx, strtod(v->valuestring, NULL));
  if (cJSON_IsNumber(v)) {
    if (store_double_is_int64(v->valuedouble))
      return sqlite3_bind_int64(st, idx, (sqlite3_int64)v->valuedouble);
    return sqlite3_bind_double(st, idx, v->valuedouble);
  }
  if (cJSON_IsBool(v)) return sqlite3_bind_int(st, idx, cJSON_IsTrue(v) ? 1 : 0);
  if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
    char *text = jsonrpc_print_text(v); /* its numbers exact */
    if (text == NULL) return SQLITE_NOMEM;
    int rc = sqlite3_bind_text(st, idx, text, -1, SQLITE_TRANSIENT);
    free(text);
    return rc;
  }
  return sqlite3_bind_null(st, idx);
}

/* A blob as JSON holds it: 2 * len upper-case hex digits at out (not terminated). */
static void store_blob_hex(char *out, const unsigned char *data, size_t len) {
  static const char hex[] = "0123456789ABCDEF";
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = hex[data[i] >> 4];
    out[2 * i + 1] = hex[data[i] & 15];
  }
}

/*
 * Column idx of the current row as JSON: INTEGER -> number (a string beyond
 * +-2^53, where a double would lose digits), REAL -> number, TEXT -> string,
 * NULL -> null, BLOB -> uppercase hex string (as SQL hex() writes it).
 */
static cJSON *store_value_json(sqlite3_stmt *st, int idx) {
  switch (sqlite3_column_type(st, idx)) {
  case SQLITE_INTEGER: {
    int64_t n = sqlite3_column_int64(st, idx);
    if (jsonrpc_int_exact(n)) return store_json_checked(cJSON_CreateNumber((double)n));
    char text[24];
    snprintf(text, sizeof(text), "%" PRId64, n);
    return store_json_checked(cJSON_CreateString(text));
  }
  case SQLITE_FLOAT: return store_json_checked(cJSON_CreateNumber(sqlite3_column_double(st, idx)));
  case SQLITE_TEXT:
    return store_json_checked(cJSON_CreateString((const char *)sqlite3_column_text(st, idx)));
  case SQLITE_BLOB: {
    const unsigned char *data = sqlite3_column_blob(st, idx);
    size_t len = (size_t)sqlite3_column_bytes(st, idx);
    char *text = mem_alloc(2 * len + 1);
    store_blob_hex(text, data, len);
    text[2 * len] = '\0';
    cJSON *item = store_json_checked(cJSON_CreateString(text));
    free(text);
    return item;
  }
  default: return store_json_checked(cJSON_CreateNull());
  }
}

/* Column idx of the current row printed as store_value_json's item prints (jsonrpc_print). */
static void store_value_print(buf_t *out, sqlite3_stmt *st, int idx) {
  cJSON number = {.type = cJSON_Number};
  switch (sqlite3_column_type(st, idx)) {
  case SQLITE_INTEGER: {
    int64_t n = sqlite3_column_int64(st, idx);
    if (jsonrpc_int_exact(n)) {
      number.valuedouble = (double)n;
      break;
    }
    char text[24];
    snprintf(text, sizeof(text), "%" PRId64, n);
    buf_append_json_string(out, text, strlen(text));
    return;
  }
  case SQLITE_FLOAT: number.valuedouble = sqlite3_column_double(st, idx); break;
  case SQLITE_TEXT: {
    const char *text = (const char *)sqlite3_column_text(st, idx);
    buf_append_json_string(out, text, strlen(text)); /* to the first NUL, as cJSON copies it */
    return;
  }
  case SQLITE_BLOB: {
    const unsigned char *data = sqlite3_column_blob(st, idx);
    size_t len = (size_t)sqlite3_column_bytes(st, idx);
    buf_reserve(out, 2 * len + 2);
    buf_append_byte(out, '"');
    store_blob_hex(out->data + out->len, data, len);
    out->len += 2 * len;
    buf_append_byte(out, '"');
    return;
  }
  default: buf_append(out, "null", 4); return;
  }
  if (jsonrpc_print(out, &number) < 0) abort(); /* a number always prints */
}

/*
 * Binds key as t compares it; key must satisfy store_key_valid, and stay
 * until the statement is put back (bound without a copy).
 */
static int store_bind_key(sqlite3_stmt *st, int idx, const store_table *t, const char *key) {
  int64_t v = 0;
  if (t->key_integer && store_parse_int_key(key, &v)) return sqlite3_bind_int64(st, idx, v);
  return sqlite3_bind_text(st, idx, key, -1, SQLITE_STATIC);
}

/* Schema: exported tables ------------------------------------------------------ */

/* The affinity of a column declared decl, as far as filters tell them apart. */
typedef enum { SQ_NUMERIC, SQ_TEXT, SQ_BLOB } sq_affinity;

static sq_affinity sq_affinity_of(const char *d) {
  /* SQLite's affinity rules (datatype3.html §3.1), in their order. */
  if (strcasestr(d, "INT") != NULL) return SQ_NUMERIC;
  if (strcasestr(d, "CHAR") != NULL || strcasestr(d, "CLOB") != NULL ||
      strcasestr(d, "TEXT") != NULL)
    return SQ_TEXT;
  if (strcasestr(d, "BLOB") != NULL || d[0] == '\0') return SQ_BLOB;
  return SQ_NUMERIC; /* REAL, FLOA, DOUB, or anything else: NUMERIC */
}

/*
 * Reads the columns and key of the table called name into *t. *exported is
 * false (and *t empty) for a table that cannot be addressed by one key: a
 * WITHOUT ROWID table with a composite key, or a rowid-keyed table with a
 * column named "rowid" (its rows' "rowid" member would be ambiguous).
 */
static int store_read_table(store_t *s, const char *name, bool without_rowid, store_table *t,
                            bool *exported, char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  int ret, rc, n_pk = 0, pk_col = -1, cap = 8;
  int64_t pk_indexes = 0;

  memset(t, 0, sizeof(*t));
  *exported = false;
  t->name = mem_strdup(name);
  t->cols = mem_calloc((size_t)cap, sizeof(*t->cols));

  /* table_xinfo, not table_info: generated columns are part of the row. */
  ret = store_stmt_get(s,
                       "SELECT name, type, \"notnull\", pk, hidden "
                       "FROM pragma_table_xinfo(?1, 'main') WHERE hidden <> 1 ORDER BY cid",
                       &st, err, errlen);
  if (ret < 0) goto fail;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (t->n_cols == cap) {
      cap *= 2;
      t->cols = mem_realloc(t->cols, (size_t)cap * sizeof(*t->cols));
    }
    store_column *col = &t->cols[t->n_cols];
    const char *decl = (const char *)sqlite3_column_text(st, 1);
    col->name = mem_strdup((const char *)sqlite3_column_text(st, 0));
    col->decl_type = mem_strdup(decl ? decl : "");
    col->notnull = sqlite3_column_int(st, 2) != 0;
    col->generated = sqlite3_column_int(st, 4) != 0;
    sq_affinity affinity = sq_affinity_of(col->decl_type);
    col->numeric = affinity == SQ_NUMERIC;
    col->untyped = affinity == SQ_BLOB;
    const char *collation = NULL;
    bool known = sqlite3_table_column_metadata(sq(s)->db, "main", name, col->name, NULL, &collation,
                                               NULL, NULL, NULL) == SQLITE_OK &&
                 collation != NULL;
    col->binary = known && strcasecmp(collation, "BINARY") == 0;
    col->nocase = known && strcasecmp(collation, "NOCASE") == 0;
    if (sqlite3_column_int(st, 3) > 0) {
      n_pk++;
      pk_col = t->n_cols;
    }
    t->n_cols++;
  }
  if (rc != SQLITE_DONE) {
    ret = store_error(s, rc, err, errlen);
    goto fail;
  }
  store_stmt_put(s, st);
  st = NULL;

  ret = store_stmt_get(s, "SELECT count(*) FROM pragma_index_list(?1, 'main') WHERE origin = 'pk'",
                       &st, err, errlen);
  if (ret < 0) goto fail;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  ret = store_step_int64(s, st, &pk_indexes, err, errlen);
  if (ret < 0) goto fail;
  store_stmt_put(s, st);
  st = NULL;

  if (n_pk == 1) {
    /* Only an INTEGER PRIMARY KEY without its own index aliases the rowid. */
    t->key_col = pk_col;
    t->key_integer =
        !without_rowid && pk_indexes == 0 && strcasecmp(t->cols[pk_col].decl_type, "INTEGER") == 0;
  } else {
    if (without_rowid) goto skip;
    for (int c = 0; c < t->n_cols; c++)
      if (strcasecmp(t->cols[c].name, "rowid") == 0) goto skip;
    t->key_col = -1;
    t->key_integer = true;
  }
  *exported = true;
  return 0;

skip:
  ret = 0;
fail:
  store_stmt_put(s, st);
  for (int c = 0; c < t->n_cols; c++) {
    free(t->cols[c].name);
    free(t->cols[c].decl_type);
  }
  free(t->cols);
  free(t->name);
  memset(t, 0, sizeof(*t));
  return ret;
}

/* Reads every exported table, sorted by name, into a new array. */
static int store_read_tables(store_t *s, store_table **out, int *n_out, char *err, size_t errlen) {
  sqlite3_stmt *st = NULL;
  store_table *tables = NULL;
  int n = 0, cap = 0, ret, rc;

  ret = store_stmt_get(s,
                       "SELECT name, wr FROM pragma_table_list "
                       "WHERE schema = 'main' AND type = 'table' AND " STORE_SQL_NOT_SYSTEM
                       " ORDER BY name",
                       &st, err, errlen);
  if (ret < 0) goto fail;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == cap) {
      cap = cap ? 2 * cap : 8;
      tables = mem_realloc(tables, (size_t)cap * sizeof(*tables));
    }
    bool exported;
    ret = store_read_table(s, (const char *)sqlite3_column_text(st, 0),
                           sqlite3_column_int(st, 1) != 0, &tables[n], &exported, err, errlen);
    if (ret < 0) goto fail;
    if (exported) n++;
  }
  if (rc != SQLITE_DONE) {
    ret = store_error(s, rc, err, errlen);
    goto fail;
  }
  store_stmt_put(s, st);
  *out = tables;
  *n_out = n;
  return 0;

fail:
  store_stmt_put(s, st);
  store_tables_free(tables, n);
  return ret;
}

/* Schema: audit triggers -------------------------------------------------------- */

/*
 * Appends `ref."col"` as a value json_object() accepts: a BLOB as its hex
 * text; a REAL as JSON of 18 significant digits, which read back as the
 * same double (json_object() writes 15, and so 0.1 + 0.2 as 0.3, which
 * the subscriptions then compared in its place), and an infinity as
 * +-9e999, which reads back as one (json_object() writes Inf, which no
 * JSON reader takes: the image was lost). The 18 digits come from
 * SQLite's printf, whose arithmetic is long double: where that is no
 * wider than a double (valgrind's, some machines'), its text may not be
 * JSON, and then the REAL is written as json_object() writes it, rather
 * than fail the write.
 */
static void store_sql_json_value(sqlite3_str *q, const char *ref, const char *col) {
  sqlite3_str_appendf(q,
                      "CASE typeof(%s.\"%w\") WHEN 'blob' THEN hex(%s.\"%w\") WHEN 'real' THEN "
                      "CASE WHEN abs(%s.\"%w\") = 9e999 "
                      "THEN json(iif(%s.\"%w\" > 0, '9e999', '-9e999')) "
                      "WHEN json_valid(printf('%%!.18g', %s.\"%w\")) "
                      "THEN json(printf('%%!.18g', %s.\"%w\")) ELSE json_quote(%s.\"%w\") END "
                      "ELSE %s.\"%w\" END",
                      ref, col, ref, col, ref, col, ref, col, ref, col, ref, col, ref, col, ref,
                      col);
}

/*
 * Appends an expression giving row ref (NEW or OLD) of t as a JSON object
 * text. Beyond STORE_JSON_CHUNK columns, chunks are spliced textually: a
 * json_object() of scalars always begins with {" and ends with a scalar
 * then }, so trimming one brace from each side of the seam is exact.
 */
static void store_sql_row_json(sqlite3_str *q, const store_table *t, const char *ref) {
  int n_chunks = (t->n_cols + STORE_JSON_CHUNK - 1) / STORE_JSON_CHUNK;
  for (int k = 0; k < n_chunks; k++) {
    if (k > 0) sqlite3_str_appendall(q, " || ',' || ");
    if (n_chunks > 1)
      sqlite3_str_appendall(q, k == 0 ? "rtrim(" : k == n_chunks - 1 ? "ltrim(" : "trim(");
    sqlite3_str_appendall(q, "json_object(");
    for (int c = k * STORE_JSON_CHUNK; c < t->n_cols && c < (k + 1) * STORE_JSON_CHUNK; c++) {
      if (c > k * STORE_JSON_CHUNK) sqlite3_str_appendall(q, ", ");
      sqlite3_str_appendf(q, "'%q', ", t->cols[c].name);
      store_sql_json_value(q, ref, t->cols[c].name);
    }
    sqlite3_str_appendall(q, ")");
    if (n_chunks > 1)
      sqlite3_str_appendall(q, k == 0 ? ", '}')" : k == n_chunks - 1 ? ", '{')" : ", '{}')");
  }
}

/* Appends the key of row ref as audit_log.key text. */
static void store_sql_row_key(sqlite3_str *q, const store_table *t, const char *ref) {
  if (t->key_col < 0)
    sqlite3_str_appendf(q, "ifnull(CAST(%s.rowid AS TEXT), '')", ref);
  else
    sqlite3_str_appendf(q, "ifnull(CAST(%s.\"%w\" AS TEXT), '')", ref, t->cols[t->key_col].name);
}

/*
 * Appends one audit insert: `INSERT INTO audit_log ... SELECT ...` for row
 * change op, keyed by key_ref's key, with the old/new row images from the
 * named refs (NULL for none), when cond (may be NULL) holds.
 */
static void store_sql_audit_insert(sqlite3_str *q, const store_table *t, const char *op,
                                   const char *key_ref, const char *old_ref, const char *new_ref,
                                   const char *cond) {
  sqlite3_str_appendf(q,
                      " INSERT INTO audit_log (tbl, key, op, old_row, new_row, committed_at)"
                      " SELECT '%q', ",
                      t->name);
  store_sql_row_key(q, t, key_ref);
  sqlite3_str_appendf(q, ", '%s', ", op);
  if (old_ref)
    store_sql_row_json(q, t, old_ref);
  else
    sqlite3_str_appendall(q, "NULL");
  sqlite3_str_appendall(q, ", ");
  if (new_ref)
    store_sql_row_json(q, t, new_ref);
  else
    sqlite3_str_appendall(q, "NULL");
  sqlite3_str_appendall(q, ", " STORE_SQL_NOW_MS);
  if (cond) sqlite3_str_appendf(q, " WHERE %s", cond);
  sqlite3_str_appendall(q, ";");
}

typedef struct store_trigger {
  char *name; /* sqlite3_free */
  char *sql;  /* sqlite3_free; exactly as sqlite_schema.sql will hold it */
  bool present;
} store_trigger;

/*
 * Builds the three audit triggers of t into out[0..2]. An UPDATE that
 * changes the key is logged as a DELETE of the old key and an INSERT of the
 * new one, so that each key's newest audit row says whether it still
 * exists (retention relies on it) and both records' subscribers hear of it.
 */
static void store_build_triggers(store_t *s, const store_table *t, store_trigger out[3]) {
  static const char *const events[3] = {"insert", "update", "delete"};
  sqlite3_str *q;
  char *moved, *same;

  q = store_sql_new(s);
  store_sql_row_key(q, t, "OLD");
  sqlite3_str_appendall(q, " IS NOT ");
  store_sql_row_key(q, t, "NEW");
  sqlite3_str_appendall(q, " COLLATE BINARY");
  moved = store_sql_finish(q);
  q = store_sql_new(s);
  store_sql_row_key(q, t, "OLD");
  sqlite3_str_appendall(q, " IS ");
  store_sql_row_key(q, t, "NEW");
  sqlite3_str_appendall(q, " COLLATE BINARY");
  same = store_sql_finish(q);

  for (int i = 0; i < 3; i++) {
    out[i].present = false;
    out[i].name = sqlite3_mprintf(STORE_TRIGGER_PREFIX "%s_%s", t->name, events[i]);
    if (out[i].name == NULL) {
      fprintf(stderr, "mcpsub: out of memory building SQL\n");
      abort();
    }
    q = store_sql_new(s);
    sqlite3_str_appendall(q, "CREATE TRIGGER ");
    store_sql_ident(q, out[i].name);
    sqlite3_str_appendf(q, " AFTER %s ON ", i == 0 ? "INSERT" : i == 1 ? "UPDATE" : "DELETE");
    store_sql_ident(q, t->name);
    sqlite3_str_appendall(q, " FOR EACH ROW BEGIN");
    if (i == 0) {
      store_sql_audit_insert(q, t, "INSERT", "NEW", NULL, "NEW", NULL);
    } else if (i == 1) {
      store_sql_audit_insert(q, t, "DELETE", "OLD", "OLD", NULL, moved);
      store_sql_audit_insert(q, t, "INSERT", "NEW", NULL, "NEW", moved);
      store_sql_audit_insert(q, t, "UPDATE", "NEW", "OLD", "NEW", same);
    } else {
      store_sql_audit_insert(q, t, "DELETE", "OLD", "OLD", NULL, NULL);
    }
    sqlite3_str_appendall(q, " END");
    out[i].sql = store_sql_finish(q);
  }
  sqlite3_free(moved);
  sqlite3_free(same);
}

static int store_ddl(store_t *s, const char *sql, char *err, size_t errlen) {
  char *msg = NULL;
  int rc = sqlite3_exec(sq(s)->db, sql, NULL, NULL, &msg);
  if (rc == SQLITE_OK) return 0;
  int ret = store_error(s, rc, NULL, 0);
  store_set_err(err, errlen, "%s", msg ? msg : sqlite3_errstr(rc));
  sqlite3_free(msg);
  return ret;
}

/* Does table have a column named col? */
static bool store_has_column(store_t *s, const char *table, const char *col) {
  char sql[160];
  snprintf(sql, sizeof(sql), "SELECT %s FROM %s LIMIT 0", col, table);
  sqlite3_stmt *st = NULL;
  bool ok = sqlite3_prepare_v2(sq(s)->db, sql, -1, &st, NULL) == SQLITE_OK;
  sqlite3_finalize(st);
  return ok;
}

/*
 * Each session's subscription_count follows its mcpsub_subscription rows,
 * so that a principal's usage (the --limit-subscriptions check, on every
 * subscribe) reads its sessions, not all their subscriptions. The rows are
 * written with upserts, never INSERT OR REPLACE, whose delete would not
 * fire the delete trigger. Made after the column (store_migrate).
 */
#define STORE_SUBSCRIPTION_COUNT_TRIGGERS                                                          \
  "CREATE TRIGGER IF NOT EXISTS mcpsub_subscription_added AFTER INSERT ON mcpsub_subscription "    \
  "BEGIN UPDATE mcp_session SET subscription_count = subscription_count + 1 "                      \
  "WHERE id = new.session; END; "                                                                  \
  "CREATE TRIGGER IF NOT EXISTS mcpsub_subscription_removed AFTER DELETE ON mcpsub_subscription "  \
  "BEGIN UPDATE mcp_session SET subscription_count = subscription_count - 1 "                      \
  "WHERE id = old.session; END"

/*
 * Brings the system tables of a database made by an older mcpsubd up to
 * the current system.sql (CREATE TABLE IF NOT EXISTS leaves an existing
 * table as it was): columns added since are added here, inside the
 * opening transaction.
 */
static int store_migrate(store_t *s, char *err, size_t errlen) {
  int ret = 0;
  if (!store_has_column(s, "mcp_session", "principal"))
    ret = store_ddl(s,
                    "ALTER TABLE mcp_session ADD COLUMN principal TEXT NOT NULL DEFAULT "
                    "'anonymous'",
                    err, errlen);
  if (ret == 0 && !store_has_column(s, "audit_log", "principal"))
    ret = store_ddl(s, "ALTER TABLE audit_log ADD COLUMN principal TEXT", err, errlen);
  if (ret == 0)
    ret = store_ddl(s,
                    "CREATE INDEX IF NOT EXISTS mcp_session_by_principal ON mcp_session "
                    "(principal, last_seen)",
                    err, errlen);
  /* The sweep deletes the sessions idle too long: without it, a scan of every row. */
  if (ret == 0)
    ret = store_ddl(s,
                    "CREATE INDEX IF NOT EXISTS mcp_session_by_last_seen ON mcp_session "
                    "(last_seen)",
                    err, errlen);
  /* Subscriptions stored as a JSON list on the session row move to their own rows. */
  if (ret == 0)
    ret = store_ddl(s,
                    "INSERT OR IGNORE INTO mcpsub_subscription (session, uri, debounce) "
                    "SELECT m.id, CASE j.type WHEN 'text' THEN j.value "
                    "ELSE json_extract(j.value, '$.uri') END, "
                    "CASE j.type WHEN 'object' THEN json_extract(j.value, '$.debounce') END "
                    "FROM mcp_session AS m, json_each(m.subscriptions) AS j "
                    "WHERE m.subscriptions <> '[]' AND (j.type = 'text' OR "
                    "json_type(j.value, '$.uri') = 'text'); "
                    "UPDATE mcp_session SET subscriptions = '[]' WHERE subscriptions <> '[]'",
                    err, errlen);
  /* Counted once, from the rows; the triggers keep it from then on. */
  if (ret == 0 && !store_has_column(s, "mcp_session", "subscription_count"))
    ret = store_ddl(s,
                    "ALTER TABLE mcp_session ADD COLUMN subscription_count INTEGER NOT NULL "
                    "DEFAULT 0; UPDATE mcp_session SET subscription_count = (SELECT count(*) FROM "
                    "mcpsub_subscription WHERE session = mcp_session.id)",
                    err, errlen);
  if (ret == 0) ret = store_ddl(s, STORE_SUBSCRIPTION_COUNT_TRIGGERS, err, errlen);
  return ret;
}

/*
 * Makes the mcpsub_audit_* triggers in the database exactly the wanted set
 * for s->tables: drops the ones that differ or belong to no exported table,
 * creates the missing ones. Runs no DDL at all when they already match.
 * Must run inside a write transaction.
 */
static int store_sync_triggers(store_t *s, char *err, size_t errlen) {
  int n_want = 3 * s->n_tables, n_have = 0, cap = 0, ret = 0, rc;
  store_trigger *want = mem_calloc((size_t)n_want + 1, sizeof(*want));
  char **drop = NULL;
  sqlite3_stmt *st = NULL;

  for (int i = 0; i < s->n_tables; i++) store_build_triggers(s, &s->tables[i], &want[3 * i]);

  ret = store_stmt_get(s,
                       "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' "
                       "AND name LIKE '" STORE_TRIGGER_PREFIX "%' ESCAPE '\\'",
                       &st, err, errlen);
  if (ret < 0) goto done;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    const char *sql = (const char *)sqlite3_column_text(st, 1);
    bool keep = false;
    for (int i = 0; i < n_want && !keep; i++) {
      if (!want[i].present && strcmp(want[i].name, name) == 0 && sql != NULL &&
          strcmp(want[i].sql, sql) == 0)
        keep = want[i].present = true;
    }
    if (keep) continue;
    if (n_have == cap) {
      cap = cap ? 2 * cap : 8;
      drop = mem_realloc(drop, (size_t)cap * sizeof(*drop));
    }
    drop[n_have++] = mem_strdup(name);
  }
  if (rc != SQLITE_DONE) {
    ret = store_error(s, rc, err, errlen);
    goto done;
  }
  store_stmt_put(s, st);
  st = NULL;

  for (int i = 0; i < n_have && ret == 0; i++) {
    char *sql = sqlite3_mprintf("DROP TRIGGER IF EXISTS \"%w\"", drop[i]);
    if (sql == NULL) abort();
    ret = store_ddl(s, sql, err, errlen);
    sqlite3_free(sql);
  }
  for (int i = 0; i < n_want && ret == 0; i++)
    if (!want[i].present) ret = store_ddl(s, want[i].sql, err, errlen);

done:
  store_stmt_put(s, st);
  for (int i = 0; i < n_have; i++) free(drop[i]);
  free(drop);
  for (int i = 0; i < n_want; i++) {
    sqlite3_free(want[i].name);
    sqlite3_free(want[i].sql);
  }
  free(want);
  return ret;
}

/*
 * Re-reads the exported tables, brings the triggers in line (unless
 * read-only) and records the resulting schema version. Runs inside a
 * transaction (a write one unless read-only). *changed (may be NULL) says
 * whether the tables differ from the ones held before.
 */
/* Forgets the statement texts built for the tables held (they are about to change). */
static void store_get_sql_clear(store_t *s) {
  if (sq(s)->get_sql == NULL) return;
  for (int i = 0; i < s->n_tables; i++) sqlite3_free(sq(s)->get_sql[i]);
  free(sq(s)->get_sql);
  free(sq(s)->get_hint);
  sq(s)->get_sql = NULL;
  sq(s)->get_hint = NULL;
}

static int store_reload(store_t *s, bool *changed, char *err, size_t errlen) {
  store_table *tables = NULL;
  int n = 0;
  int ret = store_read_tables(s, &tables, &n, err, errlen);
  if (ret < 0) return ret;
  bool same = store_tables_equal(s->tables, s->n_tables, tables, n);
  store_get_sql_clear(s);
  store_tables_free(s->tables, s->n_tables);
  s->tables = tables;
  s->n_tables = n;
  if (changed != NULL) *changed = !same;
  store_stmt_clear(s);
  if (!s->readonly && !s->no_triggers) {
    ret = store_sync_triggers(s, err, errlen);
    if (ret < 0) return ret;
  }
  ret = store_schema_version(s, &sq(s)->schema_version, err, errlen);
  s->schema_generation = sq(s)->schema_version;
  return ret;
}

/* Opening ---------------------------------------------------------------------- */

/* Creates the directory that will hold path, if it is missing (one level). */
static int store_make_parent_dir(const char *path, char *err, size_t errlen) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL || slash == path) return 0;
  char *dir = mem_strndup(path, (size_t)(slash - path));
  int ret = 0;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    ret = -errno;
    store_set_err(err, errlen, "cannot create directory %s: %s", dir, strerror(errno));
  }
  free(dir);
  return ret;
}

/* Applies the schema file at path when the database has no application table or view. */
static int store_apply_app_schema(store_t *s, const char *path, char *err, size_t errlen) {
  sqlite3_stmt *st;
  int64_t n = 0;
  char *text = NULL;
  int ret = store_stmt_get(s,
                           "SELECT count(*) FROM sqlite_schema "
                           "WHERE type IN ('table', 'view') AND " STORE_SQL_NOT_SYSTEM,
                           &st, err, errlen);
  if (ret < 0) return ret;
  ret = store_step_int64(s, st, &n, err, errlen);
  store_stmt_put(s, st);
  if (ret < 0 || n > 0) return ret;
  ret = store_read_file(path, &text, err, errlen);
  if (ret < 0) return ret;
  char msg[512];
  /* The operator's file may use the legacy "string" quoting our own SQL refuses. */
  sqlite3_db_config(sq(s)->db, SQLITE_DBCONFIG_DQS_DML, 1, (int *)NULL);
  ret = store_ddl(s, text, msg, sizeof(msg));
  sqlite3_db_config(sq(s)->db, SQLITE_DBCONFIG_DQS_DML, 0, (int *)NULL);
  if (ret < 0) store_set_err(err, errlen, "schema %s: %s", path, msg);
  free(text);
  return ret;
}

static void sq_close(store_t *s);
static int sq_audit_max_seq(store_t *s, int64_t *seq);
static int sq_session_set_subscriptions(store_t *s, const char *id, const char *json_array);

/*
 * Once per process, before SQLite initializes: no memory statistics.
 * Nothing reads them, and keeping them takes SQLite's global memory mutex
 * on every allocation of every connection (a read's profile showed it).
 * Refused harmlessly if something initialized SQLite first.
 */
static void store_sqlite_configure(void) {
  (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

/* Opens the connection with flags and the settings every store has. */
static int store_connect(const char *path, int flags, bool readonly, store_t **out, char *err,
                         size_t errlen) {
  static pthread_once_t configured = PTHREAD_ONCE_INIT;
  (void)pthread_once(&configured, store_sqlite_configure);
  store_t *s = mem_calloc(1, sizeof(sq_t));
  s->ops = &store_sqlite_ops;
  s->readonly = readonly;
  int rc = sqlite3_open_v2(path, &sq(s)->db, flags, NULL);
  if (rc != SQLITE_OK) {
    store_set_err(err, errlen, "cannot open %s: %s", path,
                  sq(s)->db ? sqlite3_errmsg(sq(s)->db) : sqlite3_errstr(rc));
    sqlite3_close(sq(s)->db);
    free(s);
    *out = NULL;
    return rc == SQLITE_NOMEM ? -ENOMEM : rc == SQLITE_BUSY ? -EBUSY : -EIO;
  }
  sqlite3_busy_timeout(sq(s)->db, STORE_BUSY_TIMEOUT_MS);
  /*
   * A quoted identifier that no longer exists (a column renamed by another
   * connection before our next schema refresh) must be an error, never
   * silently a string literal.
   */
  sqlite3_db_config(sq(s)->db, SQLITE_DBCONFIG_DQS_DML, 0, (int *)NULL);
  *out = s;
  return 0;
}

static void sq_set_busy_timeout(store_t *s, int ms) {
  sqlite3_busy_timeout(sq(s)->db, ms);
}

static void sq_set_busy_handler(store_t *s, int (*fn)(void *data, int count), void *data) {
  sqlite3_busy_handler(sq(s)->db, fn, data);
}

static int sq_open(const char *path, const char *schema_path, store_t **out, char *err,
                   size_t errlen) {
  store_t *s = NULL;
  int ret;

  *out = NULL;
  ret = store_make_parent_dir(path, err, errlen);
  if (ret < 0) return ret;
  ret = store_connect(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, false,
                      &s, err, errlen);
  if (ret < 0) return ret;
  if ((ret = store_exec(s, "PRAGMA journal_mode=WAL", err, errlen)) < 0 ||
      (ret = store_exec(s, "PRAGMA synchronous=NORMAL", err, errlen)) < 0 ||
      (ret = store_exec(s, "PRAGMA foreign_keys=ON", err, errlen)) < 0)
    goto fail;
  /* One write transaction: concurrent starters apply schemas and triggers once. */
  ret = store_begin(s, true, err, errlen);
  if (ret < 0) goto fail;
  ret = store_ddl(s, store_system_sql, err, errlen);
  if (ret < 0) goto fail;
  ret = store_migrate(s, err, errlen);
  if (ret < 0) goto fail;
  if (schema_path != NULL && schema_path[0] != '\0') {
    ret = store_apply_app_schema(s, schema_path, err, errlen);
    if (ret < 0) goto fail;
  }
  ret = store_reload(s, NULL, err, errlen);
  if (ret < 0) goto fail;
  ret = store_commit(s, err, errlen);
  if (ret < 0) goto fail;
  *out = s;
  return 0;

fail:
  store_rollback(s);
  sq_close(s);
  return ret;
}

static int sq_open_readonly(const char *path, store_t **out, char *err, size_t errlen) {
  store_t *s = NULL;
  int ret;

  *out = NULL;
  ret = store_connect(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, true, &s, err, errlen);
  if (ret < 0) return ret;
  ret = store_begin(s, false, err, errlen);
  if (ret < 0) goto fail;
  ret = store_reload(s, NULL, err, errlen);
  if (ret < 0) goto fail;
  ret = store_commit(s, err, errlen);
  if (ret < 0) goto fail;
  *out = s;
  return 0;

fail:
  store_rollback(s);
  sq_close(s);
  return ret;
}

static void sq_close(store_t *s) {
  if (s == NULL) return;
  for (int i = 0; i < sq(s)->n_cache; i++) {
    sqlite3_finalize(sq(s)->cache[i].stmt);
    free(sq(s)->cache[i].sql);
  }
  sq(s)->n_cache = 0;
  store_get_sql_clear(s);
  store_tables_free(s->tables, s->n_tables);
  sqlite3_close_v2(sq(s)->db);
  free(s);
}

static int sq_refresh_schema(store_t *s, bool *tables_changed) {
  int version, ret;
  char err[256];

  if (tables_changed != NULL) *tables_changed = false;
  /* A read batch is one snapshot: its schema cannot move after the first look. */
  if (sq(s)->read_batch && sq(s)->schema_looked) return 0;
  ret = store_schema_version(s, &version, err, sizeof(err));
  if (ret == 0) sq(s)->schema_looked = sq(s)->read_batch;
  if (ret < 0 || version == sq(s)->schema_version) return ret;
  ret = store_begin(s, !s->readonly && !s->no_triggers, err, sizeof(err));
  if (ret < 0) return ret;
  ret = store_reload(s, tables_changed, err, sizeof(err));
  if (ret == 0) ret = store_commit(s, err, sizeof(err));
  if (ret < 0) {
    log_warn("schema refresh failed", "error", err);
    store_rollback(s);
    sq(s)->schema_looked = false; /* the next call tries again */
  }
  return ret;
}

/* Reads --------------------------------------------------------------------------- */

/*
 * Appends `SELECT CAST(key AS TEXT)[, rowid], "c1", ...`: column 0 is the
 * key as the audit log writes it, then the row as store_row_json reads it.
 */
static void store_sql_select_columns(sqlite3_str *q, const store_table *t) {
  sqlite3_str_appendall(q, "SELECT CAST(");
  store_sql_key(q, t);
  sqlite3_str_appendall(q, " AS TEXT)");
  if (t->key_col < 0) sqlite3_str_appendall(q, ", rowid");
  for (int c = 0; c < t->n_cols; c++) {
    sqlite3_str_appendall(q, ", ");
    store_sql_ident(q, t->cols[c].name);
  }
}

/* store_sql_select_columns, then ` FROM "t"`. */
static void store_sql_select(sqlite3_str *q, const store_table *t) {
  store_sql_select_columns(q, t);
  sqlite3_str_appendall(q, " FROM ");
  store_sql_ident(q, t->name);
}

/*
 * The current row of a store_sql_select statement as a JSON object. A
 * rowid-keyed table's rows carry their key as member "rowid" (such tables
 * never have a column of that name; see store_read_table).
 */
static cJSON *store_row_json(const store_table *t, sqlite3_stmt *st) {
  cJSON *row = store_json_checked(cJSON_CreateObject());
  int idx = 1;
  if (t->key_col < 0) store_json_add(row, "rowid", store_value_json(st, idx++));
  for (int c = 0; c < t->n_cols; c++)
    store_json_add(row, t->cols[c].name, store_value_json(st, idx++));
  return row;
}

/*
 * store_get_record's statement for t: store_sql_select's columns, then the
 * record's version, in one statement (one snapshot: the version belongs to
 * the row read, with no transaction of its own to begin and commit). Built
 * once per table and schema.
 */
static const char *store_get_sql(store_t *s, const store_table *t) {
  int i = (int)(t - s->tables);
  assert(i >= 0 && i < s->n_tables);
  if (sq(s)->get_sql == NULL) {
    sq(s)->get_sql = mem_calloc((size_t)s->n_tables, sizeof(char *));
    sq(s)->get_hint = mem_calloc((size_t)s->n_tables, sizeof(store_stmt_hint));
  }
  if (sq(s)->get_sql[i] != NULL) return sq(s)->get_sql[i];
  sqlite3_str *q = store_sql_new(s);
  store_sql_select_columns(q, t);
  /*
   * Exported tables never start with mcpsub_: the alias cannot be one of
   * them. The record's last change by a seek down audit_log_by_key, not
   * max(seq): an aggregate allocates its context on every read.
   */
  sqlite3_str_appendall(q, ", (SELECT seq FROM audit_log WHERE tbl = ?2 AND key = CAST(mcpsub_t.");
  store_sql_key(q, t);
  sqlite3_str_appendall(q, " AS TEXT) ORDER BY seq DESC LIMIT 1) FROM ");
  store_sql_ident(q, t->name);
  sqlite3_str_appendall(q, " AS mcpsub_t WHERE ");
  store_sql_key(q, t);
  sqlite3_str_appendall(q, " = ?1");
  sq(s)->get_sql[i] = store_sql_finish(q);
  return sq(s)->get_sql[i];
}

/*
 * Steps store_get_record's statement for key: 0 with *st on the record's
 * row, or -ENOENT or the store's error; *st (when not NULL) goes back with
 * store_stmt_put. The record's version is its last column.
 */
static int sq_record_row(store_t *s, const store_table *t, const char *key, sqlite3_stmt **st) {
  *st = NULL;
  if (!store_key_valid(t, key)) return -ENOENT;
  const char *sql = store_get_sql(s, t);
  int ret = store_stmt_get_hinted(s, sql, &sq(s)->get_hint[t - s->tables], st, NULL, 0);
  if (ret < 0) return ret;
  store_bind_key(*st, 1, t, key);
  sqlite3_bind_text(*st, 2, t->name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(*st);
  return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : store_error(s, rc, NULL, 0);
}

static int sq_get_record(store_t *s, const store_table *t, const char *key, cJSON **row,
                         int64_t *version) {
  sqlite3_stmt *st;
  *row = NULL;
  *version = 0;
  int ret = sq_record_row(s, t, key, &st);
  if (ret == 0) {
    *row = store_row_json(t, st);
    *version = sqlite3_column_int64(st, 1 + (t->key_col < 0) + t->n_cols); /* NULL: 0 */
  }
  if (st != NULL) store_stmt_put(s, st);
  return ret;
}

/* sq_get_record with the row printed as it is read (store_get_record_text). */
static int sq_get_record_text(store_t *s, const store_table *t, const char *key, buf_t *out,
                              int64_t *version) {
  sqlite3_stmt *st;
  *version = 0;
  int ret = sq_record_row(s, t, key, &st);
  if (ret == 0) {
    int idx = 1; /* as store_row_json reads the row */
    buf_append_byte(out, '{');
    if (t->key_col < 0) {
      buf_append_str(out, "\"rowid\":");
      store_value_print(out, st, idx++);
    }
    for (int c = 0; c < t->n_cols; c++) {
      if (idx > 1) buf_append_byte(out, ',');
      buf_append_json_string(out, t->cols[c].name, strlen(t->cols[c].name));
      buf_append_byte(out, ':');
      store_value_print(out, st, idx++);
    }
    buf_append_byte(out, '}');
    *version = sqlite3_column_int64(st, idx); /* NULL: 0 */
  }
  if (st != NULL) store_stmt_put(s, st);
  return ret;
}

/*
 * Does a sw filter also bound its column to the range of its prefix? Under
 * BINARY collation the text values starting with p are exactly those from
 * p up to p with its last byte one higher (the filter keeps its substr()
 * test, the range only narrows what is read): the range lets an index on the
 * column seek, where substr() alone reads every row (a key completion on a
 * table of a million rows held the worker up 135 ms). Under NOCASE the
 * same holds of the prefix with its ASCII letters folded, as NOCASE folds
 * the column's values (store_bind_filter). An empty prefix (all text) or
 * one ending in byte 0xFF (no such successor) goes without.
 */
static bool store_sw_range(const store_table *t, const store_filter *f) {
  const store_column *c = &t->cols[f->col];
  /* Not under numeric affinity either: there "12" would be bound as 12, and text sorts after it. */
  if (f->op != STORE_SW || !(c->binary || c->nocase) || c->numeric || c->untyped ||
      !cJSON_IsString(f->value))
    return false;
  size_t len = strlen(f->value->valuestring);
  return len > 0 && (unsigned char)f->value->valuestring[len - 1] != 0xFF;
}

/*
 * Appends column c as a filter compares it: the column, or on an untyped
 * one (which keeps a blob as written) a blob as its hex text, as a row and
 * its audit image show it (store_sql_json_value) and so the subscriptions
 * compare it.
 */
static void store_sql_filter_col(sqlite3_str *q, const store_column *c) {
  if (c->untyped)
    sqlite3_str_appendf(q, "(CASE WHEN typeof(\"%w\") = 'blob' THEN hex(\"%w\") ELSE \"%w\" END)",
                        c->name, c->name, c->name);
  else
    store_sql_ident(q, c->name);
}

/* Appends " = ?first", or " IN (?first, ...)" for n values. */
static void store_sql_equals(sqlite3_str *q, int first, int n) {
  if (n == 1) {
    sqlite3_str_appendf(q, " = ?%d", first);
    return;
  }
  sqlite3_str_appendall(q, " IN (");
  for (int i = 0; i < n; i++) sqlite3_str_appendf(q, "%s?%d", i > 0 ? ", " : "", first + i);
  sqlite3_str_appendall(q, ")");
}

/* Appends one filter's condition on its column; *param numbers the placeholders. */
static void store_sql_filter(sqlite3_str *q, const store_table *t, const store_filter *f,
                             int *param) {
  static const char *const cmp[] = {
      [STORE_NE] = "<>", [STORE_GT] = ">", [STORE_GE] = ">=", [STORE_LT] = "<", [STORE_LE] = "<=",
  };
  const store_column *c = &t->cols[f->col];
  /*
   * Text compares byte for byte (sub_index.c): on a column of another
   * collation (NOCASE, RTRIM) a comparison names BINARY. An equality also
   * keeps the column's own, which every byte-equal value satisfies, so
   * that an index on the column still finds the rows (not on an untyped
   * column: its blobs compare as their hex text, which the column does not
   * hold).
   */
  bool other = !c->binary, narrow = other && !c->untyped;
  switch (f->op) {
  case STORE_EQ:
  case STORE_IN: {
    if (f->op == STORE_EQ && cJSON_IsNull(f->value)) {
      store_sql_ident(q, c->name);
      sqlite3_str_appendall(q, " IS NULL");
      break;
    }
    int first = *param + 1, n = f->op == STORE_IN ? cJSON_GetArraySize(f->value) : 1;
    if (narrow) {
      store_sql_ident(q, c->name);
      store_sql_equals(q, first, n);
      sqlite3_str_appendall(q, " AND ");
    }
    store_sql_filter_col(q, c);
    if (other) sqlite3_str_appendall(q, " COLLATE BINARY");
    store_sql_equals(q, first, n);
    *param += n;
    break;
  }
  case STORE_SW:
  case STORE_CT:
    sqlite3_str_appendall(q, "(typeof(");
    store_sql_filter_col(q, c);
    sqlite3_str_appendall(q, ") = 'text' AND ");
    ++*param;
    if (f->op == STORE_SW) {
      sqlite3_str_appendall(q, "substr(");
      store_sql_filter_col(q, c);
      sqlite3_str_appendf(q, ", 1, length(?%d)) = ?%d)", *param, *param);
      if (store_sw_range(t, f)) { /* its bounds: two more parameters */
        sqlite3_str_appendall(q, " AND ");
        store_sql_ident(q, c->name);
        sqlite3_str_appendf(q, " >= ?%d AND ", *param + 1);
        store_sql_ident(q, c->name);
        sqlite3_str_appendf(q, " < ?%d", *param + 2);
        *param += 2;
      }
    } else {
      sqlite3_str_appendall(q, "instr(");
      store_sql_filter_col(q, c);
      sqlite3_str_appendf(q, ", ?%d) > 0)", *param);
    }
    break;
  default:
    store_sql_filter_col(q, c);
    sqlite3_str_appendf(q, "%s %s ?%d", other ? " COLLATE BINARY" : "", cmp[f->op], ++*param);
    break;
  }
}

/* Binds one filter's values from *param on (the numbering of store_sql_filter). */
static int store_bind_filter(sqlite3_stmt *st, const store_table *t, const store_filter *f,
                             int *param) {
  if (f->op == STORE_EQ && cJSON_IsNull(f->value)) return SQLITE_OK;
  if (store_sw_range(t, f)) { /* the prefix, then its bounds (store_sw_range) */
    const char *p = f->value->valuestring;
    size_t len = strlen(p);
    char *lower = mem_strdup(p), *upper = mem_strdup(p);
    /*
     * NOCASE compares both sides with ASCII letters folded to lower case:
     * the bounds are the folded prefix and its successor (that of "AZ" is
     * "a{", where "A[" would fold below "az..."); they take in more than
     * the prefix, which the byte-for-byte test then leaves out.
     */
    for (size_t i = 0; i < len && t->cols[f->col].nocase; i++)
      if (p[i] >= 'A' && p[i] <= 'Z') lower[i] = upper[i] = (char)(p[i] - 'A' + 'a');
    upper[len - 1] = (char)((unsigned char)upper[len - 1] + 1);
    int rc = sqlite3_bind_text(st, ++*param, p, (int)len, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, ++*param, lower, (int)len, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, ++*param, upper, (int)len, SQLITE_TRANSIENT);
    free(lower);
    free(upper);
    return rc;
  }
  if (f->op != STORE_IN) return store_bind_json(st, ++*param, f->value);
  const cJSON *v;
  cJSON_ArrayForEach(v, f->value) {
    int rc = store_bind_json(st, ++*param, v);
    if (rc != SQLITE_OK) return rc;
  }
  return SQLITE_OK;
}

/* Appends " WHERE <filters, ANDed>" (nothing without filters); *param numbers the placeholders. */
static void store_sql_where(sqlite3_str *q, const store_table *t, const store_filter *filters,
                            size_t n, int *param) {
  for (size_t i = 0; i < n; i++) {
    sqlite3_str_appendall(q, i == 0 ? " WHERE " : " AND ");
    store_sql_filter(q, t, &filters[i], param);
  }
}

/* Binds the values store_sql_where placed, from *param on. */
static int store_bind_filters(store_t *s, sqlite3_stmt *st, const store_table *t,
                              const store_filter *filters, size_t n, int *param) {
  for (size_t i = 0; i < n; i++) {
    int rc = store_bind_filter(st, t, &filters[i], param);
    if (rc != SQLITE_OK) return store_error(s, rc, NULL, 0);
  }
  return 0;
}

static int sq_count_where(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                          int64_t *count) {
  *count = 0;
  if (!store_filters_valid(t, filters, n)) return -EINVAL;
  int param = 0;
  sqlite3_str *q = store_sql_new(s);
  sqlite3_str_appendall(q, "SELECT count(*) FROM ");
  store_sql_ident(q, t->name);
  store_sql_where(q, t, filters, n, &param);
  char *sql = store_sql_finish(q);
  sqlite3_stmt *st = NULL;
  int ret = store_stmt_get(s, sql, &st, NULL, 0);
  sqlite3_free(sql);
  if (ret < 0) return ret;
  param = 0;
  ret = store_bind_filters(s, st, t, filters, n, &param);
  if (ret == 0) ret = store_step_int64(s, st, count, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

static int sq_query(store_t *s, const store_table *t, const store_filter *filters, size_t n_filters,
                    int limit, const char *after_key, cJSON **rows, char **next_key) {
  sqlite3_stmt *st = NULL;
  sqlite3_str *q;
  char *sql;
  cJSON *result = NULL;
  int ret, rc, param = 0, n = 0;
  bool more = false;

  *rows = NULL;
  *next_key = NULL;
  if (limit < 1) limit = 1;
  if (limit > STORE_QUERY_MAX_LIMIT) limit = STORE_QUERY_MAX_LIMIT;
  if (after_key != NULL && !store_key_valid(t, after_key)) return -EINVAL;
  if (!store_filters_valid(t, filters, n_filters)) return -EINVAL;

  q = store_sql_new(s);
  store_sql_select(q, t);
  store_sql_where(q, t, filters, n_filters, &param);
  if (after_key != NULL) {
    sqlite3_str_appendall(q, n_filters == 0 ? " WHERE " : " AND ");
    store_sql_key(q, t);
    sqlite3_str_appendf(q, " > ?%d", ++param);
  }
  sqlite3_str_appendall(q, " ORDER BY ");
  store_sql_key(q, t);
  sqlite3_str_appendf(q, " LIMIT ?%d", ++param);
  sql = store_sql_finish(q);

  ret = store_stmt_get(s, sql, &st, NULL, 0);
  if (ret < 0) goto done;
  param = 0;
  ret = store_bind_filters(s, st, t, filters, n_filters, &param);
  if (ret < 0) goto done;
  if (after_key != NULL) store_bind_key(st, ++param, t, after_key);
  sqlite3_bind_int(st, ++param, limit + 1);

  result = store_json_checked(cJSON_CreateArray());
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == limit) {
      more = true;
      break;
    }
    cJSON_AddItemToArray(result, store_row_json(t, st));
    n++;
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    ret = store_error(s, rc, NULL, 0);
    goto done;
  }
  if (more) *next_key = store_row_key(t, cJSON_GetArrayItem(result, n - 1));
  *rows = result;
  result = NULL;

done:
  store_stmt_put(s, st);
  cJSON_Delete(result);
  sqlite3_free(sql);
  return ret;
}

static int sq_table_version(store_t *s, const store_table *t, int64_t *version) {
  sqlite3_stmt *st;
  *version = 0;
  int ret = store_stmt_get(s, "SELECT max(seq) FROM audit_log WHERE tbl = ?1", &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, t->name, -1, SQLITE_STATIC);
  ret = store_step_int64(s, st, version, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

static int sq_table_count(store_t *s, const store_table *t, int64_t *count) {
  sqlite3_stmt *st;
  sqlite3_str *q = store_sql_new(s);
  sqlite3_str_appendall(q, "SELECT count(*) FROM ");
  store_sql_ident(q, t->name);
  char *sql = store_sql_finish(q);
  *count = 0;
  int ret = store_stmt_get(s, sql, &st, NULL, 0);
  if (ret == 0) {
    ret = store_step_int64(s, st, count, NULL, 0);
    store_stmt_put(s, st);
  }
  sqlite3_free(sql);
  return ret;
}

/* Writes ----------------------------------------------------------------------------- */

static int store_row_exists(store_t *s, const store_table *t, const char *key, bool *exists,
                            char *err, size_t errlen) {
  sqlite3_stmt *st;
  int64_t found = 0;
  sqlite3_str *q = store_sql_new(s);
  sqlite3_str_appendall(q, "SELECT 1 FROM ");
  store_sql_ident(q, t->name);
  sqlite3_str_appendall(q, " WHERE ");
  store_sql_key(q, t);
  sqlite3_str_appendall(q, " = ?1");
  char *sql = store_sql_finish(q);
  int ret = store_stmt_get(s, sql, &st, err, errlen);
  if (ret == 0) {
    store_bind_key(st, 1, t, key);
    ret = store_step_int64(s, st, &found, err, errlen);
    store_stmt_put(s, st);
  }
  *exists = found != 0;
  sqlite3_free(sql);
  return ret;
}

/* Binds assigns to parameters first, first + 1, ... */
static int store_bind_assigns(store_t *s, sqlite3_stmt *st, int first, const store_assign *assigns,
                              int n, char *err, size_t errlen) {
  for (int i = 0; i < n; i++) {
    int rc = store_bind_json(st, first + i, assigns[i].value);
    if (rc != SQLITE_OK) return store_error(s, rc, err, errlen);
  }
  return 0;
}

/* Prepares sql, binds the key (?1, unless key_value/key are both NULL) and assigns, steps it. */
static int store_run_write(store_t *s, const store_table *t, const char *sql, const char *key,
                           const cJSON *key_value, const store_assign *assigns, int n, char *err,
                           size_t errlen) {
  sqlite3_stmt *st;
  int first = 1, rc = SQLITE_OK;
  int ret = store_stmt_get(s, sql, &st, err, errlen);
  if (ret < 0) return ret;
  if (key != NULL)
    rc = store_bind_key(st, first++, t, key);
  else if (key_value != NULL)
    rc = store_bind_json(st, first++, key_value);
  if (rc != SQLITE_OK) ret = store_error(s, rc, err, errlen);
  if (ret == 0) ret = store_bind_assigns(s, st, first, assigns, n, err, errlen);
  if (ret == 0) ret = store_step_done(s, st, NULL, err, errlen);
  store_stmt_put(s, st);
  return ret;
}

/*
 * PUT: one upsert on the key. Every non-key column is set from the
 * would-be-inserted row (excluded.*), so a column left out of obj takes its
 * default, exactly as on insert.
 */
static int store_write_replace(store_t *s, const store_table *t, const char *key,
                               const store_assign *assigns, int n, bool *created, char *err,
                               size_t errlen) {
  bool exists;
  int ret = store_row_exists(s, t, key, &exists, err, errlen);
  if (ret < 0) return ret;
  sqlite3_str *q = store_sql_new(s);
  sqlite3_str_appendall(q, "INSERT INTO ");
  store_sql_ident(q, t->name);
  sqlite3_str_appendall(q, " (");
  store_sql_key(q, t);
  for (int i = 0; i < n; i++) {
    sqlite3_str_appendall(q, ", ");
    store_sql_ident(q, t->cols[assigns[i].col].name);
  }
  sqlite3_str_appendall(q, ") VALUES (?1");
  for (int i = 0; i < n; i++) sqlite3_str_appendf(q, ", ?%d", i + 2);
  sqlite3_str_appendall(q, ") ON CONFLICT (");
  store_sql_key(q, t);
  sqlite3_str_appendall(q, ") DO ");
  bool any = false;
  for (int c = 0; c < t->n_cols; c++) {
    if (c == t->key_col || t->cols[c].generated) continue;
    sqlite3_str_appendall(q, any ? ", " : "UPDATE SET ");
    store_sql_ident(q, t->cols[c].name);
    sqlite3_str_appendall(q, " = excluded.");
    store_sql_ident(q, t->cols[c].name);
    any = true;
  }
  if (!any) sqlite3_str_appendall(q, "NOTHING");
  char *sql = store_sql_finish(q);
  ret = store_run_write(s, t, sql, key, NULL, assigns, n, err, errlen);
  sqlite3_free(sql);
  *created = ret == 0 && !exists;
  return ret;
}

/* PATCH: the given columns of an existing row. */
static int store_write_patch(store_t *s, const store_table *t, const char *key,
                             const store_assign *assigns, int n, char *err, size_t errlen) {
  bool exists;
  int ret = store_row_exists(s, t, key, &exists, err, errlen);
  if (ret < 0) return ret;
  if (!exists) {
    store_set_err(err, errlen, "no record %s in table %s", key, t->name);
    return -ENOENT;
  }
  if (n == 0) return 0;
  sqlite3_str *q = store_sql_new(s);
  sqlite3_str_appendall(q, "UPDATE ");
  store_sql_ident(q, t->name);
  for (int i = 0; i < n; i++) {
    sqlite3_str_appendall(q, i == 0 ? " SET " : ", ");
    store_sql_ident(q, t->cols[assigns[i].col].name);
    sqlite3_str_appendf(q, " = ?%d", i + 2);
  }
  sqlite3_str_appendall(q, " WHERE ");
  store_sql_key(q, t);
  sqlite3_str_appendall(q, " = ?1");
  char *sql = store_sql_finish(q);
  ret = store_run_write(s, t, sql, key, NULL, assigns, n, err, errlen);
  sqlite3_free(sql);
  return ret;
}

/* POST: a new row; the key comes from obj, or from the rowid for integer keys. */
static int store_write_insert(store_t *s, const store_table *t, const cJSON *key_value,
                              const store_assign *assigns, int n, char **new_key, char *err,
                              size_t errlen) {
  if (key_value == NULL && !t->key_integer) {
    store_set_err(err, errlen, "missing key column %s", t->cols[t->key_col].name);
    return -EINVAL;
  }
  sqlite3_str *q = store_sql_new(s);
  sqlite3_str_appendall(q, "INSERT INTO ");
  store_sql_ident(q, t->name);
  if (key_value == NULL && n == 0) {
    sqlite3_str_appendall(q, " DEFAULT VALUES");
  } else {
    int param = 0;
    sqlite3_str_appendall(q, " (");
    if (key_value != NULL) {
      store_sql_key(q, t);
      param++;
    }
    for (int i = 0; i < n; i++) {
      if (param > 0 || i > 0) sqlite3_str_appendall(q, ", ");
      store_sql_ident(q, t->cols[assigns[i].col].name);
    }
    sqlite3_str_appendall(q, ") VALUES (");
    for (int i = 0; i < n + param; i++) sqlite3_str_appendf(q, i == 0 ? "?%d" : ", ?%d", i + 1);
    sqlite3_str_appendall(q, ")");
  }
  char *sql = store_sql_finish(q);
  int ret = store_run_write(s, t, sql, NULL, key_value, assigns, n, err, errlen);
  sqlite3_free(sql);
  if (ret < 0) return ret;
  if (t->key_integer) {
    char text[24];
    snprintf(text, sizeof(text), "%lld", (long long)sqlite3_last_insert_rowid(sq(s)->db));
    *new_key = mem_strdup(text);
  } else {
    *new_key = store_json_key_text(key_value);
  }
  return 0;
}

/*
 * The guard's row scope on the row with key (NULL key: nothing to check):
 * 0 when the row is absent or in scope, -EACCES when another's.
 */
static int store_guard_check(store_t *s, const store_table *t, const char *key,
                             const store_guard *g, char *err, size_t errlen) {
  if (g == NULL || g->scope_column == NULL || key == NULL) return 0;
  if (store_column_index(t, g->scope_column) < 0) {
    store_set_err(err, errlen, "the row scope's column %s is not in table %s", g->scope_column,
                  t->name);
    return -EACCES;
  }
  sqlite3_str *q = store_sql_new(s);
  sqlite3_str_appendall(q, "SELECT CAST(");
  store_sql_ident(q, g->scope_column);
  sqlite3_str_appendall(q, " AS TEXT) FROM ");
  store_sql_ident(q, t->name);
  sqlite3_str_appendall(q, " WHERE ");
  store_sql_key(q, t);
  sqlite3_str_appendall(q, " = ?1");
  char *sql = store_sql_finish(q);
  sqlite3_stmt *st;
  int ret = store_stmt_get(s, sql, &st, err, errlen);
  sqlite3_free(sql);
  if (ret < 0) return ret;
  store_bind_key(st, 1, t, key);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const unsigned char *v = sqlite3_column_text(st, 0);
    if (v == NULL || strcmp((const char *)v, g->scope_value) != 0) {
      store_set_err(err, errlen, "record %s of %s is outside your row scope", key, t->name);
      ret = -EACCES;
    }
  } else if (rc != SQLITE_DONE) {
    ret = store_error(s, rc, err, errlen);
  }
  store_stmt_put(s, st);
  return ret;
}

/* Records the guard's principal on the audit rows written since seq before. */
static int store_guard_stamp(store_t *s, const store_guard *g, int64_t before, char *err,
                             size_t errlen) {
  if (g == NULL || g->principal == NULL) return 0;
  sqlite3_stmt *st;
  int ret =
      store_stmt_get(s, "UPDATE audit_log SET principal = ?1 WHERE seq > ?2", &st, err, errlen);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, g->principal, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, before);
  ret = store_step_done(s, st, NULL, err, errlen);
  store_stmt_put(s, st);
  return ret;
}

static int store_delete_row(store_t *s, const store_table *t, const char *key);

/*
 * The rc of reading back, in its own transaction, the row a write just
 * left (store_write_as's row): a row not found there is the store's
 * failure (-EIO, err says so), and the write is rolled back.
 */
static int store_written_row(int rc, const store_table *t, const char *key, char *err,
                             size_t errlen) {
  if (rc != -ENOENT) return rc;
  store_set_err(err, errlen, "record %s of %s cannot be read back after its write", key, t->name);
  return -EIO;
}

static int sq_write_as(store_t *s, const store_table *t, const char *key, const cJSON *obj,
                       store_write_mode mode, const store_guard *guard, char **out_key,
                       bool *created, cJSON **row, int64_t *version, char *err, size_t errlen) {
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
    if (!store_key_valid(t, key)) {
      /* Integer-keyed: a PUT cannot create such a row, any other mode finds none. */
      if (mode == STORE_WRITE_REPLACE) {
        store_set_err(err, errlen, "key must be an integer");
        ret = -EINVAL;
      } else {
        store_set_err(err, errlen, "no record %s in table %s", key, t->name);
        ret = -ENOENT;
      }
      goto done;
    }
  } else {
    key = NULL;
  }
  ret = store_write_parse(t, key, obj, assigns, &n, &key_value, err, errlen);
  if (ret < 0) goto done;

  ret = store_begin(s, true, err, errlen);
  if (ret < 0) goto done;
  in_txn = true;
  int64_t before = 0;
  ret = sq_audit_max_seq(s, &before);
  if (ret == 0) ret = store_guard_check(s, t, key, guard, err, errlen);
  if (ret < 0) goto done;
  switch (mode) {
  case STORE_WRITE_REPLACE:
    ret = store_write_replace(s, t, key, assigns, n, &was_created, err, errlen);
    if (ret == 0) new_key = mem_strdup(key);
    break;
  case STORE_WRITE_PATCH:
    ret = store_write_patch(s, t, key, assigns, n, err, errlen);
    if (ret == 0) new_key = mem_strdup(key);
    break;
  case STORE_WRITE_INSERT:
    ret = store_write_insert(s, t, key_value, assigns, n, &new_key, err, errlen);
    was_created = ret == 0;
    break;
  default: store_set_err(err, errlen, "unknown write mode"); ret = -EINVAL;
  }
  /* What was written must be in the scope too: nobody writes rows into another's. */
  if (ret == 0) ret = store_guard_check(s, t, new_key, guard, err, errlen);
  if (ret == 0) ret = store_guard_stamp(s, guard, before, err, errlen);
  if (ret == 0 && row != NULL)
    ret = store_written_row(sq_get_record(s, t, new_key, row, version), t, new_key, err, errlen);
  if (ret < 0) goto done;
  ret = store_commit(s, err, errlen);
  if (ret < 0) goto done;
  in_txn = false;
  if (out_key != NULL) {
    *out_key = new_key;
    new_key = NULL;
  }
  if (created != NULL) *created = was_created;

done:
  if (in_txn) store_rollback(s);
  if (ret < 0 && row != NULL) {
    cJSON_Delete(*row);
    *row = NULL;
  }
  free(new_key);
  free(assigns);
  return ret;
}

static int sq_delete_as(store_t *s, const store_table *t, const char *key, const store_guard *guard,
                        char *err, size_t errlen) {
  if (!store_key_valid(t, key)) return -ENOENT;
  if (guard == NULL) return store_delete_row(s, t, key);
  int ret = store_begin(s, true, err, errlen);
  if (ret < 0) return ret;
  int64_t before = 0;
  ret = sq_audit_max_seq(s, &before);
  if (ret == 0) ret = store_guard_check(s, t, key, guard, err, errlen);
  if (ret == 0) ret = store_delete_row(s, t, key);
  if (ret == 0) ret = store_guard_stamp(s, guard, before, err, errlen);
  if (ret == 0) ret = store_commit(s, err, errlen);
  if (ret < 0) store_rollback(s);
  return ret;
}

/*
 * The UPDATE (set) or DELETE (set NULL) of every row matching filters, in
 * the current transaction; *changed gets how many rows.
 */
static int store_bulk_run(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                          const store_assign *assigns, int n_assign, int64_t *changed, char *err,
                          size_t errlen) {
  int param = 0;
  sqlite3_str *q = store_sql_new(s);
  if (assigns == NULL) {
    sqlite3_str_appendall(q, "DELETE FROM ");
    store_sql_ident(q, t->name);
  } else {
    sqlite3_str_appendall(q, "UPDATE ");
    store_sql_ident(q, t->name);
    for (int i = 0; i < n_assign; i++) {
      sqlite3_str_appendall(q, i == 0 ? " SET " : ", ");
      store_sql_ident(q, t->cols[assigns[i].col].name);
      sqlite3_str_appendf(q, " = ?%d", ++param);
    }
  }
  store_sql_where(q, t, filters, n, &param);
  char *sql = store_sql_finish(q);
  sqlite3_stmt *st = NULL;
  int ret = store_stmt_get(s, sql, &st, err, errlen);
  sqlite3_free(sql);
  if (ret < 0) return ret;
  param = 0;
  for (int i = 0; i < n_assign && ret == 0; i++) {
    int rc = store_bind_json(st, ++param, assigns[i].value);
    if (rc != SQLITE_OK) ret = store_error(s, rc, err, errlen);
  }
  if (ret == 0) ret = store_bind_filters(s, st, t, filters, n, &param);
  if (ret == 0) ret = store_step_done(s, st, changed, err, errlen);
  store_stmt_put(s, st);
  return ret;
}

static int sq_bulk_as(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                      const cJSON *set, const store_guard *guard, int64_t *changed, char *err,
                      size_t errlen) {
  store_assign *assigns = NULL;
  int n_assign = 0, ret;
  *changed = 0;
  ret = store_bulk_parse(t, filters, n, set, guard, &assigns, &n_assign, err, errlen);
  if (ret < 0) goto done;
  ret = store_begin(s, true, err, errlen);
  if (ret < 0) goto done;
  int64_t before = 0;
  ret = sq_audit_max_seq(s, &before);
  if (ret == 0) ret = store_bulk_run(s, t, filters, n, assigns, n_assign, changed, err, errlen);
  if (ret == 0) ret = store_guard_stamp(s, guard, before, err, errlen);
  if (ret == 0) ret = store_commit(s, err, errlen);
  if (ret < 0) {
    store_rollback(s);
    *changed = 0;
  }
done:
  free(assigns);
  return ret;
}

/* DELETE of one row in the current transaction (or its own); -ENOENT when there was none. */
static int store_delete_row(store_t *s, const store_table *t, const char *key) {
  sqlite3_stmt *st;
  int64_t changes = 0;

  sqlite3_str *q = store_sql_new(s);
  sqlite3_str_appendall(q, "DELETE FROM ");
  store_sql_ident(q, t->name);
  sqlite3_str_appendall(q, " WHERE ");
  store_sql_key(q, t);
  sqlite3_str_appendall(q, " = ?1");
  char *sql = store_sql_finish(q);
  int ret = store_stmt_get(s, sql, &st, NULL, 0);
  if (ret == 0) {
    store_bind_key(st, 1, t, key);
    ret = store_step_done(s, st, &changes, NULL, 0);
    store_stmt_put(s, st);
  }
  sqlite3_free(sql);
  if (ret == 0 && changes == 0) ret = -ENOENT;
  return ret;
}

/* Audit log ------------------------------------------------------------------------- */

static int sq_audit_max_seq(store_t *s, int64_t *seq) {
  /* sqlite_sequence remembers the highest seq ever used, even once pruned away. */
  sqlite3_stmt *st;
  int ret = store_stmt_get(s,
                           "SELECT max(ifnull((SELECT max(seq) FROM audit_log), 0), "
                           "ifnull((SELECT seq FROM sqlite_sequence WHERE name = 'audit_log'), 0))",
                           &st, NULL, 0);
  *seq = 0;
  if (ret < 0) return ret;
  ret = store_step_int64(s, st, seq, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

#define STORE_AUDIT_COLUMNS "seq, tbl, key, op, old_row, new_row, committed_at, principal"

/* Hands one row of a statement selecting STORE_AUDIT_COLUMNS to fn. */
static int store_audit_row_call(sqlite3_stmt *st, int (*fn)(const store_audit_row *row, void *data),
                                void *data) {
  store_audit_row row = {
      .seq = sqlite3_column_int64(st, 0),
      .table = (const char *)sqlite3_column_text(st, 1),
      .key = (const char *)sqlite3_column_text(st, 2),
      .op = (const char *)sqlite3_column_text(st, 3),
      .old_json = (const char *)sqlite3_column_text(st, 4),
      .new_json = (const char *)sqlite3_column_text(st, 5),
      .committed_at = sqlite3_column_int64(st, 6),
      .principal = (const char *)sqlite3_column_text(st, 7),
  };
  if (row.table == NULL) row.table = "";
  if (row.key == NULL) row.key = "";
  if (row.op == NULL) row.op = "";
  int stop = fn(&row, data);
  cJSON_Delete(row.old_parsed);
  cJSON_Delete(row.new_parsed);
  return stop;
}

/*
 * Hands each row of st, a bound statement selecting STORE_AUDIT_COLUMNS, to
 * fn until it returns non-zero; puts st back. *n (may be NULL): the rows
 * handed.
 */
static int store_audit_rows(store_t *s, sqlite3_stmt *st,
                            int (*fn)(const store_audit_row *row, void *data), void *data, int *n) {
  int rc, ret = 0, count = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    count++;
    if (store_audit_row_call(st, fn, data) != 0) break;
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) ret = store_error(s, rc, NULL, 0);
  store_stmt_put(s, st);
  if (n != NULL) *n = count;
  return ret;
}

static int sq_audit_read(store_t *s, int64_t after_seq, int limit,
                         int (*fn)(const store_audit_row *row, void *data), void *data, int *n) {
  sqlite3_stmt *st;
  if (n != NULL) *n = 0;
  int ret = store_stmt_get(s,
                           "SELECT " STORE_AUDIT_COLUMNS " FROM audit_log "
                           "WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_int64(st, 1, after_seq);
  sqlite3_bind_int(st, 2, limit);
  return store_audit_rows(s, st, fn, data, n);
}

static int sq_audit_read_of(store_t *s, const char *table, const char *key, int64_t after_seq,
                            int64_t upto_seq, int limit,
                            int (*fn)(const store_audit_row *row, void *data), void *data, int *n) {
  sqlite3_stmt *st;
  if (n != NULL) *n = 0;
  /* Two statements, so that each has its index: audit_log_by_key, audit_log_by_table. */
  int ret = store_stmt_get(s,
                           key != NULL ? "SELECT " STORE_AUDIT_COLUMNS " FROM audit_log WHERE "
                                         "tbl = ?1 AND key = ?2 AND seq > ?3 AND seq <= ?4 "
                                         "ORDER BY seq LIMIT ?5"
                                       : "SELECT " STORE_AUDIT_COLUMNS " FROM audit_log WHERE "
                                         "tbl = ?1 AND seq > ?3 AND seq <= ?4 ORDER BY seq "
                                         "LIMIT ?5",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
  if (key != NULL) sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, after_seq);
  sqlite3_bind_int64(st, 4, upto_seq);
  sqlite3_bind_int(st, 5, limit);
  return store_audit_rows(s, st, fn, data, n);
}

static int sq_audit_list(store_t *s, const char *table, int limit,
                         int (*fn)(const store_audit_row *row, void *data), void *data) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(s,
                           "SELECT * FROM (SELECT " STORE_AUDIT_COLUMNS " FROM audit_log"
                           " WHERE ?1 IS NULL OR tbl = ?1 ORDER BY seq DESC LIMIT ?2)"
                           " ORDER BY seq",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  if (table != NULL) sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 2, limit);
  return store_audit_rows(s, st, fn, data, NULL);
}

static int sq_counts(store_t *s, int64_t *sessions, int64_t *audit_rows) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(
      s, "SELECT (SELECT count(*) FROM mcp_session), (SELECT count(*) FROM audit_log)", &st, NULL,
      0);
  if (ret < 0) return ret;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *sessions = sqlite3_column_int64(st, 0);
    *audit_rows = sqlite3_column_int64(st, 1);
  } else {
    ret = store_error(s, rc, NULL, 0);
  }
  store_stmt_put(s, st);
  return ret;
}

static int sq_data_version(store_t *s, int64_t *version) {
  sqlite3_stmt *st;
  *version = 0;
  int ret = store_stmt_get(s, "PRAGMA data_version", &st, NULL, 0);
  if (ret < 0) return ret;
  ret = store_step_int64(s, st, version, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

/*
 * The range of one prune: *hi, the last of at most p->span rows after
 * p->after up to p->bound, the highest seq retention may delete (found when
 * 0, and set): beyond the newest retain_rows, and up to the first row
 * within retain_ms, found by reading the log in seq order (committed_at has
 * no index, and one would cost every change), so that a row committed with
 * an older clock than one before it waits for that one. *n: the rows in the
 * range.
 */
static int sq_audit_prune_range(store_t *s, store_prune *p, int64_t *hi, int64_t *n) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(
      s,
      "WITH bound(b) AS (SELECT CASE WHEN ?6 > 0 THEN ?6 ELSE max(CASE WHEN ?1 > 0 THEN m - ?1 "
      "ELSE 0 END, CASE WHEN ?2 > 0 THEN coalesce((SELECT seq FROM audit_log WHERE committed_at "
      ">= ?3 ORDER BY seq LIMIT 1), m + 1) - 1 ELSE 0 END) END FROM (SELECT coalesce(max(seq), 0) "
      "AS m FROM audit_log)), chunk(seq) AS (SELECT seq FROM audit_log WHERE seq > ?4 AND seq <= "
      "(SELECT b FROM bound) ORDER BY seq LIMIT ?5) SELECT coalesce(max(seq), ?4), count(*), "
      "(SELECT b FROM bound) FROM chunk",
      &st, NULL, 0);
  *hi = p->after;
  *n = 0;
  if (ret < 0) return ret;
  sqlite3_bind_int64(st, 1, p->retain_rows);
  sqlite3_bind_int64(st, 2, p->retain_ms);
  sqlite3_bind_int64(st, 3, p->now_ms - p->retain_ms);
  sqlite3_bind_int64(st, 4, p->after);
  sqlite3_bind_int64(st, 5, p->span > 0 ? p->span : -1);
  sqlite3_bind_int64(st, 6, p->bound);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *hi = sqlite3_column_int64(st, 0);
    *n = sqlite3_column_int64(st, 1);
    p->bound = sqlite3_column_int64(st, 2);
  } else {
    ret = store_error(s, rc, NULL, 0);
  }
  store_stmt_put(s, st);
  return ret;
}

/*
 * Protected from pruning, while their table exists: each key's newest row
 * unless it is a DELETE (it is the live row's version), and each table's
 * newest row (it is the collection's version, which must not move back).
 */
static int sq_audit_prune(store_t *s, store_prune *p) {
  sqlite3_stmt *st;
  int64_t highest = 0, hi = 0, examined = 0, changes = 0;
  int ret = store_begin(s, true, NULL, 0);
  if (ret < 0) return ret;
  ret = sq_audit_prune_range(s, p, &hi, &examined);
  if (ret < 0 || examined == 0) goto fail; /* nothing to examine: the same rollback */
  ret = store_stmt_get(s,
                       "DELETE FROM audit_log WHERE seq > ?1 AND seq <= ?2 AND NOT (tbl IN ("
                       "SELECT name FROM sqlite_schema WHERE type = 'table') AND ("
                       " seq = (SELECT max(t.seq) FROM audit_log AS t WHERE t.tbl = audit_log.tbl)"
                       " OR (op <> 'DELETE' AND seq = (SELECT max(k.seq) FROM audit_log AS k"
                       "  WHERE k.tbl = audit_log.tbl AND k.key = audit_log.key)))) RETURNING seq",
                       &st, NULL, 0);
  if (ret < 0) goto fail;
  sqlite3_bind_int64(st, 1, p->after);
  sqlite3_bind_int64(st, 2, hi);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t seq = sqlite3_column_int64(st, 0);
    if (seq > highest) highest = seq;
    changes++;
  }
  store_stmt_put(s, st);
  if (rc != SQLITE_DONE) {
    ret = store_error(s, rc, NULL, 0);
    goto fail;
  }
  if (highest > 0) {
    /* Remember how far the log has holes, for resumption to know what it cannot replay. */
    ret = store_stmt_get(s,
                         "INSERT INTO mcpsub_state(name, value) VALUES('audit_pruned_through', ?1) "
                         "ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
                         &st, NULL, 0);
    if (ret < 0) goto fail;
    sqlite3_bind_int64(st, 1, highest);
    ret = store_step_done(s, st, NULL, NULL, 0);
    store_stmt_put(s, st);
    if (ret < 0) goto fail;
  }
  ret = store_commit(s, NULL, 0);
  if (ret < 0) goto fail;
  p->deleted = changes;
  p->after = hi;
  p->more = p->span > 0 && examined == p->span;
  return 0;
fail:
  store_rollback(s);
  return ret;
}

static int sq_audit_pruned_through(store_t *s, int64_t *seq) {
  sqlite3_stmt *st;
  *seq = 0;
  int ret = store_stmt_get(s, "SELECT value FROM mcpsub_state WHERE name = 'audit_pruned_through'",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    *seq = sqlite3_column_int64(st, 0);
  else if (rc != SQLITE_DONE)
    ret = store_error(s, rc, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

/* Exactly-once writes ------------------------------------------------------------------ */

/* Rows of senders gone (their later writes never came to forget them) go after an hour. */
#define SQ_ONCE_KEEP_MS (60 * 60 * 1000)
/* ...looked for once in this many recorded writes. */
#define SQ_ONCE_SWEEP_EVERY 4096

/* Deletes the rows of sql (?1 an origin, when not NULL; ?2 a bound). */
static int sq_once_forget(store_t *s, const char *sql, const char *origin, int64_t bound) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(s, sql, &st, NULL, 0);
  if (ret < 0) return ret;
  if (origin != NULL) sqlite3_bind_text(st, 1, origin, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, bound);
  ret = store_step_done(s, st, NULL, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

static int sq_once_begin(store_t *s, const store_once *o, store_once_result *prior) {
  sqlite3_stmt *st;
  memset(prior, 0, sizeof(*prior));
  if (!sq(s)->batch) return -EBUSY;
  int ret = store_begin(s, true, NULL, 0);
  if (ret < 0) return ret;
  ret = sq_once_forget(s, "DELETE FROM mcpsub_once WHERE origin = ?1 AND seq < ?2", o->origin,
                       o->below);
  if (ret < 0) goto fail;
  ret = store_stmt_get(s,
                       "SELECT out_key, created, changed FROM mcpsub_once WHERE origin = ?1 AND "
                       "seq = ?2",
                       &st, NULL, 0);
  if (ret < 0) goto fail;
  sqlite3_bind_text(st, 1, o->origin, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, o->seq);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const char *k = (const char *)sqlite3_column_text(st, 0);
    prior->out_key = k != NULL ? mem_strdup(k) : NULL;
    prior->created = sqlite3_column_int(st, 1) != 0;
    prior->changed = sqlite3_column_int64(st, 2);
    ret = 1;
  } else if (rc != SQLITE_DONE) {
    ret = store_error(s, rc, NULL, 0);
  }
  store_stmt_put(s, st);
  if (ret < 0) goto fail;
  if (ret == 1) {
    int c = store_commit(s, NULL, 0);
    if (c < 0) {
      free(prior->out_key);
      prior->out_key = NULL;
      ret = c;
      goto fail;
    }
  }
  return ret;
fail:
  store_rollback(s);
  return ret;
}

static int sq_once_end(store_t *s, const store_once *o, const store_once_result *res, bool ok) {
  sqlite3_stmt *st;
  int ret = 0;
  if (!ok) goto fail;
  int64_t now = store_now_ms();
  ret = store_stmt_get(s,
                       "INSERT INTO mcpsub_once(origin, seq, at, out_key, created, changed) "
                       "VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                       &st, NULL, 0);
  if (ret < 0) goto fail;
  sqlite3_bind_text(st, 1, o->origin, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, o->seq);
  sqlite3_bind_int64(st, 3, now);
  if (res->out_key != NULL) sqlite3_bind_text(st, 4, res->out_key, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 5, res->created);
  sqlite3_bind_int64(st, 6, res->changed);
  ret = store_step_done(s, st, NULL, NULL, 0);
  store_stmt_put(s, st);
  if (ret < 0) goto fail;
  if (++sq(s)->once_recorded % SQ_ONCE_SWEEP_EVERY == 0) {
    ret = sq_once_forget(s, "DELETE FROM mcpsub_once WHERE at < ?2", NULL, now - SQ_ONCE_KEEP_MS);
    if (ret < 0) goto fail;
  }
  ret = store_commit(s, NULL, 0);
  if (ret == 0) return 0;
fail:
  store_rollback(s);
  return ret;
}

/* Sessions ------------------------------------------------------------------------------ */

/* The subscriptions as the JSON list they were stored as before: URIs, or {uri, debounce}. */
#define STORE_SESSION_COLUMNS                                                                      \
  "id, created_at, last_seen, protocol_version, client_info, client_capabilities, log_level, "     \
  "(SELECT json_group_array(CASE WHEN debounce IS NULL THEN uri ELSE "                             \
  "json_object('uri', uri, 'debounce', json(debounce)) END) FROM mcpsub_subscription "             \
  "WHERE session = mcp_session.id), principal"

static char *store_column_strdup(sqlite3_stmt *st, int idx) {
  const unsigned char *text = sqlite3_column_text(st, idx);
  return text ? mem_strdup((const char *)text) : NULL;
}

/* Fills ss from a row of STORE_SESSION_COLUMNS. */
static void store_session_from_row(sqlite3_stmt *st, store_session *ss) {
  const unsigned char *text;
  memset(ss, 0, sizeof(*ss));
  text = sqlite3_column_text(st, 0);
  snprintf(ss->id, sizeof(ss->id), "%s", text ? (const char *)text : "");
  ss->created_at = sqlite3_column_int64(st, 1);
  ss->last_seen = sqlite3_column_int64(st, 2);
  text = sqlite3_column_text(st, 3);
  snprintf(ss->protocol_version, sizeof(ss->protocol_version), "%s",
           text ? (const char *)text : "");
  ss->client_info = store_column_strdup(st, 4);
  ss->client_capabilities = store_column_strdup(st, 5);
  ss->log_level = store_column_strdup(st, 6);
  ss->subscriptions = store_column_strdup(st, 7);
  if (ss->subscriptions == NULL) ss->subscriptions = mem_strdup("[]");
  ss->principal = store_column_strdup(st, 8);
  if (ss->principal == NULL) ss->principal = mem_strdup("anonymous");
}

static void store_bind_text_or_null(sqlite3_stmt *st, int idx, const char *text) {
  if (text != NULL)
    sqlite3_bind_text(st, idx, text, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, idx);
}

static int sq_session_insert(store_t *s, const store_session *ss) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(s,
                           "INSERT INTO mcp_session (id, created_at, last_seen, protocol_version, "
                           "client_info, client_capabilities, log_level, principal) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?9)",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, ss->id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, ss->created_at);
  sqlite3_bind_int64(st, 3, ss->last_seen);
  sqlite3_bind_text(st, 4, ss->protocol_version, -1, SQLITE_STATIC);
  store_bind_text_or_null(st, 5, ss->client_info);
  store_bind_text_or_null(st, 6, ss->client_capabilities);
  store_bind_text_or_null(st, 7, ss->log_level);
  sqlite3_bind_text(st, 9, ss->principal ? ss->principal : "anonymous", -1, SQLITE_STATIC);
  ret = store_step_done(s, st, NULL, NULL, 0);
  store_stmt_put(s, st);
  if (ret == 0 && ss->subscriptions != NULL && strcmp(ss->subscriptions, "[]") != 0)
    ret = sq_session_set_subscriptions(s, ss->id, ss->subscriptions);
  return ret;
}

static int sq_session_load(store_t *s, const char *id, store_session *ss) {
  sqlite3_stmt *st;
  memset(ss, 0, sizeof(*ss));
  int ret = store_stmt_get(s, "SELECT " STORE_SESSION_COLUMNS " FROM mcp_session WHERE id = ?1",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    store_session_from_row(st, ss);
  else if (rc == SQLITE_DONE)
    ret = -ENOENT;
  else
    ret = store_error(s, rc, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

/* Runs an UPDATE/DELETE of one session: ?1 = id, ?2 = text or int64 value; -ENOENT when no row. */
static int store_session_update(store_t *s, const char *sql, const char *id, const char *text,
                                int64_t number) {
  sqlite3_stmt *st;
  int64_t changes = 0;
  int ret = store_stmt_get(s, sql, &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  if (sqlite3_bind_parameter_count(st) >= 2) {
    if (text != NULL)
      sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    else
      sqlite3_bind_int64(st, 2, number);
  }
  ret = store_step_done(s, st, &changes, NULL, 0);
  store_stmt_put(s, st);
  if (ret == 0 && changes == 0) ret = -ENOENT;
  return ret;
}

static int sq_session_touch(store_t *s, const char *id, int64_t last_seen) {
  return store_session_update(s, "UPDATE mcp_session SET last_seen = ?2 WHERE id = ?1", id, NULL,
                              last_seen);
}

/* level NULL clears it. */
static int sq_session_set_log_level(store_t *s, const char *id, const char *level) {
  if (level == NULL)
    return store_session_update(s, "UPDATE mcp_session SET log_level = NULL WHERE id = ?1", id,
                                NULL, 0);
  return store_session_update(s, "UPDATE mcp_session SET log_level = ?2 WHERE id = ?1", id, level,
                              0);
}

/* json_array NULL stores "[]". */
/* Runs sql (one statement) with ?1 id, ?2 a, ?3 b (may be NULL); *changes may be NULL. */
static int store_session_sub_exec(store_t *s, const char *sql, const char *id, const char *a,
                                  const char *b, int64_t *changes) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(s, sql, &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  store_bind_text_or_null(st, 2, a);
  store_bind_text_or_null(st, 3, b);
  ret = store_step_done(s, st, changes, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

/* -ENOENT unless the session has a row. */
static int store_session_exists(store_t *s, const char *id) {
  sqlite3_stmt *st;
  int64_t n = 0;
  int ret = store_stmt_get(s, "SELECT count(*) FROM mcp_session WHERE id = ?1", &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  ret = store_step_int64(s, st, &n, NULL, 0);
  store_stmt_put(s, st);
  return ret < 0 ? ret : n == 0 ? -ENOENT : 0;
}

static int sq_session_set_subscriptions(store_t *s, const char *id, const char *json_array) {
  /* The whole list at once (a restore that dropped some, a schema change): cold paths. */
  int ret = store_begin(s, true, NULL, 0);
  if (ret < 0) return ret;
  ret = store_session_exists(s, id);
  if (ret == 0)
    ret = store_session_sub_exec(s, "DELETE FROM mcpsub_subscription WHERE session = ?1", id, NULL,
                                 NULL, NULL);
  if (ret == 0)
    ret = store_session_sub_exec(
        s,
        "INSERT INTO mcpsub_subscription (session, uri, debounce) "
        "SELECT ?1, CASE j.type WHEN 'text' THEN j.value ELSE json_extract(j.value, '$.uri') END, "
        "CASE j.type WHEN 'object' THEN json_extract(j.value, '$.debounce') END "
        "FROM json_each(?2) AS j WHERE j.type = 'text' OR json_type(j.value, '$.uri') = 'text' "
        "ON CONFLICT (session, uri) DO UPDATE SET debounce = excluded.debounce",
        id, json_array != NULL ? json_array : "[]", NULL, NULL);
  if (ret == 0) ret = store_commit(s, NULL, 0);
  if (ret < 0) store_rollback(s);
  return ret;
}

/*
 * A row of mcpsub's own in the audit log (table tbl: the subscription log
 * or the signal log, store.h): a put's new_row, or a delete's old_row.
 */
static int store_log_row(store_t *s, const char *tbl, const char *id, bool put, const char *image) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(s,
                           "INSERT INTO audit_log (tbl, key, op, old_row, new_row, committed_at, "
                           "principal) VALUES (?6, ?1, ?2, ?3, ?4, " STORE_SQL_NOW_MS ", ?5)",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 6, tbl, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, put ? "INSERT" : "DELETE", -1, SQLITE_STATIC);
  store_bind_text_or_null(st, put ? 4 : 3, image);
  sqlite3_bind_text(st, 5, s->origin, -1, SQLITE_STATIC);
  ret = store_step_done(s, st, NULL, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

static int sq_session_sub_put(store_t *s, const char *id, const char *uri, const char *debounce,
                              const char *topic_key) {
  int64_t n = 0;
  int ret = store_begin(s, true, NULL, 0);
  if (ret < 0) return ret;
  ret = store_session_sub_exec(
      s,
      "INSERT INTO mcpsub_subscription (session, uri, debounce) "
      "SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM mcp_session WHERE id = ?1) "
      "ON CONFLICT (session, uri) DO UPDATE SET debounce = excluded.debounce",
      id, uri, debounce, &n);
  if (ret == 0 && n == 0) ret = -ENOENT;
  if (ret == 0) {
    char *image = store_subscription_image(true, uri, topic_key, debounce);
    ret = store_log_row(s, STORE_SUBSCRIPTION_LOG, id, true, image);
    cJSON_free(image);
  }
  if (ret == 0) ret = store_commit(s, NULL, 0);
  store_rollback(s);
  return ret;
}

static int sq_session_sub_delete(store_t *s, const char *id, const char *uri) {
  int64_t n = 0;
  int ret = store_begin(s, true, NULL, 0);
  if (ret < 0) return ret;
  ret = store_session_sub_exec(s, "DELETE FROM mcpsub_subscription WHERE session = ?1 AND uri = ?2",
                               id, uri, NULL, &n);
  if (ret == 0 && n > 0) {
    char *image = store_subscription_image(false, uri, NULL, NULL);
    ret = store_log_row(s, STORE_SUBSCRIPTION_LOG, id, false, image);
    cJSON_free(image);
  }
  if (ret == 0) ret = store_session_exists(s, id);
  if (ret == 0) ret = store_commit(s, NULL, 0);
  store_rollback(s);
  return ret;
}

static int sq_signal(store_t *s, const char *session, const char *image) {
  int ret = store_begin(s, true, NULL, 0);
  if (ret < 0) return ret;
  ret = store_log_row(s, STORE_SIGNAL_LOG, session, true, image);
  if (ret == 0) ret = store_commit(s, NULL, 0);
  store_rollback(s);
  return ret;
}

static int sq_session_delete(store_t *s, const char *id) {
  return store_session_update(s, "DELETE FROM mcp_session WHERE id = ?1", id, NULL, 0);
}

static int sq_principal_usage(store_t *s, const char *principal, int64_t since_ms,
                              int64_t *sessions, int64_t *subscriptions) {
  sqlite3_stmt *st;
  int ret = store_stmt_get(s,
                           "SELECT count(*), coalesce(sum(subscription_count), 0) "
                           "FROM mcp_session WHERE principal = ?1 AND last_seen >= ?2",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_text(st, 1, principal, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, since_ms);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    *sessions = sqlite3_column_int64(st, 0);
    *subscriptions = sqlite3_column_int64(st, 1);
  } else {
    ret = store_error(s, rc, NULL, 0);
  }
  store_stmt_put(s, st);
  return ret;
}

static int sq_session_prune_slot(store_t *s, int64_t before_ms, unsigned slot, unsigned n_slots,
                                 int64_t *deleted) {
  sqlite3_stmt *st;
  int64_t changes = 0;
  if (deleted != NULL) *deleted = 0;
  int ret = store_stmt_get(s,
                           "DELETE FROM mcp_session WHERE last_seen < ?1 AND "
                           "(substr(id, 1, 2) = ?2 OR substr(id, 1, 2) >= ?3)",
                           &st, NULL, 0);
  if (ret < 0) return ret;
  char own[3], foreign[3];
  snprintf(own, sizeof own, "%02x", slot & 0xff);
  /* Slot 0 also prunes slots no worker runs any more ("zz" sorts after every id). */
  if (slot == 0 && n_slots < 256)
    snprintf(foreign, sizeof foreign, "%02x", n_slots);
  else
    snprintf(foreign, sizeof foreign, "zz");
  sqlite3_bind_int64(st, 1, before_ms);
  sqlite3_bind_text(st, 2, own, 2, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 3, foreign, 2, SQLITE_TRANSIENT);
  ret = store_step_done(s, st, &changes, NULL, 0);
  store_stmt_put(s, st);
  if (ret == 0 && deleted != NULL) *deleted = changes;
  return ret;
}

static int sq_session_prune(store_t *s, int64_t before_ms, int64_t *deleted) {
  sqlite3_stmt *st;
  int64_t changes = 0;
  if (deleted != NULL) *deleted = 0;
  int ret = store_stmt_get(s, "DELETE FROM mcp_session WHERE last_seen < ?1", &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_int64(st, 1, before_ms);
  ret = store_step_done(s, st, &changes, NULL, 0);
  store_stmt_put(s, st);
  if (ret == 0 && deleted != NULL) *deleted = changes;
  return ret;
}

/*
 * fn may call other store functions (even delete the session it is given);
 * ss is valid only during the call. Returns 0 when the walk ended or fn
 * stopped it.
 */
static int sq_session_foreach(store_t *s, long limit,
                              int (*fn)(const store_session *ss, void *data), void *data) {
  sqlite3_stmt *st;
  int rc;
  int ret = store_stmt_get(
      s, "SELECT " STORE_SESSION_COLUMNS " FROM mcp_session ORDER BY last_seen DESC, id LIMIT ?",
      &st, NULL, 0);
  if (ret < 0) return ret;
  sqlite3_bind_int64(st, 1, limit > 0 ? limit : -1); /* a negative LIMIT is none */
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    store_session ss;
    store_session_from_row(st, &ss);
    int stop = fn(&ss, data);
    store_session_finish(&ss);
    if (stop != 0) break;
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) ret = store_error(s, rc, NULL, 0);
  store_stmt_put(s, st);
  return ret;
}

const store_ops store_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .open_readonly = sq_open_readonly,
    .close = sq_close,
    .set_busy_timeout = sq_set_busy_timeout,
    .set_busy_handler = sq_set_busy_handler,
    .refresh_schema = sq_refresh_schema,
    .get_record = sq_get_record,
    .get_record_text = sq_get_record_text,
    .query = sq_query,
    .count_where = sq_count_where,
    .table_version = sq_table_version,
    .table_count = sq_table_count,
    .write_as = sq_write_as,
    .delete_as = sq_delete_as,
    .bulk_as = sq_bulk_as,
    .audit_max_seq = sq_audit_max_seq,
    .audit_read = sq_audit_read,
    .audit_read_of = sq_audit_read_of,
    .audit_list = sq_audit_list,
    .data_version = sq_data_version,
    .wake_fd = NULL,
    .audit_prune = sq_audit_prune,
    .audit_pruned_through = sq_audit_pruned_through,
    .counts = sq_counts,
    .session_insert = sq_session_insert,
    .session_load = sq_session_load,
    .session_touch = sq_session_touch,
    .session_set_log_level = sq_session_set_log_level,
    .session_set_subscriptions = sq_session_set_subscriptions,
    .session_sub_put = sq_session_sub_put,
    .session_sub_delete = sq_session_sub_delete,
    .signal = sq_signal,
    .session_delete = sq_session_delete,
    .session_prune_slot = sq_session_prune_slot,
    .session_prune = sq_session_prune,
    .principal_usage = sq_principal_usage,
    .session_foreach = sq_session_foreach,
    .batch_begin = sq_batch_begin,
    .batch_begin_read = sq_batch_begin_read,
    .batch_broken = sq_batch_broken,
    .batch_current = sq_batch_current,
    .batch_end = sq_batch_end,
    .once_begin = sq_once_begin,
    .once_end = sq_once_end,
    .defer_checkpoints = sq_defer_checkpoints,
    .checkpoint_due = sq_checkpoint_due,
    .checkpoint = sq_checkpoint,
};
