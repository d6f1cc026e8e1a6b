/*
 * The store's front: each public function of store.h dispatches to the
 * backend that opened the handle (store_backend.h), and what does not
 * depend on a backend lives here once: the exported tables' lookup, the
 * key and value rules of records, the parsing of audit row images and the
 * clock.
 */
#include "common/store_backend.h"

#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <math.h>
#include <sqlite3.h> /* sqlite3_snprintf's %!.15g: the key text the audit log records */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/jsonrpc.h"

/* Backend-independent helpers ------------------------------------------------------ */

void store_set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (err == NULL || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* Aborts when a cJSON constructor ran out of memory (mem.h's policy). */
cJSON *store_json_checked(cJSON *item) {
  if (item == NULL) {
    fprintf(stderr, "mcpsub: out of memory building JSON\n");
    abort();
  }
  return item;
}

void store_json_add(cJSON *obj, const char *name, cJSON *item) {
  if (!cJSON_AddItemToObject(obj, name, store_json_checked(item))) {
    fprintf(stderr, "mcpsub: out of memory building JSON\n");
    abort();
  }
}

/* True when d is a whole number that int64_t holds exactly. */
bool store_double_is_int64(double d) {
  return isfinite(d) && d == trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0;
}

/*
 * True for the JSON values a column can take: not invalid items, nor raw
 * ones but an integer's digits (jsonrpc_exact_integers).
 */
bool store_json_storable(const cJSON *v) {
  return cJSON_IsString(v) || cJSON_IsNumber(v) || cJSON_IsBool(v) || cJSON_IsNull(v) ||
         cJSON_IsObject(v) || cJSON_IsArray(v) || jsonrpc_raw_integer(v, NULL, NULL);
}

/*
 * The text form of a key value, as the audit triggers write it with
 * CAST(... AS TEXT): strings as they are, whole numbers without ".0",
 * other numbers as SQLite formats a REAL, booleans as 1/0, null as "".
 * NULL for objects and arrays. New string.
 */
char *store_json_key_text(const cJSON *v) {
  const char *plain = jsonrpc_text(v); /* text, or an integer's digits */
  if (plain != NULL) return mem_strdup(plain);
  if (cJSON_IsNumber(v)) {
    char text[64];
    if (store_double_is_int64(v->valuedouble))
      snprintf(text, sizeof(text), "%lld", (long long)v->valuedouble);
    else
      sqlite3_snprintf(sizeof(text), text, "%!.15g", v->valuedouble);
    return mem_strdup(text);
  }
  if (cJSON_IsBool(v)) return mem_strdup(cJSON_IsTrue(v) ? "1" : "0");
  if (cJSON_IsNull(v)) return mem_strdup("");
  return NULL;
}

/*
 * Parses a key of an integer-keyed table. Only the canonical base-10 form
 * is accepted ("12", "-3", "0"; not "012", "+1", "-0" or " 1"), so that
 * each row has exactly one key text, the one the audit log records.
 */
bool store_parse_int_key(const char *key, int64_t *out) {
  bool negative = key[0] == '-';
  const char *p = key + negative;
  uint64_t v;
  if (!buf_parse_uint(p, strlen(p), (uint64_t)INT64_MAX + negative, &v) || (negative && v == 0))
    return false;
  *out = negative ? -(int64_t)(v - 1) - 1 : (int64_t)v; /* INT64_MIN too */
  return true;
}

/* True when key can name a row of t (integer-keyed tables need an integer). */
bool store_key_valid(const store_table *t, const char *key) {
  int64_t v;
  return !t->key_integer || store_parse_int_key(key, &v);
}

void store_tables_free(store_table *tables, int n) {
  for (int i = 0; i < n; i++) {
    for (int c = 0; c < tables[i].n_cols; c++) {
      free(tables[i].cols[c].name);
      free(tables[i].cols[c].decl_type);
    }
    free(tables[i].cols);
    free(tables[i].name);
  }
  free(tables);
}

bool store_tables_equal(const store_table *a, int na, const store_table *b, int nb) {
  if (na != nb) return false;
  for (int i = 0; i < na; i++) {
    if (strcmp(a[i].name, b[i].name) != 0 || a[i].n_cols != b[i].n_cols ||
        a[i].key_col != b[i].key_col || a[i].key_integer != b[i].key_integer)
      return false;
    for (int c = 0; c < a[i].n_cols; c++) {
      const store_column *x = &a[i].cols[c], *y = &b[i].cols[c];
      if (strcmp(x->name, y->name) != 0 || strcmp(x->decl_type, y->decl_type) != 0 ||
          x->notnull != y->notnull || x->generated != y->generated)
        return false;
    }
  }
  return true;
}

/* Reads the whole file at path into a new NUL-terminated string. */
int store_read_file(const char *path, char **out, char *err, size_t errlen) {
  FILE *f = fopen(path, "re");
  char *text = NULL;
  size_t len = 0, cap = 0;
  int ret = 0;

  *out = NULL;
  if (f == NULL) {
    ret = -errno;
    store_set_err(err, errlen, "cannot open schema %s: %s", path, strerror(errno));
    return ret;
  }
  for (;;) {
    if (cap - len < 4096) {
      cap = cap ? 2 * cap : 8192;
      text = mem_realloc(text, cap);
    }
    size_t got = fread(text + len, 1, cap - len - 1, f);
    len += got;
    if (len > STORE_SCHEMA_FILE_MAX) {
      ret = -EFBIG;
      store_set_err(err, errlen, "schema %s is larger than %d bytes", path, STORE_SCHEMA_FILE_MAX);
      goto done;
    }
    if (got == 0) break;
  }
  if (ferror(f)) {
    ret = -EIO;
    store_set_err(err, errlen, "cannot read schema %s", path);
    goto done;
  }
  text[len] = '\0';
  *out = text;
  text = NULL;
done:
  free(text);
  fclose(f);
  return ret;
}

/* Are the filters' values of the kinds their operators take? */
bool store_filters_valid(const store_table *t, const store_filter *filters, size_t n) {
  for (size_t i = 0; i < n; i++) {
    assert(filters[i].col >= 0 && filters[i].col < t->n_cols);
    if (filters[i].op == STORE_IN) {
      const cJSON *v;
      if (!cJSON_IsArray(filters[i].value) || cJSON_GetArraySize(filters[i].value) == 0)
        return false;
      cJSON_ArrayForEach(v, filters[i].value) {
        if (!store_json_storable(v) || cJSON_IsNull(v)) return false;
      }
    } else if (!store_json_storable(filters[i].value) ||
               (filters[i].op != STORE_EQ && cJSON_IsNull(filters[i].value))) {
      return false;
    }
  }
  return true;
}

/*
 * Splits obj into column assignments (*n_assign of them, into assigns,
 * which holds t->n_cols) and the key member (*key_value, NULL when absent:
 * the key column, or "rowid" for a rowid-keyed table). Checks that obj is an
 * object, that every member names a column exactly once with a storable
 * value, and that a key member matches key (when key is given).
 */
int store_write_parse(const store_table *t, const char *key, const cJSON *obj,
                      store_assign *assigns, int *n_assign, const cJSON **key_value, char *err,
                      size_t errlen) {
  const char *key_name = t->key_col < 0 ? "rowid" : t->cols[t->key_col].name;
  const cJSON *item;

  *n_assign = 0;
  *key_value = NULL;
  if (!cJSON_IsObject(obj)) {
    store_set_err(err, errlen, "a record must be a JSON object");
    return -EINVAL;
  }
  cJSON_ArrayForEach(item, obj) {
    const char *name = item->string;
    int col = strcmp(name, key_name) == 0 ? t->key_col : store_column_index(t, name);
    if (col < 0 && strcmp(name, key_name) != 0) {
      store_set_err(err, errlen, "unknown column %s in table %s", name, t->name);
      return -EINVAL;
    }
    if (col >= 0 && t->cols[col].generated) {
      store_set_err(err, errlen, "column %s is generated", name);
      return -EINVAL;
    }
    if (!store_json_storable(item)) {
      store_set_err(err, errlen, "unsupported value for column %s", name);
      return -EINVAL;
    }
    bool seen = col == t->key_col && *key_value != NULL;
    for (int i = 0; i < *n_assign && !seen; i++) seen = assigns[i].col == col;
    if (seen) {
      store_set_err(err, errlen, "column %s given twice", name);
      return -EINVAL;
    }
    if (col == t->key_col)
      *key_value = item;
    else
      assigns[(*n_assign)++] = (store_assign){.col = col, .value = item};
  }
  if (key != NULL && *key_value != NULL) {
    char *text = store_json_key_text(*key_value);
    bool match = text != NULL && strcmp(text, key) == 0;
    free(text);
    if (!match) {
      store_set_err(err, errlen, "key column %s does not match the record key %s", key_name, key);
      return -EINVAL;
    }
  }
  return 0;
}

int64_t store_schema_generation(const store_t *s) {
  return s->schema_generation;
}

void store_leave_triggers(store_t *s) {
  s->no_triggers = true;
}

const store_table *store_tables(const store_t *s, int *n) {
  *n = s->n_tables;
  return s->tables;
}

static int store_table_cmp(const void *key, const void *elem) {
  return strcmp(key, ((const store_table *)elem)->name);
}

const store_table *store_find_table(const store_t *s, const char *name) {
  if (s->n_tables == 0) return NULL;
  return bsearch(name, s->tables, (size_t)s->n_tables, sizeof(*s->tables), store_table_cmp);
}

int store_column_index(const store_table *t, const char *name) {
  for (int c = 0; c < t->n_cols; c++)
    if (strcmp(t->cols[c].name, name) == 0) return c;
  return -1;
}

char *store_row_key(const store_table *t, const cJSON *row) {
  const char *member = t->key_col < 0 ? "rowid" : t->cols[t->key_col].name;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, member);
  if (v == NULL) return NULL;
  return store_json_key_text(v);
}

bool store_column_numeric(const store_table *t, int col) {
  return t->cols[col].numeric;
}

int store_write(store_t *s, const store_table *t, const char *key, const cJSON *obj,
                store_write_mode mode, char **out_key, bool *created, char *err, size_t errlen) {
  return store_write_as(s, t, key, obj, mode, NULL, out_key, created, NULL, NULL, err, errlen);
}

int store_delete(store_t *s, const store_table *t, const char *key) {
  return store_delete_as(s, t, key, NULL, NULL, 0);
}

/*
 * A numeric column's value in a PostgreSQL image, spelled as to_jsonb
 * spells a non-finite one, made that number: a numeric column holds no
 * text, so its string can only be one of these, and as a number it
 * compares as SQL compares it (an infinity with any number; NaN above all,
 * uri_num_compare), not as text after every number.
 */
static void store_image_nonfinite(const store_table *t, cJSON *image) {
  if (t == NULL || !cJSON_IsObject(image)) return;
  for (int c = 0; c < t->n_cols; c++) {
    if (!t->cols[c].numeric) continue;
    cJSON *v = cJSON_GetObjectItemCaseSensitive(image, t->cols[c].name);
    if (!cJSON_IsString(v)) continue;
    double d = strcmp(v->valuestring, "Infinity") == 0    ? INFINITY
               : strcmp(v->valuestring, "-Infinity") == 0 ? -INFINITY
               : strcmp(v->valuestring, "NaN") == 0       ? NAN
                                                          : 0;
    if (d == 0) continue;
    cJSON_free(v->valuestring); /* the item becomes the number, in place */
    v->valuestring = NULL;
    v->type = cJSON_Number;
    cJSON_SetNumberHelper(v, d);
  }
}

void store_audit_row_images(const store_audit_row *row, const cJSON **old_row,
                            const cJSON **new_row) {
  store_audit_row *r = (store_audit_row *)row; /* the cache is the row's own, private part */
  if (!r->parsed) {
    /*
     * A table's: an integer beyond 2^53 as a raw item of its digits, so that
     * the subscriptions compare it exactly, as SQL does (sub_index.c).
     * mcpsubd's own rows (subscriptions, signals) as written: their numbers
     * are its own.
     */
    bool table =
        strcmp(r->table, STORE_SUBSCRIPTION_LOG) != 0 && strcmp(r->table, STORE_SIGNAL_LOG) != 0;
    cJSON *(*parse)(const char *, size_t) = table ? jsonrpc_parse_exact : cJSON_ParseWithLength;
    r->old_parsed = r->old_json != NULL ? parse(r->old_json, strlen(r->old_json)) : NULL;
    r->new_parsed = r->new_json != NULL ? parse(r->new_json, strlen(r->new_json)) : NULL;
    if (table && r->nonfinite_strings != NULL) {
      const store_table *t = store_find_table(r->nonfinite_strings, r->table);
      store_image_nonfinite(t, r->old_parsed);
      store_image_nonfinite(t, r->new_parsed);
    }
    r->parsed = true;
  }
  *old_row = r->old_parsed;
  *new_row = r->new_parsed;
}

void store_session_finish(store_session *ss) {
  if (ss == NULL) return;
  free(ss->client_info);
  free(ss->client_capabilities);
  free(ss->log_level);
  free(ss->subscriptions);
  free(ss->principal);
  ss->client_info = ss->client_capabilities = ss->log_level = ss->subscriptions = NULL;
  ss->principal = NULL;
}

int64_t store_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int store_bulk_parse(const store_table *t, const store_filter *filters, size_t n, const cJSON *set,
                     const store_guard *guard, store_assign **assigns, int *n_assign, char *err,
                     size_t errlen) {
  const cJSON *key_value = NULL;
  int ret = 0;
  *assigns = NULL;
  *n_assign = 0;
  if (!store_filters_valid(t, filters, n)) {
    store_set_err(err, errlen, "invalid filter value");
    return -EINVAL;
  }
  if (set == NULL) return 0;
  *assigns = mem_calloc((size_t)t->n_cols + 1, sizeof(**assigns));
  ret = store_write_parse(t, NULL, set, *assigns, n_assign, &key_value, err, errlen);
  if (ret == 0 && key_value != NULL) {
    store_set_err(err, errlen, "a bulk write cannot change keys");
    ret = -EINVAL;
  }
  if (ret == 0 && *n_assign == 0) {
    store_set_err(err, errlen, "nothing to set");
    ret = -EINVAL;
  }
  /* Nobody moves rows out of their row scope (the filters keep them to it). */
  for (int i = 0; ret == 0 && guard != NULL && guard->scope_column != NULL && i < *n_assign; i++) {
    const store_assign *a = &(*assigns)[i];
    if (strcmp(t->cols[a->col].name, guard->scope_column) != 0) continue;
    char *text = store_json_key_text(a->value);
    bool same = text != NULL && strcmp(text, guard->scope_value) == 0;
    free(text);
    if (!same) {
      store_set_err(err, errlen, "column %s is your row scope: it cannot be changed",
                    guard->scope_column);
      ret = -EACCES;
    }
  }
  return ret;
}

static int store_table_name_cmp(const void *a, const void *b) {
  return strcmp(((const store_table *)a)->name, ((const store_table *)b)->name);
}

void store_tables_sort(store_table *tables, int n) {
  if (n > 1) qsort(tables, (size_t)n, sizeof(*tables), store_table_name_cmp);
}

/* Dispatch ------------------------------------------------------------------------------ */

static bool store_is_pg(const char *target) {
  return strncmp(target, "postgres://", 11) == 0 || strncmp(target, "postgresql://", 13) == 0;
}

const char *store_backend_name(const char *target) {
  return store_is_pg(target) ? store_pg_ops.name : store_sqlite_ops.name;
}

static const store_ops *store_ops_for(const char *target) {
  return store_is_pg(target) ? &store_pg_ops : &store_sqlite_ops;
}

int store_open(const char *target, const char *schema_path, store_t **out, char *err,
               size_t errlen) {
  return store_ops_for(target)->open(target, schema_path, out, err, errlen);
}

int store_open_readonly(const char *target, store_t **out, char *err, size_t errlen) {
  return store_ops_for(target)->open_readonly(target, out, err, errlen);
}

void store_close(store_t *s) {
  if (s != NULL) s->ops->close(s);
}

int store_prepared_statements(store_t *s) {
  return s->ops->prepared != NULL ? s->ops->prepared(s) : 0;
}

void store_set_busy_timeout(store_t *s, int ms) {
  if (s->ops->set_busy_timeout != NULL) s->ops->set_busy_timeout(s, ms);
}

void store_set_busy_handler(store_t *s, int (*fn)(void *data, int count), void *data) {
  if (s->ops->set_busy_handler != NULL) s->ops->set_busy_handler(s, fn, data);
}

void store_set_waiter(store_t *s, const store_waiter *waiter) {
  s->waiter = *waiter;
}

bool store_may_use(store_t *s) {
  return s->waiter.may_use == NULL || s->waiter.may_use(s->waiter.data);
}

int store_wait_fd(store_t *s, int fd, short events, int timeout_ms) {
  if (s->waiter.wait != NULL) {
    int rc = s->waiter.wait(s->waiter.data, fd, events, timeout_ms);
    if (rc >= 0) return rc;
  }
  struct pollfd pfd = {.fd = fd, .events = events};
  int n = poll(&pfd, 1, timeout_ms);
  return n < 0 ? (errno == EINTR ? 0 : -1) : n > 0;
}

int store_refresh_schema(store_t *s, bool *tables_changed) {
  return s->ops->refresh_schema(s, tables_changed);
}

bool store_schema_stale(store_t *s) {
  return s->ops->schema_stale != NULL && s->ops->schema_stale(s);
}

int store_get_record(store_t *s, const store_table *t, const char *key, cJSON **row,
                     int64_t *version) {
  return s->ops->get_record(s, t, key, row, version);
}

int store_get_record_text(store_t *s, const store_table *t, const char *key, buf_t *out,
                          int64_t *version) {
  if (s->ops->get_record_text != NULL) return s->ops->get_record_text(s, t, key, out, version);
  cJSON *row;
  int rc = s->ops->get_record(s, t, key, &row, version);
  size_t before = out->len;
  if (rc == 0 && jsonrpc_print(out, row) < 0) {
    out->len = before;
    rc = -EINVAL;
  }
  cJSON_Delete(row);
  return rc;
}

int store_query(store_t *s, const store_table *t, const store_filter *filters, size_t n_filters,
                int limit, const char *after_key, cJSON **rows, char **next_key) {
  return s->ops->query(s, t, filters, n_filters, limit, after_key, rows, next_key);
}

int store_count_where(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                      int64_t *count) {
  return s->ops->count_where(s, t, filters, n, count);
}

int store_table_version(store_t *s, const store_table *t, int64_t *version) {
  return s->ops->table_version(s, t, version);
}

int store_table_count(store_t *s, const store_table *t, int64_t *count) {
  return s->ops->table_count(s, t, count);
}

int store_write_as(store_t *s, const store_table *t, const char *key, const cJSON *obj,
                   store_write_mode mode, const store_guard *guard, char **out_key, bool *created,
                   cJSON **row, int64_t *version, char *err, size_t errlen) {
  if (row != NULL) *row = NULL;
  return s->ops->write_as(s, t, key, obj, mode, guard, out_key, created, row, version, err, errlen);
}

int store_delete_as(store_t *s, const store_table *t, const char *key, const store_guard *guard,
                    char *err, size_t errlen) {
  return s->ops->delete_as(s, t, key, guard, err, errlen);
}

int store_bulk_as(store_t *s, const store_table *t, const store_filter *filters, size_t n,
                  const cJSON *set, const store_guard *guard, int64_t *changed, char *err,
                  size_t errlen) {
  return s->ops->bulk_as(s, t, filters, n, set, guard, changed, err, errlen);
}

int store_audit_max_seq(store_t *s, int64_t *seq) {
  return s->ops->audit_max_seq(s, seq);
}

/* The audit readers' limit, within 1..STORE_QUERY_MAX_LIMIT: the backends take it as it comes. */
static int store_audit_limit(int limit) {
  return limit < 1 ? 1 : limit > STORE_QUERY_MAX_LIMIT ? STORE_QUERY_MAX_LIMIT : limit;
}

int store_audit_read(store_t *s, int64_t after_seq, int limit,
                     int (*fn)(const store_audit_row *row, void *data), void *data, int *n) {
  return s->ops->audit_read(s, after_seq, store_audit_limit(limit), fn, data, n);
}

int store_audit_read_of(store_t *s, const char *table, const char *key, int64_t after_seq,
                        int64_t upto_seq, int limit,
                        int (*fn)(const store_audit_row *row, void *data), void *data, int *n) {
  return s->ops->audit_read_of(s, table, key, after_seq, upto_seq, store_audit_limit(limit), fn,
                               data, n);
}

int store_audit_list(store_t *s, const char *table, int limit,
                     int (*fn)(const store_audit_row *row, void *data), void *data) {
  return s->ops->audit_list(s, table, store_audit_limit(limit), fn, data);
}

int store_data_version(store_t *s, int64_t *version) {
  return s->ops->data_version(s, version);
}

int store_wake_fd(store_t *s) {
  return s->ops->wake_fd != NULL ? s->ops->wake_fd(s) : -1;
}

int store_audit_prune(store_t *s, store_prune *p) {
  p->deleted = 0;
  p->more = false;
  if (p->retain_rows <= 0 && p->retain_ms <= 0) return 0;
  return s->ops->audit_prune(s, p);
}

int store_audit_pruned_through(store_t *s, int64_t *seq) {
  return s->ops->audit_pruned_through(s, seq);
}

int store_counts(store_t *s, int64_t *sessions, int64_t *audit_rows) {
  *sessions = *audit_rows = 0;
  return s->ops->counts(s, sessions, audit_rows);
}

int store_session_insert(store_t *s, const store_session *ss) {
  return s->ops->session_insert(s, ss);
}

int store_session_load(store_t *s, const char *id, store_session *ss) {
  return s->ops->session_load(s, id, ss);
}

int store_session_touch(store_t *s, const char *id, int64_t last_seen) {
  return s->ops->session_touch(s, id, last_seen);
}

int store_session_set_log_level(store_t *s, const char *id, const char *level) {
  return s->ops->session_set_log_level(s, id, level);
}

int store_session_set_subscriptions(store_t *s, const char *id, const char *json_array) {
  return s->ops->session_set_subscriptions(s, id, json_array);
}

int store_session_sub_put(store_t *s, const char *id, const char *uri, const char *debounce,
                          const char *topic_key) {
  return s->ops->session_sub_put(s, id, uri, debounce, topic_key);
}

void store_set_origin(store_t *s, const char *origin) {
  snprintf(s->origin, sizeof(s->origin), "%s", origin);
}

char *store_subscription_image(bool put, const char *uri, const char *topic_key,
                               const char *debounce) {
  cJSON *o = store_json_checked(cJSON_CreateObject());
  store_json_add(o, "uri", cJSON_CreateString(uri));
  if (put) {
    store_json_add(o, "key", cJSON_CreateString(topic_key != NULL ? topic_key : uri));
    cJSON *d = debounce != NULL ? cJSON_Parse(debounce) : NULL;
    store_json_add(o, "debounce", d != NULL ? d : cJSON_CreateNull());
  }
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (text == NULL) abort();
  return text;
}

int store_session_sub_delete(store_t *s, const char *id, const char *uri) {
  return s->ops->session_sub_delete(s, id, uri);
}

int store_signal(store_t *s, const char *session, const char *image) {
  return s->ops->signal(s, session, image);
}

int store_session_delete(store_t *s, const char *id) {
  return s->ops->session_delete(s, id);
}

int store_session_prune(store_t *s, int64_t before_ms, int64_t *deleted) {
  return s->ops->session_prune(s, before_ms, deleted);
}

int store_session_prune_slot(store_t *s, int64_t before_ms, unsigned slot, unsigned n_slots,
                             int64_t *deleted) {
  return s->ops->session_prune_slot(s, before_ms, slot, n_slots, deleted);
}

int store_principal_usage(store_t *s, const char *principal, int64_t since_ms, int64_t *sessions,
                          int64_t *subscriptions) {
  return s->ops->principal_usage(s, principal, since_ms, sessions, subscriptions);
}

int store_session_foreach(store_t *s, long limit, int (*fn)(const store_session *ss, void *data),
                          void *data) {
  return s->ops->session_foreach(s, limit, fn, data);
}

int store_batch_begin(store_t *s) {
  return s->ops->batch_begin != NULL ? s->ops->batch_begin(s) : -ENOTSUP;
}

int store_batch_begin_read(store_t *s) {
  return s->ops->batch_begin_read != NULL ? s->ops->batch_begin_read(s) : -ENOTSUP;
}

bool store_batch_broken(store_t *s) {
  return s->ops->batch_broken(s);
}

bool store_batch_current(store_t *s) {
  return s->ops->batch_current != NULL && s->ops->batch_current(s);
}

int store_batch_end(store_t *s, bool commit) {
  return s->ops->batch_end(s, commit);
}

int store_once_begin(store_t *s, const store_once *o, store_once_result *prior) {
  return s->ops->once_begin != NULL ? s->ops->once_begin(s, o, prior) : -ENOTSUP;
}

int store_once_end(store_t *s, const store_once *o, const store_once_result *res, bool ok) {
  return s->ops->once_end != NULL ? s->ops->once_end(s, o, res, ok) : -ENOTSUP;
}

int store_defer_checkpoints(store_t *s) {
  return s->ops->defer_checkpoints != NULL ? s->ops->defer_checkpoints(s) : -ENOTSUP;
}

bool store_checkpoint_due(store_t *s) {
  return s->ops->checkpoint_due != NULL && s->ops->checkpoint_due(s);
}

int store_checkpoint(store_t *s) {
  return s->ops->checkpoint != NULL ? s->ops->checkpoint(s) : -ENOTSUP;
}
