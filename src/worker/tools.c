/*
 * MCP tools over the store: list_tables, get_record, query_records,
 * put_record, delete_record, the bulk put_records and delete_records, and
 * wait_and_read (wait.c). The destructive ones confirm with the user first
 * (confirm.h); query_records and the bulk tools stream progress when asked.
 * Each tool is a row of a const table: its
 * name, description, JSON Schema of its input (as text, parsed on demand),
 * and handler. Wrong arguments (missing, wrong type) are JSON-RPC -32602;
 * everything the database refuses (unknown table or column, constraint,
 * missing record) is an isError result with a message a model can act on.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/uri.h"
#include "worker/confirm.h"
#include "worker/forward.h"
#include "worker/mcp.h"
#include "worker/reader.h"
#include "worker/subscriptions.h"
#include "worker/wait.h"

#define QUERY_MAX_LIMIT 1000

typedef struct tool_args {
  const cJSON *args;        /* the arguments object */
  const store_table *table; /* resolved "table", when the tool has one */
  auth_scope scope;         /* the caller's row scope on table (reads) */
  auth_scope write_scope;   /* ... and for writes (the write tools) */
  char key[512];            /* "key" as text, when the tool has one */
} tool_args;

/* A tool returns a result (text JSON or isError), or NULL after mcp_call_fail. */
typedef cJSON *(*tool_handler)(mcp_call *call, tool_args *a);

cJSON *tools_result_text(const char *text, bool is_error) {
  cJSON *result = cJSON_CreateObject();
  cJSON *content = cJSON_AddArrayToObject(result, "content");
  cJSON *item = cJSON_CreateObject();
  cJSON_AddStringToObject(item, "type", "text");
  cJSON_AddStringToObject(item, "text", text);
  cJSON_AddItemToArray(content, item);
  if (is_error) cJSON_AddTrueToObject(result, "isError");
  return result;
}

cJSON *tools_result_json(cJSON *value) {
  char *text = jsonrpc_print_text(value); /* numbers exact */
  cJSON_Delete(value);
  cJSON *result = tools_result_text(text != NULL ? text : "null", false);
  free(text);
  return result;
}

static cJSON *tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cJSON *tool_error(const char *fmt, ...) {
  char text[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  return tools_result_text(text, true);
}

/* Maps a store failure to a tool error. */
static cJSON *tool_store_error(int rc, const char *err, const char *table, const char *key) {
  switch (rc) {
  case -ENOENT: return tool_error("no record %s/%s", table, key);
  case -EINVAL:
  case -EEXIST: return tool_error("%s", err[0] != '\0' ? err : "invalid record");
  case -EBUSY: return tool_error("the database is busy (another process holds it locked); retry");
  case -ENOSPC: return tool_error("insufficient storage: the database or the disk is full");
  case -ENOTCONN: return tool_error("the database is unavailable; retry");
  case -EACCES: return tool_error("forbidden: %s", err[0] != '\0' ? err : "outside your row scope");
  default: return tool_error("database error: %s", err[0] != '\0' ? err : "unknown");
  }
}

/*
 * list_tables' row counts: every item of list with a "rows" member (-1
 * until counted) is counted on s by its name; one that cannot be counted
 * loses the member. 0, or -ENOTCONN (the rest is left uncounted).
 */
static int tool_count_tables(store_t *s, cJSON *list, bool on_reader) {
  cJSON *item;
  cJSON_ArrayForEach(item, list) {
    cJSON *rows = cJSON_GetObjectItemCaseSensitive(item, "rows");
    if (rows == NULL || rows->valuedouble >= 0) continue;
    const char *name = cJSON_GetObjectItemCaseSensitive(item, "name")->valuestring;
    const store_table *t = on_reader ? NULL : store_find_table(s, name);
    int rc = on_reader ? reader_table(s, name, &t) : t != NULL ? 0 : -ENOENT;
    int64_t count = 0;
    if (rc == 0) rc = store_table_count(s, t, &count);
    if (rc == -ENOTCONN) return rc;
    if (rc == 0)
      cJSON_SetNumberValue(rows, (double)count);
    else
      cJSON_DeleteItemFromObjectCaseSensitive(item, "rows");
  }
  return 0;
}

/* The counts left at -1 (the database was away): not there. */
static cJSON *tool_tables_result(cJSON *list) {
  cJSON *item;
  cJSON_ArrayForEach(item, list) {
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(item, "rows");
    if (rows != NULL && rows->valuedouble < 0)
      cJSON_DeleteItemFromObjectCaseSensitive(item, "rows");
  }
  return tools_result_json(list);
}

/* list_tables on a reader: its counts scan whole tables. */
typedef struct tool_tables_job {
  reader_job job;
  mcp_reply reply;
  cJSON *list;
} tool_tables_job;

static int tool_tables_run(reader_job *j, store_t *s) {
  return tool_count_tables(s, ((tool_tables_job *)j)->list, true);
}

static void tool_tables_done(reader_job *j) {
  tool_tables_job *tj = (tool_tables_job *)j;
  mcp_reply_send(&tj->reply, tool_tables_result(tj->list), 0, NULL);
  free(tj);
}

static cJSON *tool_list_tables(mcp_call *call, tool_args *a) {
  int n;
  const store_table *tables = store_tables(call->w->store, &n);
  cJSON *list = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    const store_table *t = &tables[i];
    auth_scope scope;
    if (auth_table_access(call->principal, t->name, AUTH_READ, &scope) != 0) continue;
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "name", t->name);
    cJSON_AddStringToObject(item, "key", t->key_col >= 0 ? t->cols[t->key_col].name : "rowid");
    cJSON *cols = cJSON_AddArrayToObject(item, "columns");
    for (int j = 0; j < t->n_cols; j++)
      cJSON_AddItemToArray(cols, cJSON_CreateString(t->cols[j].name));
    if (!scope.scoped)
      cJSON_AddNumberToObject(item, "rows", -1); /* not for a row scope: it is all rows */
    char *uri = uri_format_collection(call->w->cfg->public_url, t->name);
    cJSON_AddStringToObject(item, "uri", uri);
    free(uri);
    cJSON_AddItemToArray(list, item);
  }
  if (call->w->reader != NULL && call->conn != NULL) {
    tool_tables_job *tj = mem_calloc(1, sizeof(*tj));
    tj->job = (reader_job){.run = tool_tables_run, .done = tool_tables_done};
    mcp_reply_init(&tj->reply, call);
    tj->list = list;
    reader_submit(call->w->reader, &tj->job);
    call->pending = true;
    return NULL;
  }
  (void)tool_count_tables(call->w->store, list, false);
  return tool_tables_result(list);
}

/*
 * The answer of a tool's read from its fetch (rc is read_fetch_run's),
 * given the reply for the progress it reports.
 */
typedef cJSON *(*tool_read_answer)(mcp_reply *reply, const char *table, const char *key,
                                   read_fetch *f, int rc);

/* A tool's read on a reader: answered from its completion. */
typedef struct tool_read_job {
  read_job rj;
  mcp_reply reply;
  tool_read_answer answer;
  char key[sizeof(((tool_args *)0)->key)];
} tool_read_job;

static void tool_read_done(read_job *rj) {
  tool_read_job *j = (tool_read_job *)rj;
  mcp_reply_send(&j->reply, j->answer(&j->reply, rj->table, j->key, &rj->f, rj->job.rc), 0, NULL);
  read_job_free(rj);
}

/*
 * Runs f on a->table and answers with answer on reply (the call's, taken
 * over): on a reader when the worker has them and the call can wait
 * (reader.h: the lane goes on meanwhile; NULL is returned and the call is
 * pending), else here.
 */
static cJSON *tool_read(mcp_call *call, tool_args *a, read_fetch *f, mcp_reply *reply,
                        tool_read_answer answer) {
  if (call->w->reader != NULL && reply->conn != NULL) {
    tool_read_job *j =
        (tool_read_job *)read_job_create(sizeof(*j), a->table->name, f, tool_read_done);
    j->reply = *reply;
    j->answer = answer;
    memcpy(j->key, a->key, sizeof(j->key));
    reader_submit(call->w->reader, &j->rj.job);
    call->pending = true;
    return NULL;
  }
  int rc = read_fetch_run(call->w->store, a->table, f);
  cJSON *result = answer(reply, a->table->name, a->key, f, rc);
  read_fetch_finish(f);
  if (reply->conn == NULL || !http_conn_streaming(reply->conn)) {
    mcp_reply_finish(reply);
    return result;
  }
  mcp_reply_send(reply, result, 0, NULL); /* after the progress it streamed */
  call->pending = true;
  return NULL;
}

static cJSON *tool_get_record_answer(mcp_reply *reply, const char *table, const char *key,
                                     read_fetch *f, int rc) {
  (void)reply;
  if (rc != 0) return tool_store_error(rc, "", table, key);
  cJSON *row = f->data;
  f->data = NULL;
  return tools_result_json(row);
}

static cJSON *tool_get_record(mcp_call *call, tool_args *a) {
  /* The record's URI narrowed to the caller's row scope: outside it, not there. */
  uri_t u = {.kind = URI_RECORD, .table = mem_strdup(a->table->name), .key = mem_strdup(a->key)};
  cJSON *result;
  if (auth_scope_apply(&a->scope, &u) != 0) {
    result = tool_store_error(-ENOENT, "", a->table->name, a->key);
  } else {
    read_fetch f = {.scoped = &u};
    mcp_reply reply;
    mcp_reply_init(&reply, call);
    result = tool_read(call, a, &f, &reply, tool_get_record_answer);
  }
  uri_finish(&u);
  return result;
}

/*
 * arguments.filter — the query grammar of filtered collection URIs
 * (col=v, col=gt=5, col=v1|v2...; "" or absent: none) — on a->table,
 * narrowed to the caller's row scope for right: parsed into *u (release
 * with uri_finish). NULL, or the failure (a result, or NULL after
 * mcp_call_fail) with *failed set.
 */
static cJSON *tool_filter(mcp_call *call, tool_args *a, unsigned right, uri_t *u, bool *failed) {
  const cJSON *filter = cJSON_GetObjectItemCaseSensitive(a->args, "filter");
  *failed = true;
  if (filter != NULL && !cJSON_IsString(filter))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "filter must be a string: col=value&col=gt=5&col=v1|v2 ...");
  char *text = uri_format_collection(call->w->cfg->public_url, a->table->name);
  buf_t b;
  buf_init(&b);
  buf_append_str(&b, text);
  free(text);
  if (filter != NULL && filter->valuestring[0] != '\0') buf_printf(&b, "?%s", filter->valuestring);
  char *key = NULL;
  int rc = subs_resolve_for(call->w, call->principal, b.data, right, u, &key);
  buf_finish(&b);
  free(key);
  if (rc != 0)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "filter: %s (table %s)",
                         subs_resolve_error()[0] != '\0' ? subs_resolve_error()
                                                         : "names a column that does not exist",
                         a->table->name);
  if (u->limit != 0 || u->cursor != NULL) {
    uri_finish(u);
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "filter: _limit and _cursor are arguments (limit, cursor), not filters");
  }
  *failed = false;
  return NULL;
}

/* The store filters of u on a->table (URI_MAX_FILTERS slots), values owned by values. */
static size_t tool_store_filters(tool_args *a, const uri_t *u, store_filter *filters,
                                 cJSON *values) {
  const char *bad = NULL;
  if (resources_filters(a->table, u, filters, values, &bad) != 0) abort(); /* resolved above */
  return u->n_filters;
}

/* "1 row" or "N rows", then the verb as its number has it ("1 row matches", "2 rows match"). */
static void rows_text(char *out, size_t len, long long n, const char *one, const char *many) {
  snprintf(out, len, "%lld %s %s", n, n == 1 ? "row" : "rows", n == 1 ? one : many);
}

/*
 * With a progress token: how many rows match (in the message), then how
 * many were read; the total is the page's rows, so that the progress ends
 * at its total when the answer comes (a page of 50 of 3,003 matching rows
 * is all of this call's work), then the answer.
 */
static cJSON *tool_query_answer(mcp_reply *reply, const char *table, const char *key, read_fetch *f,
                                int rc) {
  (void)key;
  if (rc == -ENOENT && f->bad_column != NULL)
    return tool_error("unknown column %s in table %s", f->bad_column, table);
  if (rc == -EINVAL) return tool_error("invalid cursor");
  if (rc != 0) return tool_store_error(rc, "", table, "");
  char text[64];
  int rows = cJSON_GetArraySize(f->data);
  if (f->total >= 0) {
    rows_text(text, sizeof(text), (long long)f->total, "matches", "match");
    mcp_reply_progress(reply, 0, (double)rows, text);
  }
  rows_text(text, sizeof(text), rows, "read", "read");
  mcp_reply_progress(reply, (double)rows, (double)rows, text);
  cJSON *out = cJSON_CreateObject();
  cJSON_AddItemToObject(out, "rows", f->data);
  f->data = NULL;
  if (f->next != NULL) cJSON_AddStringToObject(out, "nextCursor", f->next);
  return tools_result_json(out);
}

static cJSON *tool_query_records(mcp_call *call, tool_args *a) {
  const cJSON *where = cJSON_GetObjectItemCaseSensitive(a->args, "where");
  const cJSON *limit_item = cJSON_GetObjectItemCaseSensitive(a->args, "limit");
  const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(a->args, "cursor");
  if ((where != NULL && !cJSON_IsObject(where)) ||
      (limit_item != NULL && (!cJSON_IsNumber(limit_item) || limit_item->valuedouble < 1 ||
                              limit_item->valuedouble != floor(limit_item->valuedouble))) ||
      (cursor != NULL && !cJSON_IsString(cursor)))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "query_records: where must be an object, limit a positive integer, "
                         "cursor a string");
  if (cJSON_GetArraySize(where) > READ_MAX_WHERE)
    return tool_error("too many filters (at most %d in where)", READ_MAX_WHERE);
  const cJSON *f;
  cJSON_ArrayForEach(f, where) {
    if (store_column_index(a->table, f->string) < 0)
      return tool_error("unknown column %s in table %s", f->string, a->table->name);
    if (cJSON_IsObject(f) || cJSON_IsArray(f))
      return tool_error("filter on %s: value must be a string, number, boolean or null", f->string);
  }
  uri_t u;
  bool failed;
  cJSON *fail = tool_filter(call, a, AUTH_READ, &u, &failed); /* the row scope is one more filter */
  if (failed) return fail;
  long limit = call->w->cfg->page_size;
  if (limit_item != NULL)
    limit =
        limit_item->valuedouble > QUERY_MAX_LIMIT ? QUERY_MAX_LIMIT : (long)limit_item->valuedouble;
  mcp_reply reply;
  mcp_reply_init(&reply, call);
  read_fetch fetch = {.scoped = &u,
                      .limit = limit,
                      .cursor = cursor != NULL ? cursor->valuestring : NULL,
                      .where = where,
                      .want_total = reply.progress_token != NULL && reply.conn != NULL};
  cJSON *result = tool_read(call, a, &fetch, &reply, tool_query_answer);
  uri_finish(&u);
  return result;
}

/* A tool's write on the writer: the pending call is answered from its completion. */
typedef struct tool_write_job {
  writer_record rec;
  worker_t *w;
  mcp_reply reply;
  struct tool_write_job *prev, *next; /* the worker's submitted tool writes (tools_cancel) */
} tool_write_job;

/* The answer of a record write: put_record's {created, record}, delete_record's {deleted}. */
static cJSON *tool_write_result(worker_t *w, writer_record *r, mcp_reply *reply) {
  const store_table *t = store_find_table(w->store, r->table);
  if (r->job.rc != 0 || t == NULL)
    return tool_store_error(t == NULL && r->job.rc == 0 ? -EIO : r->job.rc, r->err, r->table,
                            r->key);
  cJSON *out = cJSON_CreateObject();
  char note[600];
  if (r->where != NULL) { /* a bulk write: how many rows */
    snprintf(note, sizeof(note), "%s %lld %s of %s", r->is_delete ? "deleted" : "updated",
             (long long)r->changed, r->changed == 1 ? "row" : "rows", t->name);
    mcp_reply_progress(reply, (double)r->changed, (double)r->changed, note);
    mcp_reply_log(w, reply, SESSION_LOG_INFO, "mcpsub.tools", note);
    cJSON_AddNumberToObject(out, r->is_delete ? "deleted" : "updated", (double)r->changed);
    return tools_result_json(out);
  }
  if (r->is_delete) {
    snprintf(note, sizeof(note), "delete_record deleted %s/%s", t->name, r->key);
    mcp_reply_log(w, reply, SESSION_LOG_INFO, "mcpsub.tools", note);
    cJSON_AddTrueToObject(out, "deleted");
    return tools_result_json(out);
  }
  cJSON *row = NULL;
  int64_t version = 0;
  int rc = writer_record_take_row(r, w->store, t, &row, &version);
  if (rc != 0) {
    cJSON_Delete(out);
    return tool_store_error(rc, "", t->name, r->key);
  }
  snprintf(note, sizeof(note), "put_record %s %s/%s", r->created ? "inserted" : "replaced", t->name,
           r->key);
  mcp_reply_log(w, reply, SESSION_LOG_INFO, "mcpsub.tools", note);
  cJSON_AddBoolToObject(out, "created", r->created);
  cJSON_AddItemToObject(out, "record", row);
  return tools_result_json(out);
}

static void tool_write_done(writer_job *j) {
  tool_write_job *tw = (tool_write_job *)j;
  worker_t *w = tw->w;
  if (tw->prev != NULL)
    tw->prev->next = tw->next;
  else
    w->tool_writes = tw->next;
  if (tw->next != NULL) tw->next->prev = tw->prev;
  if (tw->reply.conn != NULL) /* else cancelled: nothing more is answered */
    mcp_reply_send(&tw->reply, tool_write_result(w, &tw->rec, &tw->reply), 0, NULL);
  mcp_reply_finish(&tw->reply);
  writer_record_free(&tw->rec);
}

/* Hands the write to the writer; it stays findable by tools_cancel until it is done. */
static void tool_write_submit(writer_job *j) {
  tool_write_job *tw = (tool_write_job *)j;
  worker_t *w = tw->w;
  tw->prev = NULL;
  tw->next = w->tool_writes;
  if (w->tool_writes != NULL) w->tool_writes->prev = tw;
  w->tool_writes = tw;
  forward_submit(w, &tw->rec);
}

bool tools_cancel(worker_t *w, const char *principal, const char *session, const char *id_json) {
  for (tool_write_job *tw = w->tool_writes; tw != NULL; tw = tw->next) {
    if (!mcp_reply_matches(&tw->reply, principal, session, id_json)) continue;
    atomic_store(&tw->rec.job.cancelled, true); /* not run, unless the writer has begun it */
    mcp_end_unanswered(tw->reply.conn);
    tw->reply.conn = NULL;
    return true;
  }
  return false;
}

/* A write that does not run (refused, cancelled): nothing is answered from it. */
static void tool_write_discard(writer_job *j) {
  tool_write_job *tw = (tool_write_job *)j;
  mcp_reply_finish(&tw->reply);
  writer_record_free(&tw->rec);
}

/*
 * Runs a tool's write (record: put or delete one record; where: a bulk
 * write) after the confirmation it needs (message, rows; none when message
 * is NULL): on the writer, the call answered when it is done; inside a
 * batch (nothing can wait there) at once on the loop's connection, which
 * does not wait for a lock (-EBUSY instead). Takes record and where.
 */
static cJSON *tool_write(mcp_call *call, tool_args *a, cJSON *record, cJSON *where, bool is_delete,
                         const char *message, int64_t rows) {
  worker_t *w = call->w;
  store_guard g = auth_guard(call->principal, &a->write_scope);
  bool waits = call->conn != NULL;
  writer_record *rec =
      writer_record_create(waits ? sizeof(tool_write_job) : sizeof(writer_record), a->table->name,
                           where != NULL ? NULL : a->key, record, STORE_WRITE_REPLACE, is_delete,
                           &g, waits ? tool_write_done : NULL);
  rec->where = where;
  rec->job.quick = where == NULL; /* a bulk write's rows are not bounded: the thread's */
  tool_write_job *tw = waits ? (tool_write_job *)rec : NULL;
  if (tw != NULL) {
    tw->w = w;
    mcp_reply_init(&tw->reply, call);
  }
  if (message != NULL) {
    confirm_write cw = {message,
                        rows,
                        tw != NULL ? &tw->rec.job : NULL,
                        tw != NULL ? &tw->reply : NULL,
                        tool_write_submit,
                        tool_write_discard};
    bool go;
    cJSON *answer = confirm_check(call, &cw, &go);
    if (!go) {
      if (tw == NULL) writer_record_free(rec); /* else confirm took it */
      return answer;
    }
  }
  if (tw != NULL) {
    tool_write_submit(&tw->rec.job);
    call->pending = true;
    return NULL;
  }
  rec->job.rc = writer_record_apply(rec, w->store);
  if (rec->job.rc == 0) subs_after_write(w);
  mcp_reply reply;
  mcp_reply_init(&reply, call);
  cJSON *result = tool_write_result(w, rec, &reply);
  mcp_reply_finish(&reply);
  writer_record_free(rec);
  return result;
}

static cJSON *tool_put_record(mcp_call *call, tool_args *a) {
  const cJSON *record = cJSON_GetObjectItemCaseSensitive(a->args, "record");
  if (!cJSON_IsObject(record))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "put_record requires arguments.record (an object)");
  return tool_write(call, a, cJSON_Duplicate(record, true), NULL, false, NULL, 0);
}

static cJSON *tool_delete_record(mcp_call *call, tool_args *a) {
  /* A record that is not there (or not the caller's) is not worth asking about. */
  cJSON *row = NULL;
  int64_t version = 0;
  int rc = store_get_record(call->w->store, a->table, a->key, &row, &version);
  bool there = rc == 0 && auth_scope_matches(&a->write_scope, row);
  cJSON_Delete(row);
  if (rc == 0 && !there) rc = -ENOENT;
  if (rc != 0) return tool_store_error(rc, "", a->table->name, a->key);
  char message[700];
  snprintf(message, sizeof(message), "Delete record %s of table %s? This cannot be undone.", a->key,
           a->table->name);
  return tool_write(call, a, NULL, NULL, true, message, 1);
}

/*
 * put_records and delete_records: one transaction over the rows the
 * filter matches (within the caller's write scope). The rows are counted
 * first: a delete that matches any, and a put that matches more than
 * --confirm-rows, ask the user (confirm.h); with a progress token the
 * answer streams the count, then the rows written.
 */
static cJSON *tool_bulk(mcp_call *call, tool_args *a, bool is_delete) {
  const cJSON *set = cJSON_GetObjectItemCaseSensitive(a->args, "set");
  if (!is_delete && (!cJSON_IsObject(set) || cJSON_GetArraySize(set) == 0))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "put_records requires arguments.set (an object of column: value)");
  if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a->args, "filter")))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "%s requires arguments.filter (a string; \"\" for every row)",
                         is_delete ? "delete_records" : "put_records");
  uri_t u;
  bool failed;
  cJSON *fail = tool_filter(call, a, AUTH_WRITE, &u, &failed);
  if (failed) return fail;
  store_filter filters[URI_MAX_FILTERS];
  cJSON *values = cJSON_CreateArray();
  size_t n = tool_store_filters(a, &u, filters, values);
  uri_finish(&u);
  int64_t rows = 0;
  int rc = store_count_where(call->w->store, a->table, filters, n, &rows);
  if (rc != 0) {
    cJSON_Delete(values);
    return tool_store_error(rc, "", a->table->name, "");
  }
  cJSON *where = cJSON_CreateArray(); /* [[column, op, value], ...] for the writer */
  for (size_t i = 0; i < n; i++) {
    cJSON *f = cJSON_CreateArray();
    cJSON_AddItemToArray(f, cJSON_CreateString(a->table->cols[filters[i].col].name));
    cJSON_AddItemToArray(f, cJSON_CreateNumber(filters[i].op));
    cJSON_AddItemToArray(f, cJSON_Duplicate(filters[i].value, true));
    cJSON_AddItemToArray(where, f);
  }
  cJSON_Delete(values);
  const char *filter = cJSON_GetObjectItemCaseSensitive(a->args, "filter")->valuestring;
  char message[900];
  if (is_delete) {
    snprintf(message, sizeof(message),
             "Delete %lld records of table %s%s%.300s? This cannot be undone.", (long long)rows,
             a->table->name, filter[0] ? " matching " : "", filter);
  } else {
    char *text = jsonrpc_print_text(set);
    snprintf(message, sizeof(message), "Set %.300s on %lld records of table %s%s%.300s?",
             text != NULL ? text : "", (long long)rows, a->table->name,
             filter[0] ? " matching " : "", filter);
    free(text);
  }
  bool ask = is_delete ? rows > 0 : rows > call->w->cfg->confirm_rows;
  if (call->conn != NULL) {
    mcp_reply reply; /* the count goes first on a streamed answer */
    mcp_reply_init(&reply, call);
    char text[64];
    rows_text(text, sizeof(text), (long long)rows, "matches", "match");
    mcp_reply_progress(&reply, 0, (double)rows, text);
    mcp_reply_finish(&reply);
  }
  return tool_write(call, a, is_delete ? NULL : cJSON_Duplicate(set, true), where, is_delete,
                    ask ? message : NULL, rows);
}

static cJSON *tool_put_records(mcp_call *call, tool_args *a) {
  return tool_bulk(call, a, false);
}

static cJSON *tool_delete_records(mcp_call *call, tool_args *a) {
  return tool_bulk(call, a, true);
}

static cJSON *tool_wait_and_read(mcp_call *call, tool_args *a) {
  return wait_tool(call, a->args);
}

#define TABLE_PROP                                                                                 \
  "\"table\":{\"type\":\"string\",\"description\":\"Table name (see list_tables)\"}"
#define FILTER_PROP                                                                                \
  "\"filter\":{\"type\":\"string\",\"description\":\"the query of a filtered collection URI: "     \
  "col=value&col=gt=5&col=v1|v2 (operators eq, ne, gt, ge, lt, le, sw, ct); empty: every "         \
  "record\"}"
#define KEY_PROP                                                                                   \
  "\"key\":{\"type\":[\"string\",\"integer\"],\"description\":\"Primary key of the record\"}"

static const struct tool {
  const char *name;
  const char *description;
  const char *input_schema;
  bool needs_table;
  bool needs_key;
  tool_handler handler;
  bool writes; /* needs the write right on its table */
} tools[] = {
    {"list_tables",
     "List the exported tables with their key, columns, row count and collection URI.",
     "{\"type\":\"object\",\"properties\":{}}", false, false, tool_list_tables},
    {"get_record", "Read one record by table and primary key.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," KEY_PROP
     "},\"required\":[\"table\",\"key\"]}",
     true, true, tool_get_record},
    {"query_records",
     "Query records of a table, in key order, paged with a cursor: a filter in the URI query "
     "grammar (col=v, col=gt=5, col=sw=ab, col=v1|v2 ...) and/or equality filters in where.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," FILTER_PROP
     ",\"where\":{\"type\":\"object\",\"description\":\"column: value equality filters\"},"
     "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000},"
     "\"cursor\":{\"type\":\"string\",\"description\":\"nextCursor of the previous page\"}},"
     "\"required\":[\"table\"]}",
     true, false, tool_query_records},
    {"put_record", "Insert a record or replace it whole: columns not given take their default.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," KEY_PROP
     ",\"record\":{\"type\":\"object\",\"description\":\"column: value\"}},"
     "\"required\":[\"table\",\"key\",\"record\"]}",
     true, true, tool_put_record, true},
    {"delete_record", "Delete one record by table and primary key. Asks the user first.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," KEY_PROP
     "},\"required\":[\"table\",\"key\"]}",
     true, true, tool_delete_record, true},
    {"put_records",
     "Set columns on every record of a table the filter matches, in one transaction. Asks the "
     "user first when it changes many records.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," FILTER_PROP
     ",\"set\":{\"type\":\"object\",\"description\":\"column: new value\"}},"
     "\"required\":[\"table\",\"filter\",\"set\"]}",
     true, false, tool_put_records, true},
    {"delete_records",
     "Delete every record of a table the filter matches, in one transaction. Asks the user first.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," FILTER_PROP
     "},\"required\":[\"table\",\"filter\"]}",
     true, false, tool_delete_records, true},
    {"wait_and_read",
     "Wait for any of several resources to change: returns at once those whose version differs "
     "from sinceVersion (all of them when none is given), else waits up to timeoutMs for one to "
     "change. For clients that cannot keep an SSE stream open.",
     wait_input_schema, false, false, tool_wait_and_read},
};

cJSON *tools_list(mcp_call *call) {
  cJSON *result = cJSON_CreateObject();
  cJSON *list = cJSON_AddArrayToObject(result, "tools");
  for (size_t i = 0; i < ARRAY_LEN(tools); i++) {
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "name", tools[i].name);
    cJSON_AddStringToObject(item, "description", tools[i].description);
    cJSON_AddItemToObject(item, "inputSchema", cJSON_Parse(tools[i].input_schema));
    cJSON_AddItemToArray(list, item);
  }
  return result;
}

cJSON *tools_call(mcp_call *call) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(call->params, "name");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(call->params, "arguments");
  if (!cJSON_IsString(name))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "tools/call requires params.name");
  if (args != NULL && !cJSON_IsObject(args))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "tools/call: arguments must be an object");
  const struct tool *tool = NULL;
  for (size_t i = 0; i < ARRAY_LEN(tools); i++) {
    if (strcmp(tools[i].name, name->valuestring) == 0) tool = &tools[i];
  }
  if (tool == NULL)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "Unknown tool: %s", name->valuestring);

  tool_args a = {.args = args};
  if (tool->needs_table) {
    const cJSON *table = cJSON_GetObjectItemCaseSensitive(args, "table");
    if (!cJSON_IsString(table))
      return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "%s requires arguments.table (a string)",
                           tool->name);
    a.table = subs_find_table(call->w, table->valuestring);
    /* A table the caller may not read is unknown to it. */
    if (a.table == NULL ||
        auth_table_access(call->principal, a.table->name, AUTH_READ, &a.scope) != 0)
      return tool_error("unknown table: %s", table->valuestring);
    /* A write's row scope is checked in the write's own transaction. */
    if (tool->writes &&
        auth_table_access(call->principal, a.table->name, AUTH_WRITE, &a.write_scope) != 0)
      return tool_error("forbidden: no write access to table %s", a.table->name);
  }
  if (tool->needs_key) {
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(args, "key");
    bool in_range = false;
    if ((cJSON_IsString(key) || (jsonrpc_raw_integer(key, NULL, &in_range) && in_range)) &&
        strlen(key->valuestring) < sizeof(a.key)) {
      snprintf(a.key, sizeof(a.key), "%s", key->valuestring); /* text, or an integer's digits */
    } else if (cJSON_IsNumber(key) && key->valuedouble == floor(key->valuedouble) &&
               fabs(key->valuedouble) < 9007199254740992.0) {
      snprintf(a.key, sizeof(a.key), "%.0f", key->valuedouble);
    } else {
      return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                           "%s requires arguments.key (a string or an integer, under 512 bytes)",
                           tool->name);
    }
  }
  return tool->handler(call, &a);
}
