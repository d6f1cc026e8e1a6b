/*
 * What a store backend implements (private to src/common/store*.c).
 *
 * store.h is the one interface the worker, the master and mcpsubctl use;
 * store.c dispatches each call to the backend the database target names
 * (store_sqlite.c for a file path, store_pg.c for a postgres:// or
 * postgresql:// URI) and holds what both share: the exported tables, the
 * key and value rules that do not depend on SQL, and the row-image parsing
 * of the audit log. A backend's handle starts with struct store, so a
 * store_t * is the backend's own handle too.
 *
 * Every function keeps store.h's contract for its public twin (return
 * codes, ownership, ordering). A backend without a notion (SQLite has no
 * wake-up socket; PostgreSQL no busy handler) leaves the slot NULL and the
 * dispatcher answers as documented in store.h.
 */
#ifndef MCPSUB_STORE_BACKEND_H
#define MCPSUB_STORE_BACKEND_H

#include "common/store.h"

typedef struct store_ops store_ops;

/* The part of every handle that store.c reads. */
struct store {
  const store_ops *ops;
  bool readonly;
  bool no_triggers;          /* store_leave_triggers: schema refreshes only read */
  int64_t schema_generation; /* moves with every schema change the backend saw */
  store_table *tables;       /* exported tables, sorted by name (strcmp) */
  int n_tables;
  char origin[64];     /* store_set_origin */
  store_waiter waiter; /* store_set_waiter; all NULL: calls block */
};

/*
 * Waits for fd as store_set_waiter says: through the handle's waiter when
 * it can, else poll(2). 1 ready, 0 timed out, -1 failed (errno).
 */
int store_wait_fd(store_t *s, int fd, short events, int timeout_ms);
/* May the caller start a call now (store_waiter.may_use)? */
bool store_may_use(store_t *s);

struct store_ops {
  const char *name; /* "sqlite", "postgres" */
  /* Opening: readonly opens never change the database (no schema, no triggers). */
  int (*open)(const char *target, const char *schema_path, store_t **out, char *err, size_t errlen);
  int (*open_readonly)(const char *target, store_t **out, char *err, size_t errlen);
  void (*close)(store_t *s); /* frees s, including s->tables (store_tables_free) */
  void (*set_busy_timeout)(store_t *s, int ms);
  void (*set_busy_handler)(store_t *s, int (*fn)(void *data, int count), void *data);
  int (*refresh_schema)(store_t *s, bool *tables_changed);
  bool (*schema_stale)(store_t *s); /* NULL: refreshes always look (false) */
  int (*prepared)(store_t *s);      /* NULL: none (store_prepared_statements) */

  /* Reads */
  int (*get_record)(store_t *s, const store_table *t, const char *key, cJSON **row,
                    int64_t *version);
  /* NULL: store_get_record_text prints get_record's row */
  int (*get_record_text)(store_t *s, const store_table *t, const char *key, buf_t *out,
                         int64_t *version);
  int (*query)(store_t *s, const store_table *t, const store_filter *filters, size_t n_filters,
               int limit, const char *after_key, cJSON **rows, char **next_key);
  int (*count_where)(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                     int64_t *count);
  int (*table_version)(store_t *s, const store_table *t, int64_t *version);
  int (*table_count)(store_t *s, const store_table *t, int64_t *count);

  /* Writes */
  int (*write_as)(store_t *s, const store_table *t, const char *key, const cJSON *obj,
                  store_write_mode mode, const store_guard *guard, char **out_key, bool *created,
                  cJSON **row, int64_t *version, char *err, size_t errlen);
  int (*delete_as)(store_t *s, const store_table *t, const char *key, const store_guard *guard,
                   char *err, size_t errlen);
  int (*bulk_as)(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                 const cJSON *set, const store_guard *guard, int64_t *changed, char *err,
                 size_t errlen);

  /* Audit log */
  int (*audit_max_seq)(store_t *s, int64_t *seq);
  int (*audit_read_of)(store_t *s, const char *table, const char *key, int64_t after_seq,
                       int64_t upto_seq, int limit,
                       int (*fn)(const store_audit_row *row, void *data), void *data, int *n);
  int (*audit_read)(store_t *s, int64_t after_seq, int limit,
                    int (*fn)(const store_audit_row *row, void *data), void *data, int *n);
  int (*audit_list)(store_t *s, const char *table, int limit,
                    int (*fn)(const store_audit_row *row, void *data), void *data);
  int (*data_version)(store_t *s, int64_t *version);
  int (*wake_fd)(store_t *s);                     /* NULL: none (-1) */
  int (*audit_prune)(store_t *s, store_prune *p); /* deleted, more: 0 and false on entry */
  int (*audit_pruned_through)(store_t *s, int64_t *seq);
  int (*counts)(store_t *s, int64_t *sessions, int64_t *audit_rows);

  /* Sessions */
  int (*session_insert)(store_t *s, const store_session *ss);
  int (*session_load)(store_t *s, const char *id, store_session *ss);
  int (*session_touch)(store_t *s, const char *id, int64_t last_seen);
  int (*session_set_log_level)(store_t *s, const char *id, const char *level);
  int (*session_set_subscriptions)(store_t *s, const char *id, const char *json_array);
  int (*session_sub_put)(store_t *s, const char *id, const char *uri, const char *debounce,
                         const char *topic_key);
  int (*session_sub_delete)(store_t *s, const char *id, const char *uri);
  int (*signal)(store_t *s, const char *session, const char *image);
  int (*session_delete)(store_t *s, const char *id);
  int (*session_prune_slot)(store_t *s, int64_t before_ms, unsigned slot, unsigned n_slots,
                            int64_t *deleted);
  int (*session_prune)(store_t *s, int64_t before_ms, int64_t *deleted);
  int (*principal_usage)(store_t *s, const char *principal, int64_t since_ms, int64_t *sessions,
                         int64_t *subscriptions);
  int (*session_foreach)(store_t *s, long limit, int (*fn)(const store_session *ss, void *data),
                         void *data);

  /* Group commit (NULL: not offered; the caller then writes one call at a time) */
  int (*batch_begin)(store_t *s);
  int (*batch_begin_read)(store_t *s); /* NULL: reads go one call at a time */
  bool (*batch_broken)(store_t *s);
  bool (*batch_current)(store_t *s); /* NULL: never (a read batch is not kept) */
  int (*batch_end)(store_t *s, bool commit);
  /* Exactly-once writes inside a batch (NULL: not offered) */
  int (*once_begin)(store_t *s, const store_once *o, store_once_result *prior);
  int (*once_end)(store_t *s, const store_once *o, const store_once_result *res, bool ok);

  /* Checkpoints apart from commits (NULL: not offered) */
  int (*defer_checkpoints)(store_t *s);
  bool (*checkpoint_due)(store_t *s);
  int (*checkpoint)(store_t *s);
};

extern const store_ops store_sqlite_ops;
extern const store_ops store_pg_ops;

/* Shared helpers (store.c) --------------------------------------------------- */

/* A column (or the rowid, col == -1) and the JSON value to write to it. */
typedef struct store_assign {
  int col;
  const cJSON *value;
} store_assign;

void store_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Aborts when a cJSON constructor ran out of memory (mem.h's policy); returns item. */
cJSON *store_json_checked(cJSON *item);
/* Adds item to obj (aborting on failure). */
void store_json_add(cJSON *obj, const char *name, cJSON *item);
/* True when d is a whole number that int64_t holds exactly. */
bool store_double_is_int64(double d);
/* True for the JSON values a column can take (not cJSON_Raw or invalid items). */
bool store_json_storable(const cJSON *v);
/*
 * The text form of a key value, as the audit log records it: strings as
 * they are, whole numbers without ".0", other numbers with 15 significant
 * digits, booleans as 1/0, null as "". NULL for objects and arrays. New string.
 */
char *store_json_key_text(const cJSON *v);
/* Parses the canonical base-10 key of an integer-keyed table ("12", not "012"). */
bool store_parse_int_key(const char *key, int64_t *out);
/* True when key can name a row of t (integer-keyed tables need an integer). */
bool store_key_valid(const store_table *t, const char *key);
/* Are the filters' values of the kinds their operators take? */
bool store_filters_valid(const store_table *t, const store_filter *filters, size_t n);
/*
 * Splits obj into column assignments (into assigns, which holds t->n_cols)
 * and the key member; checks names, values and the key (see store_sqlite.c).
 */
int store_write_parse(const store_table *t, const char *key, const cJSON *obj,
                      store_assign *assigns, int *n_assign, const cJSON **key_value, char *err,
                      size_t errlen);
/*
 * What a bulk write's arguments must pass before any SQL (store_bulk_as):
 * filter values of the kinds their operators take; set, when given,
 * assigns columns (*assigns, caller frees, even on failure), not the key,
 * at least one, and never the guard's row-scope column to another value.
 */
int store_bulk_parse(const store_table *t, const store_filter *filters, size_t n, const cJSON *set,
                     const store_guard *guard, store_assign **assigns, int *n_assign, char *err,
                     size_t errlen);
void store_tables_free(store_table *tables, int n);
bool store_tables_equal(const store_table *a, int na, const store_table *b, int nb);
/* Sorts tables by name, as store_find_table expects. */
void store_tables_sort(store_table *tables, int n);
/* Reads an application schema file (bounded). New string in *out. */
int store_read_file(const char *path, char **out, char *err, size_t errlen);

#define STORE_BUSY_TIMEOUT_MS 5000
#define STORE_QUERY_MAX_LIMIT 10000
/* An application schema file larger than this is refused. */
#define STORE_SCHEMA_FILE_MAX (16 * 1024 * 1024)

#endif
